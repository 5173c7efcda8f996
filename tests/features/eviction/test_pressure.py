"""Eviction triggers against the anchors' own numbers (katalyst-core d8c28ea, koordinator a7a1b76).

Each test names the anchor test whose figures it re-expresses; tests without an anchor name cover
behaviour the anchors leave untested, with figures derived from the anchor code.
"""

from __future__ import annotations

from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.features.eviction.pressure import (
    RECLAIMED_MILLICPU,
    Action,
    BeCpu,
    GiB,
    MetType,
    MiB,
    NumaCounterParams,
    NumaCounterState,
    PsiParams,
    PsiState,
    Watermarks,
    be_allocatable_milli,
    be_real_limit_milli,
    be_satisfaction_release,
    be_usage_high_enough,
    cpu_usage_release,
    enough_samples,
    memory_usage_release,
    metric_watermarks,
    numa_pressure_step,
    overcommit_victims,
    psi_pressure_step,
    reclaimed_overcommit,
    rss_overuse,
    satisfaction_config_error,
    satisfaction_release,
    stronger,
    system_watermark_pressure,
    usage_config_error,
    victim_numa,
    zoneinfo_watermarks,
)
from engine.features.eviction.spec import ReleaseSpec
from engine.features.eviction.strategy import release_target
from engine.model.facts import Container, Workload

N, R, E = Action.NOOP, Action.RECLAIMED_EVICTION, Action.EVICTION


# ------------------------------------------------------------------ NUMA watermark counter

ANCHOR_NUMA = NumaCounterParams(times_threshold=3, reclaimed_times_threshold=1, fast_eviction_wait_cycle=0)


def test_numa_counter_anchor_sequence() -> None:
    """TestNumaMemoryPressurePlugin_ThresholdMet: metric fallback (50 GiB per NUMA, scale factor 600,
    so low = 3 GiB and min = 0), thresholds 3/1, wait 0; seven rounds fed to two NUMA nodes."""
    rounds = [  # (free numa0, free numa1) in GiB -> (action0, count0, action1, count1)
        ((20, 25), (N, 0, N, 0)),
        ((1, 2), (N, 1, N, 1)),
        ((1, 2), (R, 2, R, 2)),
        ((1, 10), (E, 4, N, 1)),
        ((1, 2), (E, 6, R, 2)),
        ((1, 2), (E, 8, E, 3)),
        ((10, 2), (N, 1, E, 4)),
    ]
    states = [NumaCounterState(), NumaCounterState()]
    for frees, (a0, c0, a1, c1) in rounds:
        got = []
        for numa, free in enumerate(frees):
            wm = metric_watermarks(free * GiB, 50 * GiB, 600)
            assert (wm.min, wm.low) == (0, 3 * GiB)
            decision, states[numa] = numa_pressure_step(wm, states[numa], ANCHOR_NUMA)
            got.append((decision.action, decision.count))
        assert got == [(a0, c0), (a1, c1)], frees


@pytest.mark.parametrize(
    ("zone_min", "zone_low", "inactive", "want_min", "want_low"),
    [
        # plenty of inactive file cache: low only gets the 256 MiB guard (and may sit below min)
        (64 * MiB, 80 * MiB, 10 * GiB, 64 * MiB + GiB, 80 * MiB + 256 * MiB),
        # scarce cache: low raised to the 4 GiB floor
        (64 * MiB, 80 * MiB, 1 * GiB, 64 * MiB + GiB, 4 * GiB),
        # scarce cache and a large zone low: low + guard + 1 GiB
        (1 * GiB, 5 * GiB, 2 * GiB, 2 * GiB, 5 * GiB + 256 * MiB + GiB),
        # inactive exactly at the 4 GiB reserve: not scarce
        (0, 0, 4 * GiB, GiB, 256 * MiB),
    ],
)
def test_zoneinfo_watermarks(
    zone_min: int, zone_low: int, inactive: int, want_min: int, want_low: int
) -> None:
    """numa_pressure.go detectNumaPressures: min + 1 GiB, low + 256 MiB, low raised when cache is scarce."""
    wm = zoneinfo_watermarks(7 * GiB, zone_min, zone_low, inactive)
    assert (wm.free, wm.min, wm.low, wm.source) == (7 * GiB, want_min, want_low, "zoneinfo")


