"""What a rule's actions see when they run: the tick's working state and one rule's match.

Action handlers (``engine.evaluate.handlers``) are small functions of an ``ActionContext``. Keeping the
context in one place is what lets each strategy live in its own file, as koordlet's qosmanager
plugins do, while the engine stays the one place that orders rules and owns state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from engine.evaluate.factview import FactViews
from engine.evaluate.state import NO_PRESSURE, Evicting, PressureState
from engine.features.eviction.strategy import Round
from engine.features.pools.strategy import PoolPlan
from engine.features.reclaim.strategy import NOTHING_PUBLISHED, Published, ReportHistory
from engine.features.rules.compiler import CompiledRule, observe
from engine.model.facts import Snapshot, Workload
from engine.model.intents import Intent, Provenance

if TYPE_CHECKING:
    from engine.evaluate.engine import Engine
    from engine.features.class_knobs.step import MemoryQosAsk
    from engine.features.resctrl.step import ResctrlAsk

Match = tuple[str | None, Any, Workload | None, bool]  # (item key, item facts, workload, latched)


@dataclass(frozen=True)
class Skipped:
    """A rule that matched but did not act, and why (cooldown, rate limit, unsupported action)."""

    rule: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"rule": self.rule, "reason": self.reason}


@dataclass
class Tick:
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
    pool_plan: PoolPlan | None = None  # this tick's CPU pools (None when the policy has none)
    resctrl: list[ResctrlAsk] = field(default_factory=list)  # setResctrl actions, planned after rules
    memory_qos: list[MemoryQosAsk] = field(default_factory=list)  # setCgroup memoryQos, after rules
    pressure: PressureState = NO_PRESSURE  # engine-computed trigger state, stepped this tick
    pressure_inputs: dict[str, Mapping[str, Any]] = field(default_factory=dict)  # "numa:<id>"/"node" -> terms
    published: Published = NOTHING_PUBLISHED  # the node update gate's memory, stepped after the rules


@dataclass(frozen=True)
class ActionContext:
    """One action of one rule that matched in this tick."""

    engine: Engine
    rule: CompiledRule
    params: Mapping[str, Any]
    snap: Snapshot
    views: FactViews
    classes: Mapping[str, Any]
    matched: list[Match]
    tick: Tick

    @property
    def name(self) -> str:
        return self.rule.rule.name

    def provenance(
        self, item: str | None, facts: Any, latched: bool, inputs: Mapping[str, Any] | None = None
    ) -> Provenance:
        """Why: the rule, the generation, its source, the conditions as observed, the computation."""
        rule = self.rule.rule
        engine = self.engine
        return Provenance(
            rule=rule.name,
            policy_hash=engine.policy.hash,
            generation=engine.generation,
            source=str(rule.origin),
            mode=rule.mode,
            item=item,
            conditions=observe(rule.when, self.views.node, self.classes, facts, latched),
            inputs=MappingProxyType(dict(inputs or {})),
        )

    def first_provenance(self, inputs: Mapping[str, Any] | None = None) -> Provenance:
        key, facts, _, latched = self.matched[0]
        return self.provenance(key, facts, latched, inputs)

    def skip(self, reason: str) -> None:
        self.tick.skipped.append(Skipped(self.name, reason))

    def class_members(self, class_name: str) -> tuple[Workload, ...]:
        """Active pods of a class, in snapshot order (indexed once per workload set by the engine)."""
        return self.engine.members(self.snap.workloads).get(class_name, ())
