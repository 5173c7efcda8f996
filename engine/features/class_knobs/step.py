"""The class-knob step: what a class declares about CPU and memory becomes cgroup intents for its pods.

Like the pools, a class's knobs are not a rule: ``cpu.shares``/``weight``, ``idle``, ``cfsQuota``,
``burst``/``burstPolicy``, ``memory.min/low/high/limit`` and ``memoryQos`` hold at all times for
every active pod of the class, as kubelet's, Katalyst's QRM and koordlet's reconcilers keep them.
The step runs once per tick after the rules, and a rule's ``setCgroup`` for the same (path, file)
wins (it was appended first; this step skips the slots rules already took).

Which files, per cgroup version of the node (``Snapshot.cgroup_version``):

=================== ========================= ====================== =============================
knob                v1                        v2                     unknown (adapter translates)
=================== ========================= ====================== =============================
shares / weight     cpu.shares                cpu.weight             cpu.shares
idle                cpu.idle                  cpu.idle               cpu.idle
cfsQuota            cpu.cfs_quota_us          cpu.max                cpu.cfs_quota_us
burst               cpu.cfs_burst_us          cpu.max.burst          cpu.cfs_burst_us
memory.limit        memory.limit_in_bytes     memory.max             memory.max
memory.min/low/high (not written)             memory.min/low/high    memory.min/low/high
=================== ========================= ====================== =============================

Share counts become weights by the policy's ``spec.cgroup.weightFormula``. On cgroup v1, memory.min,
memory.low and memory.high exist only in Alibaba Cloud Linux kernels; koordlet writes them where
its "is the file there" check passes, and qosd, which has no fact telling such a kernel apart,
leaves memory QoS alone on v1 nodes with one ``skipped`` note per class or rule and tick.

While a group is idle (cpu.idle 1) the kernel pins its weight to the minimum and refuses
cpu.shares/cpu.weight writes with EINVAL (verified on 6.x: shares read back as 3), so a class with
``idle: true`` writes no shares or weight: they would fail every tick. The planner orders the two
files when both change (engine/plan/cgroups.py).

Where a knob reads more than the pod and its container (an expression; node allocatable; the
container's current CFS quota for Katalyst's static burst), that input is part of the cache key or
the knob is evaluated every tick; everything else is computed once per pod object per generation.

Memory QoS is Koordinator's CgroupReconcile (features/memory_qos/reconcile.py, which this step
calls per pod and per tick; its math in features/memory_qos/strategy.py): pod-level memory.min/low
from the pod's request, container-level min/low/high from each container's request and limit, and
the kube-QoS directories (kubepods, its burstable and besteffort children) get the sums of their
pods' terms, because on cgroup v2 a child's protection is bounded by its parent's. A ``setCgroup``
with ``memoryQos`` only records its ask (``Tick.memory_qos``), like ``setResctrl``: the sums need
every pod's configuration at once. A rule's ask replaces its class's ``memoryQos`` for the pods of
that class.

Each pod's OOM priority (Katalyst's oom_priority, aligned to the class band by the classifier) is
reported as ``PodOomPriority`` on the evaluation: Katalyst writes it to a pinned BPF map that qosd
has no writer for, so it is a per-workload result, not an intent the planner would have to hold
back every tick.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from types import MappingProxyType
from typing import Any

from engine.cgroups.files import host_files
from engine.cgroups.weight import DEFAULT_WEIGHT_FORMULA, WeightFormula, weight_to_shares
from engine.config.policy import Policy, QoSClass
from engine.config.render import RenderError
from engine.evaluate.classify import Classified, Classifier
from engine.evaluate.context import Skipped, Tick
from engine.evaluate.factview import ACTIVE_PHASES, FactViews, same_workloads
from engine.features.class_knobs.burst_policy import bursts, observed_quotas, policy_burst
from engine.features.class_knobs.knobs import (
    IGNORE_OOM_PRIORITY,
    PERIOD_US,
    KnobFn,
    burst_file,
    compile_knob,
    const_knob,
    cpu_idle_value,
    knob_reads,
    main_container,
    sum_texts,
)
from engine.features.memory_qos.reconcile import (
    MemoryQosAsk,
    QosInput,
    allocatable_memory,
    kube_qos_dir_intents,
    pod_memory_qos_intents,
    v1_memory_note,
)
from engine.features.memory_qos.spec import MemoryQos
from engine.model.facts import Container, Snapshot, Workload
from engine.model.intents import CgroupIntent, Provenance

RULE = "classes"  # the provenance name of class-declared knobs (not a rule the policy can name)

V2_ONLY_MEMORY = frozenset({"memory.min", "memory.low", "memory.high"})


# ---------------------------------------------------------------- memory QoS configuration


@dataclass(frozen=True)
class PodOomPriority:
    """A pod's OOM priority as Katalyst would put it in its BPF map (-300: left out, "ignore")."""

    uid: str
    pod: str
    class_name: str
    value: int
    source: str  # "class default" or "enhancement <name>"

    @property
    def ignored(self) -> bool:
        return self.value == IGNORE_OOM_PRIORITY

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "uid": self.uid,
            "pod": self.pod,
            "class": self.class_name,
            "value": self.value,
            "source": self.source,
        }
        if self.ignored:
            out["ignored"] = True
        return out


