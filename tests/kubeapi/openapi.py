"""OpenAPI v3 as the API server publishes it: ``/openapi/v3`` (the index) and one document per
group/version at ``/openapi/v3/api/v1`` and ``/openapi/v3/apis/<group>/<version>``.

Reference: https://kubernetes.io/docs/concepts/overview/kubernetes-api/#openapi-v3 and KEP-2896. The
index maps ``api/v1``/``apis/<group>/<version>`` to ``{"serverRelativeURL": ".../<gv>?hash=<H>"}``;
each document holds ``paths`` (one per resource collection and item, each operation tagged with
``x-kubernetes-group-version-kind`` and ``x-kubernetes-action``) and ``components.schemas`` (each kind's
schema tagged with ``x-kubernetes-group-version-kind``).

What kubectl uses it for, and so what this must get right:

* ``kubectl explain`` finds the kind from the GVR's path operations, then the schema whose
  x-kubernetes-group-version-kind matches, and walks ``properties`` / ``items`` / ``allOf`` $refs.
* Field validation: kubectl sends ``fieldValidation=Strict`` (server-side validation) only when the
  PATCH operation of that GVK lists a ``fieldValidation`` query parameter (cli-runtime's
  queryParamVerifierV3); otherwise it falls back to client-side validation against OpenAPI v2, which
  this emulator does not serve (v2 is protobuf-only for client-go).
* Client-side apply of built-in kinds computes a strategic merge patch from the schema's
  ``x-kubernetes-patch-strategy`` / ``x-kubernetes-patch-merge-key``: they come from the same table
  the server's strategic merge patch uses (tests/kubeapi/patch.py), so client and server agree.

Schemas: a custom resource's is its CRD's ``openAPIV3Schema`` (metadata as ObjectMeta, as the
apiextensions-apiserver publishes it); a built-in kind's is built from the official Python client's
generated models (field names, types, required fields and descriptions, which are generated from the
API server's own OpenAPI document). Component names are ``io.k8s.api.<version>.<Type>`` after the
client's model names rather than the Go package paths: tools look schemas up by reference and GVK,
never by name.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from functools import cache
from typing import Any

from kubernetes.client import models

from tests.kubeapi.patch import SET
from tests.kubeapi.registry import ResourceType

Json = dict[str, Any]

_PRIMITIVES: dict[str, Json] = {
    "str": {"type": "string"},
    "int": {"type": "integer", "format": "int32"},
    "float": {"type": "number", "format": "double"},
    "bool": {"type": "boolean"},
    "datetime": {"type": "string", "format": "date-time"},
    "date": {"type": "string", "format": "date"},
    "bytearray": {"type": "string", "format": "byte"},
    "object": {},  # IntOrString, Quantity, RawExtension: any JSON value
}
_MODEL_NAME = re.compile(r"^([A-Z][a-z]+)?(V\d+(?:alpha\d+|beta\d+)?)(\w+)$")
OBJECT_META = "V1ObjectMeta"
_PARAMS = {
    "dryRun": "When present, indicates that modifications should not be persisted.",
    "fieldManager": "A name associated with the actor or entity that is making these changes.",
    "fieldValidation": "How the server treats unknown and duplicate fields in the request body: "
    "Ignore, Warn (the default) or Strict.",
}


def schema_name(model: str) -> str:
    """The component name of a client model (``V1DaemonSetSpec`` -> ``io.k8s.api.v1.DaemonSetSpec``)."""
    found = _MODEL_NAME.match(model)
    if not found:
        return f"io.k8s.api.{model}"
    return f"io.k8s.api.{found.group(2).lower()}.{found.group(3)}"


def _ref(name: str, description: str | None = None) -> Json:
    out: Json = {"allOf": [{"$ref": f"#/components/schemas/{name}"}]}
    if description:
        out["description"] = description
    return out


@cache
def _model(name: str) -> Any:
    return getattr(models, name, None)


def _type_schema(type_name: str, description: str | None, out: dict[str, Json]) -> Json:
    if type_name.startswith("List[") and type_name.endswith("]"):
        schema: Json = {"type": "array", "items": _type_schema(type_name[5:-1], None, out)}
    elif type_name.startswith("Dict[") and type_name.endswith("]"):
        inner = type_name[type_name.index(",") + 1 : -1].strip()
        schema = {"type": "object", "additionalProperties": _type_schema(inner, None, out)}
    elif type_name in _PRIMITIVES:
        schema = dict(_PRIMITIVES[type_name])
    elif _model(type_name) is not None:
        _model_schemas(type_name, out)
        return _ref(schema_name(type_name), description)
    else:
        schema = {}
    if description:
        schema["description"] = description
    return schema


def _model_schemas(model_name: str, out: dict[str, Json]) -> None:
    """Add the schema of a generated client model and of every model it refers to to ``out``."""
    name = schema_name(model_name)
    if name in out:
        return
    model = _model(model_name)
    out[name] = {}  # placeholder: recursive types (JSONSchemaProps) stop here
    doc = (model.__doc__ or "").strip().split("\n\n")[0].strip()
    fields = getattr(model, "model_fields", {})
    properties: Json = {}
    required: list[str] = []
    for attr, json_name in model.attribute_map.items():
        info = fields.get(attr)
        description = getattr(info, "description", None)
        properties[json_name] = _type_schema(model.openapi_types[attr], description, out)
        if info is not None and info.is_required():
            required.append(json_name)
    schema: Json = {"type": "object", "properties": properties}
    if doc and not doc.startswith("NOTE:"):
        schema["description"] = doc
    if required:
        schema["required"] = sorted(required)
    out[name] = schema


def _gvk(rt: ResourceType, kind: str | None = None) -> Json:
    return {"group": rt.group, "version": rt.version, "kind": kind or rt.kind}


def _crd_schema(rt: ResourceType, out: dict[str, Json]) -> str:
    """The custom resource's schema from its CRD (``metadata`` becomes ObjectMeta)."""
    structural = getattr(rt.strategy, "schema", None)
    raw: Json = json.loads(json.dumps(getattr(structural, "schema", None) or {"type": "object"}))
    raw.setdefault("type", "object")
    props = raw.setdefault("properties", {})
    _model_schemas(OBJECT_META, out)
    props["metadata"] = _ref(schema_name(OBJECT_META), "Standard object's metadata.")
    props.setdefault("apiVersion", {"type": "string"})
    props.setdefault("kind", {"type": "string"})
    raw["x-kubernetes-group-version-kind"] = [_gvk(rt)]
    name = f"{'.'.join(reversed(rt.group.split('.')))}.{rt.version}.{rt.kind}"
    out[name] = raw
    return name


