"""``qosd simulate``: replay a trace through the daemon's own tick, with a simulated clock.

Platform teams simulate a recorded or synthetic day before a rollout. The engine is not mocked: each
sample becomes a Snapshot, ``run_tick`` evaluates and plans it exactly as the daemon would, and the
engine state is carried from tick to tick. What differs from the daemon is the world around the
engine. For delta samples the simulator plays the node and the scheduler (closed loop):

- online pods use what the trace says; batch pods wait in a queue per template (the trace's demand);
- the scheduler starts waiting batch pods while their requests fit in the reclaimed capacity qosd
  published last (under whatever names the policy's ``publishAs`` gives; read from the plan);
- pods the plan evicts are gone by the next sample, and evicted batch pods rejoin the queue after
  their template's ``requeueAfter``;
- node usage = outside-pod usage + online + static pods + running batch. Batch CPU yields to online
  CPU when the node is full (cpu.shares 2 / SCHED_IDLE); memory does not yield;
- cgroup writes the plan makes become the observed cgroup values of the next snapshot.

So rules react to what qosd decided a minute earlier. Recorded snapshot samples are replayed as they
are (open loop). Nothing here reads a clock, a file system under /sys or the network.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import textwrap
import time as wallclock
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import IO, Any

from engine.argtypes import duration, integer, number, percent, profile, quantity
from engine.config.errors import UsageError
from engine.config.pipeline import PROFILE_LABEL, build_policy, load_documents
from engine.config.policy import Policy
from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState
from engine.features.rules.compiler import fact_key
from engine.features.rules.conditions import comparisons
from engine.model.facts import (
    AGGREGATES,
    EMPTY,
    Container,
    FactMap,
    Metrics,
    Snapshot,
    Workload,
    window_key,
)
from engine.model.intents import NodeIntent
from engine.model.operations import EvictPod, PublishNodeResource, SetNodeTaint, WriteCgroup
from engine.plan.planner import Guards
from engine.sources.trace import (
    BatchTemplate,
    GiB,
    OnlinePod,
    Sample,
    Trace,
    clock_text,
    describe,
    duration_text,
    generate_tidal,
    read_trace,
    write_trace,
)
from engine.tick import TickResult, run_tick

API_VERSION = "qosd.io/v1alpha1"
PROGRESS_MIN_STEPS = 200
EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2

# Percent facts the engine derives from a usage fact; a window on the percent is a window on the usage.
DERIVED_PERCENT = {"cpu.usage_percent": "cpu.usage_cores", "memory.usage_percent": "memory.usage_bytes"}


@dataclass(frozen=True)
class Options:
    """What a simulation run may vary besides the trace and the policy."""

    guards: Guards = field(default_factory=Guards)
    risk_cpu_percent: float = 90.0
    risk_memory_percent: float = 90.0
    keep_ticks: bool = False  # keep every tick's Evaluation document (JSON output)
    publish_delta_percent: float = 10.0  # timeline: a publish is news when it moves this % of capacity
    risk_gap_seconds: float = 300.0  # timeline: risk episodes closer than this are one episode
    progress: Callable[[int, int], None] | None = None


@dataclass(frozen=True)
class Event:
    """One line of the timeline."""

    time: float
    offset: float
    kind: str  # fired, evict, publish, risk, taint, skipped, issue, warning
    message: str
    rule: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "offset": self.offset,
            "clock": clock_text(self.offset),
            "kind": self.kind,
            "rule": self.rule,
            "message": self.message,
        }


@dataclass
class TickNumbers:
    """The simulator's own numbers for one tick (what the plot and the summary are made of)."""

    time: float
    offset: float
    duration: float
    system_cpu: float
    system_memory: float
    online_cpu: float  # online and static non-batch pods
    online_memory: float
    batch_cpu: float  # running batch pods (reclaimed classes), after CPU yields to online
    batch_memory: float
    cpu_without: float  # percent of capacity: outside-pod + online
    cpu_with: float  # percent of capacity: + batch (what the node ran)
    memory_without: float
    memory_with: float
    published: dict[str, float | None]  # resource kind (cpu, memory) -> cores / bytes, None = withdrawn
    batch_requested_cpu: float
    batch_requested_memory: float
    batch_running: int
    batch_waiting: int
    admitted: int
    finished: int
    evicted: list[dict[str, str]]
    fired: list[str]
    risk_without: list[str]  # which resources are over the risk threshold without reclaim
    risk_with: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "offset": self.offset,
            "clock": clock_text(self.offset),
            "durationSeconds": self.duration,
            "usage": {
                "system": {"cpuCores": self.system_cpu, "memoryBytes": self.system_memory},
                "online": {"cpuCores": self.online_cpu, "memoryBytes": self.online_memory},
                "batch": {"cpuCores": self.batch_cpu, "memoryBytes": self.batch_memory},
            },
            "utilizationPercent": {
                "withoutReclaim": {"cpu": self.cpu_without, "memory": self.memory_without},
                "withReclaim": {"cpu": self.cpu_with, "memory": self.memory_with},
            },
            "published": {
                "cpuCores": self.published.get("cpu"),
                "memoryBytes": self.published.get("memory"),
            },
            "batch": {
                "running": self.batch_running,
                "waiting": self.batch_waiting,
                "admitted": self.admitted,
                "finished": self.finished,
                "requestedCpuCores": self.batch_requested_cpu,
                "requestedMemoryBytes": self.batch_requested_memory,
            },
            "evicted": self.evicted,
            "fired": self.fired,
            "sloRisk": {"withoutReclaim": self.risk_without, "withReclaim": self.risk_with},
        }


@dataclass
class Simulation:
    trace: Trace
    policy: Policy
    options: Options
    numbers: list[TickNumbers]
    events: list[Event]
    ticks: list[dict[str, Any]]
    summary: dict[str, Any]
    runtime_seconds: float
    published_names: dict[str, str]  # resource kind -> extended resource name
    generation: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The ``kind: Simulation`` document. ``ticks`` are Evaluation documents exactly as
        ``qosd eval --output json`` prints them (what ``qosd explain`` reads); the simulator's own
        per-tick numbers are in ``series``, index for index."""
        return {
            "apiVersion": API_VERSION,
            "kind": "Simulation",
            "trace": {
                "source": self.trace.source,
                "name": self.trace.name,
                "samples": len(self.trace.samples),
                "start": self.trace.start,
                "stepSeconds": self.trace.step,
                "durationSeconds": self.trace.duration,
                "closedLoop": self.trace.closed_loop,
            },
            "policy": {"hash": self.policy.hash, "generation": self.generation, "node": self.policy.node},
            "options": {
                "riskCpuPercent": self.options.risk_cpu_percent,
                "riskMemoryPercent": self.options.risk_memory_percent,
                "dryRun": self.options.guards.dry_run,
                "evictionBurst": self.options.guards.eviction_burst,
            },
            "summary": self.summary,
            "events": [e.to_dict() for e in self.events],
            "series": [n.to_dict() for n in self.numbers],
            "ticks": self.ticks,
        }


# ---------------------------------------------------------------- the simulated node


@dataclass
class _BatchPod:
    workload: Workload
    template: BatchTemplate
    started: float
    facts: FactMap


@dataclass
class _Published:
    """What the node advertises: extended resource name -> quantity as published (milli-cores, bytes)."""

    quantities: dict[str, float | None] = field(default_factory=dict)
    kind_of: dict[str, str] = field(default_factory=dict)  # name -> cpu | memory
    unit_of: dict[str, str] = field(default_factory=dict)  # name -> cores | bytes

    def names(self) -> dict[str, str]:
        return {kind: name for name, kind in self.kind_of.items()}

    def base_units(self, kind: str) -> float | None:
        """Published capacity of ``cpu`` (cores) or ``memory`` (bytes); None when not published."""
        for name, k in self.kind_of.items():
            if k == kind:
                q = self.quantities.get(name)
                if q is None:
                    return None
                return q / 1000.0 if self.unit_of.get(name) == "cores" else q
        return None

    def request_quantity(self, name: str, amount: float) -> float:
        """A request of ``amount`` cores/bytes in the published resource's own unit."""
        return amount * 1000.0 if self.unit_of.get(name) == "cores" else amount


