"""Colocation with a real server: memcached at a fixed request rate next to stress-ng, with and without qosd.

Run as root on a machine with a writable cgroup v1 hierarchy, with memcached and stress-ng installed
(``apt-get install memcached stress-ng``):

    python -m bench.colocation.server [--reps 5] [--duration 25] [--rate 2000] [--write]

Each repetition runs four arms, in an order rotated by one every repetition (so no arm always
follows the same one on a machine whose background load drifts):

- server alone: memcached (2 threads) and its load generator (``bench.colocation.loadgen``: open
  loop, a fixed request rate, latency from each request's due time), both in ``<cg>/online``;
- batch alone: ``stress-ng --cpu <CPUs> --cpu-method int64`` in ``<cg>/batch``, for its solo rate;
- unmanaged: both at once, kernel defaults;
- qosd: both at once under ``qosd run`` with the bundled default policy in standalone mode (no
  workloads file: the default name mapping makes ``online`` shared_cores and ``batch``
  reclaimed_cores), started before the workloads and past its first tick.

Every arm starts from freshly created cgroups, so no arm inherits what qosd wrote in another.
The definitions of the percentiles, the idle CPU and the batch share are in bench/colocation/stats.py
(the same as bench/colocation/run.py's). Targets (issue 15): the managed p99 at most 1.05x the same
repetition's server-alone p99, and the managed batch share at least 85%, both as medians over the
repetitions.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.colocation.stats import batch_share, spread, stress_ng_rate
from bench.results import write_section
from engine.demo import DemoCgroups, _wait_for_first_tick, decisions

HEAD = "## Colocation with a real server: memcached + stress-ng (issue 15)"
ARMS = ("server alone", "batch alone", "unmanaged", "qosd")
CGROUP = "qosd-srvbench"


def arm_order(rep: int) -> tuple[str, ...]:
    """The arms of repetition ``rep``, rotated by one per repetition."""
    k = rep % len(ARMS)
    return ARMS[k:] + ARMS[:k]


def _usage(cg: DemoCgroups, group: str = "") -> int:
    return int((cg.dir("cpuacct", group) / "cpuacct.usage").read_text())


def busy_seconds(stat: str) -> float:
    """CPU seconds spent busy on the whole machine (user, nice, system, irq, softirq, steal) from the
    ``cpu`` line of /proc/stat, in the kernel's USER_HZ ticks (100 a second on Linux)."""
    fields = stat.split("\n", 1)[0].split()
    if fields[:1] != ["cpu"] or len(fields) < 9:
        raise ValueError(f"not the aggregate cpu line of /proc/stat: {fields[:3]}")
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _busy() -> float:
    return busy_seconds(Path("/proc/stat").read_text())