def _file_on(v1_file: str, version: int) -> str:
    """``v1_file``'s name on cgroup ``version``, from the one v1 <-> v2 table (engine/cgroups/files.py)."""
    return host_files(v1_file, version)[0]


# ---------------------------------------------------------------- compiled class plans


def _normalise(file: str, fn: KnobFn) -> KnobFn:
    """A limit knob's text as the adapter reads the file back, so that a steady state compares
    equal and v1 gets the "-1" it accepts: "-1" for no limit in cpu.cfs_quota_us and
    memory.limit_in_bytes, "max" in memory.max, "<quota|max> 100000" in cpu.max."""
    if file not in ("cpu.max", "cpu.cfs_quota_us", "memory.max", "memory.limit_in_bytes"):
        return fn

    def normalised(
        w: Workload | None,
        node: Mapping[str, Any],
        ctr: Container | None = None,
        current: float | None = None,
        /,
    ) -> str | None:
        text = fn(w, node, ctr, current)
        if text is None:
            return None
        parts = text.split()
        unlimited = not parts or parts[0] in ("max", "-1")
        if file == "cpu.max":
            if unlimited:
                return f"max {PERIOD_US}"
            return text if len(parts) > 1 else f"{parts[0]} {PERIOD_US}"
        if file == "memory.max":
            return "max" if unlimited else text
        return "-1" if unlimited else text

    return normalised


def _share_knob(file: str, key: str, knob: Any, formula: WeightFormula) -> KnobFn:
    """``shares`` or ``weight`` of a class for ``file`` (cpu.shares or cpu.weight). A literal is a
    share count for ``shares`` and a weight for ``weight``, converted when the file is the other
    one; percents and expressions are cores either way (kubelet's 1024 shares per core)."""
    if isinstance(knob, int | float) and not isinstance(knob, bool):
        if key == "shares":
            return compile_knob(file, {"shares": int(knob)}, weight_formula=formula)
        if file == "cpu.shares":
            return const_knob(str(weight_to_shares(int(knob), formula)))
    return compile_knob(file, knob, weight_formula=formula)


@dataclass(frozen=True)
class _Knob:
    """One compiled knob of a class: its file, and whether it reads the file's ``current`` value
    (then its value is remembered) or its ``container`` (then the pod cgroup gets the sum of its
    containers' values)."""

    file: str
    fn: KnobFn
    current: bool = False
    per_container: bool = False


def _knob(file: str, fn: KnobFn, raw: Any = None) -> _Knob:
    return _Knob(file, fn, knob_reads(raw, "current"), knob_reads(raw, "container"))


@dataclass(frozen=True)
class _ClassPlan:
    """One class's knobs compiled for one cgroup version."""

    cls: QoSClass
    pod_knobs: tuple[_Knob, ...]
    container_knobs: tuple[_Knob, ...]
    burst_file: str
    burst_policy: str | None
    burst_percent: float
    memory_qos: MemoryQos | None
    v1_memory_skipped: tuple[str, ...]  # memory files the class declares that v1 cannot take
    dynamic: bool  # an expression knob: evaluate every tick
    reads_allocatable: bool
    inputs: Mapping[str, Any]


