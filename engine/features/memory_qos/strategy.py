"""Memory QoS: Koordinator's memory.min/low/high per container, pod and kube-QoS dir, and Katalyst's
memory guard for the reclaimed root.

Koordinator (koordlet qosmanager, CgroupReconcile, ``cgroup_reconcile.go``) derives protection and
throttling from requests and limits::

    memory.min  = request × minLimitPercent / 100
    memory.low  = request × lowLimitPercent / 100          0 < low < min  -> low = min
    memory.high = "max"                                    throttlingPercent == 0
                = ⌊(req + (limit − req) × thr / 100) / PAGE⌋ × PAGE     limit > 0
                  (no limit: node allocatable memory stands in for the limit)
                                                           0 < high < min -> high = min

It computes in Go ``int64`` with truncating division, and the values are written as bytes, so the
arithmetic here is integer and truncates toward zero exactly as Go does: a node that runs the
Koordinator profile gets the same files, byte for byte. A percent that is not configured (None)
means "do not write that file", as a nil pointer does in Koordinator.

Katalyst (sysadvisor memory plugin ``memory-guard``, ``memory_guard.go``) caps what reclaimed pods
may use so that the NUMA nodes keep their critical watermark free::

    crit(n)  = zone.low(n) × pagesize          (Normal zone of /proc/zoneinfo, if present;
                                                 free(n) is then zone.free(n) × pagesize too)
             = total(n) × watermark_scale_factor / 10000           otherwise
    crit(n)  = max(MinCriticalWatermark, crit(n) × CriticalWatermarkScaleFactor)
    limit(n) = reclaimed usage on n + max(free(n) − crit(n), 0)
    root     = Σ limit(n) over the NUMAs not bound to NUMA-binding reclaimed pods
    high     = 0.95 × max (cgroup v2 only), −1 (unlimited) stays −1

Katalyst computes this in float64 and truncates to int64 at the end; Python floats are IEEE
doubles, so the same order of operations gives the same bytes. The intermediate terms are returned
with the values: the engine records them as the provenance of the write.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

PAGE_SIZE = 4096
GO_MAX_INT64 = (1 << 63) - 1
"""What Koordinator writes for "no throttling" (math.MaxInt64); the kernel reads it back as "max"."""

# request × percent must stay inside int64, as Koordinator asserts ("no overflow for req < 1PiB").
_MAX_BYTES = GO_MAX_INT64 // 100

KUBE_QOS = ("Guaranteed", "Burstable", "BestEffort")


def _go_div(a: int, b: int) -> int:
    """Go's integer division: truncates toward zero (Python's // floors)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _check_bytes(what: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an integer number of bytes, got {value!r}")
    if abs(value) > _MAX_BYTES:
        raise ValueError(
            f"{what} = {value} bytes is beyond what Koordinator's int64 arithmetic handles "
            f"(|value| <= {_MAX_BYTES}); check the unit of the request/limit"
        )


def render_bytes(value: int) -> str:
    """A cgroup memory file value: Go's MaxInt64 and −1 both mean "no limit", written as "max"."""
    return "max" if value in (GO_MAX_INT64, -1) else str(value)


# ---------------------------------------------------------------- Koordinator memory QoS


