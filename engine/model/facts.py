"""The facts of one tick: an immutable Snapshot of topology, workloads and metrics.

Evaluation is a pure function of (policy, snapshot, engine state), so the snapshot is frozen and
carries everything a decision may read. Metrics are kept as flat mappings per scope item
("memory.usage_percent" -> 81.0, "cpu.usage_percent@avg:300s" -> 60.2): the compiled conditions read
them with one dict lookup, and collectors build them directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any

from engine.model.node import NodeInfo, node_from_snapshot
from engine.model.podsums import fill_from_containers
from engine.model.units import parse_duration

FactMap = Mapping[str, Any]
EMPTY: FactMap = MappingProxyType({})
AGGREGATES = ("avg", "max", "min")


def window_key(path: str, agg: str, seconds: float) -> str:
    """Flat key of a windowed aggregate, window in canonical seconds: ``cpu.usage_percent@avg:300s``."""
    return f"{path}@{agg}:{seconds:g}s"


@dataclass(frozen=True)
class Cpu:
    id: int
    core: int
    socket: int
    numa: int
    l3: int | None = None


@dataclass(frozen=True)
class Topology:
    """Logical CPUs with their core, socket, NUMA node and L3; memory per NUMA node."""

    cpus: tuple[Cpu, ...]
    numa_memory: Mapping[int, float] = field(default_factory=dict)

    @cached_property
    def siblings(self) -> Mapping[int, tuple[int, ...]]:
        """Hyper-thread siblings of each CPU (itself included), from shared (socket, core)."""
        by_core: dict[tuple[int, int], list[int]] = {}
        for c in self.cpus:
            by_core.setdefault((c.socket, c.core), []).append(c.id)
        return MappingProxyType({cid: tuple(sorted(ids)) for ids in by_core.values() for cid in ids})

    # Cached: the collector keeps one Topology while the hardware is unchanged, and every tick asks.
    @cached_property
    def numa_ids(self) -> tuple[int, ...]:
        return tuple(sorted({c.numa for c in self.cpus} | set(self.numa_memory)))

    @cached_property
    def sockets(self) -> tuple[int, ...]:
        return tuple(sorted({c.socket for c in self.cpus}))

    @cached_property
    def l3_ids(self) -> tuple[int, ...]:
        return tuple(sorted({c.l3 for c in self.cpus if c.l3 is not None}))

    @cached_property
    def _numa_cpus(self) -> Mapping[int, tuple[int, ...]]:
        out: dict[int, list[int]] = {}
        for c in self.cpus:
            out.setdefault(c.numa, []).append(c.id)
        return MappingProxyType({n: tuple(ids) for n, ids in out.items()})

    def cpus_of_numa(self, numa: int) -> tuple[int, ...]:
        return self._numa_cpus.get(numa, ())


@dataclass(frozen=True)
class Container:
    name: str
    id: str = ""
    requests: Mapping[str, float] = field(default_factory=dict)
    limits: Mapping[str, float] = field(default_factory=dict)
    cgroup_path: str = ""
    init: bool = False


@dataclass(frozen=True, eq=False)
class Workload:
    """A pod (or, standalone, a cgroup). Identity matters: sources reuse unchanged workloads
    between ticks, so per-generation caches (classification) key on the object."""

    uid: str
    name: str
    namespace: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    priority: int | None = None
    priority_class_name: str = ""
    kube_qos: str = "BestEffort"
    phase: str = "Running"
    terminating: bool = False
    cgroup_path: str = ""
    containers: tuple[Container, ...] = ()
    # spec.terminationGracePeriodSeconds: what an eviction asking for "the pod's own" grace gets
    termination_grace_seconds: int | None = None
    # status.startTime in seconds since the epoch (None: unknown): the fact pod.start_time_seconds,
    # and where the ramp-up of a new shared pod counts from
    start_time: float | None = None

    @cached_property
    def key(self) -> str:
        """namespace/name; cached because every tick reads it for every pod."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def request(self, resource: str) -> float:
        """Sum over app containers (init containers run before them, not alongside)."""
        return sum(c.requests.get(resource, 0.0) for c in self.containers if not c.init)

    def limit(self, resource: str) -> float | None:
        """Sum over app containers, or None if any container has no limit (unbounded)."""
        total = 0.0
        for c in self.containers:
            if c.init:
                continue
            value = c.limits.get(resource)
            if value is None:
                return None
            total += value
        return total


