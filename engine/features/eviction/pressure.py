"""Eviction triggers of both anchors, as pure functions of observed values and parameters.

Katalyst's memory plugins (NUMA watermark counter, system watermark and PSI, RSS overuse, reclaimed
resource overcommit) and Koordinator's CPU/memory evict arithmetic (BE satisfaction, node usage).
The stateful triggers are step functions, ``(inputs, state) -> (decision, new state)``, over small
frozen state dataclasses with ``to_dict``/``from_dict``, so the engine keeps them in its explicit
state and a restart resumes where it stopped. Each decision carries the terms that produced it, for
provenance and ``qosd explain``.

Victim ranking and the release bookkeeping across a round live in ``engine.features.eviction.strategy``;
the functions here only say whether a trigger fires, how strongly, and how much to release.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from engine.model.facts import Workload

MiB = 1 << 20
GiB = 1 << 30
PAGE_SIZE = 4096


class Action(StrEnum):
    """Katalyst's memory-plugin actions: RECLAIMED_EVICTION evicts reclaimed pods only, EVICTION any QoS."""

    NOOP = "noop"
    RECLAIMED_EVICTION = "reclaimed_eviction"
    EVICTION = "eviction"


_STRENGTH = {Action.NOOP: 0, Action.RECLAIMED_EVICTION: 1, Action.EVICTION: 2}


def stronger(*actions: Action) -> Action:
    """The strongest action: the system plugin's watermark and PSI checks both raise, never lower it."""
    return max(actions, key=_STRENGTH.__getitem__, default=Action.NOOP)


# ------------------------------------------------------------------ Katalyst: NUMA watermark counter

MEM_LOW_RESERVE = 4 * GiB  # floor of the effective low watermark when page cache is scarce
MEM_GAP = 1 * GiB  # probe depth added to zone min
MEM_GUARD = 256 * MiB  # added to zone low against kswapd ping-pong
MIN_DURATION = 2  # counts above which the "deep below low" step applies


@dataclass(frozen=True)
class Watermarks:
    """Free memory and the effective min/low watermarks of one NUMA node, in bytes."""

    free: int
    min: int
    low: int
    source: str  # "zoneinfo" | "metrics"


def zoneinfo_watermarks(free: int, zone_min: int, zone_low: int, inactive_file: int) -> Watermarks:
    """Effective watermarks from /proc/zoneinfo (values converted to bytes by the caller).

    Katalyst widens the kernel's watermarks: min gets a 1 GiB probe depth, low a 256 MiB guard, and
    when inactive file cache cannot cover low (or 4 GiB), low is raised by another GiB (at least 4 GiB),
    because then little can be reclaimed before the kernel starts direct reclaim.
    """
    low = zone_low + MEM_GUARD
    minimum = zone_min + MEM_GAP
    if inactive_file < max(MEM_LOW_RESERVE, low):
        low = max(MEM_LOW_RESERVE, low + MEM_GAP)
    return Watermarks(int(free), int(minimum), int(low), "zoneinfo")


def metric_watermarks(free: float, total: float, scale_factor: float) -> Watermarks:
    """Fallback without a zoneinfo entry: low = total * watermark_scale_factor / 10000, min = 0."""
    return Watermarks(int(free), 0, int(total * scale_factor / 10000), "metrics")


@dataclass(frozen=True)
class NumaCounterParams:
    """Katalyst defaults: NumaFreeBelowWatermarkTimes{,Reclaimed}Threshold and the fast-eviction wait."""

    times_threshold: int = 12  # T_nonreclaimed
    reclaimed_times_threshold: int = 6  # T_reclaimed
    fast_eviction_wait_cycle: int = 1
    page_size: int = PAGE_SIZE

    def __post_init__(self) -> None:
        # A wait longer than T_nonreclaimed would push the counter negative; the anchor does not check.
        if min(self.times_threshold, self.reclaimed_times_threshold, self.fast_eviction_wait_cycle) < 0:
            raise ValueError("NUMA counter thresholds and wait cycle must not be negative")
        if self.fast_eviction_wait_cycle > self.times_threshold:
            raise ValueError("fast eviction wait cycle must not exceed the eviction threshold")
        if self.page_size <= 0:
            raise ValueError("page size must be positive")


