"""What the features' steps and a rule's actions see: the tick's shared state, the generation, a match.

The engine calls each feature's :class:`Step` in one declared order (before the rules, the rules,
after the rules). Steps share only :class:`Tick`, the working state several features read or write in
one tick; the rule machinery's own timers live with it (``engine.features.rules.step``). Action handlers
(``engine.evaluate.handlers``) are small functions of an :class:`ActionContext`, which carries what
they need of the compiled generation (:class:`Generation`) and never the engine itself, so a feature
cannot reach another's step or the engine's caches.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from engine.config.policy import Policy
from engine.evaluate.classify import Classifier
from engine.evaluate.factview import FactViews, MembersIndex
from engine.evaluate.state import NO_PRESSURE, Evicting, PressureState, item_key
from engine.features.class_knobs.current import knob_key, read_current
from engine.features.cpu_burst.limiter import Bucket
from engine.features.eviction.strategy import Round
from engine.features.pools.strategy import PoolPlan
from engine.features.reclaim.priority import HighPriority
from engine.features.reclaim.report import ReportHistory
from engine.features.reclaim.strategy import NOTHING_PUBLISHED, Published
from engine.features.rules.compiler import CompiledRule, observe
from engine.model.facts import Snapshot, Workload
from engine.model.intents import CgroupIntent, Intent, Provenance

if TYPE_CHECKING:
    from engine.features.class_knobs.step import PodOomPriority
    from engine.features.memory_qos.reconcile import MemoryQosAsk
    from engine.features.resctrl.step import ResctrlAsk
    from engine.features.specs import ActionSpec

S = TypeVar("S")
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
    """What the steps of one evaluation share: the intents and notes they produce, and the working
    state more than one feature reads (evictions in flight, pressure, reports, the pool plan, the
    asks that rules leave for the after-rules steps)."""

    now: float
    evicting: dict[str, Evicting]
    reports: dict[str, ReportHistory] = field(default_factory=dict)
    intents: list[Intent] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    round: Round = field(default_factory=Round)
    pool_plan: PoolPlan | None = None  # this tick's CPU pools (None when the policy has none)
    resctrl: list[ResctrlAsk] = field(default_factory=list)  # setResctrl actions, planned after rules
    memory_qos: list[MemoryQosAsk] = field(default_factory=list)  # setCgroup memoryQos, after rules
    pressure: PressureState = NO_PRESSURE  # engine-computed trigger state, stepped this tick
    pressure_inputs: dict[str, Mapping[str, Any]] = field(default_factory=dict)  # "numa:<id>"/"node" -> terms
    published: Published = NOTHING_PUBLISHED  # the node update gate's memory, stepped after the rules
    oom_priorities: tuple[PodOomPriority, ...] = ()  # each active pod's OOM priority (class knobs)
    burst: dict[str, Bucket] = field(default_factory=dict)  # container -> CFS quota burst token bucket
    last_values: Mapping[str, str] = field(default_factory=dict)  # knob values of the state (current.py)
    knob_values: dict[str, str] = field(default_factory=dict)  # this tick's, of knobs that read current

    def current(self, snap: Snapshot, path: str, file: str) -> float | None:
        """``file``'s current value for a knob that reads it (engine/features/class_knobs/current.py)."""
        return read_current(snap, self.last_values, path, file)

    def remember(self, path: str, file: str, text: str) -> None:
        """Keep the text a knob that reads ``current`` computed, for the next tick's fallback."""
        self.knob_values[knob_key(path, file)] = text

    def add_unless_set(self, produced: Sequence[CgroupIntent], files: AbstractSet[str]) -> None:
        """Append ``produced`` (cgroup intents of the files ``files``) except where an intent already
        holds the same file of the same cgroup: a rule's setCgroup of that file wins over a step that
        runs after the rules. Only intents of ``files`` are looked at, and nothing is filtered when
        none of them is taken: a step's hundreds of intents a tick then cost one ``extend``."""
        taken = {(i.path, i.file) for i in self.intents if isinstance(i, CgroupIntent) and i.file in files}
        if taken:
            self.intents.extend(i for i in produced if (i.path, i.file) not in taken)
        else:
            self.intents.extend(produced)


