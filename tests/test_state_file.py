"""The state file loader never stops the daemon (issue 14, defect 4).

``null``, ``[]`` or ``{"state":{"heldSince":[1]}}`` as --state-file made ``qosd run`` exit 1 at start,
and the file was never repaired: a crash loop in a DaemonSet. Now a file of any other shape than
schemas/state.schema.json is moved to ``<file>.corrupt``, a warning is logged and the run starts
empty. The property: whatever the bytes, the loader returns a state that is valid (it validates and
round-trips) or says the file is corrupt; it never raises anything else.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from engine.daemon.state_file import load_state, save_state
from engine.evaluate.state import CorruptState, EngineState, Evicting, state_from_json
from engine.resources import data_dir
from tests.realcgroup import real_subtree

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = Draft202012Validator(json.loads((data_dir("schemas") / "state.schema.json").read_text()))

GOOD = EngineState(
    held_since={"be-memory-evict": 12.5},
    latched=frozenset({"be-memory-evict"}),
    last_fired={"be-memory-evict": 14.0},
    fired_at={"be-memory-evict": (10.0, 14.0)},
    evicting={"uid-1": Evicting(14.0, "be-memory-evict", "memory", 2.0e9)},
)


def document(state: EngineState) -> dict[str, Any]:
    return {"apiVersion": "qosd.io/v1alpha1", "kind": "EngineState", "time": 1.0, "generation": 1,
            "state": state.to_dict()}


def assert_valid(state: EngineState) -> None:
    """A loaded state is one qosd could have written: it validates and reads back equal."""
    doc = document(state)
    assert not list(SCHEMA.iter_errors(doc))
    assert state_from_json(json.dumps(doc)) == state


def outcome(data: bytes | str) -> EngineState | None:
    """The loader's answer; None for 'corrupt'. Any other exception fails the property."""
    try:
        state = state_from_json(data)
    except CorruptState as exc:
        assert str(exc)  # says why
        return None
    assert_valid(state)
    return state


# ---------------------------------------------------------------- table: the shapes seen in the field

SHAPES: list[tuple[str, str, bool]] = [
    ("null", "null", False),
    ("list", "[]", False),
    ("held-since-list", '{"state":{"heldSince":[1]}}', False),
    ("number", "42", False),
    ("string", '"state"', False),
    ("empty-file", "", False),
    ("truncated", json.dumps(document(GOOD))[:-7], False),
    ("nan", '{"state":{"heldSince":{"r":NaN}}}', False),
    ("infinity", '{"state":{"lastFired":{"r":1e999}}}', False),
    ("huge-int", '{"state":{"heldSince":{"r":' + "9" * 5000 + "}}}", False),
    ("overflow-int", '{"state":{"heldSince":{"r":' + "9" * 400 + "}}}", False),
    ("deep", "[" * 100_000 + "]" * 100_000, False),
    ("deep-in-state", '{"state":' + '{"a":' * 3000 + "1" + "}" * 3001, False),
    ("evicting-missing-rule", '{"state":{"evicting":{"u":{"since":1}}}}', False),
    ("evicting-list", '{"state":{"evicting":[]}}', False),
    ("latched-string", '{"state":{"latched":"r"}}', False),
    ("samples-ragged", '{"state":{"reports":{"x":{"samples":[[1]]}}}}', False),
    ("numa-not-mapping", '{"state":{"pressure":{"numa":{"0":7}}}}', False),
    ("unknown-key", '{"state":{"heldsince":{}}}', False),
    ("wrong-kind", '{"kind":"Evaluation","state":{}}', False),
    ("binary", "\udcff\udcfe", False),
    ("empty-object", "{}", True),
    ("empty-state", '{"state":{}}', True),
    ("bare-state", json.dumps(GOOD.to_dict()), True),
    ("written", json.dumps(document(GOOD)), True),
]


