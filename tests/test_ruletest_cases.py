"""qosd test: what a case can say about itself (the anchor test it ports, an inline policy overlay) and
how results are counted (pass / fail / xfail / xpass per suite and per directory)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.ruletest.options import main
from tests.test_ruletest import suite as write_suite


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------- anchor


ANCHORED = """
metadata: {name: anchored}
anchor: {repo: koordinator-sh/koordinator, file: pkg/koordlet/x_test.go, function: Test_memoryEvict}
cases:
  - name: evicts
    anchor: {case: "evict BE pods"}
    facts: FACTS
    expect:
      intents: [{kind: evict, target: batch/etl-small}]
  - name: wrong victim
    anchor: {case: 3, function: Test_other}
    facts: FACTS
    expect:
      intents: [{kind: evict, target: batch/nobody}]
"""


def test_anchor_is_shown_next_to_failures_and_in_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_suite(tmp_path, ANCHORED)
    code, out, _ = run(capsys, str(path))
    assert code == 1
    lines = out.splitlines()
    fail = lines.index("  FAIL  wrong victim")
    # The case overrides the suite's function and adds the table case; a passing case prints no anchor.
    assert lines[fail + 1] == "      anchor: koordinator-sh/koordinator pkg/koordlet/x_test.go Test_other case '3'"
    assert lines[lines.index("  PASS  evicts") + 1].startswith("  FAIL")
    code, out, _ = run(capsys, str(path), "--output", "json")
    cases = {c["name"]: c for c in json.loads(out)["cases"]}
    assert cases["evicts"]["anchor"] == {
        "repo": "koordinator-sh/koordinator",
        "file": "pkg/koordlet/x_test.go",
        "function": "Test_memoryEvict",
        "case": "evict BE pods",
    }
    assert cases["wrong victim"]["anchor"]["function"] == "Test_other"


@pytest.mark.parametrize(
    ("suite_anchor", "case_anchor", "message"),
    [
        # Located at the case's anchor when the case gives one, else at the suite's.
        ("{repo: a/b, file: x_test.go}", "{case: one}", "7:5: error: the anchor lacks function"),
        ("{repo: a/b}", None, "4:1: error: the anchor lacks file, function"),
        # Schema checks: an unknown key, a repo that is not owner/name.
        (None, "{repo: a/b, file: f, function: T, line: 3}", "unknown field 'line'"),
        (None, "{repo: koordinator, file: f, function: T}", '"koordinator" is not valid here'),
    ],
)
def test_bad_anchor_is_a_located_suite_error(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    suite_anchor: str | None,
    case_anchor: str | None,
    message: str,
) -> None:
    body = "metadata: {name: a}\n"
    body += f"anchor: {suite_anchor}\n" if suite_anchor else ""
    body += "cases:\n  - name: one\n"
    body += f"    anchor: {case_anchor}\n" if case_anchor else ""
    body += "    facts: FACTS\n    expect: {fired: [be-memory-evict]}\n"
    path = write_suite(tmp_path, body)
    code, out, err = run(capsys, str(path))
    assert code == 1 and out == ""
    assert f"{path}:" in err and message in err, err


# ---------------------------------------------------------------- inline overlay


def test_inline_overlay_applies_to_its_case_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same facts: the overlaid case does not evict, its neighbours (before and after) do."""
    path = write_suite(
        tmp_path,
        """
        metadata: {name: overlays}
        cases:
          - name: before
            facts: FACTS
            expect: {fired: [be-memory-evict]}
          - name: a spec overlay switches the rule off
            facts: FACTS
            overlay:
              rules: [{name: be-memory-evict, enabled: false}]
            expect: {notIntents: [{kind: evict}], notFired: [be-memory-evict]}
          - name: a document overlay tunes one parameter
            facts: FACTS
            overlay:
              - apiVersion: qosd.io/v1alpha1
                kind: QoSPolicy
                metadata: {name: one-victim}
                spec:
                  rules: [{name: be-memory-evict, then: {evict: {maxPerRound: 1}}}]
            expect:
              intents: [{kind: evict, target: batch/etl-small}]
              notIntents: [{kind: evict}]
          - name: after
            facts: FACTS
            expect:
              intents: [{kind: evict, target: batch/etl-small}, {kind: evict, target: batch/spark-exec-1}]
        """,
    )
    code, out, _ = run(capsys, str(path))
    assert code == 0, out
    assert out.count("  PASS ") == 4


