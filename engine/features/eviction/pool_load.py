"""Katalyst's shared-pool load pressure (cpu-pressure-load-plugin), as pure functions and small state.

Katalyst samples, every ``eviction-load-sync-period``, the summed ``load.1min`` of the containers of
each shared pool into a ring per pool, with the bounds poolSize x loadLowerBoundRatio (soft) and
poolSize x loadUpperBoundRatio (hard); each container's own samples go into a ring of its own, and a
hard pool's victim is the pod whose rings sum highest. A pool meets a bound when at least
loadThresholdMetPercentage of the *ring size* (not of the samples taken so far) exceed it; a sample
with a lower bound of 0 counts for neither (``MetricRing.Count``). The node-level answer is the first
hard pool, else a soft one.

In the advised mode (reclaim on, no CPUs held back for allocation, no shared/reclaimed overlap) the
bounds follow the sample itself, lower = load + 1 and upper = lower x upperBoundRatio, so the plugin
stays quiet while the advisor can still grow the pool; once the share pools fill every CPU they may
have, lower = 1 and upper = size x upperBoundRatio, so any load is soft pressure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

NONE, SOFT, HARD = "none", "soft", "hard"


@dataclass(frozen=True)
class PoolLoadParams:
    interval: float = 30.0
    ring_size: int = 10
    upper_ratio: float = 1.8
    lower_ratio: float = 1.0
    met_percentage: float = 0.8
    advised: bool = False


@dataclass(frozen=True)
class Sample:
    value: float
    lower: float
    upper: float


@dataclass(frozen=True)
class PoolLoadState:
    """``at``: when the last samples were taken. ``pools``: pool -> its ring, oldest first.
    ``pods``: pod uid -> its own load samples (the victim ranking sums them)."""

    at: float | None = None
    pools: Mapping[str, tuple[Sample, ...]] = field(default_factory=dict)
    pods: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        if self.at is None:
            return {}
        return {
            "at": self.at,
            "pools": {k: [[s.value, s.lower, s.upper] for s in ring] for k, ring in self.pools.items()},
            "pods": {k: list(v) for k, v in self.pods.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PoolLoadState:
        at = data.get("at")
        return cls(
            at=float(at) if at is not None else None,
            pools={
                str(k): tuple(Sample(float(v), float(lo), float(hi)) for v, lo, hi in ring)
                for k, ring in (data.get("pools") or {}).items()
            },
            pods={str(k): tuple(float(v) for v in vs) for k, vs in (data.get("pods") or {}).items()},
        )


NO_POOL_LOAD = PoolLoadState()


@dataclass(frozen=True)
class PoolVerdict:
    """One pool's standing: its ring's counts over the bounds and what that meets."""

    pool: str
    size: int
    load: float
    lower: float
    upper: float
    soft_over: int
    hard_over: int
    ring_size: int
    met: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "poolCpus": self.size,
            "load": self.load,
            "lowerBound": self.lower,
            "upperBound": self.upper,
            "softOver": self.soft_over,
            "hardOver": self.hard_over,
            "ringSize": self.ring_size,
            "met": self.met,
        }


def bounds(params: PoolLoadParams, size: int, load: float, pool_size_pressure: bool) -> tuple[float, float]:
    """(lower, upper) of one sample (katalyst collectPoolLoad)."""
    if not params.advised:
        return size * params.lower_ratio, size * params.upper_ratio
    if pool_size_pressure:
        return 1.0, size * params.upper_ratio
    lower = load + 1.0
    return lower, lower * params.upper_ratio


def over_counts(ring: tuple[Sample, ...]) -> tuple[int, int]:
    """Samples above the lower and above the upper bound; a sample without a lower bound counts for
    neither (katalyst MetricRing.Count)."""
    soft = hard = 0
    for s in ring:
        if s.lower > 0:
            soft += s.value > s.lower
            hard += s.value > s.upper
    return soft, hard


def pool_load_step(
    params: PoolLoadParams,
    state: PoolLoadState,
    now: float,
    pools: Mapping[str, tuple[int, float]],
    pod_loads: Mapping[str, float],
    pool_size_pressure: bool,
) -> tuple[PoolLoadState, list[PoolVerdict]]:
    """One tick. ``pools``: pool -> (size, summed load of its pods now); ``pod_loads``: pod uid ->
    its load now. Samples are taken once per ``params.interval`` (the first tick always samples);
    rings of pools and pods no longer present are dropped, as Katalyst clears expired entries. The
    verdicts, in pool-name order, are computed from the rings every tick."""
    if state.at is None or now - state.at >= params.interval:
        n = params.ring_size
        rings: dict[str, tuple[Sample, ...]] = {}
        for name, (size, load) in pools.items():
            lower, upper = bounds(params, size, load, pool_size_pressure)
            rings[name] = (*state.pools.get(name, ()), Sample(load, lower, upper))[-n:]
        pods = {uid: (*state.pods.get(uid, ()), load)[-n:] for uid, load in pod_loads.items()}
        state = PoolLoadState(now, rings, pods)
    verdicts = []
    for name in sorted(state.pools):
        ring = state.pools[name]
        if not ring:
            continue
        soft, hard = over_counts(ring)
        met = (
            HARD
            if hard / params.ring_size >= params.met_percentage
            else SOFT
            if soft / params.ring_size >= params.met_percentage
            else NONE
        )
        size, load = pools.get(name, (0, ring[-1].value))
        last = ring[-1]
        verdicts.append(
            PoolVerdict(name, size, load, last.lower, last.upper, soft, hard, params.ring_size, met)
        )
    return state, verdicts


def node_verdict(verdicts: list[PoolVerdict]) -> PoolVerdict | None:
    """What the plugin reports for the node: the first hard pool, else the last soft one (Katalyst
    returns on the first hard pool and otherwise remembers the last soft pool it saw)."""
    soft = None
    for v in verdicts:
        if v.met == HARD:
            return v
        if v.met == SOFT:
            soft = v
    return soft


def pod_history(state: PoolLoadState, uid: str) -> float:
    """A pod's load samples summed: the victim ranking of a hard pool (highest first)."""
    return sum(state.pods.get(uid, ()))