def run_arm(cg: DemoCgroups, arm: str, a: argparse.Namespace, port: int) -> dict[str, Any]:
    cg.remove()
    cg.create()
    server, batch, managed = arm != "batch alone", arm != "server alone", arm == "qosd"
    out: dict[str, Any] = {"arm": arm}
    tmp = Path(tempfile.mkdtemp(prefix="qosd-srvbench-"))
    procs: list[subprocess.Popen[str]] = []
    daemon = None
    try:
        if managed:  # its own CPU counts among the others': it runs outside the bench's cgroups
            daemon = subprocess.Popen(
                [sys.executable, "-m", "engine.cli", "run", "--interval", "1s", "--listen", "",
                 "--root", f"{cg.name}/*", "--audit-log", str(tmp / "audit.jsonl")],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            _wait_for_first_tick(daemon, tmp / "audit.jsonl")
            if daemon.poll() is not None:
                raise RuntimeError(f"qosd run exited early: {daemon.communicate()[1][-2000:]}")
        sng = None
        t0, busy0, bench0 = time.monotonic(), _busy(), _usage(cg)
        if batch:
            batch0 = _usage(cg, "batch")
            seconds = math.ceil(a.warmup + a.duration + 3)
            sng = cg.popen(
                "batch",
                ["stress-ng", "--cpu", str(os.cpu_count() or 1), "--cpu-method", "int64",
                 "--timeout", str(seconds), "--metrics-brief", "--yaml", str(tmp / "sng.yaml")],
            )  # fmt: skip
            procs.append(sng)
            t_batch = time.monotonic()
        if server:
            mc = cg.popen(
                "online",
                ["memcached", "-u", "root", "-l", "127.0.0.1", "-p", str(port), "-t", "2", "-m", "64"],
            )
            procs.append(mc)
            gen = cg.popen(
                "online",
                [sys.executable, "-m", "bench.colocation.loadgen", "--port", str(port),
                 "--rate", str(a.rate), "--duration", str(a.duration), "--warmup", str(a.warmup),
                 "--cpu-usage-file", str(cg.dir("cpuacct", "online") / "cpuacct.usage")],
            )  # fmt: skip
            procs.append(gen)
            stdout, _ = gen.communicate(timeout=a.duration * 4 + 120)
            if gen.returncode != 0:
                raise RuntimeError(f"the load generator exited with {gen.returncode}")
            out.update(json.loads(stdout.strip().splitlines()[-1]))
            mc.terminate()
            mc.wait(timeout=30)
        if sng is not None:
            sng.communicate(timeout=a.duration * 4 + 120)
            wall = time.monotonic() - t_batch
            if sng.returncode != 0:
                raise RuntimeError(f"stress-ng exited with {sng.returncode}")
            out["batch_rate"] = stress_ng_rate((tmp / "sng.yaml").read_text())
            out["batch_cores"] = (_usage(cg, "batch") - batch0) / 1e9 / wall
        wall = time.monotonic() - t0
        out["other_cores"] = (_busy() - busy0 - (_usage(cg) - bench0) / 1e9) / wall
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if daemon is not None:
            daemon.terminate()
            daemon.communicate(timeout=60)
            out["decisions"] = decisions(tmp / "audit.jsonl")
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def derive(reps: Sequence[dict[str, dict[str, Any]]], cpus: int) -> list[dict[str, dict[str, Any]]]:
    """Per repetition: each colocated arm's p99 against that repetition's server-alone p99, each
    batch-running arm's share of the CPU the server left idle in that repetition, and the managed
    batch rate against the unmanaged one (both next to the server, so the same neighbours)."""
    out = []
    for rep in reps:
        alone, solo = rep["server alone"], rep["batch alone"]
        row = {arm: dict(r) for arm, r in rep.items()}
        for r in row.values():
            if "p99_us" in r:
                r["p99_ratio"] = r["p99_us"] / alone["p99_us"]
            if "batch_rate" in r:
                r["batch_share"] = batch_share(r["batch_rate"], solo["batch_rate"], alone["cpu_cores"], cpus)
        row["qosd"]["batch_vs_unmanaged"] = row["qosd"]["batch_rate"] / row["unmanaged"]["batch_rate"]
        out.append(row)
    return out


def verdict(s: dict[str, float], target: float, *, below: bool, fmt: str, unit: str) -> str:
    """The median against its target, and whether the repetitions' range lies on one side of it: a
    range that straddles the target says the run cannot tell."""
    ok = (lambda v: v <= target) if below else (lambda v: v >= target)
    if ok(s["min"]) == ok(s["max"]):
        side = "every repetition meets it" if ok(s["min"]) else "no repetition meets it"
    else:
        side = f"the range {s['min']:{fmt}}–{s['max']:{fmt}} straddles the target"
    return f"**{s['median']:{fmt}}{unit}** ({'met' if ok(s['median']) else 'not met'} by the median; {side})"


def markdown(rows: Sequence[dict[str, dict[str, Any]]], a: argparse.Namespace, cpus: int, when: str,
             load: str) -> str:  # fmt: skip
    def f(r: dict[str, Any], key: str, fmt: str) -> str:
        return format(r[key], fmt) if key in r else "–"

    lines = [
        HEAD,
        "",
        f"Command: `python -m bench.colocation.server {' '.join(sys.argv[1:])}` "
        "(as root; cgroup v1 hierarchy)",
        "",
        f"Machine: {cpus} CPUs, kernel {platform.release()}, CPython {platform.python_version()}, "
        f"{when}; {load} (the others' cores column is what the rest of the machine used). Server: memcached "
        f"(Debian, 2 threads) with an open-loop generator at {a.rate:g} gets/s on 4 connections "
        f"(latency from each request's due time); batch: `stress-ng --cpu {cpus} --cpu-method int64` "
        f"(bogo ops/s, wall clock). {a.duration:g} s measured per arm after {a.warmup:g} s warm-up, "
        f"{len(rows)} repetitions, arms rotated per repetition.",
        "",
        "| rep | arm | p50 µs | p99 µs | p999 µs | p99 vs alone | server cores | batch bogo ops/s "
        "| batch cores | batch share of idle CPU | others' cores |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for i, rep in enumerate(rows, 1):
        for arm in arm_order(i - 1):
            r = rep[arm]
            lines.append(
                f"| {i} | {arm} | {f(r, 'p50_us', '.0f')} | {f(r, 'p99_us', '.0f')} | "
                f"{f(r, 'p999_us', '.0f')} | {f(r, 'p99_ratio', '.2f')} | {f(r, 'cpu_cores', '.3f')} | "
                f"{f(r, 'batch_rate', '.0f')} | {f(r, 'batch_cores', '.2f')} | "
                f"{f(r, 'batch_share', '.0%')} | {f(r, 'other_cores', '.2f')} |"
            )
    lines += ["", "| arm | p99 µs median (min–max) | p99 vs alone median (min–max) | "
              "batch share median (min–max) | batch vs unmanaged median (min–max) |",
              "|---|---:|---:|---:|---:|"]  # fmt: skip
    summary: dict[str, dict[str, dict[str, float]]] = {}
    for arm in ARMS:
        cells = []
        summary[arm] = {}
        for key, fmt in (
            ("p99_us", ".0f"),
            ("p99_ratio", ".2f"),
            ("batch_share", ".0%"),
            ("batch_vs_unmanaged", ".0%"),
        ):
            vals = [rep[arm][key] for rep in rows if key in rep[arm]]
            if not vals:
                cells.append("–")
                continue
            s = summary[arm][key] = spread(vals)
            cells.append(f"{s['median']:{fmt}} ({s['min']:{fmt}}–{s['max']:{fmt}})")
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    m = summary["qosd"]
    lines += [
        "",
        "Targets (medians over the repetitions): managed p99 <= 1.05x alone -> "
        + verdict(m["p99_ratio"], 1.05, below=True, fmt=".2f", unit="x")
        + "; managed batch >= 85% of the CPU the server leaves idle -> "
        + verdict(m["batch_share"], 0.85, below=False, fmt=".0%", unit="")
        + ".",
    ]
    caveat = comparability(rows)
    lines += ["", caveat, ""] if caveat else [""]
    return "\n".join(lines)


OTHERS_TOLERANCE = 0.25  # cores: an eighth of this 2-CPU machine


def comparability(rows: Sequence[dict[str, dict[str, Any]]]) -> str:
    """Why the ratios to the alone arms cannot be read as qosd's effect, or "" when they can.

    Each ratio compares the managed arm with an alone arm run at another moment; on a shared machine
    they are comparable only if the rest of the machine used about the same CPU in both (the others'
    cores, median over the repetitions, within ``OTHERS_TOLERANCE``)."""
    med = {
        arm: statistics.median(rep[arm]["other_cores"] for rep in rows)
        for arm in ARMS
        if all("other_cores" in rep[arm] for rep in rows)
    }
    off = [
        f"{arm} {med[arm]:.2f}"
        for arm in ("server alone", "batch alone")
        if arm in med and "qosd" in med and abs(med[arm] - med["qosd"]) > OTHERS_TOLERANCE
    ]
    if not off:
        return ""
    return (
        f"**Not comparable:** the rest of the machine used {', '.join(off)} cores (median) during the "
        f"alone arms against {med['qosd']:.2f} during the managed arms (tolerance {OTHERS_TOLERANCE:g}), "
        "so the ratios above measure the neighbours as much as qosd."
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--duration", type=float, default=25.0, help="measured seconds per arm")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--rate", type=float, default=2000.0, help="memcached gets per second")
    parser.add_argument("--port", type=int, default=21299)
    parser.add_argument("--json", type=Path, help="also write every arm's raw result here")
    parser.add_argument("--write", action="store_true", help="record the result in bench/RESULTS.md")
    a = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("the real-server colocation bench needs root (it creates cgroups)")
    missing = [t for t in ("memcached", "stress-ng") if shutil.which(t) is None]
    if missing:
        sys.exit(f"missing {', '.join(missing)}: apt-get install memcached stress-ng")
    cpus = os.cpu_count() or 1
    cg = DemoCgroups(CGROUP)
    started = datetime.now(UTC)
    load0 = os.getloadavg()[0]
    reps: list[dict[str, dict[str, Any]]] = []
    try:
        for rep in range(a.reps):
            results = {}
            for arm in arm_order(rep):
                print(f"rep {rep + 1}/{a.reps}: {arm} ...", file=sys.stderr, flush=True)
                results[arm] = run_arm(cg, arm, a, a.port)
                print(f"  {json.dumps({k: v for k, v in results[arm].items() if k != 'decisions'})}",
                      file=sys.stderr, flush=True)  # fmt: skip
            reps.append(results)
    finally:
        cg.remove()
    rows = derive(reps, cpus)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    load = f"load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    when = f"{started:%Y-%m-%d %H:%M}–{datetime.now(UTC):%H:%M} UTC"
    section = markdown(rows, a, cpus, when, load)
    print(section)
    dec = rows[-1]["qosd"].get("decisions", ())
    print("qosd's writes in the last managed arm:\n  " + "\n  ".join(dec or ("none",)), file=sys.stderr)
    if a.write:
        write_section(HEAD, section)


if __name__ == "__main__":
    main()
