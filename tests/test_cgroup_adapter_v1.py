"""The cgroup adapter against the real cgroup v1 hierarchy of this machine.

Each test gets a fresh subtree ``qosd-test-<pid>-<random>`` under the cpu, cpuset and memory mounts,
with a real ``sleep`` process moved into its ``app`` child; the finalizer moves the process back to
the root, kills it and removes the subtree bottom-up, whatever the test did. Values are checked as
the kernel shows them (the cgroup files, and the process's own CPU affinity for cpusets).

Skipped, with the reason, when not root or when the v1 mounts are missing or read-only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.adapters.cgroup import CgroupAdapter
from engine.adapters.fsio import Retry
from engine.cgroups.weight import weight_to_shares
from engine.model.operations import WriteCgroup
from engine.model.units import parse_cpuset
from engine.plan.cgroups import Desired, order_writes
from tests.realcgroup import CONTROLLERS, UNLIMITED_V1, Subtree, real_subtree, v1_layout

pytestmark = pytest.mark.realcgroup  # tests/realparts.py: a skip fails where the machine has it

@pytest.fixture
def subtree() -> Iterator[Subtree]:
    with real_subtree() as tree:
        yield tree


@pytest.fixture
def adapter() -> CgroupAdapter:
    return CgroupAdapter(v1_layout())


def w(tree: Subtree, rel: str, file: str, value: str) -> WriteCgroup:
    return WriteCgroup(f"{tree.name}/{rel}" if rel else tree.name, file, value, "test")


def test_hierarchy_is_detected_as_v1_or_hybrid(adapter: CgroupAdapter) -> None:
    assert adapter.layout.mode in ("v1", "hybrid")


@pytest.mark.realcgroup(cpus=2)
def test_writes_reach_the_kernel_and_the_process_and_repeat_as_no_ops(
    subtree: Subtree, adapter: CgroupAdapter
) -> None:
    cpus = sorted(parse_cpuset(subtree.read("cpuset", "app", "cpuset.cpus")))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs to narrow a cpuset")
    last = str(cpus[-1])
    ops = [
        w(subtree, "app", "cpuset.cpus", last),
        w(subtree, "app", "cpuset.mems", subtree.read("cpuset", "app", "cpuset.mems")),
        w(subtree, "app", "cpu.shares", "512"),
        w(subtree, "app", "cpu.cfs_period_us", "50000"),
        w(subtree, "app", "cpu.cfs_quota_us", "25000"),
        w(subtree, "app", "memory.limit_in_bytes", str(64 << 20)),
    ]
    results = adapter.apply(ops)
    assert [r.status for r in results] == ["applied", "unchanged", "applied", "applied", "applied", "applied"]
    assert [r.error for r in results] == [None] * 6
    assert subtree.read("cpuset", "app", "cpuset.cpus") == last
    assert os.sched_getaffinity(subtree.pid) == {int(last)}  # the running process follows
    assert subtree.read("cpu", "app", "cpu.shares") == "512"
    assert subtree.read("cpu", "app", "cpu.cfs_period_us") == "50000"
    assert subtree.read("cpu", "app", "cpu.cfs_quota_us") == "25000"
    assert subtree.read("memory", "app", "memory.limit_in_bytes") == str(64 << 20)
    assert "1 -> " not in results[2].detail and results[2].detail == "cpu.shares 1024 -> 512"

    writes = adapter.writes
    again = adapter.apply(ops)
    assert [r.status for r in again] == ["unchanged"] * 6
    assert [r.attempts for r in again] == [0] * 6
    assert adapter.writes == writes  # the steady state writes nothing


def test_v2_names_are_translated_on_v1(subtree: Subtree, adapter: CgroupAdapter) -> None:
    ops = [
        w(subtree, "app", "cpu.max", "30000 60000"),
        w(subtree, "app", "cpu.weight", "200"),
        w(subtree, "app", "memory.max", str(32 << 20)),
    ]
    assert [r.status for r in adapter.apply(ops)] == ["applied", "applied", "applied"]
    assert subtree.read("cpu", "app", "cpu.cfs_quota_us") == "30000"
    assert subtree.read("cpu", "app", "cpu.cfs_period_us") == "60000"
    assert subtree.read("cpu", "app", "cpu.shares") == str(weight_to_shares(200))
    assert subtree.read("memory", "app", "memory.limit_in_bytes") == str(32 << 20)
    lift = [w(subtree, "app", "cpu.max", "max 100000"), w(subtree, "app", "memory.max", "max")]
    assert [r.status for r in adapter.apply(lift)] == ["applied", "applied"]
    assert subtree.read("cpu", "app", "cpu.cfs_quota_us") == "-1"
    assert subtree.read("memory", "app", "memory.limit_in_bytes") == UNLIMITED_V1
    assert [r.status for r in adapter.apply(lift)] == ["unchanged", "unchanged"]


def test_observe_reads_the_kernel_in_the_asked_dialect(subtree: Subtree, adapter: CgroupAdapter) -> None:
    app = f"{subtree.name}/app"
    adapter.apply([WriteCgroup(app, "cpu.max", "20000 100000", "t")])
    seen = adapter.observe(
        {
            app: [
                "cpu.max",
                "cpu.cfs_quota_us",
                "cpu.shares",
                "cpu.weight",
                "memory.max",
                "memory.limit_in_bytes",
                "cpuset.cpus",
                "memory.high",
            ]
        }
    )
    cpus = subtree.read("cpuset", "app", "cpuset.cpus")
    expected = {
        "cpu.max": "20000 100000",
        "cpu.cfs_quota_us": "20000",
        "cpu.shares": "1024",
        "cpu.weight": "100",
        "memory.max": "max",
        "memory.limit_in_bytes": "-1",
        "cpuset.cpus": cpus,
    }
    if (subtree.dir("memory", "app") / "memory.high").exists():  # only on kernels with the v1 backport
        expected["memory.high"] = adapter.observe({app: ["memory.high"]})[app]["memory.high"]
    assert seen == {app: expected}


def test_tasks_include_descendants(subtree: Subtree, adapter: CgroupAdapter) -> None:
    assert subtree.pid in adapter.tasks(subtree.name)
    assert adapter.tasks(f"{subtree.name}/app") == [subtree.pid]


def test_cpu_idle_when_the_kernel_has_it(subtree: Subtree, adapter: CgroupAdapter) -> None:
    """cpu.idle exists from 5.15; while a group is idle the kernel refuses shares writes (EINVAL),
    which the error explains."""
    [result] = adapter.apply([w(subtree, "app", "cpu.idle", "1")])
    if not (subtree.dir("cpu", "app") / "cpu.idle").exists():
        assert result.status == "skipped"
        return
    assert result.status == "applied"
    assert subtree.read("cpu", "app", "cpu.idle") == "1"
    [shares] = adapter.apply([w(subtree, "app", "cpu.shares", "256")])
    assert shares.status == "failed"
    assert "'256'" in (shares.error or "") and "EINVAL" in (shares.error or "")
    assert "cpu.idle" in (shares.error or "")
    assert [r.status for r in adapter.apply([w(subtree, "app", "cpu.idle", "0")])] == ["applied"]


def test_planner_order_tightens_children_before_parents(subtree: Subtree, adapter: CgroupAdapter) -> None:
    """A v1 parent's CFS quota may not drop below a child's (EINVAL). Executed in the planner's order
    (bottom-up when tightening) both writes succeed; in the naive order the parent fails."""
    parent, child = subtree.name, f"{subtree.name}/app"
    adapter.apply(
        [
            WriteCgroup(parent, "cpu.cfs_quota_us", "50000", "t"),
            WriteCgroup(child, "cpu.cfs_quota_us", "50000", "t"),
        ]
    )
    naive = adapter.apply([WriteCgroup(parent, "cpu.cfs_quota_us", "20000", "t")])
    assert naive[0].status == "failed" and "'20000'" in (naive[0].error or "")
    desired = [Desired(parent, "cpu.cfs_quota_us", "20000"), Desired(child, "cpu.cfs_quota_us", "20000")]
    observed = adapter.observe({parent: ["cpu.cfs_quota_us"], child: ["cpu.cfs_quota_us"]})
    ordered = order_writes(desired, observed)
    assert [d.path for d in ordered] == [child, parent]
    results = adapter.apply([WriteCgroup(d.path, d.file, d.value, "t") for d in ordered])
    assert [r.status for r in results] == ["applied", "applied"]
    assert subtree.read("cpu", "", "cpu.cfs_quota_us") == "20000"


def test_cpu_max_on_v1_orders_quota_and_period_to_stay_under_the_parent(
    subtree: Subtree, adapter: CgroupAdapter
) -> None:
    """cpu.max on v1 is two files. Under a parent limited to half a CPU, a child going from
    50000/100000 to 20000/40000 must write the quota first (period first would pass through
    50000/40000 = 1.25 CPUs: EINVAL), and going back the period first."""
    parent, child = subtree.name, f"{subtree.name}/app"
    setup = adapter.apply(
        [
            WriteCgroup(parent, "cpu.max", "50000 100000", "t"),
            WriteCgroup(child, "cpu.max", "50000 100000", "t"),
        ]
    )
    assert [r.status for r in setup] == ["applied", "applied"]
    [down] = adapter.apply([WriteCgroup(child, "cpu.max", "20000 40000", "t")])
    assert (down.status, down.attempts) == ("applied", 2)
    assert down.detail.startswith("cpu.cfs_quota_us")
    [up] = adapter.apply([WriteCgroup(child, "cpu.max", "50000 100000", "t")])
    assert (up.status, up.attempts) == ("applied", 2)
    assert up.detail.startswith("cpu.cfs_period_us")
    assert (
        subtree.read("cpu", "app", "cpu.cfs_quota_us"),
        subtree.read("cpu", "app", "cpu.cfs_period_us"),
    ) == ("50000", "100000")


# ---------------------------------------------------------------- faults


def test_cgroup_removed_between_plan_and_write_is_vanished(subtree: Subtree, adapter: CgroupAdapter) -> None:
    subtree.mkdir("gone")
    planned = [
        w(subtree, "gone", "cpu.shares", "256"),
        w(subtree, "gone", "memory.limit_in_bytes", "1048576"),
    ]
    for c in CONTROLLERS:
        subtree.dir(c, "gone").rmdir()
    results = adapter.apply(planned)
    assert [r.status for r in results] == ["vanished", "vanished"]
    assert all("no longer exists" in (r.error or "") for r in results)
    assert [r.attempts for r in results] == [0, 0]


@pytest.mark.realcgroup(cpus=2)
def test_cpuset_outside_the_parent_is_refused_with_the_value_and_the_parents_set(
    subtree: Subtree, adapter: CgroupAdapter
) -> None:
    """v1 answers EACCES here (kernel cpuset1_validate_change), which must not read as a permission
    problem: the message names the value and the parent's set."""
    cpus = sorted(parse_cpuset(subtree.read("cpuset", "", "cpuset.cpus")))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")
    subtree.mkdir("narrow", str(cpus[0]), subtree.read("cpuset", "", "cpuset.mems"))
    subtree.mkdir("narrow/child")
    [result] = adapter.apply([w(subtree, "narrow/child", "cpuset.cpus", str(cpus[1]))])
    assert result.status == "failed"
    error = result.error or ""
    assert f"kernel rejected '{cpus[1]}'" in error and "within its parent's" in error
    assert f"has cpuset.cpus={cpus[0]}" in error  # the parent's set, read on the spot
    assert "permission" not in error
    assert subtree.read("cpuset", "narrow/child", "cpuset.cpus") == ""


