"""Issue 14: what a policy may make the daemon hold, and what its expressions may do, is decided at
validate time. Windows are bounded (engine.features.rules.conditions.MAX_WINDOW_SECONDS) because the
collector keeps a sample per tick for the whole window for every pod; knob expressions are evaluated
once against synthetic pods so that one that can only fail is refused before it fails every tick."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

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


def set_cgroup(file: str, expr: str, target: str = "{path: x}") -> str:
    return f'rules:\n  - name: r\n    then: {{setCgroup: {{target: {target}, values: {{{file}: {{expr: "{expr}"}}}}}}}}\n'


SET_CGROUP = "$.spec.rules[0].then.setCgroup.values['{}'].expr"

# (file, expression, message fragment): each fails or is refused at every tick, whatever the pod.
EXPRESSIONS_REFUSED = [
    (
        "memory.high",
        "'x' * 10**9",
        "fails: repeating a str",
    ),
    ("cpu.shares", "'ab' * 10**6", "repeating a str"),
    ("memory.high", "'x' * node.cpus * 10**9", "fails for a cgroup target without a pod on a typical node"),
    ("memory.limit_in_bytes", "10 ** 400", "int too large to convert to float"),
    ("memory.high", "'abc'", "yields a value memory.high refuses"),
    ("memory.high", "[1, 2]", "yields a value memory.high refuses"),
    ("cpu.shares", "'max'", "yields a value cpu.shares refuses"),
    ("cpuset.cpus", "'0-1é'", "yields a value cpuset.cpus refuses"),
    ("memory.high", "-5", "yields a value memory.high refuses"),  # reads nothing: always -5
    ("memory.high", "1 / 0", "fails: division by zero"),  # reads nothing: always fails
    ("memory.high", "node['memory.allocatable_bytes'] ~ 'x'", "yields a value memory.high refuses"),
]


@pytest.mark.parametrize(("file", "expr", "message"), EXPRESSIONS_REFUSED)
def test_an_expression_that_can_only_fail_is_refused_at_validate(
    tmp_path: Path, file: str, expr: str, message: str
) -> None:
    problems = check(tmp_path, set_cgroup(file, expr))
    assert located(problems, message) == [SET_CGROUP.format(file)], [p.format() for p in problems]


# Fine for real pods though they may fail for some: a division by a request (0 for a BestEffort
# pod), a value out of range for a small node, a label only some pods have, a pod without limits.
EXPRESSIONS_ACCEPTED = [
    ("memory.high", "pod.requests.memory * 0.8"),
    ("memory.limit_in_bytes", "pod.limits.memory * 1.1"),
    ("memory.high", "pod.requests.memory / pod.requests.cpu"),
    ("memory.high", "node['memory.allocatable_bytes'] - 64 * 2**30"),
    ("memory.high", "pod.labels.tier"),
    ("cpu.cfs_quota_us", "pod.limits.cpu * 0.9"),
    ("cpu.shares", "pod.requests.cpu * 2"),
    ("cpu.cfs_quota_us", "node['cpu.allocatable_cores'] / node['cpu.usage_cores']"),
]


@pytest.mark.parametrize(("file", "expr"), EXPRESSIONS_ACCEPTED)
def test_an_expression_that_works_for_some_pods_validates(tmp_path: Path, file: str, expr: str) -> None:
    problems = check(tmp_path, set_cgroup(file, expr, target="{class: be}"))
    assert problems == [], [p.format() for p in problems]


def test_a_pod_targeting_expression_is_evaluated_on_sample_pods(tmp_path: Path) -> None:
    """``pod.requests.memory`` is a number for a pod; with no pod (a path target) it is undefined,
    which the tick skips: both validate. A string repeated by a pod's request fails for a typical pod."""
    amplified = set_cgroup("memory.high", "'x' * (pod.requests.memory | int)", target="{class: be}")
    problems = check(tmp_path, amplified)
    assert located(problems, "fails for a pod requesting 1 CPU and 1Gi") == [SET_CGROUP.format("memory.high")]
    assert check(tmp_path, set_cgroup("memory.high", "pod.requests.memory")) == []


@pytest.mark.parametrize(
    ("knob", "where", "message"),
    [
        ("cpu: {shares: {expr: \"'x' * 10**9\"}}", "cpu.shares.expr", "repeating a str"),
        ("memory: {high: {expr: \"'high'\"}}", "memory.high.expr", "yields a value memory.high refuses"),
        ('cpu: {cfsQuota: {expr: "2 ** 2000 * 1.0"}}', "cpu.cfsQuota.expr", "fails"),
    ],
)
def test_class_knob_expressions_are_evaluated_like_set_cgroup_values(
    tmp_path: Path, knob: str, where: str, message: str
) -> None:
    problems = check(tmp_path, f"classes:\n  - name: be\n    {knob}\n")
    assert located(problems, message) == [f"$.spec.classes[0].{where}"], [p.format() for p in problems]


@settings(max_examples=40, deadline=None)
@example(seconds=900, unit="s")
@example(seconds=901, unit="s")
@example(seconds=900, unit="m")
@example(seconds=960, unit="m")
@given(seconds=st.integers(min_value=1, max_value=8760 * 3600), unit=st.sampled_from(["s", "m", "h"]))
def test_a_window_validates_exactly_when_it_is_at_most_15_minutes(seconds: int, unit: str) -> None:
    size = {"s": 1, "m": 60, "h": 3600}[unit]
    count = max(1, seconds // size)
    with tempfile.TemporaryDirectory() as d:
        problems = check(
            Path(d), rule(f"{{pod.cpu.usage_cores: {{gte: 1, window: {count}{unit}, agg: min}}}}")
        )
    refused = located(problems, "is longer than the 15 min")
    assert refused == (["$.spec.rules[0].when['pod.cpu.usage_cores'].window"] if count * size > 900 else [])
    assert len(problems) == len(refused), [p.format() for p in problems]