class _Node:
    """The closed-loop world: pods, usage, the scheduler's queue and what qosd published."""

    def __init__(self, trace: Trace, engine: Engine):
        self.trace = trace
        self.engine = engine
        base = trace.base
        self.capacity_cpu = float(base.node.capacity.get("cpu") or len(base.topology.cpus) or 1)
        self.capacity_memory = float(base.node.capacity.get("memory") or base.node.memory or 1)
        self.static: dict[str, Workload] = {w.uid: w for w in base.workloads}
        self.online: dict[str, OnlinePod] = {p.workload.uid: p for p in trace.online}
        self.running: dict[str, _BatchPod] = {}
        self.requeue: dict[str, list[float]] = {t.name: [] for t in trace.batch}
        self.demand: dict[str, int] = {t.name: 0 for t in trace.batch}
        self.serial: dict[str, int] = {t.name: 0 for t in trace.batch}
        self.online_cpu = 0.0
        self.online_memory = 0.0
        self.system_cpu = trace.system.cpu or 0.0
        self.system_memory = trace.system.memory or 0.0
        derived = {
            "cpu.usage_cores",
            "memory.usage_bytes",
            "memory.free_bytes",
            "memory.available_bytes",
            *DERIVED_PERCENT,
        }
        self.node_patch: dict[str, Any] = {
            k: v for k, v in base.metrics.node.items() if k.split("@", 1)[0] not in derived
        }
        self.numa_patch: dict[int, dict[str, Any]] = {k: dict(v) for k, v in base.metrics.numa.items()}
        self.pod_patch: dict[str, dict[str, Any]] = {k: dict(v) for k, v in base.metrics.pods.items()}
        self.container_patch: dict[str, dict[str, Any]] = {
            k: dict(v) for k, v in base.metrics.containers.items()
        }
        self.class_patch: dict[str, dict[str, Any]] = {k: dict(v) for k, v in base.metrics.classes.items()}
        self.cgroups: dict[str, dict[str, str]] = {p: dict(f) for p, f in base.cgroups.items()}
        self.published = _Published()
        self.evicting: list[EvictPod] = []
        self.taints: set[str] = set()
        self._workloads: tuple[Workload, ...] | None = None
        self.history: deque[tuple[float, dict[str, Any]]] = deque()
        self.windows = _node_windows(engine)
        self.max_window = max((w for _, _, _, w in self.windows), default=0.0)

    # ---- trace deltas
    def apply(self, s: Sample) -> None:
        if s.online is not None:
            self.online_cpu = s.online.cpu if s.online.cpu is not None else self.online_cpu
            self.online_memory = s.online.memory if s.online.memory is not None else self.online_memory
        if s.system is not None:
            self.system_cpu = s.system.cpu if s.system.cpu is not None else self.system_cpu
            self.system_memory = s.system.memory if s.system.memory is not None else self.system_memory
        self.demand.update(s.batch)
        if s.metrics is not None:
            m = s.metrics
            self.node_patch.update(m.node)
            for nid, facts in m.numa.items():
                self.numa_patch.setdefault(nid, {}).update(facts)
            for uid, facts in m.pods.items():
                self.pod_patch.setdefault(uid, {}).update(facts)
            for key, facts in m.containers.items():
                self.container_patch.setdefault(key, {}).update(facts)
            for name, facts in m.classes.items():
                self.class_patch.setdefault(name, {}).update(facts)
        for pod in s.add:
            self.online[pod.workload.uid] = pod
            self._workloads = None
        for uid in s.remove:
            self.online.pop(uid, None)
            self.static.pop(uid, None)
            self.pod_patch.pop(uid, None)
            self._workloads = None

    # ---- the plan's consequences, one sample later
    def remove_evicted(self, now: float) -> None:
        for op in self.evicting:
            pod = self.running.pop(op.uid, None)
            if pod is not None:
                self.requeue[pod.template.name].append(now + pod.template.requeue_after)
            self.online.pop(op.uid, None)
            self.static.pop(op.uid, None)
            self._workloads = None
        self.evicting = []

    def finish_excess(self) -> int:
        """Demand fell: the oldest pods of the template complete (jobs started first end first)."""
        finished = 0
        for t in self.trace.batch:
            pods = [p for p in self.running.values() if p.template is t]
            extra = len(pods) - self.demand[t.name]
            for p in sorted(pods, key=lambda p: p.started)[: max(extra, 0)]:
                del self.running[p.workload.uid]
                finished += 1
                self._workloads = None
            waiting = max(self.demand[t.name] - len(pods) + max(extra, 0), 0)
            queue = self.requeue[t.name]
            if len(queue) > waiting:
                queue.sort()
                del queue[waiting:]
        return finished

    def waiting(self) -> int:
        counts: dict[str, int] = {}
        for p in self.running.values():
            counts[p.template.name] = counts.get(p.template.name, 0) + 1
        return sum(max(self.demand[t.name] - counts.get(t.name, 0), 0) for t in self.trace.batch)

    def schedule(self, now: float) -> int:
        """Start waiting batch pods, highest priority first, while their requests fit in what is
        published (the scheduler's view of the node's extended resources)."""
        names = self.published.names()
        if not names:
            return 0
        budget = {kind: self.published.base_units(kind) for kind in ("cpu", "memory")}
        used = {"cpu": 0.0, "memory": 0.0}
        counts: dict[str, int] = {}
        for p in self.running.values():
            used["cpu"] += p.template.request_cpu
            used["memory"] += p.template.request_memory
            counts[p.template.name] = counts.get(p.template.name, 0) + 1
        admitted = 0
        for t in sorted(self.trace.batch, key=lambda t: (-(t.priority or 0), t.index)):
            queue = self.requeue[t.name]
            queue.sort()
            waiting = self.demand[t.name] - counts.get(t.name, 0)
            backing_off = sum(1 for ready in queue if ready > now)
            for _ in range(max(waiting - backing_off, 0)):
                need = {"cpu": t.request_cpu, "memory": t.request_memory}
                fits = all(
                    need[k] <= 0 or (budget[k] is not None and used[k] + need[k] <= (budget[k] or 0.0) + 1e-9)
                    for k in need
                )
                if not fits:
                    break
                if queue and queue[0] <= now:
                    queue.pop(0)
                self._start(t, now, names)
                used["cpu"] += need["cpu"]
                used["memory"] += need["memory"]
                admitted += 1
        return admitted

    def _start(self, t: BatchTemplate, now: float, names: Mapping[str, str]) -> None:
        self.serial[t.name] += 1
        n = self.serial[t.name]
        uid = f"{t.name}-{n}"
        requests = {
            name: self.published.request_quantity(name, t.request_cpu if kind == "cpu" else t.request_memory)
            for kind, name in names.items()
        }
        qos_dir = {"BestEffort": "besteffort/", "Burstable": "burstable/"}.get(t.kube_qos, "")
        w = Workload(
            uid=uid,
            name=f"{t.name}-{n}",
            namespace=t.namespace,
            labels=t.labels,
            annotations=t.annotations,
            priority=t.priority,
            priority_class_name=t.priority_class_name,
            kube_qos=t.kube_qos,
            phase="Running",
            cgroup_path=f"kubepods/{qos_dir}pod{uid}",
            containers=(Container("main", requests=MappingProxyType(requests)),),
        )
        facts = MappingProxyType({"cpu.usage_cores": t.usage_cpu, "memory.usage_bytes": t.usage_memory})
        self.running[uid] = _BatchPod(w, t, now, facts)
        self._workloads = None

    # ---- the snapshot
    def workloads(self) -> tuple[Workload, ...]:
        if self._workloads is None:
            self._workloads = (
                *self.static.values(),
                *(p.workload for p in self.online.values()),
                *(p.workload for p in self.running.values()),
            )
        return self._workloads

    def snapshot(self, now: float) -> tuple[Snapshot, dict[str, float]]:
        """This sample's Snapshot, and the usage split (for the simulator's own accounting)."""
        pods: dict[str, FactMap] = {}
        online = list(self.online.values())
        total_cpu_share = sum(p.share_cpu for p in online) or 1.0
        total_mem_share = sum(p.share_memory for p in online) or 1.0
        for p in online:
            uid = p.workload.uid
            facts: dict[str, Any] = {
                "cpu.usage_cores": self.online_cpu * p.share_cpu / total_cpu_share,
                "memory.usage_bytes": self.online_memory * p.share_memory / total_mem_share,
            }
            patch = self.pod_patch.get(uid)
            if patch:
                facts.update(patch)
            pods[uid] = MappingProxyType(facts)
        static_cpu = static_mem = static_batch_cpu = static_batch_mem = 0.0
        for uid, w in self.static.items():
            facts_s = self.pod_patch.get(uid)
            if facts_s is None:
                continue
            pods[uid] = MappingProxyType(dict(facts_s))
            cpu = float(facts_s.get("cpu.usage_cores", 0.0))
            mem = float(facts_s.get("memory.usage_bytes", 0.0))
            if self.reclaimed(w):
                static_batch_cpu += cpu
                static_batch_mem += mem
            else:
                static_cpu += cpu
                static_mem += mem
        online_cpu = self.online_cpu + static_cpu if online else static_cpu
        online_mem = self.online_memory + static_mem if online else static_mem
        if not online:  # no pod to attribute online usage to: it is usage outside pods
            online_cpu += self.online_cpu
            online_mem += self.online_memory
        want_batch_cpu = sum(p.template.usage_cpu for p in self.running.values()) + static_batch_cpu
        free_cpu = max(self.capacity_cpu - self.system_cpu - online_cpu, 0.0)
        ratio = min(1.0, free_cpu / want_batch_cpu) if want_batch_cpu > 0 else 1.0
        batch_cpu = want_batch_cpu * ratio
        batch_mem = sum(p.template.usage_memory for p in self.running.values()) + static_batch_mem
        for uid, bp in self.running.items():
            facts_b: FactMap = bp.facts
            if ratio < 1.0:
                facts_b = MappingProxyType({**bp.facts, "cpu.usage_cores": bp.template.usage_cpu * ratio})
            patch = self.pod_patch.get(uid)
            pods[uid] = MappingProxyType({**facts_b, **patch}) if patch else facts_b
        node_cpu = min(self.system_cpu + online_cpu + batch_cpu, self.capacity_cpu)
        node_mem = min(self.system_memory + online_mem + batch_mem, self.capacity_memory)
        free = self.capacity_memory - node_mem  # no page cache in the model: free = available
        node: dict[str, Any] = {
            "cpu.usage_cores": node_cpu,
            "memory.usage_bytes": node_mem,
            "memory.free_bytes": free,
            "memory.available_bytes": free,
        }
        node.update(self._reclaim_facts())
        node.update(self.node_patch)
        self._windowed(now, node)
        metrics = Metrics(
            node=MappingProxyType(node),
            numa={k: MappingProxyType(v) for k, v in self.numa_patch.items()},
            pods=pods,
            containers={k: MappingProxyType(v) for k, v in self.container_patch.items()},
            classes={k: MappingProxyType(v) for k, v in self.class_patch.items()},
        )
        base = self.trace.base
        snap = Snapshot(
            now,
            base.node,
            base.topology,
            self.workloads(),
            metrics,
            base.allocatable,
            {p: MappingProxyType(dict(f)) for p, f in self.cgroups.items()},
        )
        split = {
            "system_cpu": self.system_cpu,
            "system_memory": self.system_memory,
            "online_cpu": online_cpu,
            "online_memory": online_mem,
            "batch_cpu": batch_cpu,
            "batch_memory": batch_mem,
            "node_cpu": float(node.get("cpu.usage_cores", node_cpu)),
            "node_memory": float(node.get("memory.usage_bytes", node_mem)),
        }
        return snap, split

    def reclaimed(self, w: Workload) -> bool:
        return self.engine.classifier.classify(w).class_name in self.engine.reclaimed_classes

    def _reclaim_facts(self) -> dict[str, float]:
        """node.reclaim.*: what the node currently advertises and what batch pods request of it."""
        out: dict[str, float] = {}
        cpu = self.published.base_units("cpu")
        mem = self.published.base_units("memory")
        if cpu is not None:
            out["reclaim.cpu_allocatable_cores"] = cpu
        if mem is not None:
            out["reclaim.memory_allocatable_bytes"] = mem
        if self.published.kind_of:
            out["reclaim.cpu_requested_cores"] = sum(p.template.request_cpu for p in self.running.values())
            out["reclaim.memory_requested_bytes"] = sum(
                p.template.request_memory for p in self.running.values()
            )
        return out

    def _windowed(self, now: float, node: dict[str, Any]) -> None:
        """Windowed aggregates the policy's node conditions read, over the simulated history."""
        if not self.windows:
            return
        self.history.append((now, {k: v for k, v in node.items() if "@" not in k}))
        while self.history and self.history[0][0] < now - self.max_window:
            self.history.popleft()
        for out_key, source, agg, window in self.windows:
            if out_key in node:
                continue  # the trace set it
            values = [
                float(facts[source])
                for t, facts in self.history
                if t > now - window + 1e-9 and isinstance(facts.get(source), int | float)
            ]
            if not values:
                continue
            if agg == "avg":
                node[out_key] = sum(values) / len(values)
            elif agg == "max":
                node[out_key] = max(values)
            else:
                node[out_key] = min(values)

    # ---- what the plan did
    def learn_publish_names(self, result: TickResult) -> None:
        """Which published resource is CPU and which memory, from the publish intents' own params."""
        for intent in result.evaluation.intents:
            if isinstance(intent, NodeIntent) and intent.kind == "publish":
                name = str(intent.params.get("resource"))
                self.published.kind_of[name] = str(intent.params.get("reclaims"))
                self.published.unit_of[name] = str(intent.params.get("unit"))

    def apply_plan(self, result: TickResult, closed_loop: bool) -> None:
        self.learn_publish_names(result)
        for op in result.plan.operations:
            if isinstance(op, PublishNodeResource):
                self.published.quantities[op.name] = None if op.quantity is None else float(op.quantity)
            elif isinstance(op, EvictPod) and closed_loop:
                self.evicting.append(op)
            elif isinstance(op, WriteCgroup) and closed_loop:
                self.cgroups.setdefault(op.path, {})[op.file] = op.value