def test_malformed_cpuset_is_einval_with_the_value(subtree: Subtree, adapter: CgroupAdapter) -> None:
    [result] = adapter.apply([w(subtree, "app", "cpuset.cpus", "1-0")])
    assert result.status == "failed"
    assert "kernel rejected '1-0'" in (result.error or "") and "(EINVAL)" in (result.error or "")
    assert result.attempts == 1


@pytest.mark.realcgroup(cpus=2)
def test_narrowing_a_parent_below_its_child_is_not_retried(subtree: Subtree, adapter: CgroupAdapter) -> None:
    """v1 answers EBUSY when a child cpuset would fall outside; that is not transient."""
    cpus = sorted(parse_cpuset(subtree.read("cpuset", "", "cpuset.cpus")))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")
    [result] = adapter.apply([w(subtree, "", "cpuset.cpus", str(cpus[0]))])
    assert result.status == "failed" and result.attempts == 1
    assert "(EBUSY)" in (result.error or "") and "narrow the children first" in (result.error or "")


def test_negative_shares_is_einval_with_the_value(subtree: Subtree, adapter: CgroupAdapter) -> None:
    [result] = adapter.apply([w(subtree, "app", "cpu.shares", "-5")])
    assert result.status == "failed"
    assert "kernel rejected '-5'" in (result.error or "")
    assert subtree.read("cpu", "app", "cpu.shares") == "1024"


