"""Server-side apply: ``PATCH`` with ``Content-Type: application/apply-patch+yaml`` and field managers.

Reference: https://kubernetes.io/docs/reference/using-api/server-side-apply/ (sigs.k8s.io/
structured-merge-diff). An apply sends the fields its manager wants to own, with their values:

* the object is created when absent (201), otherwise the applied configuration is merged into it:
  maps merge, associative lists (``listType=map``) merge item by item on their keys, sets
  (``listType=set``) take the union, atomic lists and scalars are replaced;
* a field the same manager applied before and no longer sends is removed, unless another manager
  owns it too;
* a field another manager owns with a different value is a conflict: 409 with one
  ``FieldManagerConflict`` cause per field, unless ``force=true``, which takes the field over;
* ``metadata.managedFields`` records each manager's fields (``fieldsV1``) with the operation
  (Apply or Update), the apiVersion and the time its set last changed; an apply that changes nothing
  writes nothing.

List types of built-in kinds come from the strategic-merge table of their Go struct tags
(tests/kubeapi/patch.py: a patchMergeKey is ``listType=map`` on that key, a merge strategy on scalars
is a set, anything else atomic); a CRD's from its schema's ``x-kubernetes-list-type`` and
``x-kubernetes-list-map-keys`` (atomic by default). A non-apply write to an object that already has
managed fields records the fields it changed for its ``fieldManager`` (operation Update), so a later
apply conflicts with, say, ``kubectl label``. Differences: an object created or updated only by
non-apply writes carries no managedFields here (a real server records them for every write), and an
apply to a subresource is not supported (415).
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Iterable
from typing import Any

from tests.kubeapi import errors as E
from tests.kubeapi.errors import ApiError
from tests.kubeapi.patch import SET
from tests.kubeapi.registry import Registry, ResourceType, now, rfc3339
from tests.kubeapi.store import copy_json

Json = dict[str, Any]
# A path element: ("f", field name), ("k", JSON of an associative list item's keys), ("v", JSON of a
# set member), as in fieldsV1's "f:", "k:" and "v:" prefixes.
Element = tuple[str, str]
Path = tuple[Element, ...]

APPLY_PATCH = "application/apply-patch+yaml"
# The request's fieldManager (set by the server for each write).
FIELD_MANAGER: contextvars.ContextVar[str] = contextvars.ContextVar("kubeapi_field_manager", default="")
# Set while an apply commits: its managed fields are already computed, not an Update's to track.
_APPLYING: contextvars.ContextVar[bool] = contextvars.ContextVar("kubeapi_applying", default=False)
_TRACKED_META = ("labels", "annotations", "finalizers", "ownerReferences")


# ----------------------------------------------------------------------------------------- list types


def _crd_schema_at(rt: ResourceType, names: tuple[str, ...]) -> Json:
    schema: Any = getattr(getattr(rt.strategy, "schema", None), "schema", None) or {}
    for name in names:
        if not isinstance(schema, dict):
            return {}
        if schema.get("type") == "array":
            schema = schema.get("items") or {}
        props = schema.get("properties") or {}
        schema = props.get(name) if name in props else schema.get("additionalProperties")
    if isinstance(schema, dict) and schema.get("type") == "array":
        return schema
    return {}


def list_type(rt: ResourceType, names: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """("map", keys), ("set", ()) or ("atomic", ()) for the list at the field path ``names``."""
    if rt.builtin:
        key = (rt.patch_strategies or {}).get(names)
        if key is None:
            return "atomic", ()
        return ("set", ()) if key == SET else ("map", (key,))
    schema = _crd_schema_at(rt, names)
    kind = schema.get("x-kubernetes-list-type", "atomic")
    if kind == "map":
        return "map", tuple(schema.get("x-kubernetes-list-map-keys") or ())
    return ("set", ()) if kind == "set" else ("atomic", ())


def _item_key(item: Any, keys: tuple[str, ...]) -> str:
    values = {k: item.get(k) for k in keys} if isinstance(item, dict) else {}
    return json.dumps(values, sort_keys=True, separators=(",", ":"))


def _names(path: Path) -> tuple[str, ...]:
    return tuple(v for k, v in path if k == "f")


# ----------------------------------------------------------------------------------------- field sets


def _walk(rt: ResourceType, value: Any, path: Path, out: set[Path]) -> None:
    if isinstance(value, dict) and value:
        for key, child in value.items():
            _walk(rt, child, (*path, ("f", key)), out)
        return
    if isinstance(value, list) and value:
        kind, keys = list_type(rt, _names(path))
        if kind == "map":
            for item in value:
                item_path = (*path, ("k", _item_key(item, keys)))
                out.add(item_path)
                if isinstance(item, dict):
                    for key, child in item.items():
                        _walk(rt, child, (*item_path, ("f", key)), out)
            return
        if kind == "set":
            out.update((*path, ("v", json.dumps(v, sort_keys=True))) for v in value)
            return
    out.add(path)


def field_set(rt: ResourceType, obj: Json) -> set[Path]:
    """The fields of ``obj`` a manager owns by setting them (no apiVersion/kind, no server metadata,
    no status where it is a subresource)."""
    out: set[Path] = set()
    for key, value in obj.items():
        if key in ("apiVersion", "kind") or (key == "status" and rt.status_subresource):
            continue
        if key == "metadata":
            for meta_key in _TRACKED_META:
                if meta_key in (value or {}):
                    _walk(rt, value[meta_key], (("f", "metadata"), ("f", meta_key)), out)
            continue
        _walk(rt, value, (("f", key),), out)
    return out


def _project(rt: ResourceType, value: Any, path: Path, prefixes: set[Path]) -> Any:
    """``value`` keeping only what lies on a path in ``prefixes`` (every prefix of a field set),
    mirroring _walk: the applied configuration without the fields defaulting added."""
    if isinstance(value, dict) and value:
        return {
            k: _project(rt, child, (*path, ("f", k)), prefixes)
            for k, child in value.items()
            if (*path, ("f", k)) in prefixes
        }
    if isinstance(value, list) and value:
        kind, keys = list_type(rt, _names(path))
        if kind == "map":
            return [
                _project(rt, item, (*path, ("k", _item_key(item, keys))), prefixes)
                for item in value
                if (*path, ("k", _item_key(item, keys))) in prefixes
            ]
        if kind == "set":
            return [v for v in value if (*path, ("v", json.dumps(v, sort_keys=True))) in prefixes]
    return copy_json(value)


def encode_fields(fields: Iterable[Path]) -> Json:
    """A field set as fieldsV1 (nested "f:"/"k:"/"v:" keys; "." marks a list item itself)."""
    root: Json = {}
    for path in sorted(fields):
        node = root
        for kind, value in path:
            node = node.setdefault(f"{kind}:{value}", {})
        if path and path[-1][0] == "k":
            node.setdefault(".", {})
    return root


def decode_fields(encoded: Any, prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    if not isinstance(encoded, dict):
        return out
    for key, child in encoded.items():
        if key == ".":
            out.add(prefix)
            continue
        kind, _, value = key.partition(":")
        path = (*prefix, (kind, value))
        if child:
            out |= decode_fields(child, path)
        else:
            out.add(path)
    return out


def describe_path(path: Path) -> str:
    """``.spec.template.spec.containers[name="qosd"].image``, as conflicts name fields."""
    text = ""
    for kind, value in path:
        if kind == "f":
            text += f".{value}"
        elif kind == "k":
            text += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in json.loads(value).items()) + "]"
        else:
            text += f"[={value}]"
    return text


# ----------------------------------------------------------------------------------------- values


def _locate(obj: Any, path: Path) -> tuple[bool, Any]:
    node = obj
    for kind, value in path:
        if kind == "f":
            if not isinstance(node, dict) or value not in node:
                return False, None
            node = node[value]
        elif kind == "k":
            keys = tuple(json.loads(value))
            found = [i for i in node or [] if _item_key(i, keys) == value] if isinstance(node, list) else []
            if not found:
                return False, None
            node = found[0]
        else:
            member = json.loads(value)
            if not isinstance(node, list) or member not in node:
                return False, None
            node = member
    return True, node


def _remove(obj: Json, path: Path) -> None:
    parents: list[Any] = [obj]
    for element in path[:-1]:
        found, node = _locate(parents[-1], (element,))
        if not found:
            return
        parents.append(node)
    parent, (kind, value) = parents[-1], path[-1]
    if kind == "f" and isinstance(parent, dict):
        parent.pop(value, None)
    elif kind == "k" and isinstance(parent, list):
        keys = tuple(json.loads(value))
        parent[:] = [i for i in parent if _item_key(i, keys) != value]
    elif kind == "v" and isinstance(parent, list):
        member = json.loads(value)
        parent[:] = [i for i in parent if i != member]
    # a map emptied by the removal goes with it (structured-merge-diff leaves no empty parents)
    for depth in range(len(parents) - 1, 0, -1):
        node, (pkind, pvalue) = parents[depth], path[depth - 1]
        if node not in ({}, []) or pkind != "f" or not isinstance(parents[depth - 1], dict):
            break
        parents[depth - 1].pop(pvalue, None)


def merge(rt: ResourceType, current: Any, applied: Any, names: tuple[str, ...] = ()) -> Any:
    """The applied configuration merged into the live object (see the module docstring)."""
    if isinstance(applied, dict) and isinstance(current, dict):
        out = copy_json(current)
        for key, value in applied.items():
            out[key] = merge(rt, current.get(key), value, (*names, key))
        return out
    if isinstance(applied, list) and isinstance(current, list):
        kind, keys = list_type(rt, names)
        if kind == "map":
            merged = copy_json(current)
            index = {_item_key(item, keys): i for i, item in enumerate(merged)}
            for item in applied:
                key = _item_key(item, keys)
                if key in index:
                    merged[index[key]] = merge(rt, merged[index[key]], item, names)
                else:
                    merged.append(copy_json(item))
            return merged
        if kind == "set":
            return copy_json(current) + [copy_json(v) for v in applied if v not in current]
    return copy_json(applied)


# ----------------------------------------------------------------------------------------- managers


def _entries(obj: Json) -> list[Json]:
    return [dict(e) for e in (obj.get("metadata") or {}).get("managedFields") or []]


def _set_entries(obj: Json, entries: list[Json]) -> None:
    kept = [e for e in entries if decode_fields(e.get("fieldsV1"))]
    if kept:
        obj["metadata"]["managedFields"] = kept
    else:
        obj["metadata"].pop("managedFields", None)


def _entry(manager: str, operation: str, api_version: str, fields: set[Path], subresource: str = "") -> Json:
    entry: Json = {
        "manager": manager,
        "operation": operation,
        "apiVersion": api_version,
        "time": rfc3339(now()),
        "fieldsType": "FieldsV1",
        "fieldsV1": encode_fields(fields),
    }
    if subresource:
        entry["subresource"] = subresource
    return entry


def _with_fields(entry: Json, fields: set[Path]) -> Json:
    """``entry`` owning ``fields``; its time moves only when its set changes."""
    if decode_fields(entry.get("fieldsV1")) == fields:
        return entry
    return {**entry, "time": rfc3339(now()), "fieldsV1": encode_fields(fields)}


def _conflict(rt: ResourceType, name: str, conflicts: list[tuple[Json, Path]]) -> ApiError:
    by_manager: dict[tuple[str, str], list[str]] = {}
    for entry, path in conflicts:
        by_manager.setdefault((entry["manager"], entry.get("apiVersion", "")), []).append(describe_path(path))
    parts = []
    for (manager, version), fields in by_manager.items():
        using = f" using {version}" if version else ""
        if len(fields) == 1:
            parts.append(f'conflict with "{manager}"{using}: {fields[0]}')
        else:
            parts.append(f'conflicts with "{manager}"{using}:\n' + "\n".join(f"- {f}" for f in fields))
    count = len(conflicts)
    message = f"Apply failed with {count} conflict{'s' if count != 1 else ''}: " + "\n".join(parts)
    causes = [
        {
            "reason": "FieldManagerConflict",
            "message": f'conflict with "{entry["manager"]}"',
            "field": describe_path(path),
        }
        for entry, path in conflicts
    ]
    details = {"name": name, "kind": rt.plural, "causes": causes}
    if rt.group:
        details["group"] = rt.group
    return ApiError(409, "Conflict", message, details)


def server_side_apply(
    registry: Registry,
    rt: ResourceType,
    namespace: str,
    name: str,
    body: Any,
    *,
    force: bool,
    subresource: str = "",
    dry_run: bool = False,
) -> tuple[Json, bool]:
    """Apply ``body`` for the request's FIELD_MANAGER. Returns (object, created)."""
    manager = FIELD_MANAGER.get()
    if subresource:
        raise ApiError(
            415, "UnsupportedMediaType", f"apply patch to the {subresource} subresource is not supported"
        )
    if not manager:
        raise E.invalid_object(
            rt.group, rt.kind, name, [E.required("fieldManager", "is required for apply patch")]
        )
    if not isinstance(body, dict):
        raise E.bad_request("the apply configuration must be a YAML or JSON object")
    if not body.get("apiVersion") or not body.get("kind"):
        raise E.bad_request("apiVersion and kind must be set in an apply configuration")
    meta = body.get("metadata") or {}
    if meta.get("name") not in (None, name):
        raise E.bad_request(
            f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
        )
    with registry.store.lock:
        applied = registry._decode(rt, body, namespace)
        applied["metadata"]["name"] = name
        fields = field_set(rt, applied) & field_set(rt, body)  # not the fields defaulting added
        current = registry.store.get(rt.bucket, namespace, name)
        if current is None:
            applied["metadata"].pop("managedFields", None)
            applied["metadata"]["managedFields"] = [_entry(manager, "Apply", rt.api_version, fields)]
            return registry.create(rt, namespace, applied, dry_run=dry_run), True
        old = rt.present(current)
        entries = _entries(old)
        mine = next((e for e in entries if e["manager"] == manager and e["operation"] == "Apply"), None)
        others = [e for e in entries if e is not mine]
        conflicts = []
        for entry in others:
            if entry["manager"] == manager:
                continue
            owned = decode_fields(entry.get("fieldsV1"))
            for path in sorted(fields & owned):
                if path[-1][0] == "k":
                    continue  # a list item's existence is shared, only its fields can conflict
                if _locate(old, path) != _locate(applied, path):
                    conflicts.append((entry, path))
        if conflicts and not force:
            raise _conflict(rt, name, conflicts)
        taken = {path for _, path in conflicts}
        others = [_with_fields(e, decode_fields(e.get("fieldsV1")) - taken) for e in others]
        prefixes = {path[:i] for path in fields for i in range(1, len(path) + 1)}
        config = {
            k: _project(rt, v, (("f", k),), prefixes) for k, v in applied.items() if (("f", k),) in prefixes
        }
        meta_config = config.pop("metadata", {})
        merged = merge(rt, old, config)
        merged_meta = merged["metadata"]
        for key, value in meta_config.items():
            merged_meta[key] = merge(rt, merged_meta.get(key), value, ("metadata", key))
        previous = decode_fields(mine.get("fieldsV1")) if mine else set()
        kept = set().union(*(decode_fields(e.get("fieldsV1")) for e in others)) if others else set()
        removed: list[Path] = []
        for path in sorted(previous - fields, key=len):
            if any(path[: len(r)] == r for r in removed):
                continue
            if any(k[: len(path)] == path for k in kept):
                continue
            _remove(merged, path)
            removed.append(path)
        entry = _with_fields(mine, fields) if mine else _entry(manager, "Apply", rt.api_version, fields)
        _set_entries(merged, [*others, entry])
        merged_meta["resourceVersion"] = old["metadata"].get("resourceVersion")
        if applied["metadata"].get("resourceVersion"):
            merged_meta["resourceVersion"] = applied["metadata"]["resourceVersion"]  # a precondition
        token = _APPLYING.set(True)
        try:
            return registry._commit_update(rt, old, merged, name, subresource, dry_run), False
        finally:
            _APPLYING.reset(token)


def track_update(rt: ResourceType, old: Json, new: Json) -> None:
    """A non-apply write (operation Update) to an object with managed fields: the fields it changed
    or added now belong to the request's manager and to no one else."""
    if _APPLYING.get() or not (old.get("metadata") or {}).get("managedFields"):
        return
    if "managedFields" not in new["metadata"]:
        new["metadata"]["managedFields"] = copy_json(old["metadata"]["managedFields"])
    manager = FIELD_MANAGER.get() or "unknown"
    before, after = field_set(rt, old), field_set(rt, new)
    changed = {p for p in after if p not in before or _locate(old, p) != _locate(new, p)}
    entries = _entries(new)
    if not changed and all(decode_fields(e.get("fieldsV1")) <= after for e in entries):
        return
    updated = []
    mine = None
    for entry in entries:
        owned = decode_fields(entry.get("fieldsV1")) & after
        if entry["manager"] == manager and entry["operation"] == "Update":
            mine = entry
            continue
        updated.append(_with_fields(entry, owned - changed))
    if changed or mine:
        own = (decode_fields(mine.get("fieldsV1")) & after if mine else set()) | changed
        updated.append(_with_fields(mine, own) if mine else _entry(manager, "Update", rt.api_version, own))
    _set_entries(new, updated)
