"""CPU pool sizing and placement: one pure function from (topology, pool specs, CPU demands) to cpusets.

Anchor: Katalyst's request-based pool path (QRM cpu dynamic policy, ``generatePoolsAndIsolation`` in
``policy_allocation_handlers.go``, and the dedicated/SNB allocation handlers; katalyst.md §2.2-2.3).
Katalyst computes this incrementally, one admission at a time, and keeps state in a checkpoint.
qosd recomputes the whole plan every time from the full demand list plus the previous dedicated
cpusets, so a restart converges to the same state; ``previous`` is what keeps running dedicated pods
where they are.

Order of work, and why:

1. Static pools (``reserve``, static ``system`` pools) are carved out first: nothing else may use them.
2. Demands are validated (katalyst.md §1.4). An invalid pod is reported in ``PoolPlan.errors`` with an
   on-call message and is left out of every pool and of the dedicated set; it never raises.
3. NUMA-bound placements in stability order: dedicated containers whose previous cpuset is still
   valid; SNB (shared_cores + numa_binding) containers with a hint or a previous NUMA; new
   numa_exclusive dedicated containers (they need empty NUMA nodes, so they go before anything that
   could land on one); new non-exclusive dedicated containers, hinted ones first; SNB containers
   without a hint. Without a hint qosd picks the NUMA node(s) with the most free CPUs, ties to the
   lowest id (Katalyst leaves the choice to kubelet's topology manager and its hint optimizers).
4. SNB pools ``<pool>-NUMA<id>`` are sized CPUPreciseCeil(sum x ratio) inside their node.
5. Non-binding pools share the CPUs of NUMA nodes that no pool is bound to: exact sizes when they
   fit, else proportional shrinking, else every pool gets all of them (Katalyst's overlap).
6. ``reclaim`` takes the remainder, topped up to its minimum (max(4, #NUMA) by default) with one CPU
   per NUMA node round-robin, overlapping other pools, like Katalyst's reserved-reclaimed set.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from engine.features.pools.cpuset import (
    EMPTY_CPUS,
    CpuDetails,
    CpuSet,
    cpu_precise_ceil,
    take_by_numa_balance,
    take_by_topology,
    take_evenly_across_numas,
    take_packed,
)
from engine.features.pools.spec import Pool
from engine.model.units import format_cpuset

NUMA_INFIX = "-NUMA"  # katalyst commonstate.NUMAPoolInfix
SNB_RATIO = 2.0  # katalyst CPUIncrRatioSharedCoresNUMABinding, used when no per-NUMA spec says otherwise
MIN_RECLAIM = 4  # katalyst reservedReclaimedCPUsSize = max(4, #NUMA)

Key = tuple[str, str]  # (pod uid, container name)


@dataclass(frozen=True)
class PoolSpec:
    """One pool of the compiled policy, reduced to what sizing and placement read.

    ``kind``: reserve | share | reclaim | dedicated | system | isolation. ``placement``: pack | spread |
    bound. ``ht_policy``: fullCores takes whole cores first; any/spreadCores take threads balanced
    over NUMA nodes. ``order``: lowFirst | highFirst (which CPU ids are taken first).
    """

    name: str
    kind: str
    static_cpus: CpuSet | None = None
    static_count: int | None = None
    from_requests: float | None = None
    remainder: bool = False
    per_container: bool = False
    min: int | None = None
    max: int | None = None
    min_per_numa: bool = False  # min split over the NUMA nodes (katalyst GetCoreNumReservedForReclaim)
    min_numa_ratio: float | None = None  # per NUMA max(min, ceil(ratio x its CPUs))
    per_numa: bool = False
    placement: str = "spread"
    ht_policy: str = "fullCores"
    order: str = "lowFirst"
    template: bool = False

    @classmethod
    def from_policy(cls, pool: Pool) -> PoolSpec:
        """Build from the compiled policy. A pool without ``kind`` gets one from its sizing mode."""
        kind = pool.kind
        if kind is None:
            if pool.per_container:
                kind = "dedicated"
            elif pool.remainder:
                kind = "reclaim"
            elif pool.static_cpus is not None or pool.static_count is not None:
                kind = "reserve" if pool.name == "reserve" else "system"
            else:
                kind = "share"
        return cls(
            name=pool.name,
            kind=kind,
            static_cpus=pool.static_cpus,
            static_count=pool.static_count,
            from_requests=pool.from_requests,
            remainder=pool.remainder,
            per_container=pool.per_container,
            min=pool.min,
            max=pool.max,
            min_per_numa=pool.min_per_numa,
            min_numa_ratio=pool.min_numa_ratio,
            per_numa=pool.per_numa,
            placement=pool.placement or "spread",
            ht_policy=pool.ht_policy or "fullCores",
            order=pool.order,
            template=pool.template,
        )

    @property
    def is_static(self) -> bool:
        return self.static_cpus is not None or self.static_count is not None

    @property
    def is_dedicated(self) -> bool:
        return self.kind == "dedicated" or self.per_container

    @property
    def full_cores(self) -> bool:
        return self.ht_policy == "fullCores"

    @property
    def reverse(self) -> bool:
        return self.order == "highFirst"

    def clamp(self, size: int) -> int:
        if self.min is not None:
            size = max(size, self.min)
        if self.max is not None:
            size = min(size, self.max)
        return size


@dataclass(frozen=True)
class CpuDemand:
    """One container's CPU demand, as the classifier and the enhancements resolved it.

    ``pool`` is the pool the class (or ``cpuset_pool``) names: "dedicated", "share", a named share
    pool, "reclaim", "reserve" or a system pool. ``numa_ids`` is the katalyst numa_ids hint (it wins
    over ``numa_number``); None means no hint.
    """

    uid: str
    pod: str
    container: str
    class_name: str
    pool: str
    request: float
    numa_binding: bool = False
    numa_exclusive: bool = False
    numa_ids: frozenset[int] | None = None
    numa_number: int | None = None
    full_pcpus_pairing: bool = False
    distribute_evenly_across_numa: bool = False

    @property
    def key(self) -> Key:
        return (self.uid, self.container)


@dataclass(frozen=True)
class PoolPlan:
    """The result. ``pools``: pool name -> cpuset (SNB pools as ``<pool>-NUMA<id>``). ``dedicated``:
    (uid, container) -> its own cpuset. ``numa_bindings``: (uid, container) -> NUMA nodes for
    cpuset.mems of NUMA-bound containers. ``assignments``: (uid, container) -> pool name for
    containers that run in a pool. ``errors``: uid -> on-call messages for invalid pods.
    ``overlapping``: pools that share CPUs on purpose: pools given all available CPUs because they could
    not each get one, and, when no CPU at all is left for share pools, those pools and the per-NUMA
    pools they land on.
    ``reclaim_overlap``: reclaim was topped up onto CPUs of other pools. ``warnings``: pool-level
    problems that are nobody's pod's fault."""

    pools: Mapping[str, CpuSet]
    dedicated: Mapping[Key, CpuSet]
    numa_bindings: Mapping[Key, frozenset[int]]
    assignments: Mapping[Key, str]
    errors: Mapping[str, tuple[str, ...]]
    overlapping: frozenset[str] = frozenset()
    reclaim_overlap: bool = False
    warnings: tuple[str, ...] = ()

    def cpuset_of(self, key: Key) -> CpuSet | None:
        """The cpuset a container should run on, or None if it has none (invalid pod, unknown key)."""
        if key in self.dedicated:
            return self.dedicated[key]
        pool = self.assignments.get(key)
        return None if pool is None else self.pools.get(pool)


# ------------------------------------------------------------------------------------------ helpers


def proportional_sizes(quantities: Mapping[str, int], available: int) -> dict[str, int]:
    """katalyst getProportionalPoolsQuantityMap: ceil(avail x q / sum q), min 1, then take 1 from the
    largest pools (descending size, ties by name for determinism) until the total fits. The total
    can stay above ``available`` when there are more pools than CPUs; the caller handles that."""
    total = sum(quantities.values())
    if total <= 0:
        return {name: 1 for name in quantities}
    sizes = {name: max(math.ceil(available * (q / total)), 1) for name, q in quantities.items()}
    order = sorted(sizes, key=lambda name: (-sizes[name], name))
    current = sum(sizes.values())
    while current > available:
        before = current
        for name in order:
            if sizes[name] > 1 and current > 0:
                sizes[name] -= 1
                current -= 1
                if current == available:
                    break
        if before == current:
            break
    return sizes


def _take(details: CpuDetails, spec: PoolSpec, available: CpuSet, n: int) -> CpuSet:
    n = min(n, len(available))
    if spec.placement == "pack":
        return take_packed(details, available, n, full_cores=spec.full_cores, reverse=spec.reverse)
    return take_by_numa_balance(details, available, n, full_cores=spec.full_cores, reverse=spec.reverse)


def _hint_text(d: CpuDemand) -> str:
    if d.numa_ids is not None:
        return f"numa_ids={format_cpuset(d.numa_ids) or '(empty)'}"
    if d.numa_number:
        return f"numa_number={d.numa_number}"
    return "no NUMA hint"


def _who(d: CpuDemand) -> str:
    return f"pod {d.pod or d.uid} container {d.container!r} ({d.class_name}, {d.request:g} CPUs)"


@dataclass
class _Numa:
    """Mutable bookkeeping of one NUMA node during one allocate() call."""

    free: set[int]  # not static, not dedicated
    size: int  # CPUs minus static ones
    dedicated: int = 0  # dedicated containers placed here
    owner: str | None = None  # pod holding it exclusively
    snb_requests: float = 0.0
    snb_pods: int = 0


@dataclass
class _State:
    details: CpuDetails
    numas: dict[int, _Numa]
    dedicated: dict[Key, CpuSet] = field(default_factory=dict)
    bindings: dict[Key, frozenset[int]] = field(default_factory=dict)
    exclusive: set[Key] = field(default_factory=set)

    def commit_dedicated(self, d: CpuDemand, cpus: CpuSet, numas: frozenset[int], exclusive: bool) -> None:
        self.dedicated[d.key] = cpus
        self.bindings[d.key] = numas
        if exclusive:
            self.exclusive.add(d.key)
        for n in numas:
            node = self.numas[n]
            node.dedicated += 1
            node.free -= cpus
            if exclusive:
                node.owner = d.pod or d.uid

    def release_dedicated(self, key: Key) -> None:
        cpus = self.dedicated.pop(key)
        for n in self.bindings.pop(key):
            node = self.numas[n]
            node.free |= cpus & self.details.cpus_in_numas((n,))
            node.dedicated -= 1
            if key in self.exclusive:
                node.owner = None
        self.exclusive.discard(key)

    def usable(self, n: int) -> bool:
        return n in self.numas and self.numas[n].owner is None


# ------------------------------------------------------------------------------------------ validation


def _validate(d: CpuDemand, spec: PoolSpec | None, snb: bool, details: CpuDetails) -> list[str]:
    """katalyst.md §1.4, checked before placement; the fit checks come later."""
    out: list[str] = []
    if (
        not d.numa_binding
        and not d.numa_exclusive
        and d.numa_ids is None
        and d.numa_number is None
        and not d.distribute_evenly_across_numa
        and spec is not None
        and not spec.is_dedicated
        and math.isfinite(d.request)
        and d.request >= 0
    ):
        return out  # the common shared/reclaimed container: nothing to check
    who = _who(d)
    if not math.isfinite(d.request) or d.request < 0:
        out.append(f"{who}: the CPU request {d.request!r} is not a non-negative number; fix the pod spec")
        return out
    if spec is None:
        out.append(
            f"{who}: pool {d.pool!r} is not defined by the policy and there is no share template pool "
            "to create it from; fix the katalyst.kubewharf.io/cpu_enhancement cpuset_pool value or add the "
            "pool to the policy"
        )
        return out
    if d.numa_ids is not None:
        unknown = d.numa_ids - set(details.numa_ids)
        if unknown or not d.numa_ids:
            out.append(
                f"{who}: annotation katalyst.kubewharf.io/numa_ids={format_cpuset(d.numa_ids) or '(empty)'} "
                f"names NUMA nodes this node does not have (it has {format_cpuset(list(details.numa_ids))}); "
                "fix or remove the annotation"
            )
    if d.numa_number is not None and not 0 <= d.numa_number <= len(details.numa_ids):
        out.append(
            f"{who}: annotation katalyst.kubewharf.io/numa_number={d.numa_number} is outside "
            f"0..{len(details.numa_ids)} (the NUMA nodes of this node); fix the annotation"
        )
    numa_number = len(d.numa_ids) if d.numa_ids else (d.numa_number or 0)
    if spec.is_dedicated:
        if not d.numa_binding:
            out.append(
                f"{who}: dedicated_cores without NUMA binding is not supported (Katalyst rejects it too); "
                'add "numa_binding": "true" to the katalyst.kubewharf.io/memory_enhancement annotation, '
                "or run the pod as shared_cores"
            )
            return out
        if not d.numa_exclusive and math.ceil(d.request) == 0:
            out.append(
                f"{who}: a dedicated_cores container without a CPU request would get no CPUs of its own; "
                "give it a CPU request (requests = limits, whole cores), or add "
                '"numa_exclusive": "true" to own whole NUMA nodes'
            )
            return out
        if d.numa_exclusive and d.distribute_evenly_across_numa:
            out.append(
                f"{who}: numa_exclusive (memory_enhancement) and distribute_evenly_across_numa "
                "(cpu_enhancement) cannot be combined: an exclusive pod already owns whole NUMA nodes; "
                "remove one of them"
            )
        if d.numa_exclusive and d.full_pcpus_pairing:
            out.append(
                f"{who}: numa_exclusive (memory_enhancement) and full_pcpus_pairing (cpu_enhancement) "
                "cannot be combined: an exclusive pod already gets every thread of its NUMA nodes; "
                "remove one of them"
            )
        if not d.numa_exclusive:
            # allocateNumaBindingCPUs reads numa_number alone; calculateHints lets numa_ids count instead.
            if d.numa_ids is not None and len(d.numa_ids) > 1 and (d.numa_number or 0) <= 1:
                out.append(
                    f"{who}: a NUMA-bound, non-exclusive pod must fit on one NUMA node but its hint "
                    f"{_hint_text(d)} spans {len(d.numa_ids)}; set katalyst.kubewharf.io/numa_number to the "
                    'node count, or add "numa_exclusive": "true"'
                )
            elif numa_number <= 1 and math.ceil(d.request) > details.cpus_per_numa:
                out.append(
                    f"{who}: a NUMA-bound, non-exclusive pod must fit on one NUMA node, but it requests "
                    f"{d.request:g} CPUs and a node has {details.cpus_per_numa}; set "
                    "katalyst.kubewharf.io/numa_number to the number of nodes it may span, add "
                    '"numa_exclusive": "true", or lower the request'
                )
        if d.distribute_evenly_across_numa and numa_number > 1 and math.ceil(d.request) % numa_number:
            out.append(
                f"{who}: distribute_evenly_across_numa needs a request divisible by the {numa_number} NUMA "
                f"nodes of its hint, got {math.ceil(d.request)}; change the request or the numa_number"
            )
    elif snb and ((d.numa_ids is not None and len(d.numa_ids) > 1) or (d.numa_number or 0) > 1):
        out.append(
            f"{who}: shared_cores with numa_binding joins one per-NUMA pool, but its hint "
            f"{_hint_text(d)} spans more than one NUMA node; hint a single node "
            "(katalyst.kubewharf.io/numa_ids) or drop numa_binding"
        )
    return out


# ------------------------------------------------------------------------------------------ placement


def _room(state: _State, n: int) -> CpuSet:
    """The CPUs of node ``n`` a new non-exclusive dedicated container may take: its free CPUs minus
    the highest ids kept for the node's SNB pods (max(1, CPUPreciseCeil(their requests))). This
    mirrors the SNB admission check, which subtracts dedicated CPUs, so neither kind can starve the
    other's admitted requests, and an SNB pool never ends up empty."""
    node = state.numas[n]
    keep = max(1, cpu_precise_ceil(node.snb_requests)) if node.snb_pods else 0
    if not keep:
        return frozenset(node.free)
    ordered = sorted(node.free)
    return frozenset(ordered[: max(0, len(ordered) - keep)])


