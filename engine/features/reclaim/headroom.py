"""Katalyst's reclaimable headroom: how much CPU and memory reclaimed workloads may be given.

Usage-based, from what non-reclaimed containers are estimated to need (their usage with a buffer,
never below what they could burst to in the next minutes) and from what the reclaim pool actually
supplies. The functions are pure and return every intermediate term, because the engine records
them as the provenance of the published value. Smoothing and the report rules (minStep, maxStep,
reservedForReport, minReport, minIgnored) are ``engine.features.reclaim.report.report``: call it on the
value computed here.

Units: CPU in cores (float), memory in bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

GiB = 1 << 30

SHARED_CORES = "shared_cores"
DEDICATED_CORES = "dedicated_cores"
SYSTEM_CORES = "system_cores"
RECLAIMED_CORES = "reclaimed_cores"

CPU_USAGE_BUFFER_RATIO = 1.25  # usage grows back fast; load averages are already a smoothed demand
MEMORY_BUFFER_RATIO = 1.1
SYSTEM_MEMORY_BUFFER_RATIO = 1.0
CPU_FALLBACK_CORES = 4.0
MEMORY_FALLBACK_BYTES = float(8 * GiB)


@dataclass(frozen=True)
class Estimate:
    """One container's estimated need and which input set it."""

    value: float
    reference: str  # "cpu.usage" | "load1m" | "load5m" | "request" | "fallback" | "metrics" | "none"


# ------------------------------------------------------------------ CPU


def estimate_container_cpu(
    qos_level: str,
    request: float,
    usage: float | None = None,
    load1m: float | None = None,
    load5m: float | None = None,
    reclaim_enabled: bool = True,
    usage_ratio: float = CPU_USAGE_BUFFER_RATIO,
    fallback: float = CPU_FALLBACK_CORES,
) -> Estimate:
    """max(usage x 1.25, load1m, load5m) for shared/dedicated containers; other levels need nothing here.

    Missing or non-positive metrics are ignored. Without any metric (or with reclaim disabled) the
    request stands in, and a container with neither is assumed to need 4 cores: an unknown container
    must not make room for reclaimed pods. ``usage_ratio`` and ``fallback`` are Katalyst's constants
    unless a policy overrides them.
    """
    if qos_level not in (SHARED_CORES, DEDICATED_CORES):
        return Estimate(0.0, "none")
    best = Estimate(0.0, "none")
    seen = False
    if reclaim_enabled:
        for ref, value, ratio in (
            ("cpu.usage", usage, usage_ratio),
            ("load1m", load1m, 1.0),
            ("load5m", load5m, 1.0),
        ):
            if value is None or value <= 0:
                continue
            seen = True
            if value * ratio > best.value:
                best = Estimate(value * ratio, ref)
    if not seen and request > best.value:
        best = Estimate(float(request), "request")
    if best.value <= 0:
        best = Estimate(fallback, "fallback")
    return best


@dataclass(frozen=True)
class UtilOptions:
    """cpuHeadroomConfig.utilBasedConfig; max_utilization 0 turns the downward correction off."""

    target_utilization: float = 0.6
    max_utilization: float = 0.0
    max_oversold_rate: float = 1.2
    max_headroom_capacity_rate: float = 1.0


@dataclass(frozen=True)
class UtilHeadroom:
    value: float
    supply: float
    utilization: float | None  # reclaim cgroup usage / supply; None when there is no supply
    oversold: float
    last: float
    oversold_cap: float  # supply x max_oversold_rate
    capacity_cap: float | None  # max_headroom_capacity_rate x CPU capacity, when positive


def util_based_cpu_headroom(
    supply: float, cgroup_usage: float, last: float, capacity: float, options: UtilOptions = UtilOptions()
) -> UtilHeadroom:
    """Oversell the reclaim pool while reclaimed pods leave it under-used.

    Starting from the last published value, add supply x (target - utilization) while utilization is
    below target (or subtract above max_utilization), never below the supply itself, at most supply x
    max_oversold_rate and max_headroom_capacity_rate x the CPU capacity of the NUMAs concerned. No
    supply, no headroom: utilization is undefined there.
    """
    capacity_cap = options.max_headroom_capacity_rate * capacity
    cap = capacity_cap if capacity_cap > 0 else None
    if supply == 0:
        return UtilHeadroom(0.0, supply, None, 0.0, last, 0.0, cap)
    utilization = cgroup_usage / supply
    oversold = 0.0
    if options.target_utilization > utilization:
        oversold = supply * (options.target_utilization - utilization)
    elif options.max_utilization > 0 and utilization > options.max_utilization:
        oversold = supply * (options.max_utilization - utilization)
    oversold_cap = supply * options.max_oversold_rate
    value = min(max(last + oversold, supply), oversold_cap)
    if cap is not None:
        value = min(value, cap)
    return UtilHeadroom(value, supply, utilization, oversold, last, oversold_cap, cap)


# ------------------------------------------------------------------ memory


@dataclass(frozen=True)
class MemoryContainer:
    """One non-reclaimed container as the memory estimate sees it (bytes)."""

    qos_level: str
    request: float = 0.0
    rss: float | None = None
    cache: float | None = None
    shmem: float | None = None
    reclaim_enabled: bool = True
    numa_exclusive: bool = False  # dedicated_cores with numa_binding + numa_exclusive
    main: bool = True  # the pod's main container (sidecars of exclusive pods count 0)
    numa_capacity: float = 0.0  # memory of the NUMA nodes it is bound to


