"""qosd test's report (issue 18): a result table like `kyverno test`, counts of pass / fail / xfail /
xpass per suite and per directory, rule coverage, `--junit FILE` (JUnit XML for CI), `-o json|yaml|text`."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.ruletest.options import main
from tests.qosdcli import shipped_rule_tests
from tests.test_ruletest import suite

ROOT = Path(__file__).resolve().parent.parent

# One of each result: pass, fail, xfail (a case that fails as marked), xpass (marked, but passes),
# error (a policy path that does not parse).
MIXED = """
metadata: {name: mixed}
anchor: {repo: kubewharf/katalyst-core, file: pkg/evict_test.go, function: TestEvict}
cases:
  - name: passes
    facts: FACTS
    expect: {fired: [be-memory-evict]}
  - name: fails
    anchor: {case: wrong victim}
    facts: FACTS
    expect: {intents: [{kind: evict, target: batch/nobody}]}
  - name: known gap
    xfail: qosd ranks by usage, the anchor by request
    facts: FACTS
    expect: {intents: [{kind: evict, target: batch/nobody}]}
  - name: fixed gap
    xfail: was broken
    facts: FACTS
    expect: {fired: [be-memory-evict]}
  - name: broken policy
    policy: {paths: [broken.yaml]}
    facts: FACTS
    expect: {fired: [be-memory-evict]}
"""
PASSING = """
metadata: {name: passing}
cases:
  - name: one
    facts: FACTS
    expect: {notFired: [be-cpu-suppress]}