def _fits(state: _State, d: CpuDemand, nodes: tuple[int, ...], n: int) -> bool:
    """Can a non-exclusive dedicated container take ``n`` CPUs on ``nodes``? (katalyst calculateHints)"""
    rooms = [_room(state, x) for x in nodes]
    if d.distribute_evenly_across_numa:
        if n % len(nodes):
            return False
        per = n // len(nodes)
        if any(len(r) < per for r in rooms):
            return False
        if d.full_pcpus_pairing:
            cpc = state.details.cpus_per_core
            return all(
                state.details.free_cores(r, (x,)) >= per // cpc for x, r in zip(nodes, rooms, strict=True)
            )
        return True
    if sum(len(r) for r in rooms) < n:
        return False
    if d.full_pcpus_pairing:
        avail = frozenset(itertools.chain.from_iterable(rooms))
        return state.details.free_cores(avail, nodes) >= n // state.details.cpus_per_core
    return True


def _candidate_sets(state: _State, k: int) -> Iterable[tuple[int, ...]]:
    """NUMA node sets of size k, skipping sets that cross sockets when one socket could hold them
    (katalyst CheckNUMACrossSockets)."""
    details = state.details
    ids = [n for n in details.numa_ids if state.usable(n)]
    for combo in itertools.combinations(ids, k):
        if k <= details.numas_per_socket and k > 1:
            sockets = {details.socket_of[details.numa_cpus[n][0]] for n in combo}
            if len(sockets) > 1:
                continue
        yield combo


