"""setCgroup: desired cgroup values for a literal path, or for every pod of a class.

Share counts become cpu.weight by the policy's spec.cgroup.weightFormula. ``memoryQos`` is only
recorded here (``Tick.memory_qos``): the class-knob step computes it after the rules, with the
kube-QoS directory sums that need every pod's configuration (engine/features/class_knobs/step.py).
"""

from __future__ import annotations

from engine.cgroups.files import burst_problem, value_problem
from engine.config.render import RenderError
from engine.evaluate.context import ActionContext
from engine.features.class_knobs.spec import SetCgroupSpec
from engine.features.memory_qos.reconcile import MemoryQosAsk
from engine.model.facts import Workload
from engine.model.intents import CgroupIntent


def set_cgroup(ctx: ActionContext) -> bool:
    spec = ctx.spec_as(SetCgroupSpec)
    asked = _memory_qos(ctx, spec)
    if not spec.knobs:
        return asked
    provenance = ctx.first_provenance({"target": dict(spec.target)})
    paths: list[tuple[str, Workload | None]]
    if spec.path is not None:
        paths = [(spec.path, None)]
    elif spec.class_name is not None:
        paths = [(w.cgroup_path, w) for w in ctx.class_members(spec.class_name) if w.cgroup_path]
    else:
        ctx.skip("setCgroup on a pool needs the pool strategy, not in this version")
        return False
    wrote = False
    node = ctx.views.node
    declared = ctx.env.policy.cgroup_files
    formats = declared.formats
    for path, workload in paths:
        values: dict[str, str] = {}  # file -> the value as the knob gave it
        for file, knob in spec.knobs:
            try:
                value = knob(workload, node)
            except RenderError as exc:
                ctx.skip(f"{path}/{file}: {exc.message}")
                continue
            if value is None:
                continue
            bad = value_problem(file, value.strip(), ctx.snap.node, formats)
            if bad:  # an expression's result; literal values were checked at validation
                ctx.skip(f"{path}/{file}: {bad}")
                continue
            values[file] = value
        bad = burst_problem({f: v.strip() for f, v in values.items()})
        if bad:  # an expression's quota beside a burst: only the tick knows both
            burst_file = "cpu.cfs_burst_us" if "cpu.cfs_burst_us" in values else "cpu.max.burst"
            ctx.skip(f"{path}/{burst_file}: {bad}")
            del values[burst_file]
        for file, value in values.items():
            # a declared file under its name on this node's cgroup version (built-in names pass)
            host = declared.host(file, ctx.snap.cgroup_version)
            ctx.tick.intents.append(
                CgroupIntent(path, host, value, workload.key if workload else None, provenance)
            )
            wrote = True
    return wrote or asked


def _memory_qos(ctx: ActionContext, spec: SetCgroupSpec) -> bool:
    """Record this rule's memoryQos for its class's pods; whether the class has any this tick."""
    qos, class_name = spec.memory_qos, spec.class_name
    if qos is None or class_name is None:  # validation requires a class target with memoryQos
        return False
    if not ctx.class_members(class_name):
        return False
    provenance = ctx.first_provenance({"target": {"class": class_name}})
    ctx.tick.memory_qos.append(MemoryQosAsk(ctx.name, class_name, qos, provenance))
    return True
