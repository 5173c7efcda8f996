"""setCgroup: desired cgroup values for a literal path, or for every pod of a class (and, with
``containers``, each of its app containers' own cgroups; a pod value ``{sum: containers}`` is the sum
of its containers' values).

Share counts become cpu.weight by the policy's spec.cgroup.weightFormula. ``memoryQos`` is only
recorded here (``Tick.memory_qos``): the class-knob step computes it after the rules, with the
kube-QoS directory sums that need every pod's configuration (engine/features/class_knobs/step.py).
"""

from __future__ import annotations

from engine.cgroups.files import burst_problem, value_problem
from engine.config.render import RenderError
from engine.evaluate.context import ActionContext
from engine.features.class_knobs.knobs import sum_texts
from engine.features.class_knobs.spec import SetCgroupSpec
from engine.features.memory_qos.reconcile import MemoryQosAsk
from engine.model.facts import Container, Workload
from engine.model.intents import CgroupIntent, Provenance


def set_cgroup(ctx: ActionContext) -> bool:
    spec = ctx.spec_as(SetCgroupSpec)
    asked = _memory_qos(ctx, spec)
    if not spec.knobs and not spec.container_knobs:
        return asked
    provenance = ctx.node_provenance({"target": dict(spec.target)})
    paths: list[tuple[str, Workload | None]]
    if spec.path is not None:
        paths = [(spec.path, None)]
    elif spec.class_name is not None:
        paths = [(w.cgroup_path, w) for w in ctx.class_members(spec.class_name) if w.cgroup_path]
    else:
        ctx.skip("setCgroup on a pool needs the pool strategy, not in this version")
        return False
    wrote = False
    for path, workload in paths:
        per_file: dict[str, list[str]] = {}  # the containers' values, for {sum: containers}
        if workload is not None and spec.container_knobs:
            for ctr in workload.containers:
                if ctr.init or not ctr.cgroup_path:
                    continue
                values = _values(ctx, spec, "container", ctr.cgroup_path, workload, ctr)
                for file, value in values.items():
                    per_file.setdefault(file, []).append(value)
                wrote |= _emit(ctx, ctr.cgroup_path, values, workload, provenance)
        values = _values(ctx, spec, "pod", path, workload, None)
        for file in spec.sums:
            total = sum_texts(file, per_file.get(file, ()))
            if total is not None:
                values[file] = total
        wrote |= _emit(ctx, path, values, workload, provenance)
    return wrote or asked


def _values(
    ctx: ActionContext, spec: SetCgroupSpec, level: str, path: str, w: Workload | None, ctr: Container | None
) -> dict[str, str]:
    """file -> value of one cgroup (a pod's or path's, or a container's): each knob evaluated with
    the file's current value when it reads it, checked as the file takes it."""
    values: dict[str, str] = {}
    node = ctx.views.node
    for file, knob in spec.container_knobs if ctr is not None else spec.knobs:
        reads_current = f"{level}:{file}" in spec.reads_current
        current = ctx.tick.current(ctx.snap, path, file) if reads_current else None
        try:
            value = knob(w, node, ctr, current)
        except RenderError as exc:
            ctx.skip(f"{path}/{file}: {exc.message}")
            continue
        if value is None:
            continue
        bad = value_problem(file, value.strip(), ctx.snap.node)
        if bad:  # an expression's result; literal values were checked at validation
            ctx.skip(f"{path}/{file}: {bad}")
            continue
        if reads_current:
            ctx.tick.remember(path, file, value)
        values[file] = value
    return values


def _emit(
    ctx: ActionContext, path: str, values: dict[str, str], w: Workload | None, provenance: Provenance
) -> bool:
    bad = burst_problem({f: v.strip() for f, v in values.items()})
    if bad:  # an expression's quota beside a burst: only the tick knows both
        burst_file = "cpu.cfs_burst_us" if "cpu.cfs_burst_us" in values else "cpu.max.burst"
        ctx.skip(f"{path}/{burst_file}: {bad}")
        del values[burst_file]
    for file, value in values.items():
        ctx.tick.intents.append(CgroupIntent(path, file, value, w.key if w else None, provenance))
    return bool(values)


def _memory_qos(ctx: ActionContext, spec: SetCgroupSpec) -> bool:
    """Record this rule's memoryQos for its class's pods; whether the class has any this tick."""
    qos, class_name = spec.memory_qos, spec.class_name
    if qos is None or class_name is None:  # validation requires a class target with memoryQos
        return False
    if not ctx.class_members(class_name):
        return False
    provenance = ctx.node_provenance({"target": {"class": class_name}})
    ctx.tick.memory_qos.append(MemoryQosAsk(ctx.name, class_name, qos, provenance))
    return True
