"""CPU suppression of best-effort / reclaimed workloads, as pure functions of facts and parameters.

Two anchors, two mechanisms:

* Koordinator (koordlet CPUSuppress, koordinator.md §3.1) shrinks the BE share of the node to what
  latency-sensitive pods leave under a node threshold: the suppress amount is computed in
  milli-cores, then enforced either as a BE cpuset (HT pairs first, spread over NUMA/socket buckets,
  grown at most one step per round) or as a BE ``cpu.cfs_quota_us`` (dead band, step-up cap).
* Katalyst (cpu-pressure-suppression-plugin, katalyst.md §3.9) never narrows a cpuset here: the
  reclaim pool already *is* the suppression. Instead it evicts reclaimed pods whose tolerance of
  being squeezed (requests over what the pool can supply) has been exceeded for too long.

The arithmetic follows the anchors' integer and float steps exactly (Go's int64 truncation, its
float64 products, Quantity.Value() rounding up), so a bundled profile reproduces their numbers and
``qosd explain`` can show each term: every result carries a ``formula`` and an ``inputs()`` dict
that the engine records as provenance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.model.facts import Cpu, Topology
from engine.model.units import ceil_div, format_cpuset

CFS_PERIOD_US = 100_000  # the kernel's default cpu.cfs_period_us, which Koordinator assumes
UNSET_QUOTA = -1  # cpu.cfs_quota_us of an unlimited group (cgroup v2 "max")


def _trunc_div(a: int, b: int) -> int:
    """Go's integer division (truncates toward zero); Python's // floors, which differs for negatives."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


# ------------------------------------------------------------------ Koordinator: the suppress amount


@dataclass(frozen=True)
class UsageSample:
    """One pod or host application that has a CPU usage metric.

    ``non_be`` is Koordinator's filter result: for pods, qosClass != BE and kube QoS != BestEffort,
    and a pod with a metric but no known pod object counts as non-BE; for host applications, anything
    but a BE app running under the besteffort cgroup. The caller decides; the arithmetic only sums."""

    name: str
    cores: float
    non_be: bool


@dataclass(frozen=True)
class SuppressUsage:
    """Everything Koordinator's calculateBESuppressCPU reads, in its units.

    Capacity and allocatable are milli-cores (Quantity.MilliValue()); usages are cores as floats, as
    the metric cache returns them. ``annotation_reserved_milli`` is the node reservation annotation
    (its cpu resource, or 1000 x the number of reservedCPUs); 0 when absent."""

    capacity_milli: int
    allocatable_milli: int
    node_used_cores: float
    pods: tuple[UsageSample, ...] = ()
    host_apps: tuple[UsageSample, ...] = ()
    annotation_reserved_milli: int = 0


@dataclass(frozen=True)
class SuppressAmount:
    """The BE CPU budget in milli-cores, with every term of the arithmetic for provenance."""

    milli: int
    threshold_percent: int
    min_percent: int | None
    capacity_milli: int
    threshold_milli: int
    node_used_cores: float
    pods_all_cores: float
    pods_non_be_milli: int
    host_apps_all_cores: float
    host_apps_non_be_milli: int
    node_reserved_milli: int
    system_used_milli: int
    floor_milli: int | None
    floored: bool
    formula: str

    def inputs(self) -> dict[str, Any]:
        return {
            "suppressMilli": self.milli,
            "capacityMilli": self.capacity_milli,
            "cpuSuppressThresholdPercent": self.threshold_percent,
            "cpuSuppressMinPercent": self.min_percent,
            "thresholdMilli": self.threshold_milli,
            "nodeUsedCores": self.node_used_cores,
            "podsAllUsedCores": self.pods_all_cores,
            "podsNonBEUsedMilli": self.pods_non_be_milli,
            "hostAppsAllUsedCores": self.host_apps_all_cores,
            "hostAppsNonBEUsedMilli": self.host_apps_non_be_milli,
            "nodeReservedMilli": self.node_reserved_milli,
            "systemUsedMilli": self.system_used_milli,
            "floorMilli": self.floor_milli,
            "floored": self.floored,
        }


