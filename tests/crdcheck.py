"""The QoSPolicy CustomResourceDefinition, generated from the JSON Schema that validates rule files.

Why generated: a policy must mean the same thing whether it arrives as a file or as a custom resource,
so ``schemas/qospolicy.schema.json`` (JSON Schema 2020-12) is the only hand-written schema. The API
server accepts only a *structural* OpenAPI v3.0 subset, so :func:`build_crd` translates:

* every ``$ref`` is inlined; a definition that reaches itself (``condition``) becomes an opaque
  ``type: object`` + ``x-kubernetes-preserve-unknown-fields``: qosd validates it after loading;
* ``const`` -> ``enum: [value]``; ``prefixItems`` -> one ``items`` schema; numeric 2020-12
  ``exclusiveMinimum: x`` -> ``minimum: x, exclusiveMinimum: true`` (and the same for maximum);
* unions (``oneOf``/``anyOf``/``type: [...]``) of integer|string -> ``x-kubernetes-int-or-string``,
  any other mix -> ``x-kubernetes-preserve-unknown-fields`` without a type;
* under ``spec`` every integer leaf becomes int-or-string and every number/boolean leaf becomes
  preserve-unknown-fields, because a value may be a Jinja2 template that qosd renders per node;
* ``additionalProperties: false`` is dropped (the v1 API rejects it next to ``properties``; the API
  server prunes unknown fields instead, and rejects them under strict field validation);
* ``uniqueItems: true`` (forbidden in CRDs) on a list of scalars -> ``x-kubernetes-list-type: set``;
* annotations the CRD does not accept (``$schema``, ``$id``, ``$defs``, ``examples``,
  ``propertyNames``, ``default``, ``x-qosd-*``...) are dropped. Any keyword this module does not know
  raises :class:`CrdSchemaError`, so a schema change can never silently produce a wrong CRD.

:func:`check_structural` re-checks a CRD offline against the rules the API server enforces on create
(there is no kube-apiserver on the build machines). The rules were read in kubernetes/kubernetes,
``staging/src/k8s.io/apiextensions-apiserver/pkg/``: ``apis/apiextensions/validation/validation.go``
(CRD spec, names, versions, printer columns, OpenAPI keyword restrictions), ``apiserver/schema/
validation.go`` (structural invariants), ``apiserver/schema/complete.go`` (completeness) and
``apiserver/schema/convert.go`` (unsupported keywords). Each check below cites its rule.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from typing import Any

from engine.config.schema_check import recursive_defs

Schema = dict[str, Any]
Report = Callable[[str, str], None]  # report(path inside the CRD, message)

GROUP = "qosd.io"
VERSION = "v1alpha1"
KIND = "QoSPolicy"
PLURAL = "qospolicies"
SINGULAR = "qospolicy"
CRD_NAME = f"{PLURAL}.{GROUP}"

_PRESERVE = "x-kubernetes-preserve-unknown-fields"
_INT_OR_STRING = "x-kubernetes-int-or-string"

SPEC_DESCRIPTION = (
    "QoS classes, CPU pools, reclaim and eviction rules for the nodes that spec.nodeSelector matches. "
    'Values may be Jinja2 templates over node facts ("{{ node.numa_count * 2 }}"): here integer '
    "fields accept a string and number/boolean fields accept any value, and qosd renders the templates "
    "on each node and validates the result against the full schema (schemas/qospolicy.schema.json), "
    "reporting errors with the resource name and JSON path in the Valid condition. String fields with "
    "an enum or pattern are checked here as written, so they cannot hold templates in a QoSPolicy "
    "resource. Unknown fields are pruned by the API server (rejected under kubectl's default strict "
    "field validation)."
)
ROOT_DESCRIPTION = (
    "QoSPolicy: node QoS rules for qosd (QoS classes, CPU pools, reclaimed resources, eviction and "
    "suppression rules), applied by the qosd daemon on every node that spec.nodeSelector matches. The "
    "same document can be kept as a file; both are validated by schemas/qospolicy.schema.json."
)
_KEY_ORDER = ("type", _INT_OR_STRING, _PRESERVE, "description", "title")
_RECURSIVE_NOTE = (
    "Recursive structure: the API server stores it as written; qosd validates it after loading and "
    "reports errors with their JSON path."
)

# Printer columns: what `kubectl get qosp` shows. priority 1 = only with `-o wide`.
PRINTER_COLUMNS: list[Schema] = [
    {
        "name": "Priority",
        "type": "integer",
        "jsonPath": ".spec.priority",
        "description": "Higher wins within a layer.",
    },
    {"name": "Mode", "type": "string", "jsonPath": ".spec.mode", "description": "enforce or audit."},
    {
        "name": "Valid",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Valid")].status',
        "description": "Whether the policy renders, validates and compiles.",
    },
    {
        "name": "Applied",
        "type": "integer",
        "jsonPath": ".status.nodes.applied",
        "description": "Nodes running the current generation.",
    },
    {
        "name": "Failed",
        "type": "integer",
        "jsonPath": ".status.nodes.failed",
        "description": "Matched nodes that rejected the current generation.",
    },
    {
        "name": "Matched",
        "type": "integer",
        "jsonPath": ".status.nodes.matched",
        "priority": 1,
        "description": "Nodes selected by spec.nodeSelector.",
    },
    {
        "name": "Reason",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Valid")].reason',
        "priority": 1,
        "description": "Why the policy is (in)valid.",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


class CrdSchemaError(ValueError):
    """The JSON Schema uses a construct this generator cannot translate; the message says where."""


# --------------------------------------------------------------------------------------------------
# JSON Schema 2020-12 -> structural OpenAPI v3.0
# --------------------------------------------------------------------------------------------------

# Keywords with no CRD equivalent that only annotate or constrain what qosd checks itself anyway.
_DROPPED = frozenset(
    {
        "$schema",
        "$id",
        "$defs",
        "$comment",
        "$anchor",
        "examples",
        "propertyNames",
        "default",
        "deprecated",
        "readOnly",
        "writeOnly",
        "contentMediaType",
        "contentEncoding",
    }
)
# Keywords the converter translates.
_HANDLED = frozenset(
    {
        "$ref",
        "type",
        "const",
        "enum",
        "oneOf",
        "anyOf",
        "description",
        "title",
        "format",
        "properties",
        "additionalProperties",
        "required",
        "minProperties",
        "maxProperties",
        "items",
        "prefixItems",
        "minItems",
        "maxItems",
        "uniqueItems",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "pattern",
    }
)
_KUBE_EXTENSIONS = frozenset(
    {
        _PRESERVE,
        _INT_OR_STRING,
        "x-kubernetes-embedded-resource",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
        "x-kubernetes-validations",
    }
)
_ANNOTATIONS = ("description", "title")
_SCALARS = frozenset({"string", "integer", "number", "boolean"})


def _json_type(value: Any) -> str:
    """The JSON type name of a Python value (bool first: it is an int subclass)."""
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
    if isinstance(value, dict):
        return "object"
    return "null"


def _annotations(node: Schema) -> Schema:
    return {k: node[k] for k in _ANNOTATIONS if k in node}


class _Converter:
    """Translates one JSON Schema document; holds its ``$defs`` and which of them are recursive."""

    def __init__(self, root: Schema) -> None:
        self.defs: dict[str, Any] = root.get("$defs", {})
        self.recursive = recursive_defs(self.defs)

    def convert(self, node: Any, path: str, templated: bool) -> Schema:
        """Structural schema for ``node``; ``templated`` is true under ``spec`` (values may be templates)."""
        if node is True or node == {}:
            return {_PRESERVE: True}
        if not isinstance(node, dict):
            raise CrdSchemaError(f"{path}: expected a schema object, got {node!r}")
        if "$ref" in node:
            return self._inline(node, path, templated)
        for key in node:
            if (
                key not in _HANDLED
                and key not in _DROPPED
                and key not in _KUBE_EXTENSIONS
                and not key.startswith("x-qosd-")
            ):
                raise CrdSchemaError(
                    f"{path}: JSON Schema keyword {key!r} has no CRD translation in engine/config/crd.py; "
                    "express the constraint differently or teach _Converter about it"
                )
        kube = {k: v for k, v in node.items() if k in _KUBE_EXTENSIONS}
        if "oneOf" in node or "anyOf" in node:
            return {**self._union(node, path, templated), **kube}
        types = self._types(node)
        if isinstance(node.get("type"), list):
            # type: [a, b] is a union of one branch per type.
            rest = {k: v for k, v in node.items() if k not in ("type", *_ANNOTATIONS)}
            branches = [self.convert({**rest, "type": t}, path, templated) for t in node["type"]]
            return {**self._widen(branches, _annotations(node)), **kube}
        if not types:
            return {_PRESERVE: True, **_annotations(node)}  # annotation-only schema: anything goes
        (kind,) = types
        if kind == "object":
            out = self._object(node, path, templated)
        elif kind == "array":
            out = self._array(node, path, templated)
        elif kind == "string":
            out = self._string(node)
        elif kind in ("integer", "number", "boolean"):
            out = self._scalar(node, path, kind, templated)
        else:
            raise CrdSchemaError(f"{path}: type {kind!r} cannot be expressed in a CRD (no null type)")
        return {**out, **kube}

    def _types(self, node: Schema) -> set[str]:
        declared = node.get("type")
        if isinstance(declared, str):
            return {declared}
        if isinstance(declared, list):
            return set(declared)
        if "const" in node:
            return {_json_type(node["const"])}
        if "enum" in node:
            return {_json_type(v) for v in node["enum"]}
        if "properties" in node or "additionalProperties" in node:
            return {"object"}
        return set()

    def _inline(self, node: Schema, path: str, templated: bool) -> Schema:
        ref = node["$ref"]
        if not isinstance(ref, str) or not ref.startswith("#/$defs/") or ref[8:] not in self.defs:
            raise CrdSchemaError(f"{path}: $ref {ref!r} is not a local #/$defs/<name> definition")
        name = ref[8:]
        target = self.defs[name]
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        if name in self.recursive:
            return self._opaque(target, siblings)
        merged = dict(target)
        for key, value in siblings.items():
            if key in merged and key not in _ANNOTATIONS and merged[key] != value:
                raise CrdSchemaError(
                    f"{path}: {key!r} next to $ref {ref!r} conflicts with the definition; "
                    "move the constraint into a separate definition"
                )
            merged[key] = value
        return self.convert(merged, path, templated)

    def _opaque(self, target: Any, siblings: Schema) -> Schema:
        """A recursive subtree: kept as written by the API server, validated by qosd after load."""
        out: Schema = {}
        if isinstance(target, dict) and self._types(target) == {"object"}:
            out["type"] = "object"
        described = siblings.get("description") or (
            target.get("description") if isinstance(target, dict) else None
        )
        out["description"] = f"{described} {_RECURSIVE_NOTE}" if described else _RECURSIVE_NOTE
        if isinstance(target, dict) and out.get("type") == "object":
            out.update({k: target[k] for k in ("minProperties", "maxProperties") if k in target})
        out[_PRESERVE] = True
        return out

    def _union(self, node: Schema, path: str, templated: bool) -> Schema:
        """oneOf/anyOf: each branch also obeys the keywords around it (2020-12), so merge those in."""
        key = "oneOf" if "oneOf" in node else "anyOf"
        if "oneOf" in node and "anyOf" in node:
            raise CrdSchemaError(f"{path}: both oneOf and anyOf on one schema; nest one of them")
        if not node[key] or not isinstance(node[key], list):
            raise CrdSchemaError(f"{path}: {key} must be a non-empty list of schemas")
        outer = {k: v for k, v in node.items() if k not in (key, *_ANNOTATIONS)}
        branches = []
        for i, branch in enumerate(node[key]):
            if isinstance(branch, dict) and outer:
                branch = {**outer, **branch}
            branches.append(self.convert(branch, f"{path}.{key}[{i}]", templated))
        return self._widen(branches, _annotations(node))

    @staticmethod
    def _widen(branches: list[Schema], annotations: Schema) -> Schema:
        """The structural schema of 'any one of these': exact when one type remains, opaque otherwise."""
        if all(b == branches[0] for b in branches):
            return {**branches[0], **annotations}
        kinds: set[str] = set()
        for branch in branches:
            if branch.get(_INT_OR_STRING):
                kinds |= {"integer", "string"}
            elif isinstance(branch.get("type"), str):
                kinds.add(branch["type"])
            else:
                return {_PRESERVE: True, **annotations}  # one branch accepts anything
        if kinds == {"integer", "string"}:
            return {_INT_OR_STRING: True, **annotations}
        if len(kinds) == 1 and kinds <= _SCALARS:
            # Same type, different constraints: branch-specific enum/pattern/bounds are checked by qosd.
            return {"type": kinds.pop(), **annotations}
        if kinds == {"object"}:
            return {"type": "object", **annotations, _PRESERVE: True}
        if kinds == {"array"}:
            return {"type": "array", **annotations, "items": {_PRESERVE: True}}
        return {_PRESERVE: True, **annotations}

    def _object(self, node: Schema, path: str, templated: bool) -> Schema:
        out: Schema = {"type": "object", **_annotations(node)}
        props = node.get("properties", {})
        if props:
            out["properties"] = {
                name: self.convert(sub, f"{path}.{name}", templated) for name, sub in props.items()
            }
        for key in ("required", "minProperties", "maxProperties"):
            if key in node:
                out[key] = copy.deepcopy(node[key])
        extra = node.get("additionalProperties")
        if extra is True or (extra is None and not props):
            out[_PRESERVE] = True  # open object
        elif isinstance(extra, dict):
            converted = self.convert(extra, f"{path}.*", templated)
            if props:
                # properties + additionalProperties schema is forbidden (validation.go: "additionalProperties
                # and properties are mutual exclusive"): keep the named fields, keep the rest unvalidated.
                out[_PRESERVE] = True
            else:
                out["additionalProperties"] = converted
        # additionalProperties: false -> nothing: the API server prunes unknown fields.
        return out

    def _array(self, node: Schema, path: str, templated: bool) -> Schema:
        out: Schema = {"type": "array", **_annotations(node)}
        candidates = [
            self.convert(sub, f"{path}[{i}]", templated) for i, sub in enumerate(node.get("prefixItems", []))
        ]
        items = node.get("items")
        if isinstance(items, dict) or items is True:
            candidates.append(self.convert(items, f"{path}[]", templated))
        for key in ("minItems", "maxItems"):
            if key in node:
                out[key] = node[key]
        if items is False and "prefixItems" in node:
            out["maxItems"] = min(out.get("maxItems", len(node["prefixItems"])), len(node["prefixItems"]))
        if not candidates:
            out["items"] = {_PRESERVE: True}
        else:
            out["items"] = self._widen(candidates, {})
        scalar_items = out["items"].get("type") in _SCALARS or out["items"].get(_INT_OR_STRING)
        if node.get("uniqueItems") is True and scalar_items:
            out["x-kubernetes-list-type"] = "set"  # uniqueItems is forbidden in CRDs; a set list is unique
        return out

    @staticmethod
    def _string(node: Schema) -> Schema:
        out: Schema = {"type": "string", **_annotations(node)}
        if "const" in node:
            out["enum"] = [node["const"]]
        elif "enum" in node:
            out["enum"] = list(node["enum"])
        for key in ("pattern", "minLength", "maxLength", "format"):
            if key in node:
                out[key] = node[key]
        return out

    @staticmethod
    def _numeric(node: Schema, path: str) -> Schema:
        """Bounds in OpenAPI v3.0 form: 2020-12's numeric exclusiveMinimum becomes a boolean flag."""
        out: Schema = {}
        for plain, exclusive, stricter in (
            ("minimum", "exclusiveMinimum", max),
            ("maximum", "exclusiveMaximum", min),
        ):
            bound, xbound = node.get(plain), node.get(exclusive)
            if isinstance(xbound, bool):
                raise CrdSchemaError(f"{path}: boolean {exclusive} is draft-4 syntax; the schema is 2020-12")
            if xbound is not None and (bound is None or stricter(bound, xbound) == xbound):
                out[plain], out[exclusive] = xbound, True
            elif bound is not None:
                out[plain] = bound
        if "multipleOf" in node:
            out["multipleOf"] = node["multipleOf"]
        return out

    def _scalar(self, node: Schema, path: str, kind: str, templated: bool) -> Schema:
        numeric = self._numeric(node, path) if kind != "boolean" else {}
        if templated:
            # A template string must get through the API server; bounds still apply to literal numbers
            # (go-openapi checks minimum/maximum only on numeric values). enum/const cannot hold.
            marker = {_INT_OR_STRING: True} if kind == "integer" else {_PRESERVE: True}
            return {**marker, **_annotations(node), **numeric}
        out: Schema = {"type": kind, **_annotations(node), **numeric}
        if "const" in node:
            out["enum"] = [node["const"]]
        elif "enum" in node:
            out["enum"] = list(node["enum"])
        return out


