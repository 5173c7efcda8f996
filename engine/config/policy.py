"""The compiled, immutable policy generation that the evaluator, strategies and daemon consume.

A Policy is built once per reload and swapped atomically between ticks. Everything a tick needs is
resolved here (fact references, durations, quantities, cpusets, name lookups), so a tick never parses
YAML, renders a template or looks a name up in a list.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from engine.cgroups.weight import WeightFormula
from engine.config.errors import Location
from engine.config.load import JsonPath, json_path
from engine.features.cpu_burst.spec import CfsQuotaBurstSpec
from engine.features.eviction.pressure_spec import Pressure
from engine.features.pools.spec import Pool
from engine.features.reclaim.spec import Reclaim
from engine.features.rules.conditions import Condition
from engine.model.units import int_or_none

if TYPE_CHECKING:
    # Typing only: the features' spec modules import this one (no cycle at run time).
    from engine.features.class_knobs.spec import ClassCpu, ClassMemory
    from engine.features.memory_qos.spec import MemoryQos
    from engine.features.resctrl.spec import ClassResctrl
    from engine.features.specs import ActionSpec


def freeze(value: Any) -> Any:
    """Deep read-only copy of JSON data: mappings become MappingProxyType, lists become tuples."""
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value  # most of a spec: no ABC check for them (a reload freezes the whole spec)
    if kind is dict:
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, Mapping):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """Plain JSON data back from ``freeze`` (for output and hashing)."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class StringMatch:
    """Accepts a value when it is in ``any_of``, not in ``none_of``, and present iff ``exists``."""

    any_of: frozenset[str] | None = None
    none_of: frozenset[str] | None = None
    exists: bool | None = None

    def test(self, value: str | None) -> bool:
        if self.exists is not None and (value is not None) != self.exists:
            return False
        if self.any_of is not None and (value is None or value not in self.any_of):
            return False
        return not (self.none_of is not None and value is not None and value in self.none_of)


@dataclass(frozen=True)
class JsonKeyMatch:
    annotation: str
    key: str
    value: StringMatch


@dataclass(frozen=True)
class Matcher:
    """All present fields must hold (a class matches when any of its matchers holds)."""

    annotations: tuple[tuple[str, StringMatch], ...] = ()
    labels: tuple[tuple[str, StringMatch], ...] = ()
    json_annotations: tuple[JsonKeyMatch, ...] = ()
    kube_qos: frozenset[str] | None = None
    priority_class: StringMatch | None = None
    priority_min: int | None = None
    priority_max: int | None = None
    namespaces: StringMatch | None = None
    cgroup_path: str | None = None


@dataclass(frozen=True)
class OomPriority:
    default: int | None = None
    min: int | None = None
    max: int | None = None


@dataclass(frozen=True)
class QoSClass:
    name: str
    index: int
    matchers: tuple[Matcher, ...]
    cpu_policy: str | None
    pool: str | None
    requires: tuple[str, ...]
    protected: bool
    oom_priority: OomPriority
    eviction_priority: int | None
    cpu: ClassCpu  # typed sections, compiled once per generation by the features that own them
    memory: ClassMemory
    resctrl: ClassResctrl | None  # None: the class declares no resctrl group
    origin: Location
    # Koordinator memory QoS (minLimitPercent, lowLimitPercent, throttlingPercent, wmark*, ...), compiled;
    # None when the class declares none.
    memory_qos: MemoryQos | None = None


@dataclass(frozen=True)
class ValueSource:
    """Where an enhancement's raw value is read: a label, an annotation, or a key of a JSON annotation."""

    kind: str  # label | annotation | jsonAnnotation
    key: str
    json_key: str | None = None
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class Enhancement:
    name: str
    sources: tuple[ValueSource, ...]
    value_type: str
    equals: str
    values: tuple[str, ...]
    range: tuple[float, float] | None
    on_invalid: str
    default: Any
    applies_to: frozenset[str]
    requires: tuple[str, ...]
    conflicts_with: tuple[str, ...]
    effect: str | None
    effect_value: Any
    origin: Location


# Each enhancement effect target (``effect.set``): the ``Effects`` field it sets and the value types
# it takes (compile checks an enhancement's type or effect.value against them).
EFFECTS: Mapping[str, tuple[str, tuple[str, ...]]] = MappingProxyType(
    {
        "cpu.numaBinding": ("numa_binding", ("bool",)),
        "cpu.numaExclusive": ("numa_exclusive", ("bool",)),
        "cpu.distributeEvenlyAcrossNuma": ("distribute_evenly_across_numa", ("bool",)),
        "cpu.fullPCPUsPairing": ("full_pcpus_pairing", ("bool",)),
        "cpu.pool": ("pool", ("string",)),
        "cpu.burstPolicy": ("burst_policy", ("string",)),
        "cpu.numaIds": ("numa_ids", ("string",)),
        "cpu.numaNumber": ("numa_number", ("integer",)),
        "oomPriority": ("oom_priority", ("integer", "number")),
        "cpu.burstPercent": ("burst_percent", ("number", "integer")),
        "eviction.suppressionToleranceRate": ("suppression_tolerance_rate", ("number", "integer")),
        "eviction.rssOveruseThreshold": ("rss_overuse_threshold", ("number", "integer")),
    }
)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


