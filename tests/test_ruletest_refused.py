"""qosd test: a case that expects its policy refused (`refused`), the anchors' error cases (a share
count of 0, a weight of 10001), and an xfail case whose policy is refused."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from engine.ruletest.options import main

FACTS = """
facts:
  node: {name: n, capacity: {cpu: 4, memory: 8589934592}}
"""


def run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, cases: str
) -> tuple[int, list[dict[str, object]]]:
    path = tmp_path / "suite.yaml"
    body = "apiVersion: qosd.io/v1alpha1\nkind: RuleTest\nmetadata: {name: s}\npolicy: {profile: koordinator}\ncases:\n"
    path.write_text(body + textwrap.indent(textwrap.dedent(cases).strip("\n"), "  ") + "\n", encoding="utf-8")
    code = main([str(path), "--output", "json"])
    out, _ = capsys.readouterr()
    return code, json.loads(out)["cases"]


def case(name: str, overlay: str, tail: str) -> str:
    return f"- name: {name}\n  overlay: {overlay}\n" + textwrap.indent(FACTS.strip("\n"), "  ") + "\n" + tail


def test_a_refusal_that_matches_passes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, cases = run(
        capsys,
        tmp_path,
        case(
            "shares 0",
            "{classes: [{name: LS, cpu: {shares: 0}}]}",
            '  refused: [{message: {contains: "cpu.shares 0 is outside"}, path: {contains: cpu.shares}}]\n',
        ),
    )
    assert code == 0 and [c["result"] for c in cases] == ["pass"]


@pytest.mark.parametrize(
    ("overlay", "refused", "why"),
    [
        # the policy builds: a refusal was expected
        (
            "{classes: [{name: LS, cpu: {shares: 2}}]}",
            "[{message: {contains: outside}}]",
            "the policy was built",
        ),
        # refused, but not for the expected reason
        (
            "{classes: [{name: LS, cpu: {shares: 0}}]}",
            "[{message: {contains: weight}}]",
            "no problem of the refusal matches",
        ),
    ],
)
def test_a_refusal_that_does_not_match_fails(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, overlay: str, refused: str, why: str
) -> None:
    code, cases = run(capsys, tmp_path, case("c", overlay, f"  refused: {refused}\n"))
    assert code == 1 and [c["result"] for c in cases] == ["fail"]
    assert why in cases[0]["failures"][0]["message"]  # type: ignore[index]


def test_refused_beside_expect_is_a_located_suite_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "suite.yaml"
    path.write_text(
        "apiVersion: qosd.io/v1alpha1\nkind: RuleTest\ncases:\n  - name: c\n"
        + textwrap.indent(FACTS.strip("\n"), "    ")
        + "\n    refused: [{message: x}]\n    expect: {noIntents: true}\n",
        encoding="utf-8",
    )
    assert main([str(path)]) == 1
    _, err = capsys.readouterr()
    assert "suite.yaml:7:5" in err and "runs no tick, so it has no `expect` or `steps`" in err


def test_an_xfail_case_whose_policy_is_refused_counts_as_a_known_failure(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, cases = run(
        capsys,
        tmp_path,
        case(
            "anchor config qosd refuses",
            "{classes: [{name: LS, cpu: {weight: 10001}}]}",
            "  xfail: qosd refuses it\n  expect: {noIntents: true}\n",
        ),
    )
    assert code == 0 and [c["result"] for c in cases] == ["xfail"]
    assert "cpu.weight 10001" in cases[0]["problems"][0]["message"]  # type: ignore[index]
