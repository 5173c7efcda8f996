"""Reclaimed (batch) resources: what the node can lend to reclaimed workloads, per resource.

Two families of policies, one per anchor.

Koordinator (slo-controller noderesource, batchresource plugin; koordinator.md section 4.1), per
resource, computed in integer milli-cores and bytes as the anchor's Quantities are:

    safetyMargin = trunc(capacity x (100 - reclaimThresholdPercent) / 100)
    system       = max(systemUsed, nodeReserved)
    nodeReserved = max(capacity - allocatable, the node's reservation annotation)
    usage           = max(capacity - safetyMargin - system       - HPUsed,       0)
    request         = max(capacity - safetyMargin - nodeReserved - HPRequest,    0)
    maxUsageRequest = max(capacity - safetyMargin - system       - HPMaxUsedReq, 0)

HP pods are the pods whose class does not run on reclaimed resources. HPUsed counts a pod's usage
(its request when it has no metric; its request for classes in requestAsUsage, as Koordinator does
for LSE CPU), HPMaxUsedReq counts max(request, usage) of pods with a metric. Pod metrics with no
running or pending pod ("dangling") count as HP usage unless the pod is known to be reclaimed.
systemUsed is the node's measured usage outside pods when the collector sends it, else node usage
minus every pod's usage; with host applications split out (spec.reclaim.systemUsedHostAppPriorities)
their usage leaves it and that of the listed priorities comes back. maxPercent then caps the
result at a percent of capacity (batchXThresholdPercent); min/max are qosd's absolute clamps.

Katalyst (sysadvisor canonical headroom; katalyst.md sections 2.4, 4.1, 4.2), the `headroom` policy:

    cpu    = max(available - reservedForAllocate - sum of estimates, 0)
             available = capacity - reserve pool CPUs (kubelet allocatable without a reserve pool)
             estimate = max(usage x 1.25, request when no metric, 4 cores when neither)
    memory = min(max(capacity - reservedForAllocate - sum of estimates, 0) + utilBuffer,
                 capacity - reservedForAllocate)
             estimate = (rss + cache + shmem) x 1.1 (system containers: rss), 8 GiB when none

with Katalyst's util-based variants when enabled (``engine.features.reclaim.headroom``).

Either result then goes through ``engine.features.reclaim.report``: Katalyst's reporter smoothing
and floors, then the bounds. Stale metrics (older than degradeAfter) withdraw the resource, as
Koordinator's degradation does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.features.reclaim.headroom import (
    DEDICATED_CORES,
    SHARED_CORES,
    SYSTEM_CORES,
    Estimate,
    GiB,
    MemoryContainer,
    MemoryUtilBuffer,
    SystemMemory,
    UtilBufferOptions,
    UtilOptions,
    estimate_container_cpu,
    estimate_container_memory,
    memory_headroom,
    memory_util_buffer,
    util_based_cpu_headroom,
)
from engine.features.reclaim.spec import ReclaimHeadroom, ReclaimResource


@dataclass(frozen=True)
class ResourceFacts:
    """Where one resource's node figures are read, and the integer unit the anchors count it in."""

    usage: str
    capacity: str
    allocatable: str
    system_usage: str | None  # measured usage outside pods, when collectors send it
    scale: int  # units per natural unit: 1000 milli-cores per core, 1 byte per byte


FACTS = {
    "cpu": ResourceFacts(
        "cpu.usage_cores", "cpu.capacity_cores", "cpu.allocatable_cores", "cpu.system_usage_cores", 1000
    ),
    "memory": ResourceFacts(
        "memory.usage_bytes", "memory.capacity_bytes", "memory.allocatable_bytes", None, 1
    ),
}


KOORDINATOR_POLICIES = ("usage", "request", "maxUsageRequest")


@dataclass(frozen=True)
class PodUse:
    """One pod as Koordinator's batch formulas see it, in cores or bytes."""

    request: float
    usage: float | None
    high_priority: bool
    request_as_usage: bool = False  # Koordinator LSE: its CPU request counts as used
    listed: bool = True  # False: a pod metric with no running or pending pod (Koordinator "dangling")
    numa: frozenset[int] = frozenset()  # NUMA nodes its scheduler allocated (zones); empty: all


