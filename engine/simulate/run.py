"""The simulation loop: every sample of a trace through the daemon's own tick, with a simulated clock."""

from __future__ import annotations

import time as wallclock

from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState
from engine.model.facts import (
    EMPTY,
    Snapshot,
)
from engine.simulate.node import SimulatedNode
from engine.simulate.recorder import Recorder
from engine.simulate.result import Options, Simulation
from engine.sources.trace import (
    Trace,
)
from engine.tick import run_tick


def simulate(trace: Trace, engine: Engine, options: Options | None = None) -> Simulation:
    """Run every sample of ``trace`` through ``engine`` (one ``run_tick`` per sample)."""
    opts = options or Options()
    began = wallclock.perf_counter()
    node = SimulatedNode(trace, engine)
    state = EngineState()
    rec = Recorder(trace, engine, opts)
    samples = trace.samples
    total = len(samples)
    for i, s in enumerate(samples):
        now = trace.start + s.offset
        duration = (samples[i + 1].offset if i + 1 < total else s.offset + trace.step) - s.offset
        if s.snapshot is not None:
            snap = s.snapshot
            split = _recorded_split(snap, engine)
            admitted = finished = 0
            waiting = 0
        else:
            node.apply(s)
            node.remove_evicted(now)
            finished = node.finish_excess()
            admitted = node.schedule(now)
            waiting = node.waiting()
            snap, split = node.snapshot(now)
            allowed = node.batch_cpu_limit()
            if allowed is not None:
                split["batch_cpu_allowed"] = allowed
        result = run_tick(engine, snap, state, opts.guards)
        state = result.state
        node.apply_plan(result, s.snapshot is None)
        rec.record(s, now, duration, split, result, node, admitted, finished, waiting)
        if opts.progress is not None:
            opts.progress(i + 1, total)
    runtime = wallclock.perf_counter() - began
    events = rec.finish_events()  # closes open risk episodes, which the summary counts
    return Simulation(
        trace,
        engine.policy,
        opts,
        rec.numbers,
        events,
        rec.ticks,
        rec.summary(runtime, node.readmissions),
        runtime,
        node.published.names(),
        engine.generation,
        rec.decisions,
    )


def _recorded_split(snap: Snapshot, engine: Engine) -> dict[str, float]:
    """Usage split of a recorded snapshot: batch = pods of reclaimed classes, online = the rest."""
    batch_cpu = batch_mem = pods_cpu = pods_mem = 0.0
    for w in snap.workloads:
        facts = snap.metrics.pods.get(w.uid, EMPTY)
        cpu = float(facts.get("cpu.usage_cores", 0.0) or 0.0)
        mem = float(facts.get("memory.usage_bytes", 0.0) or 0.0)
        pods_cpu += cpu
        pods_mem += mem
        if engine.classifier.classify(w).class_name in engine.reclaimed_classes:
            batch_cpu += cpu
            batch_mem += mem
    node_cpu = float(snap.metrics.node.get("cpu.usage_cores", pods_cpu) or 0.0)
    node_mem = float(snap.metrics.node.get("memory.usage_bytes", pods_mem) or 0.0)
    return {
        "system_cpu": max(node_cpu - pods_cpu, 0.0),
        "system_memory": max(node_mem - pods_mem, 0.0),
        "online_cpu": pods_cpu - batch_cpu,
        "online_memory": pods_mem - batch_mem,
        "batch_cpu": batch_cpu,
        "batch_memory": batch_mem,
        "node_cpu": node_cpu,
        "node_memory": node_mem,
    }