def _node_windows(engine: Engine) -> list[tuple[str, str, str, float]]:
    """(key to provide, fact to aggregate, agg, window seconds) for the policy's windowed node facts."""
    out: dict[str, tuple[str, str, str, float]] = {}
    for cr in engine.rules:
        for c in comparisons(cr.rule.when) + comparisons(cr.rule.clear_when):
            if c.spec.scope != "node" or c.window is None or c.agg not in AGGREGATES:
                continue
            path = ".".join(c.spec.path)
            source = DERIVED_PERCENT.get(path, path)
            key = window_key(source, c.agg, c.window)
            out[key] = (key, source, c.agg, c.window)
            if fact_key(c) != key:
                out.setdefault(fact_key(c), (fact_key(c), path, c.agg, c.window))
    return list(out.values())


# ---------------------------------------------------------------- the run


def simulate(trace: Trace, engine: Engine, options: Options | None = None) -> Simulation:
    """Run every sample of ``trace`` through ``engine`` (one ``run_tick`` per sample)."""
    opts = options or Options()
    began = wallclock.perf_counter()
    node = _Node(trace, engine)
    state = EngineState()
    rec = _Recorder(trace, engine, opts)
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
        rec.summary(runtime),
        runtime,
        node.published.names(),
        engine.generation,
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


