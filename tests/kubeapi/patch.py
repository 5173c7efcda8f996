"""The three patch formats the API server accepts on JSON bodies.

* ``application/merge-patch+json``: RFC 7386 (objects merge recursively, ``null`` deletes, anything else,
  lists included, replaces).
* ``application/json-patch+json``: RFC 6902 (add, remove, replace, move, copy, test) over RFC 6901 pointers.
* ``application/strategic-merge-patch+json``: Kubernetes' strategic merge patch
  (k8s.io/apimachinery/pkg/util/strategicpatch): like a merge patch, except that lists whose Go field
  carries ``patchStrategy:"merge"`` merge, by ``patchMergeKey`` for lists of objects (conditions by
  type, containers by name, ...) or as a set for lists of scalars (finalizers), and the ``$patch``,
  ``$retainKeys``, ``$setElementOrder/<list>`` and ``$deleteFromPrimitiveList/<list>`` directives apply.
  Custom resources have no Go struct tags, so the server refuses this format for them (415).

Why all three: the official client picks the format from the call (``patch_node_status(dict)`` sends a
strategic merge patch, a list body a JSON patch, ``CustomObjectsApi`` a merge patch) and each behaves
differently on lists, which is exactly where a node-status writer goes wrong.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tests.kubeapi.errors import ApiError, bad_request
from tests.kubeapi.store import copy_json

Json = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

# --------------------------------------------------------------------------------------------------
# RFC 7386
# --------------------------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 MergePatch: returns a new document, never mutates ``target``."""
    if not isinstance(patch, dict):
        return copy_json(patch)
    result = copy_json(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --------------------------------------------------------------------------------------------------
# RFC 6902
# --------------------------------------------------------------------------------------------------

# What NewGenericServerResponse(422, ...) says when a JSON patch does not apply: the server drops the
# underlying error text (k8s.io/apiserver/pkg/endpoints/handlers/patch.go applyJSPatch).
JSON_PATCH_REJECTED = "the server rejected our request due to an error in our request"


class _PatchFailed(Exception):
    """An operation of a JSON patch did not apply (missing path, failed test, bad index)."""


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise _PatchFailed(f"invalid JSON pointer {path!r}")
    if path == "":
        return []
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, tokens: list[str]) -> Any:
    for token in tokens:
        if isinstance(doc, dict):
            if token not in doc:
                raise _PatchFailed(f"path element {token!r} not found")
            doc = doc[token]
        elif isinstance(doc, list):
            doc = doc[_index(doc, token, allow_end=False)]
        else:
            raise _PatchFailed(f"cannot descend into a scalar at {token!r}")
    return doc


def _index(items: list[Any], token: str, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(items)
    if not token.isdigit() or (token != "0" and token.startswith("0")):
        raise _PatchFailed(f"invalid array index {token!r}")
    idx = int(token)
    if idx > len(items) or (idx == len(items) and not allow_end):
        raise _PatchFailed(f"array index {idx} out of bounds")
    return idx


def _add(doc: Any, tokens: list[str], value: Any) -> Any:
    if not tokens:
        return value
    parent = _walk(doc, tokens[:-1])
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, allow_end=True), value)
    else:
        raise _PatchFailed("cannot add to a scalar")
    return doc


def _remove(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        raise _PatchFailed("cannot remove the whole document")
    parent = _walk(doc, tokens[:-1])
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _PatchFailed(f"cannot remove missing key {last!r}")
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, allow_end=False))
    raise _PatchFailed("cannot remove from a scalar")


