"""``spec.pressure``: the typed parameters of the engine-computed memory pressure facts the eviction
triggers read (NUMA watermark counter, system memory and PSI), compiled once per generation with
their checks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.config.errors import Checker
from engine.features.eviction.pool_load import PoolLoadParams


@dataclass(frozen=True)
class Pressure:
    """spec.pressure: parameters of the engine-computed memory pressure facts, Katalyst's defaults.

    The NUMA watermark counter (numa_*) steps once per ``numa_interval``; system memory pressure
    combines the free-memory watermark with workload memory PSI (psi_*). ``psi_pod_classes`` None
    means every class whose cpu policy is shared or exclusive (Katalyst: shared and dedicated cores)."""

    numa_interval: float = 5.0
    numa_reclaimed_times: int = 6
    numa_times: int = 12
    numa_fast_wait: int = 1
    watermark_scale_factor: float = 10.0
    system_free_minimum: float = 0.0
    psi_enabled: bool = True
    psi_some: int = 15
    psi_full: int = 4
    psi_duration: float = 15.0
    psi_min_pods: int = 3
    psi_min_pod_pressure: int = 1
    psi_pod_classes: tuple[str, ...] | None = None
    psi_reset_when_below: bool = False
    pool_load: PoolLoadParams = field(default_factory=PoolLoadParams)


def compile_pressure(c: Checker, raw: dict[str, Any]) -> Pressure:
    """spec.pressure -> Pressure, Katalyst's defaults for what is left out."""
    d = Pressure()
    numa = raw.get("numaWatermark") or {}
    system = raw.get("systemMemory") or {}
    psi = system.get("psi") or {}
    times = int(numa.get("timesThreshold", d.numa_times))
    wait = int(numa.get("fastEvictionWaitCycle", d.numa_fast_wait))
    if wait > times:
        c.add(
            ("pressure", "numaWatermark", "fastEvictionWaitCycle"),
            f"fastEvictionWaitCycle {wait} is above timesThreshold {times}",
            "below the min watermark the count jumps to timesThreshold - fastEvictionWaitCycle, "
            "which must not be negative (Katalyst: 12 and 1)",
        )
    classes = psi.get("podClasses")
    for j, name in enumerate(classes or []):
        c.ref(("pressure", "systemMemory", "psi", "podClasses", j), name, c.classes, "class")
    minimum = c.quantity(
        ("pressure", "systemMemory", "freeThresholdMinimum"), system.get("freeThresholdMinimum")
    )
    return Pressure(
        numa_interval=c.duration(
            ("pressure", "numaWatermark", "interval"), numa.get("interval"), d.numa_interval
        ),
        numa_reclaimed_times=int(numa.get("reclaimedTimesThreshold", d.numa_reclaimed_times)),
        numa_times=times,
        numa_fast_wait=wait,
        watermark_scale_factor=float(raw.get("watermarkScaleFactor", d.watermark_scale_factor)),
        system_free_minimum=minimum if minimum is not None else d.system_free_minimum,
        psi_enabled=bool(psi.get("enabled", d.psi_enabled)),
        psi_some=int(psi.get("someThreshold", d.psi_some)),
        psi_full=int(psi.get("fullThreshold", d.psi_full)),
        psi_duration=c.duration(
            ("pressure", "systemMemory", "psi", "duration"), psi.get("duration"), d.psi_duration
        ),
        psi_min_pods=int(psi.get("minPods", d.psi_min_pods)),
        psi_min_pod_pressure=int(psi.get("minPodPressure", d.psi_min_pod_pressure)),
        psi_pod_classes=tuple(classes) if classes is not None else None,
        psi_reset_when_below=bool(psi.get("resetWhenBelow", d.psi_reset_when_below)),
        pool_load=_pool_load(c, raw.get("poolLoad") or {}),
    )


def _pool_load(c: Checker, raw: dict[str, Any]) -> PoolLoadParams:
    """spec.pressure.poolLoad -> PoolLoadParams, Katalyst's defaults for what is left out."""
    d = PoolLoadParams()
    lower = float(raw.get("lowerBoundRatio", d.lower_ratio))
    upper = float(raw.get("upperBoundRatio", d.upper_ratio))
    if lower > upper:
        c.add(
            ("pressure", "poolLoad", "lowerBoundRatio"),
            f"lowerBoundRatio {lower:g} is above upperBoundRatio {upper:g}",
            "the soft bound (lower) must not exceed the hard bound (upper); Katalyst uses 1.0 and 1.8",
        )
    return PoolLoadParams(
        interval=c.duration(("pressure", "poolLoad", "interval"), raw.get("interval"), d.interval),
        ring_size=int(raw.get("ringSize", d.ring_size)),
        upper_ratio=upper,
        lower_ratio=lower,
        met_percentage=float(raw.get("thresholdMetPercentage", d.met_percentage)),
        advised=bool(raw.get("advisedBounds", d.advised)),
    )