class _Recorder:
    """Per-tick numbers, the timeline and the summary: everything a run reports."""

    def __init__(self, trace: Trace, engine: Engine, opts: Options):
        self.trace = trace
        self.engine = engine
        self.opts = opts
        base = trace.base
        self.capacity_cpu = float(base.node.capacity.get("cpu") or len(base.topology.cpus) or 1)
        self.capacity_memory = float(base.node.capacity.get("memory") or base.node.memory or 1)
        self.numbers: list[TickNumbers] = []
        self.events: list[Event] = []
        self.ticks: list[dict[str, Any]] = []
        self.publish_only = {
            r.name for r in engine.policy.rules if r.actions and all(a.kind == "publish" for a in r.actions)
        }
        self.suppress_rules = {
            r.name for r in engine.policy.rules if any(a.kind == "suppress" for a in r.actions)
        }
        self.suppress_intents = 0
        self.suppress_skipped = 0
        self.fired_ticks: dict[str, int] = {}
        self.skipped_first: dict[tuple[str, str], tuple[int, int]] = {}  # -> (event index, count)
        self.issues_seen: set[str] = set()
        self.evictions: list[dict[str, Any]] = []
        self.held_evictions = 0
        self.cgroup_writes = 0
        self.logged_publish: dict[str, float | None] = {}
        self.in_risk: dict[str, float | None] = {"withoutReclaim": None, "withReclaim": None}
        self.calm_since: dict[str, float | None] = {"withoutReclaim": None, "withReclaim": None}
        self.risk_episodes: dict[str, list[tuple[float, float]]] = {"withoutReclaim": [], "withReclaim": []}
        self.admitted = 0
        self.finished = 0
        self.warned_templates = False

    def _event(self, now: float, offset: float, kind: str, message: str, rule: str | None = None) -> None:
        self.events.append(Event(now, offset, kind, message, rule))

    def record(
        self,
        s: Sample,
        now: float,
        duration: float,
        split: Mapping[str, float],
        result: TickResult,
        node: _Node,
        admitted: int,
        finished: int,
        waiting: int,
    ) -> None:
        """Everything one tick contributes to the report."""
        if self.opts.keep_ticks:
            self.ticks.append(
                {
                    "apiVersion": API_VERSION,
                    "kind": "Evaluation",
                    **result.to_dict(),
                    "state": result.state.to_dict(),
                }
            )
        self._check_templates(now, s.offset, node)
        evicted = self._rules(now, s.offset, result, node)
        self._skipped_and_issues(now, s.offset, result)
        self._taints(now, s.offset, result, node)
        published = self._publishes(now, s.offset, node)
        self.admitted += admitted
        self.finished += finished
        cap_cpu, cap_mem = self.capacity_cpu, self.capacity_memory
        without_cpu = 100.0 * min(split["system_cpu"] + split["online_cpu"], cap_cpu) / cap_cpu
        without_mem = 100.0 * min(split["system_memory"] + split["online_memory"], cap_mem) / cap_mem
        with_cpu = 100.0 * split["node_cpu"] / cap_cpu
        with_mem = 100.0 * split["node_memory"] / cap_mem
        risk_without = self._risk(without_cpu, without_mem)
        risk_with = self._risk(with_cpu, with_mem)
        self._risk_episode("withoutReclaim", risk_without, now, s.offset, without_cpu, without_mem)
        self._risk_episode("withReclaim", risk_with, now, s.offset, with_cpu, with_mem)
        running = list(node.running.values()) if s.snapshot is None else []
        self.numbers.append(
            TickNumbers(
                time=now,
                offset=s.offset,
                duration=duration,
                system_cpu=split["system_cpu"],
                system_memory=split["system_memory"],
                online_cpu=split["online_cpu"],
                online_memory=split["online_memory"],
                batch_cpu=split["batch_cpu"],
                batch_memory=split["batch_memory"],
                cpu_without=without_cpu,
                cpu_with=with_cpu,
                memory_without=without_mem,
                memory_with=with_mem,
                published=published,
                batch_requested_cpu=sum(p.template.request_cpu for p in running),
                batch_requested_memory=sum(p.template.request_memory for p in running),
                batch_running=len(running),
                batch_waiting=waiting,
                admitted=admitted,
                finished=finished,
                evicted=[{"uid": op.uid, "pod": _pod_name(op), "rule": op.rule} for op in evicted],
                fired=list(result.evaluation.fired),
                risk_without=risk_without,
                risk_with=risk_with,
            )
        )

    def _check_templates(self, now: float, off: float, node: _Node) -> None:
        """Once: a batch template this policy does not classify as reclaimed is a trace mistake."""
        if self.warned_templates or not node.running:
            return
        self.warned_templates = True
        for t in self.trace.batch:
            pod = next((p for p in node.running.values() if p.template is t), None)
            if pod is not None and not node.reclaimed(pod.workload):
                cls = self.engine.classifier.classify(pod.workload).class_name
                self._event(
                    now,
                    off,
                    "warning",
                    f"batch template {t.name} is classified {cls or 'unclassified'}, not a reclaimed "
                    "class, by this policy: its pods count as online and as high-priority usage",
                )

    def _rules(self, now: float, off: float, result: TickResult, node: _Node) -> list[EvictPod]:
        """A line per rule that acted (publish-only rules report through _publishes), and the evictions."""
        ev = result.evaluation
        evicted = [op for op in result.plan.operations if isinstance(op, EvictPod)]
        for rule in ev.fired:
            self.fired_ticks[rule] = self.fired_ticks.get(rule, 0) + 1
            if rule in self.publish_only:
                continue
            intents = [i for i in ev.intents if i.provenance.rule == rule]
            why = _why(intents)
            mine = [op for op in evicted if op.rule == rule]
            held = [h for h in result.plan.held if h.intent.provenance.rule == rule]
            kinds = sorted({i.kind for i in intents})
            msg = f"{rule} fired{f' ({why})' if why else ''}: " + (
                f"evict {', '.join(_pod_name(op) for op in mine)}"
                if mine
                else ", ".join(kinds) or "no intent"
            )
            if held:
                msg += f"; {len(held)} held ({'; '.join(sorted({h.reason for h in held}))})"
            self._event(now, off, "evict" if mine else "fired", msg, rule)
        for op in evicted:
            pod = node.running.get(op.uid)
            self.evictions.append(
                {
                    "time": now,
                    "offset": off,
                    "clock": clock_text(off),
                    "uid": op.uid,
                    "pod": _pod_name(op),
                    "rule": op.rule,
                    "template": pod.template.name if pod is not None else None,
                }
            )
        self.held_evictions += sum(1 for h in result.plan.held if h.intent.kind == "evict")
        self.cgroup_writes += sum(1 for op in result.plan.operations if isinstance(op, WriteCgroup))
        return evicted

    def _skipped_and_issues(self, now: float, off: float, result: TickResult) -> None:
        """Skipped rules and workload issues once each (the count is added at the end); suppress
        rules that did not act are counted, since no suppress strategy exists yet."""
        ev = result.evaluation
        self.suppress_intents += sum(1 for i in ev.intents if i.kind == "suppress")
        for sk in ev.skipped:
            if sk.rule in self.suppress_rules:
                self.suppress_skipped += 1
            key = (sk.rule, sk.reason.split(":", 1)[0])
            seen = self.skipped_first.get(key)
            if seen is None:
                self._event(now, off, "skipped", f"{sk.rule}: {sk.reason}", sk.rule)
                self.skipped_first[key] = (len(self.events) - 1, 1)
            else:
                self.skipped_first[key] = (seen[0], seen[1] + 1)
        for issue in ev.workload_issues:
            if issue.uid not in self.issues_seen:
                self.issues_seen.add(issue.uid)
                what = "; ".join(issue.errors)
                self._event(now, off, "issue", f"pod {issue.name} ({issue.class_name}): {what}")

    def _taints(self, now: float, off: float, result: TickResult, node: _Node) -> None:
        """Taint rules plan SetNodeTaint on every tick they hold: report the edges only."""
        taints = {f"{op.key}:{op.effect}" for op in result.plan.operations if isinstance(op, SetNodeTaint)}
        for taint in sorted(taints - node.taints):
            self._event(now, off, "taint", f"taint {taint} set")
        for taint in sorted(node.taints - taints):
            self._event(now, off, "taint", f"taint {taint} no longer wanted")
        node.taints = taints

    def _publishes(self, now: float, off: float, node: _Node) -> dict[str, float | None]:
        """What the node advertises now; a line when it moved by publish_delta_percent of capacity
        since the last line (every value is in ``series``)."""
        published = {kind: node.published.base_units(kind) for kind in ("cpu", "memory")}
        changes = []
        for kind, name in sorted(node.published.names().items()):
            value = published[kind]
            last = self.logged_publish.get(kind)
            cap = self.capacity_cpu if kind == "cpu" else self.capacity_memory
            if kind not in self.logged_publish:
                changes.append(f"{name} {_amount(kind, value)}")
            elif (value is None) != (last is None) or (
                value is not None
                and last is not None
                and abs(value - last) >= cap * self.opts.publish_delta_percent / 100.0
            ):
                changes.append(f"{name} {_amount(kind, last)} -> {_amount(kind, value)}")
            else:
                continue
            self.logged_publish[kind] = value
        if changes:
            self._event(now, off, "publish", "published " + "; ".join(changes))
        return published

    def _risk(self, cpu: float, mem: float) -> list[str]:
        out = []
        if cpu > self.opts.risk_cpu_percent:
            out.append("cpu")
        if mem > self.opts.risk_memory_percent:
            out.append("memory")
        return out

    def _risk_episode(
        self, label: str, risk: list[str], now: float, off: float, cpu: float, mem: float
    ) -> None:
        """Episode start/end lines. An episode ends only after ``risk_gap_seconds`` without risk, so a
        series hovering at the threshold reads as one episode (the minutes are counted per tick)."""
        began = self.in_risk[label]
        words = "without reclaim" if label == "withoutReclaim" else "with reclaim"
        if risk:
            self.calm_since[label] = None
            if began is None:
                self.in_risk[label] = off
                over = []
                if "cpu" in risk:
                    over.append(f"cpu {cpu:.1f}% > {self.opts.risk_cpu_percent:g}%")
                if "memory" in risk:
                    over.append(f"memory {mem:.1f}% > {self.opts.risk_memory_percent:g}%")
                self._event(now, off, "risk", f"SLO risk {words} begins: {', '.join(over)}")
            return
        if began is None:
            return
        calm = self.calm_since[label]
        if calm is None:
            self.calm_since[label] = calm = off
        if off - calm >= self.opts.risk_gap_seconds:
            self._close_episode(label, calm)

    def _close_episode(self, label: str, ended: float, at_end: bool = False) -> None:
        began = self.in_risk[label]
        if began is None:
            return
        words = "without reclaim" if label == "withoutReclaim" else "with reclaim"
        verb = "is still on when the trace ends" if at_end else "ends"
        at_risk = sum(
            n.duration
            for n in self.numbers
            if began <= n.offset < ended and (n.risk_without if label == "withoutReclaim" else n.risk_with)
        )
        self.in_risk[label] = None
        self.calm_since[label] = None
        self.risk_episodes[label].append((began, ended))
        self.events.append(
            Event(
                self.trace.start + ended,
                ended,
                "risk",
                f"SLO risk {words} {verb}: {_minutes(at_risk)} at risk over {_minutes(ended - began)}",
            )
        )

    def finish_events(self) -> list[Event]:
        for index, count in self.skipped_first.values():
            if count > 1:
                e = self.events[index]
                self.events[index] = Event(
                    e.time, e.offset, e.kind, f"{e.message} (on {count} ticks; shown once)", e.rule
                )
        for label in list(self.in_risk):
            if self.in_risk[label] is not None:
                calm = self.calm_since[label]
                if calm is None:
                    self._close_episode(label, self.trace.duration, at_end=True)
                else:
                    self._close_episode(label, calm)
        self.events.sort(key=lambda e: e.offset)  # stable: same-tick events keep their order
        return self.events

    def summary(self, runtime: float) -> dict[str, Any]:
        nums = self.numbers
        minutes = sum(n.duration for n in nums) / 60.0

        def stats(values: list[float]) -> dict[str, float]:
            if not values:
                return {"mean": 0.0, "p95": 0.0, "max": 0.0}
            weights = [n.duration for n in nums]
            total = sum(weights) or 1.0
            ordered = sorted(values)
            return {
                "mean": round(sum(v * w for v, w in zip(values, weights, strict=True)) / total, 2),
                "p95": round(ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)], 2),
                "max": round(ordered[-1], 2),
            }

        def risk_minutes(label: str) -> dict[str, Any]:
            attr = "risk_without" if label == "withoutReclaim" else "risk_with"
            return {
                "minutes": round(sum(n.duration for n in nums if getattr(n, attr)) / 60.0, 1),
                "cpuMinutes": round(sum(n.duration for n in nums if "cpu" in getattr(n, attr)) / 60.0, 1),
                "memoryMinutes": round(
                    sum(n.duration for n in nums if "memory" in getattr(n, attr)) / 60.0, 1
                ),
                "episodes": len(self.risk_episodes[label]),
            }

        published: dict[str, Any] = {}
        names: dict[str, list[tuple[float, float]]] = {}
        for n in nums:
            for kind, value in n.published.items():
                if value is not None:
                    names.setdefault(kind, []).append((value, n.duration))
        for kind, values in names.items():
            covered = sum(d for _, d in values)
            unit, scale = ("cores", 1.0) if kind == "cpu" else ("GiB", GiB)
            published[kind] = {
                "unit": unit,
                "mean": round(sum(v * d for v, d in values) / (covered or 1.0) / scale, 2),
                "min": round(min(v for v, _ in values) / scale, 2),
                "max": round(max(v for v, _ in values) / scale, 2),
                "publishedMinutes": round(covered / 60.0, 1),
            }
        by_rule: dict[str, int] = {}
        by_template: dict[str, int] = {}
        for e in self.evictions:
            by_rule[e["rule"]] = by_rule.get(e["rule"], 0) + 1
            key = e["template"] or "(not from a batch template)"
            by_template[key] = by_template.get(key, 0) + 1
        demanded = sum((n.batch_running + n.batch_waiting) * n.duration for n in nums)
        ran = sum(n.batch_running * n.duration for n in nums)
        suppress_note = (
            "this qosd has no suppress strategy yet: suppress rules are reported as skipped and nothing "
            "is throttled. The model lets batch CPU yield to online CPU (cpu.shares / SCHED_IDLE), "
            "which is all a node does without suppression."
            if self.suppress_rules
            else "the policy has no suppress rule"
        )
        return {
            "ticks": len(nums),
            "minutes": round(minutes, 1),
            "closedLoop": self.trace.closed_loop,
            "utilizationPercent": {
                "cpu": {
                    "withoutReclaim": stats([n.cpu_without for n in nums]),
                    "withReclaim": stats([n.cpu_with for n in nums]),
                },
                "memory": {
                    "withoutReclaim": stats([n.memory_without for n in nums]),
                    "withReclaim": stats([n.memory_with for n in nums]),
                },
            },
            "reclaimed": {
                "published": published,
                "batchCpuCoreHours": round(sum(n.batch_cpu * n.duration for n in nums) / 3600.0, 2),
                "batchMemoryGiBHours": round(
                    sum(n.batch_memory * n.duration for n in nums) / 3600.0 / GiB, 2
                ),
                "batchPodsStarted": self.admitted,
                "batchPodsFinished": self.finished,
                "batchDemandMetPercent": round(100.0 * ran / demanded, 1) if demanded else None,
            },
            "evictions": {
                "total": len(self.evictions),
                "byRule": by_rule,
                "byTemplate": by_template,
                "heldBack": self.held_evictions,
                "list": self.evictions,
            },
            "suppressions": {
                "performed": self.suppress_intents,
                "wantedButNotPerformed": self.suppress_skipped,
                "rules": sorted(self.suppress_rules),
                "note": suppress_note,
            },
            "sloRisk": {
                "thresholds": {
                    "cpuPercent": self.opts.risk_cpu_percent,
                    "memoryPercent": self.opts.risk_memory_percent,
                },
                "withoutReclaim": risk_minutes("withoutReclaim"),
                "withReclaim": risk_minutes("withReclaim"),
            },
            "rulesFired": dict(sorted(self.fired_ticks.items())),
            "cgroupWrites": self.cgroup_writes,
            "runtimeSeconds": round(runtime, 3),
        }


