"""NodeCollector: one Snapshot per tick from sysfs, procfs and cgroupfs, with windowed aggregates.

A tick reads each file at most once (``TickReader``), reuses the cached topology and the workload
objects its workload source hands back unchanged (so classification stays a cache hit), and adds
the windowed aggregates the policy's conditions ask for.

Windows. A condition such as ``node.psi.memory.some.avg10: {gte: 15, window: 15s, agg: min}``
reads the flat key ``psi.memory.some.avg10@min:15s`` (``engine.model.facts.window_key``). The
collector learns which (scope, fact, aggregate, window) triples exist from the compiled policy
(``use_policy``, called once per generation) and keeps, per fact and item, one bounded ring buffer
of (time, value) samples sized for the longest window at the tick interval. Each window keeps a
running sum and monotonic queues for max/min, so a tick costs O(1) amortized per aggregate and
allocates nothing per sample beyond the value itself. Aggregates cover the samples taken within the
window, the current one included; a new item's aggregates start from its first sample. Besides
avg/max/min a window can report ``samples`` (how many values it holds), for strategies that trust
an average only when enough samples back it. Windows that strategies read outside conditions are
passed to ``use_policy`` as ``extra``.

Class facts (``class.<name>.*`` with a window) are sums over the class's running and pending pods,
computed here only when such a window is asked for, with the policy's classifier.

Observed cgroup values (``Snapshot.cgroups``, what the planner diffs against): ``cpuset.cpus`` of
every workload and container cgroup (the pool and suppress strategies read them), plus the pairs the
daemon ``track``s (the files its last plans manage, kept for ``track_ttl`` ticks). The daemon's part,
per tick: ``collect()``; on a new policy generation ``use_policy(policy, class_of)``; after planning
``track(pairs)``; after the adapter wrote ``note_written(path, file, value)``.

Cost: a tick reads about four small files per workload (CPU counter, two memory files, the observed
cpuset). For hundreds of workloads ``memory_every`` and ``observe_every`` stagger the memory files
and the observed files over several ticks, each cgroup on its own phase so the work stays even (the
daemon's settings and the bound they give are in docs/standalone.md, "What a tick costs"). The
default reader keeps pseudo-files open between ticks (``PinnedReader``). While the workload objects
and the tracked files are unchanged, the list of cgroups sampled and of files observed is the same
tuple as last tick, which lets the sampler and the Observer skip regrouping them. ``memory.numa_stat``
is read only for a policy that reads what it gives (``use_policy``): each cgroup's, with its memory
files, for a ``numaScoped`` evict (pod ``numa.<id>.memory_usage_bytes``), and the reclaim root's once
a tick for a ``memoryGuard`` (NUMA ``memory.reclaimed_usage_bytes``).
"""

from __future__ import annotations

import math
import time
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

from engine.cgroups.mounts import CgroupLayout
from engine.cgroups.weight import WeightFormula
from engine.config.policy import Policy
from engine.features.eviction.spec import EvictSpec
from engine.features.memory_qos.spec import MemoryGuardSpec
from engine.features.rules.conditions import comparisons
from engine.model.facts import NO_RESCTRL, Metrics, ResctrlInfo, Snapshot, Workload, window_key
from engine.model.podsums import fill_from_containers
from engine.sources.cgroupfs import NUMA_STAT, CgroupMetrics, CgroupOptions, CgroupSample, parse_numa_stat
from engine.sources.files import PinnedReader, Reader, TickReader
from engine.sources.kubelet import CPU_MANAGER_STATE, CpuManagerState
from engine.sources.observer import Observer, Translate
from engine.sources.podfacts import PodFacts
from engine.sources.procfs import ProcSource, psi_facts
from engine.sources.sysfs import TopologySource

ACTIVE_PHASES = ("Running", "Pending")
CLASS_SUMS = frozenset(
    {"pods", "cpu.usage_cores", "cpu.request_cores", "memory.usage_bytes", "memory.request_bytes"}
)
DEFAULT_OBSERVED = ("cpuset.cpus",)


class WorkloadSource(Protocol):
    """Workloads on this node; the same objects while a workload is unchanged (identity is a cache key)."""

    def workloads(self) -> tuple[Workload, ...]: ...