def test_below_min_fast_path_with_default_wait() -> None:
    """Defaults 12/6/1: below min jumps to 11 (RECLAIMED_EVICTION); staying below min keeps 11, and the
    next round below low reaches EVICTION; one round above low drops back to T_reclaimed."""
    wm_min = Watermarks(free=GiB, min=2 * GiB, low=5 * GiB, source="zoneinfo")
    wm_low = Watermarks(free=int(2.5 * GiB), min=2 * GiB, low=5 * GiB, source="zoneinfo")
    wm_ok = Watermarks(free=6 * GiB, min=2 * GiB, low=5 * GiB, source="zoneinfo")
    steps = [(wm_min, R, 11, "below_min"), (wm_min, R, 11, "below_min"), (wm_low, E, 13, "below_low")]
    steps += [(wm_ok, N, 6, "above_low"), (wm_ok, N, 5, "above_low")]
    state = NumaCounterState()
    for wm, action, count, branch in steps:
        decision, state = numa_pressure_step(wm, state)
        assert (decision.action, decision.count, decision.branch) == (action, count, branch)


def test_below_min_with_long_wait_can_lower_the_count() -> None:
    """The anchor sets count = T - wait whenever count < T; with wait 3 a count of 10 drops to 9."""
    wm = Watermarks(free=0, min=GiB, low=2 * GiB, source="zoneinfo")
    params = NumaCounterParams(fast_eviction_wait_cycle=3)
    decision, state = numa_pressure_step(wm, NumaCounterState(10), params)
    assert (decision.action, state.count) == (R, 9)
    decision, state = numa_pressure_step(wm, NumaCounterState(12), params)
    assert (decision.action, state.count) == (E, 12)


@pytest.mark.parametrize(
    ("free_pages", "count", "want_count", "want_deep"),
    [
        (2, 2, 3, False),  # (0 + 5) // 2 = 2 pages: 2 < 2 is false in pages (true in bytes)
        (1, 2, 4, True),
        (1, 1, 2, False),  # deep only counts once count > 2
    ],
)
def test_numa_midpoint_rounds_in_pages(free_pages: int, count: int, want_count: int, want_deep: bool) -> None:
    """The (min+low)/2 midpoint is an integer division of pages, as in the anchor."""
    wm = Watermarks(free=free_pages * 4096, min=0, low=5 * 4096, source="metrics")
    decision, state = numa_pressure_step(wm, NumaCounterState(count))
    assert (state.count, decision.deep) == (want_count, want_deep)


@pytest.mark.parametrize(("t_non", "t_rec", "wait"), [(3, 1, 4), (-1, 0, 0), (3, -1, 0), (3, 1, -1)])
def test_numa_params_reject_nonsense(t_non: int, t_rec: int, wait: int) -> None:
    """A wait beyond T_nonreclaimed would drive the count negative; negative thresholds mean nothing."""
    with pytest.raises(ValueError):
        NumaCounterParams(t_non, t_rec, wait)


def test_numa_state_round_trips() -> None:
    assert NumaCounterState.from_dict(NumaCounterState(7).to_dict()) == NumaCounterState(7)
    assert NumaCounterState.from_dict({}) == NumaCounterState(0)


_sizes = st.integers(min_value=0, max_value=16 * GiB)


@st.composite
def _watermarks(draw: st.DrawFn) -> Watermarks:
    kind = draw(st.sampled_from(["zoneinfo", "metrics", "raw"]))
    free = draw(_sizes)
    if kind == "zoneinfo":
        return zoneinfo_watermarks(free, draw(_sizes), draw(_sizes), draw(_sizes))
    if kind == "metrics":
        return metric_watermarks(free, draw(_sizes), draw(st.integers(0, 1000)))
    return Watermarks(free, draw(_sizes), draw(_sizes), "raw")


