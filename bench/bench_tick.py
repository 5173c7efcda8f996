"""Tick latency: snapshot -> operations, at four node sizes, for both evaluation backends in one run.

    python -m bench.bench_tick [--ticks N] [--backends python,durable] [--write] [--same-process]

Each size gets a synthetic node (HT pairs, NUMA nodes) and workloads of every Katalyst QoS level with
per-pod metrics, evaluated against the bundled default policy with the RSS-overuse overlay from
rules/examples switched on and bench/per-pod-rules.yaml, whose conditions test pod facts, so the
backends answer for every pod (the bundled rules test pods only through engine-computed triggers,
which never reach a backend). Nine quiet ticks, then one under memory pressure (evictions, pending
credit), carrying engine state, and reusing workload objects between ticks as the daemon's sources
do. Each backend runs in its own process, as a node runs one backend per daemon; they take turns in
blocks of ticks so noise on this shared 2-core machine hits both alike. Compare the ratios, not the
absolute times. ``--same-process`` runs both in one process, alternating every tick.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import platform
import statistics
import subprocess
import time
import traceback
from dataclasses import replace
from multiprocessing.connection import Connection
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
SECTION_SAME = "## Tick latency, both backends in one process (issue 3)"
SECTION_PACED = "## Tick latency, paced like a daemon (issue 3)"


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


def inputs(
    cpus: int, numa: int, n: int, ticks: int, full: bool
) -> tuple[Any, list[Snapshot], list[Snapshot]]:
    """The policy and each tick's quiet and loud snapshot for one size."""
    extra = ["bench/all-strategies.yaml"] if full else [*OVERLAYS]
    docs = load_documents([ROOT / e for e in extra])
    pods = workloads(n, cgroups=full)
    box = machine(cpus, numa)
    policy = build_policy(docs, box[1].with_labels({"node.example.com/pool": "batch"}))
    quiet = [snapshot(box, pods, float(t), False, full) for t in range(ticks)]
    loud = [snapshot(box, pods, float(t), True, full) for t in range(ticks)]
    return policy, quiet, loud


BLOCK = 30  # ticks per turn in isolated mode


class Runner:
    """One backend's engine, state and (with ``full``) the cgroup files its writes landed in."""

    def __init__(
        self, policy: Any, quiet: list[Snapshot], loud: list[Snapshot], backend: str, full: bool, pace: float
    ):
        self.engine = Engine(policy, backend=backend)
        self.pace = pace
        self.quiet, self.loud, self.full = quiet, loud, full
        self.state = EngineState()
        # The cgroup files as a node would hold them: each tick's writes land before the next tick,
        # so after the first ticks the plan is a steady state (the daemon's normal case).
        self.kernel: dict[str, dict[str, str]] = {}
        self.cond: list[float] = []
        inner = self.engine.backend.evaluate_many

        def timed(node: Any, classes: Any, calls: Any) -> list[bool]:
            t0 = time.perf_counter()
            answers: list[bool] = inner(node, classes, calls)
            self.cond.append(time.perf_counter() - t0)
            return answers

        self.engine.backend.evaluate_many = timed  # type: ignore[method-assign]
        for _ in range(3):  # warm-up: compile caches, classification, worker start, first writes
            self._land(run_tick(self.engine, self._observed(quiet[0]), EngineState(), Guards()))
        self.cond.clear()

    def _observed(self, snap: Snapshot) -> Snapshot:
        return replace(snap, cgroups=self.kernel) if self.full else snap

    def _land(self, result: Any) -> None:
        for op in result.plan.operations:
            if isinstance(op, WriteCgroup):
                self.kernel.setdefault(op.path, {})[op.file] = op.value

    def run(self, start: int, end: int) -> tuple[list[float], list[float]]:
        """Ticks ``start..end-1`` (every tenth under pressure): tick times and conditions times."""
        times = []
        for t in range(start, end):
            snap = self._observed(self.loud[t] if t % 10 == 9 else self.quiet[t])
            if self.pace:
                time.sleep(self.pace)  # idle like a daemon between ticks: caches and clocks go cold
            t0 = time.perf_counter()
            result = run_tick(self.engine, snap, self.state, Guards())
            times.append(time.perf_counter() - t0)
            self.state = result.state
            self._land(result)
        cond, self.cond = self.cond, []
        return times, cond

    def close(self) -> None:
        self.engine.backend.close()