class FreshnessSource(Protocol):
    """A workload source that can go stale (a watch of the API server): when, on the collector's
    monotonic clock, its view was last known to be current; None before the first time."""

    def fresh_at(self) -> float | None: ...


class NodeObjectSource(Protocol):
    """The node's Kubernetes Node object, as a watch keeps it (engine.sources.kubenode.NodeWatch):
    its ``status.allocatable`` and ``metadata.annotations``, empty while it is not known."""

    def allocatable(self) -> Mapping[str, float]: ...

    def annotations(self) -> Mapping[str, str]: ...


ClassOf = Callable[[Workload], str | None]
_NO_ANNOTATIONS: Mapping[str, str] = MappingProxyType({})


# ------------------------------------------------------------------------------------------ windows


@dataclass(frozen=True, order=True)
class WindowSpec:
    """One windowed aggregate a policy reads: ``scope`` is node, numa, pod, container or class
    (then ``class_name`` is set); ``path`` is the fact inside its scope (``cpu.usage_percent``)."""

    scope: str
    path: str
    agg: str
    seconds: float
    class_name: str = ""

    @property
    def key(self) -> str:
        return window_key(self.path, self.agg, self.seconds)


def windows_of(policy: Policy) -> frozenset[WindowSpec]:
    """Every windowed aggregate the policy's conditions (``when`` and ``clearWhen``) read."""
    out: set[WindowSpec] = set()
    for rule in policy.rules:
        for c in comparisons(rule.when) + comparisons(rule.clear_when):
            if c.window is not None and c.agg != "last":
                out.add(WindowSpec(c.spec.scope, ".".join(c.spec.path), c.agg, c.window, c.class_name or ""))
    return frozenset(out)


def format_window(seconds: float) -> str:
    """A window as the facts schema writes it: 15 -> "15s", 0.5 -> "500ms"."""
    return f"{int(seconds)}s" if seconds == int(seconds) else f"{round(seconds * 1000)}ms"


class _Window:
    __slots__ = ("count", "maxq", "minq", "seconds", "start", "total")

    def __init__(self, seconds: float, want_max: bool, want_min: bool) -> None:
        self.seconds = seconds
        self.start = 0  # sequence number of the oldest sample inside the window
        self.total = 0.0
        self.count = 0
        self.maxq: deque[int] | None = deque() if want_max else None
        self.minq: deque[int] | None = deque() if want_min else None


class Series:
    """A bounded ring of (time, value) samples of one fact of one item, with per-window aggregates.

    Samples are numbered by a sequence counter; sample ``n`` lives at ``n % capacity``. Each window
    tracks the first sequence number still inside it, the running sum and count of its samples, and
    (when max/min is asked) a monotonic queue of sequence numbers. Pushing a sample evicts what
    left each window; when the ring is full the overwritten sample leaves every window first."""

    __slots__ = ("_aggs", "_pushes", "capacity", "n", "times", "values", "windows")

    def __init__(self, windows: Mapping[float, frozenset[str]], capacity: int) -> None:
        self.capacity = max(capacity, 2)
        self.times = array("d", bytes(8 * self.capacity))
        self.values = array("d", bytes(8 * self.capacity))
        self.n = 0
        self._pushes = 0
        self.windows = [_Window(s, "max" in aggs, "min" in aggs) for s, aggs in sorted(windows.items())]
        self._aggs = [(w, tuple(sorted(windows[w.seconds]))) for w in self.windows]

    def push(self, t: float, value: float) -> None:
        cap, seq = self.capacity, self.n
        times, values = self.times, self.values
        overwritten = seq - cap  # the sample this push overwrites, if the ring is full
        for w in self.windows:
            horizon = t - w.seconds
            while w.start < seq and (w.start <= overwritten or times[w.start % cap] <= horizon):
                w.total -= values[w.start % cap]
                w.count -= 1
                w.start += 1
        slot = seq % cap
        times[slot] = t
        values[slot] = value
        self.n = seq + 1
        self._pushes += 1
        refresh = self._pushes >= cap  # re-add sums now and then so float error cannot accumulate
        if refresh:
            self._pushes = 0
        for w in self.windows:
            w.count += 1
            if refresh:
                w.total = math.fsum(values[i % cap] for i in range(w.start, seq + 1))
            else:
                w.total += value
            q = w.maxq
            if q is not None:
                while q and values[q[-1] % cap] <= value:
                    q.pop()
                q.append(seq)
                while q[0] < w.start:
                    q.popleft()
            q = w.minq
            if q is not None:
                while q and values[q[-1] % cap] >= value:
                    q.pop()
                q.append(seq)
                while q[0] < w.start:
                    q.popleft()

    def aggregates(self, path: str, into: dict[str, Any]) -> None:
        """Write ``path@agg:Ns`` for every window and aggregate of this series into ``into``."""
        values, cap = self.values, self.capacity
        for w, aggs in self._aggs:
            if not w.count:
                continue
            for agg in aggs:
                if agg == "avg":
                    value = w.total / w.count
                elif agg == "max" and w.maxq:
                    value = values[w.maxq[0] % cap]
                elif agg == "min" and w.minq:
                    value = values[w.minq[0] % cap]
                elif agg == "samples":  # how many samples the window holds (Koordinator's validity test)
                    value = float(w.count)
                else:
                    continue
                into[window_key(path, agg, w.seconds)] = value