@dataclass(frozen=True)
class NodeTerms:
    """What Koordinator adds to the node's own figures, in cores or bytes.

    ``reserved``: the node's reservation annotation (nodeReserved is the larger of it and kubelet's
    capacity - allocatable); ``reservation_problem``: why an annotation reserves nothing.
    ``host_apps_used``: every host application's usage, None when the policy does not split host
    applications out of systemUsed (they stay in it as measured); ``host_apps_hp_used``: the usage
    of those whose priority counts as system usage (Koordinator: above koord-batch)."""

    reserved: float | None = None
    reservation_problem: str | None = None
    host_apps_used: float | None = None
    host_apps_hp_used: float = 0.0


NO_TERMS = NodeTerms()


@dataclass(frozen=True)
class Reclaimable:
    resource: str
    value: float | None  # None: withdraw the published resource
    formula: str
    inputs: Mapping[str, Any]


def _num(x: float) -> str:
    """A figure for formulas: bytes as whole numbers, cores with their decimals."""
    if not math.isfinite(x):  # shown as is: round() of infinity raises
        return str(x)
    return str(round(x)) if abs(x) >= 1e6 or float(x).is_integer() else f"{x:.6g}"


def _fmt(units: int, scale: int) -> str:
    return _num(units / scale)


def degraded(metrics_age: float | None, degrade_after: float | None) -> bool:
    """Koordinator isDegradeNeeded: metrics older than degradeTimeMinutes withdraw the resource (also
    the daemon's ``qosd_reclaim_degraded`` gauge, so the alert and the withdrawal agree)."""
    return degrade_after is not None and metrics_age is not None and metrics_age > degrade_after


def _stale(resource: str, metrics_age: float | None, degrade_after: float | None) -> Reclaimable | None:
    if degraded(metrics_age, degrade_after):
        return Reclaimable(
            resource, None, f"metrics are {metrics_age:g}s old (> degradeAfter {degrade_after:g}s)", {}
        )
    return None


def reclaimable(
    resource: str,
    spec: ReclaimResource,
    node: Mapping[str, Any],
    pods: Sequence[PodUse],
    metrics_age: float | None,
    degrade_after: float | None,
    node_terms: NodeTerms = NO_TERMS,
) -> Reclaimable:
    """Koordinator's usage / request / maxUsageRequest batch resource. The bounds (maxPercent, max,
    min) are :func:`bound`'s, applied to whatever a policy reports.

    systemUsed is Koordinator's: the node's usage outside pods less every host application's usage
    (koordlet's system usage), plus the usage of the host applications that count as system usage
    (``node_terms``); nodeReserved is max(capacity - allocatable, the reservation annotation)."""
    if spec.policy not in KOORDINATOR_POLICIES:
        raise ValueError(f"reclaim {resource} policy {spec.policy!r} is not one of Koordinator's formulas")
    stale = _stale(resource, metrics_age, degrade_after)
    if stale is not None:
        return stale
    f = FACTS[resource]
    capacity = float(node.get(f.capacity) or 0.0)
    allocatable = float(node.get(f.allocatable) or capacity)
    node_used = node.get(f.usage)
    if not capacity or node_used is None:
        return Reclaimable(resource, None, f"node {resource} capacity or usage unknown", {})
    s = f.scale

    def units(value: float) -> int:
        return round(value * s)

    cap = units(capacity)
    kubelet_reserved = max(cap - units(allocatable), 0)
    annotated = units(node_terms.reserved) if node_terms.reserved is not None else None
    reserved = max(kubelet_reserved, annotated or 0)
    threshold = spec.threshold_percent if spec.threshold_percent is not None else 100.0
    # MultiplyMilliQuant / MultiplyQuant: int64(float64(capacity) x ratio), truncated toward zero.
    margin = math.trunc(cap * ((100.0 - threshold) / 100.0))
    pods_used = sum(units(p.usage) for p in pods if p.usage is not None)
    measured_system = node.get(f.system_usage) if f.system_usage else None
    if measured_system is not None:
        system_used = units(float(measured_system))
    else:
        system_used = max(units(float(node_used)) - pods_used, 0)
    apps = apps_hp = 0
    if node_terms.host_apps_used is not None:
        apps, apps_hp = units(node_terms.host_apps_used), units(node_terms.host_apps_hp_used)
        system_used = max(system_used - apps, 0) + apps_hp
    system = max(system_used, reserved)
    hp_used = hp_request = hp_max = dangling = 0
    for p in pods:
        if not p.high_priority:
            continue
        if not p.listed:
            used = units(p.usage) if p.usage is not None else 0
            dangling += used
            continue
        request = units(p.request)
        hp_request += request
        if p.usage is None:
            hp_used += request  # no metric yet: its request stands in (and maxUsageRequest skips it)
            continue
        used = units(p.usage)
        hp_used += request if p.request_as_usage else used
        hp_max += max(request, used)
    hp_used += dangling
    hp_max += dangling
    base = cap - margin
    by = {
        "usage": max(base - system - hp_used, 0),
        "request": max(base - reserved - hp_request, 0),
        "maxUsageRequest": max(base - system - hp_max, 0),
    }
    terms = {
        "usage": f"max(systemUsed {_fmt(system_used, s)}, nodeReserved {_fmt(reserved, s)}) - "
        f"hpUsed {_fmt(hp_used, s)}",
        "request": f"nodeReserved {_fmt(reserved, s)} - hpRequest {_fmt(hp_request, s)}",
        "maxUsageRequest": f"max(systemUsed {_fmt(system_used, s)}, nodeReserved {_fmt(reserved, s)}) - "
        f"hpMaxUsedRequest {_fmt(hp_max, s)}",
    }
    amount = by[spec.policy]
    steps = [
        f"{spec.policy}: capacity {_fmt(cap, s)} - safetyMargin {_fmt(margin, s)} - "
        f"{terms[spec.policy]} = {_fmt(amount, s)}"
    ]
    inputs: dict[str, Any] = {
        "policy": spec.policy,
        "capacity": cap / s,
        "reclaimThresholdPercent": threshold,
        "safetyMargin": margin / s,
        "nodeReserved": reserved / s,
        "systemUsed": system_used / s,
        "hpUsed": hp_used / s,
        "hpRequest": hp_request / s,
        "hpMaxUsedRequest": hp_max / s,
        "danglingUsed": dangling / s,
        "byUsage": by["usage"] / s,
        "byRequest": by["request"] / s,
        "byMaxUsageRequest": by["maxUsageRequest"] / s,
    }
    if annotated is not None or node_terms.reservation_problem:
        inputs.update(kubeletReserved=kubelet_reserved / s, annotationReserved=(annotated or 0) / s)
    if node_terms.reservation_problem:
        steps.append(f"reservation annotation ignored: {node_terms.reservation_problem}")
    if node_terms.host_apps_used is not None:
        inputs.update(hostAppsUsed=apps / s, hostAppsSystemUsed=apps_hp / s)
    value = amount / s
    return Reclaimable(resource, value, "; ".join(steps), inputs)


