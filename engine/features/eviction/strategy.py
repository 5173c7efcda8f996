"""Eviction: victim selection, ranking and release accounting, as pure functions.

The pieces follow the anchors: victims are filtered by class, protection, phase, priority and labels;
ranked by configurable keys (class order, priority, usage, usage over request, name; a leading '-'
sorts descending, and a pod without the metric ranks first, as the kubelet and Katalyst do); and
evicted until the release target is met, with pods already being evicted counted as released
(Koordinator's pending-release credit) and no pod evicted twice in one round.

Triggers (``evict.trigger``) cover what a condition cannot say because it needs a per-pod threshold,
per-pod timers or arithmetic over the whole class: Katalyst's RSS overuse (each pod's own
threshold), suppression-tolerance eviction (per-pod timers, each victim's request leaving the sum),
reclaimed-resource overcommit (requests over the published allocatable, largest request first) and
Koordinator's BE CPU satisfaction release. Each returns a :class:`TriggerResult` that narrows the
candidates, may impose the anchor's victim order and may set the release target; ``choose`` then
does the usual accounting.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.config.policy import QoSClass
from engine.evaluate.factview import ItemFacts
from engine.features.eviction.pressure import (
    MEMORY_ENHANCEMENT,
    BeCpu,
    MetType,
    be_satisfaction_release,
    overcommit_victims,
    reclaimed_overcommit,
    rss_overuse,
)
from engine.features.eviction.spec import EvictSpec, ReleaseSpec, Victims
from engine.features.eviction.tolerance import (
    ReclaimedPod,
    ReclaimPoolSupply,
    ToleranceCheck,
    suppression_eviction_step,
)
from engine.model.facts import Workload
from engine.model.intents import Release


@dataclass(frozen=True)
class Candidate:
    workload: Workload
    facts: ItemFacts
    cls: QoSClass | None


def _annotation_int(w: Workload, key: str) -> int | None:
    raw = w.annotations.get(key)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _label_int(w: Workload, key: str) -> int | None:
    raw = w.labels.get(key)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


BATCH_CPU = "kubernetes.io/batch-cpu"


def _batch_usage_over_request(c: Candidate) -> float | None:
    usage = c.facts.get("cpu.usage_cores")
    request = c.workload.request(BATCH_CPU)
    if usage is None or request <= 0:
        return None
    return float(usage) * 1000 / request


KeyFn = Callable[[Candidate], Any]

ORDER_KEYS: Mapping[str, KeyFn] = {
    # The class's evictionPriority: lower is evicted first (Katalyst's qos.pod ranking).
    "class": lambda c: c.cls.eviction_priority if c.cls and c.cls.eviction_priority is not None else 0,
    "priority": lambda c: c.workload.priority if c.workload.priority is not None else 0,
    # Koordinator: koordinator.sh/eviction-priority annotation, then the koordinator.sh/priority label.
    "evictionPriority": lambda c: _annotation_int(c.workload, "koordinator.sh/eviction-priority") or 0,
    "subPriority": lambda c: _label_int(c.workload, "koordinator.sh/priority"),
    "name": lambda c: c.workload.name,
    "memory.usage": lambda c: c.facts.get("memory.usage_bytes"),
    "memory.rss": lambda c: c.facts.get("memory.rss_bytes"),
    "memory.usage_over_request": lambda c: c.facts.get("memory.usage_over_request"),
    # The pod's memory on the NUMA node a per-NUMA rule matched (``with_numa_usage``), else its
    # total: Katalyst's mem.total.numa.container of the pressured node.
    "memory.numa_usage": lambda c: c.facts.get(NUMA_USAGE, c.facts.get("memory.usage_bytes")),
    "memory.request": lambda c: c.facts.get("memory.request_bytes"),
    "cpu.usage": lambda c: c.facts.get("cpu.usage_cores"),
    "cpu.usage_over_request": lambda c: c.facts.get("cpu.usage_over_request"),
    "cpu.request": lambda c: c.facts.get("cpu.request_cores"),
    "load": lambda c: c.facts.get("cpu.usage_cores"),
    # Koordinator BECPUEvict's cpuUsage: usage over the pod's batch-cpu request (both millicores).
    "batch-cpu.usage_over_request": _batch_usage_over_request,
}


def _uses(resource: str) -> KeyFn:
    def uses(c: Candidate) -> int:
        return int(
            any(
                x.get(resource, 0.0) > 0
                for ct in c.workload.containers
                if not ct.init
                for x in (ct.requests, ct.limits)
            )
        )

    return uses


@functools.cache
def order_key(key: str) -> KeyFn:
    """The value function of one orderBy key (without its '-'): a named key of ORDER_KEYS, any pod
    fact (``pod.<fact>``: its value as the pod's facts hold it, missing ranks first), a pod's request
    of any resource (``request(<resource>)``, 0 when it requests none) or whether it uses one at all
    (``uses(<resource>)``: 1 when a container requests or limits it, else 0). The schema and the
    evict check have vetted the key."""
    named = ORDER_KEYS.get(key)
    if named is not None:
        return named
    if key.startswith("pod."):
        fact = key[len("pod.") :]
        return lambda c: c.facts.get(fact)
    fn, _, rest = key.partition("(")
    resource = rest[:-1]
    if fn == "request":
        return lambda c: c.workload.request(resource)
    if fn == "uses":
        return _uses(resource)
    raise ValueError(f"unknown orderBy key {key!r}")



def _sortable(value: Any, descending: bool) -> tuple[Any, ...]:
    """Missing values sort first; strings reverse by negated code points (with an end marker)."""
    if value is None:
        return (0,)
    if isinstance(value, str):
        return (1, (*(-ord(ch) for ch in value), 1)) if descending else (1, value)
    return (1, -value if descending else value)


def rank(
    candidates: Sequence[Candidate], order_by: Sequence[str]
) -> list[tuple[Candidate, tuple[tuple[str, Any], ...]]]:
    """Candidates in eviction order, each with the ranking values that placed it (for explain)."""
    keys = [(k.lstrip("-"), k.startswith("-")) for k in order_by]
    scored = []
    for c in candidates:
        values = tuple((name, order_key(name)(c)) for name, _ in keys)
        sort_key = tuple(_sortable(v, desc) for (_, v), (_, desc) in zip(values, keys, strict=True))
        scored.append((sort_key, c.workload.uid, c, values))
    scored.sort(key=lambda s: (s[0], s[1]))
    return [(c, values) for _, _, c, values in scored]


# The kubelet's critical pods (k8s.io/kubernetes/pkg/kubelet/types IsCriticalPod): static pods (a
# config source other than the API server), mirror pods, and pods at or above the system-critical
# priority. Katalyst drops them before any eviction plugin sees them (FilterOutSkipEvictionPods) and
# again before killing (CandidateValidate); the kubelet never evicts them either.
CONFIG_SOURCE = "kubernetes.io/config.source"
CONFIG_MIRROR = "kubernetes.io/config.mirror"
API_SOURCE = "api"
SYSTEM_CRITICAL_PRIORITY = 2_000_000_000
CRITICAL_PRIORITY_CLASSES = frozenset({"system-node-critical", "system-cluster-critical"})


def kubelet_critical(w: Workload) -> str | None:
    """Why the kubelet counts this pod as critical (never an eviction victim), or None."""
    source = w.annotations.get(CONFIG_SOURCE)
    if source is not None and source != API_SOURCE:
        return f"static pod ({CONFIG_SOURCE}={source})"
    if CONFIG_MIRROR in w.annotations:
        return f"mirror pod ({CONFIG_MIRROR})"
    if w.priority is not None and w.priority >= SYSTEM_CRITICAL_PRIORITY:
        return f"priority {w.priority} >= {SYSTEM_CRITICAL_PRIORITY} (system-critical)"
    if w.priority_class_name in CRITICAL_PRIORITY_CLASSES:
        return f"priority class {w.priority_class_name}"
    return None


def eligible(c: Candidate, victims: Victims) -> bool:
    """Victim filters; protected classes and kubelet-critical pods are never victims, whatever the
    rule says."""
    return kubelet_critical(c.workload) is None and _selected(c, victims)


def critical_left_out(pool: Sequence[Candidate], victims: Victims) -> list[tuple[Candidate, str]]:
    """The pods the rule's victim filters select but that are kubelet-critical, with the reason:
    what the rule's outcome reports as skipped rather than leaving them out silently."""
    out = []
    for c in pool:
        why = kubelet_critical(c.workload)
        if why is not None and _selected(c, victims):
            out.append((c, why))
    return out


def _selected(c: Candidate, victims: Victims) -> bool:
    if c.cls is not None and c.cls.protected:
        return False
    classes = victims.classes
    if classes and (c.cls is None or c.cls.name not in classes):
        return False
    if c.cls is not None and c.cls.name in victims.exclude_classes:
        return False
    if c.workload.phase not in victims.phases:
        return False
    max_priority = victims.max_priority
    if max_priority is not None and (c.workload.priority or 0) > max_priority:
        return False
    return all(c.workload.labels.get(key) == value for key, value in victims.require_label.items())


RESOURCE_FACTS: Mapping[str, tuple[str, str, str]] = {
    # resource: (usage fact, request fact, scope capacity facts tried in order, comma-separated)
    "memory": ("memory.usage_bytes", "memory.request_bytes", "memory.capacity_bytes,memory.total_bytes"),
    "cpu": ("cpu.usage_cores", "cpu.request_cores", "cpu.capacity_cores,cpus"),
}


NUMA_USAGE = "memory.numa_usage_bytes"  # set on candidates of a per-NUMA rule (with_numa_usage)


def with_numa_usage(candidates: Sequence[Candidate], numa: int | str) -> list[Candidate]:
    """The candidates with their memory use on ``numa`` as the ranking key ``memory.numa_usage``
    reads it (a copy of the facts: the same pod ranks by another node's use on another NUMA node)."""
    key = numa_usage_key(numa)
    out = []
    for c in candidates:
        usage = c.facts.get(key)
        if usage is None:
            out.append(c)
            continue
        facts = ItemFacts(c.facts)
        facts[NUMA_USAGE] = usage
        out.append(Candidate(c.workload, facts, c.cls))
    return out


def numa_usage_key(numa: int | str) -> str:
    """The pod fact holding a pod's memory use on one NUMA node (facts schema: podFacts.numa)."""
    return f"numa.{numa}.memory_usage_bytes"


def on_numa(
    candidates: Sequence[Candidate], numa: int | str, numa_total: float, min_ratio: float | None
) -> list[Candidate] | None:
    """Katalyst's NUMA victim filter (numaVictimMinimumUtilizationThreshold): the candidates whose
    memory use on ``numa`` is at least ``min_ratio`` of the node's ``numa_total`` bytes; without a
    ratio, those that use the NUMA node at all. A pod without the fact is left out, as Katalyst
    skips a pod whose NUMA metric it cannot read. None when no candidate has the fact: the facts
    carry no per-pod NUMA use, and the caller says so instead of evicting from nothing."""
    key = numa_usage_key(numa)
    known = [(c, c.facts.get(key)) for c in candidates]
    if all(usage is None for _, usage in known):
        return None
    if min_ratio is None:
        return [c for c, usage in known if usage is not None and usage > 0]
    if numa_total <= 0:
        return []
    return [c for c, usage in known if usage is not None and usage / numa_total >= min_ratio]


def credit(c: Candidate, resource: str, target: str) -> float:
    """What evicting this pod releases of ``resource``: its usage (default) or its request."""
    if resource in ("batch-cpu", "batch-memory"):
        return c.workload.request(f"kubernetes.io/{resource}")
    usage, request, _ = RESOURCE_FACTS[resource]
    value = c.facts.get(request if target == "request" else usage)
    return float(value) if isinstance(value, int | float) else 0.0


def release_target(release: ReleaseSpec, scope_facts: Any) -> tuple[float, str, dict[str, Any]] | None:
    """How much to release, the formula in words, and its inputs; None when the rule sets no target.

    lowerPercent with ``rounding: floor`` follows Koordinator's integer arithmetic: usage% =
    floor(used * 100 / capacity), release = capacity * (usage% - lower) / 100. With ``rounding:
    exact`` the gap is taken on the exact usage: release = used - capacity * lower / 100, so a
    strict threshold (``gt: 50``) can be released down to exactly 50%. ``excessPercent`` is
    applied by :func:`with_excess`, to whichever target the rule ends up with.
    """
    resource = release.resource
    if release.amount is not None:
        amount = release.amount
        return amount, f"amount {release.amount_text}", {"amount": amount}
    lower = release.lower_percent
    if lower is None or resource not in RESOURCE_FACTS:
        return None
    usage_key, _, capacity_keys = RESOURCE_FACTS[resource]
    capacity = next((scope_facts.get(k) for k in capacity_keys.split(",") if scope_facts.get(k)), None)
    if not capacity:
        return None
    used = scope_facts.get(usage_key)
    percent = scope_facts.get(f"{resource}.usage_percent")
    if release.rounding == "exact":
        if used is None and percent is not None:
            used = capacity * percent / 100.0
        if used is None:
            return None
        target = max(used - capacity * lower / 100.0, 0.0)
        formula = f"{_plain(used)} - {_plain(capacity)} * {_plain(lower)} / 100"
        inputs = {"capacity": capacity, "used": used, "lowerPercent": lower, "rounding": "exact"}
        return target, formula, inputs
    if percent is None and used is not None:
        percent = math.floor(used * 100 / capacity)
    if percent is None:
        return None
    percent = math.floor(percent)
    target = max(capacity * (percent - lower) / 100.0, 0.0)
    formula = f"{_plain(capacity)} * ({percent} - {_plain(lower)}) / 100"
    return target, formula, {"capacity": capacity, "usagePercent": percent, "lowerPercent": lower}


def with_excess(
    target: tuple[float, str, dict[str, Any]], excess_percent: float
) -> tuple[float, str, dict[str, Any]]:
    """The target raised by ``excessPercent`` (release X% more than the gap), formula and inputs
    extended; unchanged at 0."""
    if not excess_percent:
        return target
    amount, formula, inputs = target
    factor = 1.0 + excess_percent / 100.0
    return (
        amount * factor,
        f"({formula}) * (1 + {_plain(excess_percent)} / 100)",
        {**inputs, "excessPercent": excess_percent, "beforeExcess": amount},
    )


def _plain(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


@dataclass(frozen=True)
class TriggerResult:
    """What an evict trigger decided for one firing.

    ``met`` False means no eviction at all. ``allowed`` (uid -> that pod's check, shown in its
    provenance) narrows the candidates, None keeps them all; ``order`` (uids) replaces orderBy with
    the anchor's own order; ``target`` (amount, formula, inputs) replaces the release spec's target.
    ``inputs`` are the trigger's terms for provenance."""

    met: bool
    inputs: Mapping[str, Any]
    allowed: Mapping[str, Mapping[str, Any]] | None = None
    order: tuple[str, ...] | None = None
    target: tuple[float, str, dict[str, Any]] | None = None


def rss_overuse_trigger(
    pool: Sequence[Candidate], threshold: float, own: Callable[[Candidate], float | None]
) -> TriggerResult:
    """Katalyst's RSS overuse plugin (katalyst.md 3.6): a pod qualifies when the sum of its RSS is above
    its threshold x the sum of its memory requests. ``own`` gives the pod's own threshold (the
    rss_overuse_threshold enhancement), else ``threshold`` applies; ``rss_overuse`` skips pods with
    a container lacking a memory request or an unusable threshold annotation, as the anchor does."""
    allowed: dict[str, Mapping[str, Any]] = {}
    checked = 0
    for c in pool:
        rss = c.facts.get("memory.rss_bytes")
        if rss is None:
            continue
        mine = own(c)
        limit = threshold if mine is None else mine
        checked += 1
        if MEMORY_ENHANCEMENT not in c.workload.annotations and not (
            rss > limit * float(c.facts.get("memory.request_bytes", 0.0))
        ):
            continue  # cheap and exact without the annotation: under its limit, whatever else holds
        check = rss_overuse(c.workload, float(rss), limit)
        if check is None:
            continue
        if check.over:
            allowed[c.workload.uid] = {
                "rssBytes": check.rss,
                "requestBytes": check.request,
                "threshold": check.threshold,
                "formula": f"{_plain(check.rss)} > {check.threshold:g} * {_plain(check.request)}",
            }
    inputs = {"threshold": threshold, "checked": checked, "over": len(allowed)}
    return TriggerResult(bool(allowed), inputs, allowed)


def tolerance_trigger(
    pool: Sequence[Candidate],
    supply: ReclaimPoolSupply,
    since: Mapping[str, float],
    now: float,
    *,
    max_rate: float,
    min_duration: float,
    request_milli: Callable[[Candidate], int],
    tolerance: Callable[[Candidate], float | None],
) -> tuple[TriggerResult, dict[str, float]]:
    """Katalyst's suppression-tolerance eviction (katalyst.md 3.9) over the reclaimed pods in ``pool``,
    with ``since`` the per-pod "exceeding since" times of the previous tick (keyed namespace/name).
    Returns the result (victims in the anchor's order, each request leaving the sum before the next
    pod is checked) and the times to keep."""
    pods = [
        ReclaimedPod(c.workload.key, request_milli(c), c.workload.priority or 0, tolerance(c)) for c in pool
    ]
    step = suppression_eviction_step(
        pods, supply, since, now, max_tolerance_rate=max_rate, min_duration=min_duration
    )
    by_key = {c.workload.key: c for c in pool}
    checks = {check.key: _tolerance_check(check) for check in step.checks}
    order = tuple(by_key[k].workload.uid for k in step.victims)
    allowed = {by_key[k].workload.uid: checks[k] for k in step.victims}
    inputs = {
        **step.inputs(),
        "poolCpus": supply.pool_cpus,
        "poolUsageCores": supply.usage_ratio_sum,
        "reclaimUsageCores": supply.cgroup_usage_cores,
    }
    inputs.pop("checks")
    inputs["exceeding"] = sum(1 for c in step.checks if c.exceeding_since is not None)
    return TriggerResult(bool(order), inputs, allowed, order), dict(step.since)


def _tolerance_check(check: ToleranceCheck) -> dict[str, Any]:
    """A pod's check for provenance; ``toleranceRate`` spelled out so it reads as the rate it is."""
    out = check.to_dict()
    out["toleranceRate"] = out.pop("tolerance")
    return out


def overcommit_trigger(
    pool: Sequence[Candidate],
    allocatable: Mapping[str, float],
    thresholds: Mapping[str, float],
    skip_zero: Sequence[str] = (),
) -> TriggerResult:
    """Katalyst's reclaimed-resource pressure (katalyst.md 3.7): the pool's summed requests of each
    published resource against ``allocatable`` (same units as the requests); when one exceeds its
    threshold, victims by largest request of that resource first."""
    requests = [{name: c.workload.request(name) for name in allocatable} for c in pool]
    result = reclaimed_overcommit(requests, allocatable, thresholds, None, skip_zero)
    inputs: dict[str, Any] = {
        "met": result.met.value,
        "resource": result.scope,
        "checks": [
            {"resource": k.resource, "requested": k.used, "allocatable": k.total, "threshold": k.rate,
             "met": k.met.value}
            for k in result.checks
        ],
    }
    if result.met is not MetType.HARD_MET or result.scope is None:
        return TriggerResult(False, inputs)
    scope = result.scope
    victims = overcommit_victims([c.workload for c in pool], scope)
    order = tuple(w.uid for w in victims)
    allowed = {w.uid: {"resource": scope, "request": w.request(scope)} for w in victims}
    return TriggerResult(True, inputs, allowed, order)


def satisfaction_trigger(
    avg: BeCpu,
    current: BeCpu,
    lower_percent: int,
    upper_percent: int,
    usage_threshold_percent: int | None = None,
    samples: tuple[int, int, int] | None = None,
) -> TriggerResult:
    """Koordinator's BECPUEvict (koordinator.md 3.2): the batch-cpu millicores to release, computed on
    the window average and confirmed (never raised) by the current value, as the release target."""
    r = be_satisfaction_release(avg, current, lower_percent, upper_percent, usage_threshold_percent, samples)
    inputs: dict[str, Any] = {
        "average": _be_cpu(avg),
        "current": _be_cpu(current),
        "lowerPercent": lower_percent,
        "upperPercent": upper_percent,
        "averageRelease": r.avg_release,
        "currentRelease": r.current_release,
        "reason": r.reason,
    }
    if r.release <= 0:
        return TriggerResult(False, inputs)

    def term(x: BeCpu) -> str:
        request, limit = _plain(x.request), _plain(x.limit)
        return f"int({request} * ({upper_percent}/100 - {limit}/{request}))"

    if r.current_release is None:
        formula = f"{term(avg)} = {r.release}"
    else:
        formula = f"min({term(avg)} = {r.avg_release}, now {term(current)} = {r.current_release})"
    return TriggerResult(True, inputs, target=(float(r.release), formula, inputs))


def _be_cpu(x: BeCpu) -> dict[str, float]:
    return {"usageMilli": x.usage, "requestMilli": x.request, "limitMilli": x.limit}


@dataclass
class Round:
    """Evictions decided in one tick, shared by every rule: a pod is chosen at most once."""

    chosen: dict[str, str] = field(default_factory=dict)  # uid -> rule


@dataclass(frozen=True)
class Choice:
    candidate: Candidate
    rank: int
    ranking: tuple[tuple[str, Any], ...]
    credit: float
    of: int = 0  # how many eligible candidates were ranked: this victim is rank ``rank`` of ``of``


def choose(
    candidates: Sequence[Candidate],
    spec: EvictSpec,
    scope_facts: Any,
    pending: Mapping[str, float],
    rnd: Round,
    limit: int,
    trigger: TriggerResult | None = None,
) -> tuple[list[Choice], Release | None]:
    """Victims for one firing of one rule, and the release arithmetic behind them.

    ``pending`` maps pods already being evicted (earlier rounds, or terminating) to their credit.
    ``limit`` caps new victims (maxPerRound / perRound). Without a release target the rule evicts up
    to ``limit`` pods, minus evictions of its candidates still under way (the kubelet waits for them).
    A ``trigger`` narrows the candidates, and may impose its order and its release target.
    """
    victims = spec.victims
    release_spec = spec.release
    resource = release_spec.resource
    target_kind = release_spec.target
    allowed = trigger.allowed if trigger is not None else None
    pool = [
        c for c in candidates if eligible(c, victims) and (allowed is None or c.workload.uid in allowed)
    ]
    already = [
        c for c in pool if c.workload.uid in pending or c.workload.uid in rnd.chosen or c.workload.terminating
    ]
    fresh = [c for c in pool if c not in already]
    pending_credit = sum(pending.get(c.workload.uid, credit(c, resource, target_kind)) for c in already)
    target = (
        trigger.target
        if trigger is not None and trigger.target is not None
        else release_target(release_spec, scope_facts)
    )
    if target is not None:
        target = with_excess(target, release_spec.excess_percent)
    if trigger is not None and trigger.order is not None:
        position = {uid: i for i, uid in enumerate(trigger.order)}
        ordered = sorted(fresh, key=lambda c: position[c.workload.uid])
        ranked = [(c, tuple((allowed or {}).get(c.workload.uid, {}).items())) for c in ordered]
    else:
        ranked = rank(fresh, spec.ranking)
    chosen: list[Choice] = []
    released = pending_credit
    budget = limit if target is not None else max(limit - len(already), 0)
    for i, (c, values) in enumerate(ranked):
        if len(chosen) >= budget or (target is not None and released >= target[0]):
            break
        amount = credit(c, resource, target_kind)
        chosen.append(Choice(c, i + 1, values, amount, len(ranked)))
        released += amount
    release = None
    if target is not None:
        release = Release(resource, target[0], target[1], pending_credit, pending_credit, released)
    return chosen, release
