"""The reporter: how a computed reclaimable value becomes what the Node is told.

Katalyst's reporter (GenericHeadroomManager, CappedSmoothWindow) smooths the raw values over a
window and damps small changes (minStep) and large ones (maxStep), keeps reservedForReport back,
floors the report at minReport and zeroes it at or below minIgnored. Then every bound of
``spec.reclaim.<resource>`` (maxPercent, max, min) applies, whatever policy computed the value.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.features.reclaim.spec import ReclaimResource
from engine.features.reclaim.strategy import FACTS, _num


@dataclass(frozen=True)
class ReportHistory:
    """What the report smoothing remembers per published resource: recent raw values, the last
    smoothed value (the base of minStep/maxStep) and the last value reported."""

    samples: tuple[tuple[float, float], ...] = ()
    last: float | None = None
    reported: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"samples": [list(s) for s in self.samples], "last": self.last, "reported": self.reported}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReportHistory:
        return cls(
            tuple((float(a), float(b)) for a, b in data.get("samples") or ()),
            data.get("last"),
            data.get("reported"),
        )


def weighted(xs: list[float]) -> float:
    """A weighted average with weights 1, 2, 4, ... from the oldest value to the newest: each value
    counts twice its predecessor, so the newest dominates but a single spike is damped. Computed
    with the newest weight 1 and each older one halved (the same ratios), which no window length
    can overflow."""
    total = norm = 0.0
    w = 1.0
    for x in reversed(xs):
        total += w * x
        norm += w
        w /= 2.0
    return total / norm


AGG: dict[str, Callable[[list[float]], float]] = {
    "avg": lambda xs: sum(xs) / len(xs),
    "max": max,
    "min": min,
    "last": lambda xs: xs[-1],
    "weighted": weighted,
}


def report(
    raw: float, spec: ReclaimResource, history: ReportHistory, now: float
) -> tuple[float, ReportHistory, list[str]]:
    """Katalyst's reporter (GenericHeadroomManager.sync, CappedSmoothWindow): the window aggregate of
    raw values; a change below minStep keeps the last value, one above maxStep moves it by maxStep;
    then minus reservedForReport; then at least minReport (a floor, 0 included: Katalyst reports
    minReclaimedResourceForReport even when the headroom is 0); then 0 at or below minIgnored.
    Returns the reported value, the new history and the steps taken."""
    steps: list[str] = []
    samples = history.samples
    if spec.smoothing_window:
        samples = (*(s for s in samples if now - s[0] < spec.smoothing_window), (now, raw))
        aggregate = AGG.get(spec.smoothing_agg, AGG["avg"])
        value = float(aggregate([v for _, v in samples]))
        steps.append(f"{spec.smoothing_agg} of {len(samples)} over {spec.smoothing_window:g}s: {_num(value)}")
    else:
        value = raw
    if history.last is not None:
        delta = value - history.last
        change = f"change {'+' if delta > 0 else '-'}{_num(abs(delta))}"
        if spec.min_step is not None and abs(delta) < spec.min_step:
            value = history.last
            steps.append(f"{change} below minStep {_num(spec.min_step)}: kept {_num(value)}")
        elif spec.max_step is not None and abs(delta) > spec.max_step:
            value = history.last + (spec.max_step if delta > 0 else -spec.max_step)
            steps.append(f"{change} capped by maxStep {_num(spec.max_step)}: {_num(value)}")
    smoothed = value
    if spec.reserved_for_report:
        value -= spec.reserved_for_report
        steps.append(f"minus reservedForReport {_num(spec.reserved_for_report)}: {_num(value)}")
    if spec.min_report is not None and value < spec.min_report:
        value = spec.min_report
        steps.append(f"raised to minReport {_num(spec.min_report)}")
    value = max(value, 0.0)
    if spec.min_ignored is not None and value <= spec.min_ignored:
        value = 0.0
        steps.append(f"<= minIgnored {_num(spec.min_ignored)}: 0")
    return value, ReportHistory(samples, smoothed, value), steps


# ------------------------------------------------------------------ bounds


def bound(
    resource: str, value: float, spec: ReclaimResource, node: Mapping[str, Any]
) -> tuple[float, list[str], dict[str, Any]]:
    """The bounds of ``spec.reclaim.<resource>`` on a value about to be published, whatever policy
    computed it and after the report smoothing and floors: at most ``maxPercent`` of capacity
    (Koordinator's batchXThresholdPercent, in its integer milli-cores or bytes), at most ``max``,
    at least ``min``. They come last because they are promises about what the Node shows: a
    ``minReport`` floor or a smoothed average must not lift a report above ``max`` (issue 18: the
    headroom policy ignored ``max: 4`` and published up to 23 cores). Returns the bounded value,
    the steps taken and the caps as provenance inputs."""
    steps: list[str] = []
    inputs: dict[str, Any] = {}
    if spec.max_percent is not None:
        f = FACTS[resource]
        capacity = float(node.get(f.capacity) or 0.0)
        if capacity:
            # MultiplyMilliQuant / MultiplyQuant: int64(float64(capacity) x ratio), truncated.
            limit = math.trunc(round(capacity * f.scale) * (spec.max_percent / 100.0)) / f.scale
            inputs["maxPercentCap"] = limit
            if value > limit:
                value = limit
                steps.append(f"capped at {spec.max_percent:g}% of capacity: {_num(value)}")
        else:
            steps.append(f"maxPercent {spec.max_percent:g} not applied: node {resource} capacity unknown")
    if spec.max is not None and value > spec.max:
        value = spec.max
        steps.append(f"capped at max {_num(spec.max)}")
    if spec.min is not None and value < spec.min:
        value = spec.min
        steps.append(f"raised to min {_num(spec.min)}")
    return value, steps, inputs