@st.composite
def _params(draw: st.DrawFn) -> NumaCounterParams:
    t_non = draw(st.integers(1, 20))
    return NumaCounterParams(t_non, draw(st.integers(0, t_non)), draw(st.integers(0, min(3, t_non))))


@settings(max_examples=300, deadline=None)
@given(_params(), st.integers(0, 30), st.lists(_watermarks(), max_size=40))
def test_numa_counter_properties(params: NumaCounterParams, start: int, rounds: list[Watermarks]) -> None:
    """Invariants of the counter, for any watermarks and thresholds with 0 <= T_reclaimed <= T_nonreclaimed:

    - the count never goes negative;
    - free at or above both watermarks never raises it, and leaves it at most T_reclaimed (the branch is
      decided in whole pages, so free a few bytes under low within the same page counts as above);
    - a round below low raises it by 1 or 2; a round below min never leaves NOOP;
    - EVICTION exactly when count >= T_nonreclaimed;
    - envelope: count <= max(start, T_nonreclaimed) + 2 x (rounds below low so far), because below-low
      adds at most 2, below-min sets at most T_nonreclaimed, and above-low only decays.
    (Above low but below min is the below-min branch: zoneinfo min can exceed low.)
    """
    state = NumaCounterState(start)
    below_low_rounds = 0
    for wm in rounds:
        decision, new = numa_pressure_step(wm, state, params)
        assert new.count == decision.count >= 0
        if wm.free >= max(wm.low, wm.min):
            assert decision.branch == "above_low"
        if decision.branch == "above_low":
            assert new.count <= state.count
            assert new.count <= params.reclaimed_times_threshold
        elif decision.branch == "below_low":
            below_low_rounds += 1
            assert state.count + 1 <= new.count <= state.count + 2
        else:
            assert decision.action is not Action.NOOP
        assert (decision.action is Action.EVICTION) == (new.count >= params.times_threshold)
        assert new.count <= max(start, params.times_threshold) + 2 * below_low_rounds
        state = new


# ------------------------------------------------------------------ system memory pressure


@pytest.mark.parametrize(
    ("free", "total", "scale", "minimum", "met", "threshold"),
    [
        # TestSystemPressureEvictionPlugin_ThresholdMet: 100 GiB, scale 100 (1 GiB), minimum 5 GiB
        (45 * GiB, 100 * GiB, 100, 5 * GiB, False, 5 * GiB),
        (11 * GiB, 100 * GiB, 100, 5 * GiB, False, 5 * GiB),
        (12 * GiB, 100 * GiB, 100, 5 * GiB, False, 5 * GiB),
        # below the minimum; and the scaled watermark winning over a zero minimum
        (4 * GiB, 100 * GiB, 100, 5 * GiB, True, 5 * GiB),
        (GiB - 1, 100 * GiB, 100, 0, True, GiB),
        (GiB, 100 * GiB, 100, 0, False, GiB),
    ],
)
def test_system_watermark(free: int, total: int, scale: int, minimum: int, met: bool, threshold: int) -> None:
    result = system_watermark_pressure(free, total, scale, minimum)
    assert (result.met, result.threshold) == (met, threshold)