def _best(
    state: _State, combos: Iterable[tuple[int, ...]], ok: Callable[[tuple[int, ...]], bool]
) -> tuple[int, ...] | None:
    """Most free CPUs, ties to the lexicographically lowest node ids (combinations come sorted)."""
    best: tuple[int, ...] | None = None
    best_free = -1
    for combo in combos:
        if not ok(combo):
            continue
        free = sum(len(state.numas[n].free) for n in combo)
        if free > best_free:
            best, best_free = combo, free
    return best


def _place_exclusive(state: _State, d: CpuDemand, reserved: CpuSet) -> str | None:
    details = state.details
    need = math.ceil(d.request)

    def eligible(combo: tuple[int, ...]) -> bool:
        for n in combo:
            node = state.numas[n]
            # A node whose CPUs are all static adds nothing but memory: never part of an exclusive set.
            if node.owner is not None or node.dedicated or node.snb_pods or not node.free:
                return False
        return sum(len(state.numas[n].free) for n in combo) >= max(need, 1)

    combo: tuple[int, ...] | None
    if d.numa_ids is not None:
        combo = tuple(sorted(d.numa_ids))
        if not eligible(combo):
            return (
                f"{_who(d)}: numa_exclusive needs NUMA node(s) {format_cpuset(d.numa_ids)} from its numa_ids "
                "hint to be empty and large enough, but they already hold other NUMA-bound pods or have too "
                "few CPUs; pick empty nodes in katalyst.kubewharf.io/numa_ids or remove the hint"
            )
    else:
        k_min = max(1, math.ceil(need / max(details.cpus_per_numa, 1)))
        sizes: Iterable[int] = (d.numa_number,) if d.numa_number else range(k_min, len(details.numa_ids) + 1)
        combo = None
        for k in sizes:
            combo = _best(state, _candidate_sets(state, k), eligible)
            if combo is not None:
                break
        if combo is None:
            return (
                f"{_who(d)}: numa_exclusive needs {k_min if not d.numa_number else d.numa_number} empty NUMA "
                f"node(s) with {need} CPUs, and no such nodes are left (every node holds a dedicated or "
                "NUMA-bound shared pod); free a node or lower the request"
            )
    cpus = details.cpus_in_numas(combo) - reserved
    state.commit_dedicated(d, frozenset(cpus), frozenset(combo), exclusive=True)
    return None


