"""qosd test: RuleTest suites (matching, diffs, steps, exit codes, located errors), the shipped
example suites, and the Evaluation JSON schema against real `qosd eval --output json` output."""

from __future__ import annotations

import functools
import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from engine.cli import main as cli_main
from engine.config.pipeline import build_policy, load_documents
from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState
from engine.explain.reader import evaluation_validator
from engine.model.facts import snapshot_from_dict
from engine.plan.planner import Guards
from engine.ruletest import runner
from engine.ruletest.match import resolve, value_matches
from engine.ruletest.model import merge_patch
from engine.ruletest.options import main
from engine.sources.snapshot_file import read_facts
from engine.tick import run_tick
from tests.qosdcli import shipped_rule_tests

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
SNAPSHOTS = EXAMPLES / "snapshots"
MEMORY_PRESSURE = SNAPSHOTS / "memory-pressure.yaml"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def suite(tmp_path: Path, body: str, name: str = "suite.yaml") -> Path:
    """A RuleTest file in tmp_path; FACTS in the body names a copy of the memory-pressure snapshot
    next to it (a short relative path keeps the columns in expected messages readable).

    The copy has no node CPU usage, so be-cpu-suppress is skipped and the intents these tests of the
    test runner count are the evictions alone (suppress has its own cases in examples/tests)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    facts = yaml.safe_load(MEMORY_PRESSURE.read_text())
    del facts["metrics"]["node"]["cpu"]
    (tmp_path / "mp.yaml").write_text(yaml.safe_dump(facts, sort_keys=False), encoding="utf-8")
    text = "apiVersion: qosd.io/v1alpha1\nkind: RuleTest\n" + textwrap.dedent(body).lstrip("\n")
    path = tmp_path / name
    path.write_text(text.replace("FACTS", "mp.yaml"), encoding="utf-8")
    return path


# ---------------------------------------------------------------- the shipped examples


@functools.cache
def example_counts() -> tuple[int, int, int]:
    """Suites, cases and xfail cases under examples/ (examples/tests and the parity ports in
    examples/parity), counted from the files: every suite must run, and only marked cases may fail.
    Read with libyaml's parser where PyYAML has it (the same documents; the pure-Python one takes
    seconds over examples/)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    docs = [d for p in sorted(EXAMPLES.rglob("*.yaml")) for d in yaml.load_all(p.read_text(), Loader=loader)]
    suites = [d for d in docs if isinstance(d, dict) and d.get("kind") == "RuleTest"]
    assert len(suites) >= 4
    cases = [c for d in suites for c in d["cases"]]
    return len(suites), len(cases), sum("xfail" in c for c in cases)


def test_examples_directory_passes() -> None:
    """The issue's done-when: `qosd test examples/` passes."""
    proc = shipped_rule_tests()
    code, out, err = proc.returncode, proc.stdout, proc.stderr
    assert code == 0, out + err
    assert "  FAIL " not in out and "  ERROR" not in out and "  XPASS" not in out
    assert "suite koordinator-be-memory-evict" in out
    assert "suite katalyst-memory-eviction" in out
    assert "suite overlays-and-guards" in out
    suites, cases, xfails = example_counts()
    expected = f"{cases} case(s) in {suites} suite(s): {cases - xfails} passed"
    expected += f", {xfails} expected to fail (xfail)" if xfails else ""
    assert out.rstrip().endswith(expected)


def test_examples_pass_on_json_output() -> None:
    proc = shipped_rule_tests("--output", "json")
    report = json.loads(proc.stdout)
    assert proc.returncode == 0
    assert report["kind"] == "RuleTestReport" and report["passed"] is True
    suites, cases, xfails = example_counts()
    assert report["summary"] == {
        "suites": suites,
        "cases": cases,
        "pass": cases - xfails,
        "fail": 0,
        "error": 0,
        "xfail": xfails,
        "xpass": 0,
    }


# ---------------------------------------------------------------- pass, fail and the diff