class WindowStore:
    """Series per (item, fact) for one scope; items that disappear are dropped with their buffers."""

    def __init__(
        self, specs: Iterable[WindowSpec], interval: float, previous: WindowStore | None = None
    ) -> None:
        by_path: dict[str, dict[float, set[str]]] = {}
        for s in specs:
            by_path.setdefault(s.path, {}).setdefault(s.seconds, set()).add(s.agg)
        self.paths: dict[str, dict[float, frozenset[str]]] = {
            p: {sec: frozenset(a) for sec, a in w.items()} for p, w in by_path.items()
        }
        self.capacity = {p: math.ceil(max(w) / max(interval, 1e-3) * 1.5) + 4 for p, w in self.paths.items()}
        self.series: dict[str, dict[str, Series]] = {}
        self._seen: dict[str, int] = {}
        if previous is not None:
            self._adopt(previous)

    def _adopt(self, previous: WindowStore) -> None:
        """Keep the history of facts whose windows did not change (a policy reload must not reset
        a 5-minute minimum to one sample, which could make a held-back rule fire early)."""
        same = {
            p
            for p, w in self.paths.items()
            if previous.paths.get(p) == w and previous.capacity[p] == self.capacity[p]
        }
        if not same:
            return
        for item, per_item in previous.series.items():
            kept = {p: s for p, s in per_item.items() if p in same}
            if kept:
                self.series[item] = kept
                self._seen[item] = previous._seen.get(item, 0)

    def __bool__(self) -> bool:
        return bool(self.paths)

    def update(self, item: str, facts: dict[str, Any], t: float, tick: int) -> None:
        """Push this tick's values of ``item`` and write its aggregates into ``facts``."""
        per_item = self.series.get(item)
        if per_item is None:
            per_item = self.series[item] = {}
        self._seen[item] = tick
        for path, windows in self.paths.items():
            value = facts.get(path)
            series = per_item.get(path)
            if isinstance(value, int | float) and not isinstance(value, bool):
                if series is None:
                    series = per_item[path] = Series(windows, self.capacity[path])
                series.push(t, float(value))
            if series is not None:
                series.aggregates(path, facts)

    def prune(self, tick: int) -> None:
        if len(self._seen) == 0:
            return
        gone = [item for item, seen in self._seen.items() if seen != tick]
        for item in gone:
            del self._seen[item]
            self.series.pop(item, None)


# ---------------------------------------------------------------------------------------- collector