def _place_dedicated(state: _State, d: CpuDemand) -> str | None:
    details = state.details
    need = math.ceil(d.request)
    if d.numa_ids is not None:
        hint = tuple(sorted(d.numa_ids))
        if any(not state.usable(n) for n in hint):
            taken = [n for n in hint if not state.usable(n)]
            return (
                f"{_who(d)}: its numa_ids hint {format_cpuset(d.numa_ids)} includes NUMA node(s) "
                f"{format_cpuset(list(taken))} held exclusively by another pod; pick other nodes in "
                "katalyst.kubewharf.io/numa_ids or remove the hint"
            )
        combo: tuple[int, ...] | None = hint if _fits(state, d, hint, need) else None
    else:
        combo = _best(state, _candidate_sets(state, _span(d)), lambda c: _fits(state, d, c, need))
    if combo is None:
        pairing = " as whole physical cores (full_pcpus_pairing)" if d.full_pcpus_pairing else ""
        evenly = " split evenly (distribute_evenly_across_numa)" if d.distribute_evenly_across_numa else ""
        return (
            f"{_who(d)}: no NUMA node set ({_hint_text(d)}) has {need} free CPUs{pairing}{evenly}; "
            "the node is full of dedicated pods: lower the request, relax the hint, or move the pod"
        )
    available = frozenset(itertools.chain.from_iterable(_room(state, n) for n in combo))
    if d.distribute_evenly_across_numa:
        cpus = take_evenly_across_numas(details, available, combo, need)
    else:
        cpus = take_by_topology(details, available, need)
    state.commit_dedicated(d, cpus, _mems(d, details, cpus, combo), exclusive=False)
    return None


