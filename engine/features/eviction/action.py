"""evict: victims of one rule, ranked, with release accounting shared by every rule of the round.

An optional ``trigger`` (see ``engine.features.eviction.strategy``) is computed here from the tick's facts,
the pool plan and the engine state: this file gathers its inputs, the strategy decides.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from engine.config.policy import Effects
from engine.evaluate.context import ActionContext
from engine.evaluate.factview import EMPTY_ITEM, ItemFacts
from engine.features.eviction import allocatable
from engine.features.eviction.allocatable_spec import RequestOverAllocatable
from engine.features.eviction.pool_load import HARD, pod_history
from engine.features.eviction.pressure import (
    MEMORY_ENHANCEMENT,
    BeCpu,
    MetType,
    be_allocatable_milli,
    be_real_limit_milli,
    reclaimed_overcommit,
)
from engine.features.eviction.spec import (
    BeSatisfaction,
    EvictSpec,
    PoolLoad,
    ReclaimedOvercommit,
    RssOveruse,
    SuppressionTolerance,
    Trigger,
    Victims,
)
from engine.features.eviction.strategy import (
    Candidate,
    TriggerResult,
    choose,
    critical_left_out,
    eligible,
    numa_usage_key,
    on_numa,
    overcommit_trigger,
    rss_overuse_trigger,
    satisfaction_trigger,
    tolerance_trigger,
    with_numa_usage,
)
from engine.features.eviction.tolerance import ReclaimPoolSupply, observed_supply
from engine.features.suppress.strategy import CFS_PERIOD_US, UNSET_QUOTA
from engine.model.facts import EMPTY, Workload, window_key
from engine.model.intents import EvictIntent


def candidate(ctx: ActionContext, w: Workload) -> Candidate:
    name = ctx.env.classifier.classify(w).class_name
    return Candidate(w, ctx.views.pod(w), ctx.env.policy.class_index.get(name) if name else None)


def evict(ctx: ActionContext) -> bool:
    rule = ctx.rule.rule
    spec = ctx.spec_as(EvictSpec)
    t, matched = ctx.tick, ctx.matched
    audit = rule.mode == "audit"
    trigger_spec = spec.trigger
    limit_values = [v for v in (spec.max_per_round, rule.per_round) if v is not None]
    # These triggers set the release target themselves.
    has_target = spec.release.has_target or isinstance(trigger_spec, BeSatisfaction | RequestOverAllocatable)
    # A soft rule nominates every pod that qualifies; the soft round keeps one of all of them.
    unbounded = has_target or spec.soft
    limit = min(limit_values) if limit_values else (math.inf if unbounded else 1)
    # Per matched NUMA node without a release target: one victim each (Katalyst's TopN=1),
    # all of them together within maxPerRound.
    per_group = limit if has_target or rule.scope != "numa" else 1
    left = limit
    picked: set[str] = set()
    numa_scoped = spec.victims.numa_scoped and rule.scope == "numa"
    pending = {uid: rec.credit for uid, rec in t.evicting.items()}
    new = 0
    groups: list[tuple[str | None, Any, list[Candidate], bool]] = []
    known: TriggerResult | None = None
    if rule.scope in ("pod", "container"):
        seen: dict[str, Candidate] = {}
        for _, _, w, _ in matched:
            if w is not None and w.uid not in seen:
                seen[w.uid] = candidate(ctx, w)
        key, facts, _, latched = matched[0]
        groups.append((key, facts, list(seen.values()), latched))
    else:
        workloads = _by_class(ctx, spec.victims)
        if isinstance(trigger_spec, BeSatisfaction):
            # Decided from class facts alone: candidates are built only when there is a release.
            known = _satisfaction(ctx, spec.victims, trigger_spec, workloads)
            workloads = workloads if known.met else ()
        elif trigger_spec is not None:
            workloads = tuple(_gate(ctx, trigger_spec, workloads))
        all_candidates = [candidate(ctx, w) for w in workloads]
        for key, facts, _, latched in matched:
            groups.append((key, facts, all_candidates, latched))
    for key, facts, candidates, latched in groups:
        budget = min(left, per_group)
        if budget <= 0:
            break
        scope_facts: Any = (
            facts if isinstance(facts, ItemFacts) and facts is not EMPTY_ITEM else ctx.views.node
        )
        pool = [c for c in candidates if c.workload.uid not in picked]
        if numa_scoped and key is not None:
            pool = _on_numa(ctx, spec.victims, pool, key)
        for c, why in critical_left_out(pool, spec.victims):
            if c.workload.uid not in picked:
                picked.add(c.workload.uid)  # said once per firing
                ctx.skip(f"{c.workload.key} is kubelet-critical ({why}): never an eviction victim")
        trigger = (
            known
            if known is not None
            else _trigger(ctx, spec.victims, trigger_spec, pool)
            if trigger_spec is not None
            else None
        )
        if trigger is not None and not trigger.met:
            continue
        cap = int(min(budget, 10**9))
        choices, release = choose(pool, spec, scope_facts, pending, t.round, cap, trigger)
        left -= len(choices)
        picked.update(c.candidate.workload.uid for c in choices)
        common = _common_inputs(ctx, spec, key, trigger)
        for choice in choices:
            w = choice.candidate.workload
            # candidates: the eligible pods this victim was ranked among (not every pod of the node)
            inputs = {**common, "candidates": choice.of}
            if trigger is not None and trigger.allowed is not None:
                inputs["trigger"] = {**common["trigger"], "pod": trigger.allowed.get(w.uid)}
            t.intents.append(
                EvictIntent(
                    uid=w.uid,
                    namespace=w.namespace,
                    name=w.name,
                    class_name=choice.candidate.cls.name if choice.candidate.cls else None,
                    rank=choice.rank,
                    ranking=choice.ranking,
                    credit=choice.credit,
                    release=release,
                    grace_period_seconds=spec.grace_period_seconds,
                    provenance=ctx.provenance(key, facts, latched, inputs),
                    killer=spec.killer,
                    soft=spec.soft,
                    scope=spec.scope,
                )
            )
            if not audit and not spec.soft:  # a soft nomination leaves the pod to force rules
                t.round.chosen[w.uid] = rule.name
            new += 1
    return new > 0


def _on_numa(ctx: ActionContext, victims: Victims, pool: list[Candidate], numa: str) -> list[Candidate]:
    """victims.numaScoped on a per-NUMA rule: only the pods using the matched NUMA node (at least
    minNumaUsageRatio of its memory). Without per-pod NUMA facts every candidate stays, and the
    rule's outcome says so."""
    total = ctx.snap.topology.numa_memory.get(int(numa), 0.0)
    kept = on_numa(pool, numa, total, victims.min_numa_usage_ratio)
    if kept is None:
        ctx.skip(
            f"note: victims.numaScoped: no pod has facts of its memory use on NUMA node {numa} "
            f"(pod fact {numa_usage_key(numa)}); every candidate was considered"
        )
        return pool
    return with_numa_usage(kept, numa)


