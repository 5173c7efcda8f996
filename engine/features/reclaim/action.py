"""publish: reclaimable capacity of one resource under its extended-resource name.

The policy of ``spec.reclaim.<resource>`` picks the formula: Koordinator's batch resources
(usage / request / maxUsageRequest, from pod requests and usage) or Katalyst's headroom (from the
estimated needs of non-reclaimed containers). Both go through the same report smoothing and
floors, and the intent carries every term of the computation as provenance inputs.

With ``spec.reclaim.enabled: false`` the headroom policy publishes 0, as Katalyst's reporter does,
and Koordinator's policies withdraw the resource, as Koordinator resets batch resources when
colocation is disabled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from engine.config.policy import Policy
from engine.evaluate.context import ActionContext
from engine.evaluate.factview import ACTIVE_PHASES
from engine.features.eviction.tolerance import ReclaimPoolSupply, observed_supply
from engine.features.reclaim.free import FreePod, free_reclaimable
from engine.features.reclaim.headroom import DEDICATED_CORES, RECLAIMED_CORES, SHARED_CORES, SYSTEM_CORES
from engine.features.reclaim.report import ReportHistory, bound, report
from engine.features.reclaim.reservation import NO_RESERVATION, parse_reservation
from engine.features.reclaim.spec import PublishSpec, ReclaimResource, ReclaimZones
from engine.features.reclaim.strategy import (
    Demand,
    NodeTerms,
    PodUse,
    Reclaimable,
    headroom_reclaimable,
    reclaimable,
)
from engine.features.reclaim.zones import Zone, allocated_numa, zone_values
from engine.model.facts import EMPTY
from engine.model.intents import NodeIntent
from engine.model.units import num

USE_FACTS = {
    "cpu": ("cpu.usage_cores", "cpu.request_cores"),
    "memory": ("memory.usage_bytes", "memory.request_bytes"),
}

# A class's cpu policy says which Katalyst QoS level its containers are estimated as.
LEVELS = {
    "exclusive": DEDICATED_CORES,
    "shared": SHARED_CORES,
    "system": SYSTEM_CORES,
    "reclaimed": RECLAIMED_CORES,
}


def pod_uses(ctx: ActionContext, resource: str, spec: ReclaimResource) -> list[PodUse]:
    """Each active pod's request and usage and whether it is high priority (the generation's
    decision: spec.reclaim.priorityOverrides, else not in a reclaimed class), then the pod metrics
    that belong to no active pod (Koordinator's dangling pods: judged as their pod when it is
    known, else by what the metric says of it, HP by default)."""
    usage_key, request_key = USE_FACTS[resource]
    high_priority = ctx.env.high_priority
    zones = ctx.env.policy.reclaim.zones
    numa_annotation = zones.pod_numa_annotation if zones is not None else None
    out = []
    listed: set[str] = set()
    for w in ctx.snap.workloads:
        if w.phase not in ACTIVE_PHASES:
            continue
        listed.add(w.uid)
        facts = ctx.views.pod(w)
        usage = facts.get(usage_key)
        allocation = w.annotations.get(numa_annotation) if numa_annotation else None
        out.append(
            PodUse(
                float(facts.get(request_key, 0.0)),
                None if usage is None else float(usage),
                high_priority(w),
                facts.get("class") in spec.request_as_usage,
                numa=allocated_numa(allocation) if allocation else frozenset(),
            )
        )
    known = ctx.snap.by_uid
    for uid, measured in ctx.snap.metrics.pods.items():
        usage = measured.get(usage_key)
        if uid in listed or usage is None:
            continue
        owner = known.get(uid)
        high = high_priority(owner) if owner is not None else high_priority.unlisted(uid, measured)
        out.append(PodUse(0.0, float(usage), high, listed=False))
    return out



def class_levels(policy: Policy) -> dict[str, str]:
    return {c.name: LEVELS.get(c.cpu_policy or "", SHARED_CORES) for c in policy.classes}


def _demand(level: str, resource: str, request: float, facts: Mapping[str, Any]) -> Demand:
    if resource == "cpu":
        usage = facts.get("cpu.usage_cores")
        return Demand(level, request, usage=None if usage is None else float(usage))
    rss, cache, shmem = (facts.get(f"memory.{k}_bytes") for k in ("rss", "cache", "shmem"))
    if rss is None and cache is None and shmem is None:
        # A collector that reports only usage: it stands in for rss + cache + shmem.
        rss = facts.get("memory.usage_bytes")
    return Demand(level, request, rss=rss, cache=cache, shmem=shmem)


def demands(ctx: ActionContext, resource: str) -> tuple[list[Demand], float]:
    """The non-reclaimed containers of active pods as the headroom estimate sees them, and the
    CPU cores reclaimed pods use. Containers are estimated one by one (Katalyst's fallbacks are per
    container) unless the collector reports the pod only as a whole."""
    levels = class_levels(ctx.env.policy)
    name = "cpu" if resource == "cpu" else "memory"
    out: list[Demand] = []
    reclaimed_usage = 0.0
    metrics = ctx.snap.metrics
    for w in ctx.snap.workloads:
        if w.phase not in ACTIVE_PHASES:
            continue
        pod = ctx.views.pod(w)
        cls = pod.get("class")
        level = levels.get(cls, SHARED_CORES) if cls is not None else SHARED_CORES
        if level == RECLAIMED_CORES:
            reclaimed_usage += float(pod.get("cpu.usage_cores", 0.0))
            continue
        containers = [c for c in w.containers if not c.init]
        measured = [metrics.containers.get(f"{w.uid}/{c.name}") for c in containers]
        if not any(measured) and metrics.pods.get(w.uid):
            out.append(_demand(level, resource, w.request(name), pod))
        elif containers:
            out.extend(
                _demand(level, resource, c.requests.get(name, 0.0), m or EMPTY)
                for c, m in zip(containers, measured, strict=True)
            )
        else:
            out.append(_demand(level, resource, 0.0, EMPTY))
    return out, reclaimed_usage


def reserve_cpus(ctx: ActionContext) -> int | None:
    """CPUs of this tick's reserve pools (Katalyst's reserve pool is not available to any pod), or
    None when the policy has no reserve pool."""
    plan = ctx.tick.pool_plan
    if plan is None:
        return None
    kinds = ctx.env.policy.pool_index
    pools = [cpus for name, cpus in plan.pools.items() if name in kinds and kinds[name].kind == "reserve"]
    return len(frozenset().union(*pools)) if pools else None


def free_pods(ctx: ActionContext, resource: str, spec: ReclaimResource) -> list[FreePod]:
    """Each active pod's request and usage, whether it is reclaimed and whether its requests are
    held whole (spec.free.heldRequests' kube QoS)."""
    usage_key, request_key = USE_FACTS[resource]
    reclaimed = ctx.env.reclaimed_classes
    held = spec.free.held if spec.free is not None else None
    out = []
    for w in ctx.snap.workloads:
        if w.phase not in ACTIVE_PHASES:
            continue
        facts = ctx.views.pod(w)
        usage = facts.get(usage_key)
        out.append(
            FreePod(
                float(facts.get(request_key, 0.0)),
                None if usage is None else float(usage),
                facts.get("class") in reclaimed,
                held is not None and w.kube_qos in held.kube_qos,
            )
        )
    return out


def reclaim_pool(ctx: ActionContext) -> ReclaimPoolSupply | None:
    """The reclaim pool as Katalyst's GetReclaimMetrics reads it (``observed_supply``): when the
    collector does not give them, its CPUs are this tick's reclaim pools and the cgroup's usage is
    the reclaimed pods' usage."""

    def pool_cpus() -> int | None:
        plan = ctx.tick.pool_plan
        if plan is None:
            return None
        kinds = ctx.env.policy.pool_index
        pools = [c for name, c in plan.pools.items() if name in kinds and kinds[name].kind == "reclaim"]
        return len(frozenset().union(*pools)) if pools else None

    def cgroup_usage() -> float:
        reclaimed = ctx.env.reclaimed_classes
        return sum(
            float(ctx.views.pod(w).get("cpu.usage_cores", 0.0))
            for w in ctx.snap.workloads
            if w.phase in ACTIVE_PHASES and ctx.views.pod(w).get("class") in reclaimed
        )

    return observed_supply(ctx.views.node, pool_cpus, cgroup_usage)


def node_terms(ctx: ActionContext, resource: str) -> NodeTerms:
    """The reservation annotation and host applications as the policy asks the Koordinator
    formulas to count them (spec.reclaim.reservationAnnotation, systemUsedHostAppPriorities)."""
    reclaim = ctx.env.policy.reclaim
    reservation = NO_RESERVATION
    if reclaim.reservation_annotation:
        reservation = parse_reservation(ctx.snap.node_annotations.get(reclaim.reservation_annotation, ""))
    priorities = reclaim.system_used_host_app_priorities
    used: float | None = None
    used_hp = 0.0
    if priorities is not None:
        used = 0.0
        for app in ctx.snap.host_apps:
            amount = app.cpu_usage_cores if resource == "cpu" else app.memory_usage_bytes
            if amount is None:  # no metric: left out of the sums, as in Koordinator
                continue
            used += amount
            if app.priority in priorities:
                used_hp += amount
    problem = None
    if reservation.problem:
        problem = f"{reclaim.reservation_annotation}: {reservation.problem}"
    return NodeTerms(reservation.amount(resource), problem, used, used_hp)


def numa_zones(ctx: ActionContext, resource: str, zones: ReclaimZones) -> list[Zone]:
    """One zone per NUMA node, with its CPUs or memory as capacity (what Koordinator's
    NodeResourceTopology zones hold). Empty when a NUMA node's memory is unknown."""
    out = []
    for nid, facts in sorted(ctx.views.numa.items()):
        capacity = facts.get("cpus") if resource == "cpu" else facts.get("memory.total_bytes")
        if not capacity:
            return []
        out.append(Zone(f"{zones.name_prefix}{nid}", nid, float(capacity)))
    return out


def publish(ctx: ActionContext) -> bool:
    resource = ctx.spec_as(PublishSpec).resource
    reclaim = ctx.env.policy.reclaim
    spec = reclaim.cpu if resource == "cpu" else reclaim.memory
    if spec is None or not spec.publish_as:
        return False
    t = ctx.tick
    history = t.reports.get(spec.publish_as, ReportHistory())
    node = ctx.views.node
    age = node.get("reclaim.metrics_age_seconds")
    zone_params: dict[str, float] | None = None
    if not reclaim.enabled:
        value = 0.0 if spec.policy == "headroom" else None
        result = Reclaimable(resource, value, "reclaim is disabled (spec.reclaim.enabled: false)", {})
    elif spec.policy == "headroom":
        found, reclaimed_usage = demands(ctx, resource)
        scale = float(
            node.get("memory.watermark_scale_factor", ctx.env.policy.pressure.watermark_scale_factor)
        )
        result = headroom_reclaimable(
            resource,
            spec,
            node,
            found,
            age,
            reclaim.degrade_after,
            reclaimed_usage,
            history.reported,
            scale,
            reserve_cpus(ctx),
        )
    elif spec.policy == "free":
        manager = node.get("kubelet.cpu_manager_policy")
        result = free_reclaimable(
            resource,
            spec,
            node,
            free_pods(ctx, resource, spec),
            manager_policy=None if manager is None else str(manager),
            pool=reclaim_pool(ctx) if spec.free is not None and spec.free.of == "reclaimPool" else None,
            metrics_age=age,
            degrade_after=reclaim.degrade_after,
            last_report=history.reported,
        )
    else:
        uses = pod_uses(ctx, resource, spec)
        terms = node_terms(ctx, resource)
        result = reclaimable(resource, spec, node, uses, age, reclaim.degrade_after, terms)
        if reclaim.zones is not None and result.value is not None:
            zones = numa_zones(ctx, resource, reclaim.zones)
            system_used, reserved = result.inputs["systemUsed"], result.inputs["nodeReserved"]
            zone_params = zone_values(resource, spec, zones, uses, system_used, reserved) if zones else None
    value = result.value
    formula = result.formula
    inputs = result.inputs
    if value is None or not reclaim.enabled:
        t.reports.pop(spec.publish_as, None)  # withdrawn or disabled: smoothing starts afresh
    else:
        value, reported, steps = report(value, spec, history, t.now)
        value, bounded, caps = bound(resource, value, spec, node)
        # What the Node is told is what util-based headroom builds on next time.
        t.reports[spec.publish_as] = replace(reported, reported=value)
        formula = "; ".join([formula, *steps, *bounded])
        inputs = {**inputs, **caps}
    params_out: dict[str, Any] = {
        "resource": spec.publish_as,
        "reclaims": resource,
        "value": value,
        "unit": "cores" if resource == "cpu" else "bytes",
        "formula": formula,
    }
    if zone_params is not None and value is not None:
        params_out["zones"] = zone_params  # zone name -> value, in the unit above
        shown = ", ".join(f"{z} {num(v)}" for z, v in zone_params.items())
        params_out["formula"] = f"{formula}; per NUMA zone ({spec.policy}): {shown}"
    t.intents.append(NodeIntent("publish", MappingProxyType(params_out), ctx.node_provenance(inputs)))
    return True