def _why(intents: Sequence[Any]) -> str:
    seen: list[str] = []
    for i in intents:
        for o in i.provenance.conditions:
            if o.met and isinstance(o.observed, int | float) and not isinstance(o.observed, bool):
                text = f"{o.fact} {o.observed:.4g} {o.op} {o.threshold}"
                if text not in seen:
                    seen.append(text)
    return ", ".join(seen)


def _policy_names(policy: Policy) -> str:
    """The documents that make the policy, e.g. ``qosd-koordinator + my-overlay``."""
    return " + ".join(d.name for d in policy.documents) or "(empty)"


def _pod_name(op: EvictPod) -> str:
    return f"{op.namespace}/{op.name}" if op.namespace else op.name


def _amount(kind: str, value: float | None) -> str:
    if value is None:
        return "withdrawn"
    return f"{value:.1f} cores" if kind == "cpu" else f"{value / GiB:.1f} GiB"


def _minutes(seconds: float) -> str:
    m = seconds / 60.0
    return f"{m:.0f} min" if m >= 1 else f"{seconds:.0f} s"


# ---------------------------------------------------------------- text output


def format_text(sim: Simulation, timeline: bool = True) -> str:
    t = sim.trace
    lines = [
        f"qosd simulate: {describe(t)}",
        f"policy {_policy_names(sim.policy)} ({sim.policy.short_hash}) for node {sim.policy.node}; "
        f"published as {', '.join(f'{k}={v}' for k, v in sorted(sim.published_names.items())) or 'nothing'}",
    ]
    if timeline:
        lines.append("")
        lines.append(f"{'TIME':<9} {'EVENT':<8} DETAIL")
        for e in sim.events:
            lines.append(f"{clock_text(e.offset):<9} {e.kind:<8} {e.message}")
    s = sim.summary
    u = s["utilizationPercent"]
    r = s["reclaimed"]
    ev = s["evictions"]
    sup = s["suppressions"]
    risk = s["sloRisk"]
    lines += ["", f"SUMMARY ({s['ticks']} ticks, {clock_text(s['minutes'] * 60)} simulated)"]
    for res in ("cpu", "memory"):
        a, b = u[res]["withoutReclaim"], u[res]["withReclaim"]
        for label, x in ((f"{res} utilization", a), ("", b)):
            words = "without reclaim" if x is a else "with reclaim"
            lines.append(
                f"  {label:<20}{words:<16} mean {x['mean']:5.1f}%  p95 {x['p95']:5.1f}%  max {x['max']:5.1f}%"
            )
    for kind, p in r["published"].items():
        name = sim.published_names.get(kind, kind)
        lines.append(
            f"  {'published ' + kind:<20}{name}: mean {p['mean']:g} {p['unit']}, "
            f"min {p['min']:g}, max {p['max']:g}"
        )
    if not r["published"]:
        lines.append("  published: nothing (no publish operation in the plan; dry run or reclaim disabled?)")
    met = r["batchDemandMetPercent"]
    lines.append(
        f"  {'batch work':<20}{r['batchCpuCoreHours']:g} core-hours, "
        f"{r['batchMemoryGiBHours']:g} GiB-hours; "
        f"{r['batchPodsStarted']} pods started, {r['batchPodsFinished']} finished"
        + (f"; {met:g}% of demanded pod-time ran" if met is not None else "")
    )
    by_rule = ", ".join(f"{k} {v}" for k, v in sorted(ev["byRule"].items())) or "none"
    lines.append(f"  {'evictions':<20}{ev['total']} ({by_rule}); {ev['heldBack']} held back by guards")
    lines.append(
        f"  {'suppressions':<20}{sup['performed']} performed, {sup['wantedButNotPerformed']} wanted but not "
        "performed"
    )
    lines.extend(f"  {'':<20}{line}" for line in textwrap.wrap(sup["note"], 86))
    th = risk["thresholds"]
    for label, words in (("withoutReclaim", "without reclaim"), ("withReclaim", "with reclaim")):
        x = risk[label]
        lines.append(
            f"  {'minutes at SLO risk':<20}{words:<16} {x['minutes']:g} min in {x['episodes']} episode(s) "
            f"(cpu > {th['cpuPercent']:g}%: {x['cpuMinutes']:g} min, memory > {th['memoryPercent']:g}%: "
            f"{x['memoryMinutes']:g} min)"
        )
    lines.append(f"  {'cgroup writes':<20}{s['cgroupWrites']}")
    lines.append(f"  {'runtime':<20}{s['runtimeSeconds']:.2f} s")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- the plot


