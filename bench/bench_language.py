"""What the issue-17 language primitives cost a tick, measured against the same tick without them.

    python -m bench.bench_language [--ticks N] [--rounds R]

One node of 256 CPUs / 4 NUMA nodes / 500 pods with cgroup paths (bench_tick's synthetic node and
pods), the bundled policy with bench_tick's overlays (rules/examples/enable-rss-overuse.yaml,
bench/per-pod-rules.yaml) as the baseline, and the same plus bench/language-rules.yaml: a stepped
quota controller on every shared_cores container (an expression reading `current`, a dead band, the
pod's value as the sum of its containers'), and a per-pod sample-count rule with clearWhen and a
two-fact `when` mapping. Each tick's writes land in a simulated kernel, so `current` is read back as
on a node. Both run in this process in alternating blocks (noise on the shared machine hits both
alike); the verdict is the ratio of the medians and the per-round ratios. Python backend only.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace
from typing import Any

from bench.bench_tick import OVERLAYS, ROOT, machine, snapshot, workloads
from engine.config.pipeline import build_policy, load_documents
from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState
from engine.model.operations import WriteCgroup
from engine.plan.planner import Guards
from engine.tick import run_tick

LANGUAGE = "bench/language-rules.yaml"
CPUS, NUMA, PODS = 256, 4, 500


class Side:
    def __init__(self, extra: list[str]):
        docs = load_documents([ROOT / e for e in extra])
        box = machine(CPUS, NUMA)
        self.engine = Engine(build_policy(docs, box[1].with_labels({"node.example.com/pool": "batch"})))
        pods = workloads(PODS, cgroups=True)
        self.snaps = [snapshot(box, pods, float(t), t % 10 == 9) for t in range(200)]
        self.kernel: dict[str, dict[str, str]] = {}
        self.state = EngineState()
        self.t = 0
        self.writes = 0
        for _ in range(3):
            self.tick()

    def tick(self) -> float:
        snap = replace(self.snaps[self.t % len(self.snaps)], time=float(self.t), cgroups=self.kernel)
        self.t += 1
        t0 = time.perf_counter()
        result = run_tick(self.engine, snap, self.state, Guards())
        elapsed = time.perf_counter() - t0
        self.state = result.state
        for op in result.plan.operations:
            if isinstance(op, WriteCgroup):
                self.kernel.setdefault(op.path, {})[op.file] = op.value
                self.writes += 1
        return elapsed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ticks", type=int, default=30, help="ticks per block")
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args(argv)
    base, lang = Side([*OVERLAYS]), Side([*OVERLAYS, LANGUAGE])
    times: dict[str, list[float]] = {"baseline": [], "language": []}
    ratios: list[float] = []
    for r in range(args.rounds):
        order: list[tuple[str, Any]] = [("baseline", base), ("language", lang)]
        if r % 2:
            order.reverse()
        medians = {}
        for name, side in order:
            block = [side.tick() for _ in range(args.ticks)]
            times[name].extend(block)
            medians[name] = statistics.median(block)
        ratios.append(medians["language"] / medians["baseline"])
    b, la = statistics.median(times["baseline"]) * 1e3, statistics.median(times["language"]) * 1e3
    print(f"{CPUS} CPUs / {NUMA} NUMA / {PODS} pods, {args.rounds} rounds x {args.ticks} ticks per side")
    print(f"baseline  median {b:.3f} ms")
    print(f"language  median {la:.3f} ms  (cgroup writes, warm-up included: {lang.writes})")
    print(
        f"ratio of medians {la / b:.3f}; per-round ratio median {statistics.median(ratios):.3f} "
        f"({min(ratios):.3f}..{max(ratios):.3f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
