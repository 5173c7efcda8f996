"""``qosd demo``: the live colocation on this machine's real cgroups (root), and the simulated fallback.

The live test runs the real workloads and a real ``qosd run`` on cgroup v1 with short runs; it asserts
what qosd decided and that every run measured something, never a latency figure (those are recorded by
bench/colocation with their targets, not asserted in tests).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.demo import DemoCgroups, Load, live, percentile, simulated


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0.5, 5),
        ([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0.99, 10),
        (list(range(1, 1001)), 0.99, 990),
        (list(range(1, 1001)), 0.999, 999),
        ([7], 0.5, 7),
        ([], 0.99, 0),
    ],
)
def test_nearest_rank_percentile(values: list[int], q: float, expected: float) -> None:
    assert percentile(values, q) == expected


def test_the_probe_workload_reports_its_latency_distribution() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "engine.demo", "probe", "--duration", "0.3", "--warmup", "0", "--rate", "100"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    result = json.loads(out)
    assert result["count"] == 30
    assert 0 < result["p50_us"] <= result["p99_us"] <= result["p999_us"]


def test_simulated_fallback_replays_a_day_through_the_engine() -> None:
    out = io.StringIO()
    assert simulated("not running as root", out) == 0
    text = out.getvalue()
    assert "not running as root" in text and "SUMMARY (288 ticks" in text
    assert "with reclaim" in text


@pytest.mark.realcgroup
def test_live_demo_on_real_cgroups_shows_qosd_deprioritizing_the_batch_cgroup() -> None:
    reason = DemoCgroups.available()
    if reason is not None:
        pytest.skip(f"live demo needs root and cgroup v1: {reason}")
    out = io.StringIO()
    assert live(Load(duration=0.5, warmup=0.2), out) == 0
    text = out.getvalue()
    decided = text.split("What qosd decided", 1)[1].split("\n\n", 1)[0]
    assert "qosd-demo/batch/cpu.idle = 1" in decided or "qosd-demo/batch/cpu.shares = 2" in decided
    for run in ("probe alone", "probe + batch, no qosd", "probe + batch, qosd run"):
        assert run in text
    assert not DemoCgroups().dir("cpu").exists()


def test_the_live_demo_needs_real_v1_mounts_not_look_alike_directories(tmp_path: Path) -> None:
    """Directories named like controllers (a v2 cgroup called ``cpu`` has a cgroup.procs too) are not
    v1 hierarchies: the demo asks the one cgroup detector (the mount table), not the file names."""
    for ctrl in ("cpu", "cpuacct", "cpuset", "memory"):
        (tmp_path / ctrl).mkdir()
        (tmp_path / ctrl / "cgroup.procs").write_text("")
    reason = DemoCgroups.available(tmp_path)
    if reason == "not running as root":
        pytest.skip("the check after the root check needs root")
    assert reason is not None and f"no cgroup filesystem is mounted at or under {tmp_path}" in reason
