"""The rules step: every rule's conditions, timing and actions, between the before- and after-rules steps.

Per rule it evaluates the compiled condition for each item of the rule's scope (the node, each NUMA
node, pod or container), applies ``for`` (sustain) or ``samples`` (counts), ``clearWhen`` and
hysteresis (latches), ``cooldown`` and rate limits, then runs the rule's actions. The timers are this
step's own state (:class:`RuleTimers`); the other steps see only what the actions leave in the shared
``Tick``.

``for`` and ``samples`` are the two ways a condition must persist before a rule fires. ``for: 30s``
needs it to hold without a break: one false tick starts the wait again. ``samples: {fire: N, clear:
M}`` counts: the rule fires once N samples (ticks) met the condition, and a sample that does not
meet it does not reset the count; only M consecutive samples toward clearing do (the condition not
met, or ``clearWhen`` met when the rule has one), and they also end a firing. That is the counting
trigger of node agents that sample a noisy metric (a single dip below the threshold must not cost
the evidence gathered so far). The counts are engine state, so they survive a restart.
"""

from __future__ import annotations

import importlib
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import compress, islice
from types import MappingProxyType
from typing import Any, Protocol

from engine.config.policy import Policy, Rule
from engine.evaluate.context import ActionContext, Generation, Match, Skipped, Tick
from engine.evaluate.factview import FactViews, ScopeItems
from engine.evaluate.handlers import HANDLERS
from engine.evaluate.state import EngineState, item_key
from engine.features.eviction.spec import EvictSpec
from engine.features.rules.compiler import Call, CompiledRule, PythonBackend, compile_rules, fact_key
from engine.features.rules.conditions import comparisons
from engine.model.facts import Snapshot


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


@dataclass
class RuleTimers:
    """The rule machinery's working copy of its timers for one tick: sustain, latches, cooldowns and
    rate limits, and which rules fired."""

    held: dict[str, float]
    latched: set[str]
    last_fired: dict[str, float]
    fired_at: dict[str, tuple[float, ...]]
    samples: dict[str, tuple[int, int]] = field(default_factory=dict)  # rule|item -> (met, toward clear)
    stateful: set[str] = field(default_factory=set)  # rules with held or latched items at tick start
    fired: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, state: EngineState) -> RuleTimers:
        held = dict(state.held_since)
        latched = set(state.latched)
        return cls(
            held=held,
            latched=latched,
            last_fired=dict(state.last_fired),
            fired_at=dict(state.fired_at),
            samples=dict(state.samples),
            stateful={k.split("|", 1)[0] for k in held} | {k.split("|", 1)[0] for k in latched},
        )


Evaluated = tuple[ScopeItems, list[bool], list[bool], list[bool | None] | None]
"""Per rule: its scope's items, which were latched, which hold, and which met ``clearWhen`` (None:
not asked)."""


def rule_cooldown(rule: Rule) -> float:
    """A rule's cooldown, or its evict action's (Katalyst and Koordinator configure it per evictor)."""
    evict = [a.spec.cooldown for a in rule.actions if isinstance(a.spec, EvictSpec)]
    return max([rule.cooldown] + [c for c in evict if c is not None])


