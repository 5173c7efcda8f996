"""Serving CustomResourceDefinitions: one ResourceType per served version, with the CRD's structural
schema applied to every write as the apiextensions-apiserver does.

On decode (apiserver/schema/pruning, apiserver/schema/defaulting): fields the schema does not specify
are dropped unless ``x-kubernetes-preserve-unknown-fields`` (structural pruning, KEP-2332), ``default``
values are filled in, and ``null`` values of non-nullable fields are dropped. On create and update the
object is validated against the OpenAPI v3 schema and every violation is reported as a 422 cause with
its field path, in the wording of apiextensions-apiserver's ValidateCustomResource. The
``x-kubernetes-*`` extensions other than int-or-string, preserve-unknown-fields and embedded-resource
are ignored; CEL rules (``x-kubernetes-validations``) are not evaluated.

Why this matters for qosd: a QoSPolicy's unknown field vanishes on a real server (so qosd must never
rely on one), a wrongly typed status field is a 422 the status writer must report, and a write to a CR
without its resourceVersion is refused.
"""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Callable
from typing import Any

from jsonschema import Draft4Validator, FormatChecker
from jsonschema.exceptions import ValidationError

from tests.kubeapi import errors as E
from tests.kubeapi.errors import FieldError
from tests.kubeapi.registry import (
    METADATA_FIELDS,
    OBJECT_META_FIELDS,
    Registry,
    ResourceType,
    Strategy,
    _path,
    now,
    rfc3339,
)
from tests.kubeapi.selectors import FieldGetter
from tests.kubeapi.typed import WARNINGS

Json = dict[str, Any]

_PRESERVE = "x-kubernetes-preserve-unknown-fields"
_INT_OR_STRING = "x-kubernetes-int-or-string"
_EMBEDDED = "x-kubernetes-embedded-resource"
_VALIDATION_KEYS = (
    "enum",
    "maximum",
    "minimum",
    "exclusiveMaximum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "multipleOf",
    "maxProperties",
    "minProperties",
    "required",
    "format",
)

# --------------------------------------------------------------------------------------------------
# Pruning and defaulting
# --------------------------------------------------------------------------------------------------


