"""Reclaimed resources: Koordinator's batch-resource formulas (koordinator.md §4.1) and the report floors."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.config.policy import ReclaimResource
from engine.strategies.reclaim import PodUse, ReportHistory, reclaimable, report


def spec(policy: str = "usage", threshold: float = 60, **kw: float | None) -> ReclaimResource:
    base: dict[str, float | None] = {
        "max_percent": None,
        "min": None,
        "max": None,
        "reserved_for_report": None,
        "min_report": None,
        "min_ignored": None,
    }
    base.update(kw)
    return ReclaimResource(
        policy,
        threshold,
        base["max_percent"],
        base["min"],
        base["max"],
        base["reserved_for_report"],
        base["min_report"],
        base["min_ignored"],
        "kubernetes.io/batch-cpu",
        None,
        "avg",
        None,
        None,
    )


NODE = {"cpu.capacity_cores": 100.0, "cpu.allocatable_cores": 96.0, "cpu.usage_cores": 50.0}
PODS = [
    PodUse(request=20.0, usage=30.0, high_priority=True),  # LS pod using above its request
    PodUse(request=10.0, usage=5.0, high_priority=True),
    PodUse(request=8.0, usage=None, high_priority=True),  # no metric: counts its request as usage
    PodUse(request=6.0, usage=4.0, high_priority=False),  # a batch pod: never counted as HP
]


@pytest.mark.parametrize(
    ("policy", "threshold", "expected", "why"),
    [
        # margin 40, system = max(50 - 39, 4) = 11, HPUsed = 30 + 5 + 8 = 43 -> 100 - 40 - 11 - 43 = 6
        ("usage", 60, 6.0, "byUsage"),
        # byRequest: 100 - 40 - reserved 4 - HPRequest 38 = 18
        ("request", 60, 18.0, "byRequest"),
        # byMaxUsageRequest: HPMaxUsedReq = max(20,30) + max(10,5) = 40 (the metric-less pod is not added)
        ("maxUsageRequest", 60, 9.0, "byMaxUsageRequest"),
        ("usage", 40, 0.0, "margin 60 leaves nothing: clamped at 0"),
        (
            "usage",
            110,
            56.0,
            "a threshold above 100 is a negative margin (allowed by the anchor): 100 + 10 - 11 - 43",
        ),
    ],
)
def test_koordinator_formulas(policy: str, threshold: float, expected: float, why: str) -> None:
    r = reclaimable("cpu", spec(policy, threshold), NODE, PODS, None, None)
    assert r.value == pytest.approx(expected), why


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({"max_percent": 5.0}, 5.0),  # batchCPUThresholdPercent caps at 5% of capacity
        ({"max": 4.0}, 4.0),
        ({"min": 7.0}, 7.0),
    ],
)
def test_caps(kw: dict[str, float], expected: float) -> None:
    assert reclaimable("cpu", spec(**kw), NODE, PODS, None, None).value == pytest.approx(expected)


@pytest.mark.parametrize(
    ("kw", "raw", "expected"),
    [
        ({"reserved_for_report": 2.0}, 6.0, 4.0),
        ({"min_ignored": 6.0}, 6.0, 0.0),  # Katalyst: at or below minIgnored the report is 0
        (
            {"min_report": 8.0},
            6.0,
            8.0,
        ),  # Katalyst: a positive report is raised to minReclaimedResourceForReport
        ({"min_report": 8.0}, 0.0, 0.0),  # but zero stays zero
    ],
)
def test_report_floors(kw: dict[str, float], raw: float, expected: float) -> None:
    assert report(raw, spec(**kw), ReportHistory(), 0.0)[0] == pytest.approx(expected)


def smoothing(
    window: float | None, agg: str = "avg", min_step: float | None = None, max_step: float | None = None
) -> ReclaimResource:
    return replace(spec(), smoothing_window=window, smoothing_agg=agg, min_step=min_step, max_step=max_step)


def test_report_smoothing_window_and_steps() -> None:
    """Katalyst's reporter: 2 min average, changes under 0.3 cores ignored, over 4 cores capped per report."""
    s = smoothing(120.0, "avg", 0.3, 4.0)
    history = ReportHistory()
    reported = []
    for t, raw in ((0, 10.0), (30, 10.2), (60, 30.0), (90, 30.0), (200, 30.0)):
        value, history, _ = report(raw, s, history, float(t))
        reported.append(value)
    # t=0: 10; t=30: avg 10.1 is within minStep of 10 -> 10; t=60: avg 16.73 -> capped +4 -> 14;
    # t=90: avg 20.05 -> +4 -> 18; t=200: only t=90 and t=200 in the window: 30 -> capped -> 22.
    assert reported == pytest.approx([10.0, 10.0, 14.0, 18.0, 22.0])
    assert [t for t, _ in history.samples] == [90.0, 200.0]


def test_stale_metrics_withdraw_the_resource() -> None:
    """Koordinator degradeTimeMinutes: metrics older than degradeAfter remove batch resources."""
    r = reclaimable("cpu", spec(), NODE, PODS, metrics_age=16 * 60, degrade_after=15 * 60)
    assert r.value is None and "degradeAfter" in r.formula
    assert reclaimable(
        "cpu", spec(), NODE, PODS, metrics_age=60, degrade_after=15 * 60
    ).value == pytest.approx(6.0)


def test_unknown_usage_withdraws_rather_than_guesses() -> None:
    assert reclaimable("cpu", spec(), {"cpu.capacity_cores": 100.0}, PODS, None, None).value is None
