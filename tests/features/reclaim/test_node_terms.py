"""What Koordinator's batch formulas take from outside the pods: the node's reservation annotation
(nodeReserved) and the host applications (systemUsed), engine/features/reclaim/reservation.py and
strategy.NodeTerms, then through a policy (spec.reclaim.reservationAnnotation,
systemUsedHostAppPriorities) and a facts snapshot.

Oracle numbers: TestPluginCalculate in koordinator-sh/koordinator a7a1b76,
pkg/slo-controller/noderesource/plugins/batchresource/plugin_test.go (the 100-core / 120G node of
test_reclaim.py, systemUsage 7 cores / 12G, HPUsed 33 cores / 33G) and pkg/util/node.go
GetNodeReservationResources.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
import yaml

from engine.config.pipeline import build_policy, load_documents
from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState
from engine.features.reclaim.reservation import NodeReservation, parse_reservation
from engine.features.reclaim.spec import ReclaimResource
from engine.features.reclaim.strategy import NodeTerms, reclaimable
from engine.model.facts import snapshot_from_dict
from engine.sources.snapshot_file import snapshot_to_dict
from tests.features.reclaim.test_reclaim import CPU_NODE as KOORD_CPU_NODE
from tests.features.reclaim.test_reclaim import CPU_PODS, MEM_NODE, MEM_PODS, G
from tests.features.reclaim.test_reclaim import spec as reclaim_spec

ROOT = Path(__file__).resolve().parents[3]
CPU_NODE = {**KOORD_CPU_NODE, "cpu.system_usage_cores": 7.0}


def spec(policy: str = "usage") -> ReclaimResource:
    return reclaim_spec(policy, 65)


@pytest.mark.parametrize(
    ("text", "cpu", "memory"),
    [
        ("{}", None, None),
        ('{"reservedCPUs":"0-1"}', 2.0, None),
        ('{"reservedCPUs":"0-19"}', 20.0, None),
        ('{"resources":{"cpu":"20"}}', 20.0, None),
        ('{"resources":{"cpu":"1500m"}}', 1.5, None),
        # GetNodeReservationResources: listed CPUs replace the quantity
        ('{"resources":{"cpu":"20"},"reservedCPUs":"0-9"}', 10.0, None),
        ('{"resources":{"memory":"20G"}}', None, 20.0 * G),
        ('{"resources":{"memory":"5G","cpu":"2"}}', 2.0, 5.0 * G),
        ('{"resources":{"memory":"20G"},"reservedCPUs":"0-9"}', 10.0, 20.0 * G),
        ('{"reservedCPUs":"0,2,4,6","applyPolicy":"ReservedCPUsOnly"}', 4.0, None),
    ],
)
def test_reservation_annotation(text: str, cpu: float | None, memory: float | None) -> None:
    r = parse_reservation(text)
    assert (r.cpu, r.memory, r.problem) == (cpu, memory, None)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{", "not JSON"),
        ("[1]", "not a JSON object"),
        ('{"resources": 3}', "resources is not an object"),
        ('{"resources":{"cpu":"lots"}}', "resources.cpu: 'lots' is not a quantity"),
        ('{"resources":{"memory":"-5G"}}', "resources.memory:"),
        ('{"reservedCPUs":"9-0"}', "reservedCPUs: range '9-0'"),
    ],
)
def test_a_reservation_that_does_not_parse_reserves_nothing_and_says_why(text: str, problem: str) -> None:
    """Koordinator logs the error and reserves nothing (GetNodeReservationFromAnnotation returns nil)."""
    r = parse_reservation(text)
    assert (r.cpu, r.memory) == (None, None)
    assert r.problem is not None and r.problem.startswith(problem), r.problem


@pytest.mark.parametrize(
    ("resource", "policy", "reserved", "kubelet", "expected", "case"),
    [
        # 2 reserved CPUs < 7 cores of system usage: 100 - 35 - 7 - 33
        ("cpu", "usage", 2.0, 0.0, 25.0, "reserve specific cpus ... left equal sys.used"),
        # 20 > 7: 100 - 35 - 20 - 33
        ("cpu", "usage", 20.0, 0.0, 12.0, "reserve specific cpus ... right equal sys.used"),
        ("cpu", "usage", 10.0, 0.0, 22.0, "reserve memory and cpu ... right equal sys.used"),
        # kubelet reserves 10 (allocatable 90) over the annotation's 2
        ("cpu", "usage", 2.0, 10.0, 22.0, "... which kubelet reserved is the biggest"),
        # 20G > 12G of system memory: 120 - 42 - 20 - 33
        ("memory", "usage", 20.0 * G, 0.0, 25.0 * G, "reserve memory ... right equal sys.used"),
        ("memory", "usage", 5.0 * G, 0.0, 33.0 * G, "reserve memory ... left equal sys.used"),
        # the request policy subtracts nodeReserved whatever the usage: 120 - 42 - 5 - 60
        ("memory", "request", 5.0 * G, 0.0, 13.0 * G, "request policy, 5G annotation"),
        ("memory", "request", 5.0 * G, 20.0 * G, -2.0, "request policy, kubelet 20G wins: 0"),
    ],
)
def test_node_reserved_is_the_larger_of_kubelet_and_the_annotation(
    resource: str, policy: str, reserved: float, kubelet: float, expected: float, case: str
) -> None:
    if resource == "cpu":
        node, pods = {**CPU_NODE, "cpu.allocatable_cores": 100.0 - kubelet}, CPU_PODS
    else:
        node, pods = {**MEM_NODE, "memory.allocatable_bytes": 120.0 * G - kubelet}, MEM_PODS
    r = reclaimable(resource, spec(policy), node, pods, None, None, NodeTerms(reserved=reserved))
    assert r.value == pytest.approx(max(expected, 0.0)), case
    assert r.inputs["nodeReserved"] == pytest.approx(max(reserved, kubelet))
    assert (r.inputs["kubeletReserved"], r.inputs["annotationReserved"]) == pytest.approx((kubelet, reserved))


def test_an_unparsed_reservation_is_named_in_the_formula() -> None:
    terms = NodeTerms(reservation_problem="node.koordinator.sh/reservation: not JSON")
    r = reclaimable("cpu", spec(), CPU_NODE, CPU_PODS, None, None, terms)
    assert r.value == 25.0
    assert "reservation annotation ignored: node.koordinator.sh/reservation: not JSON" in r.formula


@pytest.mark.parametrize(
    ("outside_pods", "apps", "apps_hp", "expected", "case"),
    [
        # koordlet's systemUsage 4 = 7 - 3 outside pods; the prod application's 3 comes back: 7
        (7.0, 3.0, 3.0, 25.0, "including product host application usage"),
        # a batch application leaves systemUsed: 4 -> 100 - 35 - 4 - 33
        (7.0, 3.0, 0.0, 28.0, "including batch host application usage"),
        # never below 0 before the high-priority usage is added back
        (1.0, 3.0, 0.0, 32.0, "host applications above the measured outside-pods usage"),
    ],
)
def test_host_applications_in_system_used(
    outside_pods: float, apps: float, apps_hp: float, expected: float, case: str
) -> None:
    node = {**CPU_NODE, "cpu.system_usage_cores": outside_pods}
    r = reclaimable(
        "cpu", spec(), node, CPU_PODS, None, None, NodeTerms(host_apps_used=apps, host_apps_hp_used=apps_hp)
    )
    assert r.value == pytest.approx(expected), case
    assert (r.inputs["hostAppsUsed"], r.inputs["hostAppsSystemUsed"]) == (apps, apps_hp)


def test_memory_system_used_leaves_out_every_host_application() -> None:
    """Memory has no measured system usage: node 55G - pods 43G - the application's 6G = koordlet's
    6G; a prod application adds its 6G back (12G), a batch one does not (120 - 42 - 6 - 33 = 39G)."""
    prod = reclaimable(
        "memory",
        spec(),
        MEM_NODE,
        MEM_PODS,
        None,
        None,
        NodeTerms(host_apps_used=6.0 * G, host_apps_hp_used=6.0 * G),
    )
    batch = reclaimable("memory", spec(), MEM_NODE, MEM_PODS, None, None, NodeTerms(host_apps_used=6.0 * G))
    assert (prod.value, prod.inputs["systemUsed"]) == (33.0 * G, 12.0 * G)
    assert (batch.value, batch.inputs["systemUsed"]) == (39.0 * G, 6.0 * G)


def test_without_the_split_host_applications_stay_in_system_used() -> None:
    r = reclaimable("cpu", spec(), CPU_NODE, CPU_PODS, None, None)
    assert r.value == 25.0 and "hostAppsUsed" not in r.inputs and "kubeletReserved" not in r.inputs


# ---------------------------------------------------------------- through a policy and a snapshot


def facts(annotations: dict[str, str], apps: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "node": {
            "name": "n",
            "labels": {"qosd.io/profile": "koordinator", "node.koordinator.sh/cpu-reclaim-ratio": "0.65"},
            "annotations": annotations,
            "capacity": {"cpu": 100, "memory": 120 * G},
            "allocatable": {"cpu": 100, "memory": 120 * G},
        },
        "hostApplications": apps,
        "workloads": [
            {
                "uid": "a",
                "name": "a",
                "labels": {"koordinator.sh/qosClass": "LS"},
                "kubeQoS": "Burstable",
                "containers": [{"name": "c", "requests": {"cpu": 20, "memory": 20 * G}}],
            }
        ],
        "metrics": {
            "node": {"cpu": {"usage_cores": 40, "system_usage_cores": 7}, "memory": {"usage_bytes": 50 * G}},
            "pods": {"a": {"cpu": {"usage_cores": 33}, "memory": {"usage_bytes": 33 * G}}},
        },
    }


def published(doc: dict[str, Any]) -> dict[str, float]:
    snap = snapshot_from_dict(doc)
    policy = build_policy(load_documents([], builtin=True), snap.node)
    result = Engine(policy).evaluate(snap, EngineState())
    return {
        str(i.params["reclaims"]): float(i.params["value"]) for i in result.intents if i.kind == "publish"
    }


def test_the_koordinator_profile_reads_the_annotation_and_host_applications() -> None:
    """The bundled profile names node.koordinator.sh/reservation and the priorities above
    koord-batch. usage: cpu 100 - 35 - max(7, reserved) - 33; memory 120 - 42 - max(17 - apps, 0) +
    prod apps - 33 (node 50G - pod 33G = 17G outside pods)."""
    plain = published(facts({}, []))
    assert plain == {"cpu": 25.0, "memory": 28.0 * G}
    reserved = published(facts({"node.koordinator.sh/reservation": '{"reservedCPUs":"0-19"}'}, []))
    assert reserved["cpu"] == 12.0
    apps = [
        {"name": "db", "priority": "koord-prod", "usage": {"cpuCores": 3, "memoryBytes": 6 * G}},
        {"name": "yarn", "priority": "koord-batch", "usage": {"cpuCores": 2, "memoryBytes": 5 * G}},
    ]
    # cpu: 7 - 5 + 3 = 5 -> 100 - 35 - 5 - 33 = 27; memory: 17 - 11 + 6 = 12 -> 33
    assert published(facts({}, apps)) == {"cpu": 27.0, "memory": 33.0 * G}


def test_snapshots_carry_the_node_annotations_and_host_applications() -> None:
    apps = [
        {
            "name": "db",
            "qos": "LS",
            "priority": "koord-prod",
            "cgroupPath": {"base": "CgroupRoot", "relativePath": "host/db"},
            "usage": {"cpuCores": 3.0, "memoryBytes": 6.0 * G},
        }
    ]
    snap = snapshot_from_dict(facts({"node.koordinator.sh/reservation": "{}"}, apps))
    doc = snapshot_to_dict(snap)
    assert doc["node"]["annotations"] == {"node.koordinator.sh/reservation": "{}"}
    assert doc["hostApplications"] == apps
    again = snapshot_from_dict(doc)
    assert again.node_annotations == snap.node_annotations and again.host_apps == snap.host_apps


def test_the_profile_declares_what_the_parity_suite_relies_on() -> None:
    profile = yaml.safe_load((ROOT / "rules" / "profiles" / "koordinator.yaml").read_text())
    reclaim = profile["spec"]["reclaim"]
    assert reclaim["reservationAnnotation"] == "node.koordinator.sh/reservation"
    assert reclaim["systemUsedHostAppPriorities"] == ["koord-prod", "koord-mid"]


def test_reservation_values_are_frozen_and_cached() -> None:
    assert parse_reservation('{"reservedCPUs":"0-1"}') is parse_reservation('{"reservedCPUs":"0-1"}')
    assert replace(NodeReservation(), cpu=1.0).amount("cpu") == 1.0


def test_priority_bands_decide_high_priority_before_the_class() -> None:
    """reclaim.priorityOverrides of the koordinator profile: a BE-labelled pod in the koord-mid band
    (podMid of "calculate with pods in multiple priority classes") is HP, an LS-labelled pod in the
    koord-batch band is not, whatever their classes. cpu: 100 - 35 - 7 - (33 + 10) = 15."""
    doc = facts({}, [])

    def pod(uid: str, qos: str, priority: int, cores: float) -> dict[str, Any]:
        doc["metrics"]["pods"][uid] = {"cpu": {"usage_cores": cores}}
        return {
            "uid": uid,
            "name": uid,
            "labels": {"koordinator.sh/qosClass": qos},
            "priority": priority,
            "kubeQoS": "Burstable",
            "containers": [{"name": "c"}],
        }

    doc["workloads"] += [pod("mid", "BE", 7000, 10), pod("batch-band", "LS", 5500, 5)]
    snap = snapshot_from_dict(doc)
    engine = Engine(build_policy(load_documents([], builtin=True), snap.node))
    assert [engine.classifier.classify(w).class_name for w in snap.workloads[1:]] == ["BE", "LS"]
    assert published(doc)["cpu"] == 15.0


def test_zone_values_pass_the_update_gate_like_resources() -> None:
    """examples/snapshots/batch-koord-numa.yaml through the koordinator profile (update gate 10 %,
    5m): batch-cpu zones node-0 10, node-1 15 cores. podProd (on NUMA node 0) using 0.8 more moves
    node-0 by -8 %: held, the operation keeps the zones last published; 2 more than at first moves
    it by -20 %: the update goes through with the new zone values."""
    from engine.plan.planner import Guards
    from engine.sources.snapshot_file import load_snapshot
    from engine.tick import run_tick

    base = load_snapshot(ROOT / "examples" / "snapshots" / "batch-koord-numa.yaml")
    engine = Engine(build_policy(load_documents([], builtin=True), base.node))

    def at(offset: float, prod_cores: float) -> Any:
        pods = {
            **base.metrics.pods,
            "prod": MappingProxyType({"cpu.usage_cores": prod_cores, "memory.usage_bytes": 5.0 * G}),
        }
        return replace(base, time=base.time + offset, metrics=replace(base.metrics, pods=pods))

    state = EngineState()
    seen = []
    for offset, cores in ((0.0, 5.0), (70.0, 5.8), (140.0, 7.0)):
        result = run_tick(engine, at(offset, cores), state, Guards())
        state = result.state
        op = next(o for o in result.plan.operations if getattr(o, "name", "") == "kubernetes.io/batch-cpu")
        seen.append(dict(op.zones or ()))
    assert seen == [
        {"node-0": "10000", "node-1": "15000"},
        {"node-0": "10000", "node-1": "15000"},
        {"node-0": "8000", "node-1": "15000"},
    ]
    assert state.published.values["kubernetes.io/batch-cpu@node-0"] == 8.0


@pytest.mark.parametrize(
    ("metric", "expected"),
    [
        ({}, 17.0),  # no priority: HP, as Koordinator counts a dangling metric of no class
        ({"priority": 9500}, 17.0),  # koord-prod
        ({"priority": 7500}, 17.0),  # koord-mid
        ({"priority": 5500}, 25.0),  # koord-batch: skipped
        ({"priority": 3500}, 25.0),  # koord-free: skipped
    ],
)
def test_a_pod_metric_without_a_pod_is_judged_by_its_priority(
    metric: dict[str, Any], expected: float
) -> None:
    """ "calculate NUMA resources ... some pods not shown in list": a metric whose pod is in no
    list counts as HP unless what it says of its pod (pod.priority) puts it in the batch or free
    band. cpu: 100 - 35 - 7 - (33 + 8)."""
    doc = facts({}, [])
    doc["metrics"]["pods"]["gone"] = {**metric, "cpu": {"usage_cores": 8}}
    assert published(doc)["cpu"] == expected
