"""The node facts that rule templates and nodeSelectors see.

Templates are rendered once per policy generation, so they only get slow-moving facts: name, labels,
capacity and topology sizes. Per-tick metrics belong to conditions, not templates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.model.units import parse_quantity


@dataclass(frozen=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    capacity: Mapping[str, float] = field(default_factory=dict)
    cpus: int = 1
    numa_count: int = 1
    sockets: int = 1
    memory: int = 0
    cpu_ids: frozenset[int] = frozenset()

    def template_context(self) -> dict[str, Any]:
        """The ``node`` variable of rule templates (documented in docs/rules.md)."""
        return {
            "node": {
                "name": self.name,
                "labels": dict(self.labels),
                "capacity": dict(self.capacity),
                "cpus": self.cpus,
                "numa_count": self.numa_count,
                "sockets": self.sockets,
                "memory": self.memory,
            }
        }

    def with_labels(self, extra: Mapping[str, str]) -> NodeInfo:
        return NodeInfo(
            self.name,
            {**self.labels, **extra},
            self.capacity,
            self.cpus,
            self.numa_count,
            self.sockets,
            self.memory,
            self.cpu_ids,
        )


def node_from_snapshot(node: Mapping[str, Any]) -> NodeInfo:
    """From the ``node`` section of a facts snapshot (already schema-valid)."""
    topo = node.get("topology") or {}
    cpus = topo.get("cpus") or []
    capacity = {k: float(v) for k, v in (node.get("capacity") or {}).items()}
    cpu_ids = frozenset(int(c["id"]) for c in cpus)
    numa_ids = {c["numa"] for c in cpus} | {n["id"] for n in topo.get("numa") or []}
    sockets = {c["socket"] for c in cpus}
    memory = capacity.get("memory") or sum(float(n.get("memoryBytes", 0)) for n in topo.get("numa") or [])
    ncpu = len(cpu_ids) or int(capacity.get("cpu", 1))
    return NodeInfo(
        name=str(node.get("name", "node")),
        labels=dict(node.get("labels") or {}),
        capacity=capacity,
        cpus=ncpu,
        numa_count=max(len(numa_ids), 1),
        sockets=max(len(sockets), 1),
        memory=int(memory),
        cpu_ids=cpu_ids or frozenset(range(ncpu)),
    )


def node_from_kube(obj: Mapping[str, Any]) -> NodeInfo:
    """From a Kubernetes Node object (``kubectl get node X -o yaml``); topology beyond counts is unknown."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    capacity = {k: parse_quantity(v) for k, v in (status.get("capacity") or {}).items()}
    ncpu = int(capacity.get("cpu", 1))
    return NodeInfo(
        name=str(meta.get("name", "node")),
        labels=dict(meta.get("labels") or {}),
        capacity=capacity,
        cpus=ncpu,
        numa_count=1,
        sockets=1,
        memory=int(capacity.get("memory", 0)),
        cpu_ids=frozenset(range(ncpu)),
    )
