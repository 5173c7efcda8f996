"""Katalyst's suppression-tolerance eviction (engine/features/eviction/tolerance.py): the tables
moved here with the code from the suppress feature, anchored on Katalyst's numbers."""

from __future__ import annotations

import math

import pytest

from engine.features.eviction.tolerance import (
    ReclaimedPod,
    ReclaimPoolSupply,
    order_reclaimed_pods,
    suppression_eviction_step,
)

# The anchor's reclaim pool 1,3-6,9,11-14: 10 CPUs at usage ratio 0.5 each.
POOL = ReclaimPoolSupply(
    pool_cpus=10, usage_ratio_sum=5.0, cgroup_usage_cores=5.0, cfs_quota_us=20000, cfs_period_us=1000
)
QUOTA_LIMITED = ReclaimPoolSupply(
    pool_cpus=10, usage_ratio_sum=5.0, cgroup_usage_cores=55.0, cfs_quota_us=5000, cfs_period_us=1000
)


def pod(key: str, cores: float, priority: int = 0, tolerance: float | None = 1.2) -> ReclaimedPod:
    return ReclaimedPod(key, round(cores * 1000), priority, tolerance)


EVICTION_CASES = [
    # id, pool, pods, expected supply, victims on the second tick
    ("no over tolerance rate pod", POOL, (pod("pod-1/pod-1", 2),), 10.0, ()),
    # 19 / 10 = 1.9 > 1.2: pod-1 (15) goes; then 4 / 10 = 0.4 keeps pod-2.
    ("over tolerance rate", POOL, (pod("pod-1/pod-1", 15), pod("pod-2/pod-2", 4)), 10.0, ("pod-1/pod-1",)),
    # supply min(5 + 55, 5000/1000) = 5: 19 / 5 = 3.8, then 4 / 5 = 0.8.
    ("quota limited", QUOTA_LIMITED, (pod("pod-2/pod-2", 4), pod("pod-1/pod-1", 15)), 5.0, ("pod-1/pod-1",)),
]


@pytest.mark.parametrize(
    ("pool", "pods", "supply", "victims"), [c[1:] for c in EVICTION_CASES], ids=[c[0] for c in EVICTION_CASES]
)
def test_suppression_eviction_matches_katalyst(
    pool: ReclaimPoolSupply, pods: tuple[ReclaimedPod, ...], supply: float, victims: tuple[str, ...]
) -> None:
    """TestCPUPressureSuppression_GetEvictPods: two calls minSuppressionToleranceDuration apart; nothing
    is evicted on the first, the over-tolerance pod on the second."""
    first = suppression_eviction_step(pods, pool, {}, now=1000.0, min_duration=1.0)
    assert first.supply == supply
    assert first.victims == ()
    second = suppression_eviction_step(pods, pool, first.since, now=1001.5, min_duration=1.0)
    assert second.victims == victims
    assert set(second.since) == set(victims)  # victims keep their time, the others fell back under


def test_duration_is_strictly_longer_than_the_minimum() -> None:
    """katalyst.md §3.9: evicted when the rate has been over tolerance for *longer than* 300 s."""
    pods = (pod("ns/a", 30, tolerance=None),)
    pool = ReclaimPoolSupply(pool_cpus=4, usage_ratio_sum=4.0, cgroup_usage_cores=2.0)
    since: dict[str, float] = {}
    for now, evicted in ((0.0, False), (300.0, False), (300.5, True)):
        step = suppression_eviction_step(pods, pool, since, now)
        assert bool(step.victims) == evicted, now
        since = dict(step.since)
    assert since == {"ns/a": 0.0}


def test_default_tolerance_is_the_maximum_rate() -> None:
    """A pod without suppression_tolerance_rate tolerates up to maxSuppressionToleranceRate (5): 10/2 = 5
    is tolerated, 12/2 = 6 is not; an annotation above 5 is capped to 5."""
    pool = ReclaimPoolSupply(pool_cpus=2, usage_ratio_sum=0.0, cgroup_usage_cores=0.0)
    at = suppression_eviction_step((pod("ns/a", 10, tolerance=None),), pool, {}, 0.0)
    assert at.since == {} and at.checks[0].tolerance == 5.0
    over = suppression_eviction_step((pod("ns/a", 12, tolerance=50.0),), pool, {}, 0.0)
    assert over.since == {"ns/a": 0.0} and over.checks[0].rate == 6.0


