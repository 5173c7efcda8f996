"""The `free` reclaim policy: what a base leaves unused, times a ratio, as a pure function.

    value = max((base - used) x ratio, 0), rounded when asked

* ``of: allocatable`` / ``capacity``: base is the node's allocatable (capacity when unknown) or
  capacity; used is the node's usage, without reclaimed pods' own usage (they run on what is
  published, so counting them would shrink the offer as it is taken), plus the idle part of held
  requests: pods whose requests the kubelet holds whole (the static CPU manager gives Guaranteed
  pods exclusive CPUs, idle or not) count max(request - usage, 0) more. So a held pod counts its
  request, any other pod its usage.
* ``of: reclaimPool`` (cpu): base is the reclaim pool's CPUs, used the busy share of those CPUs
  without the reclaimed pods' usage, and the reclaim cgroup's CFS quota caps the result: Katalyst's
  reclaimed-cores supply (GetReclaimMetrics), which its CPU headroom assembler publishes.

Every term goes into the provenance inputs, the formula spells the arithmetic out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.features.eviction.tolerance import ReclaimPoolSupply
from engine.features.reclaim.headroom import util_based_cpu_headroom
from engine.features.reclaim.spec import ReclaimFree, ReclaimResource
from engine.features.reclaim.strategy import FACTS, Reclaimable, _num, _stale


@dataclass(frozen=True)
class FreePod:
    """One active pod as the free policy sees it (cores or bytes)."""

    request: float
    usage: float | None
    reclaimed: bool
    held: bool = False  # its requests are held whole (HeldRequests matched it)


def held_applies(free: ReclaimFree, manager_policy: str | None) -> tuple[bool, str | None]:
    """Whether held requests count on this node, and a note when they do not because the node's
    CPU manager policy is unknown."""
    held = free.held
    if held is None:
        return False, None
    if held.cpu_manager_policy is None:
        return True, None
    if manager_policy is None:
        return False, (
            f"heldRequests not counted: the node's CPU manager policy is unknown "
            f"(node.kubelet.cpu_manager_policy), they count only under {held.cpu_manager_policy!r}"
        )
    return manager_policy == held.cpu_manager_policy, None


def _util(
    free: ReclaimFree, supply: float, used: float, last: float | None, capacity: float
) -> tuple[float, list[str], dict[str, Any]]:
    """Katalyst's util-based correction (EstimateUtilBasedCapacity) on the free value as supply:
    from the last report, oversell while reclaimed pods use less than the target share of it."""
    options = free.util_based
    if options is None:
        return supply, [], {}
    util = util_based_cpu_headroom(supply, used, last or 0.0, capacity, options)
    step = (
        f"util-based: max(last {_num(util.last)} + oversold {_num(util.oversold)}, supply "
        f"{_num(util.supply)}) within x{options.max_oversold_rate:g} and "
        f"x{options.max_headroom_capacity_rate:g} capacity = {_num(util.value)}"
    )
    inputs = {"utilization": util.utilization, "oversold": util.oversold, "lastReport": util.last}
    return util.value, [step], inputs


def _rounded(value: float, rounding: str) -> float:
    if rounding == "floor":
        return float(math.floor(value))
    if rounding == "ceil":
        return float(math.ceil(value))
    return value


def free_reclaimable(
    resource: str,
    spec: ReclaimResource,
    node: Mapping[str, Any],
    pods: Sequence[FreePod],
    *,
    manager_policy: str | None = None,
    pool: ReclaimPoolSupply | None = None,
    metrics_age: float | None = None,
    degrade_after: float | None = None,
    last_report: float | None = None,
) -> Reclaimable:
    """The free policy for ``resource``; ``pool`` is the reclaim pool's reading (of: reclaimPool),
    ``last_report`` what was published last (the util-based correction builds on it)."""
    stale = _stale(resource, metrics_age, degrade_after)
    if stale is not None:
        return stale
    free = spec.free or ReclaimFree()
    if free.of == "reclaimPool":
        return _pool(free, pool, last_report, float(node.get(FACTS["cpu"].capacity) or 0.0))
    f = FACTS[resource]
    capacity = node.get(f.capacity)
    used_node = node.get(f.usage)
    if not capacity or used_node is None:
        return Reclaimable(resource, None, f"node {resource} capacity or usage unknown", {})
    base = float(capacity) if free.of == "capacity" else float(node.get(f.allocatable) or capacity)
    steps: list[str] = []
    reclaimed = 0.0
    if free.reclaimed_usage == "exclude":
        measured = node.get("reclaim.cgroup_usage_cores") if resource == "cpu" else None
        if measured is not None:
            reclaimed = float(measured)
        else:
            reclaimed = sum(p.usage for p in pods if p.reclaimed and p.usage is not None)
    counted, note = held_applies(free, manager_policy)
    idle_held = 0.0
    if counted:
        idle_held = sum(max(p.request - (p.usage or 0.0), 0.0) for p in pods if p.held and not p.reclaimed)
    if note:
        steps.append(note)
    used = max(float(used_node) - reclaimed, 0.0) + idle_held
    raw = max((base - used) * free.ratio, 0.0)
    corrected, util_steps, util_inputs = _util(free, raw, reclaimed, last_report, float(capacity))
    value = _rounded(corrected, free.rounding)
    terms = f"usage {_num(float(used_node))}"
    if free.reclaimed_usage == "exclude":
        terms += f" - reclaimed {_num(reclaimed)}"
    if counted:
        terms += f" + idle held requests {_num(idle_held)}"
    first = f"free: ({free.of} {_num(base)} - ({terms})) x {free.ratio:g} = {_num(raw)}"
    formula = "; ".join([first, *util_steps])
    formula += f", {free.rounding} {_num(value)}" if value != corrected else ""
    steps.insert(0, formula)
    inputs: dict[str, Any] = {
        "policy": "free",
        "of": free.of,
        "base": base,
        "usage": float(used_node),
        "reclaimedUsage": reclaimed,
        "heldIdle": idle_held,
        "heldCounted": counted,
        "cpuManagerPolicy": manager_policy,
        "ratio": free.ratio,
        "free": raw,
        **util_inputs,
    }
    return Reclaimable(resource, value, "; ".join(steps), inputs)


def _pool(free: ReclaimFree, pool: ReclaimPoolSupply | None, last: float | None, cpus: float) -> Reclaimable:
    if pool is None:
        return Reclaimable(
            "cpu",
            None,
            "reclaim pool unknown: node.reclaim.pool_usage_cores is not observed, or no reclaim pool",
            {},
        )
    if free.reclaimed_usage == "exclude":
        supply = pool.supply
        terms = f"busy {_num(pool.usage_ratio_sum)} - reclaimed {_num(pool.cgroup_usage_cores)}"
    else:
        supply = ReclaimPoolSupply(
            pool.pool_cpus, pool.usage_ratio_sum, 0.0, pool.cfs_quota_us, pool.cfs_period_us
        ).supply
        terms = f"busy {_num(pool.usage_ratio_sum)}"
    raw = max(supply * free.ratio, 0.0)
    corrected, util_steps, util_inputs = _util(free, raw, pool.cgroup_usage_cores, last, cpus)
    value = _rounded(corrected, free.rounding)
    formula = f"free: (reclaimPool {pool.pool_cpus} - ({terms})) x {free.ratio:g}"
    if pool.cfs_quota_us > 0:
        formula += f", within the reclaim cgroup's quota {_num(pool.cfs_quota_us)}/{_num(pool.cfs_period_us)}"
    formula += f" = {_num(raw)}"
    formula = "; ".join([formula, *util_steps])
    formula += f", {free.rounding} {_num(value)}" if value != corrected else ""
    inputs = {
        "policy": "free",
        "of": "reclaimPool",
        "poolCpus": pool.pool_cpus,
        "poolUsageCores": pool.usage_ratio_sum,
        "reclaimedUsage": pool.cgroup_usage_cores,
        "cfsQuotaUs": pool.cfs_quota_us,
        "cfsPeriodUs": pool.cfs_period_us,
        "ratio": free.ratio,
        "free": raw,
        **util_inputs,
    }
    return Reclaimable("cpu", value, formula, inputs)
