"""docs/parity.md's table of ported anchor unit tests is generated from examples/parity/ (issue 16):
it counts, per anchor package, the cases ported, passing and xfail with their reasons, and this test
fails when the page is stale (run `python -m engine.ruletest.parity --write`)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from engine.ruletest.parity import BEGIN, END, main, render, replaced, results_for

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "examples" / "snapshots" / "memory-pressure.yaml"


def test_docs_parity_md_is_up_to_date(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "--check",
            "--root",
            str(ROOT),
            "--suites",
            str(ROOT / "examples" / "parity"),
            "--doc",
            str(ROOT / "docs" / "parity.md"),
        ]
    )
    assert code == 0, "docs/parity.md is stale: run python -m engine.ruletest.parity --write\n" + capsys.readouterr().err


def suite(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "apiVersion: qosd.io/v1alpha1\nkind: RuleTest\n" + textwrap.dedent(body).lstrip("\n")
    path.write_text(text.replace("FACTS", str(SNAPSHOT)), encoding="utf-8")


@pytest.fixture
def parity(tmp_path: Path) -> Path:
    root = tmp_path / "examples" / "parity"
    suite(
        root / "koordinator" / "memory_evict.yaml",
        """
        metadata: {name: memory-evict}
        anchor: {repo: koordinator-sh/koordinator, file: pkg/koordlet/qosmanager/plugins/memoryevict/memory_evict_test.go, function: Test_memoryEvict}
        cases:
          - name: evicts the lowest priority first
            anchor: {case: "need evict BE pods"}
            facts: FACTS
            expect: {fired: [be-memory-evict]}
          - name: sorts | by usage
            anchor: {case: "sort by usage"}
            xfail: qosd sorts by priority | then usage
            facts: FACTS
            expect: {intents: [{kind: evict, target: batch/nobody}]}
        """,
    )
    suite(
        root / "katalyst" / "numa.yaml",
        """
        metadata: {name: numa}
        cases:
          - name: nothing to do
            anchor:
              repo: kubewharf/katalyst-core
              file: pkg/agent/evictionmanager/plugin/memory/numa_test.go
              function: TestNumaPressure
              case: a
            facts: FACTS
            expect: {notFired: [numa-memory-pressure]}
          - name: broken
            facts: FACTS
            expect: {fired: [no-such-rule]}
        """,
    )
    return tmp_path


def test_the_block_counts_per_package_with_xfail_reasons(parity: Path) -> None:
    block = render(results_for(parity / "examples" / "parity"), parity, parity / "examples" / "parity")
    lines = block.splitlines()
    assert lines[0] == BEGIN and lines[-1] == END
    assert (
        "**4 cases ported, 2 pass (50%), 1 xfail (known differences, reasons below), 1 failing.** "
        "The target of at least 90% passing is not met yet."
    ) in lines
    assert (
        "| koordinator-sh/koordinator | `pkg/koordlet/qosmanager/plugins/memoryevict` | 1 | 2 | 1 | 1 | 0 |" in lines
    )
    assert "| kubewharf/katalyst-core | `pkg/agent/evictionmanager/plugin/memory` | 1 | 1 | 1 | 0 | 0 |" in lines
    # A case that names no anchor is counted where it shows.
    assert "| — | `(no anchor)` | 1 | 1 | 0 | 0 | 1 |" in lines
    assert (
        "| `Test_memoryEvict` › sort by usage | sorts \\| by usage | "
        "`examples/parity/koordinator/memory_evict.yaml:10` | qosd sorts by priority \\| then usage |"
    ) in lines
    assert any(line.startswith("| (no anchor) | broken | `examples/parity/katalyst/numa.yaml:") for line in lines)
    assert block == render(results_for(parity / "examples" / "parity"), parity, parity / "examples" / "parity")


def test_write_keeps_the_hand_written_page_and_check_sees_staleness(parity: Path) -> None:
    doc = parity / "parity.md"
    doc.write_text(f"# Parity\n\nhand-written intro\n\n{BEGIN}\nold table\n{END}\n\n## Deliberate differences\n\nprose\n")
    argv = ["--root", str(parity), "--suites", str(parity / "examples" / "parity"), "--doc", str(doc)]
    assert main(["--check", *argv]) == 1
    assert main(["--write", *argv]) == 0
    page = doc.read_text()
    assert page.startswith("# Parity\n\nhand-written intro\n\n" + BEGIN)
    assert page.endswith(END + "\n\n## Deliberate differences\n\nprose\n")
    assert "old table" not in page and "**4 cases ported" in page
    assert main(["--check", *argv]) == 0
    # A page without markers gets the block appended, once.
    assert replaced("# P\n", "B\n") == "# P\n\nB\n"


def test_no_suites_yet(tmp_path: Path) -> None:
    block = render(results_for(tmp_path / "missing"), tmp_path, tmp_path / "missing")
    assert "No suites under `missing/` yet." in block