class Step(Protocol):
    """One feature's part of the tick. The engine calls every step's ``before_rules`` in its declared
    order, then the rules, then every step's ``after_rules`` in the same order."""

    def before_rules(self, snap: Snapshot, views: FactViews, t: Tick) -> None: ...

    def after_rules(self, snap: Snapshot, views: FactViews, t: Tick) -> None: ...


@dataclass(frozen=True)
class Generation:
    """What actions may know of the compiled policy generation (the engine keeps everything else)."""

    policy: Policy
    number: int
    classifier: Classifier
    members: MembersIndex  # active pods by class, rebuilt only when the workload objects change
    reclaimed_classes: frozenset[str]
    numa_pressure_rules: frozenset[str]  # rules that read the NUMA watermark counter's facts
    system_pressure_rules: frozenset[str]  # rules that read the system memory pressure facts
    # Whether a pod counts as high priority in the batch formulas
    high_priority: HighPriority
    pool_load_rules: frozenset[str] = frozenset()  # rules that read the shared-pool load facts


@dataclass(frozen=True)
class ActionContext:
    """One action of one rule that matched in this tick."""

    env: Generation
    rule: CompiledRule
    params: Mapping[str, Any]  # the action as written; kinds with a typed spec read ``spec`` instead
    spec: ActionSpec | None
    snap: Snapshot
    views: FactViews
    classes: Mapping[str, Any]
    matched: list[Match]
    tick: Tick
    # a ``samples`` rule's counts this tick: rule|item -> (samples met, samples toward clearing)
    counts: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.rule.rule.name

    def spec_as(self, kind: type[S]) -> S:
        """This action's compiled spec, of the type its handler expects (a mismatch is a qosd bug)."""
        spec = self.spec
        if not isinstance(spec, kind):
            raise TypeError(f"rule {self.name}: expected a compiled {kind.__name__}, got {spec!r}")
        return spec

    def provenance(
        self, item: str | None, facts: Any, latched: bool, inputs: Mapping[str, Any] | None = None
    ) -> Provenance:
        """Why: the rule, the generation, its source, the conditions as observed, the computation."""
        rule = self.rule.rule
        env = self.env
        if rule.samples is not None:
            met, toward = self.counts.get(item_key(rule.name, item), (0, 0))
            fire, clear = rule.samples
            counted = {"met": met, "fire": fire, "towardClear": toward, "clear": clear}
            inputs = {"samples": counted, **(inputs or {})}
        return Provenance(
            rule=rule.name,
            policy_hash=env.policy.hash,
            generation=env.number,
            source=str(rule.origin),
            mode=rule.mode,
            item=item,
            conditions=observe(rule.when, self.views.node, self.classes, facts, latched),
            inputs=MappingProxyType(dict(inputs or {})),
        )

    def node_provenance(self, inputs: Mapping[str, Any] | None = None) -> Provenance:
        """Why a node-level action acted. It acts once per tick whatever the rule's scope, so its record
        names every item whose condition held (``items``: each NUMA node of a NUMA-scoped rule), with
        the first one's conditions as the example; one NUMA node per tick was reported before."""
        key, facts, _, latched = self.matched[0]
        items = tuple(str(k) for k, *_ in self.matched if k is not None)
        return replace(self.provenance(key, facts, latched, inputs), items=items)

    @property
    def newly_matched(self) -> bool:
        """Some item's condition holds for the first time (it was not latched): an Event is due."""
        return not all(latched for *_, latched in self.matched)

    def skip(self, reason: str) -> None:
        self.tick.skipped.append(Skipped(self.name, reason))

    def class_members(self, class_name: str) -> tuple[Workload, ...]:
        """Active pods of a class, in snapshot order (indexed once per workload set)."""
        return self.env.members(self.snap.workloads).get(class_name, ())
