"""Tick latency: snapshot -> operations, at four node sizes, for both evaluation backends in one run.

    python -m bench.bench_tick [--ticks N] [--backends python,durable] [--write]

Each size gets a synthetic node (HT pairs, NUMA nodes) and workloads of every Katalyst QoS level with
per-pod metrics, evaluated against the bundled default policy with the RSS-overuse overlay from
rules/examples switched on and bench/per-pod-rules.yaml, whose conditions test pod facts, so the
backends answer for every pod (the bundled rules test pods only through engine-computed triggers,
which never reach a backend). Ticks alternate between a quiet
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
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from bench.results import write_section
from engine.config.pipeline import build_policy, load_documents
from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState
from engine.model.facts import Container, Cpu, Metrics, ResctrlInfo, Snapshot, Topology, Workload
from engine.model.node import NodeInfo
from engine.model.operations import WriteCgroup
from engine.plan.planner import Guards
from engine.tick import run_tick

ROOT = Path(__file__).resolve().parent.parent
SIZES = ((16, 2, 20), (96, 2, 200), (256, 4, 500), (384, 4, 2000))  # (CPUs, NUMA nodes, containers)
GiB = float(1 << 30)
QOS = "katalyst.kubewharf.io/qos_level"
MEM = "katalyst.kubewharf.io/memory_enhancement"
SECTION = "## Tick latency (issue 3)"
OVERLAYS = ("rules/examples/enable-rss-overuse.yaml", "bench/per-pod-rules.yaml")
SECTION_ALL = "## Tick latency, every strategy enabled (issue 4)"


def workloads(n: int, cgroups: bool = False) -> tuple[Workload, ...]:
    """Every Katalyst QoS level in turn; with ``cgroups`` each pod and container has a cgroup path, so
    the pool, class-knob and memory-QoS steps write (as on a real node)."""
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
                cgroup_path=f"kubepods/pod-{i}" if cgroups else "",
                containers=(
                    Container(
                        "main",
                        requests={"cpu": 1.0, "memory": mem},
                        limits={"cpu": 2.0, "memory": 2 * mem},
                        cgroup_path=f"kubepods/pod-{i}/main" if cgroups else "",
                    ),
                ),
            )
        )
    return tuple(out)


RESCTRL = ResctrlInfo(
    mounted=True,
    cbm_mask="7ff",
    min_cbm_bits=1,
    num_closids=16,
    cache_ids=(0, 1),
    mb_domains=(0, 1),
)


def machine(cpus: int, numa: int) -> tuple[Topology, NodeInfo]:
    """The node's topology and identity, built once per size: the collector keeps them between ticks
    (it re-reads the topology only on CPU hotplug), so the engine sees the same objects each tick."""
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
    return topo, node


def snapshot(
    box: tuple[Topology, NodeInfo], pods: tuple[Workload, ...], t: float, pressure: bool, full: bool = False
) -> Snapshot:
    topo, node = box
    cpus, numa = len(topo.cpus), len(topo.numa_memory)
    memory = 64 * GiB * numa
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
        t,
        node,
        topo,
        pods,
        Metrics(node_metrics, numa_metrics, pod_metrics),
        {"cpu": cpus - 2.0, "memory": memory * 0.95},
        resctrl=RESCTRL if full else ResctrlInfo(mounted=False),
        cgroup_version=2 if full else None,
    )


def measure(
    cpus: int, numa: int, n: int, backends: list[str], ticks: int, full: bool = False
) -> dict[str, dict[str, float]]:
    """``full``: every strategy (bench/all-strategies.yaml), cgroup paths, resctrl, cgroup v2."""
    extra = ["bench/all-strategies.yaml"] if full else [*OVERLAYS]
    docs = load_documents([ROOT / e for e in extra])
    pods = workloads(n, cgroups=full)
    box = machine(cpus, numa)
    policy = build_policy(docs, box[1].with_labels({"node.example.com/pool": "batch"}))
    quiet = [snapshot(box, pods, float(t), False, full) for t in range(ticks)]
    loud = [snapshot(box, pods, float(t), True, full) for t in range(ticks)]
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
        # The cgroup files as a node would hold them: each tick's writes land before the next tick, so
        # after the first ticks the plan is a steady state (the daemon's normal case).
        kernel: dict[str, dict[str, dict[str, str]]] = {b: {} for b in backends}

        def observed(snap: Snapshot, b: str) -> Snapshot:
            return replace(snap, cgroups=kernel[b]) if full else snap

        def land(result: Any, b: str) -> None:
            for op in result.plan.operations:
                if isinstance(op, WriteCgroup):
                    kernel[b].setdefault(op.path, {})[op.file] = op.value

        for b in backends:  # warm-up: compile caches, classification, worker start, first writes
            for _ in range(3):
                land(run_tick(engines[b], observed(quiet[0], b), EngineState(), Guards()), b)
        for t in range(ticks):
            for b in backends:
                snap = observed(loud[t] if t % 10 == 9 else quiet[t], b)
                if t == 0:
                    cond_times[b].clear()  # drop the warm-up call
                t0 = time.perf_counter()
                result = run_tick(engines[b], snap, states[b], Guards())
                times[b].append(time.perf_counter() - t0)
                states[b] = result.state
                land(result, b)
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


def reference_loop_ms() -> float:
    t0 = time.perf_counter()
    acc = 0
    for i in range(3_000_000):
        acc += i
    return (time.perf_counter() - t0) * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ticks", type=int, default=200)
    parser.add_argument("--backends", default="python,durable")
    parser.add_argument("--write", action="store_true", help="update bench/RESULTS.md")
    parser.add_argument(
        "--all-strategies",
        action="store_true",
        help="every strategy on (bench/all-strategies.yaml), pods with cgroup paths, resctrl mounted",
    )
    args = parser.parse_args(argv)
    backends = args.backends.split(",")
    ref_before = reference_loop_ms()
    rows = []
    for cpus, numa, n in SIZES:
        ticks = max(args.ticks // (4 if n >= 2000 else 1), 20)
        r = measure(cpus, numa, n, backends, ticks, args.all_strategies)
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
    ref_after = reference_loop_ms()
    table += (
        f"\n\nReference loop (3M additions, to read this shared VM's speed): {ref_before:.0f} ms before, "
        f"{ref_after:.0f} ms after the run; this VM swings up to 2x between minutes, so compare rows of "
        "one run, and readings of different runs only with their reference loops."
    )
    print(table)
    if args.write:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip()
        command = f"python -m bench.bench_tick --write --ticks {args.ticks} --backends {args.backends}"
        command += " --all-strategies" if args.all_strategies else ""
        machine = f"{platform.processor() or platform.machine()}, Python {platform.python_version()}"
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        heading = SECTION_ALL if args.all_strategies else SECTION
        scope = (
            "Every strategy enabled: the bundled default policy plus bench/all-strategies.yaml (every rule "
            "Katalyst ships off, Koordinator cpuset suppress, a resctrl group per class, memory QoS, CPU "
            "burst, the memory guard), pods and containers with cgroup paths (pools, class knobs and memory "
            "QoS write), resctrl mounted, cgroup v2. "
            if args.all_strategies
            else ""
        )
        section = (
            f"{heading}\n\nCommand: `{command}`\n\nMachine: {machine}, commit {commit}, {when}.\n\n"
            + scope
            + "Snapshot -> evaluation -> plan -> next state (`engine.tick.run_tick`), bundled default "
            "policy plus "
            + (
                "bench/all-strategies.yaml"
                if args.all_strategies
                else " and ".join(OVERLAYS)
                + " (three rules whose conditions test every pod, so both backends answer per pod)"
            )
            + "; one tick in ten is under memory pressure (NUMA watermark, PSI, RSS overuse: evictions and "
            "pending credit). Target at 256/500: python median <= 5 ms and >= 10x faster than durable. "
            "*Conditions only* times the backend's `evaluate_many` (the part the backends do differently); "
            "the rest of a tick (fact views, classification, strategies, planning) is shared code."
            "\n\n" + table + "\n"
        )
        write_section(heading, section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
