"""Katalyst headroom formulas against katalyst-core d8c28ea's own test numbers.

katalyst-core has no estimation_canonical_test.go in that snapshot; the container estimate tables
below derive their figures from estimation_canonical.go and say so.
"""

from __future__ import annotations

import math

import pytest

from engine.features.reclaim.headroom import (
    CPU_FALLBACK_CORES,
    DEDICATED_CORES,
    MEMORY_FALLBACK_BYTES,
    RECLAIMED_CORES,
    SHARED_CORES,
    SYSTEM_CORES,
    Estimate,
    MemoryContainer,
    SystemMemory,
    UtilBufferOptions,
    UtilOptions,
    estimate_container_cpu,
    estimate_container_memory,
    memory_headroom,
    memory_util_buffer,
    util_based_cpu_headroom,
)
from engine.features.reclaim.report import ReportHistory, report
from engine.features.reclaim.spec import ReclaimResource

GiB = 1 << 30

# ------------------------------------------------------------------ CPU estimate


@pytest.mark.parametrize(
    ("qos", "requested", "usage", "load1m", "load5m", "reclaim", "want"),
    [
        (SHARED_CORES, 2.0, 2.0, 1.0, 3.0, True, Estimate(3.0, "load5m")),
        (SHARED_CORES, 2.0, 4.0, 1.0, 3.0, True, Estimate(5.0, "cpu.usage")),  # 4 x 1.25
        (DEDICATED_CORES, 0.0, 8.0, None, None, True, Estimate(10.0, "cpu.usage")),
        (
            SHARED_CORES,
            8.0,
            1.0,
            None,
            None,
            True,
            Estimate(1.25, "cpu.usage"),
        ),  # any metric beats the request
        (SHARED_CORES, 2.0, None, None, None, True, Estimate(2.0, "request")),
        (SHARED_CORES, 3.0, 0.0, -1.0, None, True, Estimate(3.0, "request")),  # non-positive metrics ignored
        (SHARED_CORES, 2.0, 10.0, 10.0, 10.0, False, Estimate(2.0, "request")),  # reclaim disabled
        (SHARED_CORES, 0.0, None, None, None, True, Estimate(CPU_FALLBACK_CORES, "fallback")),
        (SYSTEM_CORES, 2.0, 5.0, None, None, True, Estimate(0.0, "none")),
        (RECLAIMED_CORES, 2.0, 5.0, None, None, True, Estimate(0.0, "none")),
    ],
)
def test_estimate_container_cpu(
    qos: str,
    requested: float,
    usage: float | None,
    load1m: float | None,
    load5m: float | None,
    reclaim: bool,
    want: Estimate,
) -> None:
    """estimation_canonical.go EstimateContainerCPUUsage (no anchor test in this snapshot)."""
    assert estimate_container_cpu(qos, requested, usage, load1m, load5m, reclaim) == want


# ------------------------------------------------------------------ CPU supply and util-based headroom

OPTS_15 = UtilOptions(
    target_utilization=0.6, max_utilization=0.0, max_oversold_rate=1.5, max_headroom_capacity_rate=0.0
)


@pytest.mark.parametrize(
    ("name", "supply_in", "last", "capacity", "options", "want_supply", "want"),
    [
        ("normal report", (10, 10 * 0.3, 3.0, -1, 1000), 10.0, 10.0, OPTS_15, 10.0, 13.0),
        ("limited by quota", (10, 10 * 0.3, 3.0, 5000, 1000), 10.0, 10.0, OPTS_15, 5.0, 7.5),
        (
            "allow shared cores overlap reclaimed cores",
            (10, 10 * 0.8, 1.0, -1, 1000),
            10.0,
            10.0,
            OPTS_15,
            3.0,
            4.5,
        ),
        (
            "gap by oversold ratio",
            (10, 0.0, 0.0, -1, 1000),
            10.0,
            10.0,
            UtilOptions(max_headroom_capacity_rate=0.0),
            10.0,
            12.0,
        ),
        (
            "over maximum core utilization",
            (10, 10 * 0.9, 9.0, -1, 1000),
            15.0,
            10.0,
            UtilOptions(0.6, 0.8, 1.5, 0.0),
            10.0,
            14.0,
        ),
        (
            "limited by capacity",
            (81, 81 * 0.3, 28.8, -1, 1000),
            86.0,
            96.0,
            UtilOptions(0.6, 0.8, 1.5, 1.0),
            85.5,
            96.0,
        ),
    ],
)
def test_util_based_cpu_headroom(
    name: str,
    supply_in: tuple[int, float, float, float, float],
    last: float,
    capacity: float,
    options: UtilOptions,
    want_supply: float,
    want: float,
) -> None:
    """TestHeadroomAssemblerCommon_GetHeadroom (util-based cases): reclaim pool CPUs, Σ per-CPU usage
    ratio, reclaim cgroup usage, quota/period; `last` is the CNR's reclaimed millicpu per NUMA.

    The anchor publishes 8 and 5 for 7.5 and 4.5: its non-bound split reads Quantity.Value(), which
    rounds up; the estimate itself is the value asserted here. ``want_supply`` is the anchor's
    GetReclaimMetrics of ``supply_in`` (pool CPUs, usage, cgroup usage, quota, period); qosd passes
    its canonical headroom as the supply, so the table feeds that figure in directly.
    """
    cgroup_usage = supply_in[2]
    result = util_based_cpu_headroom(want_supply, cgroup_usage, last, capacity, options)
    assert result.value == pytest.approx(want), name
    if name in ("limited by quota", "allow shared cores overlap reclaimed cores"):
        assert (
            math.ceil(result.value)
            == {"limited by quota": 8, "allow shared cores overlap reclaimed cores": 5}[name]
        )


