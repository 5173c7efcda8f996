"""The memoryGuard action's typed spec (Katalyst's MemoryGuard defaults filled in) and its checks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.config.errors import Checker
from engine.config.load import JsonPath
from engine.features.memory_qos.strategy import CRITICAL_WATERMARK_SCALE_FACTOR, MIN_CRITICAL_WATERMARK
from engine.model.units import parse_quantity

DEFAULT_RECLAIM_ROOT = "kubepods/besteffort"  # katalyst: reclaimed relative root cgroup path


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
