"""The generated QoSPolicy CRD: structural, accepted by the official client model, and as strict as the files.

No kube-apiserver can run here, so these tests stand in for `kubectl apply -f crd.yaml`: the offline
checker must pass the generated CRD and must catch each mistake the API server would reject.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator
from kubernetes.client import ApiClient, V1CustomResourceDefinition, V1JSONSchemaProps

from engine.config.crd.policy import CrdSchemaError, build_crd, openapi_schema
from engine.resources import load_schema
from tests.crdcheck import JSON_SCHEMA_PROPS_KEYS, check_structural

REPO = Path(__file__).resolve().parents[1]
ROOT = "spec.versions[0].schema.openAPIV3Schema"
SPEC = f"{ROOT}.properties[spec]"

Crd = dict[str, Any]


@pytest.fixture
def crd() -> Crd:
    return build_crd(load_schema("policy"))


def _schema(crd: Crd) -> dict[str, Any]:
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _spec(crd: Crd) -> dict[str, Any]:
    spec: dict[str, Any] = _schema(crd)["properties"]["spec"]
    return spec


# ------------------------------------------------------------------------------------------------
# The generated CRD
# ------------------------------------------------------------------------------------------------


def test_generated_crd_has_no_structural_problems(crd: Crd) -> None:
    assert check_structural(crd) == []


def test_build_is_deterministic_and_does_not_touch_the_cached_schema() -> None:
    schema = load_schema("policy")
    before = json.dumps(schema, sort_keys=True)
    first, second = build_crd(schema), build_crd(schema)
    assert json.dumps(first) == json.dumps(second)
    _spec(first)["properties"]["mode"]["enum"].append("mutated")  # callers may edit their copy
    assert json.dumps(schema, sort_keys=True) == before


def test_names_scope_and_single_served_storage_version(crd: Crd) -> None:
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "qospolicies.qosd.io"
    assert spec["group"] == "qosd.io" and spec["scope"] == "Cluster"
    assert spec["names"] == {
        "kind": "QoSPolicy",
        "listKind": "QoSPolicyList",
        "plural": "qospolicies",
        "singular": "qospolicy",
        "shortNames": ["qosp"],
        "categories": ["qosd"],
    }
    [version] = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)


def test_status_subresource_and_printer_columns(crd: Crd) -> None:
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    expected = {
        "Priority": (".spec.priority", "integer"),
        "Mode": (".spec.mode", "string"),
        "Valid": ('.status.conditions[?(@.type=="Valid")].status', "string"),
        "Applied": (".status.nodes.applied", "integer"),
        "Age": (".metadata.creationTimestamp", "date"),
    }
    for name, (path, kind) in expected.items():
        assert (columns[name]["jsonPath"], columns[name]["type"]) == (path, kind), name
        assert columns[name].get("priority", 0) == 0, f"{name} must show without -o wide"


def test_status_is_a_real_schema_and_not_templated(crd: Crd) -> None:
    status = _schema(crd)["properties"]["status"]
    conditions = status["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    item = conditions["items"]
    assert set(item["properties"]) == {
        "type",
        "status",
        "observedGeneration",
        "lastTransitionTime",
        "reason",
        "message",
    }
    assert item["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
    nodes = status["properties"]["nodes"]["properties"]
    for counter in ("matched", "applied", "failed"):
        assert nodes[counter]["type"] == "integer"  # status is written by qosd: no templates there
    errors = nodes["recentErrors"]
    assert errors["maxItems"] <= 20
    assert {"node", "generation", "hash", "message"} <= set(errors["items"]["properties"])
    assert status["properties"]["observedGeneration"]["type"] == "integer"


def test_spec_leaves_follow_the_template_rule(crd: Crd) -> None:
    spec = _spec(crd)
    assert "template" in spec["description"].lower()
    priority = spec["properties"]["priority"]
    assert priority.get("x-kubernetes-int-or-string") is True and "type" not in priority
    assert (priority["minimum"], priority["maximum"]) == (-1000000, 1000000)
    size = spec["properties"]["pools"]["items"]["properties"]["size"]["properties"]
    assert size["fromRequests"] == {
        "x-kubernetes-preserve-unknown-fields": True,
        "description": size["fromRequests"]["description"],
        "minimum": 0,
        "exclusiveMinimum": True,
    }
    assert size["remainder"]["x-kubernetes-preserve-unknown-fields"] is True
    assert spec["properties"]["mode"] == {
        "type": "string",
        "description": spec["properties"]["mode"]["description"],
        "enum": ["enforce", "audit"],
    }


def test_recursive_condition_is_opaque_and_says_why(crd: Crd) -> None:
    rule = _spec(crd)["properties"]["rules"]["items"]["properties"]
    for key in ("when", "clearWhen"):
        when = rule[key]
        assert when["type"] == "object" and when["x-kubernetes-preserve-unknown-fields"] is True
        assert "properties" not in when and "additionalProperties" not in when
        assert "qosd validates it after loading" in when["description"]


def test_metadata_and_meta_fields_are_plain(crd: Crd) -> None:
    props = _schema(crd)["properties"]
    assert props["metadata"] == {"type": "object"}
    assert props["apiVersion"]["type"] == props["kind"]["type"] == "string"
    assert _schema(crd)["required"] == ["spec"]


def _schema_nodes(node: Any) -> Iterator[dict[str, Any]]:
    """Every schema object below ``node`` (not the property names, which may be any word)."""
    if not isinstance(node, dict):
        return
    yield node
    for sub in (node.get("properties") or {}).values():
        yield from _schema_nodes(sub)
    for key in ("items", "additionalProperties", "not"):
        yield from _schema_nodes(node.get(key))
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in node.get(key) or []:
            yield from _schema_nodes(sub)


def test_no_json_schema_only_keyword_or_union_survives(crd: Crd) -> None:
    banned = {
        "$ref",
        "$defs",
        "$schema",
        "$id",
        "const",
        "prefixItems",
        "propertyNames",
        "examples",
        "oneOf",
        "anyOf",
        "allOf",
        "not",
        "uniqueItems",
    }
    nodes = list(_schema_nodes(_schema(crd)))
    assert len(nodes) > 100  # the walk really covers the schema
    assert [sorted(banned & set(n)) for n in nodes if banned & set(n)] == []


# ------------------------------------------------------------------------------------------------
# The checker catches what the API server rejects
# ------------------------------------------------------------------------------------------------

Mutation = Callable[[Crd], None]


def _set(path: list[str | int], value: Any) -> Mutation:
    def mutate(crd: Crd) -> None:
        node: Any = crd
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return mutate


def _del(path: list[str | int]) -> Mutation:
    def mutate(crd: Crd) -> None:
        node: Any = crd
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]

    return mutate


V: list[str | int] = ["spec", "versions", 0]
S: list[str | int] = [*V, "schema", "openAPIV3Schema"]
SP: list[str | int] = [*S, "properties", "spec", "properties"]


def _second_storage_version(crd: Crd) -> None:
    extra = copy.deepcopy(crd["spec"]["versions"][0])
    extra["name"] = "v1beta1"
    crd["spec"]["versions"].append(extra)


NEGATIVE_CASES: list[tuple[str, Mutation, str]] = [
    ("missing type", _del([*SP, "mode", "type"]), f"{SPEC}.properties[mode].type"),
    (
        "missing type on array items",
        _del([*SP, "classes", "items", "type"]),
        f"{SPEC}.properties[classes].items.type",
    ),
    ("$ref left in", _set([*SP, "reclaim"], {"$ref": "#/$defs/reclaim"}), f"{SPEC}.properties[reclaim].$ref"),
    (
        "$schema left in",
        _set([*S, "$schema"], "https://json-schema.org/draft/2020-12/schema"),
        f"{ROOT}.$schema",
    ),
    (
        "properties + additionalProperties false",
        _set([*S, "properties", "spec", "additionalProperties"], False),
        f"{SPEC}.additionalProperties",
    ),
    (
        "properties + additionalProperties schema",
        _set([*S, "properties", "spec", "additionalProperties"], {"type": "string"}),
        f"{SPEC}.additionalProperties",
    ),
    (
        "type inside oneOf",
        _set([*SP, "mode", "oneOf"], [{"type": "string"}, {"type": "integer"}]),
        f"{SPEC}.properties[mode].oneOf[0].type",
    ),
    (
        "description inside anyOf",
        _set([*SP, "mode", "anyOf"], [{"description": "x"}]),
        f"{SPEC}.properties[mode].anyOf[0].description",
    ),
    (
        "property only inside allOf",
        _set([*SP, "reclaim", "allOf"], [{"properties": {"bogus": {"minLength": 1}}}]),
        f"{SPEC}.properties[reclaim].allOf[0].properties[bogus]",
    ),
    (
        "metadata inside not",
        _set([*S, "not"], {"properties": {"metadata": {"required": ["x"]}}}),
        f"{ROOT}.not.properties[metadata]",
    ),
    ("const keyword", _set([*SP, "mode", "const"], "enforce"), f"{SPEC}.properties[mode].const"),
    ("uniqueItems", _set([*SP, "classes", "uniqueItems"], True), f"{SPEC}.properties[classes].uniqueItems"),
    (
        "2020-12 numeric exclusiveMinimum",
        _set([*SP, "priority", "exclusiveMinimum"], 0),
        f"{SPEC}.properties[priority].exclusiveMinimum",
    ),
    (
        "tuple items",
        _set([*SP, "classes", "items"], [{"type": "string"}]),
        f"{SPEC}.properties[classes].items",
    ),
    ("array without items", _del([*SP, "classes", "items"]), f"{SPEC}.properties[classes].items"),
    ("type list", _set([*SP, "mode", "type"], ["string", "integer"]), f"{SPEC}.properties[mode].type"),
    (
        "int-or-string with preserve",
        _set([*SP, "priority", "x-kubernetes-preserve-unknown-fields"], True),
        f"{SPEC}.properties[priority].x-kubernetes-preserve-unknown-fields",
    ),
    (
        "preserve false",
        _set([*SP, "mode", "x-kubernetes-preserve-unknown-fields"], False),
        f"{SPEC}.properties[mode].x-kubernetes-preserve-unknown-fields",
    ),
    ("lookahead pattern", _set([*SP, "mode", "pattern"], "^(?!x)"), f"{SPEC}.properties[mode].pattern"),
    (
        "list-type map without keys",
        _set([*SP, "classes", "x-kubernetes-list-type"], "map"),
        f"{SPEC}.properties[classes].x-kubernetes-list-map-keys",
    ),
    (
        "additionalProperties at root",
        _set([*S, "additionalProperties"], False),
        f"{ROOT}.additionalProperties",
    ),
    ("root not an object", _set([*S, "type"], "array"), f"{ROOT}.type"),
    (
        "kind not a string",
        _set([*S, "properties", "kind", "type"], "object"),
        f"{ROOT}.properties[kind].type",
    ),
    (
        "metadata restricts more than name",
        _set(
            [*S, "properties", "metadata"],
            {"type": "object", "properties": {"name": {"type": "string"}, "labels": {"type": "object"}}},
        ),
        f"{ROOT}.properties[metadata]",
    ),
    (
        "metadata with a description",
        _set([*S, "properties", "metadata"], {"type": "object", "description": "x"}),
        f"{ROOT}.properties[metadata]",
    ),
    (
        "bad printer column type",
        _set([*V, "additionalPrinterColumns", 0, "type"], "int"),
        "spec.versions[0].additionalPrinterColumns[0].type",
    ),
    (
        "printer column jsonPath without leading dot",
        _set([*V, "additionalPrinterColumns", 1, "jsonPath"], "spec.mode"),
        "spec.versions[0].additionalPrinterColumns[1].jsonPath",
    ),
    (
        "printer column jsonPath unparseable",
        _set([*V, "additionalPrinterColumns", 2, "jsonPath"], '.status.conditions[?(@.type=="Valid").status'),
        "spec.versions[0].additionalPrinterColumns[2].jsonPath",
    ),
    (
        "printer column bad format",
        _set([*V, "additionalPrinterColumns", 0, "format"], "percent"),
        "spec.versions[0].additionalPrinterColumns[0].format",
    ),
    ("two storage versions", _second_storage_version, "spec.versions"),
    ("no storage version", _set([*V, "storage"], False), "spec.versions"),
    ("status subresource missing", _del([*V, "subresources"]), "spec.versions[0].subresources.status"),
    ("schema missing", _del([*V, "schema"]), f"{ROOT}"),
    ("wrong metadata.name", _set(["metadata", "name"], "qospolicy.qosd.io"), "metadata.name"),
    ("wrong apiVersion", _set(["apiVersion"], "apiextensions.k8s.io/v1beta1"), "apiVersion"),
    ("uppercase plural", _set(["spec", "names", "plural"], "QoSPolicies"), "spec.names.plural"),
    ("kind equals listKind", _set(["spec", "names", "listKind"], "QoSPolicy"), "spec.names.listKind"),
    ("bad short name", _set(["spec", "names", "shortNames"], ["q_p"]), "spec.names.shortNames[0]"),
    ("group without a dot", _set(["spec", "group"], "qosd"), "spec.group"),
    ("bad scope", _set(["spec", "scope"], "Namespace"), "spec.scope"),
]


@pytest.mark.parametrize(
    ("mutate", "expected_path"), [c[1:] for c in NEGATIVE_CASES], ids=[c[0] for c in NEGATIVE_CASES]
)
def test_checker_reports_the_problem_at_its_path(crd: Crd, mutate: Mutation, expected_path: str) -> None:
    mutate(crd)
    problems = check_structural(crd)
    assert any(p.startswith(f"{expected_path}: ") for p in problems), problems


def test_int_or_string_any_of_pattern_is_allowed(crd: Crd) -> None:
    """The one exception in the structural rules: anyOf [integer, string] under x-kubernetes-int-or-string."""
    _spec(crd)["properties"]["priority"]["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    assert check_structural(crd) == []
    del _spec(crd)["properties"]["priority"]["x-kubernetes-int-or-string"]
    _spec(crd)["properties"]["priority"]["type"] = "integer"
    assert any(".anyOf[0].type: " in p for p in check_structural(crd))


def test_checker_survives_garbage() -> None:
    assert check_structural({}) != []
    assert check_structural({"spec": {"versions": [None, {"schema": {"openAPIV3Schema": []}}]}}) != []


def test_known_keys_match_the_official_client_model() -> None:
    assert set(V1JSONSchemaProps.attribute_map.values()) == JSON_SCHEMA_PROPS_KEYS


# ------------------------------------------------------------------------------------------------
# The official kubernetes client model accepts it
# ------------------------------------------------------------------------------------------------


def _round_trip(data: Crd) -> Any:
    api = ApiClient()
    try:
        model = api._ApiClient__deserialize(data, "V1CustomResourceDefinition")  # type: ignore[attr-defined]
        assert isinstance(model, V1CustomResourceDefinition)
        return api.sanitize_for_serialization(model)  # type: ignore[no-untyped-call]
    finally:
        api.close()  # type: ignore[no-untyped-call]


def test_round_trips_through_the_kubernetes_client_model(crd: Crd) -> None:
    assert _round_trip(crd) == crd


def test_round_trip_would_notice_a_field_the_model_does_not_know(crd: Crd) -> None:
    _spec(crd)["properties"]["mode"]["const"] = "enforce"
    assert _round_trip(crd) != crd


# ------------------------------------------------------------------------------------------------
# The transformation, construct by construct
# ------------------------------------------------------------------------------------------------


def _convert(spec: dict[str, Any], defs: dict[str, Any] | None = None, where: str = "spec") -> Any:
    source: dict[str, Any] = {"type": "object", "required": ["spec"], "properties": {where: spec}}
    if defs:
        source["$defs"] = defs
    return openapi_schema(source)["properties"][where]


TRANSFORMS: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    ("const -> enum", {"type": "string", "const": "max"}, {"type": "string", "enum": ["max"]}, "status"),
    ("untyped const -> typed enum", {"const": "x"}, {"type": "string", "enum": ["x"]}, "status"),
    (
        "2020-12 exclusiveMinimum",
        {"type": "number", "exclusiveMinimum": 0},
        {"type": "number", "minimum": 0, "exclusiveMinimum": True},
        "status",
    ),
    (
        "stricter of minimum and exclusiveMinimum",
        {"type": "number", "minimum": 5, "exclusiveMinimum": 1},
        {"type": "number", "minimum": 5},
        "status",
    ),
    (
        "prefixItems -> items",
        {"type": "array", "prefixItems": [{"type": "string"}, {"type": "string"}]},
        {"type": "array", "items": {"type": "string"}},
        "status",
    ),
    (
        "mixed prefixItems -> opaque items",
        {"type": "array", "prefixItems": [{"type": "string"}, {"type": "object"}]},
        {"type": "array", "items": {"x-kubernetes-preserve-unknown-fields": True}},
        "status",
    ),
    (
        "integer|string -> int-or-string",
        {"oneOf": [{"type": "integer"}, {"type": "string"}], "description": "d"},
        {"x-kubernetes-int-or-string": True, "description": "d"},
        "status",
    ),
    (
        "other unions -> preserve",
        {"oneOf": [{"type": "number"}, {"type": "string"}]},
        {"x-kubernetes-preserve-unknown-fields": True},
        "status",
    ),
    (
        "type list -> preserve",
        {"type": ["string", "boolean"]},
        {"x-kubernetes-preserve-unknown-fields": True},
        "status",
    ),
    (
        "object union -> opaque object",
        {
            "anyOf": [
                {"type": "object", "properties": {"a": {"type": "string"}}},
                {"type": "object", "properties": {"b": {"type": "string"}}},
            ]
        },
        {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "status",
    ),
    (
        "integer in spec -> int-or-string",
        {"type": "integer", "minimum": 1, "description": "d"},
        {"x-kubernetes-int-or-string": True, "description": "d", "minimum": 1},
        "spec",
    ),
    (
        "integer in status stays integer",
        {"type": "integer", "minimum": 1},
        {"type": "integer", "minimum": 1},
        "status",
    ),
    (
        "number in spec -> preserve",
        {"type": "number", "maximum": 100},
        {"x-kubernetes-preserve-unknown-fields": True, "maximum": 100},
        "spec",
    ),
    (
        "boolean in spec -> preserve",
        {"type": "boolean", "description": "d"},
        {"x-kubernetes-preserve-unknown-fields": True, "description": "d"},
        "spec",
    ),
    (
        "additionalProperties false dropped",
        {"type": "object", "additionalProperties": False, "properties": {"a": {"type": "string"}}},
        {"type": "object", "properties": {"a": {"type": "string"}}},
        "spec",
    ),
    (
        "additionalProperties true -> preserve",
        {"type": "object", "additionalProperties": True},
        {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "spec",
    ),
    (
        "map keeps additionalProperties",
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"type": "object", "additionalProperties": {"type": "string"}},
        "spec",
    ),
    (
        "properties + additionalProperties schema",
        {
            "type": "object",
            "properties": {"a": {"type": "string"}},
            "additionalProperties": {"type": "string"},
        },
        {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
            "properties": {"a": {"type": "string"}},
        },
        "spec",
    ),
    (
        "uniqueItems strings -> set",
        {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
        "spec",
    ),
    (
        "dropped annotations",
        {
            "type": "string",
            "examples": ["a"],
            "propertyNames": {},
            "x-qosd-hint": 1,
            "default": "a",
            "$comment": "c",
        },
        {"type": "string"},
        "spec",
    ),
    (
        "annotation-only schema -> preserve",
        {"description": "anything"},
        {"x-kubernetes-preserve-unknown-fields": True, "description": "anything"},
        "status",
    ),
]


@pytest.mark.parametrize(
    ("source", "expected", "where"), [c[1:] for c in TRANSFORMS], ids=[c[0] for c in TRANSFORMS]
)
def test_transformation(source: dict[str, Any], expected: dict[str, Any], where: str) -> None:
    got = dict(_convert(source, where=where))
    if where == "spec":  # spec's description always carries the note about templates
        description = got.pop("description")
        assert "template" in description
        assert description.startswith(expected.get("description", ""))
        expected = {k: v for k, v in expected.items() if k != "description"}
    assert got == expected


def test_ref_is_inlined_with_sibling_description_winning() -> None:
    defs = {"name": {"type": "string", "pattern": "^a$", "description": "def"}}
    got = _convert(
        {"type": "object", "properties": {"n": {"$ref": "#/$defs/name", "description": "use"}}},
        defs,
        where="status",
    )
    assert got["properties"]["n"] == {"type": "string", "description": "use", "pattern": "^a$"}


def test_recursive_definition_becomes_opaque_object() -> None:
    defs = {
        "tree": {
            "type": "object",
            "description": "A tree.",
            "minProperties": 1,
            "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/tree"}}},
        }
    }
    got = _convert({"$ref": "#/$defs/tree"}, defs, where="status")
    assert got["type"] == "object" and got["x-kubernetes-preserve-unknown-fields"] is True
    assert got["minProperties"] == 1 and got["description"].startswith("A tree. Recursive")
    assert "properties" not in got


@pytest.mark.parametrize(
    "source",
    [
        {"type": "object", "if": {"required": ["a"]}, "then": {"required": ["b"]}},
        {"type": "object", "patternProperties": {"^a": {"type": "string"}}},
        {"allOf": [{"type": "string"}]},
        {"$ref": "other.json#/x"},
        {"type": "null"},
    ],
)
def test_untranslatable_constructs_fail_loudly(source: dict[str, Any]) -> None:
    with pytest.raises(CrdSchemaError):
        _convert(source)


# ------------------------------------------------------------------------------------------------
# Policy documents validate against the CRD as the API server would see them
# ------------------------------------------------------------------------------------------------


def crd_to_json_schema(node: Any) -> Any:
    """Read an openAPIV3Schema as JSON Schema 2020-12, with the API server's semantics.

    int-or-string -> integer|string; preserve-unknown-fields -> no type constraint (value validations such
    as minimum still apply to numbers, as in go-openapi); OpenAPI's boolean exclusiveMinimum -> 2020-12;
    list-type set -> uniqueItems; and an object with properties rejects unknown fields (what kubectl's
    default strict field validation reports for fields the server would prune).
    """
    if isinstance(node, list):
        return [crd_to_json_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: crd_to_json_schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not"):
            out[key] = crd_to_json_schema(value)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [crd_to_json_schema(v) for v in value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum"):
            continue
        elif not key.startswith("x-kubernetes-"):
            out[key] = value
    for bound in ("Minimum", "Maximum"):
        if node.get(f"exclusive{bound}") is True:
            out[f"exclusive{bound}"] = out.pop(bound.lower())
    if node.get("x-kubernetes-int-or-string"):
        out.setdefault("allOf", []).append({"type": ["integer", "string"]})
    if node.get("x-kubernetes-list-type") == "set":
        out["uniqueItems"] = True
    if (
        node.get("type") == "object"
        and "properties" in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
        and "additionalProperties" not in node
    ):
        out["additionalProperties"] = False
    return out


INLINE_DOCS = """
apiVersion: qosd.io/v1alpha1
kind: QoSPolicy
metadata: {name: colocation-default}
spec:
  priority: 0
  nodeSelector: {matchLabels: {qosd.io/colocation: "true"}}
  mode: enforce
  classes:
    - name: dedicated_cores
      match:
        - annotations: {katalyst.kubewharf.io/qos_level: dedicated_cores}
        - labels: {koordinator.sh/qosClass: LSE}
      cpu: {policy: exclusive, requires: [numa_binding]}
      protected: true
    - name: reclaimed_cores
      match:
        - annotations: {katalyst.kubewharf.io/qos_level: reclaimed_cores}
        - labels: {koordinator.sh/qosClass: BE}
      cpu: {policy: reclaimed, pool: reclaim, shares: 2, idle: true}
      resctrl: {l3Percent: [0, 30], mbPercent: 100}
  enhancements:
    - name: numa_binding
      from: {jsonAnnotation: katalyst.kubewharf.io/memory_enhancement, key: numa_binding}
      equals: "true"
      appliesTo: [dedicated_cores]
  pools:
    - {name: reserve, cpus: {count: 2}}
    - {name: share, size: {fromRequests: 1.0, min: 4}}
  reclaim:
    cpu:
      policy: usage
      reclaimThresholdPercent: 60
      publishAs: resource.katalyst.kubewharf.io/reclaimed_millicpu
    degradeAfter: 15m
  rules:
    - name: be-memory-evict
      when: {all: [{node.memory.usage_percent: {gte: 70}}]}
      for: 0s
      then:
        evict: {victims: {classes: [reclaimed_cores]}, orderBy: [priority, -memory.usage],
                release: {lowerPercent: 68}, cooldown: 4s, maxPerRound: 3}