def _span(d: CpuDemand) -> int:
    """How many NUMA nodes a non-exclusive dedicated container may span (numa_ids wins over numa_number)."""
    numa_number = len(d.numa_ids) if d.numa_ids else (d.numa_number or 0)
    return numa_number if numa_number > 1 else 1


def _mems(d: CpuDemand, details: CpuDetails, cpus: CpuSet, nodes: Iterable[int]) -> frozenset[int]:
    """cpuset.mems of a non-exclusive dedicated container: the hinted nodes when the pod names them
    (Katalyst binds memory to the hint), else the nodes its CPUs are on, so that feeding a plan back as
    ``previous`` reproduces it exactly."""
    if d.numa_ids is not None:
        return frozenset(d.numa_ids)
    return details.numas_of(cpus) or frozenset(nodes)


def _keep_previous(state: _State, d: CpuDemand, prev: CpuSet, reserved: CpuSet) -> bool:
    """Keep a dedicated container's previous cpuset when it still satisfies the demand exactly."""
    details = state.details
    if not prev or not prev <= details.cpus or prev & reserved:
        return False
    nodes = details.numas_of(prev)
    if d.numa_ids is not None and not nodes <= d.numa_ids:
        return False
    for n in nodes:
        node = state.numas[n]
        if node.owner is not None or not prev & details.cpus_in_numas((n,)) <= node.free:
            return False
    if d.numa_exclusive:
        if d.numa_ids is not None and nodes != d.numa_ids:
            return False
        if any(state.numas[n].dedicated or state.numas[n].snb_pods for n in nodes):
            return False
        if prev != details.cpus_in_numas(nodes) - reserved or len(prev) < math.ceil(d.request):
            return False
        state.commit_dedicated(d, prev, nodes, exclusive=True)
        return True
    if len(prev) != math.ceil(d.request) or len(nodes) > _span(d):
        return False
    if d.distribute_evenly_across_numa and len({len(prev & details.cpus_in_numas((n,))) for n in nodes}) != 1:
        return False
    state.commit_dedicated(d, prev, _mems(d, details, prev, nodes), exclusive=False)
    return True


# ------------------------------------------------------------------------------------------ allocate


