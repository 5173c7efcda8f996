"""memoryGuard: Katalyst's memory guard, a memory limit on the reclaim root that keeps every NUMA
node's critical watermark free (strategies/memory_qos.memory_guard).

Katalyst runs it as a sysadvisor memory plugin that is off unless listed in
--memory-advisor-plugins; the bundled policy carries it as a disabled rule. The facts per NUMA node
are its total, free memory and zone low watermark (numa.memory.*), and the reclaimed pods' usage on
it (numa.memory.reclaimed_usage_bytes); vm.watermark_scale_factor comes from the node fact, else
from spec.pressure.watermarkScaleFactor, so a node whose collector does not read the sysctl still
gets the kernel default rather than no guard. A missing usage gives no advice, as in Katalyst:
the files keep their last values and one ``skipped`` note says why.
"""

from __future__ import annotations

from typing import Any

from engine.evaluate.context import ActionContext
from engine.features.memory_qos.spec import MemoryGuardSpec
from engine.features.memory_qos.strategy import (
    PAGE_SIZE,
    GuardParams,
    NumaMemory,
    ZoneInfo,
    memory_guard,
)
from engine.model.intents import CgroupIntent


def memory_guard_action(ctx: ActionContext) -> bool:
    spec = ctx.spec_as(MemoryGuardSpec)
    cgroup = spec.cgroup
    node = ctx.views.node
    wsf = node.get("memory.watermark_scale_factor")
    if wsf is None:
        wsf = ctx.env.policy.pressure.watermark_scale_factor
    guard_params = GuardParams(
        watermark_scale_factor=float(wsf),
        page_size=PAGE_SIZE,
        min_critical_watermark=spec.min_critical_watermark,
        critical_watermark_scale_factor=spec.critical_watermark_scale_factor,
    )
    numas = [_numa(nid, facts) for nid, facts in ctx.views.numa.items()]
    guard = memory_guard(numas, guard_params)
    if guard.root is None:
        ctx.skip(f"memory guard for {cgroup}: {guard.reason}")
        return False
    version = ctx.snap.cgroup_version
    files = guard.root.files(cgroup_v2=version != 1)
    inputs: dict[str, Any] = {
        "cgroup": cgroup,
        "memoryMax": guard.root.memory_max,
        "numas": list(guard.root.numas),
        "watermarkScaleFactor": guard_params.watermark_scale_factor,
        "terms": [t.to_dict() for t in guard.terms],
    }
    if version != 1:
        inputs["memoryHigh"] = f"0.95 x {guard.root.memory_max} = {guard.root.memory_high}"
    provenance = ctx.node_provenance(inputs)
    for file, value in files.items():
        ctx.tick.intents.append(CgroupIntent(cgroup, file, value, None, provenance))
    return True


def _numa(nid: int, facts: Any) -> NumaMemory:
    """One NUMA node as the guard reads it. With a zone low watermark, free memory is the zone's
    free pages too (the collector reads both from /proc/zoneinfo), as Katalyst does."""
    low = facts.get("memory.watermark_low_bytes")
    free = float(facts.get("memory.free_bytes") or 0.0)
    zone = None
    if low is not None:
        zone = ZoneInfo(low_pages=int(low) // PAGE_SIZE, free_pages=int(free) // PAGE_SIZE)
    usage = facts.get("memory.reclaimed_usage_bytes")
    return NumaMemory(
        numa=nid,
        total=float(facts.get("memory.total_bytes") or 0.0),
        free=free,
        reclaimed_usage=None if usage is None else float(usage),
        zone=zone,
    )
