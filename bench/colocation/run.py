"""Real colocation benchmark: a latency probe next to a CPU-hungry batch job, with and without qosd.

Run as root on a machine with a writable cgroup v1 hierarchy (these machines have one):

    python -m bench.colocation.run [--duration 20] [--write]

Scenarios, in one run so their ratios share the machine's state:

1. probe alone             -> the probe's latency baseline, and the CPU it uses
2. batch alone             -> the batch job's solo throughput
3. colocated, unmanaged    -> both at once, kernel defaults
4. colocated, qosd         -> both at once under ``qosd run`` with the bundled default policy in
                              standalone mode (no workloads file: the default name mapping makes
                              ``qosd-bench/batch`` reclaimed_cores and ``qosd-bench/online`` shared_cores)

The workloads and the cgroup scaffolding are ``engine.demo``'s (``qosd demo`` runs a short version).

Reported: the probe's p99 against running alone (target <= 1.10x managed), and the batch job's
throughput against what it could get from the CPU the probe leaves idle, i.e. its solo rate scaled
by (CPUs - probe cores) / CPUs (target >= 70% managed).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.results import write_section
from engine.demo import DemoCgroups, Load, Run, run

ROOT = Path(__file__).resolve().parents[2]
HEAD = "## Colocation on real cgroups (issue 5)"


def report(scenarios: dict[str, Run], cpus: int) -> dict[str, Any]:
    alone = scenarios["probe alone"].probe
    solo = scenarios["batch alone"].batch
    assert alone is not None and solo is not None
    idle_cpus = cpus - alone["cpu_cores"]
    out: dict[str, Any] = {"cpus": cpus, "probe_cores_alone": alone["cpu_cores"], "rows": []}
    for sc in scenarios.values():
        row: dict[str, Any] = {"scenario": sc.name}
        if sc.probe:
            row.update({k: sc.probe[k] for k in ("p50_us", "p99_us", "p999_us")})
            row["p99_ratio"] = sc.probe["p99_us"] / alone["p99_us"]
        if sc.batch:
            row["batch_rate"] = sc.batch["rate"]
            row["batch_vs_solo"] = sc.batch["rate"] / solo["rate"]
            row["batch_vs_idle"] = sc.batch["rate"] / (solo["rate"] * idle_cpus / cpus)
        out["rows"].append(row)
    return out


def markdown(result: dict[str, Any], command: str) -> str:
    lines = [
        HEAD,
        "",
        f"Command: `{command}` (as root; cgroup v1 hierarchy)",
        "",
        f"Machine: {result['cpus']} CPUs, kernel {platform.release()}, CPython {platform.python_version()}. "
        f"Date {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. Probe: {result['rate']:g} requests/s of fixed work; "
        f"batch: one busy worker per CPU; {result['duration']:g} s measured per scenario after 1 s warm-up. "
        f"The probe alone uses {result['probe_cores_alone']:.3f} cores, so the CPU it leaves idle is "
        f"{result['cpus'] - result['probe_cores_alone']:.2f} CPUs.",
        "",
        "| scenario | probe p50 µs | p99 µs | p999 µs | p99 vs alone | batch vs solo | batch vs idle CPU |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:

        def f(key: str, fmt: str, r: dict[str, Any] = r) -> str:
            return format(r[key], fmt) if key in r else "–"

        lines.append(
            f"| {r['scenario']} | {f('p50_us', '.0f')} | {f('p99_us', '.0f')} | {f('p999_us', '.0f')} | "
            f"{f('p99_ratio', '.2f')}x | {f('batch_vs_solo', '.0%')} | {f('batch_vs_idle', '.0%')} |"
        )
    managed = next(r for r in result["rows"] if r["scenario"] == "colocated, qosd")
    lines += [
        "",
        f"Targets: managed p99 <= 1.10x alone -> **{managed['p99_ratio']:.2f}x**; batch keeps >= 70% of the "
        f"CPU the probe leaves idle -> **{managed['batch_vs_idle']:.0%}**.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--work", type=int, default=5000)
    parser.add_argument("--write", action="store_true", help="record the result in bench/RESULTS.md")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit(
            "the colocation benchmark needs root (it creates cgroups); try `qosd demo` for a simulated node"
        )
    cg = DemoCgroups("qosd-bench")
    cg.remove()
    cg.create()
    load = Load(duration=args.duration, rate=args.rate, work=args.work)
    scenarios: dict[str, Run] = {}
    try:
        for name, probe, batch, managed in (
            ("probe alone", True, False, False),
            ("batch alone", False, True, False),
            ("colocated, unmanaged", True, True, False),
            ("colocated, qosd", True, True, True),
        ):
            print(f"running: {name} ...", file=sys.stderr, flush=True)
            scenarios[name] = run(cg, name, load, with_probe=probe, with_batch=batch, managed=managed)
    finally:
        cg.remove()
    result = report(scenarios, os.cpu_count() or 1)
    result.update(rate=args.rate, duration=args.duration)
    section = markdown(result, "python -m bench.colocation.run " + " ".join(sys.argv[1:]))
    print(section)
    if args.write:
        write_section(HEAD, section)


if __name__ == "__main__":
    main()