def test_psi_timer_reclaimed_then_eviction() -> None:
    """system_pressure.go detectWorkloadMemPSI with flag defaults 15/4/15s: the pod average held
    15 s -> RECLAIMED_EVICTION, 45 s -> EVICTION; the node gate dropping resets the timer."""
    pods = [5.0, 5.0, 5.0]
    rounds = [  # (now, node avg10, pods) -> (action, since)
        (0.0, 20.0, pods, N, 0.0),
        (9.0, 20.0, pods, N, 0.0),
        (15.0, 20.0, pods, R, 0.0),
        (44.9, 20.0, pods, R, 0.0),  # whole seconds: 44 < 45
        (45.0, 20.0, pods, E, 0.0),
        (54.0, 14.99, pods, N, None),  # node some avg10 truncates to 14 < 15
        (63.0, 20.0, pods, N, 63.0),
    ]
    state = PsiState()
    for now, node, values, action, since in rounds:
        decision, state = psi_pressure_step(node, values, now, state)
        assert (decision.action, state.since) == (action, since), now


@pytest.mark.parametrize(
    ("pods", "average", "pressured", "counts"),
    [
        ([1.9, 1.9, 1.9, 20.0], None, 1, False),  # avg10 truncated: 1 is not > 1
        ([2.0, 2.0, 9.0], 4, 3, True),
        ([2.0, 2.0, 2.0, 9.0], 3, 4, False),  # 15 // 4 = 3 < 4
        ([2.0, 2.0, 2.0, 10.0], 4, 4, True),
        ([0.0, 0.0, 3.0, 3.0, 3.0], 1, 3, False),  # unpressured pods still weigh in the average
    ],
)
def test_psi_pod_average(pods: list[float], average: int | None, pressured: int, counts: bool) -> None:
    """Integer pod average over all shared/dedicated pods, needing 3 pods with avg10 > 1."""
    decision, state = psi_pressure_step(30.0, pods, 100.0, PsiState())
    assert (decision.pod_average, decision.pressured_pods) == (average, pressured)
    assert (state.since == 100.0) is counts


def test_psi_dip_keeps_timer_unless_strict() -> None:
    """While the node gate holds, a round with too few pressured pods keeps the anchor's timer;
    reset_when_below=True restarts it (strictly continuous pressure)."""
    few = [5.0, 0.0, 0.0]
    _, kept = psi_pressure_step(30.0, few, 20.0, PsiState(since=0.0))
    assert kept.since == 0.0
    decision, _ = psi_pressure_step(30.0, [5.0] * 3, 30.0, kept)
    assert decision.action is R
    _, reset = psi_pressure_step(30.0, few, 20.0, PsiState(since=0.0), PsiParams(reset_when_below=True))
    assert reset.since is None
    unreadable, cleared = psi_pressure_step(None, [5.0] * 3, 20.0, PsiState(since=0.0))
    assert (unreadable.action, cleared.since) == (N, None)
    assert PsiState.from_dict(PsiState(12.5).to_dict()) == PsiState(12.5)


def test_victim_numa_and_stronger() -> None:
    assert victim_numa({0: 5 * GiB, 1: 2 * GiB, 2: 2 * GiB}) == 1
    assert victim_numa({}) is None
    assert stronger(R, E, N) is E
    assert stronger(N, R) is R
    assert stronger() is N


# ------------------------------------------------------------------ RSS overuse


def _pod(name: str, requests: list[float | None], threshold: str | None = None) -> Workload:
    annotations = {}
    if threshold is not None:
        annotations["katalyst.kubewharf.io/memory_enhancement"] = threshold
    containers = tuple(
        Container(f"c{i}", requests=MappingProxyType({} if r is None else {"memory": r}))
        for i, r in enumerate(requests)
    )
    return Workload(uid=name, name=name, annotations=MappingProxyType(annotations), containers=containers)


T08 = '{"rss_overuse_threshold":"0.8"}'
RSS_PODS = [  # TestRssOveruseEvictionPlugin_GetEvictPods, shared pods 1-8 (pod-9 is dedicated: filtered out)
    (_pod("pod-1", [10 * GiB]), 9 * GiB),
    (_pod("pod-2", [None]), 9 * GiB),
    (_pod("pod-3", [10 * GiB], T08), 9 * GiB),
    (_pod("pod-4", [None], T08), 9 * GiB),
    (_pod("pod-5", [10 * GiB, 10 * GiB]), 16 * GiB),
    (_pod("pod-6", [10 * GiB, None]), 10 * GiB),
    (_pod("pod-7", [10 * GiB, 4 * GiB], T08), 7 * GiB),
    (_pod("pod-8", [10 * GiB, 4 * GiB], T08), 12 * GiB),
]