"""


def write_suite(directory: Path, body: str) -> Path:
    """A suite (tests/test_ruletest.py's), next to broken.yaml, a policy whose rule's `when` is a number."""
    path = suite(directory, body)
    (directory / "broken.yaml").write_text(
        "apiVersion: qosd.io/v1alpha1\nkind: QoSPolicy\nmetadata: {name: b}\nspec: {rules: [{name: x, when: 3}]}\n"
    )
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def two_directories(tmp_path: Path) -> tuple[Path, Path, Path]:
    mixed = write_suite(tmp_path / "koordinator", MIXED)
    passing = write_suite(tmp_path / "katalyst", PASSING)
    return tmp_path, mixed, passing


def test_text_has_a_result_table_counts_per_directory_and_coverage(
    two_directories: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root, _, _ = two_directories
    code, out, _ = run(capsys, str(root))
    assert code == 1
    sections = out.split("\n\n")
    table = sections[1].splitlines()
    assert table[0].split() == ["SUITE", "CASE", "RESULT", "REASON"]
    rows = {re.split(r"  +", line)[1]: line for line in table[1:]}
    assert rows["passes"].split()[-1] == "PASS"
    assert "FAIL    intents[0]: no intent matches {kind: evict, target: batch/nobody}" in rows["fails"]
    assert "XFAIL   xfail: qosd ranks by usage, the anchor by request" in rows["known gap"]
    assert "XPASS   xfail: was broken (but it passed: remove xfail)" in rows["fixed gap"]
    assert "ERROR   " in rows["broken policy"]
    assert sections[2].splitlines() == [
        f"{root / 'katalyst'}: 1 case(s) in 1 suite(s): 1 passed",
        f"{root / 'koordinator'}: 5 case(s) in 1 suite(s): 1 passed, 1 failed, 1 errored, "
        "1 expected to fail (xfail), 1 passed unexpectedly (xpass)",
    ]
    coverage, summary = sections[3].splitlines()
    assert coverage.startswith("rule coverage: ") and " rules fired in some case (" in coverage
    # The facts have no node CPU usage, so the suppress rule never fires; nor does the Koordinator
    # profile's cpu-burst, off by default, whose whenDisabled reset acts on LS pods the facts lack.
    assert coverage.endswith("; never fired: be-cpu-suppress, cpu-burst")
    assert "be-memory-evict" not in coverage.split("never fired: ")[1].split(", ")
    assert summary == (
        "6 case(s) in 2 suite(s): 2 passed, 1 failed, 1 errored, 1 expected to fail (xfail), "
        "1 passed unexpectedly (xpass)"
    )


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_json_and_yaml_count_per_suite_and_directory(
    two_directories: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], output: str
) -> None:
    root, mixed, _ = two_directories
    code, out, _ = run(capsys, str(root), "-o", output)
    assert code == 1
    report: dict[str, Any] = json.loads(out) if output == "json" else yaml.safe_load(out)
    assert report["kind"] == "RuleTestReport" and report["passed"] is False
    assert report["summary"] == {"suites": 2, "cases": 6, "pass": 2, "fail": 1, "error": 1, "xfail": 1, "xpass": 1}
    suites = {s["suite"]: s for s in report["bySuite"]}
    assert suites["mixed"] == {
        "source": str(mixed),
        "suite": "mixed",
        "cases": 5,
        "pass": 1,
        "fail": 1,
        "error": 1,
        "xfail": 1,
        "xpass": 1,
    }
    assert suites["passing"]["pass"] == 1 and suites["passing"]["cases"] == 1
    assert [d["directory"] for d in report["byDirectory"]] == [str(root / "katalyst"), str(root / "koordinator")]
    assert report["byDirectory"][0] == {
        "directory": str(root / "katalyst"),
        "suites": 1,
        "cases": 1,
        "pass": 1,
        "fail": 0,
        "error": 0,
        "xfail": 0,
        "xpass": 0,
    }
    cov = report["coverage"]
    assert cov["neverFired"] == ["be-cpu-suppress", "cpu-burst"] and cov["fired"] == cov["rules"] - 2
    assert "be-memory-evict" not in cov["neverFired"]
    assert {s["suite"] for s in cov["bySuite"]} == {"mixed", "passing"}
    # The passing suite's one case fired be-memory-evict; its own coverage says so.
    [own] = [s for s in cov["bySuite"] if s["suite"] == "passing"]
    assert "be-memory-evict" not in own["neverFired"] and own["rules"] == cov["rules"]
    cases = {c["name"]: c for c in report["cases"]}
    assert cases["fails"]["anchor"]["case"] == "wrong victim"
    assert cases["passes"]["anchor"]["case"] is None


def test_junit_report(two_directories: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    root, mixed, _ = two_directories
    junit = root / "report.xml"
    code, out, _ = run(capsys, str(root), "--junit", str(junit))
    assert code == 1 and "rule coverage" in out
    tree = ET.parse(junit)
    top = tree.getroot()
    assert top.tag == "testsuites"
    assert {k: top.get(k) for k in ("tests", "failures", "errors", "skipped")} == {
        "tests": "6",
        "failures": "2",  # fail and xpass
        "errors": "1",
        "skipped": "1",  # xfail
    }
    suites = {s.get("name"): s for s in top.findall("testsuite")}
    assert set(suites) == {"mixed", "passing"}
    assert suites["mixed"].get("file") == str(mixed) and suites["mixed"].get("tests") == "5"
    cases = {c.get("name"): c for c in suites["mixed"].findall("testcase")}
    assert all(c.get("classname") == "mixed" and c.get("file") == str(mixed) for c in cases.values())
    assert [child.tag for child in cases["passes"]] == ["properties"]
    [failure] = cases["fails"].findall("failure")
    assert failure.get("type") == "fail"
    assert (failure.get("message") or "").startswith("intents[0]: no intent matches")
    assert f"{mixed}:" in (failure.text or "")
    props = {p.get("name"): p.get("value") for p in cases["fails"].iter("property")}
    assert props == {
        "anchor.repo": "kubewharf/katalyst-core",
        "anchor.file": "pkg/evict_test.go",
        "anchor.function": "TestEvict",
        "anchor.case": "wrong victim",
    }
    [skipped] = cases["known gap"].findall("skipped")
    assert skipped.get("message") == "xfail: qosd ranks by usage, the anchor by request"
    assert cases["fixed gap"].find("failure") is not None
    assert cases["fixed gap"].find("failure").get("type") == "xpass"  # type: ignore[union-attr]
    assert cases["broken policy"].find("error") is not None
    assert int(cases["fails"].get("line") or 0) > 0


def test_junit_of_malformed_suites_lists_their_problems(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_suite(tmp_path, "cases: [{name: a}]\n")
    junit = tmp_path / "report.xml"
    code, _, err = run(capsys, str(path), "--junit", str(junit))
    assert code == 1 and "error:" in err
    top = ET.parse(junit).getroot()
    assert top.get("errors") == "1" and top.get("tests") == "1"
    [case] = top.iter("testcase")
    [error] = case.findall("error")
    assert case.get("file") == str(path) and error.get("type") == "invalid suite"


def test_junit_to_an_unwritable_place_is_a_usage_error(
    two_directories: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root, _, passing = two_directories
    code, _, err = run(capsys, str(passing), "--junit", str(root / "no" / "such" / "dir" / "r.xml"))
    assert code == 2
    assert err.startswith("qosd: error: --junit ") and "No such file or directory" in err


def test_examples_cover_most_rules() -> None:
    """The shipped suites exercise the bundled rules; coverage names the ones no case fires."""
    proc = shipped_rule_tests("--output", "json")  # the run tests/test_ruletest.py reads too
    assert proc.returncode == 0
    cov = json.loads(proc.stdout)["coverage"]
    assert cov["rules"] >= 10 and cov["fired"] >= cov["rules"] // 2