@pytest.mark.realcgroup(swap_off=True)
def test_memory_limit_below_unreclaimable_usage_is_retried_then_reported(
    subtree: Subtree, adapter: CgroupAdapter
) -> None:
    """With no swap, anonymous memory cannot be reclaimed: the kernel answers EBUSY; the adapter
    retries with backoff and then reports it, leaving the old limit in place."""
    if Path("/proc/swaps").read_text().count("\n") > 1:
        pytest.skip("swap is on: the kernel could reclaim by swapping")
    subtree.mkdir("hog", subtree.read("cpuset", "", "cpuset.cpus"), subtree.read("cpuset", "", "cpuset.mems"))
    hog = subtree.spawn(
        "hog",
        [
            sys.executable,
            "-c",
            "import sys,time; b=bytearray(48<<20); print('ok', flush=True); time.sleep(300)",
        ],
    )
    assert hog.stdout is not None and hog.stdout.readline().strip() == b"ok"
    sleeps: list[float] = []
    busy = CgroupAdapter(adapter.layout, retry=Retry(attempts=3, backoff=0.005, sleep=sleeps.append))
    [result] = busy.apply([w(subtree, "hog", "memory.limit_in_bytes", str(8 << 20))])
    assert result.status == "failed"
    assert result.attempts == 3 and sleeps == [0.005, 0.01]
    assert "EBUSY" in (result.error or "") and str(8 << 20) in (result.error or "")
    assert subtree.read("memory", "hog", "memory.limit_in_bytes") == UNLIMITED_V1
    assert hog.poll() is None  # refused, not OOM-killed


def test_path_escape_is_refused_before_any_io(subtree: Subtree, adapter: CgroupAdapter) -> None:
    for path, file in (
        ("../../../etc", "hostname"),
        (f"{subtree.name}/../..", "cpu.shares"),
        (subtree.name, "../x"),
    ):
        [result] = adapter.apply([WriteCgroup(path, file, "1", "t")])
        assert result.status == "failed", (path, file)
        assert "refused" in (result.error or "")
    assert adapter.writes == 0
