"""Evaluation: (compiled policy, snapshot, engine state) -> intents and the next state.

This is the one code path of the daemon, ``qosd eval``, ``qosd simulate`` and ``qosd test``. It calls
the features' steps in one declared order (:data:`Engine.steps`): every step's ``before_rules``, then
the rules (``engine.features.rules.step``), then every step's ``after_rules``. Evictions of all rules
in one tick share one round: a pod is chosen at most once, and pods already being evicted count as
released. A feature is added by adding its folder and one entry in that order.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from engine.config.policy import Policy
from engine.evaluate.classify import Classifier
from engine.evaluate.context import Generation, Skipped, Step, Tick
from engine.evaluate.factview import ACTIVE_PHASES, FactViews, MembersIndex, same_workloads
from engine.evaluate.state import EngineState, Evicting
from engine.features.class_knobs.current import carry_over
from engine.features.class_knobs.step import ClassKnobStep, PodOomPriority
from engine.features.cpu_burst.step import CfsQuotaBurstStep
from engine.features.eviction.soft_round import SoftRoundStep
from engine.features.eviction.spec import EvictSpec
from engine.features.eviction.step import PressureStep
from engine.features.pools.step import PoolStep
from engine.features.pools.strategy import PoolPlan
from engine.features.reclaim.gate import PublishGateStep
from engine.features.reclaim.priority import HighPriority
from engine.features.resctrl.step import ResctrlStep
from engine.features.rules.compiler import CompiledRule
from engine.features.rules.step import Backend, RuleStep, RuleTimers
from engine.model.facts import Snapshot, Workload
from engine.model.intents import EvictIntent, Intent

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
        self.reclaimed_classes = frozenset(c.name for c in policy.classes if c.cpu_policy == "reclaimed")
        self._static: dict[int, Any] = {}
        self._issue_memo: tuple[tuple[Workload, ...], Any, tuple[WorkloadIssue, ...]] | None = None
        self._memo: dict[Any, Any] = {}  # cross-tick results actions reuse while workloads are unchanged
        self.pool_step = PoolStep(policy, self.classifier, generation)
        self.pressure_step = PressureStep(policy, self.classifier)
        self.resctrl_step = ResctrlStep(policy, self.classifier, generation)
        self.class_knob_step = ClassKnobStep(policy, self.classifier, generation)
        self.burst_step = CfsQuotaBurstStep(policy, policy.cfs_quota_burst, self.classifier, generation)
        self.members = MembersIndex(self.classifier)
        env = Generation(
            policy=policy,
            number=generation,
            classifier=self.classifier,
            members=self.members,
            reclaimed_classes=self.reclaimed_classes,
            numa_pressure_rules=self.pressure_step.numa_rules,
            system_pressure_rules=self.pressure_step.system_rules,
            pool_load_rules=self.pressure_step.pool_load_rules,
            high_priority=HighPriority(policy, self.classifier, self.reclaimed_classes),
        )
        self.rule_step = RuleStep(policy, env, backend)
        # The one declared order. Before the rules: the pool plan, then the pressure counters (their
        # facts are what the memory pressure rules test). After the rules: the pools' cpusets and the
        # publish gate, the class knobs (a rule's setCgroup of the same file wins over both), the CFS
        # quota burst of the classes that burst, and the resctrl groups of the whole tick planned
        # against the CLOSIDs at once; the soft eviction candidates of every rule narrowed to one.
        self.steps: tuple[Step, ...] = (
            self.pool_step,
            self.pressure_step,
            SoftRoundStep(policy.eviction, policy.class_index, _has_soft_rules(policy)),
            PublishGateStep(policy.reclaim.update),
            self.class_knob_step,
            self.burst_step,
            self.resctrl_step,
        )

    @property
    def rules(self) -> tuple[CompiledRule, ...]:
        return self.rule_step.rules

    @property
    def backend(self) -> Backend:
        return self.rule_step.backend

    @property
    def cooldowns(self) -> dict[str, float]:
        return self.rule_step.cooldowns

    def evaluate(self, snap: Snapshot, state: EngineState) -> Evaluation:
        views = FactViews(snap, self.classifier, self._static, self._memo)
        now = snap.time
        live = snap.by_uid if state.evicting else {}
        t = Tick(
            now=now,
            reports=dict(state.reports),
            pressure=state.pressure,
            published=state.published,
            burst=dict(state.burst),
            last_values=state.knob_values,
            evicting={
                uid: rec
                for uid, rec in state.evicting.items()
                if uid in live and live[uid].phase in ACTIVE_PHASES and now - rec.since < EVICTING_TTL
            },
        )
        timers = RuleTimers.of(state)
        for step in self.steps:
            step.before_rules(snap, views, t)
        self.rule_step.run(snap, views, t, timers)
        for step in self.steps:
            step.after_rules(snap, views, t)
        new_state = EngineState(
            held_since=MappingProxyType(timers.held),
            latched=frozenset(timers.latched),
            last_fired=MappingProxyType(timers.last_fired),
            fired_at=timers.fired_at,
            evicting=t.evicting,
            reports=t.reports,
            pressure=t.pressure,
            published=t.published,
            burst=t.burst,
            knob_values=carry_over(state.knob_values, t.knob_values, snap),
            samples=timers.samples,
        )
        return Evaluation(
            now,
            self.policy.hash,
            self.generation,
            tuple(t.intents),
            new_state,
            tuple(timers.fired),
            tuple(t.skipped),
            self._issues(snap, t.pool_plan),
            oom_priorities=t.oom_priorities,
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


def _has_soft_rules(policy: Policy) -> bool:
    return any(isinstance(a.spec, EvictSpec) and a.spec.soft for r in policy.rules for a in r.actions)


def record_evictions(state: EngineState, evicted: list[EvictIntent], now: float) -> EngineState:
    """State after the planner issued these evictions: they count as released until the pods are gone."""
    if not evicted:
        return state
    evicting = dict(state.evicting)
    for intent in evicted:
        resource = intent.release.resource if intent.release else "memory"
        evicting[intent.uid] = Evicting(now, intent.provenance.rule, resource, intent.credit)
    return replace(state, evicting=evicting)