def plot(sim: Simulation, path: Path) -> None:
    """Utilization without/with reclaim, published capacity against what batch asked for and used,
    evictions and SLO-risk shading, on one hours axis (PNG).

    Uses matplotlib's object API with the Agg canvas: no display, no pyplot global state."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    nums = sim.numbers
    hours = [n.offset / 3600.0 for n in nums]
    end = sim.trace.duration / 3600.0
    if nums:  # step plots need the end of the last tick as a final point
        hours.append(end)
    fig = Figure(figsize=(14, 12), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(4, 1, sharex=True, height_ratios=[3, 3, 2.2, 2.2])
    s = sim.summary
    u = s["utilizationPercent"]
    risk = s["sloRisk"]
    th = risk["thresholds"]
    risk_color = "#d62728"
    with_color, without_color, cpu_color, mem_color = "#2ca02c", "#1f77b4", "#9467bd", "#ff7f0e"
    evictions = [(n.offset / 3600.0, e["pod"]) for n in nums for e in n.evicted]

    def series(values: Sequence[float | None]) -> list[float]:
        out = [math.nan if v is None else v for v in values]
        return [*out, out[-1]] if out else out

    for ax, res, key_wo, key_w, thresh in (
        (axes[0], "CPU", "cpu_without", "cpu_with", th["cpuPercent"]),
        (axes[1], "Memory", "memory_without", "memory_with", th["memoryPercent"]),
    ):
        without = series([getattr(n, key_wo) for n in nums])
        with_ = series([getattr(n, key_w) for n in nums])
        _shade(ax, nums, "risk_with", res.lower(), risk_color)
        ax.fill_between(
            hours,
            without,
            with_,
            step="post",
            color=with_color,
            alpha=0.2,
            linewidth=0,
            label="batch admitted by reclaim",
        )
        ax.step(
            hours, with_, where="post", color=with_color, linewidth=1.2, label="with reclaim (node total)"
        )
        ax.step(
            hours,
            without,
            where="post",
            color=without_color,
            linewidth=1.2,
            label="without reclaim (online + system)",
        )
        ax.axhline(
            thresh, color=risk_color, linestyle="--", linewidth=1, label=f"SLO risk threshold {thresh:g}%"
        )
        ax.set_ylim(0, 108)
        ax.set_ylabel(f"{res} utilization\n(% of node capacity)")
        ax.grid(True, alpha=0.3)
        if evictions:
            ax.plot(
                [h for h, _ in evictions],
                [104.0] * len(evictions),
                linestyle="none",
                marker="v",
                color="black",
                markersize=7,
            )
        handles, _ = ax.get_legend_handles_labels()
        minutes = risk["withReclaim"][f"{res.lower()}Minutes"]
        handles += [
            Patch(color=risk_color, alpha=0.15, label=f"{res} at SLO risk with reclaim ({minutes:g} min)")
        ]
        if evictions:
            handles.append(
                Line2D(
                    [],
                    [],
                    linestyle="none",
                    marker="v",
                    color="black",
                    label=f"eviction ({len(evictions)} in all)",
                )
            )
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
    names = sim.published_names
    for ax, kind, color, scale, unit, requested, used in (
        (axes[2], "cpu", cpu_color, 1.0, "cores", "batch_requested_cpu", "batch_cpu"),
        (axes[3], "memory", mem_color, GiB, "GiB", "batch_requested_memory", "batch_memory"),
    ):
        pub = [n.published.get(kind) for n in nums]
        ax.fill_between(
            hours,
            0,
            series([getattr(n, used) / scale for n in nums]),
            step="post",
            color=color,
            alpha=0.2,
            linewidth=0,
            label=f"batch {kind} in use",
        )
        ax.step(
            hours,
            series([getattr(n, requested) / scale for n in nums]),
            where="post",
            color=color,
            linestyle=":",
            linewidth=1.4,
            label=f"batch {kind} requested (running pods)",
        )
        ax.step(
            hours,
            series([None if v is None else v / scale for v in pub]),
            where="post",
            color=color,
            linewidth=1.5,
            label=f"published {names.get(kind, kind)}",
        )
        ax.set_ylim(bottom=0)
        ax.set_ylabel(f"reclaimed {kind}\n({unit})")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
    for ax in axes:
        for h, _ in evictions:
            ax.axvline(h, color="black", linewidth=0.7, alpha=0.35)
    axes[-1].set_xlabel("hours since trace start")
    axes[-1].set_xlim(0, end)
    tick = 1 if end <= 12 else 2 if end <= 48 else 6
    axes[-1].set_xticks([float(h) for h in range(0, int(end) + 1, tick)])
    fig.suptitle(
        f"qosd simulate: {sim.trace.name}, policy {_policy_names(sim.policy)} ({sim.policy.short_hash})\n"
        f"mean CPU {u['cpu']['withoutReclaim']['mean']:.0f}% → {u['cpu']['withReclaim']['mean']:.0f}% and "
        f"memory {u['memory']['withoutReclaim']['mean']:.0f}% → {u['memory']['withReclaim']['mean']:.0f}% "
        f"with reclaim; {s['evictions']['total']} evictions; minutes at SLO risk "
        f"{risk['withoutReclaim']['minutes']:g} without → {risk['withReclaim']['minutes']:g} with reclaim",
        fontsize=12,
    )
    fig.savefig(str(path))


def _shade(ax: Any, nums: Sequence[TickNumbers], attr: str, res: str, color: str) -> None:
    start: float | None = None
    for n in nums:
        on = res in getattr(n, attr)
        if on and start is None:
            start = n.offset
        elif not on and start is not None:
            ax.axvspan(start / 3600.0, n.offset / 3600.0, color=color, alpha=0.15, linewidth=0)
            start = None
    if start is not None and nums:
        last = nums[-1]
        ax.axvspan(
            start / 3600.0, (last.offset + last.duration) / 3600.0, color=color, alpha=0.15, linewidth=0
        )


def plot_available() -> str | None:
    """None when matplotlib can be imported, else what to tell the user."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "--plot needs matplotlib, which is not installed; install it with: pip install 'qosd[plot]'"
    return None


