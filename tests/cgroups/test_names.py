"""The v1 <-> v2 file-name registry: each logical file maps to the host files of either version.

The pairs are the kernel's (Documentation/admin-guide/cgroup-v2.rst; reference/ecosystem.md §5.2).
"""

from __future__ import annotations

import pytest

from engine.cgroups.files import RENAMES, controller_of, host_files


@pytest.mark.parametrize(
    ("logical", "v1", "v2"),
    [
        ("cpu.shares", ("cpu.shares",), ("cpu.weight",)),
        ("cpu.weight", ("cpu.shares",), ("cpu.weight",)),
        ("cpu.max", ("cpu.cfs_quota_us", "cpu.cfs_period_us"), ("cpu.max",)),
        ("cpu.cfs_quota_us", ("cpu.cfs_quota_us",), ("cpu.max",)),
        ("cpu.cfs_period_us", ("cpu.cfs_period_us",), ("cpu.max",)),
        ("cpu.cfs_burst_us", ("cpu.cfs_burst_us",), ("cpu.max.burst",)),
        ("cpu.max.burst", ("cpu.cfs_burst_us",), ("cpu.max.burst",)),
        ("memory.limit_in_bytes", ("memory.limit_in_bytes",), ("memory.max",)),
        ("memory.max", ("memory.limit_in_bytes",), ("memory.max",)),
        ("memory.usage_in_bytes", ("memory.usage_in_bytes",), ("memory.current",)),
        ("cpuset.effective_cpus", ("cpuset.effective_cpus",), ("cpuset.cpus.effective",)),
        ("tasks", ("tasks",), ("cgroup.threads",)),
        ("cgroup.threads", ("tasks",), ("cgroup.threads",)),
        # the same name on both (absent where a kernel lacks it)
        ("cpuset.cpus", ("cpuset.cpus",), ("cpuset.cpus",)),
        ("cpu.idle", ("cpu.idle",), ("cpu.idle",)),
        ("memory.high", ("memory.high",), ("memory.high",)),
    ],
)
def test_host_files_of_each_version(logical: str, v1: tuple[str, ...], v2: tuple[str, ...]) -> None:
    assert host_files(logical, 1) == v1
    assert host_files(logical, 2) == v2


@pytest.mark.parametrize(("v1s", "v2"), list(RENAMES.items()))
def test_every_row_of_the_registry_maps_both_ways(v1s: tuple[str, ...], v2: str) -> None:
    assert host_files(v2, 1) == v1s
    assert all(host_files(name, 2) == (v2,) for name in v1s)
    assert {controller_of(name) for name in (*v1s, v2)} == {controller_of(v2)}


@pytest.mark.parametrize(
    ("file", "controller"),
    [("cpuacct.usage", "cpuacct"), ("cpu.stat", "cpu"), ("memory.stat", "memory"), ("tasks", ""), ("cgroup.procs", "")],
)
def test_controller_of_a_file(file: str, controller: str) -> None:
    """The hierarchy a file lives in on v1; "" is the core files every hierarchy has."""
    assert controller_of(file) == controller
