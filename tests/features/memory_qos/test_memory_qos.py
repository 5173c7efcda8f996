"""Memory QoS: Koordinator's memory.min/low/high (koordinator.md §3.7) and Katalyst's memory guard
(katalyst.md §2.6), checked against the numbers of the anchors' own tests.

Koordinator anchor: koordinator-sh/koordinator
``pkg/koordlet/qosmanager/plugins/cgreconcile/cgroup_reconcile_test.go``
(``TestCgroupResourceReconcile_calculateResources``, ``Test_calculateAndUpdateResources``). Its test
pod (``testutil.MockTestPodWithQOS``) has two containers: "test" with no resources and "main"
with request = limit = 1 GiB (batch-memory for BE pods); the node has 1 GiB allocatable.

Katalyst anchor: kubewharf/katalyst-core
``pkg/agent/sysadvisor/plugin/qosaware/resource/memory/advisor_test.go`` (``TestUpdate``, cases
"set reclaimed group memory limit(...)"): 4 NUMAs of 120 GiB with 60 GiB free, the reclaim root
using 6 GiB on each, vm.watermark_scale_factor 500.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from engine.features.memory_qos.strategy import (
    GO_MAX_INT64,
    GuardLimit,
    GuardParams,
    MemoryProtection,
    MemoryQOSConfig,
    NumaMemory,
    PodMemoryInput,
    ZoneInfo,
    container_memory_qos,
    kube_qos_memory_qos,
    memory_guard,
    pod_memory_qos,
)

GIB = 1 << 30
PAGE = 4096
NODE_ALLOCATABLE = GIB


def cfg(min_pct: int | None = None, low_pct: int | None = None, thr: int | None = None) -> MemoryQOSConfig:
    return MemoryQOSConfig(min_pct, low_pct, thr)


# ---------------------------------------------------------------- Koordinator: containers


@pytest.mark.parametrize(
    ("request_", "limit", "config", "expected", "anchor"),
    [
        # calculateResources "single pod using node-level config": default class config (all 0) -> high "max".
        (None, None, cfg(0, 0, 0), MemoryProtection(0, 0, GO_MAX_INT64), "node-level config, container test"),
        (GIB, GIB, cfg(0, 0, 0), MemoryProtection(0, 0, GO_MAX_INT64), "node-level config, container main"),
        # "single pod using pod-level config": BE pod, min 100 / low 0 / throttling 80.
        # test: no request, no limit -> node allocatable: ⌊1Gi × 80 / 100 / 4096⌋ × 4096.
        (None, None, cfg(100, 0, 80), MemoryProtection(0, 0, 858992640), "pod-level config, container test"),
        (GIB, GIB, cfg(100, 0, 80), MemoryProtection(GIB, 0, GIB), "pod-level config, container main"),
        # "single pod with memory.high is no less than memory.min": min 50 / throttling 40.
        (None, None, cfg(50, 0, 40), MemoryProtection(0, 0, 429494272), "high>=min, container test"),
        (GIB, GIB, cfg(50, 0, 40), MemoryProtection(GIB // 2, 0, GIB), "high>=min, container main"),
        # "pod with page cache limit enabled": LS pod, throttling 80; the comment there says 1Gi × 80% paged.
        (None, None, cfg(0, 0, 80), MemoryProtection(0, 0, 858992640), "page cache case, container test"),
        (GIB, GIB, cfg(0, 0, 80), MemoryProtection(0, 0, GIB), "page cache case, container main"),
    ],
)
def test_container_values_match_koordinator(
    request_: int | None, limit: int | None, config: MemoryQOSConfig, expected: MemoryProtection, anchor: str
) -> None:
    """Re-expresses the container rows (want2) of cgroup_reconcile_test.go
    TestCgroupResourceReconcile_calculateResources; ``anchor`` names the case and container."""
    got = container_memory_qos(request_, limit, NODE_ALLOCATABLE, config, PAGE)
    assert (got.min, got.low, got.high) == (expected.min, expected.low, expected.high), anchor


@pytest.mark.parametrize(
    ("request_", "limit", "node", "config", "expected", "why"),
    [
        # low below min is lifted to min.
        (
            GIB,
            None,
            4 * GIB,
            cfg(60, 20, None),
            (GIB * 60 // 100, GIB * 60 // 100, None),
            "low lifted to min",
        ),
        # low 0 stays 0 (the lift applies only to 0 < low < min).
        (GIB, None, 4 * GIB, cfg(60, 0, None), (GIB * 60 // 100, 0, None), "low 0 not lifted"),
        # Page rounding takes high below min: ⌊(4097 + 10 × 1 / 100) / 4096⌋ × 4096 = 4096 < 4097 -> 4097.
        (4097, 4107, 4 * GIB, cfg(100, None, 1), (4097, None, 4097), "high lifted to min"),
        # Go truncates toward zero: (4842 − 9841) × 33 / 100 = −1649 (Python's floor would say −1650),
        # so the sum is exactly 8192 and stays 8192 after paging (a floor would give 4096).
        (9841, None, 4842, cfg(None, None, 33), (None, None, 8192), "Go truncating division"),
        # A limit of 0 or below means "no limit": the node allocatable is the bound.
        (0, 0, 8 * PAGE, cfg(None, None, 50), (None, None, 4 * PAGE), "limit 0 uses node allocatable"),
        # Negative request (unset in Go's -1 convention) counts as 0.
        (-1, None, 8 * PAGE, cfg(10, None, None), (0, None, None), "negative request counts as 0"),
        # Unconfigured percents leave the files alone.
        (GIB, GIB, GIB, cfg(), (None, None, None), "nothing configured"),
    ],
)
def test_container_rules(
    request_: int,
    limit: int | None,
    node: int,
    config: MemoryQOSConfig,
    expected: tuple[int | None, int | None, int | None],
    why: str,
) -> None:
    """The corrections of cgroup_reconcile.go calculateContainerResources, one per row."""
    got = container_memory_qos(request_, limit, node, config, PAGE)
    assert (got.min, got.low, got.high) == expected, why


def test_page_size_is_a_parameter() -> None:
    """Same as the 1Gi × 80% row, on 64 KiB pages: ⌊858993459 / 65536⌋ × 65536."""
    got = container_memory_qos(None, None, GIB, cfg(None, None, 80), page_size=65536)
    assert got.high == 858993459 // 65536 * 65536 == 858980352


def test_files_render_max_and_skip_unset() -> None:
    got = container_memory_qos(GIB, GIB, GIB, cfg(50, None, 0))
    assert got.files() == {"memory.min": str(GIB // 2), "memory.high": "max"}
    assert any("memory.min = 1073741824 × 50 / 100 = 536870912" in s for s in got.steps)


# ---------------------------------------------------------------- Koordinator: pods and kube-QoS dirs


@pytest.mark.parametrize(
    ("request_", "config", "expected", "anchor"),
    [
        (GIB, cfg(0, 0, 0), (0, 0), "single pod using node-level config (LS pod, want1)"),
        (GIB, cfg(100, 0, 80), (GIB, 0), "single pod using pod-level config (BE pod, want1)"),
        (
            GIB,
            cfg(50, 0, 40),
            (GIB // 2, 0),
            "single pod with memory.high is no less than memory.min (want1)",
        ),
        (GIB, cfg(40, 10, None), (GIB * 40 // 100, GIB * 40 // 100), "own: pod low lifted to min"),
    ],
)
def test_pod_values(request_: int, config: MemoryQOSConfig, expected: tuple[int, int], anchor: str) -> None:
    """Pod rows (want1) of TestCgroupResourceReconcile_calculateResources; no memory.high at pod level."""
    got = pod_memory_qos(request_, config)
    assert (got.min, got.low, got.high) == (*expected, None), anchor


@pytest.mark.parametrize(
    ("pods", "expected", "anchor"),
    [
        # "single pod using node-level config": one Burstable LS pod, class defaults (all 0).
        (
            [PodMemoryInput("Burstable", GIB, cfg(0, 0, 0))],
            {"Guaranteed": (0, 0), "Burstable": (0, 0), "BestEffort": (None, None)},
            "single pod using node-level config (want)",
        ),
        # "single pod using pod-level config": one BestEffort BE pod with min 100%.
        (
            [PodMemoryInput("BestEffort", GIB, cfg(100, 0, 80))],
            {"Guaranteed": (GIB, 0), "Burstable": (None, None), "BestEffort": (GIB, 0)},
            "single pod using pod-level config (want)",
        ),
        # "multiple pods": the LS pod (min 0) and the BE pod (min 100%).
        (
            [
                PodMemoryInput("Burstable", GIB, cfg(0, 0, 0)),
                PodMemoryInput("BestEffort", GIB, cfg(100, 0, 80)),
            ],
            {"Guaranteed": (GIB, 0), "Burstable": (0, 0), "BestEffort": (GIB, 0)},
            "multiple pods (want)",
        ),
        # "single pod with memory.high is no less than memory.min": BE pod, min 50%.
        (
            [PodMemoryInput("BestEffort", GIB, cfg(50, 0, 40))],
            {"Guaranteed": (GIB // 2, 0), "Burstable": (None, None), "BestEffort": (GIB // 2, 0)},
            "single pod with memory.high is no less than memory.min (want)",
        ),
        # Own: the Guaranteed dir is the kubepods root and sums all three; raw low terms are summed
        # (the pod-level low>=min lift is not applied at the QoS level).
        (
            [
                PodMemoryInput("Guaranteed", 2 * GIB, cfg(100, 0, None)),
                PodMemoryInput("Burstable", GIB, cfg(40, 10, None)),
                PodMemoryInput("BestEffort", GIB, cfg(None, None, 50)),
            ],
            {
                "Guaranteed": (2 * GIB + GIB * 40 // 100, GIB // 10),
                "Burstable": (GIB * 40 // 100, GIB // 10),
                "BestEffort": (None, None),
            },
            "own: Guaranteed dir sums all three",
        ),
    ],
)
def test_kube_qos_dirs(
    pods: list[PodMemoryInput], expected: dict[str, tuple[int | None, int | None]], anchor: str
) -> None:
    """QoS rows (want) of TestCgroupResourceReconcile_calculateResources: sums, nil when unconfigured."""
    got = kube_qos_memory_qos(pods)
    assert {q: (p.min, p.low) for q, p in got.items()} == expected, anchor


@pytest.mark.parametrize(
    "call",
    [
        lambda: MemoryQOSConfig(min_limit_percent=101),
        lambda: MemoryQOSConfig(throttling_percent=-1),
        lambda: MemoryQOSConfig(low_limit_percent=True),
        lambda: container_memory_qos(1 << 60, None, GIB, cfg(50)),
        lambda: container_memory_qos(GIB, None, GIB, cfg(50), page_size=0),
        lambda: kube_qos_memory_qos([PodMemoryInput("Besteffort", GIB, cfg(1))]),
    ],
    ids=["min>100", "thr<0", "bool percent", "int64 overflow", "page 0", "bad kube qos"],
)
def test_invalid_inputs_are_refused(call: Callable[[], object]) -> None:
    with pytest.raises((ValueError, TypeError)):
        call()


# ---------------------------------------------------------------- Katalyst memory guard

ANCHOR_NUMAS = [NumaMemory(n, total=120 * GIB, free=60 * GIB, reclaimed_usage=6 * GIB) for n in range(4)]


def test_guard_without_zoneinfo_matches_katalyst() -> None:
    """advisor_test.go TestUpdate "set reclaimed group memory limit(succeeded)": the zoneinfo there is
    for node −1, so no NUMA matches: crit = 120Gi × 500 / 10000 = 6Gi (> 4Gi floor), per NUMA
    6Gi + (60Gi − 6Gi) = 60Gi, root = 240Gi, memory.high = int64(0.95 × 240Gi)."""
    got = memory_guard(ANCHOR_NUMAS, GuardParams(watermark_scale_factor=500))
    assert got.root == GuardLimit(240 * GIB, (0, 1, 2, 3))
    assert got.root.memory_high == int(0.95 * float(240 << 30))
    assert got.root.files(cgroup_v2=True) == {
        "memory.max": str(240 << 30),
        "memory.high": str(int(0.95 * float(240 << 30))),
    }
    assert got.root.files(cgroup_v2=False) == {"memory.limit_in_bytes": str(240 << 30)}
    t = got.terms[0]
    assert (t.watermark_source, t.critical_watermark, t.headroom, t.limit) == (
        "watermark_scale_factor",
        6 * GIB,
        54 * GIB,
        60 * GIB,
    )
    assert got.per_numa == {}


def test_guard_with_zoneinfo_matches_katalyst() -> None:
    """advisor_test.go TestUpdate "set reclaimed group memory limit(succeeded, with zoneinfo)": Normal
    zone low = 20Gi, free = 60Gi (in 4 KiB pages) -> 6Gi + 40Gi per NUMA, root 184Gi, high 187690070835."""
    zone = ZoneInfo(low_pages=(20 << 30) // 4096, free_pages=(60 << 30) // 4096)
    numas = [NumaMemory(n.numa, n.total, n.free, n.reclaimed_usage, zone) for n in ANCHOR_NUMAS]
    got = memory_guard(numas, GuardParams(watermark_scale_factor=500))
    assert got.root is not None
    assert got.root.memory_max == 184 << 30
    assert got.root.memory_high == 187690070835
    assert {t.watermark_source for t in got.terms} == {"zoneinfo"}


def test_guard_without_usage_gives_no_advice() -> None:
    """advisor_test.go TestUpdate "set reclaimed group memory limit(failed)": no per-NUMA cgroup
    metrics -> the reconcile fails and no advice is given (nothing is written)."""
    numas = [NumaMemory(n.numa, n.total, n.free, None) for n in ANCHOR_NUMAS]
    got = memory_guard(numas, GuardParams(watermark_scale_factor=500))
    assert got.root is None
    assert "reclaimed cgroup usage on NUMA 0 is unknown" in got.reason


@pytest.mark.parametrize(
    ("numa", "params", "expected_limit", "why"),
    [
        # crit = 32Gi × 10 / 10000 = 32Mi, below the 4Gi floor: 2Gi + (5Gi − 4Gi).
        (NumaMemory(0, 32 * GIB, 5 * GIB, 2 * GIB), GuardParams(10), 3 * GIB, "MinCriticalWatermark floor"),
        # free below crit: no headroom, the limit is what reclaimed pods use now.
        (NumaMemory(0, 32 * GIB, 3 * GIB, 2 * GIB), GuardParams(10), 2 * GIB, "no headroom"),
        # zoneinfo replaces free as well: zone free 10Gi, low 5Gi × scale 1.2 = 6Gi -> 1Gi + 4Gi.
        (
            NumaMemory(0, 64 * GIB, 50 * GIB, GIB, ZoneInfo(5 * GIB // PAGE, 10 * GIB // PAGE)),
            GuardParams(500, critical_watermark_scale_factor=1.2),
            int(GIB + (10 * GIB - 5 * GIB * 1.2)),
            "zoneinfo free and scale factor",
        ),
        # a smaller floor: crit = 16Gi × 100 / 10000 = 160Mi-ish.
        (
            NumaMemory(0, 16 * GIB, 2 * GIB, 0),
            GuardParams(100, min_critical_watermark=0),
            int(2 * GIB - 16 * GIB * 100 / 10000),
            "configured floor",
        ),
    ],
)
def test_guard_terms(numa: NumaMemory, params: GuardParams, expected_limit: int, why: str) -> None:
    got = memory_guard([numa], params)
    assert got.root is not None and got.root.memory_max == expected_limit, why


def test_guard_numa_bound_reclaim() -> None:
    """NUMA 1 holds NUMA-binding reclaimed pods: the root sums NUMA 0 only, and NUMA 1's own reclaim
    cgroup gets a limit from its own usage (memory_guard.go updateActualNUMABindingReclaimMemoryLimit)."""
    numas = [
        NumaMemory(0, 120 * GIB, 60 * GIB, 6 * GIB),
        NumaMemory(1, 120 * GIB, 30 * GIB, 0, bound_cgroup=True, bound_usage=10 * GIB),
    ]
    got = memory_guard(numas, GuardParams(500), numa_bound={1})
    assert got.root == GuardLimit(60 * GIB, (0,))
    assert got.per_numa == {1: GuardLimit(10 * GIB + 24 * GIB, (1,))}
    assert [(t.numa, t.cgroup) for t in got.terms] == [(0, "root"), (1, "numa")]


def test_guard_available_numas_limit_the_root() -> None:
    got = memory_guard(ANCHOR_NUMAS, GuardParams(500), available=[2, 3])
    assert got.root == GuardLimit(120 * GIB, (2, 3))


def test_guard_disabled_is_unlimited() -> None:
    got = memory_guard(ANCHOR_NUMAS, GuardParams(500), enabled=False)
    assert got.root == GuardLimit(-1)
    assert got.root.memory_high == -1
    assert got.root.files(cgroup_v2=True) == {"memory.max": "max", "memory.high": "max"}
    assert got.root.files(cgroup_v2=False) == {"memory.limit_in_bytes": "-1"}


def test_guard_needs_watermark_scale_factor() -> None:
    """Katalyst reads vm.watermark_scale_factor first and fails the reconcile without it."""
    got = memory_guard(ANCHOR_NUMAS, GuardParams(None))
    assert got.root is None and "watermark_scale_factor" in got.reason


def test_guard_missing_bound_usage_gives_no_advice() -> None:
    numas = [NumaMemory(0, 120 * GIB, 60 * GIB, 6 * GIB, bound_cgroup=True, bound_usage=None)]
    got = memory_guard(numas, GuardParams(500))
    assert got.root is None and "NUMA 0 reclaim cgroup" in got.reason