def test_util_headroom_terms() -> None:
    """The terms the engine records: 'limited by capacity' goes 86 + 22.5 -> 108.5, under 128.25, capped at 96."""
    r = util_based_cpu_headroom(85.5, 28.8, 86.0, 96.0, UtilOptions(0.6, 0.8, 1.5, 1.0))
    assert r.utilization == pytest.approx(28.8 / 85.5)
    assert r.oversold == pytest.approx(22.5)
    assert r.oversold_cap == pytest.approx(128.25)
    assert r.capacity_cap == 96.0


def test_util_headroom_without_supply_is_zero() -> None:
    """getUtilBasedHeadroom: a zero supply reports 0 whatever was published before."""
    r = util_based_cpu_headroom(0.0, 0.0, 10.0, 48.0)
    assert (r.value, r.utilization) == (0.0, None)


def test_util_headroom_never_below_supply() -> None:
    """Utilization above target with max_utilization off: the last value is kept, floored at supply."""
    assert util_based_cpu_headroom(10.0, 9.0, 4.0, 48.0).value == 10.0
    assert util_based_cpu_headroom(10.0, 9.0, 11.0, 48.0).value == 11.0


# ------------------------------------------------------------------ memory


def _shared(rss: float, cache: float) -> MemoryContainer:
    return MemoryContainer(SHARED_CORES, rss=rss, cache=cache)


SYSTEM_POD = MemoryContainer(SYSTEM_CORES, rss=10 * GiB, cache=10 * GiB)


@pytest.mark.parametrize(
    ("container", "want"),
    [
        (_shared(10 * GiB, 10 * GiB), Estimate(22 * GiB * 1.0, "metrics")),
        (MemoryContainer(DEDICATED_CORES, rss=GiB, cache=GiB, shmem=GiB), Estimate(3.3 * GiB, "metrics")),
        (SYSTEM_POD, Estimate(10 * GiB, "metrics")),  # system pods: rss only, no buffer
        (MemoryContainer(SHARED_CORES), Estimate(MEMORY_FALLBACK_BYTES, "fallback")),
        (
            MemoryContainer(SHARED_CORES, request=2 * GiB, rss=9 * GiB, reclaim_enabled=False),
            Estimate(2 * GiB, "request"),
        ),
        (MemoryContainer(SHARED_CORES, reclaim_enabled=False), Estimate(MEMORY_FALLBACK_BYTES, "fallback")),
        (MemoryContainer(RECLAIMED_CORES, rss=5 * GiB), Estimate(0.0, "none")),
        (
            MemoryContainer(
                DEDICATED_CORES, numa_exclusive=True, reclaim_enabled=False, numa_capacity=250 * GiB
            ),
            Estimate(250 * GiB, "numa_capacity"),
        ),
        (
            MemoryContainer(
                DEDICATED_CORES,
                numa_exclusive=True,
                reclaim_enabled=False,
                main=False,
                numa_capacity=250 * GiB,
            ),
            Estimate(0.0, "numa_capacity"),
        ),
    ],
)
def test_estimate_container_memory(container: MemoryContainer, want: Estimate) -> None:
    """estimation_canonical.go EstimateContainerMemoryUsage and policy_canonical.go's exclusive case."""
    got = estimate_container_memory(container)
    assert got.value == pytest.approx(want.value)
    assert got.reference == want.reference


def _system(free: float, used: float, shared_used: float) -> SystemMemory:
    # the anchor's node: 100 GiB, scale factor 500, 96 cores / 500 GiB capacity
    return SystemMemory(100 * GiB, free, used, 500, shared_used, 10 * GiB, 96 / 500)


NO_CACHE = UtilBufferOptions(free_based_ratio=0.6, static_based_capacity=20 * GiB, cache_based_ratio=0.0)
CACHE_06 = UtilBufferOptions(free_based_ratio=0.6, static_based_capacity=20 * GiB, cache_based_ratio=0.6)