@pytest.mark.parametrize(
    ("default", "want"),
    [(1.05, {"pod-3", "pod-8"}), (0.1, {"pod-1", "pod-3", "pod-5", "pod-8"})],
)
def test_rss_overuse_anchor(default: float, want: set[str]) -> None:
    """TestRssOveruseEvictionPlugin_GetEvictPods: pod thresholds win; pods missing a request are skipped."""
    results = {w.name: rss_overuse(w, rss, default) for w, rss in RSS_PODS}
    assert {name for name, r in results.items() if r is not None and r.over} == want
    assert {name for name, r in results.items() if r is None} == {"pod-2", "pod-4", "pod-6"}
    pod8 = results["pod-8"]
    assert pod8 is not None and (pod8.threshold, pod8.request) == (0.8, 14 * GiB)


@pytest.mark.parametrize(
    ("annotation", "want_threshold"),
    [
        ('{"rss_overuse_threshold":"abc"}', None),  # invalid: the pod is skipped, not defaulted
        ('{"rss_overuse_threshold":"0"}', None),
        ('{"rss_overuse_threshold":"-1"}', None),
        ('{"rss_overuse_threshold":1.5}', 1.5),
        ('{"numa_binding":"true"}', 1.05),
        ("not json", 1.05),
    ],
)
def test_rss_overuse_threshold_validity(annotation: str, want_threshold: float | None) -> None:
    result = rss_overuse(_pod("p", [GiB], annotation), 2 * GiB)
    assert (result.threshold if result else None) == want_threshold


def test_rss_overuse_ignores_init_containers() -> None:
    w = Workload(
        uid="p",
        name="p",
        containers=(Container("init", init=True), Container("app", requests={"memory": float(GiB)})),
    )
    result = rss_overuse(w, 1.1 * GiB)
    assert result is not None and result.over


# ------------------------------------------------------------------ reclaimed resource overcommit


def test_reclaimed_overcommit_hard_met() -> None:
    """TestNewReclaimedResourcesEvictionPlugin: 5000 + 5000 reclaimed millicpu against 1000 allocatable
    (threshold 5.0 -> 5000) is HARD_MET; a victim is chosen."""
    pods = [
        Workload(
            uid="1", name="test-pod-1", containers=(Container("c", requests={RECLAIMED_MILLICPU: 5000}),)
        ),
        Workload(
            uid="2", name="test-pod-2", containers=(Container("c", requests={RECLAIMED_MILLICPU: 5000}),)
        ),
        Workload(uid="3", name="test-pod-3"),
    ]
    result = reclaimed_overcommit(
        [{RECLAIMED_MILLICPU: w.request(RECLAIMED_MILLICPU)} for w in pods], {RECLAIMED_MILLICPU: 1000}
    )
    assert (result.met, result.scope) == (MetType.HARD_MET, RECLAIMED_MILLICPU)
    assert (result.checks[0].used, result.checks[0].total) == (10000, 1000)
    assert [w.name for w in overcommit_victims(pods, RECLAIMED_MILLICPU)][:2] == ["test-pod-1", "test-pod-2"]


def test_reclaimed_overcommit_soft_met() -> None:
    """TestNewResourcesEvictionPlugin: 100 + 50 against 90 is under 5.0 x 90 but over the soft 1.5 x 90."""
    requests = [{RECLAIMED_MILLICPU: 100.0}, {RECLAIMED_MILLICPU: 50.0}]
    assert reclaimed_overcommit(requests, {RECLAIMED_MILLICPU: 90}).met is MetType.NOT_MET
    soft = reclaimed_overcommit(requests, {RECLAIMED_MILLICPU: 90}, soft_thresholds={RECLAIMED_MILLICPU: 1.5})
    assert (soft.met, soft.scope) == (MetType.SOFT_MET, RECLAIMED_MILLICPU)


