"""Tick latency: snapshot -> operations, at four node sizes, for both evaluation backends in one run.

    python -m bench.bench_tick [--ticks N] [--backends python,durable] [--write]

Each size gets a synthetic node (HT pairs, NUMA nodes) and workloads of every Katalyst QoS level with
per-pod metrics, evaluated against the bundled default policy with the RSS-overuse overlay from
rules/examples switched on, so per-pod rules run over every pod. Ticks alternate between a quiet
snapshot and one under memory pressure (evictions, pending credit), carrying engine state, and reuse
workload objects between ticks as the daemon's sources do. Backends run interleaved per size so noise
on this shared 2-core machine hits both alike; compare the ratios, not the absolute times.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import time
from pathlib import Path
from types import MappingProxyType
from typing import Any

from engine.config.pipeline import build_policy, load_documents
from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState
from engine.model.facts import Container, Cpu, Metrics, Snapshot, Topology, Workload
from engine.model.node import NodeInfo
from engine.plan.planner import Guards
from engine.tick import run_tick

ROOT = Path(__file__).resolve().parent.parent
SIZES = ((16, 2, 20), (96, 2, 200), (256, 4, 500), (384, 4, 2000))  # (CPUs, NUMA nodes, containers)
GiB = float(1 << 30)
QOS = "katalyst.kubewharf.io/qos_level"
MEM = "katalyst.kubewharf.io/memory_enhancement"
SECTION = "## Tick latency (issue 3)"


def workloads(n: int) -> tuple[Workload, ...]:
    out = []
    for i in range(n):
        level = ("shared_cores", "reclaimed_cores", "reclaimed_cores", "dedicated_cores", "system_cores")[
            i % 5
        ]
        ann = {QOS: level}
        if level == "dedicated_cores":
            ann[MEM] = json.dumps({"numa_binding": "true"})
        mem = float((1 + i % 4) * GiB)
        out.append(
            Workload(
                uid=f"uid-{i}",
                name=f"pod-{i}",
                namespace="bench",
                annotations=MappingProxyType(ann),
                priority=1000 + i % 7,
                kube_qos="Guaranteed" if level == "dedicated_cores" else "Burstable",
                containers=(
                    Container("main", requests={"cpu": 1.0, "memory": mem}, limits={"memory": 2 * mem}),
                ),
            )
        )
    return tuple(out)


def snapshot(cpus: int, numa: int, pods: tuple[Workload, ...], t: float, pressure: bool) -> Snapshot:
    per_numa = cpus // numa
    topo = Topology(
        tuple(
            Cpu(i, (i % per_numa) // 2, i // (cpus // 2) if numa > 1 else 0, i // per_numa)
            for i in range(cpus)
        ),
        {n: 64 * GiB for n in range(numa)},
    )
    memory = 64 * GiB * numa
    node = NodeInfo(
        "bench",
        {},
        {"cpu": float(cpus), "memory": memory},
        cpus,
        numa,
        2,
        int(memory),
        frozenset(range(cpus)),
    )
    used = 0.93 if pressure else 0.5
    pod_metrics = {
        w.uid: MappingProxyType(
            {
                "cpu.usage_cores": 0.6,
                "memory.usage_bytes": w.request("memory") * (1.2 if pressure else 0.8),
                "memory.rss_bytes": w.request("memory")
                * (1.1 if pressure and int(w.uid[4:]) % 9 == 0 else 0.7),
            }
        )
        for w in pods
    }
    node_metrics = MappingProxyType(
        {
            "cpu.usage_cores": cpus * 0.55,
            "memory.usage_bytes": memory * used,
            "memory.free_bytes": memory * (1 - used),
            "psi.memory.some.avg10": 20.0 if pressure else 0.5,
            "psi.memory.some.avg10@min:15s": 20.0 if pressure else 0.5,
        }
    )
    numa_metrics = {
        n: MappingProxyType(
            {"memory.below_watermark_count": 13 if pressure else 0, "memory.free_bytes": 8 * GiB}
        )
        for n in range(numa)
    }
    return Snapshot(
        t, node, topo, pods, Metrics(node_metrics, numa_metrics, pod_metrics), {"cpu": cpus - 2.0}
    )


def measure(cpus: int, numa: int, n: int, backends: list[str], ticks: int) -> dict[str, dict[str, float]]:
    docs = load_documents([ROOT / "rules/examples/enable-rss-overuse.yaml"])
    pods = workloads(n)
    probe = snapshot(cpus, numa, pods, 0.0, False)
    node = probe.node.with_labels({"node.example.com/pool": "batch"})
    policy = build_policy(docs, node)
    quiet = [snapshot(cpus, numa, pods, float(t), False) for t in range(ticks)]
    loud = [snapshot(cpus, numa, pods, float(t), True) for t in range(ticks)]
    engines = {b: Engine(policy, backend=b) for b in backends}
    states = {b: EngineState() for b in backends}
    times: dict[str, list[float]] = {b: [] for b in backends}
    cond_times: dict[str, list[float]] = {b: [] for b in backends}
    for b, engine in engines.items():
        inner = engine.backend.evaluate_many

        def timed(node: Any, classes: Any, calls: Any, inner: Any = inner, b: str = b) -> list[bool]:
            t0 = time.perf_counter()
            answers: list[bool] = inner(node, classes, calls)
            cond_times[b].append(time.perf_counter() - t0)
            return answers

        engine.backend.evaluate_many = timed  # type: ignore[method-assign]
    try:
        for b in backends:  # warm-up: compile caches, classification, worker start
            run_tick(engines[b], quiet[0], EngineState(), Guards())
        for t in range(ticks):
            snap = loud[t] if t % 10 == 9 else quiet[t]
            for b in backends:
                if t == 0:
                    cond_times[b].clear()  # drop the warm-up call
                t0 = time.perf_counter()
                result = run_tick(engines[b], snap, states[b], Guards())
                times[b].append(time.perf_counter() - t0)
                states[b] = result.state
    finally:
        for e in engines.values():
            e.backend.close()
    out = {}
    for b, values in times.items():
        values.sort()
        out[b] = {
            "median": statistics.median(values) * 1e3,
            "p99": values[int(len(values) * 0.99) - 1] * 1e3,
            "conditions": statistics.median(cond_times[b]) * 1e3,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ticks", type=int, default=200)
    parser.add_argument("--backends", default="python,durable")
    parser.add_argument("--write", action="store_true", help="update bench/RESULTS.md")
    args = parser.parse_args(argv)
    backends = args.backends.split(",")
    rows = []
    for cpus, numa, n in SIZES:
        ticks = max(args.ticks // (4 if n >= 2000 else 1), 20)
        r = measure(cpus, numa, n, backends, ticks)
        rows.append((cpus, numa, n, ticks, r))
        print(cpus, numa, n, json.dumps(r), flush=True)
    header = "| CPUs / NUMA | containers | ticks | " + " | ".join(f"{b} median | {b} p99" for b in backends)
    if len(backends) == 2:
        header += f" | {backends[1]} / {backends[0]} (median tick) | conditions only: " + " / ".join(backends)
        header += f" | {backends[1]} / {backends[0]} (conditions)"
    lines = [header + " |", "|" + "---|" * (3 + 2 * len(backends) + (3 if len(backends) == 2 else 0))]
    for cpus, numa, n, ticks, r in rows:
        cells = [f"{cpus} / {numa}", str(n), str(ticks)]
        for b in backends:
            cells += [f"{r[b]['median']:.2f} ms", f"{r[b]['p99']:.2f} ms"]
        if len(backends) == 2:
            a, b2 = r[backends[0]], r[backends[1]]
            cells.append(f"{b2['median'] / a['median']:.1f}x")
            cells.append(f"{a['conditions']:.3f} / {b2['conditions']:.3f} ms")
            cells.append(f"{b2['conditions'] / a['conditions']:.1f}x")
        lines.append("| " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    print(table)
    if args.write:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip()
        command = f"python -m bench.bench_tick --write --ticks {args.ticks} --backends {args.backends}"
        machine = f"{platform.processor() or platform.machine()}, Python {platform.python_version()}"
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        section = (
            f"{SECTION}\n\nCommand: `{command}`\n\nMachine: {machine}, commit {commit}, {when}.\n\n"
            "Snapshot -> evaluation -> plan -> next state (`engine.tick.run_tick`), bundled default "
            "policy plus rules/examples/enable-rss-overuse.yaml (a per-pod rule over every pod); one "
            "tick in ten is under memory pressure (NUMA watermark, PSI, RSS overuse: evictions and "
            "pending credit). Target at 256/500: python median <= 5 ms and >= 10x faster than durable. "
            "*Conditions only* times the backend's `evaluate_many` (the part the backends do differently); "
            "the rest of a tick (fact views, classification, strategies, planning) is shared code."
            "\n\n" + table + "\n"
        )
        path = ROOT / "bench/RESULTS.md"
        text = path.read_text() if path.exists() else "# Benchmark results\n"
        if SECTION in text:
            start = text.index(SECTION)
            end = text.find("\n## ", start + 1)
            text = text[:start] + section + (text[end:] if end != -1 else "")
        else:
            text = text.rstrip() + "\n\n" + section
        path.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
