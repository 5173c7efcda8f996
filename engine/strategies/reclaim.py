"""Reclaimed (batch) resources: what the node can lend to reclaimed workloads, per resource.

Koordinator's formulas (slo-controller noderesource, batchresource plugin), per resource:

    safetyMargin = capacity * (100 - reclaimThresholdPercent) / 100
    system       = max(nodeUsed - podsUsed, nodeReserved)      nodeReserved = capacity - allocatable
    usage        = max(capacity - safetyMargin - system - HPUsed, 0)
    request      = max(capacity - safetyMargin - nodeReserved - HPRequest, 0)
    maxUsageRequest = max(capacity - safetyMargin - system - HPMaxUsedReq, 0)

where HP pods are the pods whose class does not run on reclaimed resources (cpu.policy != reclaimed),
HPUsed counts a pod's usage (its request when it has no metric), and HPMaxUsedReq counts
max(request, usage) for pods with a metric. Then maxPercent caps the result at a percent of capacity,
min/max clamp it, reservedForReport is subtracted, a result at or below minIgnored is reported as 0
and a positive result below minReport is raised to it (Katalyst's reporting rules). Stale metrics
(older than degradeAfter) withdraw the resource, as Koordinator's degradation does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.config.policy import ReclaimResource

FACTS = {
    # resource: (node usage fact, capacity fact, allocatable fact)
    "cpu": ("cpu.usage_cores", "cpu.capacity_cores", "cpu.allocatable_cores"),
    "memory": ("memory.usage_bytes", "memory.capacity_bytes", "memory.allocatable_bytes"),
}


@dataclass(frozen=True)
class PodUse:
    request: float
    usage: float | None
    high_priority: bool


@dataclass(frozen=True)
class Reclaimable:
    resource: str
    value: float | None  # None: withdraw the published resource
    formula: str
    inputs: Mapping[str, Any]


def reclaimable(
    resource: str,
    spec: ReclaimResource,
    node: Mapping[str, Any],
    pods: Sequence[PodUse],
    metrics_age: float | None,
    degrade_after: float | None,
) -> Reclaimable:
    node_usage_key, capacity_key, allocatable_key = FACTS[resource]
    if degrade_after is not None and metrics_age is not None and metrics_age > degrade_after:
        return Reclaimable(
            resource, None, f"metrics are {metrics_age:g}s old (> degradeAfter {degrade_after:g}s)", {}
        )
    capacity = float(node.get(capacity_key) or 0.0)
    allocatable = float(node.get(allocatable_key) or capacity)
    node_used = node.get(node_usage_key)
    if not capacity or node_used is None:
        return Reclaimable(resource, None, f"node {resource} capacity or usage unknown", {})
    threshold = spec.threshold_percent if spec.threshold_percent is not None else 100.0
    margin = capacity * (100.0 - threshold) / 100.0
    reserved = max(capacity - allocatable, 0.0)
    pods_used = sum(p.usage for p in pods if p.usage is not None)
    system = max(float(node_used) - pods_used, 0.0, reserved)
    hp = [p for p in pods if p.high_priority]
    hp_used = sum(p.usage if p.usage is not None else p.request for p in hp)
    hp_request = sum(p.request for p in hp)
    hp_max = sum(max(p.request, p.usage) for p in hp if p.usage is not None)
    by = {
        "usage": max(capacity - margin - system - hp_used, 0.0),
        "request": max(capacity - margin - reserved - hp_request, 0.0),
        "maxUsageRequest": max(capacity - margin - system - hp_max, 0.0),
    }
    value = by[spec.policy]
    steps = [f"{spec.policy}: {value:.6g}"]
    if spec.max_percent is not None:
        value = min(value, capacity * spec.max_percent / 100.0)
        steps.append(f"cap {spec.max_percent:g}% of capacity -> {value:.6g}")
    if spec.max is not None:
        value = min(value, spec.max)
    if spec.min is not None:
        value = max(value, spec.min)
    inputs = {
        "capacity": capacity,
        "safetyMargin": margin,
        "system": system,
        "nodeReserved": reserved,
        "hpUsed": hp_used,
        "hpRequest": hp_request,
        "hpMaxUsedRequest": hp_max,
        "reclaimThresholdPercent": threshold,
    }
    return Reclaimable(resource, value, "; ".join(steps), inputs)


@dataclass(frozen=True)
class ReportHistory:
    """What the report smoothing remembers per published resource: recent raw values and the last report."""

    samples: tuple[tuple[float, float], ...] = ()
    last: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"samples": [list(s) for s in self.samples], "last": self.last}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReportHistory:
        return cls(tuple((float(a), float(b)) for a, b in data.get("samples") or ()), data.get("last"))


AGG: dict[str, Callable[[list[float]], float]] = {
    "avg": lambda xs: sum(xs) / len(xs),
    "max": max,
    "min": min,
    "last": lambda xs: xs[-1],
}


def report(
    raw: float, spec: ReclaimResource, history: ReportHistory, now: float
) -> tuple[float, ReportHistory, list[str]]:
    """Katalyst's report path: the window aggregate of raw values, a step bounded by minStep/maxStep
    against the last report, then minus reservedForReport, 0 at or below minIgnored, and at least
    minReport when positive. Returns the reported value, the new history and the steps taken."""
    steps: list[str] = []
    samples = history.samples
    if spec.smoothing_window:
        samples = (*(s for s in samples if now - s[0] < spec.smoothing_window), (now, raw))
        aggregate = AGG.get(spec.smoothing_agg, AGG["avg"])
        value = float(aggregate([v for _, v in samples]))
        steps.append(f"{spec.smoothing_agg} over {spec.smoothing_window:g}s: {value:.6g}")
    else:
        value = raw
    if history.last is not None:
        delta = value - history.last
        if spec.min_step is not None and abs(delta) < spec.min_step:
            value = history.last
            steps.append(f"change {delta:+.6g} below minStep {spec.min_step:g}: kept {value:.6g}")
        elif spec.max_step is not None and abs(delta) > spec.max_step:
            value = history.last + (spec.max_step if delta > 0 else -spec.max_step)
            steps.append(f"change {delta:+.6g} capped by maxStep {spec.max_step:g}: {value:.6g}")
    smoothed = value
    if spec.reserved_for_report:
        value = max(value - spec.reserved_for_report, 0.0)
        steps.append(f"minus reservedForReport {spec.reserved_for_report:g}: {value:.6g}")
    if spec.min_ignored is not None and value <= spec.min_ignored:
        value = 0.0
        steps.append(f"<= minIgnored {spec.min_ignored:g}: 0")
    elif spec.min_report is not None and 0.0 < value < spec.min_report:
        value = spec.min_report
        steps.append(f"raised to minReport {spec.min_report:g}")
    return value, ReportHistory(samples, smoothed), steps