def be_suppress_amount(
    usage: SuppressUsage, threshold_percent: int, min_percent: int | None = None
) -> SuppressAmount:
    """suppress(BE) = capacity x threshold% − nonBE pods − nonBE host apps − systemUsed.

    systemUsed = max(nodeUsed − podsAllUsed − hostAppsAllUsed, 0, nodeReserved) with nodeReserved =
    max(capacity − allocatable, annotation reservation). Sums are float cores in the given order;
    each subtracted term is truncated to milli-cores on its own (int64(x*1000)), and the threshold
    product is integer division, as in Koordinator, so results match it to the milli-core. The
    result may be negative: the policies clamp it (2 CPUs, 2000 us). ``min_percent`` raises it to
    capacity x min% (cpuSuppressMinPercent)."""
    kubelet_reserved = max(usage.capacity_milli - usage.allocatable_milli, 0)
    node_reserved_milli = max(kubelet_reserved, usage.annotation_reserved_milli)
    node_reserved_cores = node_reserved_milli / 1000

    pods_all = 0.0
    pods_non_be = 0.0
    for p in usage.pods:
        pods_all += p.cores
        if p.non_be:
            pods_non_be += p.cores
    apps_all = 0.0
    apps_non_be = 0.0
    for a in usage.host_apps:
        apps_all += a.cores
        if a.non_be:
            apps_non_be += a.cores
    system_used = max(usage.node_used_cores - pods_all - apps_all, 0.0)
    if system_used < node_reserved_cores:
        system_used = node_reserved_cores

    pods_non_be_milli = int(pods_non_be * 1000)
    apps_non_be_milli = int(apps_non_be * 1000)
    system_milli = int(system_used * 1000)
    threshold_milli = _trunc_div(usage.capacity_milli * threshold_percent, 100)
    milli = threshold_milli - pods_non_be_milli - apps_non_be_milli - system_milli
    formula = (
        f"{usage.capacity_milli}m x {threshold_percent}% - nonBE pods {pods_non_be_milli}m"
        f" - nonBE host apps {apps_non_be_milli}m - system {system_milli}m = {milli}m"
    )

    floor_milli: int | None = None
    floored = False
    if min_percent is not None:
        floor_milli = _trunc_div(usage.capacity_milli * min_percent, 100)
        if milli < floor_milli:
            milli, floored = floor_milli, True
            formula += f"; raised to min {min_percent}% = {floor_milli}m"
    return SuppressAmount(
        milli=milli,
        threshold_percent=threshold_percent,
        min_percent=min_percent,
        capacity_milli=usage.capacity_milli,
        threshold_milli=threshold_milli,
        node_used_cores=usage.node_used_cores,
        pods_all_cores=pods_all,
        pods_non_be_milli=pods_non_be_milli,
        host_apps_all_cores=apps_all,
        host_apps_non_be_milli=apps_non_be_milli,
        node_reserved_milli=node_reserved_milli,
        system_used_milli=system_milli,
        floor_milli=floor_milli,
        floored=floored,
        formula=formula,
    )


# ------------------------------------------------------------------ Koordinator: picking BE CPUs


