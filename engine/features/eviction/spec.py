"""The evict action's typed spec, compiled once per generation, and its semantic checks.

The schema checks the shape of ``then: {evict: ...}``; :func:`check` checks what the schema cannot
say (class references, a protected victim class, a release target at or above the trigger threshold,
trigger combinations), and :func:`compile_spec` turns the mapping into an :class:`EvictSpec` with every
default filled in, so the tick reads typed fields and never a YAML key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

from engine.config.errors import Checker
from engine.config.load import JsonPath
from engine.features.eviction.allocatable_spec import RequestOverAllocatable, config_error
from engine.features.eviction.pressure import (
    DEFAULT_RSS_OVERUSE_THRESHOLD,
    RECLAIMED_MILLICPU,
    satisfaction_config_error,
)
from engine.features.rules.conditions import Condition, comparisons, scope_of
from engine.model.units import parse_duration, parse_quantity

DEFAULT_ORDER = ("class", "priority", "-memory.usage")
DEFAULT_PHASES = ("Running", "Pending")
DEFAULT_OVERCOMMIT_THRESHOLD = 5.0  # Katalyst's reclaimed overcommit ratio
DEFAULT_TOLERANCE_RATE = 5.0
DEFAULT_TOLERANCE_DURATION = 300.0
DEFAULT_BATCH_CPU = "kubernetes.io/batch-cpu"
DEFAULT_KILLER = "evictionAPI"  # Katalyst's default pod-killer, eviction-api-killer


@dataclass(frozen=True)
class Victims:
    """Who may be evicted (``victims``). ``numa_scoped`` with ``min_numa_usage_ratio`` keeps, on a
    per-NUMA rule, the pods using at least that share of the matched NUMA node's memory."""

    classes: tuple[str, ...] = ()
    exclude_classes: tuple[str, ...] = ()
    phases: tuple[str, ...] = DEFAULT_PHASES
    max_priority: int | None = None
    require_label: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    numa_scoped: bool = False
    min_numa_usage_ratio: float | None = None

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> Victims:
        return cls(
            classes=tuple(raw.get("classes") or ()),
            exclude_classes=tuple(raw.get("excludeClasses") or ()),
            phases=tuple(raw.get("phases") or DEFAULT_PHASES),
            max_priority=raw.get("maxPriority"),
            require_label=MappingProxyType(
                {str(k): str(v) for k, v in (raw.get("requireLabel") or {}).items()}
            ),
            numa_scoped=bool(raw.get("numaScoped")),
            min_numa_usage_ratio=raw.get("minNumaUsageRatio"),
        )


@dataclass(frozen=True)
class ReleaseSpec:
    """How much to release (``release``): down to ``lower_percent`` of the scope, or ``amount``."""

    resource: str = "memory"
    lower_percent: float | None = None
    amount: float | None = None
    amount_text: str = ""  # as written, for the formula in provenance
    target: str = "usage"  # what a victim's eviction is credited with: its usage or its request

    @property
    def has_target(self) -> bool:
        return self.lower_percent is not None or self.amount is not None

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> ReleaseSpec:
        amount = raw.get("amount")
        return cls(
            resource=str(raw.get("resource", "memory")),
            lower_percent=raw.get("lowerPercent"),
            amount=parse_quantity(amount) if amount is not None else None,
            amount_text=str(amount) if amount is not None else "",
            target=str(raw.get("target", "usage")),
        )


@dataclass(frozen=True)
class RssOveruse:
    """Katalyst's RSS overuse: a pod over ``threshold`` x its memory request (or its own threshold)."""

    threshold: float = DEFAULT_RSS_OVERUSE_THRESHOLD
    kind: ClassVar[str] = "rssOveruse"


@dataclass(frozen=True)
class SuppressionTolerance:
    """Katalyst's suppression tolerance: per-pod timers while the reclaim pool's rate is over."""

    max_rate: float = DEFAULT_TOLERANCE_RATE
    min_duration: float = DEFAULT_TOLERANCE_DURATION
    request_resource: str = RECLAIMED_MILLICPU
    kind: ClassVar[str] = "suppressionTolerance"


@dataclass(frozen=True)
class ReclaimedOvercommit:
    """Katalyst's reclaimed-resource overcommit over the published allocatable, per resource."""

    thresholds: Mapping[str, float] = field(
        default_factory=lambda: MappingProxyType(
            {"cpu": DEFAULT_OVERCOMMIT_THRESHOLD, "memory": DEFAULT_OVERCOMMIT_THRESHOLD}
        )
    )
    skip_zero: frozenset[str] = frozenset()
    kind: ClassVar[str] = "reclaimedOvercommit"


