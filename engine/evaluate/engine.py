"""Evaluation: (compiled policy, snapshot, engine state) -> intents and the next state.

This is the one code path of the daemon, ``qosd eval``, ``qosd simulate`` and ``qosd test``. Per rule
it evaluates the compiled condition for each item of the rule's scope (the node, each NUMA node, pod
or container), applies ``for`` (sustain), ``clearWhen`` and hysteresis (latches), ``cooldown`` and
rate limits, then runs the rule's actions. Evictions of all rules in one tick share one round: a pod
is chosen at most once, and pods already being evicted count as released.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from itertools import islice
from types import MappingProxyType
from typing import Any, Protocol

from engine.config.conditions import comparisons
from engine.config.policy import Policy
from engine.config.render import RenderError
from engine.evaluate.classify import Classifier
from engine.evaluate.compiler import Call, CompiledRule, PythonBackend, compile_rules, fact_key, observe
from engine.evaluate.factview import ACTIVE_PHASES, EMPTY_ITEM, FactViews, ItemFacts, ScopeItems
from engine.evaluate.state import EngineState, Evicting, item_key
from engine.model.facts import Snapshot, Workload
from engine.model.intents import CgroupIntent, EvictIntent, Intent, NodeIntent, Provenance
from engine.model.units import parse_duration
from engine.strategies.eviction import Candidate, Round, choose
from engine.strategies.knobs import KnobFn, compile_knob
from engine.strategies.reclaim import PodUse, Reclaimable, ReportHistory, reclaimable, report

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
        durable = importlib.import_module("engine.evaluate.durable")
        backend: Backend = durable.DurableBackend(policy, rules)
        return backend
    raise ValueError(f"unknown backend {name!r}; use python or durable")


EVICTING_TTL = 600.0  # forget an eviction record after this long even if the pod lingers


@dataclass(frozen=True)
class Skipped:
    """A rule that matched but did not act, and why (cooldown, rate limit, unsupported action)."""

    rule: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"rule": self.rule, "reason": self.reason}


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "policy": {"hash": self.policy_hash, "generation": self.generation},
            "fired": list(self.fired),
            "intents": [i.to_dict() for i in self.intents],
            "skipped": [s.to_dict() for s in self.skipped],
            "workloadIssues": [w.to_dict() for w in self.workload_issues],
        }


@dataclass
class _Tick:
    """Mutable working copy of the engine state for one evaluation."""

    now: float
    held: dict[str, float]
    latched: set[str]
    last_fired: dict[str, float]
    fired_at: dict[str, tuple[float, ...]]
    evicting: dict[str, Evicting]
    reports: dict[str, ReportHistory] = field(default_factory=dict)
    intents: list[Intent] = field(default_factory=list)
    fired: list[str] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    round: Round = field(default_factory=Round)
    stateful: set[str] = field(default_factory=set)  # rules with held or latched items at tick start


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
        self._knobs: dict[str, dict[str, KnobFn]] = {}

    def evaluate(self, snap: Snapshot, state: EngineState) -> Evaluation:
        views = FactViews(snap, self.classifier, self._static)
        now = snap.time
        live = snap.by_uid
        t = _Tick(
            now=now,
            held=dict(state.held_since),
            latched=set(state.latched),
            last_fired=dict(state.last_fired),
            fired_at=dict(state.fired_at),
            reports=dict(state.reports),
            evicting={
                uid: rec
                for uid, rec in state.evicting.items()
                if uid in live and live[uid].phase in ACTIVE_PHASES and now - rec.since < EVICTING_TTL
            },
        )
        t.stateful = {k.split("|", 1)[0] for k in t.held} | {k.split("|", 1)[0] for k in t.latched}
        classes = views.classes(self.class_keys) if self.class_keys else MappingProxyType({})
        for cr, evaluated in zip(self.rules, self._conditions(views, classes, t), strict=True):
            self._run_rule(cr, evaluated, snap, views, classes, t)
        new_state = EngineState(
            held_since=MappingProxyType(t.held),
            latched=frozenset(t.latched),
            last_fired=MappingProxyType(t.last_fired),
            fired_at=t.fired_at,
            evicting=t.evicting,
            reports=t.reports,
        )
        return Evaluation(
            now,
            self.policy.hash,
            self.generation,
            tuple(t.intents),
            new_state,
            tuple(t.fired),
            tuple(t.skipped),
            self._issues(snap),
        )

    def _issues(self, snap: Snapshot) -> tuple[WorkloadIssue, ...]:
        out = []
        for w in snap.workloads:
            c = self.classifier.classify(w)
            if c.errors:
                out.append(WorkloadIssue(w.uid, w.key, c.class_name, c.errors))
        return tuple(out)

    # ---------------------------------------------------------------- rules

    def _conditions(
        self, views: FactViews, classes: Mapping[str, Any], t: _Tick
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
                flags = [False] * len(items.facts)
                calls.append((index, "when", items.facts, False))
            else:
                flags = [item_key(name, key) in t.latched for key in items.keys]
                for facts, latched in zip(items.facts, flags, strict=True):
                    calls.append((index, "when", (facts,), latched))
                    if latched and cr.clear is not None:
                        calls.append((index, "clear", (facts,), False))
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
        t: _Tick,
    ) -> None:
        rule = cr.rule
        items, flags, held = evaluated
        matched: list[tuple[str | None, Any, Workload | None, bool]] = []
        if rule.name in t.stateful:
            for i, h in enumerate(held):
                if not h:
                    k = item_key(rule.name, items.keys[i])
                    t.held.pop(k, None)
                    t.latched.discard(k)
        for i in [i for i, h in enumerate(held) if h]:
            key = items.keys[i]
            since = t.held.setdefault(item_key(rule.name, key), t.now)
            if t.now - since >= rule.sustain:
                matched.append((key, items.facts[i], items.workloads[i], flags[i]))
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
            if action.kind == "evict":
                acted |= self._evict(cr, action.params, snap, views, classes, matched, t)
            elif action.kind in ("taint", "condition", "notify"):
                acted |= self._node_action(cr, action.kind, action.params, views, classes, matched, t)
            elif action.kind == "publish":
                acted |= self._publish(cr, action.params, snap, views, classes, matched, t)
            elif action.kind == "setCgroup":
                acted |= self._set_cgroup(cr, action.params, snap, views, classes, matched, t)
            else:
                t.skipped.append(
                    Skipped(rule.name, f"action {action.kind!r} has no strategy in this version of qosd yet")
                )
        for key, *_ in matched:
            t.latched.add(item_key(rule.name, key))
        if acted:
            t.fired.append(rule.name)
            t.last_fired[rule.name] = t.now
            if rule.per_window is not None:  # only rate-limited rules need their recent firings
                t.fired_at[rule.name] = (*t.fired_at.get(rule.name, ()), t.now)

    def _publish_only(self, rule: Any) -> bool:
        return bool(rule.actions) and all(a.kind == "publish" for a in rule.actions)

    def _within_report_interval(self, name: str, t: _Tick) -> bool:
        interval = self.policy.reclaim.report_interval
        return bool(interval) and name in t.last_fired and t.now - t.last_fired[name] < float(interval or 0)

    def _provenance(
        self,
        cr: CompiledRule,
        item: str | None,
        node: Mapping[str, Any],
        classes: Mapping[str, Any],
        facts: Any,
        latched: bool,
        inputs: Mapping[str, Any],
    ) -> Provenance:
        rule = cr.rule
        return Provenance(
            rule=rule.name,
            policy_hash=self.policy.hash,
            generation=self.generation,
            source=str(rule.origin),
            mode=rule.mode,
            item=item,
            conditions=observe(rule.when, node, classes, facts, latched),
            inputs=MappingProxyType(dict(inputs)),
        )

    def _node_action(
        self,
        cr: CompiledRule,
        kind: str,
        params: Mapping[str, Any],
        views: FactViews,
        classes: Mapping[str, Any],
        matched: list[tuple[str | None, Any, Workload | None, bool]],
        t: _Tick,
    ) -> bool:
        """Taints and conditions hold while the rule is latched; an Event is sent when it first fires."""
        key, facts, _, latched = matched[0]
        if kind == "notify" and latched:
            return False
        t.intents.append(
            NodeIntent(
                kind,
                MappingProxyType(dict(params)),
                self._provenance(cr, key, views.node, classes, facts, latched, {}),
            )
        )
        return True

    def _publish(
        self,
        cr: CompiledRule,
        params: Mapping[str, Any],
        snap: Snapshot,
        views: FactViews,
        classes: Mapping[str, Any],
        matched: list[tuple[str | None, Any, Workload | None, bool]],
        t: _Tick,
    ) -> bool:
        """Publish reclaimable capacity of one resource under its extended-resource name."""
        resource = str(params["resource"])
        reclaim = self.policy.reclaim
        spec = reclaim.cpu if resource == "cpu" else reclaim.memory
        if spec is None or not spec.publish_as:
            return False
        if reclaim.enabled:
            uses = self._pod_uses(snap, views, resource)
            age = views.node.get("reclaim.metrics_age_seconds")
            result = reclaimable(resource, spec, views.node, uses, age, reclaim.degrade_after)
        else:
            result = Reclaimable(resource, None, "reclaim is disabled (spec.reclaim.enabled: false)", {})
        value = result.value
        formula = result.formula
        if value is None:
            t.reports.pop(spec.publish_as, None)  # withdrawn: smoothing starts afresh
        else:
            history = t.reports.get(spec.publish_as, ReportHistory())
            value, t.reports[spec.publish_as], steps = report(value, spec, history, t.now)
            formula = "; ".join([formula, *steps])
        key, facts, _, latched = matched[0]
        params_out = {
            "resource": spec.publish_as,
            "reclaims": resource,
            "value": value,
            "unit": "cores" if resource == "cpu" else "bytes",
            "formula": formula,
        }
        provenance = self._provenance(cr, key, views.node, classes, facts, latched, result.inputs)
        t.intents.append(NodeIntent("publish", MappingProxyType(params_out), provenance))
        return True

    def _set_cgroup(
        self,
        cr: CompiledRule,
        params: Mapping[str, Any],
        snap: Snapshot,
        views: FactViews,
        classes: Mapping[str, Any],
        matched: list[tuple[str | None, Any, Workload | None, bool]],
        t: _Tick,
    ) -> bool:
        """Desired cgroup values for a literal path, or for every pod of a class."""
        target = params["target"]
        knobs = self._knobs.get(cr.rule.name)
        if knobs is None:
            knobs = self._knobs[cr.rule.name] = {f: compile_knob(f, k) for f, k in params["values"].items()}
        key, facts, _, latched = matched[0]
        provenance = self._provenance(cr, key, views.node, classes, facts, latched, {"target": dict(target)})
        paths: list[tuple[str, Workload | None]]
        if "path" in target:
            paths = [(str(target["path"]), None)]
        elif "class" in target:
            members = [
                w
                for w in snap.workloads
                if w.phase in ACTIVE_PHASES and w.cgroup_path and views.pod(w).get("class") == target["class"]
            ]
            paths = [(w.cgroup_path, w) for w in members]
        else:
            t.skipped.append(
                Skipped(cr.rule.name, "setCgroup on a pool needs the pool strategy, not in this version")
            )
            return False
        wrote = False
        for path, workload in paths:
            for file, knob in knobs.items():
                try:
                    value = knob(workload, views.node)
                except RenderError as exc:
                    t.skipped.append(Skipped(cr.rule.name, f"{path}/{file}: {exc.message}"))
                    continue
                if value is None:
                    continue
                t.intents.append(
                    CgroupIntent(path, file, value, workload.key if workload else None, provenance)
                )
                wrote = True
        return wrote

    def _pod_uses(self, snap: Snapshot, views: FactViews, resource: str) -> list[PodUse]:
        usage_key, request_key = USE_FACTS[resource]
        out = []
        for w in snap.workloads:
            if w.phase not in ACTIVE_PHASES:
                continue
            facts = views.pod(w)
            usage = facts.get(usage_key)
            high = facts.get("class") not in self.reclaimed_classes
            out.append(PodUse(facts.get(request_key, 0.0), None if usage is None else float(usage), high))
        return out

    def _evict(
        self,
        cr: CompiledRule,
        params: Mapping[str, Any],
        snap: Snapshot,
        views: FactViews,
        classes: Mapping[str, Any],
        matched: list[tuple[str | None, Any, Workload | None, bool]],
        t: _Tick,
    ) -> bool:
        rule = cr.rule
        audit = rule.mode == "audit"
        limit_values = [v for v in (params.get("maxPerRound"), rule.per_round) if v is not None]
        has_target = bool((params.get("release") or {}).keys() & {"lowerPercent", "amount"})
        limit = min(limit_values) if limit_values else (math.inf if has_target else 1)
        # Per matched NUMA node without a release target: one victim each (Katalyst's TopN=1),
        # all of them together within maxPerRound.
        per_group = limit if has_target or rule.scope != "numa" else 1
        left = limit
        picked: set[str] = set()
        if (params.get("victims") or {}).get("numaScoped"):
            t.skipped.append(
                Skipped(
                    rule.name,
                    "note: victims.numaScoped needs pods' NUMA placement, which facts do not carry yet; "
                    "every candidate was considered",
                )
            )
        pending = {uid: rec.credit for uid, rec in t.evicting.items()}
        all_candidates: list[Candidate] | None = None
        new = 0
        groups: list[tuple[str | None, Any, list[Candidate], bool]] = []
        if rule.scope in ("pod", "container"):
            seen: dict[str, Candidate] = {}
            for _, _, w, _ in matched:
                if w is not None and w.uid not in seen:
                    seen[w.uid] = self._candidate(w, views)
            key, facts, _, latched = matched[0]
            groups.append((key, facts, list(seen.values()), latched))
        else:
            all_candidates = [self._candidate(w, views) for w in snap.workloads]
            for key, facts, _, latched in matched:
                groups.append((key, facts, all_candidates, latched))
        for key, facts, candidates, latched in groups:
            budget = min(left, per_group)
            if budget <= 0:
                break
            scope_facts: Any = (
                facts if isinstance(facts, ItemFacts) and facts is not EMPTY_ITEM else views.node
            )
            pool = [c for c in candidates if c.workload.uid not in picked]
            choices, release = choose(pool, params, scope_facts, pending, t.round, int(min(budget, 10**9)))
            left -= len(choices)
            picked.update(c.candidate.workload.uid for c in choices)
            for choice in choices:
                w = choice.candidate.workload
                inputs = {
                    "orderBy": list(params.get("orderBy") or ()),
                    "candidates": len(candidates),
                }
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
                        grace_period_seconds=params.get("gracePeriodSeconds"),
                        provenance=self._provenance(cr, key, views.node, classes, facts, latched, inputs),
                    )
                )
                if not audit:
                    t.round.chosen[w.uid] = rule.name
                new += 1
        return new > 0

    def _candidate(self, w: Workload, views: FactViews) -> Candidate:
        name = self.classifier.classify(w).class_name
        return Candidate(w, views.pod(w), self.policy.class_index.get(name) if name else None)


def record_evictions(state: EngineState, evicted: list[EvictIntent], now: float) -> EngineState:
    """State after the planner issued these evictions: they count as released until the pods are gone."""
    if not evicted:
        return state
    evicting = dict(state.evicting)
    for intent in evicted:
        resource = intent.release.resource if intent.release else "memory"
        evicting[intent.uid] = Evicting(now, intent.provenance.rule, resource, intent.credit)
    return replace(state, evicting=evicting)