def prune(value: Any, schema: Json | None, *, root: bool = False, path: str = "") -> Any:
    """Structural pruning (pruning/algorithm.go); ``root`` keeps apiVersion, kind and metadata. Each
    dropped field is recorded as an "unknown field" warning, as the server reports it."""
    if isinstance(value, dict):
        if schema is not None and schema.get(_PRESERVE):
            return {k: _prune_known(v, k, schema, _child(path, k)) for k, v in value.items()}
        out: Json = {}
        for key, item in value.items():
            child = _child(path, key)
            if (root or (schema or {}).get(_EMBEDDED)) and key in ("apiVersion", "kind", "metadata"):
                out[key] = _prune_metadata(item, child) if key == "metadata" else item
                continue
            props = (schema or {}).get("properties") or {}
            additional = (schema or {}).get("additionalProperties")
            if key in props:
                out[key] = prune(item, props[key], path=child)
            elif isinstance(additional, dict):
                out[key] = prune(item, additional, path=child)
            elif additional is True:
                out[key] = item
            else:
                _warn(child)
        return out
    if isinstance(value, list):
        items = (schema or {}).get("items")
        if schema is not None and schema.get(_PRESERVE) and items is None:
            return value
        sub = items if isinstance(items, dict) else None
        return [prune(v, sub, path=f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _warn(path: str) -> None:
    warnings = WARNINGS.get()
    if warnings is not None:
        warnings.append(f'unknown field "{path}"')


def _prune_known(value: Any, key: str, schema: Json, path: str) -> Any:
    """skipPrune: under preserve-unknown-fields, known properties are still pruned by their schema."""
    props = schema.get("properties") or {}
    if key in props:
        return prune(value, props[key], path=path)
    if isinstance(schema.get("additionalProperties"), dict):
        return prune(value, schema["additionalProperties"], path=path)
    return value


def _prune_metadata(meta: Any, path: str) -> Any:
    if not isinstance(meta, dict):
        return meta
    for key in meta:
        if key not in OBJECT_META_FIELDS:
            _warn(f"{path}.{key}")
    return {k: v for k, v in meta.items() if k in OBJECT_META_FIELDS}


def apply_defaults(value: Any, schema: Json | None) -> None:
    """structuraldefaulting.Default, then PruneNonNullableNullsWithoutDefaults, in place."""
    if schema is None:
        return
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for key, prop in props.items():
            if "default" in prop and (key not in value or (value[key] is None and not prop.get("nullable"))):
                value[key] = copy.deepcopy(prop["default"])
        additional = schema.get("additionalProperties")
        for key in list(value):
            sub = props.get(key, additional if isinstance(additional, dict) else None)
            if sub is None:
                continue
            if value[key] is None and not sub.get("nullable"):
                if "default" in sub:
                    value[key] = copy.deepcopy(sub["default"])
                else:
                    del value[key]
                    continue
            apply_defaults(value[key], sub)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                if item is None and "default" in items and not items.get("nullable"):
                    value[i] = copy.deepcopy(items["default"])
                apply_defaults(value[i], items)


# --------------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------------

_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([Zz]|[+-]\d{2}:?\d{2})?")
_FORMATS = FormatChecker(formats=())


@_FORMATS.checks("date-time")
def _is_date_time(value: object) -> bool:
    return not isinstance(value, str) or bool(_DATE_TIME.fullmatch(value))


@_FORMATS.checks("date")
def _is_date(value: object) -> bool:
    return not isinstance(value, str) or bool(re.fullmatch(r"\d{4}-\d{2}-\d{2}", value))


@_FORMATS.checks("int32")
def _is_int32(value: object) -> bool:
    return not isinstance(value, int) or -(2**31) <= value < 2**31


@_FORMATS.checks("int64")
def _is_int64(value: object) -> bool:
    return not isinstance(value, int) or -(2**63) <= value < 2**63


def to_json_schema(schema: Json) -> Json:
    """OpenAPI v3.0 (as a CRD writes it) -> JSON Schema draft 4, which shares its exclusiveMinimum form."""
    out: Json = {k: schema[k] for k in _VALIDATION_KEYS if k in schema}
    types: list[str] = []
    if schema.get(_INT_OR_STRING):
        types = ["integer", "string"]
    elif isinstance(schema.get("type"), str):
        types = [schema["type"]]
    if types:
        if schema.get("nullable"):
            types = [*types, "null"]
        out["type"] = types if len(types) > 1 else types[0]
    if schema.get("nullable") and "enum" in out and None not in out["enum"]:
        out["enum"] = [*out["enum"], None]
    if isinstance(schema.get("properties"), dict):
        out["properties"] = {k: to_json_schema(v) for k, v in schema["properties"].items()}
    if isinstance(schema.get("additionalProperties"), dict):
        out["additionalProperties"] = to_json_schema(schema["additionalProperties"])
    if isinstance(schema.get("items"), dict):
        out["items"] = to_json_schema(schema["items"])
    for key in ("allOf", "anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            out[key] = [to_json_schema(s) for s in schema[key]]
    if isinstance(schema.get("not"), dict):
        out["not"] = to_json_schema(schema["not"])
    return out


def _field_path(error: ValidationError) -> str:
    out = ""
    for part in error.absolute_path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _field_error(error: ValidationError) -> FieldError:
    """One kube-openapi validation error, converted as apiextensions' ValidateCustomResource does."""
    path = _field_path(error)
    name = path or "body"
    value: Any = error.instance
    rule: Any = error.validator_value
    schema: Any = error.schema
    kind = str(error.validator)
    if kind == "required":
        match = re.match(r"(.*) is a required property$", error.message)
        missing = ast.literal_eval(match.group(1)) if match else "?"
        return FieldError("Required", f"{path}.{missing}" if path else str(missing))
    if kind == "type":
        wanted = [t for t in (rule if isinstance(rule, list) else [rule]) if t != "null"]
        return FieldError(
            "TypeInvalid",
            path,
            f'{name} in body must be of type {",".join(wanted)}: "{_json_type(value)}"',
            value,
        )
    if kind == "enum":
        shown = ", ".join(E._go_value(v) for v in rule if v is not None)
        return FieldError("NotSupported", path, f"supported values: {shown}", value)
    if kind == "maxLength":
        return FieldError("TooLong", path, f"may not be more than {rule} bytes", value)
    if kind in ("maxItems", "maxProperties"):
        return FieldError("TooMany", path, f"must have at most {rule} items", len(value))
    if kind == "format":
        return FieldError("TypeInvalid", path, f'{name} in body must be of type {rule}: "{value}"', value)
    details = {
        "minimum": f"should be greater than {'' if schema.get('exclusiveMinimum') else 'or equal to '}{rule}",
        "maximum": f"should be less than {'' if schema.get('exclusiveMaximum') else 'or equal to '}{rule}",
        "pattern": f"should match '{rule}'",
        "minLength": f"should be at least {rule} chars long",
        "minItems": f"should have at least {rule} items",
        "minProperties": f"should have at least {rule} properties",
        "uniqueItems": "shouldn't contain duplicates",
        "multipleOf": f"should be a multiple of {rule}",
        "oneOf": "must validate one and only one schema (oneOf)",
        "anyOf": "must validate at least one schema (anyOf)",
        "allOf": "must validate all the schemas (allOf)",
        "not": "must not validate the schema (not)",
    }
    if kind == "uniqueItems":
        return FieldError("Duplicate", path, "", value)
    return FieldError("Invalid", path, f"{name} in body {details.get(kind, error.message)}", value)


class StructuralSchema:
    """One version's openAPIV3Schema, ready to prune, default and validate objects."""

    def __init__(self, schema: Json) -> None:
        self.schema = schema
        self._validator = Draft4Validator(to_json_schema(schema), format_checker=_FORMATS)

    def decode(self, obj: Json) -> Json:
        pruned: Json = prune(obj, self.schema, root=True)
        apply_defaults(pruned, self.schema)
        return pruned

    def validate(self, obj: Json) -> list[FieldError]:
        body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
        errors = sorted(self._validator.iter_errors(body), key=lambda e: (_field_path(e), str(e.validator)))
        return [_field_error(e) for e in errors]


# --------------------------------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------------------------------


class CustomResourceStrategy(Strategy):
    """customResourceStrategy: generation on every change outside metadata (and status when it is a
    subresource), no unconditional updates, status cleared on create when it is a subresource."""

    generation = True
    allow_unconditional_update = False

    def __init__(
        self, schema: StructuralSchema | None, status_subresource: bool, columns: tuple[Json, ...] = ()
    ) -> None:
        self.schema = schema
        self.status_subresource = status_subresource
        self.columns = columns  # the version's additionalPrinterColumns (tests/kubeapi/table.py)

    def default(self, obj: Json) -> Json:
        if self.schema:
            apply_defaults(obj, self.schema.schema)
        return obj

    def decode(self, obj: Json) -> Json:
        return self.schema.decode(obj) if self.schema else obj

    def prepare_create(self, obj: Json) -> None:
        if self.status_subresource:
            obj.pop("status", None)

    def validate(self, obj: Json, old: Json | None, api_version: str) -> list[FieldError]:
        return self.schema.validate(obj) if self.schema else []


class CrdStrategy(Strategy):
    """CustomResourceDefinitions: creating one starts serving its resources, deleting one stops it."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    model = "V1CustomResourceDefinition"

    def decode(self, obj: Json) -> Json:
        obj = super().decode(obj)
        names = (obj.get("spec") or {}).get("names") or {}
        if names.get("kind"):
            names.setdefault("listKind", f"{names['kind']}List")
            names.setdefault("singular", names["kind"].lower())
        return obj

    def prepare_create(self, obj: Json) -> None:
        obj["status"] = _crd_status(obj)

    def prepare_update(self, new: Json, old: Json) -> None:
        new["status"] = _crd_status(new)
        # A condition's lastTransitionTime moves only when its status does.
        before = {c.get("type"): c for c in (old.get("status") or {}).get("conditions") or []}
        for condition in new["status"]["conditions"]:
            previous = before.get(condition["type"])
            if previous and previous.get("status") == condition["status"] and previous.get("lastTransitionTime"):
                condition["lastTransitionTime"] = previous["lastTransitionTime"]

    def validate(self, obj: Json, old: Json | None, api_version: str) -> list[FieldError]:
        return validate_crd(obj)

    def after_write(self, obj: Json, deleted: bool) -> None:
        spec = obj.get("spec") or {}
        names = spec.get("names") or {}
        group, plural = spec.get("group", ""), names.get("plural", "")
        self.registry.unregister(group, plural)
        if deleted:
            bucket = E.qualified(group, plural)
            for item in self.registry.store.items(bucket):
                self.registry.store.write(bucket, "DELETED", item)
            return
        for rt in resource_types(obj):
            self.registry.register(rt)


def _crd_status(crd: Json) -> Json:
    spec = crd.get("spec") or {}
    stamp = rfc3339(now())
    storage = [v["name"] for v in spec.get("versions") or [] if v.get("storage")]
    return {
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "reason": "NoConflicts",
                "message": "no conflicts found",
                "lastTransitionTime": stamp,
            },
            {
                "type": "Established",
                "status": "True",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
                "lastTransitionTime": stamp,
            },
        ],
        "acceptedNames": copy.deepcopy(spec.get("names") or {}),
        "storedVersions": storage,
    }


def validate_crd(crd: Json) -> list[FieldError]:
    """The parts of ValidateCustomResourceDefinition a generated CRD can get wrong by construction."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    errors: list[FieldError] = []
    group, plural = spec.get("group") or "", names.get("plural") or ""
    name = (crd.get("metadata") or {}).get("name") or ""
    if name != f"{plural}.{group}":
        errors.append(E.invalid("metadata.name", name, 'must be spec.names.plural+"."+spec.group'))
    if "." not in group:
        errors.append(E.invalid("spec.group", group, "should be a domain with at least one dot"))
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        errors.append(
            FieldError(
                "NotSupported", "spec.scope", 'supported values: "Cluster", "Namespaced"', spec.get("scope")
            )
        )
    if not names.get("kind"):
        errors.append(E.required("spec.names.kind", ""))
    if not plural:
        errors.append(E.required("spec.names.plural", ""))
    versions = spec.get("versions") or []
    if not versions:
        errors.append(E.required("spec.versions", "must have exactly one version marked as storage version"))
    elif sum(1 for v in versions if v.get("storage")) != 1:
        errors.append(
            E.invalid(
                "spec.versions",
                versions and [v.get("name") for v in versions],
                "must have exactly one version marked as storage version",
            )
        )
    return errors


def _selectable(fields: list[Json]) -> dict[str, FieldGetter]:
    out = dict(METADATA_FIELDS)
    for f in fields:
        json_path = f.get("jsonPath", "")
        label = json_path.lstrip(".")
        out[label] = _path(*label.split("."))
    return out


def resource_types(crd: Json) -> list[ResourceType]:
    """One ResourceType per served version; all share the storage version's bucket (conversion
    strategy None: only apiVersion differs)."""
    spec = crd["spec"]
    names = spec["names"]
    group, plural, kind = spec["group"], names["plural"], names["kind"]
    storage_version = next(v["name"] for v in spec["versions"] if v.get("storage"))
    out = []
    for version in spec["versions"]:
        if not version.get("served", True):
            continue
        schema = ((version.get("schema") or {}).get("openAPIV3Schema")) or None
        status = "status" in (version.get("subresources") or {})
        strategy = CustomResourceStrategy(
            StructuralSchema(schema) if schema else None,
            status,
            tuple(version.get("additionalPrinterColumns") or ()),
        )
        out.append(
            ResourceType(
                group,
                version["name"],
                plural,
                kind,
                spec.get("scope") == "Namespaced",
                strategy,
                names.get("singular", kind.lower()),
                tuple(names.get("shortNames") or ()),
                frozenset({"status"} if status else set()),
                _selectable(version.get("selectableFields") or []),
                None,
                builtin=False,
                storage=E.qualified(group, plural),
                to_storage=_set_api_version(f"{group}/{storage_version}"),
                from_storage=_set_api_version(f"{group}/{version['name']}"),
                categories=tuple(names.get("categories") or ()),
            )
        )
    return out


def _set_api_version(api_version: str) -> Callable[[Json], Json]:
    def convert(obj: Json) -> Json:
        return {**obj, "apiVersion": api_version}

    return convert


def crd_type(registry: Registry) -> ResourceType:
    """apiextensions.k8s.io/v1 customresourcedefinitions itself."""
    return ResourceType(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        False,
        CrdStrategy(registry),
        "customresourcedefinition",
        ("crd", "crds"),
        frozenset({"status"}),
        dict(METADATA_FIELDS),
        {},
    )