def test_inline_overlay_wins_over_the_suite_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file in policy.paths sets maxPerRound 1 at priority 50; the case's overlay (no priority)
    still wins: the overlay is the top layer, so no equal-priority conflict either."""
    (tmp_path / "one.yaml").write_text(
        "apiVersion: qosd.io/v1alpha1\nkind: QoSPolicy\nmetadata: {name: one}\n"
        "spec:\n  priority: 50\n  rules: [{name: be-memory-evict, then: {evict: {maxPerRound: 1}}}]\n",
        encoding="utf-8",
    )
    path = write_suite(
        tmp_path,
        """
        metadata: {name: layered}
        policy: {paths: [one.yaml]}
        cases:
          - name: file alone
            facts: FACTS
            expect: {intents: [{kind: evict}], notIntents: [{kind: evict}]}
          - name: overlay on top
            facts: FACTS
            overlay: {rules: [{name: be-memory-evict, then: {evict: {maxPerRound: 3}}}]}
            expect: {intents: [{kind: evict}, {kind: evict}]}
        """,
    )
    code, out, _ = run(capsys, str(path))
    assert code == 0, out


def test_a_suite_overlay_applies_to_every_case_and_a_case_overlay_above_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The suite's overlay sets maxPerRound 1 for all cases (also under a case's own `policy`); a
    case's overlay sets it back to 3 at the same (default) priority without an equal-priority
    conflict, because a case's overlay is the layer above its suite's."""
    path = write_suite(
        tmp_path,
        """
        metadata: {name: suite-overlay}
        overlay: {rules: [{name: be-memory-evict, then: {evict: {maxPerRound: 1}}}]}
        cases:
          - name: suite overlay
            facts: FACTS
            expect: {intents: [{kind: evict}], notIntents: [{kind: evict}]}
          - name: suite overlay under the case's policy
            policy: {labels: {team: a}}
            facts: FACTS
            expect: {intents: [{kind: evict}], notIntents: [{kind: evict}]}
          - name: case overlay above it
            facts: FACTS
            overlay: {rules: [{name: be-memory-evict, then: {evict: {maxPerRound: 3}}}]}
            expect: {intents: [{kind: evict}, {kind: evict}]}
        """,
    )
    code, out, _ = run(capsys, str(path))
    assert code == 0, out


@pytest.mark.parametrize(
    ("overlay", "position", "message"),
    [
        ("{rulez: []}", "7:15", "unknown field 'rulez'"),
        (
            "{rules: [{name: be-memory-evict, when: {node.memory.usage_pct: {gte: 1}}}]}",
            "7:54",
            "unknown fact 'node.memory.usage_pct'",
        ),
        (
            "[{apiVersion: qosd.io/v1alpha1, kind: QoSPolicy, metadata: {name: x}, "
            "spec: {rules: [{name: be-memory-evict, then: {evict: {maxPerRound: x}}}]}}]",
            "7:151",
            'expected an integer, got the string "x"',
        ),
    ],
)
def test_bad_inline_overlay_is_located_in_the_suite_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], overlay: str, position: str, message: str
) -> None:
    path = write_suite(
        tmp_path,
        f"""
        metadata: {{name: bad}}
        cases:
          - name: bad overlay
            facts: FACTS
            overlay: {overlay}
            expect: {{fired: [be-memory-evict]}}
        """,
    )
    code, out, _ = run(capsys, str(path))
    assert code == 1
    assert "  ERROR bad overlay" in out
    assert f"{path}:{position}: error: {message}" in out, out


def test_overlay_schema_refuses_scalars_and_empty(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_suite(
        tmp_path,
        """
        cases:
          - name: scalar
            facts: FACTS
            overlay: be-memory-evict
          - name: empty
            facts: FACTS
            overlay: []
        """,
    )
    code, out, err = run(capsys, str(path))
    assert code == 1 and out == ""
    assert f"{path}:6:14: error:" in err and f"{path}:9:14: error:" in err, err