def test_zero_supply_is_an_infinite_rate() -> None:
    """No supply at all (pool busy with shared pods, quota 0 usage) is +inf: every pod is over tolerance."""
    pool = ReclaimPoolSupply(pool_cpus=4, usage_ratio_sum=6.0, cgroup_usage_cores=0.0)
    step = suppression_eviction_step((pod("ns/a", 1, tolerance=100.0),), pool, {"ns/a": 0.0}, 301.0)
    assert pool.supply == 0.0
    assert step.checks[0].rate == math.inf
    assert step.victims == ("ns/a",)


def test_requests_are_summed_then_rounded_up_to_cores() -> None:
    """Katalyst divides Quantity.Value() of the summed requests, i.e. whole cores rounded up:
    3 x 500m = 1500m counts as 2 cores, so 2 / 1 = 2 > 1.8."""
    pool = ReclaimPoolSupply(pool_cpus=1, usage_ratio_sum=0.0, cgroup_usage_cores=0.0)
    pods = tuple(ReclaimedPod(f"ns/p{i}", 500, 0, 1.8) for i in range(3))
    step = suppression_eviction_step(pods, pool, {}, 0.0)
    assert step.total_request_milli == 1500
    assert step.checks[0].rate == 2.0
    assert set(step.since) == {"ns/p0", "ns/p1", "ns/p2"}


def test_victims_leave_the_sum_one_by_one() -> None:
    """Each eviction lowers the rate before the next pod is checked, so a second pod is only evicted
    while the rate is still over its tolerance: 12/2 = 6 evicts a, 8/2 = 4 evicts b (tol 3), 4/2 = 2
    keeps c (tol 3)."""
    pool = ReclaimPoolSupply(pool_cpus=2, usage_ratio_sum=0.0, cgroup_usage_cores=0.0)
    pods = (
        pod("ns/a", 4, tolerance=None),
        pod("ns/b", 4, priority=1, tolerance=3),
        pod("ns/c", 4, priority=2, tolerance=3),
    )
    old = {"ns/a": 0.0, "ns/b": 0.0, "ns/c": 0.0, "ns/gone": 0.0}
    step = suppression_eviction_step(pods, pool, old, 400.0)
    assert step.victims == ("ns/a", "ns/b")
    assert [c.rate for c in step.checks] == [6.0, 4.0, 2.0]
    assert dict(step.since) == {"ns/a": 0.0, "ns/b": 0.0}  # c is within tolerance, gone is no longer a pod


def test_order_is_request_then_lower_priority_then_key_descending() -> None:
    """Katalyst's MultiSorter: reverse CPU request, reverse priority (greater-first comparator reversed),
    then the namespace/name comparator, which places the greater key first."""
    pods = [pod("ns/a", 1, 5), pod("ns/b", 1, 5), pod("ns/c", 1, -1), pod("ns/d", 2, 100)]
    assert [p.key for p in order_reclaimed_pods(pods)] == ["ns/d", "ns/c", "ns/b", "ns/a"]


@pytest.mark.parametrize(
    ("quota", "period", "supply"),
    [(-1, 100000, 7.0), (0, 100000, 7.0), (300000, 100000, 3.0), (900000, 100000, 7.0), (3.0, 0, 3.0)],
)
def test_supply_quota_cap(quota: float, period: float, supply: float) -> None:
    """helper.GetReclaimMetrics: idle pool CPUs + reclaim usage (4 - 1 + 4 = 7), capped by a positive
    quota/period; a positive quota with no period caps by the raw quota, as the anchor does."""
    assert ReclaimPoolSupply(4, 1.0, 4.0, quota, period).supply == supply

