"""docs/rules.md, "Writing a policy qosd did not ship": the walkthrough's files and commands, run as
a platform team would run them (validate, test, simulate), with the outcomes the page states."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from engine.cli import main

ROOT = Path(__file__).resolve().parent.parent
OVERLAYS = [ROOT / "rules/examples/stepped-cpu-throttle.yaml", ROOT / "rules/examples/count-based-eviction.yaml"]
SUITES = [ROOT / f"examples/tests/{n}.yaml" for n in ("stepped-cpu-throttle", "count-based-eviction", "per-container-burst")]
TRACE = ROOT / "examples/traces/batch-pressure.yaml"
MAIN = "kubepods/burstable/podb-etl/main"


def test_the_overlays_validate_with_the_bundled_policies(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", *map(str, OVERLAYS), str(ROOT / "rules/examples/per-container-burst.yaml")]) == 0


def test_the_rule_tests_pass(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["test", *map(str, SUITES)]) == 0, capsys.readouterr().out


@pytest.fixture(scope="module")
def simulation() -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["simulate", *[a for p in OVERLAYS for a in ("--rules", str(p))], "--trace", str(TRACE),
                     "--output", "json", "--no-progress"])
    assert code == 0
    doc: dict[str, Any] = json.loads(out.getvalue())
    return doc


def quota_writes(doc: dict[str, Any]) -> list[tuple[float, str]]:
    start = doc["trace"]["start"]
    return [
        (tick["time"] - start, op["value"])
        for tick in doc["ticks"]
        for op in tick.get("operations", [])
        if op.get("kind") == "writeCgroup" and op.get("path") == MAIN and op.get("file") == "cpu.cfs_quota_us"
    ]


def test_simulate_evicts_once_after_five_samples(simulation: dict[str, Any]) -> None:
    start = simulation["trace"]["start"]
    evictions = [
        (tick["time"] - start, i["target"])
        for tick in simulation["ticks"]
        for i in tick["intents"]
        if i["kind"] == "evict" and i["provenance"]["rule"] == "batch-memory-evict-counted" and not i.get("held")
    ]
    assert evictions == [(4.0, "batch/report")]


def test_simulate_steps_the_quota_down_then_back_up(simulation: dict[str, Any]) -> None:
    """Closed loop: each write is read back by the simulated node, and the next step starts there."""
    writes = quota_writes(simulation)
    down = [int(v) for t, v in writes if t < 10]
    up = [int(v) for t, v in writes if t >= 10]
    assert down[:3] == [360000, 324000, 291600]
    assert min(down) >= 120000  # the floor, max(request 1, limit 4 x 0.3)
    assert up and up == sorted(up) and up[-1] == 400000
    assert all(b <= a * 1.1 + 1 for a, b in zip([down[-1], *up], up, strict=False))
