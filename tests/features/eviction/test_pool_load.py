"""Katalyst's shared-pool load pressure: bounds, ring counts, sampling, verdict (issue 16).

Anchor: katalyst-core ``cpueviction/strategy/pressure_load_test.go`` (TestThresholdMet,
TestGetTopEvictionPods, TestCPUPressureLoadEviction_collectMetrics) and ``cpu/util/metric_ring.go``
``Count``. The issue: the bundled cpu-load-pressure rule compared the node's load with all CPUs (16)
instead of the share pool's size (10 in the anchor's case), because no fact gave a pool's size or
load. Each row below names the anchor case whose numbers it carries.
"""

from __future__ import annotations

import pytest

from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState, PressureState
from engine.features.eviction.pool_load import (
    HARD,
    NONE,
    SOFT,
    PoolLoadParams,
    PoolLoadState,
    Sample,
    bounds,
    node_verdict,
    over_counts,
    pool_load_step,
)
from engine.model.intents import EvictIntent
from tests.builders import pod, policy, snapshot

ANCHOR = PoolLoadParams(ring_size=1)


@pytest.mark.parametrize(
    ("params", "size", "load", "by_size", "expected"),
    [
        pytest.param(ANCHOR, 10, 2.4, False, (10.0, 18.0), id="default-bound-10-cpus"),
        pytest.param(ANCHOR, 8, 3.4, False, (8.0, 14.4), id="default-bound-8-cpus"),
        pytest.param(
            PoolLoadParams(ring_size=1, advised=True), 8, 3.4, True, (1.0, 14.4), id="advised-pool-size-pressure"
        ),
        pytest.param(
            PoolLoadParams(ring_size=1, advised=True), 8, 3.4, False, (4.4, 4.4 * 1.8), id="advised-healthy"
        ),
    ],
)
def test_bounds_match_collect_metrics(
    params: PoolLoadParams, size: int, load: float, by_size: bool, expected: tuple[float, float]
) -> None:
    lower, upper = bounds(params, size, load, by_size)
    assert lower == pytest.approx(expected[0])
    assert upper == pytest.approx(expected[1])


@pytest.mark.parametrize(
    ("load", "met"),
    [
        pytest.param(1.0, NONE, id="not-met"),
        pytest.param(10.0, NONE, id="at-lower-bound-is-not-over"),
        pytest.param(11.0, SOFT, id="soft"),
        pytest.param(18.0, SOFT, id="at-upper-bound-is-soft"),
        pytest.param(50.0, HARD, id="hard"),
    ],
)
def test_threshold_met_on_a_ten_cpu_pool(load: float, met: str) -> None:
    """TestThresholdMet: pool of 10 CPUs, one sample in a ring of 1."""
    _, verdicts = pool_load_step(ANCHOR, PoolLoadState(), 0.0, {"share": (10, load)}, {"p": load}, False)
    assert [v.met for v in verdicts] == [met]


def test_met_percentage_divides_by_the_ring_size() -> None:
    """Katalyst divides by the ring's size, not by the samples taken: 7 hard samples of 10 is 70%,
    below 80%; the 8th makes it hard."""
    params = PoolLoadParams(ring_size=10, interval=30.0)
    state = PoolLoadState()
    for i in range(7):
        state, verdicts = pool_load_step(params, state, 30.0 * i, {"share": (10, 50.0)}, {}, False)
    assert verdicts[0].met == NONE and verdicts[0].hard_over == 7
    state, verdicts = pool_load_step(params, state, 210.0, {"share": (10, 50.0)}, {}, False)
    assert verdicts[0].met == HARD


def test_one_sample_per_interval() -> None:
    params = PoolLoadParams(ring_size=10, interval=30.0)
    state, _ = pool_load_step(params, PoolLoadState(), 0.0, {"share": (10, 50.0)}, {"p": 50.0}, False)
    state, _ = pool_load_step(params, state, 29.0, {"share": (10, 50.0)}, {"p": 50.0}, False)
    assert len(state.pools["share"]) == 1 and state.pods["p"] == (50.0,)
    state, _ = pool_load_step(params, state, 30.0, {"share": (10, 50.0)}, {"p": 50.0}, False)
    assert len(state.pools["share"]) == 2 and state.pods["p"] == (50.0, 50.0)