def _compile_plan(cls: QoSClass, version: int | None, formula: WeightFormula) -> _ClassPlan:
    cpu, memory = cls.cpu, cls.memory
    pod: list[_Knob] = []
    ctr: list[_Knob] = []
    inputs: dict[str, Any] = {"class": cls.name, "cgroupVersion": version if version else "unknown"}
    knobs_seen: list[Any] = []
    if cpu.idle is not None:
        pod.append(_Knob("cpu.idle", const_knob(cpu_idle_value(cpu.idle))))
    share_key, share = ("shares", cpu.shares) if cpu.shares is not None else ("weight", cpu.weight)
    if share is not None:
        if cpu.idle is True:
            inputs["shares"] = "not written: an idle group's weight is fixed by the kernel (cpu.idle 1)"
        else:
            file = _file_on("cpu.shares", 2 if version == 2 else 1)
            pod.append(_knob(file, _share_knob(file, share_key, share, formula), share))
            knobs_seen.append(share)
            if file == "cpu.weight" or share_key == "weight":
                inputs["weightFormula"] = formula
    if cpu.cfs_quota is not None:
        file = _file_on("cpu.cfs_quota_us", 2 if version == 2 else 1)
        fn = _normalise(file, compile_knob(file, cpu.cfs_quota, weight_formula=formula))
        pod.append(_knob(file, fn, cpu.cfs_quota))
        ctr.append(_knob(file, fn, cpu.cfs_quota))
        knobs_seen.append(cpu.cfs_quota)
    bfile = burst_file(version if version in (1, 2) else 1)
    policy = cpu.burst_policy
    if cpu.burst is not None and policy is None:
        fn = compile_knob(bfile, cpu.burst, weight_formula=formula)
        pod.append(_knob(bfile, fn, cpu.burst))
        ctr.append(_knob(bfile, fn, cpu.burst))
        knobs_seen.append(cpu.burst)
    limit_file = _file_on("memory.limit_in_bytes", 1 if version == 1 else 2)
    skipped: list[str] = []
    for knob, file in (
        (memory.min, "memory.min"),
        (memory.low, "memory.low"),
        (memory.high, "memory.high"),
        (memory.limit, limit_file),
    ):
        if knob is None:
            continue
        if version == 1 and file in V2_ONLY_MEMORY:
            skipped.append(file)
            continue
        pod.append(_knob(file, _normalise(file, compile_knob(file, knob, weight_formula=formula)), knob))
        knobs_seen.append(knob)
    qos = cls.memory_qos
    dynamic = any(isinstance(k, Mapping) and ("expr" in k or knob_reads(k, "current")) for k in knobs_seen)
    reads_alloc = any(isinstance(k, Mapping) and k.get("of") == "allocatable" for k in knobs_seen)
    reads_alloc |= qos is not None and bool(qos.percents.throttling_percent)
    return _ClassPlan(
        cls=cls,
        pod_knobs=tuple(pod),
        container_knobs=tuple(ctr),
        burst_file=bfile,
        burst_policy=policy,
        burst_percent=cpu.burst_percent,
        memory_qos=qos,
        v1_memory_skipped=tuple(skipped),
        dynamic=dynamic,
        reads_allocatable=reads_alloc,
        inputs=MappingProxyType(inputs),
    )


def _app_containers(w: Workload) -> Iterable[Container]:
    return (c for c in w.containers if not c.init and c.cgroup_path)


# ---------------------------------------------------------------- per-pod results


@dataclass(frozen=True)
class _PodResult:
    """What one pod gets from its class this tick; cached while its inputs stay the same."""

    intents: tuple[CgroupIntent, ...]
    notes: tuple[Skipped, ...]
    qos_input: QosInput | None  # input, QoS dir, root, source
    oom: PodOomPriority | None


@dataclass
class _Memo:
    """A pod's last result. ``stable``: it depends on nothing but the pod object, its class and the
    cgroup version (no expression, allocatable, observed quota or rule ask), so the next tick may
    reuse it without classifying the pod again."""

    workload: Workload
    key: tuple[Any, ...]
    result: _PodResult
    class_name: str
    stable: bool


@dataclass(frozen=True)
class _RunMemo:
    """A whole tick's class-knob output when every pod's result was stable and no rule asked for
    memory QoS: the next tick with the same workload objects and cgroup version reuses it as is."""

    workloads: tuple[Workload, ...]
    version: int | None
    intents: tuple[CgroupIntent, ...]
    files: frozenset[str]  # the files of ``intents``
    notes: tuple[Skipped, ...]
    ooms: tuple[PodOomPriority, ...]