@dataclass(frozen=True)
class BeSatisfaction:
    """Koordinator's BECPUEvict: the BE class's CPU satisfaction between two percents."""

    lower_percent: int
    upper_percent: int
    usage_threshold_percent: int | None = None
    window: float = 0.0  # at least one collect interval (``effective_window``)
    collect_interval: float = 1.0
    limit: str = "realLimit"  # or "allocatable"
    request_resource: str = DEFAULT_BATCH_CPU
    kind: ClassVar[str] = "beSatisfaction"

    @property
    def effective_window(self) -> float:
        return max(self.window, self.collect_interval)


Trigger = RssOveruse | SuppressionTolerance | ReclaimedOvercommit | BeSatisfaction | RequestOverAllocatable


def trigger_of(raw: Mapping[str, Any]) -> Trigger | None:
    """The one trigger of ``evict.trigger`` (the schema allows exactly one), defaults filled in."""
    if not raw:
        return None
    kind, cfg = next(iter(raw.items()))
    cfg = cfg or {}
    if kind == "rssOveruse":
        return RssOveruse(float(cfg.get("threshold", DEFAULT_RSS_OVERUSE_THRESHOLD)))
    if kind == "suppressionTolerance":
        return SuppressionTolerance(
            max_rate=float(cfg.get("maxRate", DEFAULT_TOLERANCE_RATE)),
            min_duration=_duration(cfg, "minDuration", DEFAULT_TOLERANCE_DURATION),
            request_resource=str(cfg.get("requestResource", RECLAIMED_MILLICPU)),
        )
    if kind == "reclaimedOvercommit":
        given = cfg.get("thresholds") or {}
        return ReclaimedOvercommit(
            thresholds=MappingProxyType(
                {r: float(given.get(r, DEFAULT_OVERCOMMIT_THRESHOLD)) for r in ("cpu", "memory")}
            ),
            skip_zero=frozenset(cfg.get("skipZero") or ()),
        )
    if kind == "beSatisfaction":
        usage = cfg.get("usageThresholdPercent")
        return BeSatisfaction(
            lower_percent=int(cfg["lowerPercent"]),
            upper_percent=int(cfg["upperPercent"]),
            usage_threshold_percent=int(usage) if usage is not None else None,
            window=_duration(cfg, "window", 0.0),
            collect_interval=_duration(cfg, "collectInterval", 1.0),
            limit=str(cfg.get("limit", "realLimit")),
            request_resource=str(cfg.get("requestResource", DEFAULT_BATCH_CPU)),
        )
    if kind == "requestOverAllocatable":
        return RequestOverAllocatable(
            resource=str(cfg["resource"]),
            threshold_percent=int(cfg["thresholdPercent"]),
            lower_percent=int(cfg["lowerPercent"]),
        )
    raise ValueError(f"unknown evict trigger {kind!r}")


def _duration(cfg: Mapping[str, Any], key: str, default: float) -> float:
    return parse_duration(str(cfg[key])) if key in cfg else default


@dataclass(frozen=True)
class EvictSpec:
    """``then: {evict: ...}``, compiled. ``killer`` travels on each intent and operation to the
    Kubernetes adapter, which POSTs the Eviction subresource or DELETEs the pod accordingly."""

    trigger: Trigger | None = None
    victims: Victims = field(default_factory=Victims)
    order_by: tuple[str, ...] = ()  # empty: DEFAULT_ORDER
    release: ReleaseSpec = field(default_factory=ReleaseSpec)
    cooldown: float | None = None
    max_per_round: int | None = None
    grace_period_seconds: int | None = None
    killer: str = DEFAULT_KILLER

    @property
    def ranking(self) -> tuple[str, ...]:
        return self.order_by or DEFAULT_ORDER


def compile_spec(raw: Mapping[str, Any]) -> EvictSpec:
    """The typed spec of a schema-valid evict mapping (``check`` has reported what is not sound)."""
    return EvictSpec(
        trigger=trigger_of(raw.get("trigger") or {}),
        victims=Victims.of(raw.get("victims") or {}),
        order_by=tuple(raw.get("orderBy") or ()),
        release=ReleaseSpec.of(raw.get("release") or {}),
        cooldown=parse_duration(str(raw["cooldown"])) if "cooldown" in raw else None,
        max_per_round=raw.get("maxPerRound"),
        grace_period_seconds=raw.get("gracePeriodSeconds"),
        killer=str(raw.get("killer", DEFAULT_KILLER)),
    )