# ------------------------------------------------------------------ Katalyst headroom


@dataclass(frozen=True)
class Demand:
    """One non-reclaimed container as the headroom estimate sees it (a pod whose collector reports
    only pod totals counts as one). ``request`` is in the resource's unit (cores or bytes)."""

    level: str  # Katalyst QoS level: shared_cores | dedicated_cores | system_cores
    request: float
    usage: float | None = None  # cpu cores
    rss: float | None = None
    cache: float | None = None
    shmem: float | None = None


def _references(estimates: Sequence[Estimate]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for e in estimates:
        counts[e.reference] = counts.get(e.reference, 0) + 1
    return counts


def headroom_reclaimable(
    resource: str,
    spec: ReclaimResource,
    node: Mapping[str, Any],
    demands: Sequence[Demand],
    metrics_age: float | None,
    degrade_after: float | None,
    reclaimed_usage: float = 0.0,
    last_report: float | None = None,
    scale_factor: float = 10.0,
    reserved_cpus: int | None = None,
    machine_memory: float | None = None,
) -> Reclaimable:
    """Katalyst's canonical headroom for ``resource`` from the non-reclaimed containers' estimates.

    ``reserved_cpus`` is the size of the reserve pool (None: the policy has none, and kubelet's
    allocatable stands for what is available). ``reclaimed_usage`` (cores used by reclaimed pods)
    and ``last_report`` feed the CPU util-based variant; ``scale_factor`` (vm.watermark_scale_factor)
    and ``machine_memory`` (the machine's memory: its NUMA nodes' sum; None: the node's capacity)
    feed the memory util buffer."""
    stale = _stale(resource, metrics_age, degrade_after)
    if stale is not None:
        return stale
    h = spec.headroom
    if h is None:  # compile always sets it for policy headroom
        raise ValueError(f"reclaim {resource} policy {spec.policy!r} has no headroom parameters")
    f = FACTS[resource]
    capacity = float(node.get(f.capacity) or 0.0)
    if not capacity:
        return Reclaimable(resource, None, f"node {resource} capacity unknown", {})
    if resource == "cpu":
        return _cpu_headroom(h, node, capacity, demands, reclaimed_usage, last_report, reserved_cpus)
    return _memory_headroom(h, node, capacity, demands, scale_factor, machine_memory)


def _cpu_headroom(
    h: ReclaimHeadroom,
    node: Mapping[str, Any],
    capacity: float,
    demands: Sequence[Demand],
    reclaimed_usage: float,
    last_report: float | None,
    reserved_cpus: int | None,
) -> Reclaimable:
    """Region canonical policy summed over the node: max(UpperBound - (sum est + reservedForAllocate)
    + reservedForReclaim, 0), where UpperBound = available - reservedForReclaim, so the reserved-for-
    reclaim terms cancel. available = CPUs - reserve pool (numaAvailable summed over NUMA nodes)."""
    if reserved_cpus is not None:
        available, basis = capacity - reserved_cpus, f"capacity {_num(capacity)} - reserve {reserved_cpus}"
    else:
        available = float(node.get(FACTS["cpu"].allocatable) or capacity)
        basis = f"allocatable {_num(available)}"
    estimates = [
        estimate_container_cpu(d.level, d.request, d.usage, None, None, True, h.usage_factor, h.fallback)
        for d in demands
    ]
    estimate = sum(e.value for e in estimates)
    value = max(available - h.reserved_for_allocate - estimate, 0.0)
    steps = [
        f"headroom: {basis} - reservedForAllocate {_num(h.reserved_for_allocate)} - "
        f"estimates {_num(estimate)} = {_num(value)}"
    ]
    inputs: dict[str, Any] = {
        "policy": "headroom",
        "capacity": capacity,
        "reserveCpus": reserved_cpus,
        "available": available,
        "reservedForAllocate": h.reserved_for_allocate,
        "estimate": estimate,
        "containers": len(estimates),
        "estimatedBy": _references(estimates),
        "canonical": value,
    }
    if h.util_based:
        util = util_based_cpu_headroom(
            value,
            reclaimed_usage,
            last_report or 0.0,
            capacity,
            UtilOptions(
                h.target_utilization, h.max_utilization, h.max_oversold_rate, h.max_headroom_capacity_rate
            ),
        )
        value = util.value
        inputs.update(
            reclaimedUsage=reclaimed_usage,
            utilization=util.utilization,
            oversold=util.oversold,
            lastReport=util.last,
        )
        steps.append(
            f"util-based: max(last {_num(util.last)} + oversold {_num(util.oversold)}, supply "
            f"{_num(util.supply)}) within x{h.max_oversold_rate:g} and x{h.max_headroom_capacity_rate:g} "
            f"capacity = {_num(value)}"
        )
    return Reclaimable("cpu", value, "; ".join(steps), inputs)


def _memory_headroom(
    h: ReclaimHeadroom,
    node: Mapping[str, Any],
    capacity: float,
    demands: Sequence[Demand],
    scale_factor: float,
    machine_memory: float | None,
) -> Reclaimable:
    """Canonical memory headroom plus the util-based buffer. The cache-based term is admitted by the
    machine's CPUs per GiB of its memory (Katalyst's MachineInfo: cores over MemoryCapacity), which
    can differ from ``capacity``, the headroom's upper bound and the system total."""
    containers = [MemoryContainer(d.level, d.request, d.rss, d.cache, d.shmem) for d in demands]
    estimates = [
        estimate_container_memory(c, h.usage_factor, h.system_factor, h.fallback) for c in containers
    ]
    requirement = sum(e.value for e in estimates)
    inputs: dict[str, Any] = {
        "policy": "headroom",
        "capacity": capacity,
        "reservedForAllocate": h.reserved_for_allocate,
        "requirement": requirement,
        "containers": len(estimates),
        "estimatedBy": _references(estimates),
    }
    steps: list[str] = []
    buffer: MemoryUtilBuffer | None = None
    if h.util_based:
        free, used = node.get("memory.free_bytes"), node.get(FACTS["memory"].usage)
        if free is None or used is None:
            steps.append("utilBased: node free or used memory unknown, no buffer")
        else:
            cpus = float(node.get(FACTS["cpu"].capacity) or 0.0)
            machine = machine_memory or capacity
            inputs["machineMemory"] = machine
            system = SystemMemory(
                total=capacity,
                free=float(free),
                used=float(used),
                scale_factor=scale_factor,
                shared_dedicated_used=sum(
                    (c.rss or 0.0) + (c.cache or 0.0) + (c.shmem or 0.0)
                    for c in containers
                    if c.qos_level in (SHARED_CORES, DEDICATED_CORES)
                ),
                system_extra=sum(
                    (c.cache or 0.0) + (c.shmem or 0.0) for c in containers if c.qos_level == SYSTEM_CORES
                ),
                cpu_memory_ratio=cpus / (machine / GiB),
            )
            buffer = memory_util_buffer(
                requirement,
                system,
                UtilBufferOptions(
                    h.free_based_ratio,
                    h.static_based_capacity,
                    h.cache_based_ratio,
                    h.cpu_mem_ratio_lower,
                    h.cpu_mem_ratio_upper,
                ),
            )
            inputs.update(
                buffer=buffer.value,
                systemBuffer=buffer.system_buffer,
                extraUsage=buffer.extra_usage,
                cacheBuffer=buffer.cache_buffer,
                staticBasedCapacity=buffer.static,
            )
    result = memory_headroom(capacity, requirement, h.reserved_for_allocate, buffer)
    value = float(int(result.value))  # GetHeadroom: int64 bytes
    inputs.update(maxAllocatable=result.max_allocatable, withoutBuffer=result.without_buffer)
    steps.insert(
        0,
        f"headroom: min(max(capacity {_num(capacity)} - reservedForAllocate {_num(h.reserved_for_allocate)}"
        f" - estimates {_num(requirement)}, 0) + buffer {_num(result.buffer)}, maxAllocatable "
        f"{_num(result.max_allocatable)}) = {_num(value)}",
    )
    return Reclaimable("memory", value, "; ".join(steps), inputs)


# ------------------------------------------------------------------ node update gate


@dataclass(frozen=True)
class Published:
    """What the node update gate last let through: per published resource its value (None when
    withdrawn) and when that update happened. Kept in the engine state, so a restart does not force
    a write the gate would have held (Koordinator keeps the time only in memory and updates after a
    restart; qosd has its state file)."""

    values: Mapping[str, float | None] = field(default_factory=dict)
    at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"values": dict(self.values), "at": self.at}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Published:
        values = {str(k): None if v is None else float(v) for k, v in (data.get("values") or {}).items()}
        at = data.get("at")
        return cls(values, None if at is None else float(at))


