"""What the daemon's tick gauges cost, in one process (issue 19): the per-tick hand-over, against the
tick itself, and the per-scrape cost of building the gauges.

    python -m bench.bench_metrics [--workloads 500] [--ticks 300] [--scrapes 200] [--write]

The tick is the daemon's pure tick (``run_tick``) on the every-strategy policy
(bench/all-strategies.yaml) at 16 CPUs, 2 NUMA nodes and N workloads, as bench_tick builds it. After
each tick the daemon hands its metrics a ``TickView`` (engine.daemon.tick_metrics): that hand-over is
what every tick pays for the gauges, timed here around exactly the daemon's code. The scrape, in the
daemon's HTTP thread, builds every gauge from the last view and renders the whole registry
(``generate_latest``), as ``/metrics`` does; it runs once per scrape interval (30 s in the
ServiceMonitor), so its cost per second is the scrape's divided by 30.

The machine is shared and its speed drifts, so the figures to compare are the ratios within this
one run: hand-over / tick, and scrape per second / tick. ``python -m bench.bench_daemon --workloads
500`` measures the whole daemon's CPU on a quiet machine.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
from datetime import UTC, datetime

from prometheus_client import generate_latest

from bench.bench_tick import Runner, inputs
from bench.results import write_section
from engine.daemon.metrics import Metrics
from engine.daemon.tick_metrics import TickView
from engine.plan.planner import Guards
from engine.tick import run_tick

HEAD = "## Metrics: what the daemon's gauges cost (issue 19)"
SCRAPE_INTERVAL = 30.0  # seconds, the ServiceMonitor's


BLOCK = 10  # ticks per turn: the two sides alternate in blocks, so the machine's drift hits both


def measure(n: int, ticks: int, scrapes: int) -> dict[str, float]:
    """Side A runs the tick alone, side B the tick and the daemon's hand-over, in alternating blocks;
    each tick's time includes releasing the previous tick's objects (A: when its result is replaced,
    B: when its view is). The hand-over alone is also timed with the previous view already released
    and the cyclic collector paused: what it does itself."""
    # bench_tick's runner: each tick's cgroup writes land before the next tick, so after the warm-up
    # the plan is a steady state, the daemon's normal case
    runner = Runner(*inputs(16, 2, n, BLOCK, True), "python", True, 0.0)
    engine, quiet = runner.engine, runner.quiet
    metrics = Metrics()
    state = runner.state
    sides: dict[str, list[float]] = {"A": [], "B": []}
    alone: list[float] = []
    result = None
    for tick in quiet:  # one unmeasured block: the writes of the first plans land
        result = run_tick(engine, runner._observed(tick), state, Guards())
        state = result.state
        runner._land(result)
    for block in range(2 * ((ticks + BLOCK - 1) // BLOCK)):
        side = "AB"[block % 2]
        metrics.tick.view = None
        for tick in quiet:
            snap = runner._observed(tick)
            t0 = time.perf_counter()
            result = run_tick(engine, snap, state, Guards())
            state = result.state
            if side == "B":  # exactly the daemon's hand-over (engine.daemon.loop.Daemon.tick)
                members = engine.members(snap.workloads)
                metrics.tick.saw(TickView(engine, result.evaluation, state, snap.metrics.node, members))
            sides[side].append(time.perf_counter() - t0)
            runner._land(result)
        if side == "B":
            metrics.tick.view = None
            gc.disable()
            t0 = time.perf_counter()
            members = engine.members(snap.workloads)
            metrics.tick.saw(TickView(engine, result.evaluation, state, snap.metrics.node, members))
            alone.append(time.perf_counter() - t0)
            gc.enable()
    runner.close()
    scrape_s: list[float] = []
    body = b""
    for _ in range(scrapes):
        t0 = time.perf_counter()
        body = generate_latest(metrics.registry)
        scrape_s.append(time.perf_counter() - t0)
    a, b = statistics.median(sides["A"]), statistics.median(sides["B"])
    hand = statistics.median(alone)
    scrape = statistics.median(scrape_s)
    return {
        "tick_ms": a * 1e3,
        "tick_with_ms": b * 1e3,
        "ab_ratio": b / a,
        "handover_us": hand * 1e6,
        "handover_per_tick": hand / a,
        "handover_core_percent": hand * 100,  # at a 1 s tick
        "scrape_ms": scrape * 1e3,
        "scrape_core_percent": scrape / SCRAPE_INTERVAL * 100,
        "scrape_per_tick": scrape / SCRAPE_INTERVAL / a,
        "bytes": float(len(body)),
        "series": float(sum(1 for line in body.splitlines() if not line.startswith(b"#"))),
    }


def report(n: int, ticks: int, scrapes: int, r: dict[str, float]) -> str:
    rows = [
        ("A: tick (`run_tick`)", f"{r['tick_ms']:.2f} ms", "1", f"{r['tick_ms'] / 10:.3f}% at a 1 s tick"),
        (
            "B: tick and the hand-over, alternating with A",
            f"{r['tick_with_ms']:.2f} ms",
            f"{r['ab_ratio']:.4f}",
            f"{r['tick_with_ms'] / 10:.3f}%",
        ),
        (
            "the hand-over alone (previous view released, collector paused)",
            f"{r['handover_us']:.2f} µs",
            f"{r['handover_per_tick']:.5f}",
            f"{r['handover_core_percent']:.5f}%",
        ),
        (
            "scrape (`/metrics`, every gauge built and rendered)",
            f"{r['scrape_ms']:.2f} ms",
            f"{r['scrape_per_tick']:.5f} per second",
            f"{r['scrape_core_percent']:.4f}% at a {SCRAPE_INTERVAL:g} s scrape",
        ),
    ]
    table = "\n".join(f"| {' | '.join(row)} |" for row in rows)
    return f"""{HEAD}

`python -m bench.bench_metrics --workloads {n} --ticks {ticks} --scrapes {scrapes} --write`
({datetime.now(UTC):%Y-%m-%d %H:%M} UTC; the every-strategy policy, 16 CPUs, 2 NUMA nodes, {n} workloads,
one process; medians; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at the end). The ratios
are what carries over between machines: the absolute times drift with the load of this shared machine.

| what | median | share of a tick | % of a core |
|---|---|---|---|
{table}

The scrape renders {int(r["series"])} series ({int(r["bytes"])} bytes). What the gauges add to a tick is
the hand-over only: one TickView and the engine's cached class index (an identity check of the
workload tuple), no kernel read and no label lookup. A/B differences of a few percent either way
are this shared machine's noise (B below A happens); the hand-over's own time is the figure to read.
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_metrics", description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", type=int, default=500)
    p.add_argument("--ticks", type=int, default=300)
    p.add_argument("--scrapes", type=int, default=200)
    p.add_argument("--write", action="store_true", help="replace this bench's section of bench/RESULTS.md")
    args = p.parse_args(argv)
    r = measure(args.workloads, args.ticks, args.scrapes)
    text = report(args.workloads, args.ticks, args.scrapes, r)
    print(text)
    if args.write:
        write_section(HEAD, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