def estimate_container_memory(
    c: MemoryContainer,
    buffer_ratio: float = MEMORY_BUFFER_RATIO,
    system_ratio: float = SYSTEM_MEMORY_BUFFER_RATIO,
    fallback: float = MEMORY_FALLBACK_BYTES,
) -> Estimate:
    """(rss + cache + shmem) x 1.1 for shared/dedicated, rss x 1.0 for system containers.

    With reclaim disabled the request is used; a result of zero (no metric, no request) falls back to
    8 GiB. A NUMA-exclusive dedicated container without reclaim owns its whole NUMA nodes. The
    ratios and the fallback are Katalyst's constants unless a policy overrides them.
    """
    if c.qos_level == RECLAIMED_CORES:
        return Estimate(0.0, "none")
    if c.qos_level == DEDICATED_CORES and c.numa_exclusive and not c.reclaim_enabled:
        return Estimate(c.numa_capacity if c.main else 0.0, "numa_capacity")
    if c.qos_level in (SHARED_CORES, DEDICATED_CORES):
        metrics: tuple[float | None, ...] = (c.rss, c.cache, c.shmem)
        ratio = buffer_ratio
    elif c.qos_level == SYSTEM_CORES:
        metrics, ratio = (c.rss,), system_ratio
    else:
        return Estimate(0.0, "none")
    if c.reclaim_enabled:
        value = sum(v for v in metrics if v is not None and v > 0) * ratio
        reference = "metrics"
    else:
        value, reference = float(c.request), "request"
    if value <= 0:
        return Estimate(fallback, "fallback")
    return Estimate(value, reference)


@dataclass(frozen=True)
class SystemMemory:
    """Node memory figures (bytes) and usage by QoS the util buffer needs."""

    total: float
    free: float
    used: float
    scale_factor: float  # vm.watermark_scale_factor
    shared_dedicated_used: float  # rss + shmem + cache of shared and dedicated pods
    system_extra: float  # cache + shmem of system pods
    cpu_memory_ratio: float  # cores per GiB of memory capacity


@dataclass(frozen=True)
class UtilBufferOptions:
    """memoryHeadroomConfig.utilBasedConfig and the CPU/memory ratio bounds of the cache-based term."""

    free_based_ratio: float = 0.6
    static_based_capacity: float = float(20 * GiB)
    cache_based_ratio: float = 0.0
    cpu_mem_ratio_lower: float = 1.0 / 6.0
    cpu_mem_ratio_upper: float = 1.0 / 3.5


@dataclass(frozen=True)
class MemoryUtilBuffer:
    value: float
    system_buffer: float  # free x freeBasedRatio - total x 2 x scale_factor / 10000
    extra_usage: float  # estimate - shared/dedicated usage + system cache/shmem
    free_buffer: float  # max(system_buffer - extra_usage, 0)
    cache_buffer: float | None  # (total x (1 - util) - free) x cacheBasedRatio, when it applies
    static: float


def memory_util_buffer(
    requirement: float, system: SystemMemory, options: UtilBufferOptions = UtilBufferOptions()
) -> MemoryUtilBuffer:
    """Memory that may be lent on top of the estimate because the node really has it free.

    Free memory beyond twice the kernel watermark, minus what the estimate did not already count
    (its buffer over actual usage, and system pods' cache); optionally at least a share of the page
    cache on nodes with an ordinary CPU/memory ratio; plus a static amount.
    """
    system_buffer = system.free * options.free_based_ratio - system.total * 2 * system.scale_factor / 10000
    extra = requirement - system.shared_dedicated_used + system.system_extra
    free_buffer = max(system_buffer - extra, 0.0)
    buffer = free_buffer
    utilization = system.used / system.total if system.total else 0.0
    cache_buffer = None
    if (
        options.cache_based_ratio > 0
        and options.cpu_mem_ratio_lower < system.cpu_memory_ratio < options.cpu_mem_ratio_upper
        and utilization > 0
    ):
        cache_buffer = (system.total * (1 - utilization) - system.free) * options.cache_based_ratio
        buffer = max(buffer, cache_buffer)
    value = buffer + options.static_based_capacity
    return MemoryUtilBuffer(
        value, system_buffer, extra, free_buffer, cache_buffer, options.static_based_capacity
    )


RESERVED_FOR_ALLOCATE = float(5 * GiB)


@dataclass(frozen=True)
class MemoryHeadroom:
    value: float
    max_allocatable: float  # capacity - reservedForAllocate
    requirement: float
    without_buffer: float  # max(max_allocatable - requirement, 0)
    buffer: float


def memory_headroom(
    capacity: float,
    requirement: float,
    reserved_for_allocate: float = RESERVED_FOR_ALLOCATE,
    buffer: MemoryUtilBuffer | None = None,
) -> MemoryHeadroom:
    """min(max(maxAlloc - requirement, 0) + utilBuffer, maxAlloc): never more than non-reclaimed pods
    could leave, whatever the buffer says."""
    max_alloc = capacity - reserved_for_allocate
    without = max(max_alloc - requirement, 0.0)
    extra = buffer.value if buffer is not None else 0.0
    value = min(max(without + extra, 0.0), max_alloc)
    return MemoryHeadroom(value, max_alloc, requirement, without, extra)