def _annotate_patch_strategies(rt: ResourceType, model_name: str, out: dict[str, Json]) -> None:
    """Mark each list the server merges in a strategic merge patch (by key, or as a set) in the
    schema that holds it, following the kind's field path through the models."""
    for path, key in (rt.patch_strategies or {}).items():
        current = model_name
        for i, field in enumerate(path):
            model = _model(current)
            if model is None:
                break
            by_json = {j: a for a, j in model.attribute_map.items()}
            if field not in by_json:
                break
            type_name = model.openapi_types[by_json[field]]
            if i == len(path) - 1:
                prop = out[schema_name(current)]["properties"][field]
                prop["x-kubernetes-patch-strategy"] = "merge"
                if key != SET:
                    prop["x-kubernetes-patch-merge-key"] = key
                break
            current = type_name[5:-1] if type_name.startswith("List[") else type_name


def _builtin_schema(rt: ResourceType, out: dict[str, Json]) -> str | None:
    model_name = rt.strategy.model
    if not model_name or _model(model_name) is None:
        return None
    _model_schemas(model_name, out)
    name = schema_name(model_name)
    out[name]["x-kubernetes-group-version-kind"] = [_gvk(rt)]
    _annotate_patch_strategies(rt, model_name, out)
    return name


def _parameters(*names: str) -> list[Json]:
    return [
        {
            "name": n,
            "in": "query",
            "description": _PARAMS[n],
            "schema": {"type": "string"},
            "uniqueItems": True,
        }
        for n in names
    ]


