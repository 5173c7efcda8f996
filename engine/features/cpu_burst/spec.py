"""``spec.cfsQuotaBurst``: Koordinator's CFS quota burst (NodeSLO cpuBurstStrategy with policy
cfsQuotaBurstOnly or auto), compiled once per generation, and its checks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.config.errors import Checker

SECTION = "cfsQuotaBurst"


@dataclass(frozen=True)
class CfsQuotaBurstSpec:
    """Which classes burst (``enabled``; off, their quotas are held at the base), how far
    (``max_percent`` of the quota of their CPU limit), the token bucket's period (-1: no limiter),
    and how the shared CPUs are told apart: ``dedicated_classes``
    hold CPUs of their own (their requests leave the shared pool, their usage does not count in it),
    ``reclaimed_classes`` run on it without counting. ``window``: the node usage is its average over
    this many seconds when the snapshot has that window, else its last value."""

    classes: tuple[str, ...]
    enabled: bool = True
    max_percent: float = 300.0
    period_seconds: int = -1
    share_pool_threshold_percent: float = 50.0
    dedicated_classes: tuple[str, ...] = ()
    reclaimed_classes: tuple[str, ...] = ()
    window: float | None = None


def compile_section(c: Checker, raw: Mapping[str, Any]) -> CfsQuotaBurstSpec | None:
    """The section's typed spec, None when it names no class (nothing to burst or hold); class
    references are checked. Switched off (``enabled: false``), the classes' quotas are held at the
    base of their CPU limits, as Koordinator's policy none resets a burst quota every round."""
    for key in ("classes", "dedicatedClasses", "reclaimedClasses"):
        for j, name in enumerate(raw.get(key) or []):
            c.ref((SECTION, key, j), name, c.classes, "class")
    if not raw.get("classes"):
        if raw.get("enabled"):
            c.add(
                (SECTION, "classes"),
                "cfsQuotaBurst is enabled but names no class to burst",
                "e.g. classes: [LS]",
            )
        return None
    return CfsQuotaBurstSpec(
        classes=tuple(str(x) for x in raw.get("classes") or ()),
        enabled=bool(raw.get("enabled", False)),
        max_percent=float(raw.get("maxPercent", 300)),
        period_seconds=int(raw.get("periodSeconds", -1)),
        share_pool_threshold_percent=float(raw.get("sharePoolThresholdPercent", 50)),
        dedicated_classes=tuple(str(x) for x in raw.get("dedicatedClasses") or ()),
        reclaimed_classes=tuple(str(x) for x in raw.get("reclaimedClasses") or ()),
        window=c.duration((SECTION, "window"), raw.get("window")),
    )
