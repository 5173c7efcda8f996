"""``spec.cfsQuotaBurst``: Koordinator's CFS quota burst (NodeSLO cpuBurstStrategy with policy
cfsQuotaBurstOnly or auto), compiled once per generation, and its checks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from engine.config.errors import Checker
from engine.model import pod_json
from engine.model.pod_json import bounded_int, json_object

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
    pod_annotation: str | None = None  # a pod's own cpuBurstStrategy, as Koordinator's JSON

    def for_pod(self, annotations: Mapping[str, str]) -> tuple[CfsQuotaBurstSpec, str | None]:
        """This section for one pod: its ``pod_annotation`` overlaid (Koordinator's
        genPodBurstConfig: the pod's CPUBurstConfig over the node's), and why the annotation was
        ignored, if it was."""
        return pod_json.for_pod(self, self.pod_annotation, annotations, _overlay)


# Koordinator's CPUBurstConfig keys and what they set here (cpuBurstPercent is the cpu-burst rule's).
POD_POLICIES = {"none": False, "cpuBurstOnly": False, "cfsQuotaBurstOnly": True, "auto": True}


@lru_cache(maxsize=1024)
def _overlay(spec: CfsQuotaBurstSpec, text: str) -> tuple[CfsQuotaBurstSpec, str | None]:
    doc, why = json_object(text)
    if doc is None:
        return spec, why
    changes: dict[str, Any] = {}
    policy = doc.get("policy")
    if policy is not None:
        if policy not in POD_POLICIES:
            return spec, f"policy {str(policy)[:40]!r} is not one of {', '.join(POD_POLICIES)}"
        changes["enabled"] = POD_POLICIES[policy]
    for key, field, lo, hi in (
        ("cfsQuotaBurstPercent", "max_percent", 100, 10000),
        ("cfsQuotaBurstPeriodSeconds", "period_seconds", -1, 86400),
    ):
        value, why = bounded_int(doc, key, lo, hi)
        if why:
            return spec, why
        if value is not None:
            changes[field] = float(value) if field == "max_percent" else value
    return replace(spec, **changes), None


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
        pod_annotation=str(raw["podAnnotation"]) if raw.get("podAnnotation") else None,
    )
