"""Issue 14: what a policy may make the daemon hold, and what its expressions may do, is decided at
validate time. Windows are bounded (engine.config.conditions.MAX_WINDOW_SECONDS) because the
collector keeps a sample per tick for the whole window for every pod; knob expressions are evaluated
once against synthetic pods so that one that can only fail is refused before it fails every tick."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.config.errors import Problem
from tests.test_policy_checks import check


def located(problems: list[Problem], fragment: str) -> list[str]:
    return [p.location.path for p in problems if fragment in p.message]


def rule(when: str, extra: str = "") -> str:
    return f"rules:\n  - name: r\n    when: {when}\n    then: {{notify: {{}}}}\n{extra}"


WINDOWS_REFUSED = [
    # (condition, JSON path of the window)
    (
        "{node.cpu.usage_percent: {gte: 90, window: 8760h}}",
        "$.spec.rules[0].when['node.cpu.usage_percent'].window",
    ),
    (
        "{pod.cpu.usage_cores: {gte: 1, window: 901s, agg: max}}",
        "$.spec.rules[0].when['pod.cpu.usage_cores'].window",
    ),
    (
        "{all: [{node.cpu.usage_percent: {gte: 1, window: 1m}}, {node.memory.usage_percent: {lt: 5, window: 16m, agg: min}}]}",
        "$.spec.rules[0].when.all[1]['node.memory.usage_percent'].window",
    ),
]


@pytest.mark.parametrize(("when", "where"), WINDOWS_REFUSED)
def test_a_window_longer_than_the_cap_is_refused_where_it_is_written(
    tmp_path: Path, when: str, where: str
) -> None:
    problems = check(tmp_path, rule(when))
    assert located(problems, "is longer than the 15 min") == [where], [p.format() for p in problems]
    assert all("at most 15m" in p.hint for p in problems if "is longer" in p.message)


def test_clear_when_windows_are_bounded_too(tmp_path: Path) -> None:
    problems = check(
        tmp_path,
        rule(
            "{node.cpu.usage_percent: {gte: 90, window: 1m}}",
            "    clearWhen: {node.cpu.usage_percent: {lt: 50, window: 2h}}\n",
        ),
    )
    assert located(problems, "is longer than") == [
        "$.spec.rules[0].clearWhen['node.cpu.usage_percent'].window"
    ]


@pytest.mark.parametrize("window", ["1s", "5m", "15m", "900s"])
def test_windows_up_to_the_cap_validate(tmp_path: Path, window: str) -> None:
    problems = check(tmp_path, rule(f"{{pod.cpu.usage_cores: {{gte: 1, window: {window}, agg: max}}}}"))
    assert problems == [], [p.format() for p in problems]


def test_report_smoothing_window_is_bounded(tmp_path: Path) -> None:
    """The reclaim report keeps every raw value of its smoothing window, in memory and in the state file."""
    spec = "reclaim:\n  cpu:\n    publishAs: kubernetes.io/batch-cpu\n    smoothing: {window: 8760h}\n"
    problems = check(tmp_path, spec)
    assert located(problems, "is longer than") == ["$.spec.reclaim.cpu.smoothing.window"], [
        p.format() for p in problems
    ]
    assert check(tmp_path, spec.replace("8760h", "10m")) == []


def test_rate_limit_count_is_bounded(tmp_path: Path) -> None:
    """The engine keeps the time of each firing a perWindow count allows."""
    limits = "    limits: {perWindow: {count: 1000000000, window: 8760h}}\n"
    problems = check(tmp_path, rule("{node.cpu.usage_percent: {gte: 90}}", limits))
    assert located(problems, "perWindow count 1000000000") == ["$.spec.rules[0].limits.perWindow.count"]
    assert (
        check(tmp_path, rule("{node.cpu.usage_percent: {gte: 90}}", limits.replace("1000000000", "10000")))
        == []
    )
