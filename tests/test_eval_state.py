"""``qosd eval --state`` given a whole Evaluation document (what ``qosd eval`` prints, JSON or YAML)
reads its ``state``, or refuses it located; a counter never restarts silently (issue 16)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine import cli

ROOT = Path(__file__).resolve().parent.parent
FACTS = ROOT / "examples" / "snapshots" / "memory-pressure.yaml"


def qosd_eval(capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    code = cli.main(["eval", "--facts", str(FACTS), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def first_evaluation(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, out, _ = qosd_eval(capsys, "--output", "json")
    assert code == 0
    doc: dict[str, Any] = json.loads(out)
    # The first tick evicts two pods and remembers them as evictions under way.
    assert set(doc["state"]["evicting"]) == {"be-1", "be-3"}
    return doc


def evicted(doc: dict[str, Any]) -> list[str]:
    return sorted(i["target"] for i in doc["intents"] if i["kind"] == "evict")


@pytest.mark.parametrize("form", ["json", "yaml", "bare-state"])
def test_an_evaluation_document_carries_its_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], form: str
) -> None:
    """The second eval on the same facts, from the first one's output, counts the evictions under
    way as released and evicts nobody again; before the fix the JSON document was refused as 'not
    an engine state' and a bare object was the only way in."""
    doc = first_evaluation(capsys)
    state = tmp_path / f"first.{form}"
    if form == "json":
        state.write_text(json.dumps(doc, indent=2))
    elif form == "yaml":
        state.write_text(yaml.safe_dump(doc, sort_keys=False))
    else:
        state.write_text(json.dumps(doc["state"]))
    code, out, err = qosd_eval(capsys, "--state", str(state), "--output", "json")
    assert code == 0, err
    second = json.loads(out)
    assert evicted(doc) == ["batch/etl-small", "batch/spark-exec-1"]
    assert evicted(second) == []
    assert second["state"]["evicting"] == doc["state"]["evicting"]
    assert second["state"]["lastFired"] == doc["state"]["lastFired"]


@pytest.mark.parametrize("form", ["json", "yaml"])
def test_a_bad_value_in_an_evaluation_state_is_located(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], form: str
) -> None:
    doc = first_evaluation(capsys)
    doc["state"]["heldSince"]["be-memory-evict"] = "soon"
    state = tmp_path / f"bad.{form}"
    text = json.dumps(doc, indent=2) if form == "json" else yaml.safe_dump(doc, sort_keys=False)
    state.write_text(text)
    code, out, err = qosd_eval(capsys, "--state", str(state))
    assert code == 1 and out == ""
    lines = text.splitlines()
    line = next(i for i, t in enumerate(lines, 1) if "soon" in t)
    # 1-based: JSON's value starts at the quote before the word, YAML's at the word itself.
    column = lines[line - 1].index("soon") + (1 if form == "yaml" else 0)
    first = err.splitlines()[0]
    assert first.startswith(f"{state}:{line}:{column}: error: not an engine state: "), first
    assert "$.state.heldSince['be-memory-evict']: expected a number, got the string \"soon\"" in first


def test_an_evaluation_without_state_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = first_evaluation(capsys)
    del doc["state"]
    state = tmp_path / "nostate.json"
    state.write_text(json.dumps(doc, indent=2))
    code, out, err = qosd_eval(capsys, "--state", str(state))
    assert code == 1 and out == ""
    assert err.startswith(
        f"{state}:3:11: error: not an engine state: an Evaluation document without its `state`"
    )


def test_a_yaml_file_that_is_not_a_state_is_located(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A facts snapshot passed by mistake: refused at its first field, not read as an empty state."""
    state = tmp_path / "facts.yaml"
    state.write_text(FACTS.read_text())
    code, out, err = qosd_eval(capsys, "--state", str(state))
    assert code == 1 and out == ""
    assert f"{state}:" in err and "not an engine state" in err
