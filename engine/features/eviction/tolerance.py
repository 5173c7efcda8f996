"""Katalyst's suppression-tolerance eviction: how long a reclaimed pod may run over its tolerated
CPU suppression rate before it is evicted (pure functions; the trigger in ``action.py`` gathers the
reclaim pool's supply and keeps the per-pod timers in the engine state).

Moved here from the suppress feature: it decides evictions, so it lives with every other trigger.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.features.suppress.strategy import CFS_PERIOD_US, UNSET_QUOTA
from engine.model.units import ceil_div


@dataclass(frozen=True)
class ReclaimPoolSupply:
    """What Katalyst's GetReclaimMetrics reads for one reclaim pool (or one NUMA's part of it).

    ``usage_ratio_sum`` is the sum of the per-CPU usage ratios (0..1) over the pool's CPUs;
    ``cgroup_usage_cores`` the usage of the reclaim root cgroup; a quota <= 0 means none."""

    pool_cpus: int
    usage_ratio_sum: float
    cgroup_usage_cores: float
    cfs_quota_us: float = UNSET_QUOTA
    cfs_period_us: float = CFS_PERIOD_US

    @property
    def supply(self) -> float:
        """Idle pool CPUs plus what reclaimed pods already use (shared pods may overlap the pool,
        so only idle time and the reclaimed share are really available), capped by the quota."""
        value = max(self.pool_cpus - self.usage_ratio_sum, 0.0) + self.cgroup_usage_cores
        if self.cfs_quota_us > 0:
            # The anchor divides only with a positive period and otherwise caps by the raw quota.
            cap = self.cfs_quota_us / self.cfs_period_us if self.cfs_period_us > 0 else self.cfs_quota_us
            value = min(value, cap)
        return value


def observed_supply(
    node: Mapping[str, Any], pool_cpus: Callable[[], int | None], cgroup_usage: Callable[[], float]
) -> ReclaimPoolSupply | None:
    """The reclaim pool as the collector observed it (``reclaim.*`` node facts); where a fact is
    missing, ``pool_cpus`` (from this tick's pool plan) and ``cgroup_usage`` (from the pods) stand in,
    each as its caller knows the pool. None without the pool's busy share or size: the rate would be
    a guess. The one reading for the eviction trigger and the reclaim report."""
    busy = node.get("reclaim.pool_usage_cores")
    if busy is None:
        return None
    cpus = node.get("reclaim.pool_cpus")
    if cpus is None:
        cpus = pool_cpus()
    if cpus is None:
        return None
    cgroup = node.get("reclaim.cgroup_usage_cores")
    return ReclaimPoolSupply(
        int(cpus),
        float(busy),
        float(cgroup) if cgroup is not None else cgroup_usage(),
        float(node.get("reclaim.cfs_quota_us", UNSET_QUOTA)),
        float(node.get("reclaim.cfs_period_us", CFS_PERIOD_US)),
    )


@dataclass(frozen=True)
class ReclaimedPod:
    """A reclaimed pod as the eviction reads it. ``key`` (namespace/name) must be unique;
    ``tolerance_rate`` is the suppression_tolerance_rate enhancement, None when unset."""

    key: str
    request_milli: int
    priority: int = 0
    tolerance_rate: float | None = None


@dataclass(frozen=True)
class ToleranceCheck:
    """One pod's check within a step, in the order checked."""

    key: str
    request_milli: int
    tolerance: float
    rate: float
    exceeding_since: float | None
    evicted: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "pod": self.key,
            "requestMilli": self.request_milli,
            "tolerance": self.tolerance,
            "rate": self.rate,
            "exceedingSince": self.exceeding_since,
            "evicted": self.evicted,
        }


@dataclass(frozen=True)
class SuppressionEviction:
    """Victims in eviction order and the per-pod "exceeding since" times to carry to the next tick."""

    victims: tuple[str, ...]
    since: Mapping[str, float]
    supply: float
    total_request_milli: int
    max_tolerance_rate: float
    min_duration: float
    checks: tuple[ToleranceCheck, ...]

    def inputs(self) -> dict[str, Any]:
        return {
            "supply": self.supply,
            "totalRequestMilli": self.total_request_milli,
            "maxSuppressionToleranceRate": self.max_tolerance_rate,
            "minSuppressionToleranceDuration": self.min_duration,
            "checks": [c.to_dict() for c in self.checks],
        }


def order_reclaimed_pods(pods: Sequence[ReclaimedPod]) -> list[ReclaimedPod]:
    """Katalyst's order: larger CPU request first, then lower priority, then key descending (its
    last comparator, a string compare that places the greater key first)."""
    by_key = sorted(pods, key=lambda p: p.key, reverse=True)
    return sorted(by_key, key=lambda p: (-p.request_milli, p.priority))


def suppression_eviction_step(
    pods: Sequence[ReclaimedPod],
    pool: ReclaimPoolSupply,
    since: Mapping[str, float],
    now: float,
    *,
    max_tolerance_rate: float = 5.0,
    min_duration: float = 300.0,
) -> SuppressionEviction:
    """One tick of Katalyst's cpu-pressure-suppression-plugin for one group of reclaimed pods.

    rate = ceil(Σ requests in cores) / supply (+inf when supply is 0). Pods are checked in
    :func:`order_reclaimed_pods` order; a pod whose tolerance min(its rate or +inf, max) is below the
    rate gets a "since" time (kept if it had one), and is evicted once now − since is strictly longer
    than ``min_duration``; its request then leaves the sum before the next pod is checked. A pod at or
    within its tolerance loses its time. Evicted pods keep theirs, as in the anchor, so a pod that
    outlives its eviction is evicted again on the next tick. Times of pods not in ``pods`` are
    dropped: call once per group (non-NUMA-bound, then each NUMA) and merge the maps."""
    supply = pool.supply
    remaining = sum(p.request_milli for p in pods)
    total = remaining
    new_since: dict[str, float] = {}
    victims: list[str] = []
    checks: list[ToleranceCheck] = []
    for pod in order_reclaimed_pods(pods):
        rate = math.inf if supply == 0 else ceil_div(remaining, 1000) / supply
        own = math.inf if pod.tolerance_rate is None else pod.tolerance_rate
        tolerance = min(own, max_tolerance_rate)
        if tolerance < rate:
            started = since.get(pod.key, now)
            new_since[pod.key] = started
            evicted = now - started > min_duration
            if evicted:
                victims.append(pod.key)
                remaining -= pod.request_milli
            checks.append(ToleranceCheck(pod.key, pod.request_milli, tolerance, rate, started, evicted))
        else:
            checks.append(ToleranceCheck(pod.key, pod.request_milli, tolerance, rate, None, False))
    return SuppressionEviction(
        victims=tuple(victims),
        since=new_since,
        supply=supply,
        total_request_milli=total,
        max_tolerance_rate=max_tolerance_rate,
        min_duration=min_duration,
        checks=tuple(checks),
    )