def openapi_schema(policy_schema: Schema) -> Schema:
    """The structural ``openAPIV3Schema`` for QoSPolicy, derived from the JSON Schema."""
    source = copy.deepcopy(policy_schema)  # load_schema() is cached: never hand out its inner objects
    converter = _Converter(source)
    properties: Schema = {}
    for name, sub in source.get("properties", {}).items():
        if name in ("apiVersion", "kind"):
            # The API server sets and checks these; at the root they must be plain strings.
            properties[name] = {"type": "string"}
            if isinstance(sub, dict) and "description" in sub:
                properties[name]["description"] = sub["description"]
        elif name == "metadata":
            properties[name] = {"type": "object"}  # only name/generateName may be restricted
        elif name == "spec":
            spec = converter.convert(sub, "spec", templated=True)
            _allow_partial_entries(spec)
            own = spec.get("description")
            spec["description"] = f"{own} {SPEC_DESCRIPTION}" if own else SPEC_DESCRIPTION
            properties[name] = spec
        else:
            properties[name] = converter.convert(sub, name, templated=False)
    out: Schema = {"type": "object", "description": ROOT_DESCRIPTION, "properties": properties}
    required = [r for r in source.get("required", []) if r not in ("apiVersion", "kind", "metadata")]
    if required:
        out["required"] = required
    tidy: Schema = _tidy(out)
    return tidy