def _by_class(ctx: ActionContext, victims: Victims) -> tuple[Workload, ...]:
    """The workloads whose class and phase can make them victims, from the class grouping alone:
    rules that look at the whole node every tick (the triggers) then build candidate facts only for
    these. The same tests as ``eligible``, which still runs on each candidate. Kept across ticks
    while the grouping is unchanged (the same tuple comes back, so callers can memoize on it)."""
    classes, excluded, phases = victims.classes, victims.exclude_classes, victims.phases
    groups = ctx.views.by_class()
    memo = ctx.views.generation_memo
    key = ("evict.by_class", classes, excluded, phases)
    hit = memo.get(key)
    if hit is not None and hit[0] is groups:
        cached: tuple[Workload, ...] = hit[1]
        return cached
    index = ctx.env.policy.class_index
    out: list[Workload] = []
    for name, members in groups.items():
        cls = index.get(name) if name else None
        if cls is not None and (cls.protected or cls.name in excluded):
            continue
        if classes and (cls is None or cls.name not in classes):
            continue
        out.extend(w for w in members if w.phase in phases)
    result = tuple(out)
    memo[key] = (groups, result)
    return result


def _gate(ctx: ActionContext, spec: Trigger, workloads: tuple[Workload, ...]) -> Sequence[Workload]:
    """The workloads a node-wide trigger can act on, found from raw facts before any candidate is
    built (these rules look at every pod every tick): for RSS overuse, pods above the rule's or
    their own threshold, and every pod with a memory_enhancement annotation (its own threshold may
    be anything); for reclaimed overcommit, none unless a resource is overcommitted."""
    if isinstance(spec, RssOveruse):
        default = spec.threshold
        memo = ctx.views.generation_memo
        hit = memo.get(("evict.rss", default))
        if hit is not None and hit[0] is workloads:
            limits: list[tuple[Workload, float]] = hit[1]
        else:
            # Per pod, the RSS above which it may be over: its threshold x its memory request; -1
            # (always a suspect) with a memory_enhancement annotation, whose own threshold the
            # strategy reads.
            limits = []
            for w in workloads:
                own = _effects(ctx, w).rss_overuse_threshold
                limit = (default if own is None else own) * w.request("memory")
                limits.append((w, -1.0 if MEMORY_ENHANCEMENT in w.annotations else limit))
            memo["evict.rss", default] = (workloads, limits)
        measured = ctx.snap.metrics.pods
        out = []
        for w, limit in limits:
            rss = measured.get(w.uid, EMPTY).get("memory.rss_bytes")
            if rss is not None and rss > limit:
                out.append(w)
        return out
    if isinstance(spec, ReclaimedOvercommit):
        allocatable, thresholds, skip_zero, _ = _published(ctx, spec)
        if not workloads or not allocatable:
            return ()
        # The summed requests change only with the workloads: memoized on the (kept) tuple.
        names = tuple(sorted(allocatable))
        memo = ctx.views.generation_memo
        hit = memo.get(("evict.requests", names))
        if hit is not None and hit[0] is workloads:
            sums: dict[str, float] = hit[1]
        else:
            sums = {name: sum(w.request(name) for w in workloads) for name in names}
            memo["evict.requests", names] = (workloads, sums)
        met = reclaimed_overcommit([sums], allocatable, thresholds, None, skip_zero).met
        return workloads if met is MetType.HARD_MET else ()
    return workloads


