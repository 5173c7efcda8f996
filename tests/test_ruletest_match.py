"""qosd test: comparisons read quantities on both sides, a value no operator can judge is a located
failure (never a quiet non-match), and expectations on the engine state, OOM priorities and cpusets."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from engine.ruletest.match import field_results, incomparable, value_matches
from engine.ruletest.options import main

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOTS = ROOT / "examples" / "snapshots"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def write_suite(directory: Path, body: str) -> Path:
    """A suite whose FACTS names examples/snapshots/<file> by absolute path."""
    text = "apiVersion: qosd.io/v1alpha1\nkind: RuleTest\nmetadata: {name: m}\n" + textwrap.dedent(body).lstrip("\n")
    path = directory / "suite.yaml"
    path.write_text(text.replace("SNAPSHOTS", str(SNAPSHOTS)), encoding="utf-8")
    return path


# ---------------------------------------------------------------- quantities in every comparison


@pytest.mark.parametrize(
    ("expected", "actual", "ok"),
    [
        # The defect: a published quantity is a string ("6250"), and {gt: 0} never matched it.
        ({"gt": 0}, "6250", True),
        ({"gte": "6"}, "6250m", True),
        ({"lt": "2Gi"}, "1Gi", True),
        ({"lte": "1Gi"}, "1073741824", True),
        ({"gt": "1Gi"}, "1073741824", False),
        ({"lt": 0}, "-1", True),  # cpu.cfs_quota_us as written
        ({"approx": "4Gi", "tolerance": "1%"}, "4294967296", True),
        ({"approx": 6.25, "tolerance": 0.01}, "6250m", True),
        # Equality reads quantities the same way, on either side.
        ("4Gi", "4294967296", True),
        ("6250m", 6.25, True),
        (6250, "6250", True),
        ("4Gi", "4Gi", True),
        ("4Gi", "5Gi", False),
        ("0-3", "0-3", True),
        ("web", "web", True),
        # matches reads a number as it prints
        ({"matches": "^62"}, 6250, True),
        # cpusets
        ({"cpuset": "0-3"}, "0,1,2,3", True),
        ({"cpuset": "0-3"}, "0-4", False),
        ({"cpuset": {"count": 4}}, "8-11", True),
        ({"cpuset": {"count": 4}}, "8-10", False),
        ({"cpuset": {"count": {"gte": 2}, "within": "0-7"}}, "2-3", True),
        ({"cpuset": {"within": "0-7"}}, "6-8", False),
        ({"cpuset": {"count": 0}}, "", True),
        ({"cpuset": {"count": 2}}, [4, 5], True),
    ],
)
def test_comparisons(expected: Any, actual: Any, ok: bool) -> None:
    assert value_matches(expected, actual) is ok


@pytest.mark.parametrize(
    ("ops", "actual", "reason"),
    [
        ({"gt": 0}, "max", '"max" is not a number or a quantity, so gt cannot compare it'),
        ({"gte": 1, "lt": 9}, {"a": 1}, "is not a number or a quantity, so gte/lt cannot compare it"),
        ({"approx": 1}, [1], "is not a number or a quantity, so approx cannot compare it"),
        ({"cpuset": {"count": 1}}, "0-x", '"0-x" is not a cpuset such as 0-3,8, so cpuset cannot count it'),
        ({"matches": "a"}, {"a": 1}, "is not text, so matches cannot search it"),
    ],
)
def test_incomparable_values_say_why(ops: dict[str, Any], actual: Any, reason: str) -> None:
    assert reason in incomparable(ops, actual, True)
    [result] = field_results({"f": ops}, {"f": actual})
    assert not result.ok and reason in result.problem


@pytest.mark.parametrize(("ops", "actual"), [({"gt": 0}, None), ({"lt": 1}, 0), ({"cpuset": "0"}, "0")])
def test_absent_or_comparable_values_are_not_incomparable(ops: dict[str, Any], actual: Any) -> None:
    assert incomparable(ops, actual, actual is not None) == ""
    assert incomparable(ops, None, False) == ""


def test_gt_matches_a_published_quantity_string(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Regression (issue 16): `{gt: 0}` against the operation's quantity "6250" silently never
    matched, while equality did; both ways now agree."""
    path = write_suite(
        tmp_path,
        """
        cases:
          - name: published
            facts: SNAPSHOTS/numa-watermark-pressure.yaml
            expect:
              operations:
                - {kind: publishNodeResource, name: resource.katalyst.kubewharf.io/reclaimed_millicpu, quantity: {gt: 0}}
                - {kind: publishNodeResource, name: resource.katalyst.kubewharf.io/reclaimed_memory, quantity: {gte: 48Gi, lt: 49Gi}}
              notOperations:
                - {kind: publishNodeResource, quantity: {lt: 1}}
        """,
    )
    code, out, _ = run(capsys, str(path))
    assert code == 0, out


