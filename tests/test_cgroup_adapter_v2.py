"""The cgroup adapter on a cgroup v2 layout, through a temporary tree with the v2 file names.

Why a temp tree: this machine is a cgroup v1 hybrid host; its only cgroup2 mount
(/sys/fs/cgroup/unified) carries no controllers, so there is no writable v2 cpu/memory/cpuset to test
against. The tree has the kernel's v2 names and formats (cgroup-v2.rst; ecosystem.md §5.2):
``cpu.max`` "$MAX $PERIOD" (default "max 100000"), ``cpu.weight`` [1, 10000] default 100,
``cpu.max.burst``, ``memory.max/high/low/min`` with "max", ``cgroup.threads``. Plain files cannot
normalise or refuse values the way the kernel does, which is why the v1 integration tests run on the
real kernel; here the point is names, formats, translation both ways, confinement and idempotence.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from engine.adapters.cgroup import CgroupAdapter
from engine.adapters.executor import NodeExecutor
from engine.adapters.recorder import RecordingExecutor
from engine.cgroups.mounts import CgroupLayout
from engine.cgroups.weight import shares_to_weight, weight_to_shares
from engine.model.operations import EvictPod, Operation, WriteCgroup

POD = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b_3c4d.slice"
CTR = f"{POD}/cri-containerd-c0ffee.scope"
DEFAULTS = {
    "cpu.max": "max 100000\n",
    "cpu.weight": "100\n",
    "cpu.max.burst": "0\n",
    "cpu.idle": "0\n",
    "cpuset.cpus": "\n",
    "cpuset.mems": "\n",
    "memory.max": "max\n",
    "memory.high": "max\n",
    "memory.low": "0\n",
    "memory.min": "0\n",
    "memory.current": "4096\n",
    "cgroup.procs": "",
    "cgroup.threads": "",
}


def make_cgroup(root: Path, path: str, **files: str) -> Path:
    d = root / path
    d.mkdir(parents=True, exist_ok=True)
    for name, text in {**DEFAULTS, **files}.items():
        (d / name).write_text(text)
    return d


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids\n")
    make_cgroup(root, "kubepods.slice")
    make_cgroup(root, "kubepods.slice/kubepods-burstable.slice")
    make_cgroup(root, POD)
    make_cgroup(root, CTR)
    return root


@pytest.fixture
def adapter(tree: Path) -> CgroupAdapter:
    return CgroupAdapter(CgroupLayout.unified_tree(tree))


def op(file: str, value: str, path: str = CTR) -> WriteCgroup:
    return WriteCgroup(path, file, value, "test-rule")


def read(tree: Path, file: str, path: str = CTR) -> str:
    return (tree / path / file).read_text().strip()


def test_layout_reads_the_offered_controllers(tree: Path) -> None:
    layout = CgroupLayout.unified_tree(tree)
    assert layout.mode == "v2"
    assert layout.locate("memory") == (2, str(tree.resolve()))
    assert layout.locate("blkio") is None


@pytest.mark.parametrize(
    ("file", "value", "host_file", "expected"),
    [
        # v2 names are written as given
        ("cpu.max", "50000 100000", "cpu.max", "50000 100000"),
        ("cpu.weight", "250", "cpu.weight", "250"),
        ("cpu.max.burst", "20000", "cpu.max.burst", "20000"),
        ("cpu.idle", "1", "cpu.idle", "1"),
        ("memory.max", "1073741824", "memory.max", "1073741824"),
        ("memory.high", "858993459", "memory.high", "858993459"),
        ("memory.low", "268435456", "memory.low", "268435456"),
        ("memory.min", "134217728", "memory.min", "134217728"),
        ("cpuset.cpus", "2-3", "cpuset.cpus", "2-3"),
        # v1 names are carried to their v2 file and format
        ("cpu.cfs_quota_us", "50000", "cpu.max", "50000 100000"),
        ("cpu.cfs_period_us", "50000", "cpu.max", "max 50000"),
        ("cpu.shares", "512", "cpu.weight", str(shares_to_weight(512))),
        ("cpu.shares", "2", "cpu.weight", "1"),
        ("cpu.cfs_burst_us", "30000", "cpu.max.burst", "30000"),
        ("memory.limit_in_bytes", "536870912", "memory.max", "536870912"),
    ],
)
def test_writes_land_in_the_v2_file_in_the_v2_format(
    adapter: CgroupAdapter, tree: Path, file: str, value: str, host_file: str, expected: str
) -> None:
    [result] = adapter.apply([op(file, value)])
    assert (result.status, result.error) == ("applied", None)
    assert read(tree, host_file) == expected
    # a second apply finds the value in place and writes nothing
    writes = adapter.writes
    assert [r.status for r in adapter.apply([op(file, value)])] == ["unchanged"]
    assert adapter.writes == writes


def test_shares_follow_the_quadratic_formula_by_default() -> None:
    """512 shares is weight 59 with runc >= 1.3.2's formula (ecosystem.md §5.2 table), 20 with the
    old linear one."""
    assert shares_to_weight(512) == 59
    assert shares_to_weight(512, "linear") == 20


def test_the_linear_formula_is_available_for_koordinator_nodes(adapter: CgroupAdapter, tree: Path) -> None:
    """The formula is the operation's (the policy's spec.cgroup.weightFormula, set by the planner)."""
    adapter.apply([replace(op("cpu.shares", "512"), weight_formula="linear")])
    assert read(tree, "cpu.weight") == "20"
    assert adapter.observe({CTR: ["cpu.shares"]}, "linear") == {CTR: {"cpu.shares": "500"}}


def test_unlimited_v1_memory_limit_becomes_max_and_matches_max(adapter: CgroupAdapter, tree: Path) -> None:
    (tree / CTR / "memory.max").write_text("1073741824\n")
    assert adapter.apply([op("memory.limit_in_bytes", "-1")])[0].status == "applied"
    assert read(tree, "memory.max") == "max"
    assert adapter.apply([op("memory.limit_in_bytes", "-1")])[0].status == "unchanged"


def test_negative_quota_lifts_the_limit(adapter: CgroupAdapter, tree: Path) -> None:
    (tree / CTR / "cpu.max").write_text("50000 100000\n")
    assert adapter.apply([op("cpu.cfs_quota_us", "-1")])[0].status == "applied"
    assert read(tree, "cpu.max") == "max 100000"


def test_quota_then_period_keeps_the_other_field(adapter: CgroupAdapter, tree: Path) -> None:
    results = adapter.apply([op("cpu.cfs_quota_us", "20000"), op("cpu.cfs_period_us", "50000")])
    assert [r.status for r in results] == ["applied", "applied"]
    assert read(tree, "cpu.max") == "20000 50000"


def test_observe_answers_in_each_files_own_dialect(adapter: CgroupAdapter, tree: Path) -> None:
    (tree / CTR / "cpu.max").write_text("50000 100000\n")
    (tree / CTR / "cpu.weight").write_text("59\n")
    (tree / CTR / "cpuset.cpus").write_text("0-3\n")
    files = [
        "cpu.max",
        "cpu.cfs_quota_us",
        "cpu.cfs_period_us",
        "cpu.weight",
        "cpu.shares",
        "memory.max",
        "memory.limit_in_bytes",
        "memory.high",
        "cpuset.cpus",
        "cpu.pressure",  # not in the tree: left out
    ]
    seen = adapter.observe({CTR: files, "kubepods.slice/gone": ["cpu.max"]})
    assert seen == {
        CTR: {
            "cpu.max": "50000 100000",
            "cpu.cfs_quota_us": "50000",
            "cpu.cfs_period_us": "100000",
            "cpu.weight": "59",
            "cpu.shares": str(weight_to_shares(59)),
            "memory.max": "max",
            "memory.limit_in_bytes": "-1",
            "memory.high": "max",
            "cpuset.cpus": "0-3",
        }
    }


def test_observe_reads_each_host_file_once(adapter: CgroupAdapter, tree: Path) -> None:
    reads: list[str] = []
    real_read = adapter.io.read

    def counting(path: str) -> str:
        reads.append(path)
        return real_read(path)

    adapter.io.read = counting  # type: ignore[method-assign]
    adapter.observe({CTR: ["cpu.max", "cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.shares", "cpu.weight"]})
    assert sorted(Path(p).name for p in reads) == ["cpu.max", "cpu.weight"]


def test_cpuset_compares_as_a_set(adapter: CgroupAdapter, tree: Path) -> None:
    (tree / CTR / "cpuset.cpus").write_text("0-2,5\n")
    assert adapter.apply([op("cpuset.cpus", "0,1,2,5")])[0].status == "unchanged"


def test_memory_compares_in_whole_pages(adapter: CgroupAdapter, tree: Path) -> None:
    """The kernel stores limits in pages: 1000000 bytes reads back as 999424 (4 KiB pages), which is
    the same limit and must not be rewritten every tick."""
    (tree / CTR / "memory.high").write_text("999424\n")
    assert adapter.apply([op("memory.high", "1000000")])[0].status == "unchanged"


def test_tasks_are_read_from_the_cgroup_and_its_descendants(adapter: CgroupAdapter, tree: Path) -> None:
    (tree / POD / "cgroup.threads").write_text("")
    (tree / CTR / "cgroup.threads").write_text("101\n102\n")
    make_cgroup(tree, f"{POD}/cri-containerd-beef.scope", **{"cgroup.threads": "201\n"})
    assert adapter.tasks(POD) == [101, 102, 201]
    assert adapter.tasks(f"{POD}/nothing-here") == []


# ---------------------------------------------------------------- faults


def test_vanished_cgroup_is_benign(adapter: CgroupAdapter, tree: Path) -> None:
    gone = f"{POD}/cri-containerd-dead.scope"
    make_cgroup(tree, gone)
    for f in (tree / gone).iterdir():
        f.unlink()
    (tree / gone).rmdir()
    [result] = adapter.apply([op("cpu.weight", "50", gone)])
    assert result.status == "vanished"
    assert "no longer exists" in (result.error or "")
    assert result.attempts == 0


def test_file_this_kernel_lacks_is_skipped_not_failed(adapter: CgroupAdapter, tree: Path) -> None:
    (tree / CTR / "cpu.idle").unlink()  # kernels before 5.15
    [result] = adapter.apply([op("cpu.idle", "1")])
    assert result.status == "skipped"
    assert "cpu.idle does not exist" in (result.error or "")


def test_controller_not_offered_is_skipped(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    make_cgroup(root, "a")
    adapter = CgroupAdapter(CgroupLayout.unified_tree(root, controllers=["cpu"]))
    [result] = adapter.apply([op("memory.max", "1", "a")])
    assert result.status == "skipped"
    assert "controller memory is not mounted" in (result.error or "")


def test_untranslatable_value_fails_with_the_value(adapter: CgroupAdapter) -> None:
    [result] = adapter.apply([op("cpu.shares", "lots")])
    assert result.status == "failed"
    assert "'lots'" in (result.error or "")


@pytest.mark.parametrize(
    ("path", "file", "message"),
    [
        ("../../etc", "passwd", "'..' is not allowed"),
        (f"{POD}/../../../..", "cpu.max", "'..' is not allowed"),
        (CTR, "../cpu.max", "one plain file or directory name"),
        (CTR, "..", "one plain file or directory name"),
    ],
)
def test_dotdot_is_refused(adapter: CgroupAdapter, path: str, file: str, message: str) -> None:
    [result] = adapter.apply([WriteCgroup(path, file, "1", "r")])
    assert result.status == "failed"
    assert message in (result.error or "")
    assert adapter.writes == 0


def test_symlink_escape_is_refused(adapter: CgroupAdapter, tree: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "cpu.weight").write_text("100\n")
    (tree / "kubepods.slice" / "evil").symlink_to(outside)
    (tree / CTR / "memory.low").unlink()
    (tree / CTR / "memory.low").symlink_to(outside / "cpu.weight")
    for path, file, why in (("kubepods.slice/evil", "cpu.weight", "outside"), (CTR, "memory.low", "symlink")):
        [result] = adapter.apply([WriteCgroup(path, file, "7", "r")])
        assert result.status == "failed", path
        assert "refused" in (result.error or "") and why in (result.error or "")
    assert (outside / "cpu.weight").read_text() == "100\n"
    assert adapter.observe({"kubepods.slice/evil": ["cpu.weight"], CTR: ["memory.low"]}) == {}


def test_results_follow_the_given_order_one_per_operation(adapter: CgroupAdapter, tree: Path) -> None:
    ops = [op("cpuset.cpus", "0-3", POD), op("cpuset.cpus", "2-3"), op("cpuset.cpus", "2-3", POD)]
    results = adapter.apply(ops)
    assert [r.op for r in results] == ops
    assert [r.status for r in results] == ["applied", "applied", "applied"]
    assert read(tree, "cpuset.cpus", POD) == "2-3"


def test_executor_routes_by_kind_and_recorder_writes_nothing(adapter: CgroupAdapter, tree: Path) -> None:
    evict = EvictPod("u1", "ns", "p", None, "test", "r")
    ops: list[Operation] = [op("cpu.weight", "42"), evict]
    results = NodeExecutor(cgroup=adapter).apply(ops)
    assert [r.status for r in results] == ["applied", "skipped"]
    assert "no adapter for evictPod" in (results[1].error or "")
    recorder = RecordingExecutor()
    dry = recorder.apply([op("cpu.weight", "7")])
    assert [(r.status, r.error) for r in dry] == [("skipped", "dry-run: recorded, not executed")]
    assert recorder.to_dicts() == [op("cpu.weight", "7").to_dict()]
    assert read(tree, "cpu.weight") == "42"
    assert dry[0].to_dict()["operation"]["file"] == "cpu.weight"