def _common_inputs(
    ctx: ActionContext, spec: EvictSpec, key: str | None, trigger: TriggerResult | None
) -> dict[str, Any]:
    """Provenance inputs shared by one group's victims: ranking, the pressure decision the rule
    tested (Katalyst's counter or system pressure), and the trigger's terms."""
    t = ctx.tick
    inputs: dict[str, Any] = {}
    if trigger is not None and trigger.order is not None and spec.trigger is not None:
        inputs["order"] = f"trigger {spec.trigger.kind}"
    else:
        inputs["orderBy"] = list(spec.order_by)
    env = ctx.env
    if ctx.name in env.numa_pressure_rules and key is not None:
        counter = t.pressure_inputs.get(f"numa:{key}")
        if counter is not None:
            inputs["watermarkCounter"] = dict(counter)
    if ctx.name in env.system_pressure_rules and "node" in t.pressure_inputs:
        inputs["systemMemoryPressure"] = dict(t.pressure_inputs["node"])
    if trigger is not None and spec.trigger is not None:
        inputs["trigger"] = {"kind": spec.trigger.kind, **trigger.inputs}
    return inputs


# ---------------------------------------------------------------- triggers


def _trigger(ctx: ActionContext, victims: Victims, spec: Trigger, pool: Sequence[Candidate]) -> TriggerResult:
    """Gather one trigger's inputs for the eligible candidates and run its strategy."""
    eligible_pool = [c for c in pool if eligible(c, victims)]
    if isinstance(spec, RssOveruse):
        return rss_overuse_trigger(
            eligible_pool, spec.threshold, lambda c: _effects(ctx, c.workload).rss_overuse_threshold
        )
    if isinstance(spec, SuppressionTolerance):
        return _tolerance(ctx, spec, eligible_pool)
    if isinstance(spec, ReclaimedOvercommit):
        return _overcommit(ctx, spec, eligible_pool)
    if isinstance(spec, PoolLoad):
        return _pool_load(ctx, eligible_pool)
    if isinstance(spec, RequestOverAllocatable):
        # The check guarantees maxPriority; the sum covers every pod of the band, opted in or not.
        published = ctx.snap.allocatable.get(spec.extended)
        return allocatable.trigger(
            spec, ctx.snap.workloads, eligible_pool, published, victims.max_priority or 0
        )
    return _satisfaction(ctx, victims, spec, [c.workload for c in eligible_pool])