def test_good_suite_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = suite(
        tmp_path,
        """
        metadata: {name: good}
        cases:
          - name: two victims
            facts: FACTS
            expect:
              intents:
                - {kind: evict, target: batch/spark-exec-1, rank: 2, credit: 12Gi}
                - {kind: evict, target: batch/etl-small, rank: 1, release.target: {approx: 8.96Gi, tolerance: 0.5%}}
              notIntents: [{kind: evict}]
              fired: [be-memory-evict]
        """,
    )
    code, out, _ = run(capsys, str(path))
    assert code == 0
    cases, table, coverage = out.split("\n\n")
    assert cases == f"{path}: suite good\n  PASS  two victims"
    assert table == "SUITE  CASE         RESULT  REASON\ngood   two victims  PASS"
    assert coverage.startswith("rule coverage: ")
    assert coverage.endswith("\n1 case(s) in 1 suite(s): 1 passed\n")


def test_wrong_expectation_fails_with_field_by_field_diff(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = suite(
        tmp_path,
        """
        metadata: {name: wrong}
        cases:
          - name: wrong victim
            facts: FACTS
            expect:
              intents:
                - {kind: evict, target: batch/etl-small}
                - {kind: evict, target: batch/spark-exec-2, rank: 2}
              fired: [be-cpu-suppress]
        """,
    )
    code, out, _ = run(capsys, str(path))
    assert code == 1
    assert out.split("\n\n")[0] == (
        f"{path}: suite wrong\n"
        "  FAIL  wrong victim\n"
        f"      {path}:10:11: intents[1]: no intent matches {{kind: evict, target: batch/spark-exec-2, rank: 2}}\n"
        "        closest actual: intent 2: evict batch/spark-exec-1 (rule be-memory-evict, rank 2)\n"
        "          ok        kind    evict\n"
        "          MISMATCH  target  expected batch/spark-exec-2, got batch/spark-exec-1\n"
        "          ok        rank    2\n"
        "        closest actual: intent 1: evict batch/etl-small (rule be-memory-evict, rank 1)\n"
        "          ok        kind    evict\n"
        "          MISMATCH  target  expected batch/spark-exec-2, got batch/etl-small\n"
        "          MISMATCH  rank    expected 2, got 1\n"
        f"      {path}:11:15: rule be-cpu-suppress did not fire (skipped: suppress needs the node's CPU usage "
        "(node.cpu.usage_cores); this snapshot has none)\n"
        "        fired: be-memory-evict, publish-batch-resources"
    )
    assert out.endswith("\n1 case(s) in 1 suite(s): 0 passed, 1 failed\n")


def test_diff_shows_actual_values_of_operator_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = suite(
        tmp_path,
        """
        cases:
          - name: release too small
            facts: FACTS
            expect:
              intents:
                - {target: batch/spark-exec-1, release.target: {approx: 5Gi}, credit: {lt: 1Gi}}
        """,
    )
    code, out, _ = run(capsys, str(path))
    assert code == 1
    assert "MISMATCH  release.target  expected {approx: 5Gi}, got 9620726743.04 (9.0 GiB)" in out
    assert "MISMATCH  credit          expected {lt: 1Gi}, got 12884901888 (12.0 GiB)" in out
    assert "ok        target          batch/spark-exec-1" in out


def test_not_intents_only_sees_unclaimed_intents(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = suite(
        tmp_path,
        """
        cases:
          - name: only one expected
            facts: FACTS
            expect:
              intents: [{kind: evict, target: batch/etl-small}]
              notIntents: [{kind: evict}]
        """,
    )
    code, out, _ = run(capsys, str(path))
    assert code == 1
    assert (
        f"{path}:8:20: notIntents[0]: intent 2 matches {{kind: evict}}: "
        "evict batch/spark-exec-1 (rule be-memory-evict, rank 2)"
    ) in out
    assert "intent 1 matches" not in out


def test_ordered_expectations(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = suite(
        tmp_path,
        """
        cases:
          - name: reversed
            facts: FACTS
            expect:
              ordered: true
              intents: [{target: batch/spark-exec-1}, {target: batch/etl-small}]
          - name: unordered
            facts: FACTS
            expect:
              intents: [{target: batch/spark-exec-1}, {target: batch/etl-small}]
        """,
    )
    code, out, _ = run(capsys, str(path))
    assert code == 1
    assert "  FAIL  reversed\n" in out and "  PASS  unordered\n" in out
    assert "intents[1]: no intent matches {target: batch/etl-small}" in out
    assert "it matches intent 1, but not after the entries before it (ordered: true)" in out


def test_each_expected_entry_needs_its_own_intent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = suite(
        tmp_path,
        """
        cases:
          - name: three evictions expected
            facts: FACTS
            expect:
              intents: [{kind: evict}, {kind: evict}, {kind: evict}]
        """,
    )
    code, out, _ = run(capsys, str(path))
    assert code == 1
    assert "intents[2]: no intent matches {kind: evict}" in out
    assert "it matches intent 1, 2, but another expected entry claims it" in out


def test_no_lists_and_held_and_skipped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = suite(
        tmp_path,
        """
        guards: {dryRun: true}
        cases:
          - name: dry run
            facts: FACTS
            expect:
              noOperations: true
              noHeld: true
              skipped: [be-cpu-suppress]
              notSkipped: [{rule: be-memory-evict}]
        """,
    )
    code, out, _ = run(capsys, str(path))
    assert code == 1
    assert f"{path}:9:7: expected no held, got 4" in out
    assert "evict batch/etl-small (rule be-memory-evict): dry run: reported, not executed" in out


# ---------------------------------------------------------------- steps, state, patches


def test_steps_carry_state_between_ticks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = suite(
        tmp_path,
        """
        cases:
          - name: evictions under way are credited
            facts: FACTS
            steps:
              - at: 0s
                expect: {intents: [{target: batch/etl-small}, {target: batch/spark-exec-1}]}
              - name: one second later
                at: 1
                expect: {intents: [{kind: evict}]}
        """,
    )
    code, out, _ = run(capsys, str(path))
    assert code == 1
    # The failure names the step and its time: the second tick evicts nobody (and publishes
    # nothing either: reclaim.reportInterval is 60s).
    assert f"{path}:11:28: one second later (t+1s): intents[0]: no intent matches {{kind: evict}}\n" in out
    assert "        there were no intents at all\n" in out


def test_schema_rejects_no_operations_false(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = suite(
        tmp_path,
        """
        cases:
          - name: x
            facts: FACTS
            expect: {noOperations: false}
        """,
    )
    code, _, err = run(capsys, str(path))
    assert code == 1
    assert f"{path}:6:28: error: false is not one of True" in err


def test_inline_state_counts_evictions_under_way(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Koordinator's pending-release credit from a previous tick's state: spark-exec-1 (12 GiB) is
    already being evicted, which covers the 8.96 GiB target, so nothing new is chosen."""
    path = suite(
        tmp_path,
        """
        cases:
          - name: credit from state
            facts: FACTS
            state:
              evicting:
                be-1: {since: 1699999999, rule: be-memory-evict, resource: memory, credit: 12884901888}
            expect:
              notIntents: [{kind: evict}]
              notFired: [be-memory-evict]
        """,
    )
    code, out, _ = run(capsys, str(path))
    assert code == 0, out


def test_state_from_an_eval_output_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["eval", "--facts", str(MEMORY_PRESSURE), "--output", "json"]) == 0
    (tmp_path / "previous.json").write_text(capsys.readouterr().out)
    path = suite(
        tmp_path,
        """
        cases:
          - name: next tick
            facts: FACTS
            patch: {time: 1700000001}
            state: previous.json
            expect: {notIntents: [{kind: evict}]}
        """,
    )
    code, out, _ = run(capsys, str(path))
    assert code == 0, out


def test_inline_facts_and_patch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    facts = json.dumps(read_facts(MEMORY_PRESSURE))
    path = suite(
        tmp_path,
        f"""
        cases:
          - name: inline facts below the threshold
            facts: {facts}
            patch: {{metrics: {{node: {{memory: {{usage_bytes: 47781511168}}}}}}}}
            expect: {{notFired: [be-memory-evict]}}
        """,
    )
    code, out, _ = run(capsys, str(path))
    assert code == 0, out


def test_policy_labels_and_paths_select_an_overlay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each case gets the policy of its own documents and node; a run builds each distinct pair once
    (engine/ruletest/runner.py Policies): the two cases on the labelled node share one build."""
    overlay = ROOT / "rules" / "examples" / "tighten-be-memory.yaml"
    path = suite(
        tmp_path,
        f"""
        policy:
          paths: [{overlay}]
          labels: {{node.example.com/pool: memory-heavy}}
        cases:
          - name: threshold 60
            facts: FACTS
            expect:
              intents: [{{conditions: [{{threshold: 60}}], release.formula: 68719476736 * (82 - 58) / 100}}]
          - name: threshold 60 again
            facts: FACTS
            expect: {{intents: [{{conditions: [{{threshold: 60}}]}}]}}
          - name: without the label the bundled 70 applies
            policy: {{labels: {{node.example.com/pool: other}}}}
            facts: FACTS
            expect:
              intents: [{{conditions: [{{threshold: 70}}]}}]
        """,
    )
    built: list[str] = []
    real = runner.build_policy

    def counting(docs: Any, node: Any) -> Any:
        built.append(node.labels.get("node.example.com/pool", ""))
        return real(docs, node)

    monkeypatch.setattr(runner, "build_policy", counting)
    code, out, _ = run(capsys, str(path))
    assert code == 0, out
    assert built == ["memory-heavy", "other"]


# ---------------------------------------------------------------- xfail, selection, exit codes


def test_xfail_that_passes_fails_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = suite(
        tmp_path,
        """
        cases:
          - name: fixed bug
            xfail: engine bug that was fixed
            facts: FACTS
            expect: {fired: [be-memory-evict]}
        """,
    )
    code, out, _ = run(capsys, str(path))
    assert code == 1
    assert "  XPASS fixed bug\n      known failure: engine bug that was fixed\n" in out
    assert "this case is marked xfail but passed; remove `xfail` if the bug is fixed" in out
    assert out.rstrip().endswith("0 passed, 1 passed unexpectedly (xpass)")


def test_run_selects_cases_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = suite(
        tmp_path,
        """
        cases:
          - name: alpha
            facts: FACTS
            expect: {noIntents: true}
          - name: beta
            facts: FACTS
            expect: {fired: [be-memory-evict]}
        """,
    )
    assert run(capsys, str(path), "--run", "^be")[0] == 0
    assert run(capsys, str(path), "--run", "alpha")[0] == 1
    code, _, err = run(capsys, str(path), "--run", "gamma")
    assert code == 2 and "no case name matches --run 'gamma'" in err
    code, _, err = run(capsys, str(path), "--run", "(")
    assert code == 2 and "is not a regular expression" in err


def test_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, str(tmp_path / "missing.yaml"))
    assert code == 2 and f"qosd: error: {tmp_path / 'missing.yaml'} does not exist" in err
    (tmp_path / "empty").mkdir()
    code, _, err = run(capsys, str(tmp_path / "empty"))
    assert code == 2 and "no RuleTest suites found" in err


def test_directories_skip_other_kinds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "facts.yaml").write_text(MEMORY_PRESSURE.read_text())
    suite(tmp_path, "cases: [{name: a, facts: FACTS, expect: {fired: [be-memory-evict]}}]\n")
    code, out, _ = run(capsys, str(tmp_path))
    assert code == 0 and "1 case(s) in 1 suite(s): 1 passed" in out
    # Named explicitly, a file that is not a suite is an error.
    code, _, err = run(capsys, str(tmp_path / "facts.yaml"))
    assert code == 1
    assert "expected a RuleTest suite, found kind 'FactsSnapshot'" in err


def test_policy_errors_are_case_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad-rules.yaml"
    bad.write_text(
        "apiVersion: qosd.io/v1alpha1\nkind: QoSPolicy\nmetadata: {name: bad}\nspec:\n"
        "  rules:\n    - name: r\n      when: {node.memory.usage_pct: {gte: 70}}\n      then: {notify: {}}\n"
    )
    path = suite(tmp_path, "policy: {paths: [bad-rules.yaml]}\ncases: [{name: a, facts: FACTS}]\n")
    code, out, _ = run(capsys, str(path))
    assert code == 1
    assert "  ERROR a\n" in out
    assert f"{bad}:7:14: error: unknown fact 'node.memory.usage_pct'" in out


# ---------------------------------------------------------------- located errors for bad suites

# (suite body, the text the error must point at, the message). FACTS becomes "mp.yaml".
BAD_SUITES = [
    ("cases: []\n", "[]", "this list needs at least 1 item; it is empty"),
    ("cases: [{name: a}]\n", "{name: a}", "missing required field 'facts'"),
    ("cases: [{name: a, facs: FACTS}]\n", "facs", "unknown field 'facs'"),
    ("cases: [{name: a, facts: nope.yaml}]\n", "nope.yaml", "facts file nope.yaml does not exist"),
    (
        "cases: [{name: a, facts: FACTS}, {name: b, facts: FACTS}, {name: a, facts: FACTS}]\n",
        "a, facts: mp.yaml}]",
        "duplicate case name 'a'",
    ),
    (
        "cases: [{name: a, facts: FACTS, expect: {intents: [{targt: x}]}}]\n",
        "targt",
        "intents have no field 'targt'",
    ),
    (
        "cases: [{name: a, facts: FACTS, expect: {operations: [{kind: evictPod, uid: x, grace: 1}]}}]\n",
        "grace",
        "operations have no field 'grace'",
    ),
    (
        "cases: [{name: a, facts: FACTS, expect: {intents: [{credit: {approx: lots}}]}}]\n",
        "lots",
        "approx needs a number or a quantity",
    ),
    (
        "cases: [{name: a, facts: FACTS, expect: {intents: [{rank: {gte: 1, x: 2}}]}}]\n",
        "{gte",
        "mixes matcher operators (gte) with field names (x)",
    ),
    (
        "cases: [{name: a, facts: FACTS, expect: {skipped: [{reason: {matches: '('}}]}}]\n",
        "'('",
        "not a regular expression",
    ),
    (
        "cases: [{name: a, facts: FACTS, expect: {intents: [{rank: {tolerance: 1}}]}}]\n",
        "tolerance",
        "tolerance only goes with approx",
    ),
    (
        "cases: [{name: a, facts: FACTS, patch: {workloads: {}}}]\n",
        "{}}",
        "the facts after this patch are invalid: expected a list, got an empty mapping",
    ),
    (
        "cases: [{name: a, facts: FACTS, state: {heldSince: {r: soon}}}]\n",
        "soon",
        'expected a number, got the string "soon"',
    ),
    (
        "cases: [{name: a, facts: FACTS, steps: [{at: 5 minutes}]}]\n",
        "5 minutes",
        '"5 minutes" is not valid here',
    ),
    ("cases: [{name: a, steps: [{at: 1s}]}]\n", "{at", "this step has no facts"),
    (
        "policy: {paths: [none.yaml]}\ncases: [{name: a, facts: FACTS}]\n",
        "none.yaml",
        "rule path none.yaml does not exist",
    ),
    (
        "cases:\n  - name: a\n    facts: FACTS\n    expect: {fired: bad}\n",
        "bad}",
        'expected a list, got the string "bad"',
    ),
]


def position(text: str, anchor: str) -> str:
    """line:column (1-based) of the first occurrence of ``anchor``."""
    index = text.index(anchor)
    line = text.count("\n", 0, index) + 1
    return f"{line}:{index - (text.rfind(chr(10), 0, index) + 1) + 1}"


@pytest.mark.parametrize(("body", "anchor", "message"), BAD_SUITES)
def test_bad_suites_give_located_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, anchor: str, message: str
) -> None:
    path = suite(tmp_path, body)
    code, out, err = run(capsys, str(path))
    assert code == 1
    assert f"{path}:{position(path.read_text(), anchor)}: error: {message}" in err, err
    assert out == ""  # nothing ran


# Names a suite can give a file, and what qosd must say (issue 14: a 300-character facts name was
# an OSError traceback). "DIR" and "FIFO" become a directory and a named pipe in tmp_path; reading a
# pipe would block the run, so it must be refused without opening it.
LONG = "0." + "0" * 300
NAMED_FILES = [
    ("facts", LONG, "is longer than the file system allows"),
    ("facts", "a\x00b.yaml", "holds a NUL byte"),
    ("facts", "DIR", "is a directory, not a file"),
    ("facts", "FIFO", "is not a regular file"),
    ("facts", "/dev/null", "is not a regular file"),
    ("facts", "mp.yaml/x", "does not exist"),
    ("state", LONG, "is longer than the file system allows"),
    ("state", "DIR", "is a directory, not a file"),
    ("state", "FIFO", "is not a regular file"),
    ("paths", LONG, "is longer than the file system allows"),
    ("paths", "FIFO", "is not a regular file"),
    ("paths", "a\x00b.yaml", "holds a NUL byte"),
]


@pytest.mark.parametrize(("field", "name", "why"), NAMED_FILES)
def test_every_file_a_suite_names_is_checked_where_it_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, name: str, why: str
) -> None:
    (tmp_path / "DIR").mkdir()
    os.mkfifo(tmp_path / "FIFO")
    quoted = json.dumps(name)
    if field == "facts":
        body = f"cases: [{{name: a, facts: {quoted}}}]\n"
    elif field == "state":
        body = f"cases: [{{name: a, facts: FACTS, state: {quoted}}}]\n"
    else:
        body = f"policy: {{paths: [{quoted}]}}\ncases: [{{name: a, facts: FACTS}}]\n"
    path = suite(tmp_path, body)
    code, out, err = run(capsys, str(path))
    assert code == 1, err
    assert out == "" and "Traceback" not in err
    at = f"{path}:{position(path.read_text(), quoted)}: error: "
    assert at in err and why in err, err
    assert len(err) < 2000  # a long name is cut, not repeated whole


def test_a_suite_path_the_os_refuses_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "/tmp/" + LONG)
    assert code == 2 and "is longer than the file system allows" in err