NAMED_SECTIONS = ("classes", "enhancements", "pools", "rules")


def _allow_partial_entries(spec: Schema) -> None:
    """An overlay CR writes only what it changes (e.g. one rule's ``for``), so below each named entry
    only ``name`` stays required; qosd checks required fields on the merged spec, where a missing one
    is reported at the entry that introduced it."""

    def strip(node: Any, top: bool) -> None:
        if isinstance(node, dict):
            if "required" in node:
                kept = [r for r in node["required"] if top and r == "name"]
                if kept:
                    node["required"] = kept
                else:
                    del node["required"]
            for key, value in node.items():
                if key in ("properties", "additionalProperties", "items"):
                    children = value.values() if key == "properties" else [value]
                    for child in children:
                        strip(child, False)
        elif isinstance(node, list):
            for child in node:
                strip(child, False)

    for section in NAMED_SECTIONS:
        items = spec.get("properties", {}).get(section, {}).get("items")
        if isinstance(items, dict):
            strip(items, True)


def _tidy(node: Any) -> Any:
    """Same content, keys in reading order (type and description first) so the YAML reviews well."""
    if isinstance(node, list):
        return [_tidy(v) for v in node]
    if not isinstance(node, dict):
        return node
    first = [k for k in _KEY_ORDER if k in node]
    ordered = {k: node[k] for k in first} | {k: node[k] for k in node if k not in first}
    return {
        k: (
            v
            if k in ("enum", "required", "default", "example")
            else {n: _tidy(sub) for n, sub in v.items()}
            if k == "properties"
            else _tidy(v)
        )
        for k, v in ordered.items()
    }