def allocate(
    details: CpuDetails,
    pools: Sequence[PoolSpec],
    demands: Sequence[CpuDemand],
    previous: Mapping[Key, CpuSet] | None = None,
    *,
    reclaim_enabled: bool = True,
) -> PoolPlan:
    """Size and place every pool and dedicated container; see the module docstring for the order.

    ``reclaim_enabled=False`` is Katalyst's EnableReclaim=false (generatePoolsAndIsolation step 7):
    the reclaim pool keeps only its minimum and the surplus goes to the non-binding share pools,
    ``floor(surplus x size / total)`` each (at least 1), so latency-sensitive pods get the idle cores.

    ``demands`` should come in admission order (e.g. pod creation time): among new pods of the same
    kind, earlier ones are placed first, as Katalyst admits them. ``previous`` maps (uid, container)
    to the cpuset the container had; dedicated containers keep it while it is still valid, and SNB
    containers keep its NUMA node. Never raises for any demand list; problems go to ``errors``.
    """
    previous = previous or {}
    specs: dict[str, PoolSpec] = {}
    for s in pools:
        specs.setdefault(s.name, s)
    template = next((s for s in pools if s.kind == "share" and s.template and not s.per_numa), None)
    snb_spec = next((s for s in pools if s.kind == "share" and s.per_numa), None)
    all_cpus = details.cpus
    warnings: list[str] = []

    # 1. Static pools.
    static: dict[str, CpuSet] = {}
    claimed: set[int] = set()
    for s in pools:
        if not s.is_static or s.name in static:
            continue
        left = all_cpus - claimed
        if s.static_cpus is not None:
            cpus = s.static_cpus & left
            if len(cpus) < len(s.static_cpus):
                warnings.append(
                    f"static pool {s.name!r} names CPUs {format_cpuset(s.static_cpus - left)} that this node "
                    "lacks or another static pool holds; they were left out"
                )
        else:
            count = s.static_count or 0
            if count > len(left):
                warnings.append(f"static pool {s.name!r} wants {count} CPUs but only {len(left)} are left")
            cpus = take_by_numa_balance(
                details, left, min(count, len(left)), full_cores=s.full_cores, reverse=s.reverse
            )
        static[s.name] = cpus
        claimed |= cpus
    reserved = frozenset(claimed)

    # 2. Resolve and validate, per pod.
    errors: dict[str, list[str]] = {}
    resolved: list[tuple[CpuDemand, PoolSpec, str]] = []  # role: dedicated|snb|share|reclaim|static
    for d in demands:
        spec = specs.get(d.pool)
        if spec is None and template is not None:
            spec = template
        snb = spec is not None and spec.kind in ("share", "isolation") and (d.numa_binding or spec.per_numa)
        problems = _validate(d, spec, snb, details)
        if problems:
            errors.setdefault(d.uid, []).extend(problems)
            continue
        assert spec is not None
        if spec.is_dedicated:
            role = "dedicated"
        elif spec.is_static:
            role = "static"
        elif spec.kind == "reclaim" or spec.remainder:
            role = "reclaim"
        elif snb:
            role = "snb"
        else:
            role = "share"
        resolved.append((d, spec, role))
    resolved = [r for r in resolved if r[0].uid not in errors]

    numas = {
        n: _Numa(free=set(details.numa_cpus[n]) - reserved, size=len(set(details.numa_cpus[n]) - reserved))
        for n in details.numa_ids
    }
    state = _State(details, numas)

    def fail(d: CpuDemand, message: str) -> None:
        errors.setdefault(d.uid, []).append(message)

    dedicated = [r for r in resolved if r[2] == "dedicated"]
    snbs = [r for r in resolved if r[2] == "snb"]

    # 3a. Dedicated containers whose previous cpuset still fits.
    placed: set[Key] = set()
    for d, _, _ in dedicated:
        prev = previous.get(d.key)
        if prev is None:
            continue
        if _keep_previous(state, d, frozenset(prev), reserved):
            placed.add(d.key)

    # 3b. SNB containers already running on one node keep it (Katalyst never re-admits a running pod,
    # so no fit check); new hinted ones are admitted on their node if it has room.
    snb_numa: dict[Key, int] = {}

    def snb_fits(d: CpuDemand, n: int) -> bool:
        node = state.numas[n]
        return node.owner is None and len(node.free) - node.snb_requests >= max(d.request, 1e-3)

    def commit_snb(d: CpuDemand, n: int) -> None:
        snb_numa[d.key] = n
        state.numas[n].snb_requests += d.request
        state.numas[n].snb_pods += 1

    for d, _, _ in snbs:
        prev = previous.get(d.key)
        prev_nodes = details.numas_of(prev) if prev else frozenset()
        if len(prev_nodes) == 1 and (d.numa_ids is None or d.numa_ids == prev_nodes):
            (n,) = tuple(prev_nodes)
            if state.numas[n].owner is None:
                commit_snb(d, n)
                continue
    for d, _, _ in snbs:
        if d.numa_ids is None or d.key in snb_numa:
            continue
        (n,) = tuple(d.numa_ids)
        if snb_fits(d, n):
            commit_snb(d, n)
            continue
        owner = state.numas[n].owner
        why = f"is held exclusively by pod {owner}" if owner else "has too few CPUs left for the request"
        fail(
            d,
            f"{_who(d)}: shared_cores with numa_binding is hinted to NUMA node {n}, which {why}; "
            "hint another node in katalyst.kubewharf.io/numa_ids or remove the hint",
        )

    # 3c. New exclusive dedicated, then non-exclusive (hinted first), each in admission order.
    def still_valid(d: CpuDemand) -> bool:
        return d.uid not in errors and d.key not in placed

    for d, _, _ in dedicated:
        if d.numa_exclusive and still_valid(d):
            message = _place_exclusive(state, d, reserved)
            if message:
                fail(d, message)
    for hinted in (True, False):
        for d, _, _ in dedicated:
            if not d.numa_exclusive and still_valid(d) and (d.numa_ids is not None) == hinted:
                message = _place_dedicated(state, d)
                if message:
                    fail(d, message)

    # 3d. SNB containers without a hint: the node with the most room, ties to the lowest id.
    for d, _, _ in snbs:
        if d.key in snb_numa or d.uid in errors or d.numa_ids is not None:
            continue
        room = [(len(state.numas[n].free) - state.numas[n].snb_requests, n) for n in details.numa_ids]
        fitting = [(r, n) for r, n in room if snb_fits(d, n)]
        if not fitting:
            fail(
                d,
                f"{_who(d)}: shared_cores with numa_binding needs {d.request:g} CPUs on one NUMA node and no "
                "node has that much room left next to dedicated and other NUMA-bound pods; lower the "
                "request or drop numa_binding",
            )
            continue
        commit_snb(d, max(fitting, key=lambda rn: (rn[0], -rn[1]))[1])

    # A pod with any failed container gets nothing: roll back its dedicated placements.
    for key in [k for k in state.dedicated if k[0] in errors]:
        state.release_dedicated(key)
    live = [r for r in resolved if r[0].uid not in errors]

    # 4. SNB pools, per NUMA node.
    pool_cpus: dict[str, CpuSet] = dict(static)
    overlapping: set[str] = set()
    assignments: dict[Key, str] = {}
    snb_groups: dict[int, dict[str, float]] = {}
    snb_base: dict[str, PoolSpec] = {}
    for d, spec, role in live:
        if role != "snb":
            continue
        n = snb_numa[d.key]
        name = f"{d.pool}{NUMA_INFIX}{n}"
        snb_groups.setdefault(n, {})
        snb_groups[n][name] = snb_groups[n].get(name, 0.0) + d.request
        snb_base[name] = snb_spec or spec
        assignments[d.key] = name
        state.bindings[d.key] = frozenset((n,))
    for n, groups in sorted(snb_groups.items()):
        quantities = {}
        for name, total in groups.items():
            spec = snb_base[name]
            ratio = spec.from_requests if spec.per_numa and spec.from_requests else SNB_RATIO
            quantities[name] = max(1, spec.clamp(cpu_precise_ceil(total * ratio)))
        free = frozenset(state.numas[n].free)
        left = _fill(details, quantities, snb_base, free, pool_cpus, overlapping)
        state.numas[n].free = set(left)

    # 5. Non-binding pools on the NUMA nodes no pool is bound to.
    share_totals: dict[str, float] = {}
    share_spec: dict[str, PoolSpec] = {}
    for d, spec, role in live:
        if role == "share":
            share_totals[d.pool] = share_totals.get(d.pool, 0.0) + d.request
            share_spec[d.pool] = spec
            assignments[d.key] = d.pool
        elif role in ("static", "reclaim"):
            assignments[d.key] = d.pool
    bound = set(snb_groups)
    unbound = frozenset(c for n in details.numa_ids if n not in bound for c in state.numas[n].free)
    if share_totals:
        quantities = {}
        for name, total in share_totals.items():
            spec = share_spec[name]
            quantities[name] = max(1, spec.clamp(cpu_precise_ceil(total * (spec.from_requests or 1.0))))
        base = unbound
        if not base:
            base = frozenset(c for node in state.numas.values() for c in node.free)
            warnings.append(
                "every NUMA node with free CPUs is bound to a per-NUMA pool; the share pools "
                f"{', '.join(sorted(quantities))} use the per-NUMA pools' leftovers instead"
            )
        if not base:
            base = all_cpus - reserved - frozenset(itertools.chain.from_iterable(state.dedicated.values()))
            overlapping.update(quantities)
            overlapping.update(name for name, cpus in pool_cpus.items() if cpus & base)
            warnings.append(
                f"no CPU is left for the share pools {', '.join(sorted(quantities))}; they overlap the "
                "per-NUMA pools"
            )
        left = _fill(details, quantities, share_spec, base, pool_cpus, overlapping)
        used = base - left
        for node in state.numas.values():
            node.free -= used
        if not left and any(not pool_cpus[name] for name in quantities):
            warnings.append(
                f"share pools {', '.join(sorted(quantities))} have no CPU at all: dedicated and static "
                "pools hold the whole node"
            )

    # 6. Reclaim: the remainder, topped up to its minimum.
    reclaim_overlap = False
    reclaim_spec = next((s for s in pools if (s.kind == "reclaim" or s.remainder) and not s.is_static), None)
    if reclaim_spec is not None:
        remainder = frozenset(c for node in state.numas.values() for c in node.free)
        floor = reclaim_spec.min if reclaim_spec.min is not None else max(MIN_RECLAIM, len(details.numa_ids))
        quotas = reclaim_quotas(
            reclaim_spec, floor, {n: len(details.cpus_in_numas((n,))) for n in details.numa_ids}
        )
        if quotas is not None:
            floor = sum(quotas.values())
        if reclaim_spec.max is not None and len(remainder) > reclaim_spec.max:
            remainder = _take(details, reclaim_spec, remainder, reclaim_spec.max)
        if not reclaim_enabled and len(remainder) > floor and share_totals:
            remainder = _apportion_surplus(details, remainder, floor, share_spec, pool_cpus)
        reclaim = set(remainder)
        # katalyst reservedReclaimedCPUSet: TakeHTByNUMABalance over everything but the reserve.
        # qosd avoids dedicated CPUs while any other CPU exists (Katalyst's startup set may not).
        dedicated_cpus = frozenset(itertools.chain.from_iterable(state.dedicated.values()))
        tiers = (all_cpus - reserved - dedicated_cpus, all_cpus - reserved, all_cpus)
        scopes = (
            [(quotas[n], details.cpus_in_numas((n,))) for n in sorted(quotas)]
            if quotas is not None
            else [(floor, all_cpus)]
        )
        for want, scope in scopes:
            for pool in tiers:
                short = want - len(reclaim & scope)
                candidates = (pool & scope) - reclaim
                if short <= 0 or not candidates:
                    continue
                take = min(short, len(candidates))
                reclaim |= take_by_numa_balance(details, candidates, take, full_cores=False)
        reclaim_overlap = len(reclaim) > len(remainder)
        pool_cpus[reclaim_spec.name] = frozenset(reclaim)

    return PoolPlan(
        pools=MappingProxyType(pool_cpus),
        dedicated=MappingProxyType(dict(state.dedicated)),
        numa_bindings=MappingProxyType({k: v for k, v in state.bindings.items() if k[0] not in errors}),
        assignments=MappingProxyType({k: v for k, v in assignments.items() if k[0] not in errors}),
        errors=MappingProxyType({uid: tuple(msgs) for uid, msgs in errors.items()}),
        overlapping=frozenset(overlapping),
        reclaim_overlap=reclaim_overlap,
        warnings=tuple(warnings),
    )