def _pool_load(ctx: ActionContext, pool: Sequence[Candidate]) -> TriggerResult:
    """Katalyst's load-pressure victims: the candidates with a container in the hard pool, the
    highest sum of their load samples first (ties by name)."""
    inputs = ctx.tick.pressure_inputs.get("pool_load") or {}
    plan = ctx.tick.pool_plan
    hard = inputs.get("pool") if inputs.get("met") == HARD else None
    if not hard or plan is None:
        met = inputs.get("met", "none")
        return TriggerResult(False, {"met": met, "reason": "no pool meets the hard bound"})
    members = {uid for (uid, _), name in plan.assignments.items() if name == hard}
    state = ctx.tick.pressure.pool_load
    scored = sorted(
        ((pod_history(state, c.workload.uid), c) for c in pool if c.workload.uid in members),
        key=lambda sc: (-sc[0], sc[1].workload.name),
    )
    order = tuple(c.workload.uid for _, c in scored)
    allowed = {c.workload.uid: {"loadSamplesSum": load} for load, c in scored}
    verdict: Mapping[str, Any] = next((v for v in inputs.get("pools", ()) if v.get("pool") == hard), {})
    return TriggerResult(bool(order), {**verdict, "met": HARD}, allowed, order)


def _effects(ctx: ActionContext, w: Workload) -> Effects:
    """What the workload's enhancements set (its own RSS threshold or tolerance), cached per workload."""
    return ctx.env.classifier.classify(w).effects


def _tolerance(ctx: ActionContext, cfg: SuppressionTolerance, pool: Sequence[Candidate]) -> TriggerResult:
    """Katalyst's suppression tolerance: supply of the victims' pool, per-pod timers in the state."""
    t = ctx.tick
    supply = _reclaim_supply(ctx, pool)
    if supply is None:
        return TriggerResult(False, {"reason": "node.reclaim.pool_usage_cores is not observed"})
    resource = cfg.request_resource

    def request_milli(c: Candidate) -> int:
        extended = c.workload.request(resource)
        return int(extended) if extended > 0 else round(c.workload.request("cpu") * 1000)

    since = t.pressure.tolerance.get(ctx.name, {})
    result, kept = tolerance_trigger(
        pool,
        supply,
        since,
        t.now,
        max_rate=cfg.max_rate,
        min_duration=cfg.min_duration,
        request_milli=request_milli,
        tolerance=lambda c: _effects(ctx, c.workload).suppression_tolerance_rate,
    )
    tolerance = dict(t.pressure.tolerance)
    if kept:
        tolerance[ctx.name] = kept
    else:
        tolerance.pop(ctx.name, None)
    t.pressure = replace(t.pressure, tolerance=tolerance)
    return result