@pytest.mark.parametrize(
    ("requests", "allocatable", "skip", "met"),
    [
        ([{RECLAIMED_MILLICPU: 10.0}], {}, (), MetType.NOT_MET),  # empty allocatable
        ([], {RECLAIMED_MILLICPU: 1.0}, (), MetType.NOT_MET),  # no reclaimed pods
        ([{RECLAIMED_MILLICPU: 10.0}], {RECLAIMED_MILLICPU: 0}, (RECLAIMED_MILLICPU,), MetType.NOT_MET),
        ([{RECLAIMED_MILLICPU: 10.0}], {RECLAIMED_MILLICPU: 0}, (), MetType.HARD_MET),
        ([{"other": 10.0}], {"other": 1.0}, (), MetType.NOT_MET),  # no threshold configured
        (
            [{RECLAIMED_MILLICPU: 5000.0}],
            {RECLAIMED_MILLICPU: 1000},
            (),
            MetType.NOT_MET,
        ),  # equal is not over
    ],
)
def test_reclaimed_overcommit_edges(
    requests: list[dict[str, float]], allocatable: dict[str, float], skip: tuple[str, ...], met: MetType
) -> None:
    assert reclaimed_overcommit(requests, allocatable, skip_zero=skip).met is met


def test_overcommit_victims_largest_request_first() -> None:
    pods = [
        Workload(uid=str(i), name=f"p{i}", containers=(Container("c", requests={RECLAIMED_MILLICPU: r}),))
        for i, r in enumerate([1000.0, 4000.0, 2000.0])
    ]
    assert [w.name for w in overcommit_victims(pods, RECLAIMED_MILLICPU)] == ["p1", "p2", "p0"]


# ------------------------------------------------------------------ Koordinator BECPUEvict


@pytest.mark.parametrize(
    ("lower", "upper", "valid"),
    [
        (None, None, False),
        (0, 50, False),
        (30, 100, False),
        (40, 30, False),
        (30, 40, True),
        (60, 99, True),
        (61, 80, False),
    ],
)
def test_satisfaction_config(lower: int | None, upper: int | None, valid: bool) -> None:
    """Test_isSatisfactionConfigValid (plus the 60/99 edges)."""
    assert (satisfaction_config_error(lower, upper) is None) is valid


B = BeCpu  # (usage, request, limit) in milli-cores
ZERO = B(0, 0, 0)


