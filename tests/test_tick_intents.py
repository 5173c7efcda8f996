"""Tick.add_unless_set: the one place where a step that runs after the rules yields to a rule's
setCgroup of the same file (pools' cpusets under suppress, class knobs under a rule's knob)."""

from __future__ import annotations

import pytest

from engine.evaluate.context import Tick
from engine.model.intents import CgroupIntent, Provenance

PROV = Provenance(rule="r", policy_hash="h", generation=1, source="rules", mode="enforce")


def intent(path: str, file: str, value: str) -> CgroupIntent:
    return CgroupIntent(path, file, value, None, PROV)


@pytest.mark.parametrize(
    ("before", "produced", "files", "added"),
    [
        pytest.param([], [("a", "cpuset.cpus", "0-3")], {"cpuset.cpus"}, ["a"], id="nothing-earlier"),
        pytest.param(
            [("a", "cpuset.cpus", "0")],
            [("a", "cpuset.cpus", "0-3"), ("b", "cpuset.cpus", "0-3")],
            {"cpuset.cpus"},
            ["b"],
            id="rule-wins-on-its-cgroup-only",
        ),
        pytest.param(
            [("a", "cpu.idle", "1")],
            [("a", "cpuset.cpus", "0-3")],
            {"cpuset.cpus"},
            ["a"],
            id="another-file-of-the-same-cgroup-takes-nothing",
        ),
        pytest.param(
            [("a", "cpu.shares", "2")],
            [("a", "cpu.shares", "1024"), ("a", "cpu.idle", "0")],
            {"cpu.shares", "cpu.idle"},
            ["a:cpu.idle"],
            id="per-file",
        ),
    ],
)
def test_a_rule_intent_wins_over_a_later_step(
    before: list[tuple[str, str, str]], produced: list[tuple[str, str, str]], files: set[str], added: list[str]
) -> None:
    t = Tick(now=0.0, evicting={})
    t.intents.extend(intent(*x) for x in before)
    t.add_unless_set(tuple(intent(*x) for x in produced), frozenset(files))
    new = t.intents[len(before) :]
    got = [i.path if ":" not in added[0] else f"{i.path}:{i.file}" for i in new] if added else []
    assert got == added
    assert all(isinstance(i, CgroupIntent) for i in t.intents)
