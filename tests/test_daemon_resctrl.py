"""``qosd run`` applies the bundled policy's resctrl group, end to end, as a user runs it.

Why a fake resctrl tree: this machine's CPU has no RDT/PQoS (Intel RDT, AMD PQoS), so the kernel
cannot mount resctrl here. The tree under ``--resctrl-root`` has the kernel's layout
(``info/L3/cbm_mask``, ``num_closids``, ``min_cbm_bits``, ``info/MB/...``, ``info/last_cmd_status``,
the default group's ``schemata`` and ``tasks``, ``mon_groups``, ``mon_data``; kernel
``Documentation/filesystems/resctrl.rst``), made by ``tests.test_resctrl_adapter.make_tree``. The
group ``reclaim`` is there already with the default group's schemata and no tasks, as the kernel
creates a group on ``mkdir`` (a plain directory cannot grow those files by itself).

The cgroups are real (tests/realcgroup.py): the batch workload is a real ``sleep`` in a real cgroup
v1 subtree, and its pid must land in the group's ``tasks``. Each run is a real ``qosd run --once``
process; what it did is read back from the files and from its ``--audit-log``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.realcgroup import Subtree, real_subtree
from tests.test_resctrl_adapter import make_tree

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def tree() -> Iterator[Subtree]:
    with real_subtree(children=("web", "batch"), sleeper="batch") as t:
        yield t


def run_once(tree: Subtree, tmp_path: Path, resctrl: Path) -> list[dict[str, Any]]:
    """One ``qosd run --once`` on the subtree; its audit records."""
    audit = tmp_path / "audit.jsonl"
    argv = [sys.executable, "-m", "engine.cli", "run", "--once", "--standalone", "--listen", ""]
    argv += ["--root", f"{tree.name}/*", "--resctrl-root", str(resctrl), "--audit-log", str(audit)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in audit.read_text().splitlines()]


def kernel_group(root: Path, name: str) -> Path:
    """What the kernel's mkdir makes: a group with the default group's schemata and no tasks."""
    group = root / name
    group.mkdir()
    (group / "schemata").write_text((root / "schemata").read_text())
    (group / "tasks").write_text("")
    return group


@pytest.mark.realcgroup
def test_qosd_run_once_reads_resctrl_from_its_root_and_writes_the_group(tree: Subtree, tmp_path: Path) -> None:
    resctrl = make_tree(tmp_path / "resctrl")  # L3 cbm_mask fff (12 ways), 2 cache domains, MB 100
    group = kernel_group(resctrl, "reclaim")
    records = run_once(tree, tmp_path, resctrl)
    intents = [i for r in records for i in r["intents"] if i["kind"] == "resctrl"]
    assert len(intents) == 1, [r.get("skipped") for r in records]
    intent = intents[0]
    # The facts the daemon collected from --resctrl-root: the mask and domains of info/ and schemata.
    inputs = intent["provenance"]["inputs"]
    assert inputs["cbmMask"] == "fff"
    assert inputs["l3Percent"] == [0, 30]  # rules/default.yaml, reclaimed_cores
    mask = inputs["l3Mask"]
    assert int(mask, 16) & ~0xFFF == 0 and int(mask, 16) != 0xFFF
    assert intent["schemata"]["L3"] == f"0={mask};1={mask}"  # both cache domains of the tree
    assert intent["pods"] == [f"{tree.name}/batch"]
    # What it wrote: the L3 line (MB too on AMD, whose unit is MB/s, not percent) and the batch process into the group's tasks.
    results = [r for rec in records for r in rec["results"]]
    schemata = [r for r in results if r["operation"]["kind"] == "writeSchemata"]
    assigned = [r for r in results if r["operation"]["kind"] == "assignTasks"]
    assert [r["status"] for r in schemata + assigned] == ["applied"] * len(schemata + assigned), results
    lines = [r["operation"]["line"] for r in schemata]
    assert lines[0] == f"L3:0={mask};1={mask}"
    # A plain file keeps only the last write, where the kernel merges the lines.
    assert (group / "schemata").read_text() == lines[-1] + "\n"
    assert (group / "tasks").read_text().split() == [str(tree.pid)]
    assert not any("resctrl is not mounted" in s["reason"] for r in records for s in r.get("skipped") or ())


@pytest.mark.realcgroup
def test_without_resctrl_at_its_root_the_note_names_that_root(tree: Subtree, tmp_path: Path) -> None:
    absent = tmp_path / "no-resctrl-here"
    records = run_once(tree, tmp_path, absent)
    reasons = [s["reason"] for r in records for s in r.get("skipped") or () if s["rule"] == "resctrl"]
    assert reasons and all(f"(no {absent}/info)" in why for why in reasons), reasons
    assert not any("/sys/fs/resctrl" in why for why in reasons)
    assert [i for r in records for i in r["intents"] if i["kind"] == "resctrl"] == []
