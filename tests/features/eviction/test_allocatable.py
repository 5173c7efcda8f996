"""Koordinator's MemoryAllocatableEvict / CPUAllocatableEvict (trigger requestOverAllocatable).

The release rows are Koordinator's Test_calculateMilliReleaseByAllocatableThresholdPercent and
Test_memoryEvict numbers (pkg/koordlet/qosmanager/plugins/{cpuevict,memoryevict}); the config rows
are Test_isAllocatableThresholdConfigValid. The engine rows run the trigger through a whole tick.
"""

from __future__ import annotations

from types import MappingProxyType

import pytest

from engine.config.errors import PolicyError
from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState
from engine.features.eviction.allocatable import release_amount, requested
from engine.features.eviction.allocatable_spec import config_error
from engine.model.facts import Container, Workload
from engine.model.intents import EvictIntent
from engine.plan.planner import Guards
from engine.tick import run_tick
from tests.builders import GiB, policy, snapshot

BATCH_MEMORY = "kubernetes.io/batch-memory"


@pytest.mark.parametrize(
    ("used", "allocatable", "threshold", "lower", "expected"),
    [
        pytest.param(0, 100, 80, 70, None, id="nothing-requested"),
        pytest.param(85000, 100000, 80, 70, 15000, id="batch-cpu-85-of-100k"),
        pytest.param(80000, 100000, 80, 70, None, id="at-the-threshold-nothing"),
        pytest.param(85000, None, 80, 70, 85000, id="not-published-releases-all"),
        pytest.param(85000, 0, 80, 70, 85000, id="published-zero-releases-all"),
        # Go's float64 as in the anchor: (0.5 - 0.4) x 100Gi = 10737418239.99..., truncated
        pytest.param(50 * GiB, 100 * GiB, 45, 40, 10 * GiB - 1, id="batch-memory-50-of-100Gi"),
    ],
)
def test_release_amount(used: float, allocatable: float | None, threshold: int, lower: int, expected: float | None) -> None:
    assert release_amount(used, allocatable, threshold, lower) == expected


def _pod(uid: str, priority: int | None, batch_memory: float, labels: dict[str, str] | None = None) -> Workload:
    return Workload(
        uid=uid,
        name=uid,
        namespace="default",
        labels=MappingProxyType({"koordinator.sh/qosClass": "BE", **(labels or {})}),
        priority=priority,
        kube_qos="BestEffort",
        containers=(Container("c", requests={BATCH_MEMORY: batch_memory}),),
    )


def test_the_sum_is_over_the_band_opted_in_or_not() -> None:
    pods = [
        _pod("in", 5000, 20 * GiB, {"koordinator.sh/eviction-enabled": "true"}),
        _pod("not-opted-in", 5000, 30 * GiB),
        _pod("above", 9000, 40 * GiB),
        _pod("no-priority", None, 50 * GiB),
    ]
    assert requested(pods, BATCH_MEMORY, 5999) == 50 * GiB


@pytest.mark.parametrize(
    ("threshold", "lower", "max_priority", "error"),
    [
        pytest.param(80, 90, None, "lowerPercent 90 must be below thresholdPercent 80", id="lower-above"),
        pytest.param(80, 80, None, "lowerPercent 80 must be below thresholdPercent 80", id="lower-equal"),
        pytest.param(80, 70, None, "needs victims.maxPriority", id="no-priority-threshold"),
        pytest.param(90, 0, 9999, "above 7999", id="prod-band"),
        pytest.param(80, 70, 7500, None, id="mid-default"),
        pytest.param(85, 75, 7999, None, id="mid-max"),
    ],
)
def test_config_error(threshold: int, lower: int, max_priority: int | None, error: str | None) -> None:
    got = config_error(threshold, lower, max_priority)
    assert (got is None) if error is None else (got is not None and error in got)


RULE = """
rules:
  - name: alloc
    then:
      evict:
        victims: {maxPriority: 5999, requireLabel: {koordinator.sh/eviction-enabled: "true"}}
        trigger: {requestOverAllocatable: {resource: batch-memory, thresholdPercent: %d, lowerPercent: %d}}
        release: {resource: batch-memory}
"""


def _evictions(threshold: int, lower: int, allocatable: dict[str, float]) -> list[EvictIntent]:
    opted = {"koordinator.sh/eviction-enabled": "true"}
    pods = [_pod("small", 5000, 20 * GiB, opted), _pod("large", 5000, 30 * GiB, opted), _pod("unmeasured", 5000, 60 * GiB, opted)]
    snap = snapshot(
        pods=pods,
        pod_metrics={"small": {"memory.usage_bytes": 10 * GiB}, "large": {"memory.usage_bytes": 20 * GiB}},
        allocatable=allocatable,
    )
    engine = Engine(policy(RULE % (threshold, lower)))
    result = run_tick(engine, snap, EngineState(), Guards())
    return [i for i in result.evaluation.intents if isinstance(i, EvictIntent)]


def test_larger_request_first_until_the_release_is_met() -> None:
    """110Gi requested of 100Gi (the unmeasured pod counts in the sum but is no victim): release
    floor((1.1 - 0.4) x 100Gi) = 70Gi; large (30Gi) then small (20Gi) do not reach it, both go."""
    got = _evictions(45, 40, {BATCH_MEMORY: 100 * GiB})
    assert [i.uid for i in got] == ["large", "small"]
    assert got[0].release is not None and got[0].release.target == 70 * GiB
    assert [i.credit for i in got] == [30 * GiB, 20 * GiB]


def test_within_the_threshold_nothing_is_evicted() -> None:
    assert _evictions(120, 100, {BATCH_MEMORY: 100 * GiB}) == []


def test_a_policy_koordinator_would_skip_is_refused_located() -> None:
    with pytest.raises(PolicyError) as err:
        policy(RULE.replace("maxPriority: 5999, ", "") % (80, 70))
    assert "requestOverAllocatable" in str(err.value) and "needs victims.maxPriority" in str(err.value)


def test_release_resource_must_be_the_trigger_resource() -> None:
    with pytest.raises(PolicyError) as err:
        policy(RULE.replace("release: {resource: batch-memory}", "release: {resource: memory}") % (80, 70))
    assert "release.resource 'memory' is not the trigger's resource 'batch-memory'" in str(err.value)