def pick_suppress_cpus(n: int, procs: Sequence[Cpu]) -> tuple[int, ...]:
    """Koordinator's calculateBESuppressCPUSetPolicy: n CPUs out of ``procs``, in pick order.

    Why this shape: BE work is spread over NUMA nodes and sockets (so no one node's LS pods take
    all the interference) but stacked on HT siblings (so a BE thread shares a core with another BE
    thread rather than with an LS one). Processors are bucketed by (numa + |procs|) x (socket + 1)
    -- the anchor's key, collisions included -- each bucket sorted by (core, cpu), buckets by size
    descending then smaller first CPU. Phase 1 takes the first free sibling pair of each bucket in
    turn while more than one CPU is needed; phase 2 continues from the bucket where phase 1 stopped
    and takes single CPUs. Fewer procs than n gives an empty result (the anchor then writes nothing).
    """
    if len(procs) < n:
        return ()
    if len({p.id for p in procs}) != len(procs):
        raise ValueError("processors must have distinct CPU ids")
    width = len(procs)
    by_key: dict[int, list[Cpu]] = {}
    for p in procs:
        by_key.setdefault((p.numa + width) * (p.socket + 1), []).append(p)
    buckets = [sorted(b, key=lambda c: (c.core, c.id)) for b in by_key.values()]
    buckets.sort(key=lambda b: (-len(b), b[0].id))

    picked: list[int] = []
    used: set[int] = set()
    need = n
    i = 0
    previous = -1
    while buckets:
        if need <= 1:
            break
        if i == 0:
            if previous == need:  # a full round took nothing
                break
            previous = need
        bucket = buckets[i]
        for j in range(len(bucket) - 1):
            if bucket[j].id in used:
                continue
            if bucket[j].core == bucket[j + 1].core:
                pair = (bucket[j].id, bucket[j + 1].id)
                picked.extend(pair)
                used.update(pair)
                need -= 2
                break
        i = (i + 1) % len(buckets)

    start = i
    previous = -1
    while buckets:
        if need <= 0:
            break
        if i == start:
            if previous == need:
                break
            previous = need
        for cpu in buckets[i]:
            if cpu.id not in used:
                picked.append(cpu.id)
                used.add(cpu.id)
                need -= 1
                break
        i = (i + 1) % len(buckets)
    return tuple(picked)


@dataclass(frozen=True)
class CpusetSuppress:
    """The new BE cpuset and how it was sized.

    ``apply`` is False when nothing could be picked (too few CPUs in the pools): Koordinator then
    leaves the current cpuset in place, and so must the engine."""

    cpus: frozenset[int]
    picked: tuple[int, ...]
    apply: bool
    suppress_milli: int
    wanted: int
    target: int
    min_cpus: int
    step_cpus: int
    old_size: int
    logical_cpus: int
    lsr_pool: int
    ls_pool: int
    lsr_share: int
    formula: str

    def inputs(self) -> dict[str, Any]:
        return {
            "suppressMilli": self.suppress_milli,
            "wantedCpus": self.wanted,
            "minCpus": self.min_cpus,
            "stepCpus": self.step_cpus,
            "oldCpus": self.old_size,
            "logicalCpus": self.logical_cpus,
            "targetCpus": self.target,
            "lsrPoolCpus": self.lsr_pool,
            "lsPoolCpus": self.ls_pool,
            "lsrShare": self.lsr_share,
            "picked": list(self.picked),
            "cpuset": format_cpuset(self.cpus),
        }


def suppress_cpuset(
    suppress_milli: int,
    topology: Topology | Sequence[Cpu],
    old: frozenset[int],
    lsr: frozenset[int],
    ls: frozenset[int],
    *,
    min_cpus: int = 2,
    step_percent: float = 10,
) -> CpusetSuppress:
    """Koordinator's adjustByCPUSet, minus the cgroup writes.

    cpus = ceil(suppress/1000), at least ``min_cpus``; growth over the old cpuset is capped at
    ceil(logicalCPUs x step%) per round (shrinking is never capped: protecting LS comes first). The
    LSR pool gives floor(cpus x |LSR| / (|LSR| + |LS|)) of them and the LS pool the rest, each
    picked with :func:`pick_suppress_cpus`. ``lsr`` and ``ls`` are the pools the engine derived
    (reserved, SYSTEM-exclusive and LSE CPUs already removed); a CPU in both counts as LSR, and
    only CPUs of the topology are considered. The step is the anchor's float product
    ceil(float(CPUs) x step/100), kept as such so odd step percents round as Go rounds them."""
    cpus_all = topology.cpus if isinstance(topology, Topology) else tuple(topology)
    lsr_procs = [c for c in cpus_all if c.id in lsr]
    ls_procs = [c for c in cpus_all if c.id in ls and c.id not in lsr]

    wanted = math.ceil(suppress_milli / 1000)
    target = max(wanted, min_cpus)
    step = math.ceil(len(cpus_all) * (step_percent / 100))
    if target - len(old) > step:
        target = len(old) + step
    steps = [f"ceil({suppress_milli}m/1000) = {wanted}"]
    if wanted < min_cpus:
        steps.append(f"at least {min_cpus}")
    if target < max(wanted, min_cpus):
        steps.append(f"growth capped at {len(old)} + {step}")

    pools = len(lsr_procs) + len(ls_procs)
    lsr_share = target * len(lsr_procs) // pools if pools else 0
    picked: tuple[int, ...] = ()
    if pools:
        if lsr_share > 0:
            picked += pick_suppress_cpus(lsr_share, lsr_procs)
        if target - lsr_share > 0:
            picked += pick_suppress_cpus(target - lsr_share, ls_procs)
    steps.append(f"{target} cpus: {lsr_share} from LSR ({len(lsr_procs)}), rest from LS ({len(ls_procs)})")
    if picked:
        steps.append(f"-> {format_cpuset(frozenset(picked))}")
    else:
        steps.append("not enough CPUs in the pools; the BE cpuset stays as it is")
    return CpusetSuppress(
        cpus=frozenset(picked),
        picked=picked,
        apply=bool(picked),
        suppress_milli=suppress_milli,
        wanted=wanted,
        target=target,
        min_cpus=min_cpus,
        step_cpus=step,
        old_size=len(old),
        logical_cpus=len(cpus_all),
        lsr_pool=len(lsr_procs),
        ls_pool=len(ls_procs),
        lsr_share=lsr_share,
        formula="; ".join(steps),
    )