class RuleStep:
    """The compiled rules of one generation and the backend that evaluates their conditions."""

    def __init__(self, policy: Policy, env: Generation, backend: str):
        self.policy = policy
        self.env = env
        self.rules: tuple[CompiledRule, ...] = compile_rules(policy)
        self.backend: Backend = make_backend(backend, policy, self.rules)
        self.class_keys = frozenset(
            fact_key(c)
            for r in policy.rules
            for c in comparisons(r.when) + comparisons(r.clear_when)
            if c.spec.scope == "class"
        )
        self.cooldowns = {r.name: rule_cooldown(r) for r in policy.rules}
        self.counting = frozenset(r.name for r in policy.rules if r.samples is not None)

    def run(self, snap: Snapshot, views: FactViews, t: Tick, timers: RuleTimers) -> None:
        if timers.samples:  # counts of rules this generation no longer counts for (removed, changed)
            for k in [k for k in timers.samples if k.split("|", 1)[0] not in self.counting]:
                del timers.samples[k]
        classes = views.classes(self.class_keys) if self.class_keys else MappingProxyType({})
        for cr, evaluated in zip(self.rules, self._conditions(views, classes, timers), strict=True):
            self._run_rule(cr, evaluated, snap, views, classes, t, timers)

    def _conditions(
        self, views: FactViews, classes: Mapping[str, Any], timers: RuleTimers
    ) -> list[Evaluated]:
        """Phase 1: every rule's conditions over its items, in one batch for the backend.

        Returns per rule its scope's items, which of them were latched, which hold, and which meet
        ``clearWhen`` (None where it was not asked). A rule with nothing latched or counted (the
        steady state) is one call over all its items. ``clearWhen`` is asked for latched items and,
        for a ``samples`` rule, for items with a count: there it is a sample toward clearing."""
        latched_rules = {k.split("|", 1)[0] for k in timers.latched}
        counted_rules = {k.split("|", 1)[0] for k in timers.samples} if timers.samples else set()
        calls: list[Call] = []
        per_rule: list[tuple[ScopeItems, list[bool], tuple[list[int], list[int], list[int]] | None]] = []
        for index, cr in enumerate(self.rules):
            items = views.items(cr.rule.scope)
            name = cr.rule.name
            counted = cr.clear is not None and name in counted_rules
            if name not in latched_rules and not counted:
                flags = [False] * len(items.rows)
                calls.append((index, "when", items.rows, False))
                per_rule.append((items, flags, None))
                continue
            # At most three calls: the items not latched and the latched ones (hysteresis relaxes the
            # latter's thresholds), then clearWhen for the items that ask it.
            flags = [item_key(name, key) in timers.latched for key in items.keys]
            asks = [item_key(name, key) in timers.samples for key in items.keys] if counted else flags
            rows = items.rows
            open_ix = [i for i, f in enumerate(flags) if not f]
            latched_ix = [i for i, f in enumerate(flags) if f]
            asked = [i for i, a in enumerate(asks) if a] if cr.clear is not None else []
            groups = ((open_ix, "when", False), (latched_ix, "when", True), (asked, "clear", False))
            for group, which, latched in groups:
                if group:
                    calls.append((index, which, [rows[i] for i in group], latched))
            per_rule.append((items, flags, (open_ix, latched_ix, asked)))
        answers = iter(self.backend.evaluate_many(views.node, classes, calls))
        out: list[Evaluated] = []
        for index, (items, flags, split) in enumerate(per_rule):
            if split is None:
                out.append((items, flags, list(islice(answers, len(flags))), None))
                continue
            open_ix, latched_ix, asked = split
            held = [False] * len(flags)
            for i in open_ix:
                held[i] = next(answers)
            for i in latched_ix:
                held[i] = next(answers)
            if not asked and self.rules[index].clear is None:
                out.append((items, flags, held, None))
                continue
            cleared: list[bool | None] = [None] * len(flags)
            counting = self.rules[index].rule.samples is not None
            for i in asked:
                c = cleared[i] = next(answers)
                if not counting:
                    held[i] = not c  # a latched item holds until clearWhen
            out.append((items, flags, held, cleared))
        return out

    def _run_rule(
        self,
        cr: CompiledRule,
        evaluated: Evaluated,
        snap: Snapshot,
        views: FactViews,
        classes: Mapping[str, Any],
        t: Tick,
        timers: RuleTimers,
    ) -> None:
        rule = cr.rule
        items, flags, held, _ = evaluated
        matched: list[Match] = []
        if rule.samples is not None:
            matched = _count_samples(rule, evaluated, timers)
        else:
            if rule.name in timers.stateful:
                for i in compress(range(len(held)), map(operator.not_, held)):
                    k = item_key(rule.name, items.keys[i])
                    timers.held.pop(k, None)
                    timers.latched.discard(k)
            for i in compress(range(len(held)), held):
                key = items.keys[i]
                since = timers.held.setdefault(item_key(rule.name, key), t.now)
                if t.now - since >= rule.sustain:
                    matched.append((key, items.fact(i), items.workloads[i], flags[i]))
        if not matched:
            return
        if _publish_only(rule) and self._within_report_interval(rule.name, t.now, timers):
            return  # the declared reporting cadence, not a suppression worth reporting
        cooldown = self.cooldowns[rule.name]
        if cooldown and rule.name in timers.last_fired and t.now - timers.last_fired[rule.name] < cooldown:
            left = cooldown - (t.now - timers.last_fired[rule.name])
            t.skipped.append(Skipped(rule.name, f"cooldown: {left:g}s of {cooldown:g}s left"))
            return
        if rule.per_window is not None:
            count, window = rule.per_window
            recent = tuple(x for x in timers.fired_at.get(rule.name, ()) if t.now - x < window)
            timers.fired_at[rule.name] = recent
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
            acted |= handler(ActionContext(
                    self.env, cr, action.params, action.spec, snap, views, classes, matched, t, timers.samples
                ))
        for key, *_ in matched:
            timers.latched.add(item_key(rule.name, key))
        if acted:
            timers.fired.append(rule.name)
            timers.last_fired[rule.name] = t.now
            if rule.per_window is not None:  # only rate-limited rules need their recent firings
                timers.fired_at[rule.name] = (*timers.fired_at.get(rule.name, ()), t.now)

    def _within_report_interval(self, name: str, now: float, timers: RuleTimers) -> bool:
        interval = self.policy.reclaim.report_interval
        last = timers.last_fired.get(name)
        return bool(interval) and last is not None and now - last < float(interval or 0)


def _count_samples(rule: Rule, evaluated: Evaluated, timers: RuleTimers) -> list[Match]:
    """A ``samples`` rule's items that fire this tick, its counts stepped by one sample each.

    Per item: a sample that meets ``when`` adds one (up to ``fire``) and ends any run toward
    clearing; one that does not (or that meets ``clearWhen``, when the rule has it) adds one to the
    run toward clearing, and ``clear`` of them in a row reset the count and end the firing. With
    ``clearWhen``, a sample that meets neither changes nothing. The item fires while its count is at
    ``fire``. Counts of items no longer in the rule's scope are dropped."""
    assert rule.samples is not None
    fire, clear = rule.samples
    items, flags, held, cleared = evaluated
    name = rule.name
    counts = timers.samples
    has_clear = rule.clear_when is not None
    stale = {k for k in counts if k == name or k.startswith(name + "|")} if counts else set()
    matched: list[Match] = []
    for i, key in enumerate(items.keys):
        k = item_key(name, key)
        stale.discard(k)
        met, toward = counts.get(k, (0, 0))
        if held[i]:
            met, toward = min(met + 1, fire), 0
        elif met:
            if not has_clear or (cleared is not None and cleared[i]):
                toward += 1
            if toward >= clear:
                met = toward = 0
        if met:
            counts[k] = (met, toward)
        else:
            counts.pop(k, None)
            timers.latched.discard(k)
        if met >= fire:
            matched.append((key, items.fact(i), items.workloads[i], flags[i]))
    for k in stale:
        counts.pop(k, None)
        timers.latched.discard(k)
    return matched


def _publish_only(rule: Rule) -> bool:
    return bool(rule.actions) and all(a.kind == "publish" for a in rule.actions)
