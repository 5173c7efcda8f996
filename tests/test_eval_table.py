"""``qosd eval``'s table in the units people read (issue 18): percent facts as written, amounts in
GiB and cores, never ``release 9.621e+09``; values qosd would write shown exactly with their amount
beside them; a note an engine step wrote attributed to the step."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.cli import main as cli_main
from engine.model.intents import STEP_NAMES

SNAPSHOTS = Path(__file__).resolve().parent.parent / "examples" / "snapshots"


def table(capsys: pytest.CaptureFixture[str], snapshot: str) -> str:
    assert cli_main(["eval", "--facts", str(SNAPSHOTS / snapshot)]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize(
    ("snapshot", "lines"),
    [
        (
            "memory-pressure.yaml",
            [
                "node.memory.usage_percent = 82% >= 70%; rank 1 of 3 eligible, frees 1.0 GiB toward 9.0 GiB "
                "(68719476736 * (82 - 68) / 100)",
                "node.memory.usage_percent = 82% >= 70%; rank 2 of 3 eligible, frees 12.0 GiB toward 9.0 GiB",
                "kubernetes.io/batch-cpu = 5.6 cores",
                "kubernetes.io/batch-memory = 12.1 GiB",
                "publishNodeResource: name=kubernetes.io/batch-cpu, quantity=5600 (5.6 cores)",
                "publishNodeResource: name=kubernetes.io/batch-memory, quantity=12992276071 (12.1 GiB)",
            ],
        ),
        (
            "batch-katalyst-node.yaml",
            [
                "resource.katalyst.kubewharf.io/reclaimed_millicpu = 8.75 cores",
                "resource.katalyst.kubewharf.io/reclaimed_memory = 64.0 GiB",
                "quantity=68719476736 (64.0 GiB)",
                f"skipped by {STEP_NAMES['resctrl']}: resctrl is not mounted",
            ],
        ),
    ],
)
def test_eval_table_in_humane_units(
    capsys: pytest.CaptureFixture[str], snapshot: str, lines: list[str]
) -> None:
    out = table(capsys, snapshot)
    for expected in lines:
        assert expected in out, out
    assert not re.search(r"\d\.\d+e[+-]\d", out), out  # never an exponent
    # Every long integer (a byte count) is either in a formula or followed by its amount in GiB/MiB.
    for m in re.finditer(r"(?<![\w.])\d{8,}(?![\w.])", out):
        after = out[m.end() : m.end() + 12]
        line = out[out.rfind("\n", 0, m.start()) + 1 : out.find("\n", m.end())]
        if out[m.start() - 2 : m.start()] == "t=":  # the tick's unix time
            continue
        assert after.startswith(" (") or " * (" in line, line
    assert "skipped: resctrl" not in out and " gte " not in out.split("OPERATIONS")[0]
