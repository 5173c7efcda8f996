"""Reclaim's typed specs and their checks: ``spec.reclaim`` (the batch resources, the headroom
policy, the update gate) and the publish action (the resource must say what to publish it as)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.config.errors import Checker, short
from engine.config.load import JsonPath
from engine.features.reclaim.headroom import UtilOptions
from engine.features.rules.conditions import WINDOW_HINT, window_problem

if TYPE_CHECKING:
    from engine.config.policy import Matcher


@dataclass(frozen=True)
class PublishSpec:
    """``then: {publish: {resource: cpu|memory}}``, compiled once per generation."""

    resource: str


def compile_spec(raw: Mapping[str, Any]) -> PublishSpec:
    return PublishSpec(str(raw["resource"]))


def check(c: Checker, p: JsonPath, params: Mapping[str, Any]) -> None:
    res = params.get("resource")
    section = (c.spec.get("reclaim") or {}).get(res)
    if not isinstance(section, dict) or not section.get("publishAs"):
        c.add(
            (*p, "resource"),
            f"publish {res!r} needs spec.reclaim.{res}.publishAs",
            "set the extended resource name to publish, e.g. kubernetes.io/batch-cpu",
        )


# ---------------------------------------------------------------- spec.reclaim


@dataclass(frozen=True)
class ReclaimHeadroom:
    """Parameters of the `headroom` reclaim policy (Katalyst's canonical headroom), Katalyst's defaults.

    ``reserved_for_allocate``, ``usage_factor`` and ``fallback`` default per resource (cpu: 4 cores,
    x1.25, 4 cores; memory: 5Gi, x1.1, 8Gi), so compile always fills them. The util_* fields are
    cpuHeadroomConfig.utilBasedConfig (cpu) and memoryHeadroomConfig.utilBasedConfig (memory); both
    are off in Katalyst."""

    reserved_for_allocate: float
    usage_factor: float
    fallback: float
    system_factor: float = 1.0  # memory: system_cores containers count rss x this
    util_based: bool = False
    target_utilization: float = 0.6  # cpu
    max_utilization: float = 0.0  # cpu; 0 = never correct downwards
    max_oversold_rate: float = 1.2  # cpu
    max_headroom_capacity_rate: float = 1.0  # cpu
    free_based_ratio: float = 0.6  # memory
    static_based_capacity: float = float(20 << 30)  # memory
    cache_based_ratio: float = 0.0  # memory
    cpu_mem_ratio_lower: float = 1.0 / 6.0  # memory: cores per GiB
    cpu_mem_ratio_upper: float = 1.0 / 3.5  # memory


@dataclass(frozen=True)
class HeldRequests:
    """Pods whose requests are held whole by the kubelet (exclusive CPUs of the static CPU manager):
    their idle requested share cannot be lent. ``cpu_manager_policy``: only while the node's
    kubelet runs this CPU manager policy (node.kubelet.cpu_manager_policy); None: always."""

    kube_qos: frozenset[str] = frozenset({"Guaranteed"})
    cpu_manager_policy: str | None = None


@dataclass(frozen=True)
class ReclaimFree:
    """The `free` reclaim policy: what a base leaves unused, times a ratio.

    ``of`` is allocatable or capacity (node usage counts as used) or reclaimPool (the reclaim pool's
    CPUs, its busy share counts as used, its cgroup's CFS quota caps the result). Reclaimed pods'
    own usage is not counted as used (``reclaimed_usage`` exclude): they run on what is published.
    ``held`` adds the idle part of held requests; ``rounding`` floors or ceils the result."""

    of: str = "allocatable"
    ratio: float = 1.0
    reclaimed_usage: str = "exclude"
    held: HeldRequests | None = None
    rounding: str = "none"
    # utilBased: oversell from the last report while reclaimed pods under-use the offer
    util_based: UtilOptions | None = None


@dataclass(frozen=True)
class ReclaimResource:
    policy: str
    threshold_percent: float | None
    max_percent: float | None
    min: float | None
    max: float | None
    reserved_for_report: float | None
    min_report: float | None
    min_ignored: float | None
    publish_as: str | None
    smoothing_window: float | None
    smoothing_agg: str
    min_step: float | None
    max_step: float | None
    # usage policy: classes whose request, not usage, counts as used (Koordinator: LSE lends no CPU).
    request_as_usage: frozenset[str] = frozenset()
    headroom: ReclaimHeadroom | None = None  # set when policy is "headroom"
    free: ReclaimFree | None = None  # set when policy is "free"


DEFAULT_MAX_INTERVAL = 300.0  # Koordinator's updateTimeThresholdSeconds


@dataclass(frozen=True)
class ReclaimUpdate:
    """spec.reclaim.update: Koordinator's node update gate. Published resources change on the Node
    only when one of them moved by more than ``diff_threshold`` of its last published value (or
    appeared or disappeared), or ``max_interval`` seconds after the last update."""

    diff_threshold: float
    max_interval: float


@dataclass(frozen=True)
class ReclaimZones:
    """spec.reclaim.zones: the batch resources also per NUMA node, Koordinator's NodeResourceTopology
    zones (``name_prefix`` + the NUMA id: node-0, node-1). ``pod_numa_annotation``: the pod
    annotation holding the scheduler's NUMA allocation (Koordinator's ResourceStatus JSON)."""

    name_prefix: str
    pod_numa_annotation: str | None


@dataclass(frozen=True)
class PriorityOverride:
    """spec.reclaim.priorityOverrides[]: pods any of ``matchers`` fits count as high priority (their
    usage and requests reduce what is lent) or not, whatever their class (Koordinator decides by
    the pod's priority class first, by its QoS class only when it has none)."""

    matchers: tuple[Matcher, ...]
    high_priority: bool


@dataclass(frozen=True)
class Reclaim:
    enabled: bool
    cpu: ReclaimResource | None
    memory: ReclaimResource | None
    degrade_after: float | None
    report_interval: float | None
    update: ReclaimUpdate | None = None
    # Koordinator's node.koordinator.sh/reservation: a node annotation whose NodeReservation JSON
    # raises nodeReserved (engine.features.reclaim.reservation); None: kubelet's reservation only.
    reservation_annotation: str | None = None
    # Host applications of these priorities count as system usage; the others leave it (they run
    # on what is lent). None: host applications stay in systemUsed as measured.
    system_used_host_app_priorities: frozenset[str] | None = None
    # The first override that fits a pod decides its priority; a pod none fits counts by class.
    priority_overrides: tuple[PriorityOverride, ...] = ()
    zones: ReclaimZones | None = None


# Katalyst's per-resource defaults of the headroom policy: reservedResourceForAllocate, the buffer
# on a container's usage (estimation_canonical.go) and the estimate of a container with no metric.
HEADROOM_DEFAULTS = {"cpu": (4.0, 1.25, 4.0), "memory": (float(5 << 30), 1.1, float(8 << 30))}
UTIL_FIELDS = {
    "cpu": ("targetUtilization", "maxUtilization", "maxOversoldRate", "maxHeadroomCapacityRate"),
    "memory": (
        "freeBasedRatio",
        "staticBasedCapacity",
        "cacheBasedRatio",
        "cpuMemRatioLower",
        "cpuMemRatioUpper",
    ),
}


def compile_headroom(c: Checker, res: str, base: JsonPath, raw: dict[str, Any]) -> ReclaimHeadroom:
    """The headroom policy's parameters with Katalyst's defaults; util fields of the other resource
    are an error, since they would be silently ignored."""
    path: JsonPath = (*base, "headroom")
    reserved, factor, fallback = HEADROOM_DEFAULTS[res]
    util = raw.get("utilBased") or {}
    other = "memory" if res == "cpu" else "cpu"
    for key in util:
        if key in UTIL_FIELDS[other]:
            c.add(
                (*path, "utilBased", key),
                f"utilBased.{key} applies to reclaim.{other}, not reclaim.{res}",
                f"reclaim.{res}.headroom.utilBased takes: enabled, {', '.join(UTIL_FIELDS[res])}",
            )
    if res == "cpu" and "systemFactor" in raw:
        c.add((*path, "systemFactor"), "systemFactor applies to reclaim.memory only (system containers' rss)")
    d = ReclaimHeadroom(reserved, factor, fallback)
    q = {k: c.quantity((*path, k), raw.get(k)) for k in ("reservedForAllocate", "fallback")}
    static = c.quantity((*path, "utilBased", "staticBasedCapacity"), util.get("staticBasedCapacity"))
    lower = float(util.get("cpuMemRatioLower", d.cpu_mem_ratio_lower))
    upper = float(util.get("cpuMemRatioUpper", d.cpu_mem_ratio_upper))
    if lower > upper:
        c.add(
            (*path, "utilBased", "cpuMemRatioLower"),
            f"cpuMemRatioLower {short(lower)} is above cpuMemRatioUpper {short(upper)}",
        )
    return ReclaimHeadroom(
        reserved_for_allocate=q["reservedForAllocate"] if q["reservedForAllocate"] is not None else reserved,
        usage_factor=float(raw.get("usageFactor", factor)),
        fallback=q["fallback"] if q["fallback"] is not None else fallback,
        system_factor=float(raw.get("systemFactor", d.system_factor)),
        util_based=bool(util.get("enabled", d.util_based)),
        target_utilization=float(util.get("targetUtilization", d.target_utilization)),
        max_utilization=float(util.get("maxUtilization", d.max_utilization)),
        max_oversold_rate=float(util.get("maxOversoldRate", d.max_oversold_rate)),
        max_headroom_capacity_rate=float(util.get("maxHeadroomCapacityRate", d.max_headroom_capacity_rate)),
        free_based_ratio=float(util.get("freeBasedRatio", d.free_based_ratio)),
        static_based_capacity=static if static is not None else d.static_based_capacity,
        cache_based_ratio=float(util.get("cacheBasedRatio", d.cache_based_ratio)),
        cpu_mem_ratio_lower=lower,
        cpu_mem_ratio_upper=upper,
    )


def compile_reclaim(
    c: Checker, raw: dict[str, Any], matcher: Callable[[dict[str, Any]], Matcher]
) -> Reclaim:
    """``matcher`` compiles a class matcher (engine.config.matchers.compile_matcher, passed in: the
    policy's types import this module) for priorityOverrides."""
    resources: dict[str, ReclaimResource | None] = {}
    for res in ("cpu", "memory"):
        r = raw.get(res)
        if not isinstance(r, dict):
            resources[res] = None
            continue
        base: JsonPath = ("reclaim", res)
        q = {
            k: c.quantity((*base, k), r.get(k))
            for k in ("min", "max", "reservedForReport", "minReport", "minIgnored")
        }
        sm = r.get("smoothing") or {}
        steps = {k: c.quantity((*base, "smoothing", k), sm.get(k)) for k in ("minStep", "maxStep")}
        if q["min"] is not None and q["max"] is not None and q["min"] > q["max"]:
            c.add((*base, "min"), f"reclaim {res} min {short(r['min'])} is above max {short(r['max'])}")
        if (
            steps["minStep"] is not None
            and steps["maxStep"] is not None
            and steps["minStep"] > steps["maxStep"]
        ):
            c.add(
                (*base, "smoothing", "minStep"),
                f"smoothing minStep {short(sm['minStep'])} is above maxStep {short(sm['maxStep'])}",
            )
        window = None
        if "window" in sm:
            window = c.duration((*base, "smoothing", "window"), sm["window"])
            # The smoothing keeps every raw value of the window, in memory and in the state file.
            too_long = window_problem(window, sm["window"], "the report") if window is not None else None
            if too_long:
                c.add((*base, "smoothing", "window"), too_long, WINDOW_HINT)
        policy = str(r.get("policy", "usage"))
        for j, name in enumerate(r.get("requestAsUsage") or ()):
            c.ref((*base, "requestAsUsage", j), name, c.classes, "class")
        if policy == "headroom" and "reclaimThresholdPercent" in r:
            c.add(
                (*base, "reclaimThresholdPercent"),
                f"reclaim {res} policy headroom takes no reclaimThresholdPercent",
                "the headroom policy keeps headroom.reservedForAllocate back instead of a percent margin",
            )
        if "headroom" in r and policy != "headroom":
            c.add(
                (*base, "headroom"),
                f"reclaim {res} has headroom parameters but policy {policy!r}",
                "set policy: headroom, or remove the headroom section",
            )
        headroom = compile_headroom(c, res, base, r.get("headroom") or {}) if policy == "headroom" else None
        free = compile_free(c, res, base, policy, r)
        resources[res] = ReclaimResource(
            policy=policy,
            threshold_percent=r.get("reclaimThresholdPercent"),
            max_percent=r.get("maxPercent"),
            min=q["min"],
            max=q["max"],
            reserved_for_report=q["reservedForReport"],
            min_report=q["minReport"],
            min_ignored=q["minIgnored"],
            publish_as=r.get("publishAs"),
            smoothing_window=window,
            smoothing_agg=str(sm.get("aggregate", "avg")),
            min_step=steps["minStep"],
            max_step=steps["maxStep"],
            request_as_usage=frozenset(r.get("requestAsUsage") or ()),
            headroom=headroom,
            free=free,
        )
    return Reclaim(
        enabled=bool(raw.get("enabled", True)),
        cpu=resources["cpu"],
        memory=resources["memory"],
        degrade_after=c.duration(("reclaim", "degradeAfter"), raw.get("degradeAfter")),
        report_interval=c.duration(("reclaim", "reportInterval"), raw.get("reportInterval")),
        update=compile_update(c, raw["update"]) if "update" in raw else None,
        reservation_annotation=raw.get("reservationAnnotation") or None,
        system_used_host_app_priorities=(
            frozenset(raw["systemUsedHostAppPriorities"]) if "systemUsedHostAppPriorities" in raw else None
        ),
        priority_overrides=tuple(
            PriorityOverride(tuple(matcher(m) for m in o["match"]), bool(o["highPriority"]))
            for o in (raw.get("priorityOverrides") or ())
        ),
        zones=compile_zones(raw["zones"]) if "zones" in raw else None,
    )


def compile_zones(raw: dict[str, Any]) -> ReclaimZones:
    """Zones are Koordinator's formulas per NUMA node: a resource under the headroom or free policy
    is published at node level only (an overlay may switch one resource to those and keep zones for
    the other)."""
    return ReclaimZones(str(raw.get("namePrefix", "node-")), raw.get("podNumaAnnotation") or None)


def compile_free(
    c: Checker, res: str, base: JsonPath, policy: str, r: Mapping[str, Any]
) -> ReclaimFree | None:
    """The free policy's section, checked where the schema cannot: it belongs to policy free, a
    reclaim pool holds CPUs only, and held requests are a node-level correction."""
    raw = r.get("free")
    if raw is not None and policy != "free":
        c.add(
            (*base, "free"),
            f"reclaim {res} has free parameters but policy {policy!r}",
            "set policy: free, or remove the free section",
        )
    if policy != "free":
        return None
    raw = raw or {}
    if "reclaimThresholdPercent" in r:
        c.add(
            (*base, "reclaimThresholdPercent"),
            f"reclaim {res} policy free takes no reclaimThresholdPercent",
            "the free policy scales what is left with free.ratio instead of a percent margin",
        )
    of = str(raw.get("of", "allocatable"))
    if of == "reclaimPool" and res != "cpu":
        c.add(
            (*base, "free", "of"),
            "free.of reclaimPool measures the reclaim pool's CPUs; reclaim.memory has no pool",
            "use of: allocatable or of: capacity for memory",
        )
    if res != "cpu" and (raw.get("utilBased") or {}).get("enabled"):
        c.add(
            (*base, "free", "utilBased"),
            "free.utilBased oversells CPU that reclaimed pods leave idle; "
            "reclaim.memory has no such correction",
            "remove utilBased from reclaim.memory",
        )
    held_raw = raw.get("heldRequests")
    if held_raw is not None and of == "reclaimPool":
        c.add(
            (*base, "free", "heldRequests"),
            "free.heldRequests corrects node usage for requests held whole; the reclaim pool holds "
            "no such pods",
            "remove heldRequests, or use of: allocatable",
        )
    held = None
    if held_raw is not None:
        qos = held_raw.get("kubeQoS", ["Guaranteed"])
        held = HeldRequests(
            frozenset([qos] if isinstance(qos, str) else qos),
            held_raw.get("cpuManagerPolicy"),
        )
    util = raw.get("utilBased") or {}
    d = UtilOptions()
    return ReclaimFree(
        of=of,
        ratio=float(raw.get("ratio", 1.0)),
        reclaimed_usage=str(raw.get("reclaimedUsage", "exclude")),
        held=held,
        rounding=str(raw.get("rounding", "none")),
        util_based=UtilOptions(
            float(util.get("targetUtilization", d.target_utilization)),
            float(util.get("maxUtilization", d.max_utilization)),
            float(util.get("maxOversoldRate", d.max_oversold_rate)),
            float(util.get("maxHeadroomCapacityRate", d.max_headroom_capacity_rate)),
        )
        if util.get("enabled")
        else None,
    )


def compile_update(c: Checker, raw: dict[str, Any]) -> ReclaimUpdate:
    """spec.reclaim.update; maxInterval defaults to Koordinator's updateTimeThresholdSeconds."""
    interval = c.duration(("reclaim", "update", "maxInterval"), raw.get("maxInterval"), DEFAULT_MAX_INTERVAL)
    return ReclaimUpdate(diff_threshold=float(raw["diffThreshold"]), max_interval=interval)
