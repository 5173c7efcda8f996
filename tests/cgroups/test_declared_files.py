"""Cgroup files declared in policy (``spec.cgroup.files``, engine/cgroups/declared.py): written like
built-in files, under the node's cgroup version's name, value-checked at validate and at each tick,
through the same adapter, confined to the cgroup root.

The real-cgroupfs test declares ``memory.swappiness``, which qosd does not know and every cgroup v1
memory hierarchy has, and writes it to a fresh subtree of this machine's v1 hierarchy through the
tick and the cgroup adapter; it skips, with the reason, where there is no writable v1 hierarchy.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.adapters.cgroup import CgroupAdapter
from engine.cgroups.declared import NO_FILES, DeclaredFile, DeclaredFiles, name_problem
from engine.cgroups.files import ValueFormat, value_problem
from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState
from engine.model.intents import CgroupIntent
from engine.model.operations import WriteCgroup
from engine.plan.planner import Guards
from engine.tick import run_tick
from tests.builders import pod, policy, snapshot
from tests.realcgroup import real_subtree, v1_layout

LEVEL = DeclaredFile("cpu.level", "cpu.qos_level", "cpu.level_v2", ValueFormat("", -1, 2))


@pytest.mark.parametrize(
    ("version", "expected"), [(1, "cpu.qos_level"), (2, "cpu.level_v2"), (None, "cpu.level")]
)
def test_host_name_per_cgroup_version(version: int | None, expected: str) -> None:
    files = DeclaredFiles({"cpu.level": LEVEL})
    assert files.host("cpu.level", version) == expected
    assert files.host("cpu.shares", version) == "cpu.shares"  # built-in names: the adapter's job
    assert NO_FILES.host("cpu.level", version) == "cpu.level"


@pytest.mark.parametrize(
    ("name", "refused"),
    [
        ("cpu.qos_level", False),
        ("memory.wmark.min_adj", False),
        ("cgroup.procs", True),  # moves processes
        ("cgroup.subtree_control", True),
        ("tasks", True),
        ("release_agent", True),
        ("../cpu.shares", True),
        ("cpu/qos_level", True),
        ("CPU.qos", True),
        ("cpu.", True),
    ],
)
def test_declared_names(name: str, refused: bool) -> None:
    assert (name_problem(name) is not None) == refused


def test_declared_formats_check_values_like_built_in_ones() -> None:
    formats = {"cpu.level": LEVEL.format}
    assert value_problem("cpu.level", "-1", None, formats) is None
    assert "outside [-1, 2]" in str(value_problem("cpu.level", "3", None, formats))
    assert "plain decimal" in str(value_problem("cpu.level", "01", None, formats))
    assert value_problem("cpu.level", "3", None, None) is None  # unknown without the declaration


DECLARED = """\
classes:
  - {name: be, match: [{labels: {q: be}}]}
cgroup:
  files:
    - {name: cpu.level, v1: cpu.qos_level, v2: cpu.level_v2, values: {min: -1, max: 2}}
rules:
  - name: offline
    then:
      setCgroup:
        target: {class: be}
        values: {cpu.level: {expr: "pod.priority - 101"}}
"""


def be_pod(uid: str, priority: int) -> object:
    return replace(pod(uid, labels={"q": "be"}, priority=priority), cgroup_path=f"kubepods/besteffort/pod{uid}")


@pytest.mark.parametrize(("version", "file"), [(1, "cpu.qos_level"), (2, "cpu.level_v2")])
def test_intents_name_the_host_file_and_results_are_checked_per_tick(version: int, file: str) -> None:
    """priority 100 -> -1 is written under the version's name; priority 110 -> 9 is outside the
    declared range and skipped for that pod, with the reason."""
    snap = replace(snapshot(pods=[be_pod("a", 100), be_pod("b", 110)]), cgroup_version=version)
    ev = Engine(policy(DECLARED)).evaluate(snap, EngineState())
    cgroups = [(i.path, i.file, i.value) for i in ev.intents if isinstance(i, CgroupIntent)]
    assert cgroups == [("kubepods/besteffort/poda", file, "-1")]
    assert any("cpu.level takes an integer from -1 to 2; '9'" in s.reason for s in ev.skipped)


@pytest.mark.realcgroup
def test_a_declared_file_is_written_to_the_real_v1_hierarchy() -> None:
    """memory.swappiness exists in every v1 memory cgroup and is not in qosd's table: declared with
    its range, planned by the tick and written by the adapter; the kernel then shows the value, and
    a second apply is a no-op read-compare."""
    with real_subtree() as tree:
        rules = f"""\
cgroup:
  files:
    - {{name: memory.swappiness, values: {{min: 0, max: 100}}}}
rules:
  - name: swap-less
    then:
      setCgroup:
        target: {{path: {tree.name}/app}}
        values: {{memory.swappiness: 37}}
"""
        snap = replace(snapshot(), cgroup_version=1)
        result = run_tick(Engine(policy(rules)), snap, EngineState(), Guards())
        ops = [o for o in result.plan.operations if isinstance(o, WriteCgroup)]
        assert ops == [WriteCgroup(f"{tree.name}/app", "memory.swappiness", "37", "swap-less")]
        adapter = CgroupAdapter(v1_layout())
        assert [r.status for r in adapter.apply(ops)] == ["applied"]
        assert tree.read("memory", "app", "memory.swappiness") == "37"
        assert [r.status for r in adapter.apply(ops)] == ["unchanged"]
