"""The evict action's typed spec: every default lives in the spec, compiled once per generation.

Each row is a mapping as a rule file writes it and the typed fields the tick then reads; a default
moved back into tick-time code (or changed on the way) fails a named row.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from engine.config.pipeline import build_policy, load_documents
from engine.features.eviction.pressure import DEFAULT_RSS_OVERUSE_THRESHOLD, RECLAIMED_MILLICPU
from engine.features.eviction.spec import (
    DEFAULT_ORDER,
    DEFAULT_PHASES,
    BeSatisfaction,
    EvictSpec,
    ReclaimedOvercommit,
    RssOveruse,
    SuppressionTolerance,
    compile_spec,
)
from tests.builders import GiB, snapshot


@pytest.mark.parametrize(
    ("raw", "field", "expected"),
    [
        pytest.param({}, "trigger", None, id="no-trigger"),
        pytest.param({}, "ranking", DEFAULT_ORDER, id="default-order"),
        pytest.param({"orderBy": ["-memory.rss"]}, "ranking", ("-memory.rss",), id="order-as-written"),
        pytest.param({}, "max_per_round", None, id="no-round-cap"),
        pytest.param({"cooldown": "90s"}, "cooldown", 90.0, id="cooldown-parsed-once"),
        pytest.param({}, "cooldown", None, id="no-cooldown"),
        pytest.param({"gracePeriodSeconds": 0}, "grace_period_seconds", 0, id="grace-zero-kept"),
    ],
)
def test_evict_fields(raw: dict[str, Any], field: str, expected: Any) -> None:
    assert getattr(compile_spec(raw), field) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param({}, {"resource": "memory", "target": "usage", "has_target": False}, id="defaults"),
        pytest.param(
            {"lowerPercent": 63}, {"lower_percent": 63, "amount": None, "has_target": True}, id="lower-percent"
        ),
        pytest.param(
            {"amount": "2Gi", "resource": "memory"},
            {"amount": 2 * GiB, "amount_text": "2Gi", "has_target": True},
            id="amount-parsed-and-kept-as-written",
        ),
        pytest.param({"target": "request"}, {"target": "request"}, id="request-credit"),
    ],
)
def test_release(raw: dict[str, Any], expected: dict[str, Any]) -> None:
    release = compile_spec({"release": raw}).release
    assert {k: getattr(release, k) for k in expected} == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param({"rssOveruse": {}}, RssOveruse(DEFAULT_RSS_OVERUSE_THRESHOLD), id="rss-default"),
        pytest.param({"rssOveruse": {"threshold": 1.5}}, RssOveruse(1.5), id="rss-threshold"),
        pytest.param(
            {"suppressionTolerance": {}},
            SuppressionTolerance(5.0, 300.0, RECLAIMED_MILLICPU),
            id="tolerance-katalyst-defaults",
        ),
        pytest.param(
            {"suppressionTolerance": {"minDuration": "2m", "maxRate": 3}},
            SuppressionTolerance(3.0, 120.0, RECLAIMED_MILLICPU),
            id="tolerance-given",
        ),
        pytest.param(
            {"reclaimedOvercommit": {"thresholds": {"cpu": 1.2}, "skipZero": ["memory"]}},
            ReclaimedOvercommit({"cpu": 1.2, "memory": 5.0}, frozenset({"memory"})),
            id="overcommit-one-threshold-given",
        ),
        pytest.param(
            {"beSatisfaction": {"lowerPercent": 60, "upperPercent": 80, "collectInterval": "5s"}},
            BeSatisfaction(60, 80, None, 0.0, 5.0, "realLimit", "kubernetes.io/batch-cpu"),
            id="satisfaction-defaults",
        ),
    ],
)
def test_triggers(raw: dict[str, Any], expected: Any) -> None:
    trigger = compile_spec({"trigger": raw}).trigger
    assert trigger == expected
    assert trigger is not None and trigger.kind == next(iter(raw))


def test_satisfaction_window_is_at_least_one_collect_interval() -> None:
    """Koordinator's window: never shorter than one collection (the old tick-time max())."""
    sat = BeSatisfaction(60, 80, window=2.0, collect_interval=5.0)
    assert sat.effective_window == 5.0
    assert dataclasses.replace(sat, window=30.0).effective_window == 30.0


def test_victims_defaults_and_frozen() -> None:
    spec = compile_spec({"victims": {"classes": ["be"], "requireLabel": {"team": "x"}}})
    assert spec.victims.classes == ("be",) and spec.victims.phases == DEFAULT_PHASES
    assert dict(spec.victims.require_label) == {"team": "x"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.victims.classes = ()  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.victims.require_label["team"] = "y"  # type: ignore[index]


def test_every_bundled_evict_action_carries_its_spec() -> None:
    """The compile pipeline gives each evict action its typed spec: the tick reads no raw key."""
    node = snapshot().node
    for profile in ({}, {"qosd.io/profile": "koordinator"}):
        policy = build_policy(load_documents([], builtin=True), node.with_labels(profile))
        evicts = [a for r in policy.rules for a in r.actions if a.kind == "evict"]
        assert evicts, f"the bundled policy {profile} has evict actions"
        assert all(isinstance(a.spec, EvictSpec) and a.spec == compile_spec(a.params) for a in evicts)
