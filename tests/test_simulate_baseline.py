"""``qosd simulate --baseline OLD... --rules NEW... TRACE`` (issue 18, "a plan before the merge"): one
trace under both policies, what changes (evictions, suppressed cores, published resources, SLO-risk
minutes, per rule, the first tick that differs), ``-o json`` for a CI bot, exit 3 when decisions
differ and 0 when they do not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.cli import main as cli_main
from engine.sources.trace import generate_tidal, write_trace

ROOT = Path(__file__).resolve().parent.parent
EVICT_AT_60 = (ROOT / "tests" / "data" / "evict-at-60.yaml").read_text()


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated day in 5-minute steps (Koordinator profile): in the evening memory climbs past 60%."""
    doc = generate_tidal(hours=24, step=300, seed=14, name="evening")
    path = tmp_path_factory.mktemp("trace") / "day.yaml"
    write_trace(doc, path, "generated for test_simulate_baseline")
    return path


def rules(tmp_path: Path, text: str | None) -> Path:
    d = tmp_path / ("new" if text else "old")
    d.mkdir(exist_ok=True)
    if text:
        (d / "rules.yaml").write_text(text)
    return d


def test_a_change_that_evicts_more_is_planned_and_exits_3(
    tmp_path: Path, trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = rules(tmp_path, None), rules(tmp_path, EVICT_AT_60)
    code = cli_main(["simulate", "--baseline", str(old), "--rules", str(new), str(trace), "-o", "json"])
    assert code == 3
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "SimulationDiff" and doc["differ"] is True
    assert doc["new"]["documents"][-1] == "evict-at-60"
    ev = doc["changes"]["evictions"]
    assert ev["new"] > ev["baseline"] and ev["change"] == ev["new"] - ev["baseline"]
    assert ev["byRule"]["be-memory-evict"]["new"] == ev["new"]
    first = doc["firstDivergence"]
    assert first["tick"] >= 0 and "be-memory-evict" in first["newOnly"]
    assert doc["differingTicks"] >= 1
    for key in ("suppressedCores", "published", "sloRiskMinutes", "evictAdmitLoops", "rules"):
        assert key in doc["changes"]
    assert "be-memory-evict" in doc["changes"]["rules"]
    r = doc["changes"]["rules"]["be-memory-evict"]
    assert r["operations"]["evictPod"]["new"] == ev["new"]

    # The same in words, for a person reading the pull request.
    code = cli_main(["simulate", "--baseline", str(old), "--rules", str(new), "--trace", str(trace)])
    assert code == 3
    out = capsys.readouterr().out
    assert (
        f"Decisions differ on {doc['differingTicks']} of {doc['ticks']} ticks; first at {first['clock']}"
        in out
    )
    assert "new only       fired be-memory-evict" in out
    assert "  by be-memory-evict" in out and "suppressed cores (mean)" in out and "minutes at SLO risk" in out
    assert "exit 3: decisions differ" in out


def test_the_same_decisions_exit_0(tmp_path: Path, trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A change that decides nothing differently (a description) is no review."""
    old = rules(tmp_path, None)
    same = tmp_path / "same"
    same.mkdir()
    (same / "rules.yaml").write_text(
        "apiVersion: qosd.io/v1alpha1\nkind: QoSPolicy\nmetadata: {name: words}\nspec:\n  rules:\n"
        "    - name: be-memory-evict\n      description: evict BE pods when memory is short\n"
    )
    code = cli_main(
        ["simulate", "--baseline", str(old), "--rules", str(same), str(trace), "--output", "json"]
    )
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, doc["firstDivergence"]
    assert doc["differ"] is False and doc["differingTicks"] == 0 and doc["firstDivergence"] is None
    assert all(p["change"] == 0 for p in doc["changes"]["evictions"]["byRule"].values())


def test_usage_errors(tmp_path: Path, trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = rules(tmp_path, None)
    assert cli_main(["simulate", "--baseline", str(old)]) == 2
    assert "simulate needs exactly one trace" in capsys.readouterr().err
    assert cli_main(["simulate", "--baseline", str(old), "--plot", str(tmp_path / "p.png"), str(trace)]) == 2
    assert "--plot draws one run" in capsys.readouterr().err