def ramp_up_cpus(plan: PoolPlan, all_cpus: CpuSet, held: Iterable[str]) -> CpuSet:
    """katalyst QRM's ramp-up cpuset (rumpUpPooledCPUs): every CPU but those of the ``held`` pools
    (static reserve and system pools), the dedicated containers and the NUMA-bound pools."""
    taken: set[int] = set()
    for name in held:
        taken |= plan.pools.get(name, EMPTY_CPUS)
    for cpus in plan.dedicated.values():
        taken |= cpus
    for name, cpus in plan.pools.items():
        if NUMA_INFIX in name:
            taken |= cpus
    return frozenset(all_cpus - taken)


def reclaim_quotas(spec: PoolSpec, floor: int, numa_cpus: Mapping[int, int]) -> dict[int, int] | None:
    """The remainder pool's CPUs per NUMA node (``numa_cpus``: node -> its CPU count); None when
    its min counts over the whole node. katalyst: with numaMinReclaimedResourceRatioForAllocate,
    max(numaMinReclaimedResourceForAllocate, ceil(ratio x CPUs of the node)) each; else
    GetCoreNumReservedForReclaim's split."""
    if spec.min_numa_ratio is not None:
        ratio = spec.min_numa_ratio
        return {n: max(floor, math.ceil(ratio * count)) for n, count in numa_cpus.items()}
    return numa_quotas(floor, numa_cpus) if spec.min_per_numa else None


