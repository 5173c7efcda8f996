"""suppress: keep a best-effort class within what latency-sensitive work leaves (Koordinator CPUSuppress).

The amount is computed every tick from node and pod usage; the ``cpuset`` policy narrows the class's
cgroup cpuset (HT pairs first, spread over NUMA buckets, growing one step per round) and lifts its
CFS quota (-1), the ``cfsQuota`` policy sets its CFS quota and gives it the whole share pool as its
cpuset, so switching policies leaves no limit of the other one behind (Koordinator's
recoverCPUSetIfNeed / recoverCFSQuotaIfNeed). Both write to the class's parent cgroup (``cgroup``, by
default the kubelet's BestEffort directory, which is where both anchors keep BE/reclaimed pods).
The intents carry every term of the arithmetic, so ``qosd explain`` can show why 6 CPUs and not 7.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.evaluate.context import ActionContext
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
from engine.model.facts import HostApp
from engine.model.intents import CgroupIntent
from engine.model.units import format_cpuset, parse_cpuset


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
    capacity_milli = round(float(capacity) * 1000)
    allocatable = node.get("cpu.allocatable_cores")
    usage = SuppressUsage(
        capacity_milli=capacity_milli,
        allocatable_milli=round(float(allocatable) * 1000) if allocatable is not None else capacity_milli,
        node_used_cores=float(used),
        pods=pod_samples(ctx, target),
        host_apps=host_app_samples(ctx.snap.host_apps, target),
    )
    amount = be_suppress_amount(usage, p.threshold_percent, p.min_percent)
    observed = ctx.snap.cgroups.get(cgroup, {})
    everything = frozenset(c.id for c in ctx.snap.topology.cpus)
    held = _owned_cpus(ctx, p.exclude_classes)
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
        inputs = {**amount.inputs(), **result.inputs(), "policy": "cfsQuota", "class": target}
        provenance = ctx.node_provenance(inputs)
        if result.quota is None:
            ctx.skip(f"suppress {target}: quota unchanged ({result.reason})")
        else:
            quota = str(result.quota)
            ctx.tick.intents.append(CgroupIntent(cgroup, "cpu.cfs_quota_us", quota, None, provenance))
        # The other policy's limit goes: the class's directory gets the whole share pool back
        # (Koordinator's recoverCPUSetIfNeed; its pods' cpusets are the pool step's).
        pool = format_cpuset(everything - held)
        ctx.tick.intents.append(CgroupIntent(cgroup, "cpuset.cpus", pool, None, provenance))
        return True
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
    # The other policy's limit goes: no CFS quota on the class's directory (Koordinator's
    # recoverCFSQuotaIfNeed), so the cpuset alone bounds it.
    ctx.tick.intents.append(CgroupIntent(cgroup, "cpu.cfs_quota_us", str(UNSET_QUOTA), None, provenance))
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


def pod_samples(ctx: ActionContext, target: str) -> tuple[UsageSample, ...]:
    """Every pod CPU metric, as Koordinator's CalculateFilterPodsUsed reads them: each one counts
    toward all pods' usage, and toward the usage ``target`` must leave room for unless its pod is of
    ``target``. A metric whose pod is not (or no longer) among the workloads counts as non-BE, not as
    system usage; a pod no class matched uses CPU that is not ``target``'s either."""
    by_uid = ctx.snap.by_uid
    classify = ctx.env.classifier.classify
    out = []
    for uid, facts in ctx.snap.metrics.pods.items():
        cores = facts.get("cpu.usage_cores")
        if cores is None:
            continue
        w = by_uid.get(uid)
        others = w is None or classify(w).class_name != target
        out.append(UsageSample(w.key if w is not None else uid, float(cores), others))
    return tuple(out)


# Koordinator's CgroupBaseType of the kubelet's BestEffort directory: a host application of the
# suppressed class counts as its own usage only when it runs there (NonBEHostAppFilter).
BESTEFFORT_BASE = "KubepodsBesteffort"


def host_app_samples(apps: Sequence[HostApp], target: str) -> tuple[UsageSample, ...]:
    """Host applications with a CPU metric; one of ``target`` under the BestEffort directory is
    ``target``'s own usage, any other is usage ``target`` must leave room for."""
    return tuple(
        UsageSample(a.name, a.cpu_usage_cores, not (a.qos == target and a.cgroup_base == BESTEFFORT_BASE))
        for a in apps
        if a.cpu_usage_cores is not None
    )


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