@dataclass(frozen=True)
class Effects:
    """What a workload's enhancements set (``effect.set`` of each it carries), typed: the classifier
    builds it once per workload object, so tick code reads fields, never an effect by its name.
    Absent effects are None (False for flags); the feature's own default then applies."""

    numa_binding: bool = False
    numa_exclusive: bool = False
    distribute_evenly_across_numa: bool = False
    full_pcpus_pairing: bool = False
    pool: str | None = None
    burst_policy: str | None = None
    numa_ids: str | None = None
    numa_number: int | None = None
    oom_priority: int | None = None
    burst_percent: float | None = None
    suppression_tolerance_rate: float | None = None
    rss_overuse_threshold: float | None = None

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> Effects:
        """From effect target -> value (compile has checked each value's type against ``EFFECTS``)."""
        v = {EFFECTS[name][0]: value for name, value in values.items()}
        return cls(
            numa_binding=bool(v.get("numa_binding", False)),
            numa_exclusive=bool(v.get("numa_exclusive", False)),
            distribute_evenly_across_numa=bool(v.get("distribute_evenly_across_numa", False)),
            full_pcpus_pairing=bool(v.get("full_pcpus_pairing", False)),
            pool=_text(v.get("pool")),
            burst_policy=_text(v.get("burst_policy")),
            numa_ids=_text(v.get("numa_ids")),
            numa_number=int_or_none(v.get("numa_number")),
            oom_priority=None if v.get("oom_priority") is None else int(v["oom_priority"]),
            burst_percent=_number(v.get("burst_percent")),
            suppression_tolerance_rate=_number(v.get("suppression_tolerance_rate")),
            rss_overuse_threshold=_number(v.get("rss_overuse_threshold")),
        )


@dataclass(frozen=True)
class Action:
    """One action of a rule. ``spec`` is its typed spec, compiled once per generation by the
    feature that owns the kind (None for kinds whose parameters pass through as data: taint,
    condition, notify); ``params`` keeps the mapping as written, for those kinds and for output."""

    kind: str
    params: Mapping[str, Any]
    path: JsonPath
    spec: ActionSpec | None = None


@dataclass(frozen=True)
class Rule:
    name: str
    index: int
    mode: str
    description: str
    when: Condition | None
    clear_when: Condition | None
    sustain: float
    cooldown: float
    per_round: int | None
    per_window: tuple[int, float] | None
    actions: tuple[Action, ...]
    scope: str
    origin: Location
    samples: tuple[int, int] | None = None  # (fire, clear): a count trigger instead of ``for``


@dataclass(frozen=True)
class DocumentRef:
    """A document that contributed to this generation."""

    name: str
    source: str
    layer: str
    priority: int


@dataclass(frozen=True)
class Policy:
    """One immutable policy generation for one node."""

    hash: str
    node: str
    mode: str
    default_class: str | None
    classes: tuple[QoSClass, ...]
    enhancements: tuple[Enhancement, ...]
    pools: tuple[Pool, ...]
    reclaim: Reclaim
    rules: tuple[Rule, ...]
    documents: tuple[DocumentRef, ...]
    spec: Mapping[str, Any]
    origin_tree: Mapping[JsonPath, Location]
    generation: int = 0
    pressure: Pressure = field(default_factory=Pressure)
    # spec.cgroup.weightFormula: how cpu.shares become cpu.weight; None: the default formula.
    weight_formula: WeightFormula | None = None
    # spec.cfsQuotaBurst when enabled: Koordinator's CFS quota burst (engine/features/cpu_burst).
    cfs_quota_burst: CfsQuotaBurstSpec | None = None
    class_index: Mapping[str, QoSClass] = field(default_factory=lambda: EMPTY, compare=False, init=False)
    enhancement_index: Mapping[str, Enhancement] = field(
        default_factory=lambda: EMPTY, compare=False, init=False
    )
    pool_index: Mapping[str, Pool] = field(default_factory=lambda: EMPTY, compare=False, init=False)
    rule_index: Mapping[str, Rule] = field(default_factory=lambda: EMPTY, compare=False, init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "class_index", MappingProxyType({c.name: c for c in self.classes}))
        object.__setattr__(
            self, "enhancement_index", MappingProxyType({e.name: e for e in self.enhancements})
        )
        object.__setattr__(self, "pool_index", MappingProxyType({p.name: p for p in self.pools}))
        object.__setattr__(self, "rule_index", MappingProxyType({r.name: r for r in self.rules}))

    @property
    def short_hash(self) -> str:
        return self.hash[:12]

    @cached_property
    def origins(self) -> Mapping[str, Location]:
        """Where each effective value was defined, by JSON path ($.spec.rules[0].for); built on first use."""
        return MappingProxyType({json_path(("spec", *p)): loc for p, loc in self.origin_tree.items()})

    def origin(self, json_path: str) -> Location | None:
        """Which document and line defined the effective value at ``json_path`` (e.g. $.spec.rules[0].for)."""
        path = json_path
        while path:
            loc = self.origins.get(path)
            if loc is not None:
                return loc
            cut = max(path.rfind("."), path.rfind("["))
            if cut <= 0:
                return None
            path = path[:cut]
        return None

    def to_document(self) -> dict[str, Any]:
        """The effective policy as one QoSPolicy document (what `qosd render` prints)."""
        return {
            "apiVersion": "qosd.io/v1alpha1",
            "kind": "QoSPolicy",
            "metadata": {
                "name": f"effective-{self.node}",
                "annotations": {
                    "qosd.io/hash": self.hash,
                    "qosd.io/documents": ",".join(f"{d.layer}:{d.name}" for d in self.documents),
                },
            },
            "spec": thaw(self.spec),
        }