def numa_quotas(total: int, numa_ids: Iterable[int]) -> dict[int, int]:
    """katalyst GetCoreNumReservedForReclaim: ``total`` CPUs split over the NUMA nodes, each at
    least 1 (floor(total / #NUMA) otherwise)."""
    ids = sorted(numa_ids)
    if not ids:
        return {}
    each = max(1, total // len(ids))
    return {n: each for n in ids}


def _apportion_surplus(
    details: CpuDetails,
    remainder: CpuSet,
    floor: int,
    share_spec: Mapping[str, PoolSpec],
    pool_cpus: dict[str, CpuSet],
) -> CpuSet:
    """Katalyst step 7 (reclaim disabled): hand CPUs above the reclaim minimum to the share pools in
    proportion to their sizes, each at least 1, largest pools first; returns what reclaim keeps."""
    surplus = len(remainder) - floor
    names = sorted(share_spec, key=lambda n: (-len(pool_cpus.get(n, frozenset())), n))
    total = sum(len(pool_cpus.get(n, frozenset())) for n in names) or len(names)
    left = set(remainder)
    remaining = surplus
    for name in names:
        if remaining <= 0:
            break
        size = len(pool_cpus.get(name, frozenset())) or 1
        extra = min(remaining, max(1, surplus * size // total))
        taken = _take(details, share_spec[name], frozenset(left), extra)
        pool_cpus[name] = frozenset(pool_cpus.get(name, frozenset()) | taken)
        left -= taken
        remaining -= len(taken)
    return frozenset(left)


def _fill(
    details: CpuDetails,
    quantities: Mapping[str, int],
    spec_of: Mapping[str, PoolSpec],
    available: CpuSet,
    out: dict[str, CpuSet],
    overlapping: set[str],
) -> CpuSet:
    """Give each pool its quantity from ``available`` (names in sorted order, as Katalyst sorts them):
    exact sizes when they fit, else proportional, else every pool gets all of ``available``.
    Returns what is left."""
    sizes: Mapping[str, int] = quantities
    if sum(quantities.values()) > len(available):
        sizes = proportional_sizes(quantities, len(available))
        if sum(sizes.values()) > len(available):
            for name in quantities:
                out[name] = available
            overlapping.update(quantities)
            return EMPTY_CPUS
    left = available
    for name in sorted(sizes):
        cpus = _take(details, spec_of[name], left, sizes[name])
        out[name] = cpus
        left = left - cpus
    return left