@dataclass(frozen=True)
class HostApp:
    """An application on the node outside Kubernetes pods (Koordinator's NodeSLO
    ``hostApplications``: a database, an agent, a YARN NodeManager), with its measured usage.

    Its usage is not "system" usage: it enters the CPU suppress arithmetic by its QoS class, as
    Koordinator's CalculateFilterPodsUsed does. ``qos`` names a class of the policy; ``cgroup_base``
    is Koordinator's CgroupBaseType (CgroupRoot, Kubepods, KubepodsBurstable, KubepodsBesteffort).
    A usage of None means no metric: the application is left out of the sums, as in Koordinator."""

    name: str
    qos: str = ""
    priority: str = ""
    cgroup_base: str = ""
    parent_dir: str = ""
    relative_path: str = ""
    cpu_usage_cores: float | None = None
    memory_usage_bytes: float | None = None


@dataclass(frozen=True)
class Metrics:
    """Flat fact maps per scope item; see the module docstring for the key format."""

    node: FactMap = field(default_factory=lambda: EMPTY)
    numa: Mapping[int, FactMap] = field(default_factory=dict)
    pods: Mapping[str, FactMap] = field(default_factory=dict)
    containers: Mapping[str, FactMap] = field(default_factory=dict)
    classes: Mapping[str, FactMap] = field(default_factory=dict)
    windows: tuple[str, ...] = ()


@dataclass(frozen=True)
class ResctrlInfo:
    """resctrl as the node offers it (info/) and the schemata its groups hold now.

    Kept on the snapshot, not the policy: the same policy runs on Intel and AMD nodes, with and
    without RDT, and the L3/MB values are derived per node from these capabilities."""

    mounted: bool
    cbm_mask: str = ""
    min_cbm_bits: int = 1
    num_closids: int = 0
    mb_granularity: int = 10
    mb_min: int = 10
    vendor: str = "intel"
    cache_ids: tuple[int, ...] = ()
    mb_domains: tuple[int, ...] = ()
    sparse_masks: bool = False
    shareable_bits: str = ""  # info/L3/shareable_bits: ways other agents (GPU, I/O) may also use
    delay_linear: bool = True
    groups: Mapping[str, str] = field(default_factory=dict)  # observed: group -> schemata text
    # Where resctrl was looked for (``qosd run --resctrl-root``), so a note about it names that place.
    root: str = "/sys/fs/resctrl"


NO_RESCTRL = ResctrlInfo(mounted=False)


@dataclass(frozen=True)
class Snapshot:
    time: float
    node: NodeInfo
    topology: Topology
    workloads: tuple[Workload, ...]
    metrics: Metrics
    allocatable: Mapping[str, float] = field(default_factory=dict)
    cgroups: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # observed: path -> file -> value
    resctrl: ResctrlInfo = NO_RESCTRL
    # 1 or 2 (node.cgroup.version); None when the source does not say. Class knobs pick file names by
    # it (cpu.shares vs cpu.weight); unknown falls back to names the cgroup adapter translates.
    cgroup_version: int | None = None
    host_apps: tuple[HostApp, ...] = ()
    # The Node object's annotations (Koordinator's node.koordinator.sh/reservation lives there).
    node_annotations: Mapping[str, str] = field(default_factory=dict)
    # Cgroup paths whose directory the collector looked for and did not find (facts: absentCgroups).
    # The planner holds every write there: a container that has not started or has gone.
    absent_cgroups: frozenset[str] = frozenset()

    @cached_property
    def by_uid(self) -> Mapping[str, Workload]:
        return MappingProxyType({w.uid: w for w in self.workloads})


# ---------------------------------------------------------------- from the facts schema's JSON shape


def flatten_metrics(tree: Mapping[str, Any] | None) -> dict[str, Any]:
    """A metrics subtree (as in facts.schema.json) -> flat keys; series expand to last + aggregates."""
    out: dict[str, Any] = {}
    stack: list[tuple[str, Any]] = [("", tree or {})]
    while stack:
        path, value = stack.pop()
        if not isinstance(value, Mapping):
            out[path] = value
        elif _is_series(value):
            out[path] = value["last"]
            for agg in (*AGGREGATES, "samples"):  # samples: how many values each window holds
                for window, v in (value.get(agg) or {}).items():
                    out[window_key(path, agg, parse_duration(window))] = v
        else:
            stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in value.items())
    return out


def _is_series(value: Mapping[str, Any]) -> bool:
    return "last" in value and set(value) <= {"last", "avg", "max", "min", "samples"}