@dataclass(frozen=True)
class CollectorOptions:
    """Collector behaviour; the defaults read everything every tick.

    ``containers``/``cgroup_psi``/``throttling``: None means "when the policy reads such facts"."""

    interval: float = 1.0  # expected tick interval, sizes the window buffers
    containers: bool | None = None
    cgroup_psi: bool | None = None
    throttling: bool | None = None
    memory_every: int = 1
    numa_every: int = 1  # memory.numa_stat on every Nth memory read of a cgroup (CgroupOptions)
    observe_every: int = 1  # re-read observed cgroup files every N ticks (see note_written)
    observed_files: tuple[str, ...] = DEFAULT_OBSERVED
    track_ttl: int = 30  # ticks a tracked (path, file) is re-read after it was last tracked
    # v2 cgroup whose PSI is node.workload_psi.* (Katalyst's --workload-path, kubepods/burstable)
    workload_psi_cgroup: str | None = None
    windows: frozenset[WindowSpec] = field(default_factory=frozenset)  # used until use_policy
    # the kubelet's CPU manager checkpoint: node.kubelet.cpu_manager_policy, while the policy reads it
    cpu_manager_state: Path = CPU_MANAGER_STATE


class NodeCollector:
    """Assembles a Snapshot per tick. See the module docstring."""

    def __init__(
        self,
        workloads: WorkloadSource,
        cgroup: CgroupLayout,
        *,
        procfs: Path = Path("/proc"),
        sysfs: Path = Path("/sys"),
        reader: Reader | None = None,
        node_name: str | None = None,
        node_labels: Mapping[str, str] | None = None,
        allocatable: Mapping[str, float] | None = None,
        node_object: NodeObjectSource | None = None,
        resctrl: Callable[[], ResctrlInfo] | None = None,
        options: CollectorOptions = CollectorOptions(),
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        page_size: int | None = None,
        observe: Translate | None = None,
    ) -> None:
        self.source = workloads
        self.cgroup = cgroup
        self.reader = TickReader(reader if reader is not None else PinnedReader())
        self.options = options
        self.clock = clock
        self.monotonic = monotonic
        self.allocatable: Mapping[str, float] = MappingProxyType(dict(allocatable or {}))
        # In Kubernetes mode the Node object gives allocatable (over the static one) and annotations.
        self.node_object = node_object
        self.resctrl = resctrl
        self.topology_source = TopologySource(sysfs, procfs, self.reader, node_name, node_labels)
        self.proc = ProcSource(self.reader, procfs, sysfs, page_size)
        self.ticks = 0
        self._tracked: dict[tuple[str, str], int] = {}
        self._tracked_version = 0  # bumped when a pair starts or stops being tracked
        self._oldest_track = 0  # no tracked pair was last tracked before this tick
        # The last pairs tuple given to track() and the tick of the latest call with that very
        # object; its pairs' stamps in _tracked are renewed lazily (_restamp).
        self._steady: tuple[tuple[tuple[str, str], ...], int] = ((), 0)
        # The observed pairs and the cgroup paths sampled, kept while workloads and tracking stay
        # the same (the Observer recognizes an unchanged list by identity).
        self._pairs: tuple[Any, tuple[tuple[str, str], ...]] | None = None
        self._sampled: tuple[Any, tuple[str, ...]] | None = None
        self._uid_paths: tuple[tuple[Workload, ...], dict[str, str], tuple[str, ...]] | None = None
        self._class_of: ClassOf | None = None
        self._needs: frozenset[str] = frozenset()
        self._stores: dict[str, WindowStore] = {}
        self._class_store: WindowStore | None = None
        self.cgroups = CgroupMetrics(cgroup, self.reader, page_size=self.proc.page_size)
        # The memory guard's reclaim root, whose memory.numa_stat gives the NUMA fact
        # memory.reclaimed_usage_bytes; None while no memoryGuard action is in the policy.
        self._reclaim_root: str | None = None
        self._cpu_manager: CpuManagerState | None = None  # while the policy reads the fact
        self._started = monotonic()
        self._usage_at: float | None = None  # last tick with node CPU and memory usage sampled
        self.observer = Observer(cgroup, self.reader, options.observe_every, observe)
        # The generation's formula for share files read from the other cgroup version (use_policy).
        self.weight_formula: WeightFormula | None = None
        self._configure(options.windows)

    # -- configuration

    def use_policy(
        self, policy: Policy, class_of: ClassOf | None = None, extra: Iterable[WindowSpec] = ()
    ) -> None:
        """Adopt a new policy generation: its windows, and which optional facts its rules read.

        ``class_of`` (e.g. ``engine.classifier.classify(w).class_name``) enables class windows;
        ``extra`` adds windows that strategies read outside conditions (an action's own window)."""
        self._class_of = class_of
        self.weight_formula = policy.weight_formula
        needs = set()
        self._reclaim_root = None
        for rule in policy.rules:
            for action in rule.actions:
                spec = action.spec
                if isinstance(spec, MemoryGuardSpec) and self._reclaim_root is None:
                    self._reclaim_root = spec.cgroup
                if isinstance(spec, EvictSpec) and spec.victims.numa_scoped and rule.scope == "numa":
                    needs.add("pod_numa")  # the NUMA victim filter reads numa.<id>.memory_usage_bytes
            for c in comparisons(rule.when) + comparisons(rule.clear_when):
                path = ".".join(c.spec.path)
                if c.spec.scope == "container":
                    needs.add("containers")
                if c.spec.scope in ("pod", "container") and path.startswith("psi."):
                    needs.add("cgroup_psi")
                if c.spec.scope in ("pod", "container") and path == "cpu.throttled_ratio":
                    needs.add("throttling")
                if c.spec.scope == "node" and path == "kubelet.cpu_manager_policy":
                    needs.add("cpu_manager")
        burst = policy.cfs_quota_burst
        own: set[WindowSpec] = set()
        if burst is not None:  # the CFS quota burst reads each container's usage and throttling
            needs.update(("containers", "throttling"))
            if burst.window:
                own.add(WindowSpec("node", "cpu.usage_cores", "avg", burst.window))
        self._needs = frozenset(needs)
        helds = [r.free.held for r in (policy.reclaim.cpu, policy.reclaim.memory) if r and r.free]
        wants_manager = "cpu_manager" in needs or any(h and h.cpu_manager_policy for h in helds)
        if not wants_manager:
            self._cpu_manager = None
        elif self._cpu_manager is None:
            self._cpu_manager = CpuManagerState(self.options.cpu_manager_state)
        self._configure(windows_of(policy) | self.options.windows | frozenset(extra) | frozenset(own))

    def _configure(self, windows: frozenset[WindowSpec]) -> None:
        self.windows = windows
        interval = self.options.interval
        self._stores = {
            scope: WindowStore([w for w in windows if w.scope == scope], interval, self._stores.get(scope))
            for scope in ("node", "numa", "pod", "container")
        }
        self._class_store = WindowStore(
            [
                WindowSpec("class", f"{w.class_name}|{w.path}", w.agg, w.seconds)
                for w in windows
                if w.scope == "class"
            ],
            interval,
            self._class_store,
        )
        self._window_names = tuple(format_window(s) for s in sorted({w.seconds for w in windows}))
        opts = self.options

        def wanted(flag: bool | None, need: str) -> bool:
            return flag if flag is not None else need in self._needs

        self.read_containers = wanted(opts.containers, "containers")
        # Options change in place: the sampler's previous counters (the CPU rates) survive a reload.
        self.cgroups.options = CgroupOptions(
            psi=wanted(opts.cgroup_psi, "cgroup_psi"),
            throttling=wanted(opts.throttling, "throttling"),
            memory_every=opts.memory_every,
            numa="pod_numa" in self._needs,
            numa_every=opts.numa_every,
        )

    def track(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Observe these (cgroup path, file) pairs in the next snapshots (e.g. the files the last
        plan manages), so the planner diffs against the kernel and a steady state writes nothing."""
        tick = self.ticks
        if isinstance(pairs, tuple) and pairs is self._steady[0]:
            # The same pairs as last time (a steady daemon): their stamps are renewed when the
            # expiry scan needs them (_observed_pairs), not a thousand dict stores every tick.
            self._steady = (pairs, tick)
            return
        self._restamp()
        tracked = self._tracked
        before = len(tracked)
        tracked.update(dict.fromkeys(pairs, tick))
        if len(tracked) != before:
            self._tracked_version += 1
        self._steady = (pairs, tick) if isinstance(pairs, tuple) else ((), 0)

    def _restamp(self) -> None:
        """Give the pairs of the last steady track() calls the tick of the latest one."""
        pairs, tick = self._steady
        if pairs:
            self._tracked.update(dict.fromkeys(pairs, tick))

    def note_written(self, path: str, file: str, value: str) -> None:
        """The adapter wrote ``value``: report it until the file is re-read (with observe_every > 1)."""
        self.observer.note(path, file, value)

    def reread(self, path: str, file: str) -> None:
        """Read this file again at the next tick (a write failed or found its cgroup gone, so what
        the kernel holds is not what qosd asked for and must not wait for the stagger)."""
        self.observer.invalidate(path, file)

    def refresh_topology(self) -> bool:
        """Re-read the topology (CPU hotplug); True if it changed, which resets the CPU counters."""
        self.reader.begin_tick()
        changed = self.topology_source.refresh()
        if changed:
            self.proc.forget()
            self._stores["numa"].series.clear()
        return changed

    # -- one tick

    def prime(self) -> None:
        """Take baseline counters so the first ``collect`` already has CPU usage."""
        self.reader.begin_tick()
        now = self.monotonic()
        self.proc.sample(self.topology_source.topology)
        capacity = float(len(self.topology_source.topology.cpus)) or None
        self.cgroups.sample(self._sampled_paths(self.source.workloads()), now, self.ticks, capacity)

    def collect(self) -> Snapshot:
        self.reader.begin_tick()
        self.ticks += 1
        tick = self.ticks
        now = self.monotonic()
        wall = self.clock()
        topo = self.topology_source
        topology = topo.topology
        node, numa = self.proc.sample(topology)
        node["reclaim.metrics_age_seconds"] = self._metrics_age(node, now)
        if self._cpu_manager is not None:
            manager = self._cpu_manager.policy(now)
            if manager is not None:
                node["kubelet.cpu_manager_policy"] = manager
        if self._reclaim_root is not None:
            self._reclaimed_usage(self._reclaim_root, numa)
        if self.options.workload_psi_cgroup is not None and self.cgroup.version == 2:
            base = self.cgroup.dir(self.options.workload_psi_cgroup)
            for resource in ("cpu", "memory", "io"):
                psi_facts(f"workload_psi.{resource}", self.reader.read(f"{base}/{resource}.pressure"), node)
        workloads = self.source.workloads()
        capacity = float(len(topology.cpus)) or None
        per_cgroup = self.cgroups.sample(self._sampled_paths(workloads), now, tick, capacity)
        pods: Mapping[str, Mapping[str, Any]]
        eager: dict[str, dict[str, Any]] = {}  # the pods' maps when built now (windows add to them)
        containers: dict[str, dict[str, Any]] = {}
        # A pod and its container may share one cgroup (standalone): copy only when windows will
        # add keys to one of them.
        copy_pods, copy_containers = bool(self._stores["pod"]), bool(self._stores["container"])
        if not (copy_pods or copy_containers or self.read_containers):
            # Nothing adds to the pods' maps or sums them from containers this tick: they are built
            # when the engine looks (PodFacts), and the pods' CPU is summed from the rates alone.
            uids, active = self._pod_paths(workloads)
            pods = PodFacts(uids, per_cgroup)
            pod_usage = _usage_sum(per_cgroup, active)
        else:
            pods = eager
            pod_usage = self._eager_pods(workloads, per_cgroup, eager, containers, copy_pods, copy_containers)
        used = node.get("cpu.usage_cores")
        if used is not None and workloads:
            node["cpu.system_usage_cores"] = max(used - pod_usage, 0.0)

        stores = self._stores
        if stores["node"]:
            stores["node"].update("", node, now, tick)
        for scope, items in (("numa", numa), ("pod", eager), ("container", containers)):
            store = stores[scope]
            if store:
                for key, facts in items.items():
                    store.update(str(key), facts, now, tick)
                store.prune(tick)
        classes = self._classes(workloads, pods, now, tick)

        observed = self.observer.observe(self._observed_pairs(workloads, tick), tick, self.weight_formula)
        allocatable, annotations = self.allocatable, _NO_ANNOTATIONS
        if self.node_object is not None:
            allocatable = self.node_object.allocatable() or allocatable
            annotations = self.node_object.annotations()
        return Snapshot(
            time=wall,
            node=topo.node,
            topology=topology,
            workloads=workloads,
            # The per-pod and per-container maps are handed over as they are, typed read-only
            # (Mapping): they are built afresh every tick and nothing keeps them, and a proxy per
            # workload was one allocation per pod per tick (about 2% of the tick at 500 pods).
            metrics=Metrics(
                node=MappingProxyType(node),
                numa={k: MappingProxyType(v) for k, v in numa.items()},
                pods=pods,
                containers=containers,
                classes={k: MappingProxyType(v) for k, v in classes.items()},
                windows=self._window_names,
            ),
            allocatable=allocatable,
            cgroups=observed,
            absent_cgroups=self.observer.absent,
            resctrl=self.resctrl() if self.resctrl is not None else NO_RESCTRL,
            cgroup_version=self.cgroup.version,
            node_annotations=annotations,
        )

    def _eager_pods(
        self,
        workloads: tuple[Workload, ...],
        per_cgroup: Mapping[str, Mapping[str, Any]],
        pods: dict[str, dict[str, Any]],
        containers: dict[str, dict[str, Any]],
        copy_pods: bool,
        copy_containers: bool,
    ) -> float:
        """Every pod's (and container's) fact map into ``pods`` (``containers``) now, for windows,
        which add keys to the maps, and for pods whose facts are summed from their containers; the
        active pods' CPU."""
        pod_usage = 0.0
        for w in workloads:
            facts = per_cgroup.get(w.cgroup_path) if w.cgroup_path else None
            if facts is not None:
                pods[w.uid] = facts if isinstance(facts, dict) and not copy_pods else dict(facts)
                cores = facts.get("cpu.usage_cores")
                if cores is not None and w.phase in ACTIVE_PHASES:
                    pod_usage += cores
            if self.read_containers:
                for c in w.containers:
                    cf = per_cgroup.get(c.cgroup_path) if c.cgroup_path else None
                    if cf is not None:
                        own = cf if isinstance(cf, dict) and not copy_containers else dict(cf)
                        containers[f"{w.uid}/{c.name}"] = own
                if facts is None:  # the pod's own cgroup was not read: its containers' sum
                    pods.update(fill_from_containers((w,), pods, containers))
        return pod_usage

    def _pod_paths(self, workloads: tuple[Workload, ...]) -> tuple[dict[str, str], tuple[str, ...]]:
        """uid -> cgroup path of the workloads that have one, and the active ones' paths (one per
        workload, as the pods' CPU sum counts them); kept while the workload list is the same."""
        cached = self._uid_paths
        if cached is not None and cached[0] is workloads:
            return cached[1], cached[2]
        uids = {w.uid: w.cgroup_path for w in workloads if w.cgroup_path}
        active = tuple(w.cgroup_path for w in workloads if w.cgroup_path and w.phase in ACTIVE_PHASES)
        self._uid_paths = (workloads, uids, active)
        return uids, active

    def _reclaimed_usage(self, root: str, numa: Mapping[int, dict[str, Any]]) -> None:
        """The memory guard's input: per NUMA node, what the reclaim root (its ``cgroup``) uses
        there, from the root's memory.numa_stat. A node the file does not give keeps no fact."""
        text = self.reader.read(self.cgroup.file(root, NUMA_STAT))
        for nid, used in parse_numa_stat(text, self.cgroup.version, self.proc.page_size).items():
            facts = numa.get(nid)
            if facts is not None:
                facts["memory.reclaimed_usage_bytes"] = float(used)

    def _metrics_age(self, node: Mapping[str, Any], now: float) -> float:
        """Seconds since qosd last had a whole view of usage: node CPU and memory sampled, and the
        workload list current (a pod watch that lost the API server goes stale). Reclaim policies
        with ``degradeAfter`` withdraw what they publish once this exceeds it (Koordinator's
        degradation when NodeMetric stops updating)."""
        if node.get("cpu.usage_cores") is not None and node.get("memory.usage_bytes") is not None:
            self._usage_at = now
        fresh = self._usage_at if self._usage_at is not None else self._started
        fresh_at = getattr(self.source, "fresh_at", None)
        if callable(fresh_at):
            source = fresh_at()
            fresh = min(fresh, source if source is not None else self._started)
        return max(0.0, now - fresh)

    def _sampled_paths(self, workloads: tuple[Workload, ...]) -> tuple[str, ...]:
        """The cgroups to sample: each pod's, and its containers' when the policy reads them."""
        key = (workloads, self.read_containers)
        cached = self._sampled
        if cached is not None and cached[0][0] is workloads and cached[0][1] == key[1]:
            return cached[1]
        out: list[str] = []
        for w in workloads:
            if w.cgroup_path:
                out.append(w.cgroup_path)
            if self.read_containers:
                out.extend(
                    c.cgroup_path for c in w.containers if c.cgroup_path and c.cgroup_path != w.cgroup_path
                )
        self._sampled = (key, tuple(out))
        return self._sampled[1]

    def _classes(
        self, workloads: tuple[Workload, ...], pods: Mapping[str, Mapping[str, Any]], now: float, tick: int
    ) -> dict[str, dict[str, Any]]:
        """Windowed class sums (only those a rule reads); plain class values are left to the engine."""
        store = self._class_store
        if store is None or not store or self._class_of is None:
            return {}
        wanted: dict[str, set[str]] = {}
        for key in store.paths:
            name, path = key.split("|", 1)
            if path in CLASS_SUMS:
                wanted.setdefault(name, set()).add(path)
        sums: dict[str, dict[str, Any]] = {name: dict.fromkeys(paths, 0.0) for name, paths in wanted.items()}
        for w in workloads:
            if w.phase not in ACTIVE_PHASES:
                continue
            cls = self._class_of(w)
            target = sums.get(cls) if cls is not None else None
            if target is None:
                continue
            measured = pods.get(w.uid, {})
            for path in target:
                if path == "pods":
                    target[path] += 1
                elif path == "cpu.request_cores":
                    target[path] += w.request("cpu")
                elif path == "memory.request_bytes":
                    target[path] += w.request("memory")
                else:
                    target[path] += measured.get(path) or 0.0
        flat: dict[str, Any] = {
            f"{name}|{path}": v for name, values in sums.items() for path, v in values.items()
        }
        store.update("", flat, now, tick)
        out: dict[str, dict[str, Any]] = {}
        for key, value in flat.items():
            if "@" in key:
                name, rest = key.split("|", 1)
                out.setdefault(name, {})[rest] = value
        return out

    def _observed_pairs(self, workloads: tuple[Workload, ...], tick: int) -> tuple[tuple[str, str], ...]:
        """The observed files of every workload plus the tracked ones; the same list object while
        neither changed."""
        ttl = self.options.track_ttl
        if tick - self._oldest_track > ttl:  # else nothing can have expired: skip the scan
            self._restamp()
            expired = [pair for pair, last in self._tracked.items() if tick - last > ttl]
            if expired:
                for pair in expired:
                    del self._tracked[pair]
                self._tracked_version += 1
            self._oldest_track = min(self._tracked.values(), default=tick)
        cached = self._pairs
        if cached is not None and cached[0][0] is workloads and cached[0][1] == self._tracked_version:
            return cached[1]
        files = self.options.observed_files
        pairs: dict[tuple[str, str], None] = {}
        for w in workloads:
            if w.cgroup_path:
                for f in files:
                    pairs[(w.cgroup_path, f)] = None
            for c in w.containers:
                if c.cgroup_path and not c.init:
                    for f in files:
                        pairs[(c.cgroup_path, f)] = None
        for pair in self._tracked:
            pairs[pair] = None
        out = tuple(pairs)
        self._pairs = ((workloads, self._tracked_version), out)
        return out


def _usage_sum(per_cgroup: Mapping[str, Mapping[str, Any]], paths: tuple[str, ...]) -> float:
    """The CPU cores the cgroups at ``paths`` used this tick (each as often as it is listed)."""
    if isinstance(per_cgroup, CgroupSample):
        rates: Iterable[float | None] = map(per_cgroup.usage_cores, paths)
    else:
        rates = ((per_cgroup.get(p) or {}).get("cpu.usage_cores") for p in paths)
    return float(sum(r for r in rates if r is not None))