def test_bad_yaml_and_bad_facts_are_located(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: qosd.io/v1alpha1\nkind: RuleTest\ncases: [\n")
    code, _, err = run(capsys, str(broken))
    assert code == 1 and f"{broken}:4:1: error: YAML syntax error" in err
    facts = tmp_path / "facts.yaml"
    facts.write_text("node: {name: n, capacity: {cpu: '16x'}}\n")
    path = suite(tmp_path, "cases: [{name: a, facts: facts.yaml}]\n")
    code, _, err = run(capsys, str(path))
    assert code == 1 and f'{facts}:1:33: error: "16x" is not valid here: a Kubernetes quantity' in err


def test_bad_suite_in_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = suite(tmp_path, "cases: [{name: a, facs: FACTS}]\n")
    code, out, _ = run(capsys, str(path), "--output", "json")
    report = json.loads(out)
    assert code == 1 and report["passed"] is False
    assert {"line": 3, "column": 19, "message": "unknown field 'facs'"}.items() <= report["problems"][
        1
    ].items()


# ---------------------------------------------------------------- matching unit tests


@pytest.mark.parametrize(
    ("expected", "actual", "ok"),
    [
        (1, 1.0, True),
        ("12Gi", 12884901888.0, True),
        ("12Gi", 12884901888.0 + 1024, False),
        (True, 1, False),
        (None, None, True),
        ({"approx": "9Gi"}, 9620726743.04, True),
        ({"approx": "9Gi", "tolerance": "0.1%"}, 9620726743.04, False),
        ({"approx": 100, "tolerance": 5}, 104.9, True),
        ({"gte": 70, "lt": 80}, 79.5, True),
        ({"gt": "1Gi"}, 1073741824, False),
        ({"contains": "audit"}, "audit mode: reported, not executed", True),
        ({"contains": {"fact": "a", "met": True}}, [{"fact": "a", "met": True, "observed": 3}], True),
        ({"matches": "^dry run"}, "dry run: reported", True),
        ({"oneOf": ["BE", "LS"]}, "LS", True),
        ({"oneOf": ["BE", "LS"]}, "LSR", False),
        ({"absent": True}, None, True),
        ({"absent": False}, None, False),
        ([{"threshold": 70}], [{"threshold": 70, "observed": 82}], True),
        ([{"threshold": 70}], [{"threshold": 70}, {"threshold": 1}], False),
        ({"priority": 5000}, {"priority": 5000, "name": "x"}, True),
        (4000000, "4000000", True),
        (4000000, "max", False),
        ("4000000", 4000000, True),
    ],
)
def test_value_matches(expected: Any, actual: Any, ok: bool) -> None:
    assert value_matches(expected, actual) is ok


def test_resolve_prefers_literal_dotted_keys() -> None:
    entry = {"ranking": {"memory.usage": 5}, "release": {"target": 7}}
    assert resolve(entry, "release.target") == (True, 7)
    assert resolve(entry, "ranking.memory.usage") == (True, 5)
    assert resolve(entry, "release.missing") == (False, None)


def test_merge_patch_follows_rfc_7386() -> None:
    target = {"a": {"b": 1, "c": 2}, "l": [1, 2], "k": 1}
    assert merge_patch(target, {"a": {"b": 3, "c": None}, "l": [9], "n": {"x": 1}}) == {
        "a": {"b": 3},
        "l": [9],
        "k": 1,
        "n": {"x": 1},
    }
    assert target == {"a": {"b": 1, "c": 2}, "l": [1, 2], "k": 1}


# ---------------------------------------------------------------- Evaluation JSON schema


def test_published_schemas_are_valid_json_schema() -> None:
    for name in ("evaluation.schema.json", "ruletest.schema.json"):
        Draft202012Validator.check_schema(json.loads((ROOT / "schemas" / name).read_text()))


EVAL_RUNS = [
    ("memory-pressure", ["--facts", str(SNAPSHOTS / "memory-pressure.yaml")]),
    ("quiet-node", ["--facts", str(SNAPSHOTS / "quiet-node.yaml")]),
    ("numa-watermark", ["--facts", str(SNAPSHOTS / "numa-watermark-pressure.yaml")]),
    ("psi-taint", ["--facts", str(SNAPSHOTS / "system-memory-psi.yaml")]),
    ("terminating", ["--facts", str(SNAPSHOTS / "be-memory-terminating.yaml")]),
    (
        "protected",
        [
            "--facts",
            str(SNAPSHOTS / "protected-class.yaml"),
            "--rules",
            str(ROOT / "rules/examples/named-cpuset-pool.yaml"),
        ],
    ),
    (
        "audit",
        [
            "--facts",
            str(SNAPSHOTS / "canary-be-memory.yaml"),
            "--rules",
            str(ROOT / "rules/examples/canary-audit.yaml"),
        ],
    ),
    ("dry-run", ["--facts", str(SNAPSHOTS / "memory-pressure.yaml"), "--dry-run"]),
    ("burst", ["--facts", str(SNAPSHOTS / "memory-pressure.yaml"), "--eviction-burst", "1"]),
]


def eval_json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, Any]:
    assert cli_main(["eval", *argv, "--output", "json"]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def test_cgroup_intents_validate_and_match(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """setCgroup intents and writeCgroup operations: in the schema, and matchable by field."""
    facts = read_facts(MEMORY_PRESSURE)
    for w in facts["workloads"]:
        w["cgroupPath"] = f"kubepods/burstable/pod{w['uid']}"
        for c in w["containers"]:  # the burst is per container, the pod's is their sum
            c["cgroupPath"] = f"{w['cgroupPath']}/{c['name']}"
    (tmp_path / "facts.json").write_text(json.dumps(facts))
    (tmp_path / "burst.yaml").write_text(
        "apiVersion: qosd.io/v1alpha1\nkind: QoSPolicy\nmetadata: {name: burst-on}\nspec:\n"
        "  priority: 10\n  nodeSelector: {matchLabels: {qosd.io/profile: koordinator}}\n"
        "  rules:\n    - {name: cpu-burst, enabled: true}\n    - {name: be-cpu-suppress, enabled: false}\n"
    )
    doc = eval_json(
        capsys, ["--facts", str(tmp_path / "facts.json"), "--rules", str(tmp_path / "burst.yaml")]
    )
    assert list(evaluation_validator().iter_errors(doc)) == []
    path = suite(
        tmp_path,
        """
        policy: {paths: [burst.yaml]}
        cases:
          - name: burst for LS
            facts: facts.json
            expect:
              intents:
                - {kind: cgroup, file: cpu.cfs_burst_us, value: "4000000", pod: shop/frontend, rule: cpu-burst}
                - {kind: cgroup, file: cpu.cfs_burst_us, value: "4000000", pod: shop/frontend, rule: cpu-burst}
              notIntents: [{kind: cgroup, file: cpu.cfs_burst_us}]
              operations:
                - {kind: writeCgroup, path: kubepods/burstable/podls-1/web, file: cpu.cfs_burst_us, value: "4000000"}
                - {kind: writeCgroup, path: kubepods/burstable/podls-1, file: cpu.cfs_burst_us, value: "4000000"}
            """,
    )
    code, out, _ = run(capsys, str(path))
    assert code == 0, out


@pytest.mark.parametrize(("label", "argv"), EVAL_RUNS, ids=[r[0] for r in EVAL_RUNS])
def test_real_eval_output_matches_the_evaluation_schema(
    capsys: pytest.CaptureFixture[str], label: str, argv: list[str]
) -> None:
    doc = eval_json(capsys, argv)
    schema = json.loads((ROOT / "schemas" / "evaluation.schema.json").read_text())
    errors = [f"{e.json_path}: {e.message}" for e in Draft202012Validator(schema).iter_errors(doc)]
    assert errors == []
    assert doc["kind"] == "Evaluation" and doc["apiVersion"] == "qosd.io/v1alpha1"
    if label in ("audit", "dry-run", "burst"):
        assert doc["held"], "these runs exist to cover held entries"


def test_evaluation_schema_rejects_damaged_documents(capsys: pytest.CaptureFixture[str]) -> None:
    doc = eval_json(capsys, EVAL_RUNS[0][1])
    validator = evaluation_validator()
    damaged = [
        ("intents", 0, "rank"),
        ("intents", 0, "provenance", "mode"),
        ("operations", 0, "uid"),
        ("state", "evicting", "be-3", "credit"),
        ("policy", "hash"),
    ]
    for path in damaged:
        broken = json.loads(json.dumps(doc))
        node: Any = broken
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = "garbage" if path[-1] != "uid" else 7
        assert list(validator.iter_errors(broken)), path
    extra = json.loads(json.dumps(doc))
    extra["intents"][0]["surprise"] = 1
    assert list(validator.iter_errors(extra))


# ---------------------------------------------------------------- engine bugs found by the suites


def _ticks(facts: dict[str, Any], times: list[float], gone_after_first: set[str]) -> list[list[str]]:
    """Evictions per tick: the snapshot at each time, without ``gone_after_first`` pods after t0."""
    snap = snapshot_from_dict(facts)
    engine = Engine(build_policy(load_documents([]), snap.node))
    state = EngineState()
    out = []
    for i, t in enumerate(times):
        data = dict(facts, time=t)
        if i:
            data["workloads"] = [w for w in facts["workloads"] if w["uid"] not in gone_after_first]
        tick = run_tick(engine, snapshot_from_dict(data), state, Guards())
        state = tick.state
        out.append([op.name for op in tick.plan.operations if op.kind == "evictPod"])  # type: ignore[union-attr]
    return out


def test_engine_honours_evict_cooldown() -> None:
    ticks = _ticks(read_facts(MEMORY_PRESSURE), [1700000000, 1700000002], {"be-1", "be-3"})
    assert ticks[0] == ["etl-small", "spark-exec-1"]
    assert ticks[1] == []  # within the 4s cool time


def test_engine_takes_one_victim_per_pressured_numa_node() -> None:
    ticks = _ticks(read_facts(SNAPSHOTS / "numa-watermark-pressure.yaml"), [1700000000], set())
    assert ticks[0] == ["etl"]


@pytest.mark.parametrize(
    ("body", "anchor"),
    [
        # the suite's policy: selects nothing (no built-ins, no paths)
        ("policy: {builtin: false}\ncases: [{name: a, facts: FACTS}]\n", "policy"),
        # the case's own policy: overrides the suite's and selects nothing
        ("cases:\n  - name: a\n    facts: FACTS\n    policy: {builtin: false}\n", "policy"),
    ],
)
def test_no_policy_for_the_node_points_at_the_policy_that_chose_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, anchor: str
) -> None:
    """Issue 14: this was reported at the node name, line 0, path $."""
    path = suite(tmp_path, body)
    code, out, _ = run(capsys, str(path))
    assert code == 1
    at = f"{path}:{position(path.read_text(), anchor)}: error: no policy document applies to node"
    assert at in out and "see also" not in out, out
    code, out, _ = run(capsys, str(path), "--output", "json")
    problems = [p for case in json.loads(out)["cases"] for p in case["problems"]]
    assert problems and all(p["line"] for p in problems), problems