def _reclaim_supply(ctx: ActionContext, pool: Sequence[Candidate]) -> ReclaimPoolSupply | None:
    """Katalyst's GetReclaimMetrics for the victims' pool (``observed_supply``): when the collector
    does not give them, its CPUs are the victims' pools in this tick's plan (else every reclaim pool)
    and the cgroup's usage is the candidates' usage."""

    def pool_cpus() -> int | None:
        plan = ctx.tick.pool_plan
        if plan is None:
            return None
        names = {c.cls.pool for c in pool if c.cls is not None and c.cls.pool}
        names |= {p.name for p in ctx.env.policy.pools if p.kind == "reclaim"} if not names else set()
        return len(frozenset().union(*(plan.pools.get(n, frozenset()) for n in names))) if names else None

    return observed_supply(
        ctx.views.node, pool_cpus, lambda: sum(float(c.facts.get("cpu.usage_cores", 0.0)) for c in pool)
    )


CPU_MILLI = 1000.0  # CPU extended resources (reclaimed_millicpu, batch-cpu) count millicores


def _overcommit(ctx: ActionContext, cfg: ReclaimedOvercommit, pool: Sequence[Candidate]) -> TriggerResult:
    """Katalyst's reclaimed-resource pressure over the published allocatable of each reclaimed
    resource (spec.reclaim.<cpu|memory>.publishAs)."""
    allocatable, thresholds, skip_zero, sources = _published(ctx, cfg)
    result = overcommit_trigger(pool, allocatable, thresholds, skip_zero)
    return replace(result, inputs={**result.inputs, "allocatableFrom": sources})


def _published(
    ctx: ActionContext, cfg: ReclaimedOvercommit
) -> tuple[dict[str, float], dict[str, float], list[str], dict[str, str]]:
    """Allocatable (in the extended resource's unit), threshold and skip-zero list per published
    reclaimed resource, and where each allocatable came from. Precedence: the collector's
    node.reclaim.*_allocatable_* fact (what the scheduler sees on the CNR), then the Node's
    allocatable of that extended resource, then qosd's own last report (EngineState.reports)."""
    reclaim = ctx.env.policy.reclaim
    thresholds_cfg = cfg.thresholds
    skip = cfg.skip_zero
    node = ctx.views.node
    allocatable: dict[str, float] = {}
    thresholds: dict[str, float] = {}
    skip_zero: list[str] = []
    sources: dict[str, str] = {}
    for resource, spec, fact in (
        ("cpu", reclaim.cpu, "reclaim.cpu_allocatable_cores"),
        ("memory", reclaim.memory, "reclaim.memory_allocatable_bytes"),
    ):
        if spec is None or not spec.publish_as:
            continue
        name = spec.publish_as
        unit = CPU_MILLI if resource == "cpu" else 1.0
        value: float | None = None
        observed = node.get(fact)
        if observed is not None:
            value, sources[name] = float(observed) * unit, f"node.{fact}"
        elif name in ctx.snap.allocatable:
            value, sources[name] = float(ctx.snap.allocatable[name]), "node allocatable"
        else:
            history = ctx.tick.reports.get(name)
            # The value last published (``reported`` where the history keeps it apart from the
            # smoothed ``last``).
            published = getattr(history, "reported", None) if history is not None else None
            if published is None and history is not None:
                published = history.last
            if published is not None:
                value, sources[name] = float(published) * unit, "last report"
        if value is None:
            continue
        allocatable[name] = value
        thresholds[name] = thresholds_cfg[resource]
        if resource in skip:
            skip_zero.append(name)
    return allocatable, thresholds, skip_zero, sources


