"""suppress: keep a best-effort class within what latency-sensitive work leaves (Koordinator CPUSuppress).

The amount is computed every tick from node and pod usage; the ``cpuset`` policy narrows the class's
cgroup cpuset (HT pairs first, spread over NUMA buckets, growing one step per round), the
``cfsQuota`` policy sets its CFS quota. Both write to the class's parent cgroup (``cgroup``, by
default the kubelet's BestEffort directory, which is where both anchors keep BE/reclaimed pods).
The intents carry every term of the arithmetic, so ``qosd explain`` can show why 6 CPUs and not 7.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from engine.evaluate.context import ActionContext
from engine.evaluate.factview import ACTIVE_PHASES
from engine.features.pools.step import pool_cpus
from engine.features.suppress.spec import SuppressSpec
from engine.features.suppress.strategy import (
    UNSET_QUOTA,
    SuppressUsage,
    UsageSample,
    be_suppress_amount,
    suppress_cfs_quota,
    suppress_cpuset,
)
from engine.model.intents import CgroupIntent
from engine.model.units import format_cpuset, parse_cpuset

EMPTY: Mapping[str, float] = MappingProxyType({})


def suppress(ctx: ActionContext) -> bool:
    p = ctx.spec_as(SuppressSpec)
    target = p.target
    cgroup = p.cgroup
    node = ctx.views.node
    capacity = node.get("cpu.capacity_cores")
    used = node.get("cpu.usage_cores")
    if not capacity or used is None:
        ctx.skip("suppress needs the node's CPU usage (node.cpu.usage_cores); this snapshot has none")
        return False
    pods = []
    measured = ctx.snap.metrics.pods
    for class_name, members in ctx.env.members(ctx.snap.workloads).items():
        others = class_name != target
        for w in members:
            cores = measured.get(w.uid, EMPTY).get("cpu.usage_cores")
            if cores is not None:
                pods.append(UsageSample(w.key, float(cores), others))
    for w in ctx.snap.workloads:  # pods no class matched still use CPU
        if w.phase in ACTIVE_PHASES and ctx.env.classifier.classify(w).class_name is None:
            cores = measured.get(w.uid, EMPTY).get("cpu.usage_cores")
            if cores is not None:
                pods.append(UsageSample(w.key, float(cores), True))
    capacity_milli = round(float(capacity) * 1000)
    allocatable = node.get("cpu.allocatable_cores")
    usage = SuppressUsage(
        capacity_milli=capacity_milli,
        allocatable_milli=round(float(allocatable) * 1000) if allocatable is not None else capacity_milli,
        node_used_cores=float(used),
        pods=tuple(pods),
    )
    amount = be_suppress_amount(usage, p.threshold_percent, p.min_percent)
    observed = ctx.snap.cgroups.get(cgroup, {})
    if p.policy == "cfsQuota":
        current = observed.get("cpu.cfs_quota_us")
        result = suppress_cfs_quota(
            amount.milli,
            int(current) if current is not None and current.lstrip("-").isdigit() else UNSET_QUOTA,
            capacity_milli,
            min_quota=p.min_quota,
            dead_band_percent=p.dead_band_percent,
            step_percent=p.step_percent,
        )
        if result.quota is None:
            ctx.skip(f"suppress {target}: quota unchanged ({result.reason})")
            return False
        inputs = {**amount.inputs(), **result.inputs(), "policy": "cfsQuota", "class": target}
        ctx.tick.intents.append(
            CgroupIntent(cgroup, "cpu.cfs_quota_us", str(result.quota), None, ctx.node_provenance(inputs))
        )
        return True
    everything = frozenset(c.id for c in ctx.snap.topology.cpus)
    held = _owned_cpus(ctx, p.exclude_classes)
    lendable = _owned_cpus(ctx, p.borrow_from) - held
    old_text = observed.get("cpuset.cpus")
    old = parse_cpuset(old_text) if old_text else everything - held
    result_set = suppress_cpuset(
        amount.milli,
        ctx.snap.topology,
        old,
        lendable,
        everything - held - lendable,
        min_cpus=p.min_cpus,
        step_percent=p.step_percent,
    )
    if not result_set.apply:
        ctx.skip(f"suppress {target}: no CPUs could be picked; the cpuset stays {format_cpuset(old)}")
        return False
    inputs = {**amount.inputs(), **result_set.inputs(), "policy": "cpuset", "class": target}
    provenance = ctx.node_provenance(inputs)
    value = format_cpuset(result_set.cpus)
    ctx.tick.intents.append(CgroupIntent(cgroup, "cpuset.cpus", value, None, provenance))
    # The class's pods and containers inherit nothing in cgroup v1: each level is written, parents
    # first when growing and children first when shrinking (the planner orders the writes).
    for w in ctx.class_members(target):
        if w.cgroup_path:
            ctx.tick.intents.append(CgroupIntent(w.cgroup_path, "cpuset.cpus", value, w.key, provenance))
            for c in w.containers:
                if c.cgroup_path and not c.init:
                    ctx.tick.intents.append(
                        CgroupIntent(c.cgroup_path, "cpuset.cpus", value, w.key, provenance)
                    )
    return True


def _owned_cpus(ctx: ActionContext, classes: Sequence[str]) -> frozenset[int]:
    """CPUs held by the pods of these classes: the pool plan's cpusets where qosd assigns them,
    otherwise what their cgroups hold now (Koordinator reads the scheduler's assignment instead)."""
    out: set[int] = set()
    for name in classes:
        for w in ctx.class_members(name):
            assigned = pool_cpus(ctx.tick.pool_plan, w)
            if assigned is not None:
                out |= assigned
                continue
            text = ctx.snap.cgroups.get(w.cgroup_path, {}).get("cpuset.cpus") if w.cgroup_path else None
            if text:
                out |= parse_cpuset(text)
    return frozenset(out)