class ClassKnobStep:
    """The class knobs of one policy generation, compiled per cgroup version on first use."""

    def __init__(self, policy: Policy, classifier: Classifier, generation: int):
        self.policy = policy
        self.classifier = classifier
        self.generation = generation
        self.formula: WeightFormula = policy.weight_formula or DEFAULT_WEIGHT_FORMULA
        self._plans: dict[tuple[str, int | None], _ClassPlan] = {}
        self._memo: dict[int, _Memo] = {}
        self._run_memo: _RunMemo | None = None
        self._qos_key: tuple[Any, ...] | None = None  # the kube-QoS sums of the last tick, and their inputs
        self._qos_intents: list[CgroupIntent] = []
        self._qos_provenance = Provenance(
            rule=RULE,
            policy_hash=policy.hash,
            generation=generation,
            source="kube-QoS directories (sum of the pods' memoryQos terms)",
            mode=policy.mode,
            item="",
            conditions=(),
            inputs=MappingProxyType({}),
        )
        self._oom_sources = tuple(e.name for e in policy.enhancements if e.effect == "oomPriority")

    def plan(self, cls: QoSClass, version: int | None) -> _ClassPlan:
        key = (cls.name, version)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = _compile_plan(cls, version, self.formula)
        return plan

    def before_rules(self, snap: Snapshot, views: FactViews, t: Tick) -> None:
        """Nothing: class knobs hold after the rules, so a rule's setCgroup of the same file wins."""

    def after_rules(self, snap: Snapshot, views: FactViews, t: Tick) -> None:
        t.oom_priorities = self.run(snap, views.node, t)

    def run(self, snap: Snapshot, node: Mapping[str, Any], t: Tick) -> tuple[PodOomPriority, ...]:
        """Append this tick's class-knob intents and notes; return every active pod's OOM priority."""
        version = snap.cgroup_version if snap.cgroup_version in (1, 2) else None
        whole = self._run_memo
        if (
            whole is not None
            and not t.memory_qos
            and whole.version == version
            and same_workloads(whole.workloads, snap.workloads)
        ):
            t.add_unless_set(whole.intents, whole.files)
            t.skipped.extend(whole.notes)
            return whole.ooms
        asks: dict[str, MemoryQosAsk] = {}
        for ask in t.memory_qos:
            asks.setdefault(ask.class_name, ask)
        alloc = allocatable_memory(snap, node)
        memo: dict[int, _Memo] = {}
        ooms: list[PodOomPriority] = []
        notes: dict[str, Skipped] = {}
        qos_inputs: list[QosInput] = []
        produced: list[CgroupIntent] = []
        stable = not asks
        classify = self.classifier.classify
        index = self.policy.class_index
        previous = self._memo
        for w in snap.workloads:
            if w.phase not in ACTIVE_PHASES:
                continue
            old = previous.get(id(w))
            if (
                old is not None
                and old.workload is w
                and old.stable
                and old.key[0] == version
                and old.class_name not in asks
            ):
                memo[id(w)] = old
                result = old.result
            else:
                c = classify(w)
                cls = index.get(c.class_name) if c.class_name else None
                if cls is None:
                    continue
                result = self._pod(w, c, cls, version, asks.get(cls.name), snap, node, alloc, memo, t)
                stable = stable and memo[id(w)].stable
            produced.extend(result.intents)
            for note in result.notes:
                notes.setdefault(note.reason, note)
            if result.qos_input is not None:
                qos_inputs.append(result.qos_input)
            if result.oom is not None:
                ooms.append(result.oom)
        self._memo = memo
        t.skipped.extend(notes.values())
        if qos_inputs:
            key = (tuple(qos_inputs), version)
            if key != self._qos_key:
                self._qos_key, self._qos_intents = (
                    key,
                    kube_qos_dir_intents(qos_inputs, version, self._qos_provenance),
                )
            produced.extend(self._qos_intents)
        files = frozenset(i.file for i in produced)
        t.add_unless_set(produced, files)
        out = tuple(ooms)
        memo_of = _RunMemo(snap.workloads, version, tuple(produced), files, tuple(notes.values()), out)
        self._run_memo = memo_of if stable else None
        return out

    # ---------------------------------------------------------------- one pod

    def _pod(
        self,
        w: Workload,
        c: Classified,
        cls: QoSClass,
        version: int | None,
        ask: MemoryQosAsk | None,
        snap: Snapshot,
        node: Mapping[str, Any],
        alloc: int,
        memo: dict[int, _Memo],
        t: Tick,
    ) -> _PodResult:
        plan = self.plan(cls, version)
        policy = c.effects.burst_policy or plan.burst_policy
        quotas = observed_quotas(_app_containers(w), snap, version) if policy == "static" else ()
        key = (
            version,
            ask,
            alloc if plan.reads_allocatable or ask is not None else None,
            _node_allocatable(plan, node),
            quotas,
        )
        old = self._memo.get(id(w))
        if old is not None and old.workload is w and old.key == key and not plan.dynamic:
            memo[id(w)] = old
            return old.result
        result = self._compute(w, c, plan, policy, version, ask, snap, node, alloc, quotas, t)
        stable = not (plan.dynamic or plan.reads_allocatable or quotas or ask is not None)
        memo[id(w)] = _Memo(w, key, result, cls.name, stable)
        return result

    def _compute(
        self,
        w: Workload,
        c: Classified,
        plan: _ClassPlan,
        burst_policy: str | None,
        version: int | None,
        ask: MemoryQosAsk | None,
        snap: Snapshot,
        node: Mapping[str, Any],
        alloc: int,
        quotas: tuple[str | None, ...],
        t: Tick,
    ) -> _PodResult:
        intents: list[CgroupIntent] = []
        notes: list[Skipped] = []
        prov = self._provenance(plan, w)
        per_file: dict[str, list[str]] = {}  # the containers' values, for pod knobs that sum them

        def emit(path: str, knobs: Iterable[_Knob], ctr: Container | None, out: list[CgroupIntent]) -> None:
            for k in knobs:
                if k.file == plan.burst_file and (burst_policy is not None or not bursts(ctr, main)):
                    continue  # a Katalyst burst policy replaces the burst knob; burstContainers
                if ctr is None and (k.per_container or (main is not None and k.file == plan.burst_file)):
                    value = sum_texts(k.file, per_file.get(k.file, ()))
                else:
                    current = t.current(snap, path, k.file) if k.current else None
                    try:
                        value = k.fn(w, node, ctr, current)
                    except RenderError as exc:
                        notes.append(Skipped(RULE, f"class {plan.cls.name}: {path}/{k.file}: {exc.message}"))
                        continue
                if value is None:
                    continue
                if ctr is not None:
                    per_file.setdefault(k.file, []).append(value)
                if k.current:
                    t.remember(path, k.file, value)
                out.append(CgroupIntent(path, k.file, value, w.key, prov))

        containers = list(_app_containers(w))
        cpu = plan.cls.cpu
        main = (
            main_container(containers, w.annotations, cpu.main_container_annotation)
            if cpu.burst_main_only
            else None
        )
        ctr_intents: list[CgroupIntent] = []
        if plan.container_knobs:
            for ctr in containers:
                emit(ctr.cgroup_path, plan.container_knobs, ctr, ctr_intents)
        if w.cgroup_path:
            emit(w.cgroup_path, plan.pod_knobs, None, intents)
        intents.extend(ctr_intents)
        if burst_policy is not None:
            percent = plan.burst_percent if c.effects.burst_percent is None else c.effects.burst_percent
            intents.extend(
                policy_burst(w.key, containers, quotas, burst_policy, percent, plan.burst_file, prov, main)
            )
        if plan.v1_memory_skipped:
            notes.append(v1_memory_note(f"class {plan.cls.name}", plan.v1_memory_skipped, RULE))
        qos_input = None
        if ask is not None or plan.memory_qos is not None:
            who = (plan.memory_qos, f"class {plan.cls.name}", RULE, partial(self._provenance, plan, w))
            qos_input = pod_memory_qos_intents(w, who, ask, version, alloc, containers, intents, notes)
        return _PodResult(tuple(intents), tuple(notes), qos_input, self._oom(w, c, plan.cls))

    def _provenance(self, plan: _ClassPlan, w: Workload, **extra: Any) -> Provenance:
        return Provenance(
            rule=RULE,
            policy_hash=self.policy.hash,
            generation=self.generation,
            source=str(plan.cls.origin),
            mode=self.policy.mode,
            item=w.key,
            conditions=(),
            inputs=MappingProxyType({**plan.inputs, **extra}),
        )

    # ---------------------------------------------------------------- OOM priority

    def _oom(self, w: Workload, c: Classified, cls: QoSClass) -> PodOomPriority | None:
        value = c.effects.oom_priority
        if value is not None:
            name = next((n for n in self._oom_sources if n in c.enhancements), "oomPriority")
            return PodOomPriority(w.uid, w.key, cls.name, value, f"enhancement {name}")
        if cls.oom_priority.default is None:
            return None
        return PodOomPriority(w.uid, w.key, cls.name, cls.oom_priority.default, "class default")


# ---------------------------------------------------------------- helpers


def _node_allocatable(plan: _ClassPlan, node: Mapping[str, Any]) -> Any:
    if not plan.reads_allocatable:
        return None
    return (node.get("memory.allocatable_bytes"), node.get("cpu.allocatable_cores"))
