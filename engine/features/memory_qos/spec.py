"""Memory QoS specs: a ``memoryQos`` block (a class's, or a setCgroup's), compiled once per
generation, and the memoryGuard action's spec (Katalyst's MemoryGuard defaults) with its checks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.config.errors import Checker
from engine.config.load import JsonPath
from engine.features.memory_qos.strategy import (
    CRITICAL_WATERMARK_SCALE_FACTOR,
    MIN_CRITICAL_WATERMARK,
    MemoryQOSConfig,
)
from engine.model.units import parse_quantity

DEFAULT_RECLAIM_ROOT = "kubepods/besteffort"  # katalyst: reclaimed relative root cgroup path


# memoryQos fields written as given, per pod and container (koordlet makeCgroupResources).
STATIC_MEMORY_FILES: tuple[tuple[str, str], ...] = (
    ("wmarkRatio", "memory.wmark_ratio"),
    ("wmarkScalePermill", "memory.wmark_scale_factor"),
    ("wmarkMinAdj", "memory.wmark_min_adj"),
    ("priorityEnable", "memory.use_priority_oom"),
    ("priority", "memory.priority"),
    ("oomKillGroup", "memory.oom.group"),
)


@dataclass(frozen=True)
class MemoryQos:
    """A ``memoryQos`` block, compiled: the percents, the files written as given, the resource."""

    percents: MemoryQOSConfig
    files: tuple[tuple[str, str], ...] = ()
    resource: str = "memory"

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> MemoryQos:
        def pct(key: str) -> int | None:
            value = raw.get(key)
            return None if value is None else int(value)

        return cls(
            MemoryQOSConfig(pct("minLimitPercent"), pct("lowLimitPercent"), pct("throttlingPercent")),
            tuple((file, str(int(raw[key]))) for key, file in STATIC_MEMORY_FILES if key in raw),
            str(raw.get("resource", "memory")),
        )


@dataclass(frozen=True)
class MemoryGuardSpec:
    """``then: {memoryGuard: ...}``, compiled once per generation."""

    cgroup: str = DEFAULT_RECLAIM_ROOT
    min_critical_watermark: int = MIN_CRITICAL_WATERMARK  # bytes
    critical_watermark_scale_factor: float = CRITICAL_WATERMARK_SCALE_FACTOR


def compile_spec(raw: Mapping[str, Any]) -> MemoryGuardSpec:
    return MemoryGuardSpec(
        cgroup=str(raw.get("cgroup", DEFAULT_RECLAIM_ROOT)),
        min_critical_watermark=int(parse_quantity(raw.get("minCriticalWatermark", MIN_CRITICAL_WATERMARK))),
        critical_watermark_scale_factor=float(
            raw.get("criticalWatermarkScaleFactor", CRITICAL_WATERMARK_SCALE_FACTOR)
        ),
    )


def check(c: Checker, p: JsonPath, params: Mapping[str, Any]) -> None:
    """The watermark is a quantity; the cgroup a usable path under the cgroup root."""
    c.quantity((*p, "minCriticalWatermark"), params.get("minCriticalWatermark"))
    if "cgroup" in params:
        c.cgroup_path((*p, "cgroup"), "memoryGuard cgroup", params["cgroup"])


def check_one_reclaim_root(c: Checker, guards: Iterable[tuple[JsonPath, MemoryGuardSpec]]) -> None:
    """Every memoryGuard of a policy names the same cgroup: the node collector reads one reclaim
    root's memory.numa_stat into numa.memory.reclaimed_usage_bytes (one fact per NUMA node, as
    Katalyst has one reclaim root), so a second root would be capped from the first one's usage."""
    first: tuple[JsonPath, MemoryGuardSpec] | None = None
    for path, spec in guards:
        if first is None:
            first = (path, spec)
        elif spec.cgroup != first[1].cgroup:
            c.add(
                (*path, "cgroup"),
                f"memoryGuard cgroup {spec.cgroup!r} differs from {first[1].cgroup!r} of an earlier "
                "memoryGuard; qosd collects the reclaimed usage of one reclaim root per node",
                hint="give every memoryGuard the same cgroup, or keep one memoryGuard rule",
                related=[c.loc((*first[0], "cgroup"))],
            )
