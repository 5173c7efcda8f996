"""NUMA-level batch resources: Koordinator's batch formulas per NUMA node (a NodeResourceTopology
zone), as its slo-controller computes them (batchresource plugin calculateOnNUMALevel,
plugins/util GetPodNUMARequestAndUsage; koordinator.md 4.1).

Per zone, in Koordinator's milli-units (milli-cores, milli-bytes: its DivideResourceList divides a
Quantity's MilliValue and rounds up):

    capacity     = the zone's CPUs / memory (qosd: the NUMA node's, from the topology)
    safetyMargin = trunc(capacity x (100 - reclaimThresholdPercent) / 100)
    systemUsed   = ceil(node systemUsed / zones)        nodeReserved = ceil(node nodeReserved / zones)
    a pod's request and usage go to the NUMA nodes its scheduler allocated it (evenly), or evenly to
    every zone when it has no allocation
    HP pods: request -> HPRequest; no metric: request -> HPUsed and HPMaxUsedReq; LSE CPU (request
    as usage): request -> HPUsed, max(usage, request) -> HPMaxUsedReq; otherwise usage -> HPUsed,
    max(usage, request) -> HPMaxUsedReq
    pod metrics with no running or pending pod ("dangling", HP): usage evenly over every zone
    then the node formulas (usage / request / maxUsageRequest) and the threshold percent (maxPercent)

Unlike the node level, a pod without a metric counts its request in HPMaxUsedReq too: that is
Koordinator's. Koordinator approximates (no NUMA-level metrics): system usage, reservation and
unknown pods are spread evenly, and so does qosd.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from engine.features.reclaim.spec import ReclaimResource
from engine.features.reclaim.strategy import PodUse

MILLI = 1000


@dataclass(frozen=True)
class Zone:
    name: str
    numa: int
    capacity: float  # cores or bytes


def _ceil_div(milli: int, parts: int) -> int:
    return -(-milli // parts)


def zone_values(
    resource: str,
    spec: ReclaimResource,
    zones: Sequence[Zone],
    pods: Sequence[PodUse],
    system_used: float,
    node_reserved: float,
) -> dict[str, float]:
    """Each zone's batch resource, in cores (to the milli-core) or bytes, by ``spec.policy``.

    ``system_used`` and ``node_reserved`` are the node-level figures of the same formula (cores or
    bytes), spread evenly over the zones."""
    n = len(zones)
    if not n:
        return {}
    ids = {z.numa for z in zones}

    def milli(value: float) -> int:
        return round(value * MILLI)

    requested = [0] * n
    used = [0] * n
    max_used = [0] * n
    index = {z.numa: i for i, z in enumerate(zones)}
    for p in pods:
        if not p.high_priority:
            continue
        if not p.listed:
            share = _ceil_div(milli(p.usage or 0.0), n)
            for i in range(n):
                used[i] += share
                max_used[i] += share
            continue
        on = [index[k] for k in sorted(p.numa) if k in ids] or list(range(n))
        req = _ceil_div(milli(p.request), len(on))
        use = _ceil_div(milli(p.usage), len(on)) if p.usage is not None else None
        for i in on:
            requested[i] += req
            if use is None:
                used[i] += req
                max_used[i] += req
                continue
            used[i] += req if p.request_as_usage else use
            max_used[i] += max(use, req)
    system = _ceil_div(milli(system_used), n)
    reserved = _ceil_div(milli(node_reserved), n)
    threshold = spec.threshold_percent if spec.threshold_percent is not None else 100.0
    out: dict[str, float] = {}
    for i, z in enumerate(zones):
        cap = milli(z.capacity)
        # MultiplyMilliQuant (cpu, on milli-cores) / MultiplyQuant (memory, on bytes): truncated.
        ratio = (100.0 - threshold) / 100.0
        margin = (
            math.trunc(cap * ratio) if resource == "cpu" else math.trunc(round(z.capacity) * ratio) * MILLI
        )
        base = cap - margin
        value = {
            "usage": base - max(system, reserved) - used[i],
            "request": base - reserved - requested[i],
            "maxUsageRequest": base - max(system, reserved) - max_used[i],
        }[spec.policy]
        value = max(value, 0)
        if spec.max_percent is not None:
            pct = spec.max_percent / 100.0
            limit = (
                math.trunc(cap * pct) if resource == "cpu" else math.trunc(round(z.capacity) * pct) * MILLI
            )
            value = min(value, limit)
        # cpu: whole milli-cores; memory: Quantity.Value() rounds a fraction of a byte up
        out[z.name] = value / MILLI if resource == "cpu" else float(_ceil_div(value, MILLI))
    return out


@lru_cache(maxsize=4096)
def allocated_numa(text: str) -> frozenset[int]:
    """The NUMA nodes of Koordinator's ResourceStatus annotation (scheduling.koordinator.sh/
    resource-status: ``{"numaNodeResources": [{"node": 0, ...}]}``). One that does not parse
    allocates nothing, as Koordinator then treats the pod as sharing every NUMA node."""
    try:
        raw = json.loads(text)
    except ValueError:
        return frozenset()
    nodes = raw.get("numaNodeResources") if isinstance(raw, Mapping) else None
    if not isinstance(nodes, list):
        return frozenset()
    out = set()
    for entry in nodes:
        node = entry.get("node") if isinstance(entry, Mapping) else None
        if isinstance(node, int) and not isinstance(node, bool) and node >= 0:
            out.add(node)
    return frozenset(out)