def test_an_incomparable_value_is_a_located_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`gt` against a field holding text ("qosd rule ..."): an expected entry fails with the reason,
    and a forbidden one cannot pass quietly: whether it matches is undecidable, which is a failure."""
    path = write_suite(
        tmp_path,
        """
        cases:
          - name: expected
            facts: SNAPSHOTS/numa-watermark-pressure.yaml
            expect:
              operations: [{kind: evictPod, reason: {gt: 0}}]
          - name: forbidden
            facts: SNAPSHOTS/numa-watermark-pressure.yaml
            expect:
              notOperations: [{kind: evictPod, reason: {gt: 0}}]
        """,
    )
    code, out, _ = run(capsys, str(path))
    assert code == 1
    cannot = (
        "operation 1 (evictPod batch/etl (rule numa-memory-pressure-reclaimed)) cannot be compared: "
        'reason: "qosd rule numa-memory-pressure-reclaimed" is not a number or a quantity, so gt cannot compare it'
    )
    assert f"{path}:8:20: operations[0]: no operation matches {{kind: evictPod, reason: {{gt: 0}}}}" in out
    assert f"        {cannot}\n" in out
    assert "          CANNOT    reason  expected {gt: 0}: \"qosd rule" in out
    assert (
        f"{path}:12:23: notOperations[0]: cannot tell whether operation 1 matches {{kind: evictPod, reason: {{gt: 0}}}}"
        in out
    )
    assert out.count(cannot) == 2
    _, out, _ = run(capsys, str(path), "--output", "json")
    failures = [f for c in json.loads(out)["cases"] for f in c["failures"]]
    problems = [r["problem"] for f in failures for c in f["closest"] for r in c["fields"] if r["problem"]]
    assert problems and all("gt cannot compare it" in p for p in problems)


# ---------------------------------------------------------------- state, oomPriorities, cpus


def test_state_and_oom_priorities_can_be_asserted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Katalyst's NUMA watermark counter (8 rounds over on NUMA 0, 2 on NUMA 1), the latch and the
    eviction under way, and reclaimed_cores' OOM priority (-100, the class default)."""
    path = write_suite(
        tmp_path,
        """
        cases:
          - name: counters
            facts: SNAPSHOTS/numa-watermark-pressure.yaml
            expect:
              state:
                pressure.numa.0: {count: 8, action: reclaimed_eviction}
                pressure.numa.1.count: {lt: 3}
                latched: {contains: "numa-memory-pressure-reclaimed|0"}
                evicting: {rc-3: {rule: numa-memory-pressure-reclaimed, credit: 1Gi}}
              oomPriorities:
                - {pod: batch/trainer-1, class: reclaimed_cores, value: -100, source: class default}
              notOomPriorities: [{class: reclaimed_cores, value: {gt: -100}}]
          - name: wrong counter
            facts: SNAPSHOTS/numa-watermark-pressure.yaml
            expect:
              state: {pressure.numa.0.count: 3, latched: {contains: be-memory-evict}}
              noOomPriorities: true
        """,
    )
    code, out, _ = run(capsys, str(path))
    assert code == 1
    assert "  PASS  counters" in out
    assert f"{path}:19:38: state.pressure.numa.0.count: expected 3, got 8" in out
    assert f"{path}:19:50: state.latched: expected {{contains: be-memory-evict}}, got " in out
    assert f"{path}:20:7: expected no oomPriorities, got " in out


def test_cpuset_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Katalyst's QRM: the dedicated pod with numa_binding gets 4 CPUs of one NUMA node (8-11),
    whatever the order of ids in the list."""
    path = write_suite(
        tmp_path,
        """
        cases:
          - name: dedicated cpus
            facts: SNAPSHOTS/katalyst-pools-16cpu-4numa.yaml
            expect:
              intents:
                - {kind: cgroup, pod: db/excl, file: cpuset.cpus, value: {cpuset: {count: 4, within: 8-11}}}
              operations:
                - {kind: writeCgroup, path: kubepods/podexcl/main, file: cpuset.cpus, value: {cpuset: "8,9,10,11"}}
          - name: wrong count
            facts: SNAPSHOTS/katalyst-pools-16cpu-4numa.yaml
            expect:
              intents: [{kind: cgroup, pod: db/excl, file: cpuset.cpus, value: {cpuset: {count: 2}}}]
        """,
    )
    code, out, _ = run(capsys, str(path))
    assert code == 1
    assert "  PASS  dedicated cpus" in out
    assert "MISMATCH  value  expected {cpuset: {count: 2}}, got 8-11" in out


@pytest.mark.parametrize(
    ("expect", "message"),
    [
        ("{intents: [{value: {cpuset: 0-x}}]}", '"0-x" is not a cpuset'),
        ("{intents: [{value: {cpuset: {count: 4, size: 2}}}]}", "cpuset has no 'size'"),
        ("{intents: [{value: {cpuset: {count: four}}}]}", "count is a number of CPUs, got \"four\""),
        ("{intents: [{value: {cpuset: {within: 3-1}}}]}", '"3-1" is not a cpuset'),
        ("{intents: [{value: {cpuset: {}}}]}", "cpuset: {} checks nothing"),
        ("{state: {pressur: {}}}", "engine states have no field 'pressur'"),
        ("{oomPriorities: [{score: 1}]}", "oomPriorities have no field 'score'"),
    ],
)
def test_bad_new_expectations_are_located(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], expect: str, message: str
) -> None:
    path = write_suite(
        tmp_path,
        f"""
        cases:
          - name: bad
            facts: SNAPSHOTS/quiet-node.yaml
            expect: {expect}
        """,
    )
    code, out, err = run(capsys, str(path))
    assert code == 1 and out == ""
    assert f"{path}:7:" in err and message in err, err