def check(c: Checker, p: JsonPath, params: Mapping[str, Any], when: Condition | None) -> None:
    """Semantic checks of one evict action at ``p`` (its JSON path), reported located through ``c``."""
    _check_trigger(c, p, params, when)
    victims = params.get("victims") or {}
    for field_name in ("classes", "excludeClasses"):
        for j, name in enumerate(victims.get(field_name) or []):
            c.ref((*p, "victims", field_name, j), name, c.classes, "class")
    if victims.get("numaScoped") and scope_of(when) != "numa":
        c.add(
            (*p, "victims", "numaScoped"),
            "victims.numaScoped keeps the pods using the NUMA node the rule matched, but this rule "
            "is not evaluated per NUMA node, so there is no matched NUMA node",
            "test numa.* facts in the rule's `when` (e.g. numa.memory.watermark_pressure), or remove "
            "numaScoped",
        )
    if "minNumaUsageRatio" in victims and not victims.get("numaScoped"):
        c.add(
            (*p, "victims", "minNumaUsageRatio"),
            "victims.minNumaUsageRatio has no effect without victims.numaScoped: true",
            "add numaScoped: true (with a `when` on numa.* facts), or remove minNumaUsageRatio",
        )
    for j, name in enumerate(victims.get("classes") or []):
        cls = c.classes.get(name)
        if cls is not None and cls.get("protected"):
            c.add(
                (*p, "victims", "classes", j),
                f"class {name!r} is protected and can never be an eviction victim",
                "remove it from victims.classes, or set protected: false on the class",
            )
    lower = (params.get("release") or {}).get("lowerPercent")
    if lower is not None:
        triggers = [
            cmp
            for cmp in comparisons(when)
            if cmp.fact.endswith("usage_percent") and cmp.op in ("gte", "gt") and cmp.value <= lower
        ]
        for cmp in triggers:
            c.add(
                (*p, "release", "lowerPercent"),
                f"release.lowerPercent {lower} is not below the trigger threshold "
                f"{cmp.fact} {cmp.op} {cmp.value}",
                "eviction releases down to lowerPercent; at or above the threshold it would release "
                f"nothing (Koordinator uses threshold - 2, e.g. {cmp.value - 2})",
            )


def _check_trigger(c: Checker, p: JsonPath, params: Mapping[str, Any], when: Condition | None) -> None:
    """Semantic checks of evict.trigger that the schema cannot express."""
    trigger = params.get("trigger") or {}
    if "suppressionTolerance" in trigger and when is not None:
        c.add(
            (*p, "trigger", "suppressionTolerance"),
            "trigger suppressionTolerance keeps per-pod timers every tick; a `when` would pause them "
            "while it does not hold, and stale timers would evict at once when it holds again",
            "remove the rule's `when`: the trigger itself decides (Katalyst runs the check every round)",
        )
    own_order = ("suppressionTolerance", "reclaimedOvercommit", RequestOverAllocatable.kind)
    if any(k in trigger for k in own_order) and "orderBy" in params:
        kind = next(iter(trigger))
        c.add(
            (*p, "orderBy"),
            f"trigger {kind} evicts in its anchor's own order, so orderBy would be ignored",
            "remove orderBy from this evict action",
        )
    alloc = trigger.get("requestOverAllocatable")
    if isinstance(alloc, dict):
        max_priority = (params.get("victims") or {}).get("maxPriority")
        error = config_error(alloc.get("thresholdPercent"), alloc.get("lowerPercent"), max_priority)
        if error:
            c.add(
                (*p, "trigger", RequestOverAllocatable.kind),
                error,
                "Koordinator skips MemoryAllocatableEvict / CPUAllocatableEvict with such a config",
            )
        release = (params.get("release") or {}).get("resource", "memory")
        if release != alloc.get("resource"):
            c.add(
                (*p, "release", "resource"),
                f"release.resource {release!r} is not the trigger's resource {alloc.get('resource')!r}: "
                "the trigger's target is an amount of that resource's requests",
                f"set release: {{resource: {alloc.get('resource')}}}",
            )
    sat = trigger.get("beSatisfaction")
    if isinstance(sat, dict):
        error = satisfaction_config_error(sat.get("lowerPercent"), sat.get("upperPercent"))
        if error:
            c.add((*p, "trigger", "beSatisfaction"), error, "Koordinator skips BECPUEvict with such a config")
        if not (params.get("victims") or {}).get("classes"):
            c.add(
                (*p, "victims", "classes"),
                "trigger beSatisfaction needs victims.classes: the class whose CPU satisfaction it measures",
                "e.g. victims: {classes: [BE]}",
            )