@dataclass(frozen=True)
class NumaCounterState:
    """How many rounds (weighted) free memory has stayed below the watermark on one NUMA node."""

    count: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NumaCounterState:
        return cls(int(data.get("count", 0)))


@dataclass(frozen=True)
class NumaDecision:
    action: Action
    count: int
    previous: int
    branch: str  # "below_min" | "below_low" | "above_low"
    deep: bool  # the extra increment for being far below low applied
    watermarks: Watermarks


def _pages(value: int, page_size: int) -> int:
    """Bytes to pages, rounding up as Katalyst's ConvertBytesToPages does."""
    return -(-int(value) // page_size)


def numa_pressure_step(
    wm: Watermarks, state: NumaCounterState, params: NumaCounterParams = NumaCounterParams()
) -> tuple[NumaDecision, NumaCounterState]:
    """One round of Katalyst's per-NUMA watermark counter.

    Inputs are bytes; the comparison runs in whole pages (bytes rounded up), as the anchor compares
    pages, so that the (min+low)/2 midpoint rounds exactly as there. Below min the counter jumps to
    T_nonreclaimed - wait (only when it is lower than T_nonreclaimed; for wait > 1 this can lower a
    count already close to T, exactly as the anchor does). Below low it counts up, twice as fast once it
    passed 2 and free is deep below low. Above low it decays by one and is capped at T_reclaimed, so one
    good round takes a node out of full eviction. Sustained rounds below low grow the count without an
    upper bound (the anchor does not cap it); the first round above low brings it back to T_reclaimed.
    """
    page = params.page_size
    free, minimum, low = (_pages(v, page) for v in (wm.free, wm.min, wm.low))
    gap = _pages(MEM_GAP, page)
    t_non, t_rec = params.times_threshold, params.reclaimed_times_threshold
    count = state.count
    action = Action.NOOP
    deep = False
    if free < minimum:
        branch = "below_min"
        action = Action.RECLAIMED_EVICTION
        if count < t_non:
            count = t_non - params.fast_eviction_wait_cycle
    elif free < low:
        branch = "below_low"
        count += 1
        deep = count > MIN_DURATION and (free < (minimum + low) // 2 or (low > gap and free < low - gap))
        if deep:
            count += 1
        if count > t_rec:
            action = Action.RECLAIMED_EVICTION
    else:
        branch = "above_low"
        if count > 0:
            count = min(count - 1, t_rec)
    if count >= t_non:
        action = Action.EVICTION
    return NumaDecision(action, count, state.count, branch, deep, wm), NumaCounterState(count)


# ------------------------------------------------------------------ Katalyst: system memory pressure


@dataclass(frozen=True)
class SystemWatermark:
    met: bool
    free: float
    threshold: float  # max(minimum, total * scale_factor / 10000)


def system_watermark_pressure(
    free: float, total: float, scale_factor: float, minimum: float = 0.0
) -> SystemWatermark:
    """Free below max(SystemFreeMemoryThresholdMinimum, scaled watermark) means RECLAIMED_EVICTION."""
    threshold = max(float(minimum), total * scale_factor / 10000)
    return SystemWatermark(free < threshold, float(free), threshold)


@dataclass(frozen=True)
class PsiParams:
    """Katalyst flag defaults (eviction-system-pressure-{some,full}-threshold, -duration)."""

    some_threshold: int = 15  # node/kubepods `some avg10` gate
    full_threshold: int = 4  # average per-pod `some avg10` (the flag is named "full")
    duration: float = 15.0  # seconds to RECLAIMED_EVICTION; 3x to EVICTION
    min_pods: int = 3  # pods with avg10 > min_pod_pressure needed
    min_pod_pressure: int = 1
    # The anchor keeps the "since" time while the node gate holds even if the pod average dips (or too
    # few pods are pressured); True restarts the timer then, for strictly continuous pressure.
    reset_when_below: bool = False


@dataclass(frozen=True)
class PsiState:
    since: float | None = None  # when the pod average first reached full_threshold

    def to_dict(self) -> dict[str, Any]:
        return {"since": self.since}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PsiState:
        since = data.get("since")
        return cls(float(since) if since is not None else None)


@dataclass(frozen=True)
class PsiDecision:
    action: Action
    node_avg10: int | None
    pod_average: int | None
    pressured_pods: int
    pods: int
    held_for: float | None
    reason: str


def psi_pressure_step(
    node_avg10: float | None,
    pod_avg10: Sequence[float],
    now: float,
    state: PsiState,
    params: PsiParams = PsiParams(),
) -> tuple[PsiDecision, PsiState]:
    """One round of Katalyst's workload memory PSI check (cgroup v2 only).

    ``node_avg10`` is `some avg10` of the workload cgroup (None when unreadable), ``pod_avg10`` the
    `some avg10` of each shared/dedicated pod. Values are truncated to whole percent, as the anchor reads
    them into integers, and the pod average is an integer division. Held for ``duration`` seconds ->
    RECLAIMED_EVICTION, for 3x ``duration`` -> EVICTION; whole seconds, as the anchor compares.
    """
    if node_avg10 is None:
        return PsiDecision(Action.NOOP, None, None, 0, 0, None, "workload PSI unreadable"), PsiState()
    node = int(node_avg10)
    if node < params.some_threshold:
        reason = f"node some avg10 {node} < {params.some_threshold}"
        return PsiDecision(Action.NOOP, node, None, 0, 0, None, reason), PsiState()
    values = [int(v) for v in pod_avg10]
    pressured = sum(1 for v in values if v > params.min_pod_pressure)
    keep = PsiState() if params.reset_when_below else state
    if pressured < params.min_pods:
        reason = f"{pressured} pods with avg10 > {params.min_pod_pressure} (< {params.min_pods})"
        return PsiDecision(Action.NOOP, node, None, pressured, len(values), None, reason), keep
    average = sum(values) // len(values) if values else 0
    if average < params.full_threshold:
        reason = f"pod average avg10 {average} < {params.full_threshold}"
        return PsiDecision(Action.NOOP, node, average, pressured, len(values), None, reason), keep
    since = state.since if state.since is not None else now
    held = now - since
    action = Action.NOOP
    if int(held) >= params.duration:
        action = Action.RECLAIMED_EVICTION
    if int(held) >= params.duration * 3:
        action = Action.EVICTION
    reason = f"pod average avg10 {average} >= {params.full_threshold} for {held:g}s"
    return PsiDecision(action, node, average, pressured, len(values), held, reason), PsiState(since)


def victim_numa(free_by_numa: Mapping[int, float]) -> int | None:
    """The NUMA node with the least free memory (lowest id on ties); system pressure evicts from there."""
    if not free_by_numa:
        return None
    return min(free_by_numa, key=lambda n: (free_by_numa[n], n))


# ------------------------------------------------------------------ Katalyst: RSS overuse

MEMORY_ENHANCEMENT = "katalyst.kubewharf.io/memory_enhancement"
RSS_OVERUSE_KEY = "rss_overuse_threshold"
DEFAULT_RSS_OVERUSE_THRESHOLD = 1.05


def memory_enhancement(w: Workload) -> Mapping[str, Any]:
    """The pod's memory_enhancement annotation as a mapping; malformed JSON counts as absent."""
    raw = w.annotations.get(MEMORY_ENHANCEMENT)
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


@dataclass(frozen=True)
class RssOveruse:
    pod: str
    rss: float
    request: float
    threshold: float
    over: bool  # rss > threshold * request


def rss_overuse(
    w: Workload, rss: float, default_threshold: float = DEFAULT_RSS_OVERUSE_THRESHOLD
) -> RssOveruse | None:
    """Katalyst's RSS-overuse check for one pod, or None when the pod is not checked.

    The pod's own rss_overuse_threshold wins; an unparsable or non-positive one makes the anchor skip
    the pod rather than fall back to the default (a typo must not tighten the limit silently). Pods
    with any app container lacking a memory request are skipped: the ratio would be meaningless.
    """
    raw = memory_enhancement(w).get(RSS_OVERUSE_KEY)
    threshold = default_threshold
    if raw is not None:
        try:
            threshold = float(raw)
        except (TypeError, ValueError):
            return None
        if not threshold > 0:
            return None
    requests = [c.requests.get("memory", 0.0) for c in w.containers if not c.init]
    if not requests or any(r <= 0 for r in requests):
        return None
    request = float(sum(requests))
    return RssOveruse(w.key, float(rss), request, threshold, rss > threshold * request)


# ------------------------------------------------------------------ Katalyst: reclaimed resource overcommit

RECLAIMED_MILLICPU = "resource.katalyst.kubewharf.io/reclaimed_millicpu"
RECLAIMED_MEMORY = "resource.katalyst.kubewharf.io/reclaimed_memory"
DEFAULT_OVERCOMMIT_THRESHOLDS: Mapping[str, float] = {RECLAIMED_MILLICPU: 5.0, RECLAIMED_MEMORY: 5.0}


class MetType(StrEnum):
    NOT_MET = "not_met"
    SOFT_MET = "soft_met"
    HARD_MET = "hard_met"


@dataclass(frozen=True)
class OvercommitCheck:
    resource: str
    used: float
    total: float
    rate: float
    met: MetType


@dataclass(frozen=True)
class Overcommit:
    met: MetType
    scope: str | None  # the resource that met, first by name among the strongest
    checks: tuple[OvercommitCheck, ...]


def reclaimed_overcommit(
    requests: Iterable[Mapping[str, float]],
    allocatable: Mapping[str, float],
    thresholds: Mapping[str, float] = DEFAULT_OVERCOMMIT_THRESHOLDS,
    soft_thresholds: Mapping[str, float] | None = None,
    skip_zero: Iterable[str] = (),
) -> Overcommit:
    """Katalyst's reclaimed-resources pressure: Σ requests of reclaimed pods against the published
    allocatable (CNR). HARD_MET when used > threshold[r] x total for some r; SOFT_MET likewise with the
    soft rates, which the in-tree plugins do not set (None here). Resources without a threshold or
    missing from allocatable are ignored, and so are zero totals listed in ``skip_zero``.

    The anchor returns the first met resource of a Go map walk (random order); here every resource is
    checked in name order and the strongest result wins, so the outcome is deterministic.
    """
    used: dict[str, float] = {}
    any_pod = False
    for pod in requests:
        any_pod = True
        for name, value in pod.items():
            used[name] = used.get(name, 0.0) + float(value)
    if not any_pod or not allocatable:
        return Overcommit(MetType.NOT_MET, None, ())
    skip = set(skip_zero)
    checks: list[OvercommitCheck] = []
    for name in sorted(used):
        if name not in allocatable or name not in thresholds:
            continue
        total = float(allocatable[name])
        if total <= 0 and name in skip:
            continue
        rate = thresholds[name]
        if used[name] > rate * total:
            checks.append(OvercommitCheck(name, used[name], total, rate, MetType.HARD_MET))
            continue
        soft = (soft_thresholds or {}).get(name)
        if soft is not None and used[name] > soft * total:
            checks.append(OvercommitCheck(name, used[name], total, soft, MetType.SOFT_MET))
        else:
            checks.append(OvercommitCheck(name, used[name], total, rate, MetType.NOT_MET))
    for level in (MetType.HARD_MET, MetType.SOFT_MET):
        for c in checks:
            if c.met is level:
                return Overcommit(level, c.resource, tuple(checks))
    return Overcommit(MetType.NOT_MET, None, tuple(checks))


def overcommit_victims(pods: Sequence[Workload], resource: str) -> list[Workload]:
    """Reclaimed pods in eviction order for an overcommitted resource: largest request of it first
    (name, then uid, break ties; the anchor's sort is unstable)."""
    return sorted(pods, key=lambda w: (-w.request(resource), w.name, w.uid))


# ------------------------------------------------------------------ Koordinator: BECPUEvict (satisfaction)

SATISFACTION_LOWER_MAX = 60
SATISFACTION_UPPER_MAX = 100
BE_USAGE_THRESHOLD_PERCENT = 90
MIN_ALLOCATABLE_BATCH_MILLICPU = 1


def satisfaction_config_error(lower_percent: int | None, upper_percent: int | None) -> str | None:
    """Why a BECPUEvict satisfaction config is invalid, or None.

    lower in (0,60], upper in (0,100), upper >= lower: past 60% satisfaction BE is not starving.
    """
    if lower_percent is None or upper_percent is None:
        return "satisfaction lower and upper percent are both required"
    if not 0 < lower_percent <= SATISFACTION_LOWER_MAX:
        return f"satisfaction lower percent {lower_percent} must be in (0,{SATISFACTION_LOWER_MAX}]"
    if not 0 < upper_percent < SATISFACTION_UPPER_MAX:
        return f"satisfaction upper percent {upper_percent} must be in (0,{SATISFACTION_UPPER_MAX})"
    if upper_percent < lower_percent:
        return f"satisfaction upper percent {upper_percent} < lower percent {lower_percent}"
    return None


def be_usage_high_enough(
    usage_milli: float, limit_milli: float, threshold_percent: int | None = None
) -> bool:
    """BE must actually use its limit before starvation counts: a limit under one core always counts."""
    if limit_milli <= 0:
        return False
    if limit_milli < 1000:
        return True
    threshold = BE_USAGE_THRESHOLD_PERCENT if threshold_percent is None else threshold_percent
    return usage_milli / limit_milli >= threshold / 100


def satisfaction_release(
    request_milli: float, limit_milli: float, lower_percent: int, upper_percent: int
) -> int:
    """Milli-cores of BE requests to evict so limit/request climbs back to upper%, once it fell to lower%."""
    if request_milli <= 0:
        return 0
    satisfaction = limit_milli / request_milli
    if satisfaction > lower_percent / 100:
        return 0
    gap = upper_percent / 100 - satisfaction
    if gap <= 0:
        return 0
    return int(request_milli * gap)


def be_real_limit_milli(cpuset_size: int, cfs_quota_us: int = -1, cfs_period_us: int = 100000) -> int:
    """What BE can really get: its cpuset size, further capped by the BE QoS cgroup's quota (-1: none)."""
    limit = cpuset_size * 1000
    if cfs_quota_us == -1 or cfs_period_us <= 0:
        return limit
    return min(limit, int(cfs_quota_us * 1000 // cfs_period_us))


def be_allocatable_milli(batch_cpu_allocatable: float | None) -> float:
    """The evictByAllocatable limit: node batch-cpu allocatable; missing or negative -1, zero counts as 1."""
    if batch_cpu_allocatable is None or batch_cpu_allocatable < 0:
        return -1.0
    if batch_cpu_allocatable == 0:
        return float(MIN_ALLOCATABLE_BATCH_MILLICPU)
    return float(batch_cpu_allocatable)


def enough_samples(window_seconds: int, interval_seconds: int, count: int) -> bool:
    """An average is trusted only if its samples cover a third of the window (integer arithmetic)."""
    return count * interval_seconds >= window_seconds // 3


@dataclass(frozen=True)
class BeCpu:
    """BE CPU figures in milli-cores; ``limit`` is the real limit or the allocatable, per evict policy."""

    usage: float
    request: float
    limit: float


@dataclass(frozen=True)
class SatisfactionRelease:
    release: int  # milli-cores of batch-cpu requests to evict; 0 = nothing
    avg_release: int
    current_release: int | None
    reason: str


def be_satisfaction_release(
    avg: BeCpu,
    current: BeCpu,
    lower_percent: int,
    upper_percent: int,
    usage_threshold_percent: int | None = None,
    samples: tuple[int, int, int] | None = None,
) -> SatisfactionRelease:
    """Koordinator's BECPUEvict: release computed on the window average, confirmed on the last value.

    ``samples`` is (count, window seconds, collect interval seconds) of the average; too few samples
    and nothing is released. The current value can only lower the release (min of the two), and is
    skipped when its request and limit equal the average's (same state, same answer).
    """
    if samples is not None and not enough_samples(samples[1], samples[2], samples[0]):
        return SatisfactionRelease(0, 0, None, f"{samples[0]} samples cover less than a third of the window")
    if not be_usage_high_enough(avg.usage, avg.limit, usage_threshold_percent):
        return SatisfactionRelease(0, 0, None, "average BE usage not high enough against its limit")
    avg_release = satisfaction_release(avg.request, avg.limit, lower_percent, upper_percent)
    if avg_release <= 0:
        return SatisfactionRelease(0, avg_release, None, "average BE satisfaction above the lower percent")
    if not be_usage_high_enough(current.usage, current.limit, usage_threshold_percent):
        return SatisfactionRelease(0, avg_release, None, "current BE usage not high enough against its limit")
    if current.request == avg.request and current.limit == avg.limit:
        return SatisfactionRelease(avg_release, avg_release, None, "current state equals the average")
    current_release = satisfaction_release(current.request, current.limit, lower_percent, upper_percent)
    if current_release <= 0:
        return SatisfactionRelease(0, avg_release, current_release, "current BE satisfaction recovered")
    final = min(avg_release, current_release)
    return SatisfactionRelease(final, avg_release, current_release, "min of average and current release")


# ------------------------------------------------------------------ Koordinator: node usage evict

RELEASE_BUFFER_PERCENT = 2


@dataclass(frozen=True)
class UsageRelease:
    """Koordinator's node-usage release, in the unit of ``capacity`` (milli-cores or bytes)."""

    usage_percent: int
    threshold_percent: int
    lower_percent: int
    capacity: int
    release: int
    formula: str


def _go_div(a: int, b: int) -> int:
    """Integer division truncating toward zero, as Go's / on int64."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def usage_config_error(threshold_percent: int | None, lower_percent: int | None = None) -> str | None:
    """Why a CPUEvict/MemoryEvict threshold config is invalid, or None (lower defaults to threshold-2)."""
    if threshold_percent is None:
        return "threshold percent is required"
    if threshold_percent < 0:
        return f"threshold percent {threshold_percent} must not be negative"
    lower = threshold_percent - RELEASE_BUFFER_PERCENT if lower_percent is None else lower_percent
    if lower >= threshold_percent:
        return f"lower percent {lower} must be below threshold percent {threshold_percent}"
    return None


def usage_release(
    used: int, capacity: int, threshold_percent: int, lower_percent: int | None = None
) -> UsageRelease | None:
    """usage% = used * 100 / capacity and release = capacity * (usage% - lower) / 100, both integer
    divisions; None below the threshold or without a capacity. Units are the caller's (integers)."""
    if capacity <= 0:
        return None
    percent = _go_div(int(used) * 100, int(capacity))
    if percent < threshold_percent:
        return None
    lower = threshold_percent - RELEASE_BUFFER_PERCENT if lower_percent is None else lower_percent
    release = _go_div(int(capacity) * (percent - lower), 100)
    formula = f"{capacity} * ({percent} - {lower}) / 100"
    return UsageRelease(percent, threshold_percent, lower, int(capacity), release, formula)


def cpu_usage_release(
    node_cpu_cores: float, capacity_milli: int, threshold_percent: int, lower_percent: int | None = None
) -> UsageRelease | None:
    """Koordinator's CPUEvict: node usage (cores, window average) is truncated to milli-cores first."""
    return usage_release(int(node_cpu_cores * 1000), capacity_milli, threshold_percent, lower_percent)


def memory_usage_release(
    used_bytes: float, capacity_bytes: int, threshold_percent: int, lower_percent: int | None = None
) -> UsageRelease | None:
    """Koordinator's MemoryEvict: bytes truncated to an integer, then the same integer arithmetic.

    ``engine.features.eviction.strategy.release_target`` computes the same target on the rule path in float
    (no final truncation, no threshold gate); this is the anchor's exact integer form.
    """
    return usage_release(int(used_bytes), capacity_bytes, threshold_percent, lower_percent)