def build_crd(policy_schema: dict[str, Any]) -> dict[str, Any]:
    """The apiextensions.k8s.io/v1 CustomResourceDefinition serving QoSPolicy documents."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME, "labels": {"app.kubernetes.io/part-of": "qosd"}},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": ["qosp"],
                "categories": ["qosd"],
            },
            "scope": "Cluster",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": copy.deepcopy(PRINTER_COLUMNS),
                    "schema": {"openAPIV3Schema": openapi_schema(policy_schema)},
                }
            ],
        },
    }


# --------------------------------------------------------------------------------------------------
# Offline CRD validation, the API server's rules
# --------------------------------------------------------------------------------------------------

# JSONSchemaProps fields of apiextensions/v1 (types.go; same set as the kubernetes client's
# V1JSONSchemaProps). Anything else is an unknown field: dropped with a warning, or rejected under
# strict field validation (kubectl's default).
JSON_SCHEMA_PROPS_KEYS = frozenset(
    {
        "id",
        "$schema",
        "$ref",
        "description",
        "type",
        "format",
        "title",
        "default",
        "maximum",
        "exclusiveMaximum",
        "minimum",
        "exclusiveMinimum",
        "maxLength",
        "minLength",
        "pattern",
        "maxItems",
        "minItems",
        "uniqueItems",
        "multipleOf",
        "enum",
        "maxProperties",
        "minProperties",
        "required",
        "items",
        "allOf",
        "oneOf",
        "anyOf",
        "not",
        "properties",
        "additionalProperties",
        "patternProperties",
        "dependencies",
        "additionalItems",
        "definitions",
        "externalDocs",
        "example",
        "nullable",
        *_KUBE_EXTENSIONS,
    }
)
# validation.go specStandardValidatorV3.validate and convert.go validateUnsupportedFields.
_UNSUPPORTED_KEYS = {
    "id": "id is not supported",
    "$schema": "OpenAPIV3Schema 'schema' is not supported",
    "$ref": "$ref is not supported",
    "patternProperties": "patternProperties is not supported",
    "dependencies": "dependencies is not supported",
    "additionalItems": "additionalItems is not supported",
    "definitions": "definitions is not supported",
}
_OPENAPI_TYPES = frozenset({"string", "number", "integer", "boolean", "array", "object"})
# validation.go allowedFieldsAtRootSchema (root of a schema whose version has the status subresource).
_ROOT_ALLOWED_WITH_STATUS = frozenset(
    {
        "description",
        "type",
        "format",
        "title",
        "maximum",
        "exclusiveMaximum",
        "minimum",
        "exclusiveMinimum",
        "maxLength",
        "minLength",
        "pattern",
        "maxItems",
        "minItems",
        "uniqueItems",
        "multipleOf",
        "required",
        "items",
        "properties",
        "externalDocs",
        "example",
        _PRESERVE,
        "x-kubernetes-validations",
    }
)
# schema/validation.go validateNestedValueValidation: forbidden under allOf/anyOf/oneOf/not.
_NESTED_FORBIDDEN = {
    "type": "must be empty to be structural",
    "additionalProperties": "must be undefined to be structural",
    "default": "must be undefined to be structural",
    "title": "must be empty to be structural",
    "description": "must be empty to be structural",
    "nullable": "must be false to be structural",
    "externalDocs": "must be undefined to be structural",
    **{k: "must be false/empty/undefined to be structural" for k in _KUBE_EXTENSIONS},
}
# validation.go printerColumnDatatypes / customResourceColumnDefinitionFormats.
PRINTER_COLUMN_TYPES = frozenset({"integer", "number", "string", "boolean", "date"})
PRINTER_COLUMN_FORMATS = frozenset(
    {
        "int32",
        "int64",
        "float",
        "double",
        "byte",
        "date",
        "date-time",
        "password",
    }
)
# apimachinery api/validation/objectmeta.go TotalAnnotationSizeLimitB.
ANNOTATION_SIZE_LIMIT = 256 * 1024

_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_COLUMN_SEGMENT = (
    r"(\.[A-Za-z0-9_-]+"  # .field
    r"|\[(\d+|\*)\]"  # [0] or [*]
    r"|\['[^']+'\]"  # ['dotted.key']
    r"|\[\?\(@(\.[A-Za-z0-9_-]+)+\s*(==|!=|<=|>=|<|>)\s*"  # [?(@.type=="Valid")]
    r"(\"[^\"]*\"|'[^']*'|-?\d+(\.\d+)?|true|false)\)\])"
)
_COLUMN_PATH = re.compile(rf"^{_COLUMN_SEGMENT}+$")
# Go's regexp is RE2: no lookaround, backreferences or atomic groups.
_NOT_RE2 = re.compile(r"\(\?[=!]|\(\?<[=!]|\(\?>|\\[1-9]|[*+?}]\+")

_ROOT, _ITEM, _FIELD = "root", "item", "field"


def _mapping(value: Any) -> Schema:
    """``value`` if it is a mapping, else an empty one: the checker must survive any malformed input."""
    return value if isinstance(value, dict) else {}


def _dns1035(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= 63 and bool(_DNS1035_LABEL.match(value))


def _dns1123_subdomain(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= 253 and bool(_DNS1123_SUBDOMAIN.match(value))


def check_structural(crd: dict[str, Any]) -> list[str]:
    """Everything the API server would reject in ``crd`` that can be known without a server.

    Each entry is ``"<path inside the CRD>: <what is wrong and what the server says>"``; the path uses
    the API server's own notation (``spec.versions[0].schema.openAPIV3Schema.properties[spec]``) so it
    can be matched against a real ``kubectl apply`` error. An empty list means the CRD should apply.
    """
    out: list[str] = []

    def add(path: str, message: str) -> None:
        out.append(f"{path}: {message}")

    if crd.get("apiVersion") != "apiextensions.k8s.io/v1":
        add(
            "apiVersion",
            f"is {crd.get('apiVersion')!r}, must be 'apiextensions.k8s.io/v1' "
            "(v1beta1 CRDs were removed in Kubernetes 1.22)",
        )
    if crd.get("kind") != "CustomResourceDefinition":
        add("kind", f"is {crd.get('kind')!r}, must be 'CustomResourceDefinition'")
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        add("spec", "is missing; a CRD needs group, names, scope and versions")
        return out
    group = spec.get("group")
    names = _mapping(spec.get("names"))
    _check_meta_and_group(crd, group, names, add)
    _check_names(names, add)
    # validateCustomResourceDefinitionSpec: scope must be Cluster or Namespaced.
    if spec.get("scope") not in ("Cluster", "Namespaced"):
        add("spec.scope", f"is {spec.get('scope')!r}, must be 'Cluster' or 'Namespaced'")
    versions = spec.get("versions")
    if not isinstance(versions, list) or not versions:
        add("spec.versions", "must list at least one version")
        return out
    _check_versions(versions, add)
    for i, version in enumerate(versions):
        if isinstance(version, dict):
            _check_version(version, f"spec.versions[{i}]", add)
    # objectmeta.go: kubectl's client-side apply copies the object into an annotation limited to 256 KiB.
    size = len(json.dumps(crd, separators=(",", ":")))
    if size > ANNOTATION_SIZE_LIMIT:
        add(
            "metadata.annotations",
            f"the CRD is {size} bytes; client-side `kubectl apply` stores it in "
            "the last-applied-configuration annotation and fails with 'Too long: must have at most 262144 "
            "bytes'; shrink the schema or document `kubectl apply --server-side`",
        )
    return out


def _check_meta_and_group(crd: Schema, group: Any, names: Schema, add: Report) -> None:
    # ValidateCustomResourceDefinition: metadata.name must be spec.names.plural+"."+spec.group.
    meta = _mapping(crd.get("metadata"))
    required = f"{names.get('plural')}.{group}"
    if meta.get("name") != required:
        add(
            "metadata.name",
            f'is {meta.get("name")!r}, must be spec.names.plural+"."+spec.group = {required!r}',
        )
    # validateCustomResourceDefinitionSpec: group is a DNS subdomain with at least one dot.
    if not _dns1123_subdomain(group) or "." not in str(group):
        add("spec.group", f"is {group!r}, must be a DNS subdomain with at least one dot (e.g. qosd.io)")
    # validateAPIApproval: *.k8s.io and *.kubernetes.io groups need the api-approved annotation.
    protected = isinstance(group, str) and (group.endswith(".k8s.io") or group.endswith(".kubernetes.io"))
    if protected and "api-approved.kubernetes.io" not in _mapping(meta.get("annotations")):
        add("metadata.annotations[api-approved.kubernetes.io]", "is required for a protected group")


def _check_names(names: Schema, add: Report) -> None:
    # validateCustomResourceDefinitionSpec + ValidateCustomResourceDefinitionNames.
    for key in ("plural", "singular", "kind", "listKind"):
        if not names.get(key):
            add(f"spec.names.{key}", "is required")
    for key in ("plural", "singular"):
        if names.get(key) and not _dns1035(names[key]):
            add(f"spec.names.{key}", f"{names[key]!r} must be a lowercase DNS-1035 label (a-z, 0-9, '-')")
    for key in ("kind", "listKind"):
        if names.get(key) and not _dns1035(str(names[key]).lower()):
            add(
                f"spec.names.{key}",
                f"{names[key]!r} may have mixed case, but should otherwise be a DNS-1035 label",
            )
    if names.get("kind") and names.get("kind") == names.get("listKind"):
        add("spec.names.listKind", "kind and listKind may not be the same")
    for key in ("shortNames", "categories"):
        for i, value in enumerate(names.get(key) or []):
            if not _dns1035(value):
                add(f"spec.names.{key}[{i}]", f"{value!r} must be a lowercase DNS-1035 label")


def _check_versions(versions: list[Any], add: Report) -> None:
    # validateCustomResourceDefinitionSpec: unique DNS-1035 names, exactly one storage version.
    seen: set[str] = set()
    storage = 0
    for i, version in enumerate(versions):
        if not isinstance(version, dict):
            add(f"spec.versions[{i}]", "must be a mapping")
            continue
        name = version.get("name")
        if not _dns1035(name):
            add(f"spec.versions[{i}].name", f"{name!r} must be a DNS-1035 label such as v1alpha1")
        if name in seen:
            add(f"spec.versions[{i}].name", f"{name!r} is listed twice; version names must be unique")
        seen.add(str(name))
        for flag in ("served", "storage"):
            if not isinstance(version.get(flag), bool):
                add(f"spec.versions[{i}].{flag}", "is required and must be true or false")
        storage += version.get("storage") is True
    if storage != 1:
        add(
            "spec.versions",
            f"{storage} versions are marked storage: true; must have exactly one version "
            "marked as storage version",
        )


def _check_version(version: Schema, path: str, add: Report) -> None:
    subresources = version.get("subresources") or {}
    status_enabled = isinstance(subresources, dict) and isinstance(subresources.get("status"), dict)
    if not status_enabled:
        # qosd's own requirement: daemons write per-node results through /status (404 without it).
        add(
            f"{path}.subresources.status",
            "is missing; qosd writes policy status through the status "
            "subresource, so set subresources: {status: {}}",
        )
    for i, column in enumerate(version.get("additionalPrinterColumns") or []):
        _check_column(column, f"{path}.additionalPrinterColumns[{i}]", add)
    schema = (
        (version.get("schema") or {}).get("openAPIV3Schema")
        if isinstance(version.get("schema"), dict)
        else None
    )
    if schema is None:
        # validateCustomResourceDefinitionSpec (v1): "schemas are required".
        add(f"{path}.schema.openAPIV3Schema", "is required: schemas are required in apiextensions.k8s.io/v1")
        return
    spath = f"{path}.schema.openAPIV3Schema"
    if isinstance(schema, dict):
        if status_enabled:
            # validateCustomResourceDefinitionValidation: restricted root when status is a subresource.
            for key in schema:
                if key not in _ROOT_ALLOWED_WITH_STATUS:
                    add(
                        f"{spath}.{key}",
                        "only description, type, properties, required, "
                        "x-kubernetes-validations and scalar validations are allowed at the root of the "
                        "schema if the status subresource is enabled",
                    )
        if schema.get("nullable") is True:
            add(f"{spath}.nullable", "nullable cannot be true at the root")
    _check_schema(schema, spath, _ROOT, add)


def _check_column(column: Any, path: str, add: Report) -> None:
    # ValidateCustomResourceColumnDefinition.
    if not isinstance(column, dict):
        add(path, "must be a mapping with name, type and jsonPath")
        return
    if not column.get("name"):
        add(f"{path}.name", "is required")
    if column.get("type") not in PRINTER_COLUMN_TYPES:
        add(
            f"{path}.type",
            f"is {column.get('type')!r}, must be one of {', '.join(sorted(PRINTER_COLUMN_TYPES))}",
        )
    if column.get("format") and column["format"] not in PRINTER_COLUMN_FORMATS:
        add(
            f"{path}.format",
            f"is {column['format']!r}, must be one of {', '.join(sorted(PRINTER_COLUMN_FORMATS))}",
        )
    json_path = column.get("jsonPath")
    if not json_path:
        add(f"{path}.jsonPath", "is required")
    elif not isinstance(json_path, str) or not json_path.startswith("."):
        add(f"{path}.jsonPath", f"{json_path!r} must be a simple json path starting with '.'")
    elif not _COLUMN_PATH.match(json_path):
        # Stricter than admission: tableconvertor.New fails to parse it and the server silently falls back
        # to NAME/AGE only (logged at V(2)), so the column just disappears from `kubectl get`.
        add(
            f"{path}.jsonPath",
            f"{json_path!r} is not a JSONPath the API server can parse (expected "
            '.field, [0], [*] or [?(@.key=="value")] segments); kubectl get would silently drop the column',
        )


def _check_keywords(s: Schema, path: str, add: Report) -> None:
    """Rules that hold for every schema object, structural or nested under allOf/anyOf/oneOf/not."""
    for key in s:
        if key in _UNSUPPORTED_KEYS:
            # validation.go specStandardValidatorV3.validate / convert.go validateUnsupportedFields.
            add(f"{path}.{key}", f"Forbidden: {_UNSUPPORTED_KEYS[key]}; inline the schema instead")
        elif key not in JSON_SCHEMA_PROPS_KEYS:
            add(
                f"{path}.{key}",
                "is not a JSONSchemaProps field; the API server drops it (or rejects the "
                "CRD under strict field validation). JSON Schema 2020-12 keywords such as const, $defs, "
                "prefixItems and examples have no place in a CRD",
            )
    declared = s.get("type")
    if declared is not None:
        if not isinstance(declared, str):
            add(
                f"{path}.type",
                f"is {declared!r}; a CRD type is one string (no type lists: use "
                "x-kubernetes-int-or-string or x-kubernetes-preserve-unknown-fields)",
            )
        elif declared == "null":
            add(f"{path}.type", "type cannot be set to null, use nullable as an alternative")
        elif declared not in _OPENAPI_TYPES:
            add(f"{path}.type", f"{declared!r} is not one of {', '.join(sorted(_OPENAPI_TYPES))}")
    if s.get("uniqueItems") is True:
        # ValidateCustomResourceDefinitionOpenAPISchema.
        add(
            f"{path}.uniqueItems",
            "uniqueItems cannot be set to true since the runtime complexity becomes "
            "quadratic; use x-kubernetes-list-type: set",
        )
    for key in (
        "exclusiveMinimum",
        "exclusiveMaximum",
        "nullable",
        _PRESERVE,
        _INT_OR_STRING,
        "x-kubernetes-embedded-resource",
    ):
        if key in s and not isinstance(s[key], bool):
            add(
                f"{path}.{key}",
                f"is {s[key]!r}, must be true or false (OpenAPI v3.0: exclusiveMinimum "
                "is a flag next to minimum, not a number)",
            )
    for key in ("minimum", "maximum", "multipleOf"):
        if key in s and (isinstance(s[key], bool) or not isinstance(s[key], (int, float))):
            add(f"{path}.{key}", f"is {s[key]!r}, must be a number")
    for key in ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"):
        if key in s and (isinstance(s[key], bool) or not isinstance(s[key], int) or s[key] < 0):
            add(f"{path}.{key}", f"is {s[key]!r}, must be a non-negative integer")
    if "enum" in s and not isinstance(s["enum"], list):
        add(f"{path}.enum", "must be a list of values")
    required = s.get("required", [])
    if not (isinstance(required, list) and all(isinstance(r, str) for r in required)):
        add(f"{path}.required", "must be a list of property names")
    pattern = s.get("pattern")
    if pattern is not None:
        # schema/validation.go validateValueValidation: the pattern must compile as a Go (RE2) regexp.
        try:
            re.compile(pattern)
            valid = isinstance(pattern, str) and not _NOT_RE2.search(pattern)
        except (re.error, TypeError):
            valid = False
        if not valid:
            add(
                f"{path}.pattern",
                f"{pattern!r} must be a valid regular expression in Go's RE2 syntax "
                "(no lookaround, backreferences or possessive quantifiers)",
            )
    if s.get(_PRESERVE) is False:
        add(f"{path}.{_PRESERVE}", "must be true or undefined")


def _check_schema(s: Any, path: str, level: str, add: Report) -> None:
    """One structural schema node (validation.go + schema/validation.go validateStructuralInvariants)."""
    if not isinstance(s, dict):
        add(path, f"must be a schema object, got {type(s).__name__}")
        return
    _check_keywords(s, path, add)
    declared = s.get("type")
    int_or_string, preserve = s.get(_INT_OR_STRING) is True, s.get(_PRESERVE) is True
    if int_or_string and preserve:
        add(f"{path}.{_PRESERVE}", "must be false if x-kubernetes-int-or-string is true")
    if not declared and not int_or_string and not preserve:
        detail = {
            _ROOT: "must not be empty at the root",
            _ITEM: "must not be empty for specified array items",
            _FIELD: "must not be empty for specified object fields",
        }[level]
        add(
            f"{path}.type",
            f"Required value: {detail} (or set x-kubernetes-int-or-string / "
            "x-kubernetes-preserve-unknown-fields: true)",
        )
    if level == _ROOT and declared and declared != "object":
        add(f"{path}.type", f"is {declared!r}, must be object at the root")
    if s.get("x-kubernetes-embedded-resource") is True:
        if declared != "object":
            add(f"{path}.type", "must be object if x-kubernetes-embedded-resource is true")
        if not preserve and not s.get("properties"):
            add(
                f"{path}.properties",
                "must not be empty if x-kubernetes-embedded-resource is true without "
                "x-kubernetes-preserve-unknown-fields",
            )
    props = s.get("properties")
    extra = s.get("additionalProperties")
    if extra is not None:
        if props and (extra is False or isinstance(extra, dict)):
            add(
                f"{path}.additionalProperties",
                "Forbidden: additionalProperties and properties are mutual "
                "exclusive; drop additionalProperties: false (the API server prunes unknown fields)",
            )
        if level == _ROOT:
            add(f"{path}.additionalProperties", "Forbidden: must not be used at the root")
        if isinstance(extra, dict):
            _check_schema(extra, f"{path}.additionalProperties", _FIELD, add)
        elif not isinstance(extra, bool):
            add(f"{path}.additionalProperties", "must be a schema object or a boolean")
    items = s.get("items")
    if isinstance(items, list):
        add(f"{path}.items", "Forbidden: items must be a schema object and not an array (no tuple typing)")
    elif items is not None:
        _check_schema(items, f"{path}.items", _ITEM, add)
    elif declared == "array":
        add(f"{path}.items", "Required value: must be specified for type: array")
    if props is not None and not isinstance(props, dict):
        add(f"{path}.properties", "must be a mapping of property name to schema")
        props = None
    for name, sub in (props or {}).items():
        sub_path = f"{path}.properties[{name}]"
        if level == _ROOT and name == "metadata":
            _check_root_metadata(sub, sub_path, add)
            continue
        if (
            level == _ROOT
            and name in ("apiVersion", "kind")
            and isinstance(sub, dict)
            and sub.get("type") != "string"
        ):
            add(f"{sub_path}.type", f"is {sub.get('type')!r}, must be string")
        _check_schema(sub, sub_path, _FIELD, add)
    _check_list_and_map_types(s, path, add)
    _check_junctors(s, path, s, add)


def _check_root_metadata(m: Any, path: str, add: Report) -> None:
    # schema/validation.go validateStructuralMetadataInvariants.
    if not isinstance(m, dict):
        add(path, "must be a schema object")
        return
    if m.get("type") != "object":
        add(f"{path}.type", f"is {m.get('type')!r}, must be object")
    props = m.get("properties") or {}
    bad = sorted(set(m) - {"type", "properties"}) + sorted(set(props) - {"name", "generateName"})
    if bad:
        add(
            path,
            f"Forbidden: must not specify anything other than name and generateName, but metadata is "
            f"implicitly specified (found {', '.join(bad)}); use just {{type: object}}",
        )


def _check_list_and_map_types(s: Schema, path: str, add: Report) -> None:
    # ValidateCustomResourceDefinitionOpenAPISchema: x-kubernetes-list-type / map-type rules.
    list_type, map_type, keys = (
        s.get("x-kubernetes-list-type"),
        s.get("x-kubernetes-map-type"),
        s.get("x-kubernetes-list-map-keys"),
    )
    if map_type is not None:
        if s.get("type") != "object":
            add(f"{path}.type", "must be object if x-kubernetes-map-type is specified")
        if map_type not in ("atomic", "granular"):
            add(f"{path}.x-kubernetes-map-type", f"{map_type!r} is not one of atomic, granular")
    if keys and list_type != "map":
        add(f"{path}.x-kubernetes-list-type", "must be map if x-kubernetes-list-map-keys is non-empty")
    if list_type is None:
        return
    if s.get("type") != "array":
        add(f"{path}.type", "must be array if x-kubernetes-list-type is specified")
    if list_type not in ("atomic", "set", "map"):
        add(f"{path}.x-kubernetes-list-type", f"{list_type!r} is not one of atomic, set, map")
    items = _mapping(s.get("items"))
    atomic = items.get("type") == "array" or items.get("x-kubernetes-map-type") == "atomic"
    if list_type == "set" and items.get("type") in ("object", "array") and not atomic:
        add(
            f"{path}.items",
            "must be atomic (scalar, or x-kubernetes-map-type: atomic) as item of a list "
            "with x-kubernetes-list-type=set",
        )
    if list_type == "map":
        if not keys:
            add(f"{path}.x-kubernetes-list-map-keys", "must not be empty if x-kubernetes-list-type is map")
        if items.get("type") != "object":
            add(f"{path}.items.type", "must be object if parent array's x-kubernetes-list-type is map")
        item_props = items.get("properties") or {}
        for key in keys or []:
            if key not in item_props:
                add(f"{path}.x-kubernetes-list-map-keys", f"{key!r} must be the name of an item property")
            elif item_props[key].get("type") in ("object", "array"):
                add(f"{path}.items.properties[{key}].type", "must be a scalar type for a list-map key")
            elif key not in (items.get("required") or []) and "default" not in item_props[key]:
                add(
                    f"{path}.items.properties[{key}].default",
                    "this property is in "
                    "x-kubernetes-list-map-keys, so it must have a default or be a required property",
                )


def _is_int_or_string_pattern(branches: Any) -> bool:
    return bool(branches == [{"type": "integer"}, {"type": "string"}])


def _check_junctors(s: Schema, path: str, structural: Schema | None, add: Report) -> None:
    """allOf/anyOf/oneOf/not below ``s``; ``structural`` is the schema node they must stay within."""
    int_or_string = isinstance(structural, dict) and structural.get(_INT_OR_STRING) is True
    for key in ("allOf", "anyOf", "oneOf"):
        branches = s.get(key)
        if branches is None:
            continue
        if not isinstance(branches, list):
            add(f"{path}.{key}", "must be a list of schemas")
            continue
        # schema/validation.go: the two int-or-string exceptions (anyOf or allOf[0].anyOf of integer|string).
        if key == "anyOf" and int_or_string and _is_int_or_string_pattern(branches):
            continue
        for i, branch in enumerate(branches):
            skip_any_of = (
                key == "allOf"
                and i == 0
                and int_or_string
                and isinstance(branch, dict)
                and _is_int_or_string_pattern(branch.get("anyOf"))
            )
            _check_nested(branch, f"{path}.{key}[{i}]", structural, add, skip_any_of)
    if "not" in s:
        _check_nested(s["not"], f"{path}.not", structural, add, False)


def _check_nested(v: Any, path: str, structural: Schema | None, add: Report, skip_any_of: bool) -> None:
    """schema/validation.go validateNestedValueValidation + complete.go (value validation only)."""
    if not isinstance(v, dict):
        add(path, "must be a schema object")
        return
    _check_keywords(v, path, add)
    for key, why in _NESTED_FORBIDDEN.items():
        if key in v and not (key == "type" and skip_any_of):
            add(
                f"{path}.{key}",
                f"Forbidden: {why} (inside allOf/anyOf/oneOf/not only value validations "
                "such as enum, pattern, minimum, required are allowed)",
            )
    s_props = (structural or {}).get("properties") or {}
    for name, sub in (v.get("properties") or {}).items():
        sub_path = f"{path}.properties[{name}]"
        if name == "metadata":
            add(sub_path, "Forbidden: must not be specified in a nested context")
        if name not in s_props:
            # complete.go: every field named under a junctor must exist in the structural schema.
            add(
                sub_path,
                "Required value: the property must also be specified outside of "
                "allOf/anyOf/oneOf/not (structural schemas are complete)",
            )
        _check_nested(sub, sub_path, s_props.get(name), add, False)
    if "items" in v:
        s_items = (structural or {}).get("items")
        if not isinstance(s_items, dict):
            add(
                f"{path}.items",
                "Required value: items must also be specified outside of allOf/anyOf/oneOf/not",
            )
        _check_nested(v["items"], f"{path}.items", s_items if isinstance(s_items, dict) else None, add, False)
    if skip_any_of:
        v = {k: val for k, val in v.items() if k != "anyOf"}
    _check_junctors(v, path, structural, add)


# --------------------------------------------------------------------------------------------------
# QoSNodeStatus: what one node runs, written only by that node's daemon
# --------------------------------------------------------------------------------------------------

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


def qosd_crds() -> list[dict[str, Any]]:
    """Every CRD qosd serves, in install order: QoSPolicy, then QoSNodeStatus."""
    from engine.resources import load_schema

    return [build_crd(load_schema("policy")), build_node_status_crd()]
