"""``qosd demo``: the live colocation on this machine's real cgroups (root), and the simulated fallback.

The live test runs the real workloads and a real ``qosd run`` on cgroup v1 with short runs; it asserts
what qosd decided and that every run measured something, never a latency figure (those are recorded by
bench/colocation with their targets, not asserted in tests).
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engine.cli import main as cli_main
from engine.demo import DemoCgroups, Load, live, percentile, simulated
from engine.demo_report import Spread, verdict


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


def test_simulated_demo_explains_its_slo_risk_minutes(capsys: pytest.CaptureFixture[str]) -> None:
    """The default policy's day shows minutes at SLO risk with reclaim; the demo says what they are:
    CPU is batch at the lowest weight filling the node, memory is real, and the memory evictions
    that never fired read signals the simulated node does not produce (named from the run)."""
    assert cli_main(["demo", "--simulate"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    m = re.search(r"minutes at SLO risk with reclaim (\d+) min", text)
    assert m is not None and int(m.group(1)) > 0
    assert f"Reading the {m.group(1)} minutes at SLO risk with reclaim" in text
    assert "cpu.shares 2 / SCHED_IDLE" in text
    assert "numa-memory-pressure reads numa.memory.watermark_pressure" in text
    assert "system-memory-pressure reads node.memory.pressure" in text


S = Spread


@pytest.mark.parametrize(
    ("alone", "unmanaged", "managed", "said"),
    [
        ((100.0,), (2.0,), (1.0,), "One round only"),
        (
            (100.0, 160.0, 110.0),
            (2.0, 2.1, 2.2),
            (1.0, 1.0, 1.1),
            "too noisy to conclude: the probe alone varied by 60%",
        ),
        (
            (100.0, 110.0, 105.0),
            (2.0, 2.1, 2.4),
            (1.0, 1.05, 1.1),
            "qosd kept the probe's p99 lower in every round",
        ),
        (
            (100.0, 110.0, 105.0),
            (0.9, 1.0, 1.1),
            (2.0, 2.3, 2.4),
            "qosd made the probe's p99 worse in every round",
        ),
        ((100.0, 110.0, 105.0), (0.97, 1.5, 2.0), (0.9, 1.2, 2.35), "The rounds overlap"),
    ],
)
def test_verdict_says_when_the_machine_is_too_noisy(
    alone: tuple[float, ...], unmanaged: tuple[float, ...], managed: tuple[float, ...], said: str
) -> None:
    """The reported flip (0.97x in one run, 2.35x in the next) is 'too noisy to conclude', not a result."""
    text = verdict(S(alone), S(unmanaged), S(managed), "load average 3.0 on 2 CPUs")
    assert said in text
    if said == "The rounds overlap":
        assert "too noisy to conclude whether qosd helped" in text


def test_spread_reports_median_and_range() -> None:
    assert S((3.0, 1.0, 2.0)).text("x", 2) == "2.00x (1.00-3.00)"
    assert S((5.0,)).text() == "5"


def test_repeat_is_bounded(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli_main(["demo", "--repeat", "0"])
    assert exc.value.code == 2 and "--repeat" in capsys.readouterr().err


@pytest.mark.realcgroup
def test_live_demo_on_real_cgroups_shows_qosd_deprioritizing_the_batch_cgroup() -> None:
    reason = DemoCgroups.available()
    if reason is not None:
        pytest.skip(f"live demo needs root and cgroup v1: {reason}")
    out = io.StringIO()
    assert live(Load(duration=0.5, warmup=0.2), out, repeats=2) == 0
    text = out.getvalue()
    decided = text.split("What qosd decided", 1)[1].split("\n\n", 1)[0]
    assert "qosd-demo/batch/cpu.idle = 1" in decided or "qosd-demo/batch/cpu.shares = 2" in decided
    for run in ("probe alone", "probe + batch, no qosd", "probe + batch, qosd run"):
        assert text.count(f": {run} ...") == 2  # each scenario in each round
        row = next(line for line in text.splitlines() if line.startswith(run))
        assert re.search(r"\d+ \(\d+-\d+\)", row), row  # a median with the rounds' range
    assert re.search(r"(kept the probe's p99 lower|made the probe's p99 worse|too noisy to conclude)", text)
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