def _satisfaction(
    ctx: ActionContext, victims: Victims, cfg: BeSatisfaction, pool: Sequence[Workload]
) -> TriggerResult:
    """Koordinator's BECPUEvict: BE usage, request and limit (millicores) over the window and now.

    Usage and limit read the class's facts (``class.<name>.cpu.*``: windowed averages from the
    collector, else the pods' sum / the current value). The real limit is the collector's
    ``limit_cores`` if it sends one, else ``be_real_limit_milli`` of the class cgroup's cpuset size
    (fact, else its pool in this tick's plan) and quota. The request is the victims' summed batch-cpu
    requests now; the collector's windowed ``request_cores`` replaces it for the average if sent."""
    class_names: list[str] = list(victims.classes)
    classes = ctx.views.snapshot.metrics.classes
    measured = [classes.get(n, {}) for n in class_names]
    window = cfg.effective_window
    interval = cfg.collect_interval
    resource = cfg.request_resource
    classify = ctx.env.classifier.classify
    labels = victims.require_label.items()
    members = [
        w
        for w in pool
        if classify(w).class_name in class_names and all(w.labels.get(k) == v for k, v in labels)
    ]

    def class_sum(key: str) -> float | None:
        """The class's measured value, else the sum over its pods when every pod has one."""
        value = _class_value(measured, key)
        if value is not None:
            return value
        pods = [ctx.views.pod(w).get(key) for w in members]
        return float(sum(pods)) if pods and all(v is not None for v in pods) else None

    def avg_key(path: str) -> str:
        return window_key(path, "avg", window)

    request_now = float(sum(w.request(resource) for w in members))
    usage_now = class_sum("cpu.usage_cores")
    usage_avg = class_sum(avg_key("cpu.usage_cores"))
    req_avg = _class_value(measured, avg_key("cpu.request_cores"))
    limit_now: float | None
    limit_avg: float | None
    if cfg.limit == "allocatable":
        limit_now = limit_avg = be_allocatable_milli(ctx.snap.allocatable.get(resource))
    else:
        limit_now = _real_limit(ctx, measured, class_names)
        limit_avg_raw = _class_value(measured, avg_key("cpu.limit_cores"))
        limit_avg = limit_avg_raw * CPU_MILLI if limit_avg_raw is not None else limit_now
    if usage_now is None or limit_now is None:
        reason = f"no CPU usage or limit facts for class {', '.join(class_names)}"
        return TriggerResult(False, {"reason": reason})
    current = BeCpu(usage_now * CPU_MILLI, request_now, limit_now)
    avg = BeCpu(
        (usage_avg if usage_avg is not None else usage_now) * CPU_MILLI,
        req_avg * CPU_MILLI if req_avg is not None else request_now,
        limit_avg if limit_avg is not None else limit_now,
    )
    counts = [
        n
        for m in measured
        for k in ("cpu.usage_cores", "cpu.limit_cores", "cpu.request_cores")
        if (n := m.get(window_key(k, "samples", window))) is not None
    ]
    samples = (int(min(counts)), int(window), int(interval)) if counts else None
    return satisfaction_trigger(
        avg, current, cfg.lower_percent, cfg.upper_percent, cfg.usage_threshold_percent, samples
    )


def _class_value(measured: Sequence[Mapping[str, Any]], key: str) -> float | None:
    values = [m.get(key) for m in measured]
    numbers = [float(v) for v in values if v is not None]
    return sum(numbers) if values and len(numbers) == len(values) else None


def _real_limit(
    ctx: ActionContext, measured: Sequence[Mapping[str, Any]], class_names: Sequence[str]
) -> float | None:
    """Koordinator's realLimit in millicores: the collector's limit_cores, else min(cpuset size x 1000,
    quota x 1000 / period) of the class cgroup (cpuset size: the fact, else the class pool's size)."""
    limit = _class_value(measured, "cpu.limit_cores")
    if limit is not None:
        return limit * CPU_MILLI
    cpus = _class_value(measured, "cpu.cpuset_cpus")
    plan = ctx.tick.pool_plan
    if cpus is None and plan is not None:
        index = ctx.env.policy.class_index
        pools = {p for n in class_names if n in index and (p := index[n].pool)}
        if pools:
            cpus = float(len(frozenset().union(*(plan.pools.get(p, frozenset()) for p in pools))))
    if cpus is None:
        return None
    quota = _class_value(measured, "cpu.cfs_quota_us")
    period = _class_value(measured, "cpu.cfs_period_us")
    return float(
        be_real_limit_milli(
            int(cpus),
            int(quota) if quota is not None else UNSET_QUOTA,
            int(period) if period is not None else CFS_PERIOD_US,
        )
    )