NOTHING_PUBLISHED = Published()


def resource_diff(old: float | None, new: float | None, threshold: float) -> bool:
    """Koordinator's IsResourceDiff: appearing or disappearing is a change; otherwise the change must
    exceed ``threshold`` of the old value (a multiplication, so any change from 0 counts)."""
    if (old is None) != (new is None):
        return True
    if old is None or new is None:
        return False
    return abs(new - old) > old * threshold


def _change(name: str, old: float | None, new: float | None) -> str:
    if old is None:
        return f"{name} appears" if new is not None else f"{name} stays absent"
    if new is None:
        return f"{name} disappears"
    if old == 0:
        return f"{name} {_num(old)} -> {_num(new)}"
    return f"{name} {_num(old)} -> {_num(new)} ({(new - old) / old * 100:+.1f}%)"


def update_due(
    last: Published, new: Mapping[str, float | None], threshold: float, max_interval: float, now: float
) -> tuple[bool, str]:
    """Koordinator's node sync decision (isNodeResourceSyncNeeded): the node is updated when any of
    the resources reported this round differs from its last published value beyond ``threshold``
    (``resource_diff``), when it was never updated, or when the last update is more than
    ``max_interval`` seconds old. The decision is for the node as a whole, as Koordinator writes
    batch-cpu and batch-memory together. Returns the decision and its reason."""
    changed = [name for name, v in new.items() if resource_diff(last.values.get(name), v, threshold)]
    if changed:
        what = ", ".join(_change(n, last.values.get(n), new[n]) for n in changed)
        return True, f"updated: {what} (beyond diffThreshold {threshold:g})"
    if last.at is None:
        return True, "updated: first update"
    age = now - last.at
    if age > max_interval:
        return True, f"updated: last update {age:g}s ago (> maxInterval {max_interval:g}s)"
    what = ", ".join(_change(n, last.values.get(n), v) for n, v in new.items())
    return False, (
        f"held: {what} within diffThreshold {threshold:g}, last update {age:g}s ago "
        f"(<= maxInterval {max_interval:g}s)"
    )
