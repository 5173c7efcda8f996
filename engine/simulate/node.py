"""The simulated node of a closed-loop run: pods, usage, the scheduler's queue and what qosd published."""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from engine.evaluate.engine import Engine
from engine.features.rules.compiler import fact_key
from engine.features.rules.conditions import comparisons
from engine.model.facts import (
    AGGREGATES,
    Container,
    FactMap,
    Metrics,
    Snapshot,
    Workload,
    window_key,
)
from engine.model.intents import NodeIntent
from engine.model.operations import EvictPod, PublishNodeResource, WriteCgroup
from engine.model.units import UnitError, parse_cpuset
from engine.sources.trace import (
    BatchTemplate,
    OnlinePod,
    Sample,
    Trace,
)
from engine.tick import TickResult

# Percent facts the engine derives from a usage fact; a window on the percent is a window on the usage.
DERIVED_PERCENT = {"cpu.usage_percent": "cpu.usage_cores", "memory.usage_percent": "memory.usage_bytes"}


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


class SimulatedNode:
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
        # (template, evicted at, admitted again at): each is one turn of an admit-evict-admit loop
        self.readmissions: list[tuple[str, float, float]] = []
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
                    self.readmissions.append((t.name, queue.pop(0) - t.requeue_after, now))
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
        allowed = self.batch_cpu_limit()
        if allowed is not None:
            free_cpu = min(free_cpu, allowed)  # suppression: the class's cpuset or CFS quota
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
            host_apps=base.host_apps,
            node_annotations=base.node_annotations,
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

    def batch_cpu_limit(self) -> float | None:
        """Cores the batch pods' parent cgroup allows (its cpuset.cpus or CFS quota, as qosd's suppress
        writes them), or None when nothing limits them. Batch pods live under one kube-QoS directory
        per template (``kubepods/besteffort`` for BestEffort ones); the tightest limit of those counts."""
        limits: list[float] = []
        parents = {
            p.workload.cgroup_path.rsplit("/", 1)[0] for p in self.running.values() if p.workload.cgroup_path
        }
        for parent in parents:
            files = self.cgroups.get(parent, {})
            cpus = files.get("cpuset.cpus")
            if cpus:
                with contextlib.suppress(UnitError):  # a garbled value limits nothing
                    limits.append(float(len(parse_cpuset(cpus))))
            quota = files.get("cpu.cfs_quota_us")
            if quota and quota.lstrip("-").isdigit() and int(quota) > 0:
                period = int(files.get("cpu.cfs_period_us") or 100000) or 100000
                limits.append(int(quota) / period)
        return min(limits) if limits else None

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