@pytest.mark.parametrize(
    ("name", "containers", "system", "options", "capacity", "want"),
    [
        (
            "normal disable buffer",
            [_shared(10 * GiB, 10 * GiB), SYSTEM_POD],
            None,
            None,
            100 * GiB,
            (96 << 30) - (20 << 30) * 1.1 - (10 << 30),
        ),
        (
            "normal enable buffer",
            [_shared(10 * GiB, 10 * GiB), SYSTEM_POD],
            _system(60 * GiB, 40 * GiB, 20 * GiB),
            NO_CACHE,
            100 * GiB,
            (96 << 30)
            - ((20 << 30) * 1.1 + (10 << 30))
            + (
                (60 << 30) * 0.6
                - (10 << 30)
                - ((20 << 30) * 1.1 + (10 << 30) - (20 << 30) + (10 << 30))
                + (20 << 30)
            ),
        ),
        (
            "enable buffer but memory free is not enough",
            [_shared(10 * GiB, 10 * GiB), SYSTEM_POD],
            _system(30 * GiB, 40 * GiB, 20 * GiB),
            NO_CACHE,
            100 * GiB,
            (96 << 30) - ((20 << 30) * 1.1 + (10 << 30)) + (20 << 30),
        ),
        (
            "enable buffer and cache oversold",
            [_shared(15 * GiB, 15 * GiB), SYSTEM_POD],
            _system(20 * GiB, 60 * GiB, 30 * GiB),
            CACHE_06,
            100 * GiB,
            (96 << 30) - ((30 << 30) * 1.1 + (10 << 30)) + ((40 << 30) - (20 << 30)) * 0.6 + (20 << 30),
        ),
        (
            "dedicated numabinding pods reclaimed disabled",
            [
                MemoryContainer(
                    DEDICATED_CORES, numa_exclusive=True, reclaim_enabled=False, numa_capacity=250 * GiB
                )
            ],
            None,
            None,
            500 * GiB,
            (500 - 250 - 4) << 30,
        ),
    ],
)
def test_memory_headroom(
    name: str,
    containers: list[MemoryContainer],
    system: SystemMemory | None,
    options: UtilBufferOptions | None,
    capacity: float,
    want: float,
) -> None:
    """TestPolicyCanonical_calculateMemoryBuffer: upper bound = capacity, reservedForAllocate 4 GiB."""
    requirement = sum(estimate_container_memory(c).value for c in containers)
    buffer = memory_util_buffer(requirement, system, options) if system is not None and options else None
    result = memory_headroom(capacity, requirement, 4 * GiB, buffer)
    assert result.value == pytest.approx(want, rel=1e-12), name


def test_memory_buffer_terms() -> None:
    """'normal enable buffer' in terms: system buffer 36 - 10 = 26 GiB, extra 32 - 20 + 10 = 22 GiB,
    free buffer 4 GiB, plus 20 GiB static."""
    b = memory_util_buffer(32 * GiB, _system(60 * GiB, 40 * GiB, 20 * GiB), NO_CACHE)
    got = (b.system_buffer, b.extra_usage, b.free_buffer, b.cache_buffer, b.value)
    assert got == pytest.approx((26 * GiB, 22 * GiB, 4 * GiB, None, 24 * GiB))


@pytest.mark.parametrize("ratio", [96 / 600, 96 / 200])  # below 1/6, above 1/3.5
def test_cache_buffer_needs_ordinary_cpu_memory_ratio(ratio: float) -> None:
    """The cache-based term applies only within the CPU/memory ratio bounds."""
    system = SystemMemory(100 * GiB, 20 * GiB, 60 * GiB, 500, 30 * GiB, 10 * GiB, ratio)
    b = memory_util_buffer(43 * GiB, system, CACHE_06)
    assert (b.cache_buffer, b.value) == (None, 20 * GiB)


def test_memory_headroom_capped_at_max_allocatable() -> None:
    """A buffer never lifts the headroom above capacity - reservedForAllocate (default 5 GiB)."""
    b = memory_util_buffer(0.0, SystemMemory(100 * GiB, 90 * GiB, 10 * GiB, 10, 0.0, 0.0, 0.2), NO_CACHE)
    r = memory_headroom(100 * GiB, 0.0, buffer=b)
    assert (r.max_allocatable, r.value) == (95 * GiB, 95 * GiB)
    assert memory_headroom(10 * GiB, 20 * GiB).value == 0.0  # requirement above capacity


def test_headroom_goes_through_the_existing_report_path() -> None:
    """Katalyst's reporter steps (maxStep 4 cores, minReport 4) apply to the util headroom unchanged:
    13 cores after a published 8 is capped to 12 by reclaim.report."""
    spec = ReclaimResource("usage", None, None, None, None, None, 4.0, 0.1, None, None, "avg", 0.3, 4.0)
    headroom = util_based_cpu_headroom(10.0, 3.0, 10.0, 0.0, OPTS_15).value
    value, history, steps = report(headroom, spec, ReportHistory(last=8.0), now=30.0)
    assert headroom == pytest.approx(13.0)
    assert (value, history.last) == (12.0, 12.0)
    assert any("maxStep" in s for s in steps)
