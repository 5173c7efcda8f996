"""Topology-aware CPU taking: which logical CPUs a pool or a container gets, as pure functions.

Two anchors from Katalyst's QRM cpu plugin (``dynamicpolicy/calculator/cpu_assignment.go``):

* **NUMA balance** (``TakeByNUMABalance`` / ``TakeHTByNUMABalance`` and their ``...Reversely``
  twins). Pools and the reserve are spread over NUMA nodes so no node is drained first. The
  whole-core variant takes free physical cores round-robin over NUMA nodes (the i-th free core of
  node 0, of node 1, ..., then the (i+1)-th), and then single threads round-robin, one per node
  per round. The HT variant skips the core phase. ``take_by_numa_balance(full_cores=...)`` covers
  both: ``full_cores=True`` is TakeByNUMABalance (share pools), ``full_cores=False`` is
  TakeHTByNUMABalance (Katalyst's reserve and its startup "reserved reclaimed" set).
* **Topology best fit** (``TakeByTopology`` with ``alignByL3Caches=true``). This is what
  dedicated_cores containers with numa_binding get inside their hinted NUMA node(s): whole sockets,
  then an L3-cache-aligned subset, then whole cores, then single threads, always preferring the
  fullest-used socket/core (fewest free CPUs) so fragmentation stays low.

Ordering conventions carried over from the anchor: NUMA nodes are visited in ascending id order
even in reverse mode (only CPUs and cores within a node are reversed); a core's id is its lowest
thread id, like kubelet's unique core id, so the order does not depend on how sysfs numbers cores.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from engine.model.facts import Topology

CpuSet = frozenset[int]
EMPTY_CPUS: CpuSet = frozenset()


def _proxy(d: dict[int, tuple[int, ...]]) -> Mapping[int, tuple[int, ...]]:
    return MappingProxyType(d)


_LAST_INDEXED: list[tuple[Topology, CpuDetails]] = []  # the last topology indexed, and its index


@dataclass(frozen=True)
class CpuDetails:
    """Per-NUMA, per-socket, per-core and per-L3 CPU lists of one topology, built once.

    The identity fields (``cores`` and the per-CPU placement rows) are tuples, so a CpuDetails is
    hashable and can key the engine's plan cache; the lookup maps are derived and excluded from
    equality and hashing.
    """

    # (cpu, numa, socket, l3 or -1) rows, ascending by cpu id.
    rows: tuple[tuple[int, int, int, int], ...]
    # Each physical core's threads, ascending; cores ordered by their lowest thread id.
    cores: tuple[tuple[int, ...], ...]
    cpus: CpuSet = field(compare=False)
    numa_ids: tuple[int, ...] = field(compare=False)
    socket_ids: tuple[int, ...] = field(compare=False)
    numa_of: Mapping[int, int] = field(compare=False, repr=False)
    socket_of: Mapping[int, int] = field(compare=False, repr=False)
    l3_of: Mapping[int, int] = field(compare=False, repr=False)
    core_of: Mapping[int, int] = field(compare=False, repr=False)
    numa_cpus: Mapping[int, tuple[int, ...]] = field(compare=False, repr=False)
    socket_cpus: Mapping[int, tuple[int, ...]] = field(compare=False, repr=False)
    l3_cpus: Mapping[int, tuple[int, ...]] = field(compare=False, repr=False)
    numa_cores: Mapping[int, tuple[int, ...]] = field(compare=False, repr=False)
    socket_cores: Mapping[int, tuple[int, ...]] = field(compare=False, repr=False)
    cpus_per_core: int = field(compare=False)
    cpus_per_numa: int = field(compare=False)
    numas_per_socket: int = field(compare=False)

    @classmethod
    def of(cls, topology: Topology) -> CpuDetails:
        """Index a topology. Only NUMA nodes that hold CPUs count (memory-only nodes cannot run work).

        Topologies are frozen and sources hand back the same object every tick, so the last index is
        kept and returned for the same object."""
        if _LAST_INDEXED and _LAST_INDEXED[0][0] is topology:
            return _LAST_INDEXED[0][1]
        details = cls._of(topology)
        _LAST_INDEXED[:] = [(topology, details)]
        return details

    @classmethod
    def _of(cls, topology: Topology) -> CpuDetails:
        by_core: dict[tuple[int, int], list[int]] = {}
        rows: list[tuple[int, int, int, int]] = []
        for c in sorted(topology.cpus, key=lambda c: c.id):
            by_core.setdefault((c.socket, c.core), []).append(c.id)
            rows.append((c.id, c.numa, c.socket, -1 if c.l3 is None else c.l3))
        cores = tuple(sorted((tuple(sorted(ids)) for ids in by_core.values()), key=lambda t: t[0]))
        return cls._build(tuple(rows), cores)

    @classmethod
    def _build(
        cls, rows: tuple[tuple[int, int, int, int], ...], cores: tuple[tuple[int, ...], ...]
    ) -> CpuDetails:
        numa_of = {cpu: numa for cpu, numa, _, _ in rows}
        socket_of = {cpu: socket for cpu, _, socket, _ in rows}
        l3_of = {cpu: l3 for cpu, _, _, l3 in rows if l3 >= 0}
        core_of = {cpu: i for i, core in enumerate(cores) for cpu in core}
        numa_cpus: dict[int, list[int]] = {}
        socket_cpus: dict[int, list[int]] = {}
        l3_cpus: dict[int, list[int]] = {}
        for cpu, numa, socket, l3 in rows:
            numa_cpus.setdefault(numa, []).append(cpu)
            socket_cpus.setdefault(socket, []).append(cpu)
            if l3 >= 0:
                l3_cpus.setdefault(l3, []).append(cpu)
        numa_cores: dict[int, list[int]] = {}
        socket_cores: dict[int, list[int]] = {}
        for i, core in enumerate(cores):
            numa_cores.setdefault(numa_of[core[0]], []).append(i)
            socket_cores.setdefault(socket_of[core[0]], []).append(i)
        numa_sockets = {numa_of[cpu]: socket_of[cpu] for cpu, *_ in rows}
        n_numa = len(numa_cpus) or 1
        n_socket = len(socket_cpus) or 1
        return cls(
            rows=rows,
            cores=cores,
            cpus=frozenset(numa_of),
            numa_ids=tuple(sorted(numa_cpus)),
            socket_ids=tuple(sorted(socket_cpus)),
            numa_of=MappingProxyType(numa_of),
            socket_of=MappingProxyType(socket_of),
            l3_of=MappingProxyType(l3_of),
            core_of=MappingProxyType(core_of),
            numa_cpus=_proxy({k: tuple(v) for k, v in numa_cpus.items()}),
            socket_cpus=_proxy({k: tuple(v) for k, v in socket_cpus.items()}),
            l3_cpus=_proxy({k: tuple(v) for k, v in l3_cpus.items()}),
            numa_cores=_proxy({k: tuple(v) for k, v in numa_cores.items()}),
            socket_cores=_proxy({k: tuple(v) for k, v in socket_cores.items()}),
            cpus_per_core=max((len(c) for c in cores), default=1),
            # katalyst GetNUMANodesCountToFitCPUReq: ceil(NumCPUs / #NUMA), the full node size.
            cpus_per_numa=-(-len(rows) // n_numa),
            numas_per_socket=max(1, len(set(numa_sockets)) // n_socket),
        )

    def cpus_in_numas(self, numas: Iterable[int]) -> CpuSet:
        return frozenset(cpu for n in numas for cpu in self.numa_cpus.get(n, ()))

    def numas_of(self, cpus: Iterable[int]) -> frozenset[int]:
        return frozenset(self.numa_of[c] for c in cpus if c in self.numa_of)

    def siblings(self, cpu: int) -> tuple[int, ...]:
        return self.cores[self.core_of[cpu]]

    def free_cores(self, available: CpuSet, numas: Iterable[int] | None = None) -> int:
        """How many physical cores have every thread in ``available`` (optionally within some NUMA nodes)."""
        nodes = self.numa_ids if numas is None else tuple(numas)
        return sum(
            1 for n in nodes for i in self.numa_cores.get(n, ()) if all(c in available for c in self.cores[i])
        )


def _check(details: CpuDetails, available: CpuSet, n: int) -> CpuSet:
    free = available & details.cpus
    if n < 0:
        raise ValueError(f"cannot take {n} CPUs: the count must not be negative")
    if n > len(free):
        raise ValueError(
            f"cannot take {n} CPUs: only {len(free)} of the offered CPUs exist on this node and are free"
        )
    return free


def take_by_numa_balance(
    details: CpuDetails,
    available: CpuSet,
    n: int,
    *,
    full_cores: bool = True,
    reverse: bool = False,
) -> CpuSet:
    """``n`` CPUs of ``available``, balanced over NUMA nodes (katalyst TakeByNUMABalance family).

    Why balanced: a pool sized from requests should not drain one node's memory bandwidth and
    caches while another sits idle, and it keeps later NUMA-bound pods placeable anywhere. Whole
    cores first (when ``full_cores`` and ``n`` is at least a core) because a pool that owns both
    threads of a core never shares its L1/L2 with a neighbour. Raises ValueError when ``n`` exceeds
    the available CPUs.
    """
    free = _check(details, available, n)
    if n == 0:
        return EMPTY_CPUS
    taken: set[int] = set()
    need = n
    if full_cores and need >= details.cpus_per_core:
        per_numa: list[list[tuple[int, ...]]] = []
        for numa in details.numa_ids:
            ids = details.numa_cores.get(numa, ())
            order = reversed(ids) if reverse else iter(ids)
            per_numa.append([details.cores[i] for i in order if all(c in free for c in details.cores[i])])
        depth = max((len(cores) for cores in per_numa), default=0)
        for i in range(depth):
            for cores in per_numa:
                if i < len(cores) and need >= len(cores[i]):
                    taken.update(cores[i])
                    need -= len(cores[i])
            if need == 0:
                return frozenset(taken)
    # Single threads: one per NUMA node per round, lowest (highest when reverse) free id first.
    queues: list[list[int]] = []
    for numa in details.numa_ids:
        left = [c for c in details.numa_cpus[numa] if c in free and c not in taken]
        queues.append(left if reverse else left[::-1])  # pop() from the end
    while need > 0:
        for q in queues:
            if q and need > 0:
                taken.add(q.pop())
                need -= 1
    return frozenset(taken)


def take_packed(
    details: CpuDetails,
    available: CpuSet,
    n: int,
    *,
    full_cores: bool = True,
    reverse: bool = False,
) -> CpuSet:
    """``n`` CPUs filling NUMA nodes one after another (placement ``pack``), whole cores first.

    Katalyst has no packed pool taker; this is qosd's ``placement: pack`` for pools that should
    stay on as few NUMA nodes as possible (e.g. to leave whole nodes free for numa_exclusive pods).
    Nodes are visited in ascending id order (descending when ``reverse``).
    """
    free = _check(details, available, n)
    taken: list[int] = []
    need = n
    numas = details.numa_ids[::-1] if reverse else details.numa_ids
    if full_cores:
        for numa in numas:
            ids = details.numa_cores.get(numa, ())
            for i in reversed(ids) if reverse else ids:
                core = details.cores[i]
                if need >= len(core) and all(c in free for c in core):
                    taken.extend(core)
                    need -= len(core)
    chosen = set(taken)
    for numa in numas:
        cpus = details.numa_cpus[numa]
        for c in reversed(cpus) if reverse else cpus:
            if need == 0:
                return frozenset(chosen)
            if c in free and c not in chosen:
                chosen.add(c)
                need -= 1
    return frozenset(chosen)


class _Accumulator:
    """Mutable working state of one take_by_topology call (katalyst cpuAccumulator)."""

    def __init__(self, details: CpuDetails, free: CpuSet, need: int) -> None:
        self.d = details
        self.free = set(free)
        self.need = need
        self.result: set[int] = set()

    def take(self, cpus: Iterable[int]) -> None:
        for c in cpus:
            if c in self.free:
                self.free.discard(c)
                self.result.add(c)
                self.need -= 1

    def _count(self, cpus: Iterable[int]) -> int:
        return sum(1 for c in cpus if c in self.free)

    def sorted_sockets(self) -> list[int]:
        """Sockets with free CPUs, fewest free first (best fit), ties by id; counted over free CPUs only."""
        counts: dict[int, int] = {}
        for c in self.free:
            s = self.d.socket_of[c]
            counts[s] = counts.get(s, 0) + 1
        return sorted(counts, key=lambda s: (counts[s], s))

    def sorted_cores(self) -> list[int]:
        """Cores with free CPUs, by socket order, then fewest free first, ties by core id."""
        counts: dict[int, int] = {}
        for c in self.free:
            i = self.d.core_of[c]
            counts[i] = counts.get(i, 0) + 1
        rank = {s: r for r, s in enumerate(self.sorted_sockets())}
        socket_of = self.d.socket_of
        cores = self.d.cores
        return sorted(counts, key=lambda i: (rank[socket_of[cores[i][0]]], counts[i], i))

    def take_full_sockets(self) -> None:
        for s in self.sorted_sockets():
            cpus = self.d.socket_cpus[s]
            if self._count(cpus) == len(cpus) and self.need >= len(cpus):
                self.take(cpus)

    def align_l3(self) -> None:
        """katalyst tryAlignL3Caches: an exact-size cache, else the tightest larger one, else the largest."""
        while self.need > 0:
            counts = {l3: k for l3, cpus in self.d.l3_cpus.items() if (k := self._count(cpus))}
            if not counts:
                return
            ids = sorted(counts)
            exact = [l3 for l3 in ids if counts[l3] == self.need]
            larger = [l3 for l3 in ids if counts[l3] > self.need]
            if exact:
                best = exact[0]
            elif larger:
                best = min(larger, key=lambda l3: (counts[l3] - self.need, l3))
            else:
                best = max(ids, key=lambda l3: (counts[l3], -l3))
            cache = [c for c in self.d.l3_cpus[best] if c in self.free]
            if self.need >= len(cache):
                self.take(cache)
            else:
                # Restrict the rest of the search to this cache: the result then shares one L3.
                self.free.intersection_update(cache)
                return

    def take_full_cores(self) -> None:
        for i in self.sorted_cores():
            core = self.d.cores[i]
            if self._count(core) == len(core) and self.need >= len(core):
                self.take(core)

    def take_remaining(self) -> None:
        for i in self.sorted_cores():
            for c in self.d.cores[i]:
                if self.need == 0:
                    return
                if c in self.free:
                    self.take((c,))


def take_by_topology(details: CpuDetails, available: CpuSet, n: int, *, align_l3: bool = True) -> CpuSet:
    """``n`` CPUs of ``available`` by topology best fit (katalyst TakeByTopology).

    Why best fit: a dedicated container should share as few hardware units as possible with its
    neighbours, so whole sockets, then one L3 cache, then whole cores come before single threads;
    and the fullest-used socket and core are consumed first so large free units stay intact for
    later pods. Raises ValueError when ``n`` exceeds the available CPUs.
    """
    free = _check(details, available, n)
    if n == 0:
        return EMPTY_CPUS
    acc = _Accumulator(details, free, n)
    acc.take_full_sockets()
    if acc.need > 0 and align_l3 and details.l3_cpus:
        acc.align_l3()
    if acc.need > 0:
        acc.take_full_cores()
    if acc.need > 0:
        acc.take_remaining()
    if acc.need > 0:  # only reachable if an L3 restriction left too little, which best fit never picks
        raise ValueError(f"cannot take {n} CPUs by topology from {len(free)} free CPUs")
    return frozenset(acc.result)


def take_full_cores_on_numa(
    details: CpuDetails, available: CpuSet, numa_ids: Iterable[int], n: int
) -> CpuSet:
    """Exactly ``n`` CPUs on the given NUMA node(s), whole cores first.

    This is Katalyst's dedicated_cores + numa_binding (not exclusive) placement: the hint's NUMA
    nodes bound the search, then TakeByTopology picks inside them. Raises ValueError when the nodes
    do not hold ``n`` available CPUs.
    """
    nodes = tuple(numa_ids)
    pool = available & details.cpus_in_numas(nodes)
    if n > len(pool):
        raise ValueError(f"NUMA node(s) {sorted(nodes)} have {len(pool)} free CPUs, {n} are needed")
    return take_by_topology(details, pool, n)


def take_evenly_across_numas(
    details: CpuDetails, available: CpuSet, numa_ids: Iterable[int], n: int
) -> CpuSet:
    """``n / len(numa_ids)`` CPUs on each node (katalyst allocateEvenlyAcrossNUMAs, for
    distribute_evenly_across_numa). Raises ValueError when ``n`` does not divide evenly or a node
    is short."""
    nodes = tuple(sorted(set(numa_ids)))
    if not nodes or n % len(nodes):
        raise ValueError(f"{n} CPUs cannot be split evenly over NUMA node(s) {list(nodes)}")
    per = n // len(nodes)
    out: set[int] = set()
    for numa in nodes:
        out |= take_full_cores_on_numa(details, available, (numa,), per)
    return frozenset(out)


def cpu_precise_ceil(x: float) -> int:
    """katalyst CPUPreciseCeil: ceil(trunc(x*1000)/1000), so 118.00000000000001 cores stay 118."""
    return math.ceil(math.trunc(x * 1000) / 1000)