def _serve(
    conn: Connection, size: tuple[int, int, int], backend: str, ticks: int, full: bool, pace: float
) -> None:
    """A backend in its own process (isolated mode): builds its own inputs (pages the parent built
    would be copied on write as the ticks touch them, a cost no daemon has), then runs the blocks of
    ticks the parent asks for."""
    try:
        runner = Runner(*inputs(*size, ticks, full), backend, full, pace)
        conn.send(("ok", None))
        while (block := conn.recv()) is not None:
            conn.send(("ok", runner.run(*block)))
        runner.close()
    except Exception:  # the parent reports it and stops the run
        conn.send(("failed", traceback.format_exc()))
    finally:
        conn.close()


def _answer(conn: Connection, backend: str) -> Any:
    status, payload = conn.recv()
    if status != "ok":
        raise RuntimeError(f"the {backend} benchmark process failed:\n{payload}")
    return payload


def measure(
    cpus: int,
    numa: int,
    n: int,
    backends: list[str],
    ticks: int,
    full: bool = False,
    isolated: bool = True,
    pace: float = 0.0,
) -> dict[str, dict[str, float]]:
    """``full``: every strategy (bench/all-strategies.yaml), cgroup paths, resctrl, cgroup v2.

    ``isolated``: each backend in its own process, as a node runs one backend per daemon, taking
    turns in blocks of ``BLOCK`` ticks so the machine's drift hits both alike. Otherwise both run
    in this process, alternating every tick: each backend's tick then starts with the caches and
    allocator state the other one left (see bench/RESULTS.md for what that costs)."""
    times: dict[str, list[float]] = {b: [] for b in backends}
    cond_times: dict[str, list[float]] = {b: [] for b in backends}
    if isolated:
        ctx = multiprocessing.get_context("fork")
        conns: dict[str, Connection] = {}
        procs = []
        try:
            for b in backends:
                mine, theirs = ctx.Pipe()
                args = (theirs, (cpus, numa, n), b, ticks, full, pace)
                proc = ctx.Process(target=_serve, args=args, daemon=True)
                proc.start()
                theirs.close()
                conns[b] = mine
                procs.append(proc)
                _answer(mine, b)
            for start in range(0, ticks, BLOCK):
                for b in backends:
                    conns[b].send((start, min(start + BLOCK, ticks)))
                    tick_times, conds = _answer(conns[b], b)
                    times[b] += tick_times
                    cond_times[b] += conds
        finally:
            for conn in conns.values():
                with contextlib.suppress(OSError):
                    conn.send(None)
            for proc in procs:
                proc.join(timeout=30)
    else:
        built = inputs(cpus, numa, n, ticks, full)
        runners = {b: Runner(*built, b, full, pace) for b in backends}
        try:
            for t in range(ticks):
                for b, runner in runners.items():
                    tick_times, conds = runner.run(t, t + 1)
                    times[b] += tick_times
                    cond_times[b] += conds
        finally:
            for runner in runners.values():
                runner.close()
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
    parser.add_argument(
        "--same-process",
        action="store_true",
        help="run the backends in this process, alternating every tick, instead of one process each",
    )
    parser.add_argument(
        "--pace",
        type=float,
        default=0.0,
        help="seconds of idle before each tick, as a daemon waits between ticks (default: back to back)",
    )
    args = parser.parse_args(argv)
    backends = args.backends.split(",")
    ref_before = reference_loop_ms()
    rows = []
    for cpus, numa, n in SIZES:
        ticks = max(args.ticks // (4 if n >= 2000 else 1), 20)
        r = measure(cpus, numa, n, backends, ticks, args.all_strategies, not args.same_process, args.pace)
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
        command += " --same-process" if args.same_process else ""
        command += f" --pace {args.pace:g}" if args.pace else ""
        machine = f"{platform.processor() or platform.machine()}, Python {platform.python_version()}"
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        heading = (
            SECTION_ALL
            if args.all_strategies
            else SECTION_SAME
            if args.same_process
            else SECTION_PACED
            if args.pace
            else SECTION
        )
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
            "pending credit). "
            + (
                "Both backends in one process, alternating every tick. "
                if args.same_process
                else f"Each backend in its own process (one backend per daemon, as on a node), taking turns "
                f"in blocks of {BLOCK} ticks. "
            )
            + (
                f"Each tick after {args.pace * 1000:g} ms idle, as a daemon's tick follows its wait. "
                if args.pace
                else "Ticks back to back. "
            )
            + "Target at 256/500: python median <= 5 ms and >= 10x faster than durable. "
            "*Conditions only* times the backend's `evaluate_many` (the part the backends do differently); "
            "the rest of a tick (fact views, classification, strategies, planning) is shared code."
            "\n\n" + table + "\n"
        )
        write_section(heading, section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