# ---------------------------------------------------------------- progress


class Progress:
    """A one-line progress bar on a terminal stream; redraws at most once per percent."""

    def __init__(self, stream: IO[str], width: int = 30):
        self.stream = stream
        self.width = width
        self.last = -1

    def __call__(self, done: int, total: int) -> None:
        pct = int(100 * done / total) if total else 100
        if pct == self.last and done != total:
            return
        self.last = pct
        filled = int(self.width * done / total) if total else self.width
        bar = "#" * filled + "." * (self.width - filled)
        self.stream.write(f"\rsimulating [{bar}] {pct:3d}% {done}/{total} samples")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()


# ---------------------------------------------------------------- command line


def cmd_simulate(args: argparse.Namespace) -> int:
    if args.plot is not None:
        missing = plot_available()
        if missing:
            print(f"qosd: error: {missing}", file=sys.stderr)
            return EXIT_USAGE
    trace = read_trace(args.trace)
    node = trace.base.node.with_labels({PROFILE_LABEL: args.profile}) if args.profile else trace.base.node
    policy = build_policy(load_documents(args.rules, builtin=not args.no_builtin), node)
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    progress = Progress(sys.stderr) if show and len(trace.samples) > PROGRESS_MIN_STEPS else None
    if args.progress and progress is None:
        progress = Progress(sys.stderr)
    options = Options(
        guards=Guards(dry_run=args.dry_run, eviction_burst=args.eviction_burst),
        risk_cpu_percent=args.risk_cpu,
        risk_memory_percent=args.risk_memory,
        keep_ticks=args.output == "json",
        progress=progress,
    )
    try:
        engine = Engine(policy, backend=args.backend)
        try:
            sim = simulate(trace, engine, options)
        finally:
            engine.backend.close()
    except RuntimeError as exc:
        # An optional evaluator that is missing or whose worker died (DurableBackendError): the trace
        # and the rules are fine, the environment is not. The in-process evaluator has no such failure.
        if args.backend == "python":
            raise
        print(f"qosd: error: the {args.backend} backend cannot run the simulation: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.output == "json":
        json.dump(sim.to_dict(), sys.stdout, default=str, separators=(",", ":"))
        sys.stdout.write("\n")
        sys.stdout.flush()
    else:
        text = format_text(sim, timeline=not args.no_timeline)
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()
    if args.plot is not None:
        plot(sim, args.plot)
        print(f"plot written to {args.plot}", file=sys.stderr)
    return EXIT_OK


MAX_GENERATED_SAMPLES = 1_000_000  # a year of minutes is 527,040; more only exhausts memory


def cmd_trace_generate(args: argparse.Namespace) -> int:
    if args.cpus % args.numa or args.cpus // args.numa < 2:
        raise UsageError(
            f"--cpus {args.cpus} --numa {args.numa}: the generated node splits its CPUs evenly over its "
            "NUMA nodes, at least 2 (one core of two hyper-threads) each; make --cpus a multiple of --numa"
        )
    samples = args.hours * 3600 / args.step
    if not 1 <= samples <= MAX_GENERATED_SAMPLES:
        raise UsageError(
            f"--hours {args.hours:g} --step {duration_text(args.step)}: that is {math.floor(samples):,} "
            f"samples; a trace needs from 1 to {MAX_GENERATED_SAMPLES:,} "
            + (
                "(lengthen --hours or shorten --step)"
                if samples < 1
                else "(lengthen --step or shorten --hours)"
            )
        )
    profile = None if args.profile == "default" else args.profile
    doc = generate_tidal(
        hours=args.hours,
        step=args.step,
        seed=args.seed,
        cpus=args.cpus,
        numa=args.numa,
        memory=args.memory,
        profile=profile,
        name=args.name,
    )
    target = (
        "the Koordinator profile (node label qosd.io/profile: koordinator)"
        if profile
        else ("the default (Katalyst-style) profile (no qosd.io/profile label)")
    )
    comment = (
        f"Generated by: qosd trace generate --hours {args.hours:g} --step {duration_text(args.step)} "
        f"--seed {args.seed} --cpus {args.cpus} --numa {args.numa} --memory {args.memory / GiB:g}Gi "
        f"--profile {args.profile}" + (f" --name {args.name}" if args.name else "") + "\n"
        f"Targets {target}.\n"
        "Online pods carry both Koordinator labels and Katalyst annotations, so either profile reads them;\n"
        "override the profile with `qosd simulate --profile ...`."
    )
    if args.output_file is None or str(args.output_file) == "-":
        from engine.sources.trace import dump_trace

        sys.stdout.write(dump_trace(doc, args.format or "yaml", comment))
    else:
        write_trace(doc, args.output_file, comment)
        print(f"wrote {len(doc['samples'])} samples to {args.output_file}", file=sys.stderr)
    return EXIT_OK


def cmd_trace_validate(args: argparse.Namespace) -> int:
    ok = True
    for path in args.traces:
        trace = read_trace(path)
        print(f"valid: {describe(trace)}")
    return EXIT_OK if ok else EXIT_INVALID


def add_parser(sub: Any) -> None:
    """Register ``simulate`` and ``trace`` on the ``qosd`` subcommand parser (``add_subparsers()``)."""
    s = sub.add_parser(
        "simulate",
        help="replay a trace through the engine with a simulated clock; print a timeline and a summary",
        description=(
            "Replay a trace (schemas/trace.schema.json) through the same tick as the daemon. Delta samples "
            "run closed loop: batch pods start as published capacity allows and leave when evicted."
        ),
    )
    s.add_argument(
        "--rules",
        action="append",
        default=[],
        type=Path,
        metavar="PATH",
        help="rule file or directory (repeatable); the built-in layer is always loaded first",
    )
    s.add_argument("--trace", required=True, type=Path, help="trace file (.yaml, .json or .jsonl)")
    s.add_argument(
        "--plot", type=Path, metavar="PNG", help="draw utilization, reclaim and evictions to this PNG"
    )
    s.add_argument("--output", choices=("text", "json"), default="text")
    s.add_argument("--no-timeline", action="store_true", help="text output: the summary only")
    s.add_argument("--no-builtin", action="store_true", help="leave out the built-in default layer")
    s.add_argument(
        "--profile", type=profile, help=f"bundled profile to use (sets node label {PROFILE_LABEL})"
    )
    s.add_argument("--backend", choices=("python", "durable"), default="python")
    s.add_argument("--dry-run", action="store_true", help="plan no operations (nothing is published either)")
    s.add_argument(
        "--eviction-burst",
        type=integer(0, 10000),
        default=3,
        help="evictions per tick across all rules (default 3)",
    )
    s.add_argument(
        "--risk-cpu",
        type=percent,
        default=90.0,
        metavar="PERCENT",
        help="node CPU usage above this is a minute at SLO risk (default 90)",
    )
    s.add_argument(
        "--risk-memory",
        type=percent,
        default=90.0,
        metavar="PERCENT",
        help="node memory usage above this is a minute at SLO risk (default 90)",
    )
    s.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=f"progress bar on stderr (default: when stderr is a terminal and the trace has "
        f"more than {PROGRESS_MIN_STEPS} samples)",
    )
    s.set_defaults(func=cmd_simulate)

    t = sub.add_parser("trace", help="generate or check simulation traces")
    tsub = t.add_subparsers(dest="trace_command", required=True, metavar="ACTION")
    g = tsub.add_parser("generate", help="write a synthetic tidal trace (seeded, reproducible)")
    g.add_argument(
        "--hours", type=number(0.001, 24 * 366), default=24.0, help="length of the trace (default 24)"
    )
    g.add_argument(
        "--step", type=duration(0.001, 24 * 3600), default=60.0, help="time between samples (default 1m)"
    )
    g.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    g.add_argument("--cpus", type=integer(1, 8192), default=32, help="logical CPUs of the node (default 32)")
    g.add_argument("--numa", type=integer(1, 1024), default=2, help="NUMA nodes, dividing --cpus (default 2)")
    g.add_argument(
        "--memory",
        type=quantity(64 * 2**20, 2**50, "bytes"),
        default=128 * GiB,
        help="node memory (default 128Gi)",
    )
    g.add_argument(
        "--profile",
        choices=("koordinator", "default"),
        default="koordinator",
        help="bundled profile the node is labelled for (default koordinator)",
    )
    g.add_argument("--name", help="metadata.name of the trace")
    g.add_argument("--format", choices=("yaml", "json", "jsonl"), help="stdout format (files: by suffix)")
    g.add_argument(
        "-o",
        "--output-file",
        type=Path,
        metavar="PATH",
        help="write here (.yaml, .json or .jsonl); default stdout",
    )
    g.set_defaults(func=cmd_trace_generate)
    v = tsub.add_parser("validate", help="check trace files; exit 0 valid, 1 invalid, 2 missing file")
    v.add_argument("traces", nargs="+", type=Path, metavar="TRACE")
    v.set_defaults(func=cmd_trace_validate)


def main(argv: Sequence[str] | None = None) -> int:
    """Stand-alone entry (``python -m engine.simulate simulate|trace ...``): the ``qosd`` CLI itself."""
    from engine.cli import main as cli_main  # the CLI imports this module; import it late

    return cli_main(list(argv) if argv is not None else sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
