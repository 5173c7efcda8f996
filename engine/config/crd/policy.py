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

The offline structural check of a CRD, which only the tests use, is tests/crdcheck.py.
"""

from __future__ import annotations

import copy
from typing import Any

from engine.config.schema_check import recursive_defs

Schema = dict[str, Any]

GROUP = "qosd.io"
VERSION = "v1alpha1"
KIND = "QoSPolicy"
PLURAL = "qospolicies"
SINGULAR = "qospolicy"
CRD_NAME = f"{PLURAL}.{GROUP}"

PRESERVE = "x-kubernetes-preserve-unknown-fields"
INT_OR_STRING = "x-kubernetes-int-or-string"

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
_KEY_ORDER = ("type", INT_OR_STRING, PRESERVE, "description", "title")
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
KUBE_EXTENSIONS = frozenset(
    {
        PRESERVE,
        INT_OR_STRING,
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
            return {PRESERVE: True}
        if not isinstance(node, dict):
            raise CrdSchemaError(f"{path}: expected a schema object, got {node!r}")
        if "$ref" in node:
            return self._inline(node, path, templated)
        for key in node:
            if (
                key not in _HANDLED
                and key not in _DROPPED
                and key not in KUBE_EXTENSIONS
                and not key.startswith("x-qosd-")
            ):
                raise CrdSchemaError(
                    f"{path}: JSON Schema keyword {key!r} has no CRD translation in engine/config/crd.py; "
                    "express the constraint differently or teach _Converter about it"
                )
        kube = {k: v for k, v in node.items() if k in KUBE_EXTENSIONS}
        if "oneOf" in node or "anyOf" in node:
            return {**self._union(node, path, templated), **kube}
        types = self._types(node)
        if isinstance(node.get("type"), list):
            # type: [a, b] is a union of one branch per type.
            rest = {k: v for k, v in node.items() if k not in ("type", *_ANNOTATIONS)}
            branches = [self.convert({**rest, "type": t}, path, templated) for t in node["type"]]
            return {**self._widen(branches, _annotations(node)), **kube}
        if not types:
            return {PRESERVE: True, **_annotations(node)}  # annotation-only schema: anything goes
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
        out[PRESERVE] = True
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
            if branch.get(INT_OR_STRING):
                kinds |= {"integer", "string"}
            elif isinstance(branch.get("type"), str):
                kinds.add(branch["type"])
            else:
                return {PRESERVE: True, **annotations}  # one branch accepts anything
        if kinds == {"integer", "string"}:
            return {INT_OR_STRING: True, **annotations}
        if len(kinds) == 1 and kinds <= _SCALARS:
            # Same type, different constraints: branch-specific enum/pattern/bounds are checked by qosd.
            return {"type": kinds.pop(), **annotations}
        if kinds == {"object"}:
            return {"type": "object", **annotations, PRESERVE: True}
        if kinds == {"array"}:
            return {"type": "array", **annotations, "items": {PRESERVE: True}}
        return {PRESERVE: True, **annotations}

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
            out[PRESERVE] = True  # open object
        elif isinstance(extra, dict):
            converted = self.convert(extra, f"{path}.*", templated)
            if props:
                # properties + additionalProperties schema is forbidden (validation.go: "additionalProperties
                # and properties are mutual exclusive"): keep the named fields, keep the rest unvalidated.
                out[PRESERVE] = True
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
            out["items"] = {PRESERVE: True}
        else:
            out["items"] = self._widen(candidates, {})
        scalar_items = out["items"].get("type") in _SCALARS or out["items"].get(INT_OR_STRING)
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
            marker = {INT_OR_STRING: True} if kind == "integer" else {PRESERVE: True}
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