def snapshot_from_dict(data: Mapping[str, Any]) -> Snapshot:
    """A Snapshot from a schema-valid facts document (see schemas/facts.schema.json)."""
    node_raw = data.get("node") or {}
    node = node_from_snapshot(node_raw)
    topo_raw = node_raw.get("topology") or {}
    cpus = tuple(
        Cpu(int(c["id"]), int(c["core"]), int(c["socket"]), int(c["numa"]), c.get("l3"))
        for c in topo_raw.get("cpus") or []
    )
    if not cpus:
        cpus = tuple(Cpu(i, i, 0, 0) for i in range(node.cpus))
    numa_memory = {int(n["id"]): float(n.get("memoryBytes", 0)) for n in topo_raw.get("numa") or []}
    topology = Topology(cpus, numa_memory)
    workloads = tuple(_workload(w) for w in data.get("workloads") or [])
    m = data.get("metrics") or {}
    pods = {k: flatten_metrics(v) for k, v in (m.get("pods") or {}).items()}
    containers = {k: flatten_metrics(v) for k, v in (m.get("containers") or {}).items()}
    pods.update(fill_from_containers(workloads, pods, containers))
    metrics = Metrics(
        node=MappingProxyType(flatten_metrics(m.get("node"))),
        numa={int(k): MappingProxyType(flatten_metrics(v)) for k, v in (m.get("numa") or {}).items()},
        pods={k: MappingProxyType(v) for k, v in pods.items()},
        containers={k: MappingProxyType(v) for k, v in containers.items()},
        classes={k: MappingProxyType(flatten_metrics(v)) for k, v in (m.get("classes") or {}).items()},
        windows=tuple(m.get("windows") or ()),
    )
    allocatable = {k: float(v) for k, v in (node_raw.get("allocatable") or {}).items()}
    cgroups = {str(path): dict(files) for path, files in (data.get("cgroups") or {}).items()}
    return Snapshot(
        float(data.get("time", 0.0)),
        node,
        topology,
        workloads,
        metrics,
        allocatable,
        cgroups,
        _resctrl(node_raw.get("resctrl")),
        (node_raw.get("cgroup") or {}).get("version"),
        tuple(_host_app(a) for a in data.get("hostApplications") or ()),
        MappingProxyType(dict(node_raw.get("annotations") or {})),
        frozenset(str(p) for p in data.get("absentCgroups") or ()),
    )


def _host_app(a: Mapping[str, Any]) -> HostApp:
    path = a.get("cgroupPath") or {}
    usage = a.get("usage") or {}
    cpu, memory = usage.get("cpuCores"), usage.get("memoryBytes")
    return HostApp(
        name=str(a["name"]),
        qos=str(a.get("qos", "")),
        priority=str(a.get("priority", "")),
        cgroup_base=str(path.get("base", "")),
        parent_dir=str(path.get("parentDir", "")),
        relative_path=str(path.get("relativePath", "")),
        cpu_usage_cores=None if cpu is None else float(cpu),
        memory_usage_bytes=None if memory is None else float(memory),
    )


def _resctrl(raw: Mapping[str, Any] | None) -> ResctrlInfo:
    if not raw or not raw.get("mounted", bool(raw.get("cbmMask"))):
        return NO_RESCTRL
    caches = tuple(int(i) for i in raw.get("cacheIds") or (0,))
    return ResctrlInfo(
        mounted=True,
        cbm_mask=str(raw.get("cbmMask", "")),
        min_cbm_bits=int(raw.get("minCbmBits", 1)),
        num_closids=int(raw.get("numClosids", 0)),
        mb_granularity=int(raw.get("mbGranularity", 10)),
        mb_min=int(raw.get("mbMin", 10)),
        vendor=str(raw.get("vendor", "intel")),
        cache_ids=caches,
        mb_domains=tuple(int(i) for i in raw.get("mbDomains") or caches),
        sparse_masks=bool(raw.get("sparseMasks", False)),
        delay_linear=bool(raw.get("delayLinear", True)),
        groups=MappingProxyType(
            {str(k): str((v or {}).get("schemata", "")) for k, v in (raw.get("groups") or {}).items()}
        ),
    )


def _workload(w: Mapping[str, Any]) -> Workload:
    return Workload(
        uid=str(w["uid"]),
        name=str(w["name"]),
        namespace=str(w.get("namespace", "")),
        labels=MappingProxyType(dict(w.get("labels") or {})),
        annotations=MappingProxyType(dict(w.get("annotations") or {})),
        priority=w.get("priority"),
        priority_class_name=str(w.get("priorityClassName", "")),
        kube_qos=str(w.get("kubeQoS", "BestEffort")),
        phase=str(w.get("phase", "Running")),
        terminating=bool(w.get("terminating", False)),
        cgroup_path=str(w.get("cgroupPath", "")),
        termination_grace_seconds=w.get("terminationGracePeriodSeconds"),
        start_time=float(w["startTime"]) if w.get("startTime") is not None else None,
        containers=tuple(
            Container(
                name=str(c["name"]),
                id=str(c.get("id", "")),
                requests=MappingProxyType({k: float(v) for k, v in (c.get("requests") or {}).items()}),
                limits=MappingProxyType({k: float(v) for k, v in (c.get("limits") or {}).items()}),
                cgroup_path=str(c.get("cgroupPath", "")),
                init=bool(c.get("init", False)),
            )
            for c in w.get("containers") or []
        ),
    )
