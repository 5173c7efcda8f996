"""Evaluation: (compiled policy, snapshot, engine state) -> intents and the next state.

This is the one code path of the daemon, ``qosd eval``, ``qosd simulate`` and ``qosd test``. Per rule
it evaluates the compiled condition for each item of the rule's scope (the node, each NUMA node, pod
or container), applies ``for`` (sustain), ``clearWhen`` and hysteresis (latches), ``cooldown`` and
rate limits, then runs the rule's actions. Evictions of all rules in one tick share one round: a pod
is chosen at most once, and pods already being evicted count as released.
"""

from __future__ import annotations

import importlib
import operator
from collections.abc import Mapping
from dataclasses import dataclass, replace
from itertools import compress, islice
from types import MappingProxyType
from typing import Any, Protocol

from engine.config.policy import Policy
from engine.evaluate.classify import Classifier
from engine.evaluate.context import ActionContext, Skipped, Tick
from engine.evaluate.factview import ACTIVE_PHASES, FactViews, ScopeItems, same_workloads
from engine.evaluate.handlers import HANDLERS
from engine.evaluate.state import EngineState, Evicting, item_key
from engine.features.class_knobs.knobs import KnobFn
from engine.features.class_knobs.step import ClassKnobStep, PodOomPriority
from engine.features.eviction.step import PressureStep
from engine.features.pools.step import PoolStep
from engine.features.pools.strategy import PoolPlan
from engine.features.reclaim.gate import gate_publishes
from engine.features.resctrl.step import ResctrlStep
from engine.features.rules.compiler import Call, CompiledRule, PythonBackend, compile_rules, fact_key
from engine.features.rules.conditions import comparisons
from engine.model.facts import Snapshot, Workload
from engine.model.intents import CgroupIntent, EvictIntent, Intent
from engine.model.units import parse_duration

USE_FACTS = {
    "cpu": ("cpu.usage_cores", "cpu.request_cores"),
    "memory": ("memory.usage_bytes", "memory.request_bytes"),
}


class Backend(Protocol):
    """Evaluates batches of compiled conditions: in-process Python, or durable-rules in a worker."""

    name: str

    def evaluate_many(
        self, node: Mapping[str, Any], classes: Mapping[str, Any], calls: list[Call]
    ) -> list[bool]: ...

    def close(self) -> None: ...


def make_backend(name: str, policy: Policy, rules: tuple[CompiledRule, ...]) -> Backend:
    if name == "python":
        return PythonBackend(rules)
    if name == "durable":
        # Imported on demand: durable-rules is an optional extra (Python < 3.13 only).
        durable = importlib.import_module("engine.features.rules.durable")
        backend: Backend = durable.DurableBackend(policy, rules)
        return backend
    raise ValueError(f"unknown backend {name!r}; use python or durable")


EVICTING_TTL = 600.0  # forget an eviction record after this long even if the pod lingers


@dataclass(frozen=True)
class WorkloadIssue:
    uid: str
    name: str
    class_name: str | None
    errors: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"uid": self.uid, "name": self.name, "class": self.class_name, "errors": list(self.errors)}


