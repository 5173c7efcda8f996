"""The daemon's own footprint: RSS and CPU of a real ``qosd run`` managing N real cgroups.

Run as root on a machine with a writable cgroup v1 hierarchy:

    python -m bench.bench_daemon [--workloads 500] [--seconds 60] [--write]

It creates N empty workload cgroups under ``qosd-bench-daemon/`` (cpu, cpuacct, cpuset, memory),
half named ``batch-*`` (reclaimed by the default name mapping) and half ``svc-*`` (shared), starts
``qosd run`` in standalone mode with the bundled default policy at a 1 s tick, lets it settle for a
warm-up, then measures its CPU time (utime + stime from /proc/<pid>/stat) and peak/final RSS over the
measured window. Targets (DESIGN.md): RSS <= 80 MB and <= 1% of a core at a 1 s tick with 500 containers.

The machines this runs on are shared virtual machines whose speed drifts by up to 2x within minutes.
So the bench also times a fixed pure-Python reference loop in its own process at the start of each
``--window`` seconds of the measurement and reports the daemon's share per window next to it: a
reading is comparable to another only at a similar reference (about 8 ms on this machine's fast
phases, 14-15 ms on its slow ones). /proc/<pid>/stat counts in 10 ms clock ticks, so a 10 s window
is good to about 0.1% of a core.
What a tick does and reads is guarded by tests (tests/test_tick_cost.py), not by these timings.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.results import write_section
from engine.demo import DemoCgroups

ROOT = Path(__file__).resolve().parents[1]
NAME = "qosd-bench-daemon"
HEAD = "## Daemon footprint (issue 5)"


CGROUPS = DemoCgroups(NAME)


def make(n: int) -> list[str]:
    names = [f"{'batch' if i % 2 else 'svc'}-{i:04d}" for i in range(n)]
    CGROUPS.create(names)
    return names


def remove() -> None:
    CGROUPS.remove()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def reference_ms() -> float:
    """The best of five runs of a fixed dict-update loop (CPU time, ms): the machine's speed now."""
    best = float("inf")
    for _ in range(5):
        t = time.process_time()
        d: dict[int, int] = {}
        for i in range(200_000):
            d[i & 1023] = i
        best = min(best, time.process_time() - t)
    return best * 1000


def rss_mb(pid: int) -> tuple[float, float]:
    status = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
    )
    return int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workloads", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--window", type=float, default=10.0, help="seconds per reference window")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root: it creates cgroups")
    remove()
    make(args.workloads)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "engine.cli",
            "run",
            "--root",
            f"{NAME}/*",
            "--listen",
            "",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
    )
    windows: list[tuple[float, float]] = []  # (reference loop ms, daemon's share of a core)
    try:
        time.sleep(args.warmup)
        c0, t0 = cpu_seconds(proc.pid), time.monotonic()
        while time.monotonic() - t0 < args.seconds:
            reference = reference_ms()
            wc, wt = cpu_seconds(proc.pid), time.monotonic()
            time.sleep(min(args.window, max(args.seconds - (wt - t0), 0.1)))
            windows.append((reference, (cpu_seconds(proc.pid) - wc) / (time.monotonic() - wt)))
        c1, t1 = cpu_seconds(proc.pid), time.monotonic()
        rss, peak = rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        remove()
    core = (c1 - c0) / (t1 - t0)
    section = "\n".join(
        [
            HEAD,
            "",
            f"Command: `python -m bench.bench_daemon --workloads {args.workloads} "
            f"--seconds {args.seconds:g} --warmup {args.warmup:g}` (root)",
            "",
            f"Machine: {os.cpu_count()} CPUs, kernel {platform.release()}, "
            f"CPython {platform.python_version()}. "
            f"Date {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. `qosd run`, standalone, bundled default policy, "
            f"1 s tick, {args.workloads} workload cgroups (one container each), {args.warmup:g} s warm-up.",
            "",
            "| measure | value | target |",
            "|---|---:|---:|",
            f"| CPU, share of one core | {core:.2%} | <= 1% |",
            f"| CPU per 1 s tick | {core * 1000:.1f} ms | <= 10 ms |",
            f"| RSS at the end | {rss:.1f} MB | <= 80 MB |",
            f"| peak RSS (VmHWM) | {peak:.1f} MB | |",
            f"| reference loop during the run | {min(r for r, _ in windows):.1f}-"
            f"{max(r for r, _ in windows):.1f} ms | |",
            f"| CPU share per {args.window:g} s window (reference loop) | "
            + ", ".join(f"{share:.2%} ({r:.1f} ms)" for r, share in windows)
            + " | |",
            "",
            "A window that stands out at a similar reference is the policy doing more work, such as a "
            "pressure rule that engaged and ranks eviction victims every tick. (On the VM these numbers "
            "were first recorded on, the bundled numa-memory-pressure rule engages within a minute: NUMA "
            "node 0 reports 4.9 GB with little page cache, below Katalyst's 4 GiB low-watermark floor.)",
            "",
            "Before the tick-cost work (commit 41d3ee4) the same command measured 7.8-9% of a core on "
            'this machine, 90-150 ms per tick. See docs/standalone.md, "What a tick costs", for what a '
            "steady tick reads and how often.",
            "",
        ]
    )
    print(section)
    if args.write:
        write_section(HEAD, section)


if __name__ == "__main__":
    main()