# ------------------------------------------------------------------ Koordinator: the BE cfs quota


@dataclass(frozen=True)
class QuotaSuppress:
    """The BE ``cpu.cfs_quota_us`` to write, or ``quota=None`` to leave the current one (see reason)."""

    quota: int | None
    reason: str
    suppress_milli: int
    current: int
    target: int
    capacity_cores: int
    dead_band: float
    step: float

    def inputs(self) -> dict[str, Any]:
        return {
            "suppressMilli": self.suppress_milli,
            "currentQuota": self.current,
            "targetQuota": self.target,
            "capacityCores": self.capacity_cores,
            "deadBand": self.dead_band,
            "step": self.step,
            "quota": self.quota,
        }


def suppress_cfs_quota(
    suppress_milli: int,
    current_quota: int,
    capacity_milli: int,
    *,
    min_quota: int = 2000,
    dead_band_percent: float = 1,
    step_percent: float = 10,
    period_us: int = CFS_PERIOD_US,
) -> QuotaSuppress:
    """Koordinator's adjustByCfsQuota, minus the write.

    quota = suppress x period / 1000 (integer), at least ``min_quota``. Changes smaller than
    capacityCores x period x dead-band% are skipped, to avoid rewriting a jittering value, except
    when the target is the floor (a node under pressure must reach it). Growth over a set quota is
    capped at capacityCores x period x step%, so BE ramps up slowly; from unlimited (-1) it is
    not. capacityCores is capacity rounded up to whole cores (Quantity.Value())."""
    cores = ceil_div(capacity_milli, 1000)
    target = max(_trunc_div(suppress_milli * period_us, 1000), min_quota)
    dead_band = float(cores) * float(period_us) * (dead_band_percent / 100)
    step = float(cores) * float(period_us) * (step_percent / 100)

    def result(quota: int | None, reason: str) -> QuotaSuppress:
        return QuotaSuppress(quota, reason, suppress_milli, current_quota, target, cores, dead_band, step)

    if abs(float(target) - float(current_quota)) < dead_band and target != min_quota:
        band = f"dead band {dead_band:g} ({dead_band_percent:g}% of {cores} cores)"
        return result(None, f"|{target} - {current_quota}| < {band}")
    if current_quota != UNSET_QUOTA and float(target) - float(current_quota) > step:
        quota = current_quota + int(step)
        return result(quota, f"target {target} capped at {current_quota} + step {int(step)} = {quota}")
    return result(target, f"{suppress_milli}m x {period_us} / 1000 = {target} (min {min_quota})")


# ------------------------------------------------------------------ Katalyst: reclaim pool floor per NUMA