def test_gone_pools_and_pods_are_dropped() -> None:
    state = PoolLoadState(0.0, {"old": (Sample(1, 1, 2),)}, {"gone": (1.0,)})
    state, _ = pool_load_step(ANCHOR, state, 60.0, {"share": (4, 1.0)}, {"p": 1.0}, False)
    assert set(state.pools) == {"share"} and set(state.pods) == {"p"}


def test_a_sample_without_lower_bound_counts_for_nothing() -> None:
    assert over_counts((Sample(5.0, 0.0, 0.0), Sample(5.0, 1.0, 9.0))) == (1, 0)


def test_node_verdict_prefers_a_hard_pool() -> None:
    _, verdicts = pool_load_step(
        ANCHOR, PoolLoadState(), 0.0, {"a": (4, 5.0), "b": (4, 50.0), "c": (4, 1.0)}, {}, False
    )
    v = node_verdict(verdicts)
    assert v is not None and (v.pool, v.met) == ("b", HARD)


def test_state_round_trips() -> None:
    state = PoolLoadState(30.0, {"share": (Sample(3.4, 8.0, 14.4),)}, {"p": (1.0, 2.4)})
    assert PoolLoadState.from_dict(state.to_dict()) == state
    assert PressureState.from_dict(PressureState(pool_load=state).to_dict()).pool_load == state


SPEC = """
classes:
  - {name: shared, match: [{labels: {app: web}}], cpu: {policy: shared, pool: share}}
pools:
  - {name: share, kind: share, size: {fromRequests: 1.0, min: 4}}
  - {name: reclaim, kind: reclaim, size: {remainder: true, min: 4}}
pressure:
  poolLoad: {ringSize: 1}
rules:
  - name: load
    when: {node.cpu.pool_load_pressure: {eq: hard}}
    then:
      evict:
        trigger: {poolLoad: {}}
        victims: {classes: [shared]}
        maxPerRound: 1
"""


def test_the_pool_size_not_the_node_size_sets_the_bound() -> None:
    """The issue's case: 16 CPUs, a share pool of 4 (its min). A load of 10 is below 16 x 1.8 but
    above 4 x 1.8 = 7.2: hard, and the pod with the highest load in the pool goes."""
    pol = policy(SPEC)
    web = pod("web", labels={"app": "web"}, cpu=1.0)
    api = pod("api", labels={"app": "web"}, cpu=1.0)
    snap = snapshot(
        pods=[web, api],
        pod_metrics={"web": {"cpu.load_1min": 3.0}, "api": {"cpu.load_1min": 7.0}},
    )
    ev = Engine(pol).evaluate(snap, EngineState())
    evicts = [i for i in ev.intents if isinstance(i, EvictIntent)]
    assert [i.uid for i in evicts] == ["api"]
    trigger = evicts[0].provenance.inputs["trigger"]
    assert (trigger["pool"], trigger["poolCpus"], trigger["load"], trigger["upperBound"]) == (
        "share",
        4,
        10.0,
        pytest.approx(7.2),
    )


def test_usage_stands_in_for_a_missing_load() -> None:
    pol = policy(SPEC)
    web = pod("web", labels={"app": "web"}, cpu=1.0)
    snap = snapshot(pods=[web], pod_metrics={"web": {"cpu.usage_cores": 2.0}})
    ev = Engine(pol).evaluate(snap, EngineState())
    assert ev.state.pressure.pool_load.pools["share"][0].value == 2.0
    assert not [i for i in ev.intents if isinstance(i, EvictIntent)]


def test_between_samples_the_verdict_stands() -> None:
    """One sample per 30s (the bundled interval): a load spike 10s after a sample changes nothing
    until the next sample, and no pod is read in between."""
    pol = policy(SPEC.replace("poolLoad: {ringSize: 1}", "poolLoad: {ringSize: 1, interval: 30s}"))
    engine = Engine(pol)
    web = pod("web", labels={"app": "web"}, cpu=1.0)
    ev = engine.evaluate(snapshot(time=1000.0, pods=[web], pod_metrics={"web": {"cpu.load_1min": 1.0}}), EngineState())
    spike = {"web": {"cpu.load_1min": 50.0}}
    ev = engine.evaluate(snapshot(time=1010.0, pods=[web], pod_metrics=spike), ev.state)
    assert not [i for i in ev.intents if isinstance(i, EvictIntent)]
    ev = engine.evaluate(snapshot(time=1030.0, pods=[web], pod_metrics=spike), ev.state)
    assert [i.uid for i in ev.intents if isinstance(i, EvictIntent)] == ["web"]
