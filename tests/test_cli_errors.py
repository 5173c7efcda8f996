"""Errors you can act on (issue 18): each case runs ``qosd`` as an operator would, in a subprocess where
the case is about the streams (what reaches stdout, what reaches stderr, standard input), otherwise
through ``engine.cli.main`` in this interpreter (tests/qosdcli.qosd_in_process), which checks the
same exit code and report without a second of interpreter start-up.

- an error found on one kind of node names it (profile and labels), in text and in JSON;
- JSON paths index the document the line:col points into, not the merged policy;
- one run reports every problem: a fact-name typo next to schema errors in the same file, and the
  other files' errors next to one file's YAML syntax error;
- diagnostics go to stderr and results to stdout, the same for every command; every problems
  report (JSON or YAML) has ``valid``, ``summary`` and ``problems``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import policy_text
from tests.qosdcli import qosd, qosd_in_process

ROOT = Path(__file__).resolve().parent.parent


# Valid on the Katalyst profile (which defines reclaimed_cores), broken on the Koordinator one.
KATALYST_ONLY = policy_text(
    """
    priority: 10
    rules:
      - name: team-evict
        when: {node.memory.usage_percent: {gte: 95}}
        then: {evict: {victims: {classes: [reclaimed_cores]}, release: {lowerPercent: 90}}}
    """,
    name="team",
)


def test_an_error_of_one_node_variant_names_it_in_text(tmp_path: Path) -> None:
    f = tmp_path / "team.yaml"
    f.write_text(KATALYST_ONLY)
    proc = qosd("validate", str(f))
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.splitlines()
    first = lines.index(next(ln for ln in lines if "class 'reclaimed_cores' is not defined" in ln))
    assert lines[first].startswith(f"{f}:9:42: error: ")
    assert lines[first + 1] == "  on: profile koordinator (nodes labelled qosd.io/profile=koordinator)"
    assert proc.stdout == ""


def test_an_error_of_one_node_variant_names_it_in_json(tmp_path: Path) -> None:
    f = tmp_path / "team.yaml"
    f.write_text(KATALYST_ONLY)
    proc = qosd_in_process("validate", "-o", "json", str(f))
    report = json.loads(proc.stdout)
    (problem,) = report["problems"]
    assert problem["variants"] == [{"labels": {"qosd.io/profile": "koordinator"}, "profile": "koordinator"}]
    assert proc.returncode == 1 and report["valid"] is False


def test_an_error_of_every_variant_names_none(tmp_path: Path) -> None:
    f = tmp_path / "team.yaml"
    f.write_text(KATALYST_ONLY.replace("reclaimed_cores", "nobody"))
    proc = qosd_in_process("validate", "-o", "json", str(f))
    (problem,) = json.loads(proc.stdout)["problems"]
    assert problem["message"] == "class 'nobody' is not defined"
    assert problem["variants"] == []


def test_json_paths_index_the_users_document_not_the_merged_policy(tmp_path: Path) -> None:
    """The built-in layer holds many rules before the overlay's one: the merged index was
    $.spec.rules[N] with N > 0, while line:col pointed into the overlay, whose only rule is [0]."""
    f = tmp_path / "team.yaml"
    f.write_text(
        policy_text(
            """
            priority: 10
            rules:
              - name: be-memory-evict
                when: {node.memory.usage_percent: {gte: 80}}
                then: {evict: {victims: {classes: [nobody]}}}
            """,
            name="team",
        )
    )
    proc = qosd_in_process("validate", "--profile", "koordinator", "-o", "json", str(f))
    problems = json.loads(proc.stdout)["problems"]
    mine = [p for p in problems if p["source"] == str(f)]
    assert mine, problems
    for p in mine:
        assert p["path"].startswith("$.spec.rules[0]"), p
    assert any(p["path"] == "$.spec.rules[0].then.evict.victims.classes[0]" for p in mine), mine


def test_a_fact_typo_is_reported_with_the_schema_errors_of_its_file(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(
        policy_text(
            """
            rules:
              - name: r
                when: {all: [{node.memory.usage_pct: {gte: "70"}}, {not: {node.cpu.usage_percnt: {gte: 1}}}]}
                then: {notify: {}}
            """
        )
    )
    proc = qosd_in_process("validate", "--no-builtin", str(f))
    assert proc.returncode == 1
    assert "unknown fact 'node.memory.usage_pct'" in proc.stderr
    assert "did you mean 'node.memory.usage_percent'" in proc.stderr
    assert "unknown fact 'node.cpu.usage_percnt'" in proc.stderr
    assert 'expected a number, got the string "70"' in proc.stderr


def test_one_yaml_syntax_error_does_not_hide_the_other_files(tmp_path: Path) -> None:
    (tmp_path / "a-broken.yaml").write_text("apiVersion: qosd.io/v1alpha1\nmetadata: {name: b\n")
    (tmp_path / "b-schema.yaml").write_text(
        policy_text(
            "rules: [{name: r, when: {node.cpu.usage_percent: {gte: 70}}, then: {notify: {reason: 5}}}]"
        )
    )
    (tmp_path / "c-fact.yaml").write_text(
        policy_text("rules: [{name: q, when: {node.cpu.usage_pct: {gte: 70}}, then: {notify: {}}}]", name="c")
    )
    proc = qosd_in_process("validate", "--no-builtin", "-o", "json", str(tmp_path))
    report = json.loads(proc.stdout)
    by_file = {Path(p["source"]).name: p["message"] for p in report["problems"]}
    assert by_file["a-broken.yaml"].startswith("YAML syntax error")
    assert by_file["b-schema.yaml"] == "expected a string, got the number 5"
    assert by_file["c-fact.yaml"] == "unknown fact 'node.cpu.usage_pct'"
    assert proc.returncode == 1
    assert "checks across documents" in report["summary"]


def test_a_yaml_error_report_has_a_summary_like_every_other(tmp_path: Path) -> None:
    f = tmp_path / "dup.yaml"
    f.write_text("a: 1\na: 2\n")
    for output in ("json", "yaml"):
        proc = qosd("validate", "-o", output, str(f))
        report = json.loads(proc.stdout) if output == "json" else yaml.safe_load(proc.stdout)
        assert {"valid", "summary", "problems"} <= set(report)
        assert report["summary"].startswith("1 error") and report["valid"] is False
        assert proc.stderr == "" and proc.returncode == 1


def test_validate_reads_standard_input(tmp_path: Path) -> None:
    proc = qosd(
        "validate",
        "--no-builtin",
        "-",
        stdin=policy_text("rules: [{name: r, when: {x.y: {gte: 1}}, then: {notify: {}}}]"),
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith("<stdin>:5:"), proc.stderr
    assert "unknown fact 'x.y'" in proc.stderr


BROKEN = "apiVersion: qosd.io/v1alpha1\nkind: QoSPolicy\nmetadata: {name: b\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["validate", "{rules}"],
        ["render", "--node", "{node}", "{rules}"],
        ["eval", "--facts", "examples/snapshots/quiet-node.yaml", "{rules}"],
        ["simulate", "--trace", "examples/traces/tidal-day.yaml", "--rules", "{rules}"],
    ],
    ids=lambda a: a[0],
)
@pytest.mark.parametrize("output", ["text", "json", "yaml"])
def test_diagnostics_on_stderr_reports_on_stdout_for_every_command(
    tmp_path: Path, argv: list[str], output: str
) -> None:
    """A broken rule file: text output puts the located problem on stderr and nothing on stdout;
    json and yaml put the same report, with its summary, on stdout and nothing on stderr."""
    rules = tmp_path / "broken.yaml"
    rules.write_text(BROKEN)
    node = tmp_path / "node.yaml"
    node.write_text(
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {capacity: {cpu: '8', memory: 32Gi}}\n"
    )
    args = [a.format(rules=rules, node=node) for a in argv]
    proc = qosd(*args, "-o", output)
    assert proc.returncode == 1, proc.stderr
    if output == "text":
        assert proc.stdout == ""
        assert f"{rules}:4:1: error: YAML syntax error" in proc.stderr
        last = proc.stderr.rstrip().splitlines()[-1]
        assert last.startswith("1 error") and ("found" in last or argv[0] == "validate"), last
    else:
        report = json.loads(proc.stdout) if output == "json" else yaml.safe_load(proc.stdout)
        assert report["summary"].startswith("1 error") and report["valid"] is False
        assert report["problems"][0]["source"] == str(rules)
        assert proc.stderr == ""


def test_a_valid_validate_prints_its_summary_on_stdout(tmp_path: Path) -> None:
    proc = qosd("validate")
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout == "valid: 2 document(s) from 2 file(s)\n"


def test_fact_names_are_checked_in_a_document_of_any_shape(tmp_path: Path) -> None:
    """Found by the loader property test: classes rendered to a number next to a schema error."""
    f = tmp_path / "odd.yaml"
    f.write_text(
        policy_text(
            """
            classes: "{{ node.cpus }}"
            rules: [{name: r, when: {node.cpu.usage_pct: {gte: 1}}, then: {notify: {}}}]
            """
        )
    )
    proc = qosd_in_process("validate", "--no-builtin", str(f))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "unknown fact 'node.cpu.usage_pct'" in proc.stderr