@dataclass(frozen=True)
class Evaluation:
    time: float
    policy_hash: str
    generation: int
    intents: tuple[Intent, ...]
    state: EngineState
    fired: tuple[str, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    workload_issues: tuple[WorkloadIssue, ...] = ()
    oom_priorities: tuple[PodOomPriority, ...] = ()  # each active pod's OOM priority (Katalyst)

    def to_dict(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "policy": {"hash": self.policy_hash, "generation": self.generation},
            "fired": list(self.fired),
            "intents": [i.to_dict() for i in self.intents],
            "skipped": [s.to_dict() for s in self.skipped],
            "workloadIssues": [w.to_dict() for w in self.workload_issues],
            "oomPriorities": [o.to_dict() for o in self.oom_priorities],
        }


class Engine:
    """One compiled policy generation. Build it once per reload; call ``evaluate`` every tick."""

    def __init__(self, policy: Policy, generation: int = 0, backend: str = "python"):
        self.policy = policy
        self.generation = generation
        self.classifier = Classifier(policy)
        self.rules: tuple[CompiledRule, ...] = compile_rules(policy)
        self.backend: Backend = make_backend(backend, policy, self.rules)
        self.class_keys = frozenset(
            fact_key(c)
            for r in policy.rules
            for c in comparisons(r.when) + comparisons(r.clear_when)
            if c.spec.scope == "class"
        )
        self.reclaimed_classes = frozenset(c.name for c in policy.classes if c.cpu_policy == "reclaimed")
        # A rule's cooldown, or its evict action's (Katalyst and Koordinator configure it per evictor).
        self.cooldowns = {
            r.name: max(
                [r.cooldown]
                + [
                    parse_duration(str(a.params["cooldown"]))
                    for a in r.actions
                    if a.kind == "evict" and "cooldown" in a.params
                ]
            )
            for r in policy.rules
        }
        self._static: dict[int, Any] = {}
        self._members: tuple[tuple[Workload, ...], Mapping[str, tuple[Workload, ...]]] | None = None
        self._issue_memo: tuple[tuple[Workload, ...], Any, tuple[WorkloadIssue, ...]] | None = None
        self._memo: dict[Any, Any] = {}  # cross-tick results actions reuse while workloads are unchanged
        self.pool_step = PoolStep(policy, self.classifier, generation)
        self.pressure_step = PressureStep(policy, self.classifier)
        self.resctrl_step = ResctrlStep(policy, self.classifier, generation)
        self.class_knob_step = ClassKnobStep(policy, self.classifier, generation)
        self.knob_cache: dict[str, dict[str, KnobFn]] = {}  # setCgroup knobs, compiled once per rule

    def members(self, workloads: tuple[Workload, ...]) -> Mapping[str, tuple[Workload, ...]]:
        """Active pods by class, in snapshot order. Sources hand back the same Workload objects while
        pods are unchanged, so the index is rebuilt only when the set of objects changes."""
        cached = self._members
        if cached is not None and same_workloads(cached[0], workloads):
            return cached[1]
        out: dict[str, list[Workload]] = {}
        classify = self.classifier.classify
        for w in workloads:
            if w.phase in ACTIVE_PHASES:
                name = classify(w).class_name
                if name:
                    out.setdefault(name, []).append(w)
        index = MappingProxyType({k: tuple(v) for k, v in out.items()})
        self._members = (workloads, index)
        return index

    def evaluate(self, snap: Snapshot, state: EngineState) -> Evaluation:
        views = FactViews(snap, self.classifier, self._static, self._memo)
        now = snap.time
        live = snap.by_uid if state.evicting else {}
        t = Tick(
            now=now,
            held=dict(state.held_since),
            latched=set(state.latched),
            last_fired=dict(state.last_fired),
            fired_at=dict(state.fired_at),
            reports=dict(state.reports),
            pressure=state.pressure,
            published=state.published,
            evicting={
                uid: rec
                for uid, rec in state.evicting.items()
                if uid in live and live[uid].phase in ACTIVE_PHASES and now - rec.since < EVICTING_TTL
            },
        )
        t.stateful = {k.split("|", 1)[0] for k in t.held} | {k.split("|", 1)[0] for k in t.latched}
        t.pool_plan = self.pool_step.plan(snap)
        # Before any condition: its counters become the facts the memory pressure rules test.
        self.pressure_step.run(views, t)
        classes = views.classes(self.class_keys) if self.class_keys else MappingProxyType({})
        for cr, evaluated in zip(self.rules, self._conditions(views, classes, t), strict=True):
            self._run_rule(cr, evaluated, snap, views, classes, t)
        gate_publishes(self.policy.reclaim.update, t)
        if t.pool_plan is not None:
            # A rule that sets a pooled file (suppress narrowing the BE cpuset) wins over the pool.
            taken = {(i.path, i.file) for i in t.intents if isinstance(i, CgroupIntent)}
            t.intents.extend(
                i
                for i in self.pool_step.intents(snap, t.pool_plan, self.policy.hash)
                if (i.path, i.file) not in taken
            )
        # Class knobs hold like pools, after the rules: a rule's setCgroup of the same file wins.
        oom = self.class_knob_step.run(snap, views.node, t)
        # Like the pools, after the rules: every group of the tick is planned against the CLOSIDs at once.
        self.resctrl_step.run(snap, t)
        new_state = EngineState(
            held_since=MappingProxyType(t.held),
            latched=frozenset(t.latched),
            last_fired=MappingProxyType(t.last_fired),
            fired_at=t.fired_at,
            evicting=t.evicting,
            reports=t.reports,
            pressure=t.pressure,
            published=t.published,
        )
        return Evaluation(
            now,
            self.policy.hash,
            self.generation,
            tuple(t.intents),
            new_state,
            tuple(t.fired),
            tuple(t.skipped),
            self._issues(snap, t.pool_plan),
            oom_priorities=oom,
        )

    def _issues(self, snap: Snapshot, pools: PoolPlan | None) -> tuple[WorkloadIssue, ...]:
        """Pods the policy cannot serve as asked (bad enhancements, cores that do not fit). They follow
        from the workloads and the pool plan alone, so the same objects give the same answer."""
        pool_errors = pools.errors if pools is not None else {}
        cached = self._issue_memo
        if cached is not None and cached[1] is pool_errors and same_workloads(cached[0], snap.workloads):
            return cached[2]
        out = []
        for w in snap.workloads:
            c = self.classifier.classify(w)
            errors = c.errors + pool_errors.get(w.uid, ())
            if errors:
                out.append(WorkloadIssue(w.uid, w.key, c.class_name, errors))
        issues = tuple(out)
        self._issue_memo = (snap.workloads, pool_errors, issues)
        return issues

    # ---------------------------------------------------------------- rules

    def _conditions(
        self, views: FactViews, classes: Mapping[str, Any], t: Tick
    ) -> list[tuple[ScopeItems, list[bool], list[bool]]]:
        """Phase 1: every rule's conditions over its items, in one batch for the backend.

        Returns per rule its scope's items, which of them were latched, and which hold. A rule with
        nothing latched (the steady state) is one call over all its items."""
        latched_rules = {k.split("|", 1)[0] for k in t.latched}
        calls: list[Call] = []
        per_rule: list[tuple[ScopeItems, list[bool]]] = []
        for index, cr in enumerate(self.rules):
            items = views.items(cr.rule.scope)
            name = cr.rule.name
            if name not in latched_rules:
                flags = [False] * len(items.rows)
                calls.append((index, "when", items.rows, False))
            else:
                flags = [item_key(name, key) in t.latched for key in items.keys]
                for row, latched in zip(items.rows, flags, strict=True):
                    calls.append((index, "when", (row,), latched))
                    if latched and cr.clear is not None:
                        calls.append((index, "clear", (row,), False))
            per_rule.append((items, flags))
        answers = iter(self.backend.evaluate_many(views.node, classes, calls))
        out = []
        for index, (items, flags) in enumerate(per_rule):
            if not any(flags):
                held = list(islice(answers, len(flags)))
            else:
                has_clear = self.rules[index].clear is not None
                held = []
                for latched in flags:
                    h = next(answers)
                    if latched and has_clear:
                        h = not next(answers)
                    held.append(h)
            out.append((items, flags, held))
        return out

    def _run_rule(
        self,
        cr: CompiledRule,
        evaluated: tuple[ScopeItems, list[bool], list[bool]],
        snap: Snapshot,
        views: FactViews,
        classes: Mapping[str, Any],
        t: Tick,
    ) -> None:
        rule = cr.rule
        items, flags, held = evaluated
        matched: list[tuple[str | None, Any, Workload | None, bool]] = []
        if rule.name in t.stateful:
            for i in compress(range(len(held)), map(operator.not_, held)):
                k = item_key(rule.name, items.keys[i])
                t.held.pop(k, None)
                t.latched.discard(k)
        for i in compress(range(len(held)), held):
            key = items.keys[i]
            since = t.held.setdefault(item_key(rule.name, key), t.now)
            if t.now - since >= rule.sustain:
                matched.append((key, items.fact(i), items.workloads[i], flags[i]))
        if not matched:
            return
        if self._publish_only(rule) and self._within_report_interval(rule.name, t):
            return  # the declared reporting cadence, not a suppression worth reporting
        cooldown = self.cooldowns[rule.name]
        if cooldown and rule.name in t.last_fired and t.now - t.last_fired[rule.name] < cooldown:
            left = cooldown - (t.now - t.last_fired[rule.name])
            t.skipped.append(Skipped(rule.name, f"cooldown: {left:g}s of {cooldown:g}s left"))
            return
        if rule.per_window is not None:
            count, window = rule.per_window
            recent = tuple(x for x in t.fired_at.get(rule.name, ()) if t.now - x < window)
            t.fired_at[rule.name] = recent
            if len(recent) >= count:
                t.skipped.append(Skipped(rule.name, f"rate limit: fired {len(recent)} times in {window:g}s"))
                return
        acted = False
        for action in rule.actions:
            handler = HANDLERS.get(action.kind)
            if handler is None:
                t.skipped.append(
                    Skipped(rule.name, f"action {action.kind!r} has no strategy in this version of qosd yet")
                )
                continue
            acted |= handler(ActionContext(self, cr, action.params, snap, views, classes, matched, t))
        for key, *_ in matched:
            t.latched.add(item_key(rule.name, key))
        if acted:
            t.fired.append(rule.name)
            t.last_fired[rule.name] = t.now
            if rule.per_window is not None:  # only rate-limited rules need their recent firings
                t.fired_at[rule.name] = (*t.fired_at.get(rule.name, ()), t.now)

    def _publish_only(self, rule: Any) -> bool:
        return bool(rule.actions) and all(a.kind == "publish" for a in rule.actions)

    def _within_report_interval(self, name: str, t: Tick) -> bool:
        interval = self.policy.reclaim.report_interval
        return bool(interval) and name in t.last_fired and t.now - t.last_fired[name] < float(interval or 0)


def record_evictions(state: EngineState, evicted: list[EvictIntent], now: float) -> EngineState:
    """State after the planner issued these evictions: they count as released until the pods are gone."""
    if not evicted:
        return state
    evicting = dict(state.evicting)
    for intent in evicted:
        resource = intent.release.resource if intent.release else "memory"
        evicting[intent.uid] = Evicting(now, intent.provenance.rule, resource, intent.credit)
    return replace(state, evicting=evicting)
