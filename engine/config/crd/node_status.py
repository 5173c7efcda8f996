"""The QoSNodeStatus CustomResourceDefinition: what one node runs, written only by that node's daemon."""

from __future__ import annotations

import copy
from typing import Any

from engine.config.crd.policy import GROUP, VERSION, Schema

NODE_STATUS_KIND = "QoSNodeStatus"
NODE_STATUS_PLURAL = "qosnodestatuses"
NODE_STATUS_CRD_NAME = f"{NODE_STATUS_PLURAL}.{GROUP}"

_STR: Schema = {"type": "string"}
_INT: Schema = {"type": "integer"}
_TIME: Schema = {"type": "string", "format": "date-time"}
_POLICY_REF: Schema = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {**_STR, "description": "QoSPolicy name."},
        "generation": {**_INT, "description": "metadata.generation of the QoSPolicy that was used."},
    },
}
_PROBLEM: Schema = {
    "type": "object",
    "required": ["message"],
    "properties": {
        "source": {**_STR, "description": "File path or QoSPolicy/<name> the problem is in."},
        "path": {**_STR, "description": "JSON path inside that document."},
        "line": _INT,
        "column": _INT,
        "message": {**_STR, "maxLength": 4096},
    },
}
_GENERATION: Schema = {
    "type": "object",
    "properties": {
        "generation": {**_INT, "description": "qosd's local generation counter on this node."},
        "hash": {**_STR, "description": "Hash of the compiled policy."},
        "time": {**_TIME, "description": "When it was loaded (applied) or rejected (lastAttempt)."},
        "policies": {
            "type": "array",
            "maxItems": 256,
            "description": "The QoSPolicy resources it was built from (those selecting this node).",
            "items": _POLICY_REF,
        },
        "files": {"type": "array", "maxItems": 256, "items": _STR, "description": "Rule files read."},
    },
}

NODE_STATUS_COLUMNS: list[Schema] = [
    {"name": "Generation", "type": "integer", "jsonPath": ".status.applied.generation"},
    {"name": "Hash", "type": "string", "jsonPath": ".status.applied.hash"},
    {"name": "Result", "type": "string", "jsonPath": ".status.lastAttempt.result"},
    {"name": "Applied", "type": "date", "jsonPath": ".status.applied.time"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def build_node_status_crd() -> dict[str, Any]:
    """The CRD of QoSNodeStatus: one cluster-scoped object per node, named after it.

    Why a separate object per node, and not a list in each QoSPolicy's status: every daemon writes
    only the object of its own node, so no two nodes ever write the same object (no 409 storms, no
    lost updates, nothing to merge), no daemon has to watch its peers' writes, and the size of each
    object does not grow with the cluster (etcd's ~1.5 MiB object limit). The owner reference to the
    Node lets the garbage collector remove it with the node. The per-policy summary in
    QoSPolicy.status.nodes is aggregated from these objects by one elected daemon."""
    schema: Schema = {
        "type": "object",
        "description": (
            "QoSNodeStatus: the qosd policy generation in effect on one node and the outcome of its last "
            "reload. Written only by the qosd daemon of the node it is named after."
        ),
        "properties": {
            "apiVersion": _STR,
            "kind": _STR,
            "metadata": {"type": "object"},
            "status": {
                "type": "object",
                "properties": {
                    "nodeName": _STR,
                    "applied": {**_GENERATION, "description": "The generation in effect."},
                    "lastAttempt": {
                        **_GENERATION,
                        "description": "The last reload attempt (the same as applied when it succeeded).",
                        "properties": {
                            **_GENERATION["properties"],
                            "result": {"type": "string", "enum": ["Applied", "Unchanged", "Rejected"]},
                            "source": {**_STR, "description": "What triggered it: file, crd, node."},
                            "problems": {"type": "array", "maxItems": 50, "items": _PROBLEM},
                        },
                    },
                },
            },
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": NODE_STATUS_CRD_NAME, "labels": {"app.kubernetes.io/part-of": "qosd"}},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": NODE_STATUS_KIND,
                "listKind": f"{NODE_STATUS_KIND}List",
                "plural": NODE_STATUS_PLURAL,
                "singular": NODE_STATUS_KIND.lower(),
                "shortNames": ["qosns"],
                "categories": ["qosd"],
            },
            "scope": "Cluster",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": copy.deepcopy(NODE_STATUS_COLUMNS),
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }
