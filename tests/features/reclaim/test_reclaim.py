"""Reclaimed resources: Koordinator's batch-resource formulas, Katalyst's canonical headroom and the
reporter (engine/features/reclaim/strategy.py).

Koordinator oracle numbers are TestPluginCalculate in koordinator-sh/koordinator a7a1b76,
pkg/slo-controller/noderesource/plugins/batchresource/plugin_test.go: a 100-core / 120G node with
getTestPodList() (podA LS 20 cores / 20G using 11 / 11G, podB BE using 10 / 10G, podC unlabelled
Guaranteed 2 x (10 / 20G) using 22 / 22G, podD BE Succeeded) and systemUsage 7 cores / 12G.
Katalyst's are katalyst-core d8c28ea: memory headroompolicy/policy_canonical_test.go, cpu
region/headroompolicy/policy_canonical_test.go and reporter/manager/resource/generic_test.go.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.features.reclaim.headroom import DEDICATED_CORES, SHARED_CORES, SYSTEM_CORES
from engine.features.reclaim.report import ReportHistory, bound, report
from engine.features.reclaim.spec import ReclaimHeadroom, ReclaimResource
from engine.features.reclaim.strategy import (
    NOTHING_PUBLISHED,
    Demand,
    PodUse,
    Published,
    headroom_reclaimable,
    reclaimable,
    resource_diff,
    update_due,
)

GiB = 1 << 30
G = 10**9  # Koordinator's tests write memory in decimal G


def spec(policy: str = "usage", threshold: float | None = 60, **kw: object) -> ReclaimResource:
    base = ReclaimResource(
        policy,
        threshold,
        None,
        None,
        None,
        None,
        None,
        None,
        "kubernetes.io/batch-cpu",
        None,
        "avg",
        None,
        None,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


# ------------------------------------------------------------------ Koordinator: TestPluginCalculate

CPU_NODE = {"cpu.capacity_cores": 100.0, "cpu.allocatable_cores": 100.0, "cpu.usage_cores": 50.0}
MEM_NODE = {
    "memory.capacity_bytes": 120.0 * G,
    "memory.allocatable_bytes": 120.0 * G,
    "memory.usage_bytes": 55.0 * G,
}
# getTestPodList / getTestResourceMetrics: podD (Succeeded, no metric) is not an active pod.
CPU_PODS = [PodUse(20.0, 11.0, True), PodUse(0.0, 10.0, False), PodUse(20.0, 22.0, True)]
MEM_PODS = [PodUse(20.0 * G, 11.0 * G, True), PodUse(0.0, 10.0 * G, False), PodUse(40.0 * G, 22.0 * G, True)]


@pytest.mark.parametrize(
    ("policy", "threshold", "max_percent", "expected", "case"),
    [
        # 100 - 35 - max(7, 0) - HPUsed (11 + 22) = 25
        ("usage", 65, None, 25.0, "calculate with memory usage"),
        # 100 - 30 - 7 - 33 = 30
        ("usage", 70, None, 30.0, "calculate with memory request"),
        # HPMaxUsedReq = max(20, 11) + max(20, 22) = 42: 100 - 30 - 7 - 42 = 21
        ("maxUsageRequest", 70, None, 21.0, "calculate with cpu maxUsageRequest and memory request"),
        # a negative margin: 100 - (-50) - 7 - 42 = 101
        ("maxUsageRequest", 150, None, 101.0, "calculate with adjusted reclaim ratio"),
        # min(101, 100 x 100%) = 100
        ("maxUsageRequest", 150, 100.0, 100.0, "calculate with batch cpu threshold percent only"),
        # 100 + 50 - 7 - 33 = 110
        ("usage", 150, None, 110.0, "calculate without batch cpu/mem threshold percent-with different ..."),
        (
            "usage",
            150,
            100.0,
            100.0,
            "calculate with both batch cpu/mem threshold percent-with different ...",
        ),
    ],
)
def test_koordinator_batch_cpu(
    policy: str, threshold: float, max_percent: float | None, expected: float, case: str
) -> None:
    node = {**CPU_NODE, "cpu.system_usage_cores": 7.0}
    s = spec(policy, threshold, max_percent=max_percent)
    r = reclaimable("cpu", s, node, CPU_PODS, None, None)
    assert r.value is not None
    assert bound("cpu", r.value, s, node)[0] == pytest.approx(expected), case


@pytest.mark.parametrize(
    ("policy", "threshold", "max_percent", "expected", "case"),
    [
        # 120 - 42 - max(55 - 43, 0) - HPUsed (11 + 22) = 33
        ("usage", 65, None, 33, "calculate with memory usage"),
        # byRequest: 120 - 42 - nodeReserved 0 - HPRequest (20 + 40) = 18
        ("request", 65, None, 18, "calculate with memory request and reserve memory ... (18G)"),
        # 120 - 24 - 0 - 60 = 36
        ("request", 80, None, 36, "calculate with cpu maxUsageRequest and memory request"),
        # 120 + 24 - 0 - 60 = 84, within 100% of capacity
        ("request", 120, 100.0, 84, "calculate with batch memory threshold percent only"),
        # HPMaxUsedReq = max(20, 11) + max(40, 22) = 60: 120 + 24 - 12 - 60 = 72
        ("maxUsageRequest", 120, None, 72, "calculate without batch cpu/mem threshold percent-..."),
        ("maxUsageRequest", 120, 100.0, 72, "calculate with both batch cpu/mem threshold percent-..."),
    ],
)
def test_koordinator_batch_memory(
    policy: str, threshold: float, max_percent: float | None, expected: int, case: str
) -> None:
    """Memory has no measured system usage here: node usage minus every pod's usage (55 - 43 = 12G)
    is koordlet's systemUsage, and the margin is int64(120e9 x 0.35) = 42e9 exactly."""
    s = spec(policy, threshold, max_percent=max_percent)
    r = reclaimable("memory", s, MEM_NODE, MEM_PODS, None, None)
    assert r.value is not None
    assert bound("memory", r.value, s, MEM_NODE)[0] == expected * G, case


def test_koordinator_provenance_inputs() -> None:
    """The terms of Koordinator's message for "calculate with memory usage": "batchAllocatable[CPU
    (Milli-Core)]:25000 = nodeCapacity:100000 - nodeSafetyMargin:35000 - systemUsageOrNodeReserved:
    7000 - podHPUsed:33000"."""
    r = reclaimable(
        "cpu", spec("usage", 65), {**CPU_NODE, "cpu.system_usage_cores": 7.0}, CPU_PODS, None, None
    )
    assert dict(r.inputs) == {
        "policy": "usage",
        "capacity": 100.0,
        "reclaimThresholdPercent": 65,
        "safetyMargin": 35.0,
        "nodeReserved": 0.0,
        "systemUsed": 7.0,
        "hpUsed": 33.0,
        "hpRequest": 40.0,
        "hpMaxUsedRequest": 42.0,
        "danglingUsed": 0.0,
        "byUsage": 25.0,
        "byRequest": 25.0,
        "byMaxUsageRequest": 16.0,
    }
    assert (
        r.formula
        == "usage: capacity 100 - safetyMargin 35 - max(systemUsed 7, nodeReserved 0) - hpUsed 33 = 25"
    )


def test_kubelet_reserved_above_system_usage() -> None:
    """ "... which kubelet reserved is the biggest among node.annotation, sys.used and kubelet
    reserved": allocatable 90 / 100G of 100 / 120G -> nodeReserved 10 / 20G beats systemUsed 7 / 12G.
    cpu 100 - 35 - 10 - 33 = 22; memory 120 - 42 - 20 - 33 = 25."""
    cpu = {**CPU_NODE, "cpu.allocatable_cores": 90.0, "cpu.system_usage_cores": 7.0}
    mem = {**MEM_NODE, "memory.allocatable_bytes": 100.0 * G}
    assert reclaimable("cpu", spec("usage", 65), cpu, CPU_PODS, None, None).value == pytest.approx(22.0)
    assert reclaimable("memory", spec("usage", 65), mem, MEM_PODS, None, None).value == 25 * G


def test_terminated_and_dangling_pods() -> None:
    """ "calculate with pods terminated": podProd (LS, 10 / 10G, using 5 / 5G), podProd1 (prod, no
    metric: its request 10 / 10G counts) and podProd2's metric (10 / 10G) with no pod in the list
    (dangling, HP). cpu 100 - 35 - 5 - (5 + 10 + 10) = 35; memory 120 - 42 - 10 - 25 = 43.
    The test's NodeUsage (30G) is not node = system + pods; qosd derives memory systemUsed from
    node usage, so the node here uses 10 + 5 + 10 = 25G."""
    pods_cpu = [PodUse(10.0, 5.0, True), PodUse(10.0, None, True), PodUse(0.0, 10.0, True, listed=False)]
    pods_mem = [
        PodUse(10.0 * G, 5.0 * G, True),
        PodUse(10.0 * G, None, True),
        PodUse(0.0, 10.0 * G, True, listed=False),
    ]
    cpu = {**CPU_NODE, "cpu.usage_cores": 25.0, "cpu.system_usage_cores": 5.0}
    mem = {**MEM_NODE, "memory.usage_bytes": 25.0 * G}
    r = reclaimable("cpu", spec("usage", 65), cpu, pods_cpu, None, None)
    assert r.value == pytest.approx(35.0)
    assert (r.inputs["danglingUsed"], r.inputs["hpUsed"], r.inputs["hpMaxUsedRequest"]) == (10.0, 25.0, 20.0)
    m = reclaimable("memory", spec("usage", 65), mem, pods_mem, None, None)
    assert (m.value, m.inputs["systemUsed"]) == (43 * G, 10 * G)


def test_lse_cpu_counts_its_request() -> None:
    """ "calculate with pods QoS=LSE": podProdLSE (10 / 10G, using 5 / 5G) counts its cpu request,
    its memory usage: HPUsed cpu = 10 + 6 + 22 = 38 -> 100 - 35 - 7 - 38 = 20; memory
    5 + 6 + 22 = 33 -> 120 - 42 - 12 - 33 = 33. (podMid, BE-labelled in the mid band, is HP there.)"""
    pods = [
        PodUse(10.0, 5.0, True, request_as_usage=True),  # podProdLSE
        PodUse(10.0, 6.0, True),  # podProd1
        PodUse(10.0, 10.0, False),  # podBatch
        PodUse(20.0, 22.0, True),  # podMid
    ]
    node = {**CPU_NODE, "cpu.system_usage_cores": 7.0}
    assert (
        reclaimable(
            "cpu", spec("usage", 65, request_as_usage=frozenset({"LSE"})), node, pods, None, None
        ).value
        == 20.0
    )
    mem_pods = [
        PodUse(10.0 * G, 5.0 * G, True),
        PodUse(10.0 * G, 6.0 * G, True),
        PodUse(10.0 * G, 10.0 * G, False),
    ]
    mem_pods.append(PodUse(40.0 * G, 22.0 * G, True))
    assert reclaimable("memory", spec("usage", 65), MEM_NODE, mem_pods, None, None).value == 33 * G
    # maxUsageRequest keeps max(request, usage) for LSE: max(10, 5) + max(10, 6) + max(20, 22) = 42
    r = reclaimable(
        "cpu", spec("maxUsageRequest", 65, request_as_usage=frozenset({"LSE"})), node, pods, None, None
    )
    assert r.inputs["hpMaxUsedRequest"] == 42.0 and r.value == 16.0


def test_system_usage_falls_back_to_node_minus_pods() -> None:
    """Without node.cpu.system_usage_cores, koordlet's systemUsage is node usage minus all pods'
    usage, batch pods included: 50 - (11 + 10 + 22) = 7, the same 25 cores."""
    r = reclaimable("cpu", spec("usage", 65), CPU_NODE, CPU_PODS, None, None)
    assert (r.value, r.inputs["systemUsed"]) == (25.0, 7.0)


def test_margin_truncates_like_multiply_quant() -> None:
    """GetNodeSafetyMargin: int64(float64(milli) x ratio), truncated. 11 cores at 65%: 11000 x 0.35
    = 3849.9999999999995 -> 3849 milli, so 11 - 3.849 = 7.151 cores on an idle node; 64Gi at 65%:
    68719476736 x 0.35 = 24051816857.6 -> 24051816857 bytes, leaving 44667659879."""
    node = {"cpu.capacity_cores": 11.0, "cpu.usage_cores": 0.0, "cpu.system_usage_cores": 0.0}
    r = reclaimable("cpu", spec("usage", 65), node, [], None, None)
    assert r.inputs["safetyMargin"] == 3.849 and r.value == pytest.approx(7.151)
    mem = {"memory.capacity_bytes": float(64 * GiB), "memory.usage_bytes": 0.0}
    assert reclaimable("memory", spec("usage", 65), mem, [], None, None).value == 44667659879


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({"max_percent": 5.0}, 5.0),  # batchCPUThresholdPercent: min(25, 100 x 5%)
        ({"max": 4.0}, 4.0),  # qosd's absolute clamps
        ({"min": 30.0}, 30.0),
    ],
)
def test_caps(kw: dict[str, float], expected: float) -> None:
    s = spec("usage", 65, **kw)
    r = reclaimable("cpu", s, CPU_NODE, CPU_PODS, None, None)
    assert r.value is not None
    assert bound("cpu", r.value, s, CPU_NODE)[0] == pytest.approx(expected)


def test_stale_metrics_withdraw_the_resource() -> None:
    """TestPlugin_isDegradeNeeded "outdated NodeMetric status should degrade": metrics 11 minutes
    old with degradeTimeMinutes 10 reset batch resources; now.After(update + timeout) is strict."""
    stale = reclaimable("cpu", spec(), CPU_NODE, CPU_PODS, metrics_age=11 * 60, degrade_after=10 * 60)
    assert stale.value is None and "degradeAfter" in stale.formula
    fresh = reclaimable("cpu", spec(), CPU_NODE, CPU_PODS, metrics_age=10 * 60, degrade_after=10 * 60)
    assert fresh.value is not None
    h = headroom_reclaimable("cpu", headroom_spec(), {"cpu.capacity_cores": 16.0}, [], 61.0, 60.0)
    assert h.value is None


def test_unknown_usage_withdraws_rather_than_guesses() -> None:
    assert reclaimable("cpu", spec(), {"cpu.capacity_cores": 100.0}, CPU_PODS, None, None).value is None


def test_a_headroom_spec_is_not_a_koordinator_formula() -> None:
    with pytest.raises(ValueError, match="not one of Koordinator's formulas"):
        reclaimable("cpu", headroom_spec(), CPU_NODE, CPU_PODS, None, None)


# ------------------------------------------------------------------ Katalyst: canonical headroom


def headroom_spec(resource: str = "cpu", **kw: object) -> ReclaimResource:
    reserved, factor, fallback = (
        (4.0, 1.25, 4.0) if resource == "cpu" else (float(5 * GiB), 1.1, float(8 * GiB))
    )
    return spec("headroom", None, headroom=replace(ReclaimHeadroom(reserved, factor, fallback), **kw))  # type: ignore[arg-type]


def test_cpu_headroom_region_canonical() -> None:
    """region/headroompolicy TestPolicyCanonical "share-reserved-for-allocate": UpperBound 90,
    ReservedForAllocate 10, one container with no QoS level (estimate 0) -> 80. qosd: 90 CPUs, no
    reserve pool (allocatable 90)."""
    node = {"cpu.capacity_cores": 90.0}
    r = headroom_reclaimable(
        "cpu", headroom_spec(reserved_for_allocate=10.0), node, [Demand("", 0.0)], None, None
    )
    assert r.value == 80.0 and r.inputs["estimatedBy"] == {"none": 1}


def test_cpu_headroom_estimates() -> None:
    """katalyst.md 2.4: max(usage x 1.25, ...) per shared/dedicated container, its request without
    a metric, 4 cores with neither; system containers need nothing. 16 CPUs minus a 2-CPU reserve
    pool = 14 available: 14 - 4 - (1.2 x 1.25 + 2.4 x 1.25 + 1 + 4) = 14 - 4 - 9.5 = 0.5."""
    demands = [
        Demand(SHARED_CORES, 2.0, usage=1.2),  # 1.5 (a metric beats the request)
        Demand(DEDICATED_CORES, 4.0, usage=2.4),  # 3.0
        Demand(SHARED_CORES, 1.0),  # 1.0 (request)
        Demand(SHARED_CORES, 0.0),  # 4.0 (fallback)
        Demand(SYSTEM_CORES, 0.0, usage=0.2),  # 0
    ]
    node = {"cpu.capacity_cores": 16.0, "cpu.allocatable_cores": 15.0}
    r = headroom_reclaimable("cpu", headroom_spec(), node, demands, None, None, reserved_cpus=2)
    assert r.value == pytest.approx(0.5)
    assert r.inputs["available"] == 14.0 and r.inputs["estimate"] == pytest.approx(9.5)
    assert r.inputs["estimatedBy"] == {"cpu.usage": 2, "request": 1, "fallback": 1, "none": 1}
    # Without a reserve pool, kubelet's allocatable is what is available: 15 - 4 - 9.5 = 1.5.
    assert headroom_reclaimable("cpu", headroom_spec(), node, demands, None, None).value == pytest.approx(1.5)
    # The factors are parameters: x1.0 and a 2-core fallback -> 14 - 4 - (1.2 + 2.4 + 1 + 2) = 3.4.
    custom = headroom_spec(usage_factor=1.0, fallback=2.0)
    assert headroom_reclaimable(
        "cpu", custom, node, demands, None, None, reserved_cpus=2
    ).value == pytest.approx(3.4)


def test_cpu_headroom_util_based() -> None:
    """EstimateUtilBasedCapacity on top of the canonical supply (10 cores): reclaimed pods use 3,
    u = 0.3 < target 0.6 -> oversold 3; last report 10 -> max(13, 10) = 13, within 10 x 1.2 = 12 ->
    12 (the same numbers as tests/test_headroom.py, supply taken from the estimate here)."""
    node = {"cpu.capacity_cores": 18.0}
    s = headroom_spec(util_based=True)
    r = headroom_reclaimable(
        "cpu", s, node, [], None, None, reclaimed_usage=3.0, last_report=10.0, reserved_cpus=4
    )
    assert r.inputs["canonical"] == 10.0
    assert (r.inputs["utilization"], r.inputs["oversold"], r.value) == (
        pytest.approx(0.3),
        pytest.approx(3.0),
        12.0,
    )


MEM_NODE_KATALYST = {"memory.capacity_bytes": float(100 * GiB), "cpu.capacity_cores": 20.0}
SHARED_AND_SYSTEM = [
    Demand(SHARED_CORES, 1.0, rss=10.0 * GiB, cache=10.0 * GiB),  # (10 + 10) x 1.1 = 22Gi
    Demand(SYSTEM_CORES, 1.0, rss=10.0 * GiB, cache=10.0 * GiB),  # rss x 1.0 = 10Gi
]


def test_memory_headroom_normal_disable_buffer() -> None:
    """policy_canonical_test "normal disable buffer": 100Gi, ReservedForAllocate 4Gi ->
    (96 << 30) - (20 << 30) x 1.1 - (10 << 30) = 64Gi."""
    r = headroom_reclaimable(
        "memory",
        headroom_spec("memory", reserved_for_allocate=float(4 * GiB)),
        MEM_NODE_KATALYST,
        SHARED_AND_SYSTEM,
        None,
        None,
    )
    assert r.value == 64 * GiB
    assert (r.inputs["requirement"], r.inputs["maxAllocatable"]) == (32 * GiB, 96 * GiB)


@pytest.mark.parametrize(
    ("free", "used", "cache_ratio", "demands", "expected", "case"),
    [
        # sysBuf 60 x 0.6 - 100 x 2 x 500 / 10000 = 26; extra 32 - 20 + 10 = 22 -> 4 + static 20;
        # 64 + 24 = 88
        (60, 40, 0.0, SHARED_AND_SYSTEM, 88 * GiB, "normal enable buffer"),
        # sysBuf 30 x 0.6 - 10 = 8 < extra 22 -> 0 + 20: 64 + 20 = 84
        (30, 40, 0.0, SHARED_AND_SYSTEM, 84 * GiB, "enable buffer but memory free is not enough"),
        # shared 15 + 15 -> 33; sysBuf 2 < extra 23; cache (100 x 0.4 - 20) x 0.6 = 12 (20 cores per
        # 100Gi is within [1/6, 1/3.5]); 96 - 43 + 12 + 20 = 85
        (
            20,
            60,
            0.6,
            [Demand(SHARED_CORES, 1.0, rss=15.0 * GiB, cache=15.0 * GiB), SHARED_AND_SYSTEM[1]],
            85 * GiB,
            "enable buffer and cache oversold",
        ),
    ],
)
def test_memory_headroom_util_buffer(
    free: int, used: int, cache_ratio: float, demands: list[Demand], expected: int, case: str
) -> None:
    """policy_canonical_test TestPolicyCanonical_calculateMemoryBuffer, scale factor 500."""
    s = headroom_spec(
        "memory", reserved_for_allocate=float(4 * GiB), util_based=True, cache_based_ratio=cache_ratio
    )
    node = {
        **MEM_NODE_KATALYST,
        "memory.free_bytes": float(free * GiB),
        "memory.usage_bytes": float(used * GiB),
    }
    r = headroom_reclaimable("memory", s, node, demands, None, None, scale_factor=500.0)
    assert r.value == expected, case
    assert r.inputs["staticBasedCapacity"] == 20 * GiB


@pytest.mark.parametrize(
    ("machine", "expected"),
    [
        # 96 cores / 500Gi = 0.192 per GiB, within [1/6, 1/3.5]: the cache term (12Gi) is admitted
        (500 * GiB, 85 * GiB),
        # no machine memory known: the node's 100Gi gives 0.96 per GiB, outside: static 20Gi alone
        (None, 73 * GiB),
    ],
)
def test_cache_buffer_ratio_uses_the_machine_memory(machine: int | None, expected: int) -> None:
    """TestPolicyCanonical_calculateMemoryBuffer "enable buffer and cache oversold": the headroom's
    upper bound is 100Gi while the machine has 500Gi; the CPU/memory ratio is the machine's."""
    s = headroom_spec("memory", reserved_for_allocate=float(4 * GiB), util_based=True, cache_based_ratio=0.6)
    node = {
        "memory.capacity_bytes": float(100 * GiB),
        "cpu.capacity_cores": 96.0,
        "memory.free_bytes": float(20 * GiB),
        "memory.usage_bytes": float(60 * GiB),
    }
    demands = [Demand(SHARED_CORES, 1.0, rss=15.0 * GiB, cache=15.0 * GiB), SHARED_AND_SYSTEM[1]]
    r = headroom_reclaimable(
        "memory",
        s,
        node,
        demands,
        None,
        None,
        scale_factor=500.0,
        machine_memory=None if machine is None else float(machine),
    )
    assert r.value == expected
    assert r.inputs["machineMemory"] == (machine or 100 * GiB)


def test_memory_headroom_without_metrics_and_without_free() -> None:
    """A container with no metric is estimated at 8Gi (estimationMemoryFallbackValue) whatever its
    request; util-based without node free/used memory adds no buffer and says so."""
    s = headroom_spec("memory", util_based=True)
    node = {"memory.capacity_bytes": float(64 * GiB)}
    r = headroom_reclaimable("memory", s, node, [Demand(SHARED_CORES, float(2 * GiB))], None, None)
    assert r.value == (64 - 5 - 8) * GiB
    assert "no buffer" in r.formula and r.inputs["estimatedBy"] == {"fallback": 1}


def test_headroom_needs_capacity() -> None:
    assert headroom_reclaimable("memory", headroom_spec("memory"), {}, [], None, None).value is None


# ------------------------------------------------------------------ Katalyst: the reporter


def test_report_reserved_and_floor() -> None:
    """generic_test TestGenericHeadroomManager_Allocatable: headroom 20, ReservedResourceForReport
    10, MinReclaimedResourceForReport 4 -> 10 cores; with the minimum raised to 100 -> 100."""
    s = spec(reserved_for_report=10.0, min_report=4.0)
    assert report(20.0, s, ReportHistory(), 0.0)[0] == 10.0
    assert report(20.0, replace(s, min_report=100.0), ReportHistory(), 0.0)[0] == 100.0


@pytest.mark.parametrize(
    ("kw", "raw", "expected"),
    [
        ({"reserved_for_report": 2.0}, 6.0, 4.0),
        ({"reserved_for_report": 8.0}, 6.0, 0.0),  # never negative
        ({"min_report": 4.0}, 0.0, 4.0),  # a floor: Katalyst reports 4 cores even for no headroom
        ({"min_report": 4.0, "min_ignored": 0.1}, 0.0, 4.0),  # the floor comes first
        ({"min_ignored": 6.0}, 6.0, 0.0),  # at or below minIgnored: 0
        ({"min_ignored": 6.0}, 6.5, 6.5),
    ],
)
def test_report_floors(kw: dict[str, float], raw: float, expected: float) -> None:
    assert report(raw, spec(**kw), ReportHistory(), 0.0)[0] == pytest.approx(expected)


def test_report_smoothing_window_and_steps() -> None:
    """Katalyst's reporter: 2 min average, changes under 0.3 cores ignored, over 4 cores capped per report."""
    s = spec(smoothing_window=120.0, min_step=0.3, max_step=4.0)
    history = ReportHistory()
    reported = []
    for t, raw in ((0, 10.0), (30, 10.2), (60, 30.0), (90, 30.0), (200, 30.0)):
        value, history, _ = report(raw, s, history, float(t))
        reported.append(value)
    # t=0: 10; t=30: avg 10.1 is within minStep of 10 -> 10; t=60: avg 16.73 -> capped +4 -> 14;
    # t=90: avg 20.05 -> +4 -> 18; t=200: only t=90 and t=200 in the window: 30 -> capped -> 22.
    assert reported == pytest.approx([10.0, 10.0, 14.0, 18.0, 22.0])
    assert [t for t, _ in history.samples] == [90.0, 200.0]


def test_report_history_remembers_smoothed_and_reported() -> None:
    """minStep/maxStep compare with the smoothed value; the util-based headroom reads the reported
    one (after reservedForReport and the floor). Both survive a state round trip."""
    s = spec(reserved_for_report=1.0, min_report=4.0, smoothing_window=120.0, smoothing_agg="max")
    value, history, steps = report(3.0, s, ReportHistory(), 0.0)
    assert (value, history.last, history.reported) == (4.0, 3.0, 4.0)
    assert steps[-1] == "raised to minReport 4"
    assert ReportHistory.from_dict(history.to_dict()) == history
    assert ReportHistory.from_dict({"samples": [[0, 1]], "last": 1.0}).reported is None  # older state


# ------------------------------------------------------------------ node update gate
# Koordinator's IsResourceDiff table (pkg/util/resource_test.go TestIsResourceDiff, threshold 2) and
# the 0.1 default of colocation-config at its boundary: |new - old| > old x threshold is strict.


@pytest.mark.parametrize(
    ("old", "new", "threshold", "want"),
    [
        (1.0, 9.0, 2.0, True),  # koord: "big enough difference"
        (1.0, 2.0, 2.0, False),  # koord: "doesn't have big enough difference"
        (None, 2.0, 2.0, True),  # koord: "the old resource doesn't have queryed resource type"
        (0.0, 0.0, 2.0, False),  # koord: "both resources are zero"
        (10.0, 11.0, 0.1, False),  # exactly 10%: not beyond
        (10.0, 11.01, 0.1, True),
        (10.0, 8.99, 0.1, True),
        (0.0, 0.001, 0.1, True),  # anything from 0 is a change (a multiplication, not a division)
        (5.0, None, 0.1, True),  # disappearing (degradation) always passes
        (None, None, 0.1, False),
    ],
)
def test_resource_diff(old: float | None, new: float | None, threshold: float, want: bool) -> None:
    assert resource_diff(old, new, threshold) is want


AT_0 = Published({"cpu": 10.0, "mem": 100.0}, 0.0)


@pytest.mark.parametrize(
    ("last", "new", "now", "due", "reason"),
    [
        (NOTHING_PUBLISHED, {"cpu": 10.0}, 5.0, True, "updated: cpu appears"),
        (NOTHING_PUBLISHED, {"cpu": None}, 5.0, True, "updated: first update"),
        (
            AT_0,
            {"cpu": 10.5, "mem": 95.0},
            60.0,
            False,
            "held: cpu 10 -> 10.5 (+5.0%), mem 100 -> 95 (-5.0%)",
        ),
        (AT_0, {"cpu": 10.5}, 300.0, False, "last update 300s ago (<= maxInterval 300s)"),  # strict >
        (AT_0, {"cpu": 10.5}, 301.0, True, "updated: last update 301s ago (> maxInterval 300s)"),
        (AT_0, {"cpu": 12.0, "mem": 99.0}, 60.0, True, "updated: cpu 10 -> 12 (+20.0%) (beyond"),
        (AT_0, {"cpu": None, "mem": 99.0}, 60.0, True, "updated: cpu disappears"),
        (AT_0, {"gpu": 1.0}, 60.0, True, "updated: gpu appears"),  # never published before
        (Published({"cpu": 0.0}, 0.0), {"cpu": 0.0}, 60.0, False, "held: cpu 0 -> 0 within"),
    ],
)
def test_update_due(
    last: Published, new: dict[str, float | None], now: float, due: bool, reason: str
) -> None:
    """Koordinator's isNodeResourceSyncNeeded: any resource beyond the threshold, never synced, or
    the last sync older than updateTimeThresholdSeconds (Clock.Since > threshold, strict)."""
    got, why = update_due(last, new, 0.1, 300.0, now)
    assert got is due
    assert reason in why, why


def test_published_round_trips_through_a_dict() -> None:
    p = Published({"a": 1.5, "b": None}, 12.0)
    assert Published.from_dict(p.to_dict()) == p
    assert Published.from_dict({}) == NOTHING_PUBLISHED


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(1.0, 200.0), st.one_of(st.none(), st.floats(0.0, 64.0))),
        min_size=1,
        max_size=40,
    ),
    st.floats(0.01, 1.0),
    st.floats(10.0, 600.0),
)
def test_gate_bounds_staleness(
    steps: list[tuple[float, float | None]], threshold: float, interval: float
) -> None:
    """Whatever the sequence of computed values, a held value is within the threshold of the
    computed one, exists exactly when it does, and is never older than maxInterval."""
    last, now = NOTHING_PUBLISHED, 0.0
    for dt, value in steps:
        now += dt
        due, why = update_due(last, {"r": value}, threshold, interval, now)
        if due:
            last = Published({"r": value}, now)
        else:
            assert last.at is not None and now - last.at <= interval
            held = last.values.get("r")
            assert (held is None) == (value is None)
            if held is not None and value is not None:
                assert abs(value - held) <= held * threshold
        assert why.startswith("updated: " if due else "held: ")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (float("inf"), "inf"),
        (float("-inf"), "-inf"),
        (float("nan"), "nan"),
        (2.5e6, "2500000"),
        (0.25, "0.25"),
    ],
)
def test_formula_figures_of_non_finite_values_are_shown_not_raised(value: float, text: str) -> None:
    """Issue 14: round(inf) raised OverflowError in the middle of a tick's publish step."""
    from engine.features.reclaim.strategy import _num

    assert _num(value) == text