@dataclass(frozen=True)
class MemoryQOSConfig:
    """The three percents of Koordinator's ``memoryQOS`` that size min/low/high (0–100 each).

    None means "not configured": the file is left alone. Koordinator's class defaults are all 0
    (min 0, low 0, throttling 0 = "max"), which protect nothing and throttle nothing."""

    min_limit_percent: int | None = None
    low_limit_percent: int | None = None
    throttling_percent: int | None = None

    def __post_init__(self) -> None:
        for name in ("min_limit_percent", "low_limit_percent", "throttling_percent"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 100:
                raise ValueError(
                    f"memory QoS {name} must be an integer percent in [0, 100], got {value!r} "
                    "(Koordinator's NodeSLO validation has the same range)"
                )


@dataclass(frozen=True)
class MemoryProtection:
    """memory.min / memory.low / memory.high for one cgroup, in bytes; None = do not write.

    ``high`` is GO_MAX_INT64 when throttling is off (rendered as "max"). ``steps`` spell out the
    arithmetic for provenance, e.g. ``memory.min = 1073741824 × 50 / 100 = 536870912``."""

    min: int | None = None
    low: int | None = None
    high: int | None = None
    steps: tuple[str, ...] = ()

    def files(self) -> dict[str, str]:
        """The cgroup v2 (and Anolis v1) file values to write, only for the values that are set."""
        out: dict[str, str] = {}
        if self.min is not None:
            out["memory.min"] = str(self.min)
        if self.low is not None:
            out["memory.low"] = str(self.low)
        if self.high is not None:
            out["memory.high"] = render_bytes(self.high)
        return out


def _min_low(request: int, cfg: MemoryQOSConfig, steps: list[str]) -> tuple[int | None, int | None]:
    mem_min = mem_low = None
    if cfg.min_limit_percent is not None:
        mem_min = _go_div(request * cfg.min_limit_percent, 100)
        steps.append(f"memory.min = {request} × {cfg.min_limit_percent} / 100 = {mem_min}")
    if cfg.low_limit_percent is not None:
        mem_low = _go_div(request * cfg.low_limit_percent, 100)
        steps.append(f"memory.low = {request} × {cfg.low_limit_percent} / 100 = {mem_low}")
    return mem_min, mem_low


def _raise_low(mem_min: int | None, mem_low: int | None, steps: list[str]) -> int | None:
    # Protection below the hard floor would be meaningless; Koordinator lifts low to min.
    if mem_min is not None and mem_low is not None and 0 < mem_low < mem_min:
        steps.append(f"memory.low {mem_low} < memory.min {mem_min}: raised to {mem_min}")
        return mem_min
    return mem_low


def pod_memory_qos(request: int, cfg: MemoryQOSConfig) -> MemoryProtection:
    """Pod-level memory.min/low from the pod's memory request (no memory.high at pod level).

    ``request`` is what Koordinator sums: Σ ``requests.memory`` of the pod for non-BE pods, Σ
    batch-memory requests (unlimited containers counted as 0) for BE pods. The caller picks which."""
    _check_bytes("pod memory request", request)
    steps: list[str] = []
    mem_min, mem_low = _min_low(request, cfg, steps)
    mem_low = _raise_low(mem_min, mem_low, steps)
    return MemoryProtection(mem_min, mem_low, None, tuple(steps))


def container_memory_qos(
    request: int | None,
    limit: int | None,
    node_allocatable: int,
    cfg: MemoryQOSConfig,
    page_size: int = PAGE_SIZE,
) -> MemoryProtection:
    """Container-level memory.min/low/high.

    An unset (None) or negative request counts as 0, as in Koordinator; a limit that is None or
    not positive means "no limit", and then the node's allocatable memory stands in for it, so a
    burstable container without a limit is still throttled before the node runs dry."""
    if page_size <= 0:
        raise ValueError(f"page size must be positive, got {page_size}")
    req = 0 if request is None or request < 0 else request
    _check_bytes("container memory request", req)
    _check_bytes("node allocatable memory", node_allocatable)
    if limit is not None:
        _check_bytes("container memory limit", limit)
    steps: list[str] = []
    mem_min, mem_low = _min_low(req, cfg, steps)
    mem_high: int | None = None
    thr = cfg.throttling_percent
    if thr is not None:
        if thr == 0:
            mem_high = GO_MAX_INT64
            steps.append("memory.high = max (throttlingPercent 0)")
        else:
            if limit is not None and limit > 0:
                bound, bound_name = limit, "limit"
            else:
                bound, bound_name = node_allocatable, "node allocatable"
            raw = req + _go_div((bound - req) * thr, 100)
            mem_high = _go_div(raw, page_size) * page_size
            steps.append(
                f"memory.high = ⌊({req} + ({bound_name} {bound} − {req}) × {thr} / 100) / {page_size}⌋"
                f" × {page_size} = {mem_high}"
            )
    mem_low = _raise_low(mem_min, mem_low, steps)
    if mem_high is not None and mem_min is not None and 0 < mem_high < mem_min:
        steps.append(f"memory.high {mem_high} < memory.min {mem_min}: raised to {mem_min}")
        mem_high = mem_min
    return MemoryProtection(mem_min, mem_low, mem_high, tuple(steps))


@dataclass(frozen=True)
class PodMemoryInput:
    """One active pod as the kube-QoS dirs see it: its kube QoS class, request and config."""

    kube_qos: str  # Guaranteed | Burstable | BestEffort
    request: int
    cfg: MemoryQOSConfig


def kube_qos_memory_qos(pods: Iterable[PodMemoryInput]) -> dict[str, MemoryProtection]:
    """memory.min/low of the three kube-QoS dirs: the sum of their pods' terms.

    The Guaranteed dir is the kubepods root, the parent of the Burstable and BestEffort dirs, so
    its protection must cover all three: it gets the sum over every pod. A dir whose pods never
    configure a percent gets None (not written), exactly as Koordinator leaves the pointer nil.
    The per-pod term is ``request × percent / 100`` without the pod-level low>=min lift (Koordinator
    sums the raw terms), so it can differ from the sum of the pod files."""
    mins: dict[str, int | None] = dict.fromkeys(KUBE_QOS)
    lows: dict[str, int | None] = dict.fromkeys(KUBE_QOS)
    for pod in pods:
        if pod.kube_qos not in KUBE_QOS:
            raise ValueError(f"kube QoS class must be one of {', '.join(KUBE_QOS)}, got {pod.kube_qos!r}")
        _check_bytes("pod memory request", pod.request)
        if pod.cfg.min_limit_percent is not None:
            mins[pod.kube_qos] = (mins[pod.kube_qos] or 0) + _go_div(
                pod.request * pod.cfg.min_limit_percent, 100
            )
        if pod.cfg.low_limit_percent is not None:
            lows[pod.kube_qos] = (lows[pod.kube_qos] or 0) + _go_div(
                pod.request * pod.cfg.low_limit_percent, 100
            )
    out: dict[str, MemoryProtection] = {}
    for qos in KUBE_QOS:
        if qos == "Guaranteed":
            mem_min = _sum_set(mins.values())
            mem_low = _sum_set(lows.values())
            steps = (
                f"memory.min = Σ over Guaranteed, Burstable, BestEffort = {mem_min}",
                f"memory.low = Σ over Guaranteed, Burstable, BestEffort = {mem_low}",
            )
        else:
            mem_min, mem_low = mins[qos], lows[qos]
            steps = (f"memory.min = Σ {qos} pods = {mem_min}", f"memory.low = Σ {qos} pods = {mem_low}")
        out[qos] = MemoryProtection(mem_min, mem_low, None, steps)
    return out


def _sum_set(values: Iterable[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


# ---------------------------------------------------------------- Katalyst memory guard

MIN_CRITICAL_WATERMARK = 4 << 30  # --memory-advisor-min-critical-watermark default 4Gi
CRITICAL_WATERMARK_SCALE_FACTOR = 1.0  # MemoryGuardConfig.criticalWatermarkScaleFactor default
MEMORY_HIGH_SCALE_FACTOR = 0.95
UNLIMITED = -1


@dataclass(frozen=True)
class ZoneInfo:
    """The Normal zone of one NUMA node in /proc/zoneinfo, in pages."""

    low_pages: int
    free_pages: int


@dataclass(frozen=True)
class NumaMemory:
    """What the memory guard reads about one NUMA node, in bytes.

    ``reclaimed_usage`` is the usage of the reclaim root cgroup on this NUMA (None: metric
    missing). ``bound_usage`` is the usage of this NUMA's own reclaim cgroup, used only when that
    cgroup exists (``bound_cgroup``), i.e. for NUMA-binding reclaimed pods."""

    numa: int
    total: float
    free: float
    reclaimed_usage: float | None
    zone: ZoneInfo | None = None
    bound_cgroup: bool = False
    bound_usage: float | None = None


@dataclass(frozen=True)
class GuardParams:
    """Knobs of the memory guard. ``watermark_scale_factor`` is vm.watermark_scale_factor; Katalyst
    requires it even when zoneinfo is available (the metric read fails the reconcile otherwise)."""

    watermark_scale_factor: float | None
    page_size: int = PAGE_SIZE
    min_critical_watermark: int = MIN_CRITICAL_WATERMARK
    critical_watermark_scale_factor: float = CRITICAL_WATERMARK_SCALE_FACTOR


@dataclass(frozen=True)
class NumaGuardTerms:
    """The intermediate terms of limit(n), kept as provenance."""

    numa: int
    cgroup: str  # "root" or "numa" (the per-NUMA reclaim cgroup)
    watermark_source: str  # "zoneinfo" or "watermark_scale_factor"
    free: float
    critical_watermark_raw: float
    critical_watermark: float
    reclaimed_usage: float
    headroom: float  # max(free − crit, 0)
    limit: float

    def to_dict(self) -> dict[str, float | int | str]:
        return {
            "numa": self.numa,
            "cgroup": self.cgroup,
            "watermarkSource": self.watermark_source,
            "free": self.free,
            "criticalWatermarkRaw": self.critical_watermark_raw,
            "criticalWatermark": self.critical_watermark,
            "reclaimedUsage": self.reclaimed_usage,
            "headroom": self.headroom,
            "limit": self.limit,
        }


@dataclass(frozen=True)
class GuardLimit:
    """The memory limit of one reclaim cgroup; ``memory_max`` −1 means unlimited."""

    memory_max: int
    numas: tuple[int, ...] = ()

    @property
    def memory_high(self) -> int:
        if self.memory_max == UNLIMITED:
            return UNLIMITED
        return int(float(self.memory_max) * MEMORY_HIGH_SCALE_FACTOR)

    def files(self, cgroup_v2: bool) -> dict[str, str]:
        """v1 has no memory.high, so Katalyst writes only the hard limit there (−1 = unlimited)."""
        if not cgroup_v2:
            return {"memory.limit_in_bytes": str(self.memory_max)}
        return {"memory.max": render_bytes(self.memory_max), "memory.high": render_bytes(self.memory_high)}


@dataclass(frozen=True)
class MemoryGuard:
    """The guard's decision. ``root`` None means "no advice this round" (a metric was missing);
    Katalyst then leaves whatever was written last, and so should the engine. ``reason`` says why."""

    root: GuardLimit | None
    per_numa: Mapping[int, GuardLimit] = field(default_factory=lambda: MappingProxyType({}))
    terms: tuple[NumaGuardTerms, ...] = ()
    reason: str = ""


def _numa_limit(n: NumaMemory, usage: float, cgroup: str, params: GuardParams, wsf: float) -> NumaGuardTerms:
    free = n.free
    crit = n.total * wsf / float(10000)
    source = "watermark_scale_factor"
    if n.zone is not None:
        free = float(n.zone.free_pages) * float(params.page_size)
        crit = float(n.zone.low_pages) * float(params.page_size)
        source = "zoneinfo"
    raw = crit
    crit *= params.critical_watermark_scale_factor
    crit = max(float(params.min_critical_watermark), crit)
    headroom = max(free - crit, 0.0)
    return NumaGuardTerms(n.numa, cgroup, source, free, raw, crit, usage, headroom, usage + headroom)


def memory_guard(
    numas: Sequence[NumaMemory],
    params: GuardParams,
    *,
    available: Collection[int] | None = None,
    numa_bound: Collection[int] = (),
    enabled: bool = True,
) -> MemoryGuard:
    """Katalyst's memory guard: the reclaim root limit and the per-NUMA reclaim cgroup limits.

    ``available`` are the NUMAs reclaimed pods may use (default: all given); ``numa_bound`` are
    those actually held by NUMA-binding reclaimed pods, which are left out of the root sum because
    their per-NUMA cgroup carries its own limit. Disabled: the root is unlimited (−1), as Katalyst
    does when ``MemoryGuardConfig.enable`` is false."""
    if not enabled:
        return MemoryGuard(GuardLimit(UNLIMITED), reason="memory guard disabled: reclaim root unlimited")
    by_id = {n.numa: n for n in numas}
    wsf = params.watermark_scale_factor
    if wsf is None:
        return MemoryGuard(None, reason="vm.watermark_scale_factor is unknown; no memory guard advice")
    avail = sorted(by_id if available is None else available)
    root_ids = [i for i in avail if i not in set(numa_bound)]
    terms: list[NumaGuardTerms] = []
    total = 0.0
    for numa in root_ids:
        n = by_id.get(numa)
        if n is None:
            return MemoryGuard(None, reason=f"NUMA {numa} has no memory facts; no memory guard advice")
        if n.reclaimed_usage is None:
            return MemoryGuard(
                None,
                reason=f"reclaimed cgroup usage on NUMA {numa} is unknown; no memory guard advice",
            )
        t = _numa_limit(n, n.reclaimed_usage, "root", params, wsf)
        terms.append(t)
        total += t.limit
    per_numa: dict[int, GuardLimit] = {}
    for n in sorted(numas, key=lambda m: m.numa):
        if not n.bound_cgroup:
            continue
        if n.bound_usage is None:
            return MemoryGuard(
                None,
                reason=f"usage of the NUMA {n.numa} reclaim cgroup is unknown; no memory guard advice",
            )
        t = _numa_limit(n, n.bound_usage, "numa", params, wsf)
        terms.append(t)
        per_numa[n.numa] = GuardLimit(int(t.limit), (n.numa,))
    return MemoryGuard(GuardLimit(int(total), tuple(root_ids)), MappingProxyType(per_numa), tuple(terms))