def _operation(rt: ResourceType, action: str, ref: Json, params: list[Json], body: list[str] | None) -> Json:
    op: Json = {
        "operationId": f"{action}{rt.kind}",
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(rt),
        "parameters": params,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}}},
    }
    if body:
        op["requestBody"] = {"content": {t: {"schema": ref} for t in body}, "required": True}
    return op


def _paths(rt: ResourceType, schema: str, list_schema: str) -> Json:
    prefix = f"/apis/{rt.group}/{rt.version}" if rt.group else f"/api/{rt.version}"
    collection = (
        f"{prefix}/namespaces/{{namespace}}/{rt.plural}" if rt.namespaced else f"{prefix}/{rt.plural}"
    )
    ref = {"$ref": f"#/components/schemas/{schema}"}
    list_ref = {"$ref": f"#/components/schemas/{list_schema}"}
    write = _parameters("dryRun", "fieldManager", "fieldValidation")
    patch_types = list(rt.patch_types())
    item = {
        "get": _operation(rt, "get", ref, [], None),
        "put": _operation(rt, "put", ref, write, ["application/json"]),
        "patch": _operation(rt, "patch", ref, write, patch_types),
        "delete": _operation(rt, "delete", ref, _parameters("dryRun"), None),
    }
    paths = {
        collection: {
            "get": _operation(rt, "list", list_ref, [], None),
            "post": _operation(rt, "post", ref, write, ["application/json"]),
        },
        f"{collection}/{{name}}": item,
    }
    for sub in sorted(rt.subresources - {"eviction"}):
        paths[f"{collection}/{{name}}/{sub}"] = {
            "get": _operation(rt, "get", ref, [], None),
            "patch": _operation(rt, "patch", ref, write, patch_types),
        }
    return paths


def document(types: Iterable[ResourceType], group: str, version: str) -> Json | None:
    """The OpenAPI v3 document of one group/version, None when it is not served."""
    served = sorted(
        (rt for rt in types if rt.group == group and rt.version == version), key=lambda r: r.plural
    )
    if not served:
        return None
    schemas: dict[str, Json] = {}
    paths: Json = {}
    for rt in served:
        name = _crd_schema(rt, schemas) if not rt.builtin else _builtin_schema(rt, schemas)
        if name is None:
            continue
        list_name = f"{name}List"
        schemas[list_name] = {
            "type": "object",
            "required": ["items"],
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "items": {"type": "array", "items": {"$ref": f"#/components/schemas/{name}"}},
                "metadata": {"type": "object"},
            },
            "x-kubernetes-group-version-kind": [_gvk(rt, f"{rt.kind}List")],
        }
        paths.update(_paths(rt, name, list_name))
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "unversioned"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def serve(path: str, types: list[ResourceType]) -> tuple[Json, str] | None:
    """The OpenAPI v3 index or one group/version's document at ``path``, or None."""
    if not path.startswith("/openapi/v3"):
        return None
    gvs = sorted({(rt.group, rt.version) for rt in types})
    if path == "/openapi/v3":
        index = {}
        for group, version in gvs:
            doc = document(types, group, version)
            digest = hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest().upper()
            index[_gv_path(group, version)] = {
                "serverRelativeURL": f"/openapi/v3/{_gv_path(group, version)}?hash={digest}"
            }
        return {"paths": index}, "application/json"
    parts = path.removeprefix("/openapi/v3/").split("/")
    if parts[0] == "api" and len(parts) == 2:
        doc = document(types, "", parts[1])
    elif parts[0] == "apis" and len(parts) == 3:
        doc = document(types, parts[1], parts[2])
    else:
        return None
    return (doc, "application/json") if doc is not None else None