@pytest.mark.parametrize(("name", "text", "valid"), SHAPES, ids=[s[0] for s in SHAPES])
def test_each_shape_is_a_valid_state_or_reported_corrupt(name: str, text: str, valid: bool) -> None:
    data = text.encode("utf-8", "surrogateescape")
    state = outcome(data)
    assert (state is not None) == valid
    if name in ("bare-state", "written"):
        assert state == GOOD


# ---------------------------------------------------------------- property

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=30,
)
KEYS = ["heldSince", "latched", "lastFired", "firedAt", "evicting", "reports", "pressure", "published"]
state_like = st.dictionaries(st.sampled_from(KEYS), json_values, max_size=4)


def good_states() -> st.SearchStrategy[EngineState]:
    times = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False)
    names = st.text(min_size=1, max_size=10)
    return st.builds(
        EngineState,
        held_since=st.dictionaries(names, times, max_size=3),
        latched=st.frozensets(names, max_size=3),
        last_fired=st.dictionaries(names, times, max_size=3),
        fired_at=st.dictionaries(names, st.lists(times, max_size=3).map(tuple), max_size=3),
        evicting=st.dictionaries(names, st.builds(Evicting, times, names, names, times), max_size=3),
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(json_values, state_like, st.fixed_dictionaries({"state": state_like})))
def test_any_json_is_a_valid_state_or_corrupt(value: Any) -> None:
    outcome(json.dumps(value))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_are_a_valid_state_or_corrupt(data: bytes) -> None:
    outcome(data)


@settings(max_examples=150, deadline=None)
@given(good_states(), st.data())
def test_a_written_state_reads_back_and_any_truncation_of_it_is_corrupt(state: EngineState, data: st.DataObject) -> None:
    text = json.dumps(document(state))
    assert state_from_json(text) == state
    cut = data.draw(st.integers(min_value=0, max_value=len(text) - 1))
    assert outcome(text[:cut]) is None


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=1, max_value=200_000), st.sampled_from(["[", '{"a":', '{"state":{"heldSince":']))
def test_any_nesting_depth_is_a_valid_state_or_corrupt(depth: int, opener: str) -> None:
    outcome(opener * depth)


# ---------------------------------------------------------------- the file: moved aside, not fatal


def test_a_corrupt_file_is_moved_aside_and_a_good_one_is_kept(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "state.json"
    save_state(path, GOOD, 3, 1.0)
    assert load_state(path) == GOOD and path.exists()
    path.write_text('{"state":{"heldSince":[1]}}')
    assert load_state(path) == EngineState()
    assert not path.exists()
    assert (tmp_path / "state.json.corrupt").read_text() == '{"state":{"heldSince":[1]}}'
    assert load_state(tmp_path / "absent.json") == EngineState()


# ---------------------------------------------------------------- regression: qosd run --once


@pytest.mark.parametrize("text", ["null", "[]", '{"state":{"heldSince":[1]}}'], ids=["null", "list", "heldSince-list"])
def test_qosd_run_starts_on_a_state_file_of_the_wrong_shape_and_repairs_it(tmp_path: Path, text: str) -> None:
    """A real ``qosd run --once`` on a real cgroup subtree: exit 0, the file kept aside for a
    post-mortem, a warning saying where it went, and a good state file written in its place."""
    with real_subtree(children=("web",), sleeper="web") as tree:
        state = tmp_path / "state.json"
        state.write_text(text)
        argv = [sys.executable, "-m", "engine.cli", "run", "--once", "--root", f"{tree.name}/*",
                "--listen", "", "--state-file", str(state)]
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert (tmp_path / "state.json.corrupt").read_text() == text
    warnings = [json.loads(line) for line in proc.stderr.splitlines() if '"moved aside' in line or "moved aside" in line]
    assert len(warnings) == 1 and warnings[0]["level"] == "warning"
    assert warnings[0]["movedTo"] == str(tmp_path / "state.json.corrupt")
    written = json.loads(state.read_text())
    assert written["kind"] == "EngineState" and not list(SCHEMA.iter_errors(written))