def json_patch(target: Json, operations: Any) -> Any:
    """RFC 6902 over a copy of ``target``. A malformed patch is a 400, one that does not apply a 422."""
    if not isinstance(operations, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc: Any = copy_json(target)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op:
            raise bad_request(f"invalid JSON patch operation: {json.dumps(op)}")
        kind = op["op"]
        try:
            tokens = _pointer(op.get("path"))
            if kind == "add":
                doc = _add(doc, tokens, copy_json(op["value"]))
            elif kind == "remove":
                _remove(doc, tokens)
            elif kind == "replace":
                _walk(doc, tokens)  # must exist
                if tokens:
                    _remove(doc, tokens)
                doc = _add(doc, tokens, copy_json(op["value"]))
            elif kind == "move":
                source = _pointer(op.get("from"))
                value = _walk(doc, source)
                if source:
                    _remove(doc, source)
                doc = _add(doc, tokens, value)
            elif kind == "copy":
                doc = _add(doc, tokens, copy_json(_walk(doc, _pointer(op.get("from")))))
            elif kind == "test":
                if _walk(doc, tokens) != op.get("value"):
                    raise _PatchFailed(f"testing value {op.get('path')} failed")
            else:
                raise bad_request(f"Unexpected kind: {kind}")
        except KeyError as err:
            raise bad_request(f"invalid JSON patch operation {json.dumps(op)}: missing {err}") from None
        except _PatchFailed:
            raise ApiError(422, "Invalid", JSON_PATCH_REJECTED, {}) from None
    return doc


# --------------------------------------------------------------------------------------------------
# Strategic merge patch
# --------------------------------------------------------------------------------------------------

# List strategy by field path (list items are transparent: containers.env is ("spec", "containers",
# "env")). A string is the patchMergeKey; SET is patchStrategy "merge" on a list of scalars. Lists not
# listed here are replaced. Read from the struct tags in k8s.io/api (core/v1, policy/v1, meta/v1).
SET = ""
_METADATA: dict[tuple[str, ...], str] = {
    ("metadata", "finalizers"): SET,
    ("metadata", "ownerReferences"): "uid",
}
_CONTAINER = {
    "ports": "containerPort",
    "env": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
}
_POD: dict[tuple[str, ...], str] = {
    ("spec", "volumes"): "name",
    ("spec", "imagePullSecrets"): "name",
    ("spec", "hostAliases"): "ip",
    ("spec", "topologySpreadConstraints"): "topologyKey",
    ("spec", "schedulingGates"): "name",
    ("spec", "resourceClaims"): "name",
    ("status", "conditions"): "type",
    ("status", "podIPs"): "ip",
    ("status", "hostIPs"): "ip",
    ("status", "resourceClaimStatuses"): "name",
}
for _list in ("containers", "initContainers", "ephemeralContainers"):
    _POD[("spec", _list)] = "name"
    for _field, _key in _CONTAINER.items():
        _POD[("spec", _list, _field)] = _key

PATCH_STRATEGIES: dict[str, dict[tuple[str, ...], str]] = {
    "Pod": {**_METADATA, **_POD},
    # NodeSpec.Taints has no patchStrategy tag: a taint list in a strategic patch replaces the list.
    "Node": {
        **_METADATA,
        ("spec", "podCIDRs"): SET,
        ("status", "conditions"): "type",
        ("status", "addresses"): "type",
    },
    "Namespace": {**_METADATA, ("status", "conditions"): "type"},
    "PodDisruptionBudget": {**_METADATA, ("status", "conditions"): "type"},
    "Event": dict(_METADATA),
    "Lease": dict(_METADATA),
}

_DIRECTIVE = "$patch"
_RETAIN_KEYS = "$retainKeys"
_ORDER_PREFIX = "$setElementOrder/"
_DELETE_PRIMITIVE_PREFIX = "$deleteFromPrimitiveList/"


def strategic_merge_patch(target: Json, patch: Any, strategies: Mapping[tuple[str, ...], str]) -> Json:
    """Apply a strategic merge patch to a copy of ``target``; ``strategies`` comes from PATCH_STRATEGIES."""
    if not isinstance(patch, dict):
        raise bad_request("json: cannot unmarshal array into Go value of type map[string]interface {}")
    result = _merge_map(copy_json(target), patch, (), strategies)
    if result is None:
        raise bad_request("a strategic merge patch may not delete the whole object")
    return result


def _merge_map(
    original: Json, patch: Json, path: tuple[str, ...], strategies: Mapping[tuple[str, ...], str]
) -> Json | None:
    directive = patch.get(_DIRECTIVE)
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: copy_json(v) for k, v in patch.items() if k != _DIRECTIVE}
    if directive not in (None, "merge"):
        raise bad_request(f"Unknown patch type: {directive}")
    if _RETAIN_KEYS in patch:
        keep = patch[_RETAIN_KEYS]
        if not isinstance(keep, list):
            raise bad_request("invalid patch: $retainKeys must be a list of strings")
        original = {k: v for k, v in original.items() if k in keep}
    orders: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key in (_DIRECTIVE, _RETAIN_KEYS):
            continue
        if key.startswith(_ORDER_PREFIX):
            orders[key[len(_ORDER_PREFIX) :]] = value if isinstance(value, list) else []
            continue
        if key.startswith(_DELETE_PRIMITIVE_PREFIX):
            name = key[len(_DELETE_PRIMITIVE_PREFIX) :]
            if not isinstance(value, list):
                raise bad_request("Unable to find $deleteFromPrimitiveList list")
            if isinstance(original.get(name), list):
                original[name] = [v for v in original[name] if v not in value]
            continue
        child = (*path, key)
        if value is None:
            original.pop(key, None)
        elif isinstance(value, dict) and isinstance(original.get(key), dict):
            merged = _merge_map(original[key], value, child, strategies)
            if merged is None:
                original.pop(key, None)
            else:
                original[key] = merged
        elif isinstance(value, dict):
            merged = _merge_map({}, value, child, strategies)
            if merged is None:
                original.pop(key, None)
            else:
                original[key] = merged
        elif isinstance(value, list) and child in strategies:
            original[key] = _merge_list(original.get(key), value, child, strategies)
        else:
            original[key] = _strip_directives(copy_json(value))
    for name, order in orders.items():
        if isinstance(original.get(name), list):
            original[name] = _apply_order(original[name], order, strategies.get((*path, name)))
    return original