@pytest.mark.parametrize(
    ("name", "avg", "current", "usage_threshold", "count", "want"),
    [
        ("test_avgMetricQueryResult_Error", ZERO, ZERO, None, 0, 0),
        ("test_avgMetricQueryResult_count_not_enough", ZERO, ZERO, None, 10, 0),
        ("test_avgMetricQueryResult_CPURealLimit_zero", B(20000, 0, 0), ZERO, None, 59, 0),
        ("test_avgMetricQueryResult_cpuUsage_not_enough", B(10000, 0, 20000), ZERO, None, 59, 0),
        ("test_avgMetricQueryResult_cpuRequest_zero", B(19000, 0, 20000), ZERO, None, 59, 0),
        ("test_avgMetricQueryResult_ResourceSatisfaction_enough", B(19000, 40000, 20000), ZERO, None, 59, 0),
        ("need_release_but_currentMetricQueryResult_invalid", B(9500, 50000, 10000), ZERO, None, 59, 0),
        (
            "need_release_but_current_cpuUsage_not_enough",
            B(9500, 50000, 10000),
            B(5000, 50000, 10000),
            None,
            59,
            0,
        ),
        ("test_avgRelease>currentRelease", B(9500, 50000, 10000), B(13000, 50000, 14000), None, 59, 6000),
        ("test_avgRelease<currentRelease", B(12000, 50000, 13000), B(10000, 50000, 11000), None, 59, 7000),
        ("BEUsageThresholdPercent_50_avg_cpuUsage_not_enough", B(9000, 0, 20000), ZERO, 50, 59, 0),
        (
            "BEUsageThresholdPercent_50_current_cpuUsage_not_enough",
            B(6000, 50000, 10000),
            B(4000, 50000, 10000),
            50,
            59,
            0,
        ),
        (
            "BEUsageThresholdPercent_50_avgRelease>currentRelease",
            B(6000, 50000, 10000),
            B(8000, 50000, 14000),
            50,
            59,
            6000,
        ),
        # evictByAllocatable: node batch-cpu allocatable 8000 (and 0, which counts as 1) replaces the limit
        (
            "need_release_since_allocatable_is_small",
            B(6000, 50000, 8000),
            B(4000, 50000, 8000),
            50,
            59,
            12000,
        ),
        ("need_release_since_allocatable_is_zero", B(6000, 50000, 1), B(4000, 50000, 1), 50, 59, 19999),
    ],
)
def test_be_satisfaction_release(
    name: str, avg: BeCpu, current: BeCpu, usage_threshold: int | None, count: int, want: int
) -> None:
    """Test_CPUEvict_calculateMilliReleaseByBESatisfaction: lower 30, upper 40, collect interval 1 s
    (the default config sets no window, so the window is the interval)."""
    result = be_satisfaction_release(avg, current, 30, 40, usage_threshold, samples=(count, 1, 1))
    assert result.release == want, name


@pytest.mark.parametrize(("allocatable", "want"), [(8000.0, 8000.0), (0.0, 1.0), (None, -1.0), (-5.0, -1.0)])
def test_be_allocatable_limit(allocatable: float | None, want: float) -> None:
    """getBEMilliAllocatable as used by the allocatable cases of the satisfaction test."""
    assert be_allocatable_milli(allocatable) == want


@pytest.mark.parametrize(
    ("usage", "limit", "threshold", "want"),
    [
        (0, 0, None, False),
        (0, 999, None, True),
        (8999, 10000, None, False),
        (9000, 10000, None, True),
        (5000, 10000, 50, True),
    ],
)
def test_be_usage_high_enough(usage: float, limit: float, threshold: int | None, want: bool) -> None:
    assert be_usage_high_enough(usage, limit, threshold) is want


def test_satisfaction_release_edges() -> None:
    assert satisfaction_release(0, 1000, 30, 40) == 0
    assert satisfaction_release(10000, 3001, 30, 40) == 0  # satisfaction 0.3001 > 0.30
    assert satisfaction_release(10000, 3000, 30, 40) == 1000  # int(10000 x 0.1)
    assert satisfaction_release(10000, 3000, 30, 30) == 0  # no gap


@pytest.mark.parametrize(
    ("cpus", "quota", "period", "want"),
    [
        (8, -1, 100000, 8000),
        (8, 400000, 100000, 4000),
        (8, 1000000, 100000, 8000),
        (8, 150000, 100000, 1500),
        (2, 1, 3, 333),
    ],
)
def test_be_real_limit(cpus: int, quota: int, period: int, want: int) -> None:
    """be_resource_collector.go getBECPURealMilliLimit: cpuset x 1000, capped by quota x 1000 / period."""
    assert be_real_limit_milli(cpus, quota, period) == want


@pytest.mark.parametrize(
    ("window", "interval", "count", "want"),
    [
        (60, 1, 19, False),
        (60, 1, 20, True),
        (1, 1, 0, True),
        (61, 2, 10, True),
        (62, 2, 10, True),
        (63, 2, 10, False),
    ],
)
def test_enough_samples(window: int, interval: int, count: int, want: bool) -> None:
    """isAvgQueryResultValid: count x interval >= window / 3 (integer division)."""
    assert enough_samples(window, interval, count) is want


