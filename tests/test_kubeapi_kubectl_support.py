"""The pieces of the emulator kubectl relies on, table-driven without kubectl: content negotiation of
discovery and Table output, the printer columns' JSONPath, HumanDuration, fieldsV1 encoding, and the
OpenAPI v3 document (GVK tags, the fieldValidation parameter kubectl looks for, patch strategies)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.kubeapi import ApiServer, apply, discovery, openapi, table
from tests.kubeapi.kinds import install_kinds
from tests.kubeapi.registry import builtin_types


@pytest.mark.parametrize(
    ("accept", "aggregated"),
    [
        # kubectl 1.32's discovery client
        (
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json",
            True,
        ),
        # only v2beta1 then JSON: v2beta1 is not served, so the legacy form
        ("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json", False),
        ("application/json", False),
        ("", False),
        ("*/*", False),
        # client order decides: JSON first wins even if v2 is listed later
        ("application/json, application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList", False),
    ],
)
def test_discovery_negotiation(accept: str, aggregated: bool) -> None:
    assert discovery.wants_aggregated(accept) is aggregated


@pytest.mark.parametrize(
    ("accept", "wanted"),
    [
        (
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json",
            True,
        ),
        ("application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json", False),
        ("application/json", False),
        ("application/yaml", False),
    ],
)
def test_table_negotiation(accept: str, wanted: bool) -> None:
    assert table.wants_table(accept) is wanted


OBJ: dict[str, Any] = {
    "spec": {"priority": 20, "flag": True, "tags": ["a", "b"]},
    "status": {
        "conditions": [
            {"type": "Valid", "status": "True", "reason": "Compiled"},
            {"type": "Ready", "status": "False"},
        ],
        "nodes": {"applied": 0},
    },
    "metadata": {"labels": {"app.kubernetes.io/name": "qosd"}},
}


@pytest.mark.parametrize(
    ("path", "found"),
    [
        (".spec.priority", [20]),
        ("{.spec.priority}", [20]),
        (".spec.missing", []),
        (".spec.tags[1]", ["b"]),
        (".spec.tags[-1]", ["b"]),
        (".spec.tags[5]", []),
        (".spec.tags[*]", ["a", "b"]),
        (".status.nodes.applied", [0]),
        ('.status.conditions[?(@.type=="Valid")].status', ["True"]),
        ('.status.conditions[?(@.type=="Gone")].status', []),
        ('.status.conditions[?(@.type!="Valid")].type', ["Ready"]),
        (".metadata.labels['app.kubernetes.io/name']", ["qosd"]),
        (".spec.flag", [True]),
    ],
)
def test_printer_column_jsonpath(path: str, found: list[Any]) -> None:
    assert table.jsonpath(OBJ, path) == found


def test_jsonpath_outside_the_subset_is_an_error() -> None:
    with pytest.raises(ValueError, match="unsupported JSONPath"):
        table.jsonpath(OBJ, ".spec..priority")


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (-5, "<invalid>"),
        (-1, "0s"),
        (0, "0s"),
        (119, "119s"),
        (120, "2m"),
        (150, "2m30s"),
        (600, "10m"),
        (179 * 60, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 60, "3h1m"),
        (8 * 3600, "8h"),
        (47 * 3600, "47h"),
        (48 * 3600, "2d"),
        (50 * 3600, "2d2h"),
        (8 * 86400, "8d"),
        (2 * 365 * 86400, "2y"),
        (2 * 365 * 86400 + 86400, "2y1d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_human_duration(seconds: int, shown: str) -> None:
    assert table.human_duration(seconds) == shown


def _daemonset_type() -> Any:
    return next(rt for rt in install_kinds() if rt.kind == "DaemonSet")


@given(
    st.recursive(
        st.one_of(st.integers(), st.text(max_size=3), st.booleans()),
        lambda children: st.dictionaries(st.text(min_size=1, max_size=4), children, min_size=1, max_size=3),
        max_leaves=10,
    )
)
def test_fields_v1_round_trips(spec: Any) -> None:
    rt = _daemonset_type()
    fields = apply.field_set(rt, {"spec": spec})
    assert apply.decode_fields(apply.encode_fields(fields)) == fields


def test_field_set_keys_associative_lists_and_skips_server_metadata() -> None:
    rt = _daemonset_type()
    obj = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "d", "uid": "u", "labels": {"a": "1"}},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i", "args": ["x"]}]}}},
        "status": {"numberReady": 1},
    }
    encoded = apply.encode_fields(apply.field_set(rt, obj))
    assert encoded == {
        "f:metadata": {"f:labels": {"f:a": {}}},
        "f:spec": {
            "f:template": {
                "f:spec": {
                    "f:containers": {'k:{"name":"c"}': {".": {}, "f:args": {}, "f:image": {}, "f:name": {}}}
                }
            }
        },
    }


def test_openapi_document_tags_kinds_and_advertises_field_validation() -> None:
    types = builtin_types() + install_kinds()
    doc = openapi.document(types, "apps", "v1")
    assert doc is not None
    schemas = doc["components"]["schemas"]
    tagged = {
        json.dumps(g, sort_keys=True): name
        for name, s in schemas.items()
        for g in s.get("x-kubernetes-group-version-kind", [])
    }
    ds_name = tagged[json.dumps({"group": "apps", "kind": "DaemonSet", "version": "v1"}, sort_keys=True)]
    patch = doc["paths"]["/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "apps", "version": "v1", "kind": "DaemonSet"}
    assert {p["name"] for p in patch["parameters"]} >= {"fieldValidation", "fieldManager", "dryRun"}
    pod_spec = schemas["io.k8s.api.v1.PodSpec"]
    containers = pod_spec["properties"]["containers"]
    assert (containers["x-kubernetes-patch-strategy"], containers["x-kubernetes-patch-merge-key"]) == (
        "merge",
        "name",
    )
    assert "containers" in pod_spec["required"]
    assert schemas[ds_name]["properties"]["spec"]["allOf"] == [
        {"$ref": "#/components/schemas/io.k8s.api.v1.DaemonSetSpec"}
    ]
    assert openapi.document(types, "nosuch.io", "v1") is None


def test_openapi_index_points_at_each_group_version() -> None:
    with ApiServer() as server:
        found = openapi.serve("/openapi/v3", server.registry.types())
        assert found is not None
        index = found[0]["paths"]
        assert {"api/v1", "apis/apps/v1", "apis/apiextensions.k8s.io/v1"} <= set(index)
        assert index["apis/apps/v1"]["serverRelativeURL"].startswith("/openapi/v3/apis/apps/v1?hash=")