def _merge_list(
    original: Any, patch: list[Any], path: tuple[str, ...], strategies: Mapping[tuple[str, ...], str]
) -> list[Any]:
    key = strategies[path]
    base: list[Any] = list(original) if isinstance(original, list) else []
    if any(isinstance(item, dict) and item.get(_DIRECTIVE) == "replace" for item in patch):
        return [
            _strip_directives(copy_json(i)) for i in patch if not (isinstance(i, dict) and _DIRECTIVE in i)
        ]
    if key == SET:
        for item in patch:
            if isinstance(item, dict | list):
                raise bad_request("Unable to merge a list of scalars with a non-scalar item")
            if item not in base:
                base.append(item)
        return base
    for item in patch:
        if not isinstance(item, dict):
            raise bad_request(f"Unable to merge scalar {item!r} into a list of objects merged by {key}")
        if key not in item:
            raise ApiError(500, "InternalError", f"map: {item} does not contain declared merge key: {key}")
        found = next((i for i, o in enumerate(base) if isinstance(o, dict) and o.get(key) == item[key]), None)
        if item.get(_DIRECTIVE) == "delete":
            if found is not None:
                base.pop(found)
            continue
        if found is None:
            merged = _merge_map({}, item, path, strategies)
            if merged is not None:
                base.append(merged)
        else:
            merged = _merge_map(base[found], item, path, strategies)
            if merged is None:
                base.pop(found)
            else:
                base[found] = merged
    return base


def _apply_order(items: list[Any], order: list[Any], key: str | None) -> list[Any]:
    """$setElementOrder: listed elements first, in that order; the rest keep their relative order."""

    def ident(item: Any) -> Any:
        return item.get(key) if key and isinstance(item, dict) else item

    def marker(entry: Any) -> Any:
        return entry.get(key) if key and isinstance(entry, dict) else entry

    wanted = [marker(e) for e in order]
    ranked = [i for w in wanted for i in items if ident(i) == w]
    rest = [i for i in items if ident(i) not in wanted]
    return ranked + rest


def _strip_directives(value: Any) -> Any:
    """A replaced value keeps no ``$`` directive keys (they are instructions, not data)."""
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value