def test_identical_current_state_reuses_average() -> None:
    """Same request and limit now as on average: the average's release stands, no second computation."""
    same = be_satisfaction_release(B(6000, 50000, 8000), B(4000, 50000, 8000), 30, 40, 50)
    assert (same.release, same.avg_release, same.current_release) == (12000, 12000, None)
    moved = be_satisfaction_release(B(9500, 50000, 10000), B(13000, 50000, 14000), 30, 40)
    assert (moved.release, moved.avg_release, moved.current_release) == (6000, 10000, 6000)


def test_samples_gate_release() -> None:
    avg, cur = B(9500, 50000, 10000), B(13000, 50000, 14000)
    assert be_satisfaction_release(avg, cur, 30, 40, samples=(19, 60, 1)).release == 0
    assert be_satisfaction_release(avg, cur, 30, 40, samples=(20, 60, 1)).release == 6000


# ------------------------------------------------------------------ Koordinator CPUEvict / MemoryEvict


@pytest.mark.parametrize(
    ("used_cores", "lower", "want_percent", "want"),
    [
        (81.0, None, 81, 3000),  # Test_calculateReleaseByUsedThresholdPercent: ..._lower78
        (81.0, 80, 81, 1000),  # ..._lower80
        (11.0, 80, None, None),  # lower than threshold
        (80.9999, None, 80, 2000),  # int(80999.9) milli -> 80%
        (79.9999, None, None, None),
    ],
)
def test_cpu_usage_release(
    used_cores: float, lower: int | None, want_percent: int | None, want: int | None
) -> None:
    """cpuevict: 100-core node, threshold 80."""
    result = cpu_usage_release(used_cores, 100_000, 80, lower)
    assert (result.usage_percent if result else None, result.release if result else None) == (
        want_percent,
        want,
    )


@pytest.mark.parametrize(
    ("used", "lower", "want"),
    [
        (
            115 * 10**9,
            None,
            20_400_000_000,
        ),  # memoryevict Test_calculateReleaseByUsedThresholdPercent: lower78
        (115 * 10**9, 80, 18_000_000_000),  # lower80
        (80 * 10**9, 80, None),  # lower than threshold (66%)
    ],
)
def test_memory_usage_release(used: int, lower: int | None, want: int | None) -> None:
    """memoryevict: 120G node, threshold 80; usage% = 115e9 x 100 / 120e9 = 95 (integer)."""
    result = memory_usage_release(used, 120 * 10**9, 80, lower)
    assert (result.release if result else None) == want


def test_memory_release_agrees_with_rule_path() -> None:
    """eviction.release_target (the rule path, float) gives the same target on the anchor numbers."""
    facts = {"memory.usage_bytes": 115e9, "memory.capacity_bytes": 120e9}
    target = release_target(ReleaseSpec.of({"resource": "memory", "lowerPercent": 78}), facts)
    exact = memory_usage_release(115e9, 120 * 10**9, 80)
    assert target is not None and exact is not None
    assert int(target[0]) == exact.release == 20_400_000_000


def test_usage_release_without_capacity() -> None:
    """test_node_memorycapacity_invalid: a zero capacity evicts nothing."""
    assert memory_usage_release(115e9, 0, 80) is None


@pytest.mark.parametrize(
    ("threshold", "lower", "valid"),
    [
        (None, None, False),  # CPUEvictThresholdPercent nil / MemoryEvictThresholdPercent nil
        (-1, None, False),
        (20, None, True),  # lower defaults to 18
        (20, 30, False),
        (20, 10, True),
        (80, 80, False),  # memoryevict: lower == threshold
        (85, 75, True),
    ],
)
def test_usage_config(threshold: int | None, lower: int | None, valid: bool) -> None:
    """Test_isUsedThresholdConfigValid and memoryevict Test_generateConfigCheck (priority-threshold
    checks belong to victim selection, not here)."""
    assert (usage_config_error(threshold, lower) is None) is valid
