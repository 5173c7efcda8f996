"""Zone values into a node's NodeResourceTopology (engine/adapters/nrt.py).

The zone update is Koordinator's UpdateNRTZoneListIfNeeded (koordinator-sh/koordinator a7a1b76,
pkg/slo-controller/noderesource/plugins/util/util.go): set the resource in every zone that has a
value, append it (resources kept sorted by name) where missing, reset it to 0 in zones without one.
The Kubernetes part runs the official client over real HTTP against the in-repo API emulator
(tests/kubeapi) serving the NodeResourceTopology CRD of tests/test_kube_daemon.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from engine.adapters.nrt import TopologyZones, has_resources, updated_zones
from tests.kubeapi import ApiServer
from tests.test_kube_daemon import NRT_CRD

R = "kubernetes.io/batch-cpu"
NODE = "n1"


def resource(name: str, value: str) -> dict[str, str]:
    return {"name": name, "capacity": value, "allocatable": value, "available": value}


def zone(name: str, *extra: dict[str, str]) -> dict[str, Any]:
    return {
        "name": name,
        "type": "Node",
        "resources": [resource("cpu", "50"), resource("memory", "62G"), *extra],
    }


def test_a_missing_entry_is_added_in_name_order_and_a_zone_without_a_value_is_reset() -> None:
    zones = [zone("node-0"), zone("node-1", resource(R, "9000")), zone("node-2")]
    new, changes = updated_zones(zones, R, {"node-0": "10000"})
    assert [r["name"] for r in new[0]["resources"]] == [
        "cpu",
        R,
        "memory",
    ]  # sorted: "cpu" < "kubernetes.io/..." < "memory"
    assert new[0]["resources"][1] == resource(R, "10000")
    assert new[1]["resources"][2] == resource(R, "0")
    assert new[2] == zone("node-2")  # no entry there: nothing to reset
    assert changes == ["node-0 10000", "node-1 reset"]
    assert zones[1]["resources"][2] == resource(R, "9000")  # the input is not modified


def test_equal_quantities_are_no_change_and_a_stale_field_is() -> None:
    """The API server may store "15300000000" as "15300M": values are compared, not strings."""
    zones = [zone("node-0", resource(R, "15300M"))]
    assert updated_zones(zones, R, {"node-0": "15300000000"})[1] == []
    stale = zone("node-0", {**resource(R, "7"), "available": "6"})
    new, changes = updated_zones([stale], R, {"node-0": "7"})
    entry = next(r for r in new[0]["resources"] if r["name"] == R)
    assert entry == resource(R, "7") and changes == ["node-0 6 -> 7"]
    assert updated_zones([zone("node-0", resource(R, "0"))], R, {})[1] == []  # already reset


def test_koordinator_writes_only_once_the_agent_reported_cpu_and_memory() -> None:
    assert has_resources([zone("node-0")])
    assert not has_resources([{"name": "node-0", "resources": [resource("cpu", "1")]}])
    assert not has_resources([])


# ------------------------------------------------------------------ against the API emulator


@pytest.fixture
def nrt_api(apiserver: ApiServer) -> ApiServer:
    apiserver.install_crd(NRT_CRD)
    return apiserver


def put_nrt(api: ApiServer, *zones: dict[str, Any]) -> None:
    api.put(
        {
            "apiVersion": "topology.node.k8s.io/v1alpha1",
            "kind": "NodeResourceTopology",
            "metadata": {"name": NODE},
            "topologyPolicies": ["None"],
            "zones": list(zones),
        }
    )


def batch(api: ApiServer) -> dict[str, str]:
    obj = api.get("topology.node.k8s.io/v1alpha1", "NodeResourceTopology", NODE) or {}
    return {z["name"]: r["allocatable"] for z in obj["zones"] for r in z["resources"] if r["name"] == R}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_missing_object_is_skipped_and_checked_again_after_the_interval(nrt_api: ApiServer) -> None:
    clock = Clock()
    zones = TopologyZones(nrt_api.api_client(), NODE, clock=clock, recheck=60.0)
    status, detail, calls = zones.publish(R, {"node-0": "1000"})
    assert (status, calls) == ("skipped", 1) and "does not exist" in detail
    put_nrt(nrt_api, zone("node-0"))
    assert zones.publish(R, {"node-0": "1000"})[::2] == ("skipped", 0)  # within the interval: no request
    clock.now = 61.0
    assert zones.publish(R, {"node-0": "1000"})[::2] == ("applied", 2)  # GET, PUT
    assert batch(nrt_api) == {"node-0": "1000"}
    assert zones.publish(R, {"node-0": "1000"})[::2] == ("unchanged", 0)
    assert zones.publish(R, {"node-0": "2000"})[::2] == ("applied", 2)  # a new value is written at once
    assert batch(nrt_api) == {"node-0": "2000"}


def test_an_object_without_cpu_and_memory_is_left_alone(nrt_api: ApiServer) -> None:
    put_nrt(nrt_api, {"name": "node-0", "type": "Node", "resources": [resource("cpu", "1")]})
    status, detail, _ = TopologyZones(nrt_api.api_client(), NODE).publish(R, {"node-0": "1000"})
    assert status == "skipped" and "no zone with cpu and memory" in detail
    assert nrt_api.requests.matching("PUT", r"/noderesourcetopologies/") == []


def test_a_conflict_reads_again_and_retries(nrt_api: ApiServer) -> None:
    put_nrt(nrt_api, zone("node-0"), zone("node-1"))
    nrt_api.fail_next(1, 409, method="PUT", path=r"/noderesourcetopologies/")
    status, detail, calls = TopologyZones(nrt_api.api_client(), NODE).publish(
        R, {"node-0": "1", "node-1": "2"}
    )
    assert (status, calls) == ("applied", 4), detail
    assert batch(nrt_api) == {"node-0": "1", "node-1": "2"}


def test_a_refused_update_fails_with_the_servers_reason(nrt_api: ApiServer) -> None:
    put_nrt(nrt_api, zone("node-0"))
    nrt_api.fail_next(1, 500, method="PUT", path=r"/noderesourcetopologies/")
    zones = TopologyZones(nrt_api.api_client(), NODE)
    status, detail, _ = zones.publish(R, {"node-0": "1"})
    assert status == "failed" and detail.startswith(f"updating NodeResourceTopology {NODE} failed: HTTP 500")
    assert zones.publish(R, {"node-0": "1"})[0] == "applied"  # a failure is not remembered