---
apiVersion: qosd.io/v1alpha1
kind: QoSPolicy
metadata: {name: templated}
spec:
  priority: 10
  mode: audit
  pools:
    - {name: reclaim, size: {remainder: true, min: "{{ [4, node.numa_count] | max }}"}}
  reclaim:
    memory: {policy: usage, reclaimThresholdPercent: "{{ 60 + node.numa_count }}"}
  rules:
    - name: be-cpu-suppress
      then: {suppress: {class: reclaimed_cores, policy: cpuset, thresholdPercent: 65}}
"""


def _rule_documents() -> list[tuple[str, dict[str, Any]]]:
    docs: list[tuple[str, dict[str, Any]]] = []
    for path in sorted((REPO / "rules").rglob("*.yaml")):
        with path.open(encoding="utf-8") as fh:
            for i, doc in enumerate(yaml.safe_load_all(fh)):
                if isinstance(doc, dict) and doc.get("kind") == "QoSPolicy":
                    docs.append((f"{path.relative_to(REPO)}#{i}", doc))
    for i, doc in enumerate(yaml.safe_load_all(INLINE_DOCS)):
        docs.append((f"inline#{i}", doc))
    return docs


@pytest.fixture
def crd_validator(crd: Crd) -> Draft202012Validator:
    schema = crd_to_json_schema(_schema(crd))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _errors(validator: Draft202012Validator, doc: Any) -> list[str]:
    return [f"{e.json_path}: {e.message}" for e in validator.iter_errors(doc)]


RULE_DOCUMENTS = _rule_documents()


@pytest.mark.parametrize(("name", "doc"), RULE_DOCUMENTS, ids=[n for n, _ in RULE_DOCUMENTS])
def test_policy_document_validates_against_the_crd(
    crd_validator: Draft202012Validator, name: str, doc: dict[str, Any]
) -> None:
    assert _errors(crd_validator, doc) == [], name


def test_inline_document_without_templates_also_validates_as_a_file() -> None:
    plain = next(yaml.safe_load_all(INLINE_DOCS))
    assert _errors(Draft202012Validator(load_schema("policy")), plain) == []


def _inline(index: int) -> dict[str, Any]:
    docs: list[dict[str, Any]] = list(yaml.safe_load_all(INLINE_DOCS))
    return copy.deepcopy(docs[index])


BAD_DOCS: list[tuple[str, Mutation, str]] = [
    ("enum", _set(["spec", "mode"], "dry-run"), "$.spec.mode"),
    ("unknown field in spec", _set(["spec", "moed"], "audit"), "$.spec"),
    ("unknown field in a class", _set(["spec", "classes", 0, "protect"], True), "$.spec.classes[0]"),
    ("fraction in an integer", _set(["spec", "priority"], 1.5), "$.spec.priority"),
    ("integer out of range", _set(["spec", "priority"], 2000000), "$.spec.priority"),
    (
        "number out of range",
        _set(["spec", "classes", 1, "resctrl", "mbPercent"], 0),
        "$.spec.classes[1].resctrl.mbPercent",
    ),
    (
        "exclusive minimum",
        _set(["spec", "pools", 1, "size", "fromRequests"], 0),
        "$.spec.pools[1].size.fromRequests",
    ),
    ("template in a pattern string", _set(["spec", "rules", 0, "for"], "{{ '5s' }}"), "$.spec.rules[0].for"),
    (
        "duplicate names in a set",
        _set(["spec", "classes", 0, "cpu", "requires"], ["a", "a"]),
        "$.spec.classes[0].cpu.requires",
    ),
    ("missing required name", _del(["spec", "rules", 0, "name"]), "$.spec.rules[0]"),
]


@pytest.mark.parametrize(("mutate", "where"), [c[1:] for c in BAD_DOCS], ids=[c[0] for c in BAD_DOCS])
def test_crd_rejects_what_files_reject(
    crd_validator: Draft202012Validator, mutate: Mutation, where: str
) -> None:
    doc = _inline(0)
    mutate(doc)
    errors = _errors(crd_validator, doc)
    assert any(e.startswith(f"{where}: ") for e in errors), errors
    assert _errors(Draft202012Validator(load_schema("policy")), doc) != []  # the file path agrees
