"""Topology-aware CPU taking (engine.features.pools.cpuset) against Katalyst's calculator.

Table rows re-express katalyst-core's numbers (``dynamicpolicy/calculator/cpu_assignment_test.go``
and the cpusets that ``dynamicpolicy/policy_test.go`` TestAllocate expects from the reserve and
reclaim takers); each row names its anchor. Property tests cover what the tables cannot enumerate.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.features.pools.cpuset import (
    CpuDetails,
    cpu_precise_ceil,
    take_by_numa_balance,
    take_by_topology,
    take_evenly_across_numas,
    take_full_cores_on_numa,
    take_packed,
)
from engine.model.facts import Cpu, Topology
from engine.model.units import format_cpuset, parse_cpuset


def katalyst_dummy(cpu_num: int, socket_num: int, numa_num: int) -> Topology:
    """katalyst machine.GenerateDummyCPUTopology: core k holds CPUs k and k + cpu_num/2; NUMA j holds
    cores j*c..(j+1)*c-1 with c = cpus-per-NUMA/2; L3 id = NUMA id. (16,2,4): NUMA0 = 0,1,8,9,
    NUMA1 = 2,3,10,11, NUMA2 = 4,5,12,13, NUMA3 = 6,7,14,15; sockets {0,1} and {2,3}."""
    cpus = []
    per_socket = numa_num // socket_num
    half = cpu_num // numa_num // 2
    for s in range(socket_num):
        for j in range(s * per_socket, (s + 1) * per_socket):
            for k in range(j * half, (j + 1) * half):
                cpus.append(Cpu(id=k, core=k, socket=s, numa=j, l3=j))
                cpus.append(Cpu(id=k + cpu_num // 2, core=k, socket=s, numa=j, l3=j))
    return Topology(cpus=tuple(cpus))


def formula(n: int, place: Callable[[int], dict[str, int]]) -> Topology:
    return Topology(cpus=tuple(Cpu(id=i, **place(i)) for i in range(n)))


# 16 CPUs, 4 NUMA nodes of 4 CPUs, 2 threads per core, 2 sockets (the pools tests' node).
T16 = formula(16, lambda i: {"numa": i // 4, "core": i // 2, "socket": i // 8})
D16 = CpuDetails.of(T16)
DUMMY = CpuDetails.of(katalyst_dummy(16, 2, 4))
ALL = DUMMY.cpus
RESERVED = parse_cpuset(
    "0,2"
)  # katalyst getTestDynamicPolicyWithoutInitialization: TakeHTByNUMABalance(all, 2)


def cs(text: str) -> frozenset[int]:
    return parse_cpuset(text)


# --------------------------------------------------------------------------- CpuDetails


def test_details_index_the_dummy_topology() -> None:
    """katalyst GenerateDummyCPUTopology(16, 2, 4): the layout every policy_test case runs on."""
    assert DUMMY.numa_ids == (0, 1, 2, 3)
    assert DUMMY.numa_cpus[0] == (0, 1, 8, 9)
    assert DUMMY.socket_cpus[1] == (4, 5, 6, 7, 12, 13, 14, 15)
    assert DUMMY.siblings(9) == (1, 9)
    assert (DUMMY.cpus_per_core, DUMMY.cpus_per_numa, DUMMY.numas_per_socket) == (2, 4, 2)
    assert DUMMY.free_cores(ALL - RESERVED) == 6


def test_details_do_not_depend_on_row_order() -> None:
    """A core's id is its lowest thread (kubelet's unique core id), so sysfs numbering is irrelevant."""
    shuffled = Topology(cpus=tuple(reversed(katalyst_dummy(16, 2, 4).cpus)))
    assert CpuDetails.of(shuffled) == DUMMY
    assert hash(CpuDetails.of(shuffled)) == hash(DUMMY)


# --------------------------------------------------------------------------- NUMA balance

BALANCE_CASES = [
    # (anchor, details, available, n, full_cores, reverse, expected)
    (
        "getTestDynamicPolicyWithoutInitialization: reserve = TakeHTByNUMABalance(all, 2); TestAllocate system_cores/reserve expects 0,2",
        DUMMY,
        "0-15",
        2,
        False,
        False,
        "0,2",
    ),
    (
        "TestAllocate 'req for reclaimed_cores main container': initReclaimPool TakeHTByNUMABalance(all - reserve, 4)",
        DUMMY,
        "1,3-15",
        4,
        False,
        False,
        "1,3-4,6",
    ),
    (
        "TakeHTByNUMABalanceReversely (--enable-reserve-cpu-reversely): highest thread of each NUMA node",
        DUMMY,
        "0-15",
        2,
        False,
        True,
        "9,11",
    ),
    ("TakeByNUMABalance: one whole core from NUMA 0", DUMMY, "0-15", 2, True, False, "0,8"),
    ("TakeByNUMABalance: cores round-robin over NUMA nodes", DUMMY, "0-15", 6, True, False, "0,2,4,8,10,12"),
    (
        "TakeByNUMABalance: odd n, cores then one thread from NUMA 0",
        DUMMY,
        "0-15",
        5,
        True,
        False,
        "0-2,8,10",
    ),
    ("TakeByNUMABalanceReversely: last free core of each node", DUMMY, "0-15", 4, True, True, "1,3,9,11"),
    ("TakeByNUMABalance on a node with CPU i on NUMA i//4", D16, "0-15", 4, True, False, "0-1,4-5"),
    ("TakeHTByNUMABalance on a node with CPU i on NUMA i//4", D16, "0-15", 3, False, False, "0,4,8"),
    (
        "TakeByNUMABalance skips the split core 0-1 for the free core 2-3",
        D16,
        "0,2-15",
        2,
        True,
        False,
        "2-3",
    ),
    (
        "TakeByNUMABalance with no whole core left: threads round-robin",
        D16,
        "0,2,4,6,8",
        4,
        True,
        False,
        "0,2,4,8",
    ),
    ("TakeByNUMABalance n=0 is empty", D16, "0-15", 0, True, False, ""),
]


@pytest.mark.parametrize(
    ("anchor", "details", "available", "n", "full_cores", "reverse", "expected"),
    BALANCE_CASES,
    ids=[c[0][:60] for c in BALANCE_CASES],
)
def test_take_by_numa_balance(
    anchor: str, details: CpuDetails, available: str, n: int, full_cores: bool, reverse: bool, expected: str
) -> None:
    """Anchors: katalyst calculator TakeByNUMABalance / TakeHTByNUMABalance (+ Reversely); see ``anchor``."""
    got = take_by_numa_balance(details, cs(available), n, full_cores=full_cores, reverse=reverse)
    assert format_cpuset(got) == expected, anchor


def test_take_by_numa_balance_refuses_more_than_available() -> None:
    """katalyst returns "not enough cpus available to satisfy request"; qosd raises with both counts."""
    with pytest.raises(ValueError, match="cannot take 5 CPUs: only 4"):
        take_by_numa_balance(D16, cs("0-3"), 5)
    with pytest.raises(ValueError, match="must not be negative"):
        take_by_numa_balance(D16, cs("0-3"), -1)
    # CPUs the node does not have are not available, whatever the caller passes.
    with pytest.raises(ValueError, match="only 2"):
        take_by_numa_balance(D16, cs("14-17"), 3)


PACK_CASES = [
    ("pack fills NUMA 0 before NUMA 1", "0-15", 6, False, "0-5"),
    ("pack from the top with highFirst: core 14-15, then thread 13", "0-15", 3, True, "13-15"),
    ("pack takes whole cores of later nodes before splitting one", "0,2-15", 4, False, "2-5"),
]


@pytest.mark.parametrize(
    ("name", "available", "n", "reverse", "expected"), PACK_CASES, ids=[c[0] for c in PACK_CASES]
)
def test_take_packed(name: str, available: str, n: int, reverse: bool, expected: str) -> None:
    """qosd's ``placement: pack`` (no Katalyst counterpart): whole cores node by node, then threads."""
    got = take_packed(D16, cs(available), n, full_cores=True, reverse=reverse)
    assert format_cpuset(got) == expected, name


# --------------------------------------------------------------------------- topology best fit

# 16 CPUs, 2 sockets (one NUMA node each) of 4 two-thread cores, no L3 ids.
SOCKETS_2X8 = formula(16, lambda i: {"numa": i // 8, "socket": i // 8, "core": i // 2})

TOPOLOGY_CASES = [
    # (anchor, topology, available, n, expected)
    (
        "TestTakeByTopology 'socket level allocation': a full socket",
        formula(16, lambda i: {"numa": i // 8, "socket": i // 8, "core": i // 2}),
        "0-15",
        8,
        "0-7",
    ),
    (
        "TestTakeByTopology 'core level allocation': 4 CPUs = the whole socket 0",
        formula(8, lambda i: {"numa": i // 4, "socket": i // 4, "core": i // 2}),
        "0-7",
        4,
        "0-3",
    ),
    (
        "TestTakeByTopology 'complex topology with partial allocation'",
        formula(16, lambda i: {"numa": i // 8, "socket": i // 4, "core": i // 2}),
        "0-3,8-11",
        6,
        "0-3,8-9",
    ),
    (
        "TestTakeByTopology 'whole L3 cache allocation with L3 cache alignment'",
        formula(16, lambda i: {"numa": i // 8, "socket": i // 8, "core": i // 2, "l3": i // 4}),
        "0-15",
        4,
        "0-3",
    ),
    (
        "TestTakeByTopology 'cross-socket allocation with L3 cache alignment' (contains 0 and 3)",
        formula(16, lambda i: {"numa": i // 8, "socket": i // 8, "core": i // 2, "l3": i // 4}),
        "0-15",
        10,
        "0-9",
    ),
    (
        "TestTakeByTopology 'L3 cache alignment enabled not enough a L3 cache'",
        formula(384, lambda i: {"numa": i % 4, "socket": i % 2, "core": i % 192, "l3": i % 24}),
        "1,25,49,73,97,120-121,144-145,168-169,192-193,217,241,265,289,312-313,336-337,360-361",
        8,
        "1,25,49,73,193,217,241,265",
    ),
    (
        "TestTakeByTopologyWithL3CacheComplexity 'L3 cache alignment with partial cache'",
        formula(24, lambda i: {"numa": i // 12, "socket": i // 12, "core": i // 2, "l3": i // 6}),
        "0-15",
        8,
        "0-5,12-13",
    ),
    (
        "TestTakeByTopologyWithL3CacheComplexity 'L3 cache alignment with exact cache size'",
        formula(24, lambda i: {"numa": i // 12, "socket": i // 12, "core": i // 2, "l3": i // 6}),
        "0-11",
        12,
        "0-11",
    ),
    (
        "TestTakeByTopologyPerformance 'large scale allocation'",
        formula(128, lambda i: {"numa": i // 32, "socket": i // 32, "core": i // 2, "l3": i // 8}),
        "0-127",
        64,
        "0-63",
    ),
    (
        "TestTakeByTopologyPerformance 'fragmented CPU allocation'",
        formula(128, lambda i: {"numa": i // 32, "socket": i // 32, "core": i // 2, "l3": i // 8}),
        ",".join(str(i) for i in range(0, 128, 3)),
        10,
        "0,3,6,9,12,15,18,24,27,30",
    ),
    # Best fit with sockets of unequal free CPUs (every anchor case above frees them equally): the
    # fullest-used socket (fewest free CPUs) is consumed first, then the fullest-used core.
    (
        "best fit: socket 0 has 6 free, socket 1 has 8: a whole core from socket 0",
        SOCKETS_2X8,
        "2-15",
        2,
        "2-3",
    ),
    (
        "best fit: the socket with fewer free CPUs wins even with the higher id",
        SOCKETS_2X8,
        "0-9,12-13",
        2,
        "8-9",
    ),
    (
        "best fit: a single thread comes from the half-used core of the fuller socket",
        SOCKETS_2X8,
        "3-15",
        1,
        "3",
    ),
    (
        "best fit: a whole free socket first, the rest from the fullest-used core",
        SOCKETS_2X8,
        "1-15",
        9,
        "1,8-15",
    ),
    (
        "best fit: exactly a socket's worth takes the whole free socket, not the fuller one's cores",
        SOCKETS_2X8,
        "1-15",
        8,
        "8-15",
    ),
    (
        "best fit: three cores from the fuller socket before the emptier one",
        SOCKETS_2X8,
        "0-5,8-15",
        6,
        "0-5",
    ),
    (
        "TestTakeByTopology 'zero CPU requirement'",
        formula(8, lambda i: {"numa": i % 2, "socket": i % 2, "core": i // 2}),
        "0-7",
        0,
        "",
    ),
    (
        "TestTakeByTopology 'exact CPU requirement'",
        formula(4, lambda i: {"numa": 0, "socket": 0, "core": i // 2}),
        "0-3",
        4,
        "0-3",
    ),
]


@pytest.mark.parametrize(
    ("anchor", "topology", "available", "n", "expected"),
    TOPOLOGY_CASES,
    ids=[c[0][:70] for c in TOPOLOGY_CASES],
)
def test_take_by_topology(anchor: str, topology: Topology, available: str, n: int, expected: str) -> None:
    """Anchor: katalyst calculator TakeByTopology(alignByL3Caches=true); see ``anchor`` for the case."""
    got = take_by_topology(CpuDetails.of(topology), cs(available), n)
    assert format_cpuset(got) == expected, anchor


def test_take_by_topology_insufficient() -> None:
    """TestTakeByTopology 'insufficient CPUs' / 'allocation failure - all strategies exhausted'."""
    details = CpuDetails.of(formula(4, lambda i: {"numa": 0, "socket": 0, "core": i // 2}))
    with pytest.raises(ValueError, match="cannot take 5"):
        take_by_topology(details, cs("0-3"), 5)
    with pytest.raises(ValueError, match="cannot take 1"):
        take_by_topology(details, frozenset(), 1)


NUMA_CASES = [
    # (anchor, numa_ids, n, expected) on the dummy node minus the reserve 0,2
    ("TestAllocate 'dedicated_cores with numa_binding & not numa_exclusive': 2 on NUMA 0", (0,), 2, "1,9"),
    ("TestAllocate 'full pcpus pairing enabled': 2 on NUMA 2 is one whole core", (2,), 2, "4,12"),
    ("TestAllocate 'numa number more than 1 can cross numa': 6 on NUMAs 2-3", (2, 3), 6, "4-6,12-14"),
]


@pytest.mark.parametrize(
    ("anchor", "numas", "n", "expected"), NUMA_CASES, ids=[c[0][:60] for c in NUMA_CASES]
)
def test_take_full_cores_on_numa(anchor: str, numas: tuple[int, ...], n: int, expected: str) -> None:
    """Anchor: katalyst allocateNumaBindingCPUs (TakeByTopology inside the hint's nodes)."""
    got = take_full_cores_on_numa(DUMMY, ALL - RESERVED, numas, n)
    assert format_cpuset(got) == expected, anchor


def test_take_full_cores_on_numa_refuses_a_short_node() -> None:
    """TestAllocate 'full pcpus pairing ... returns error if there are not enough physical cores':
    4 CPUs on NUMA 0, which has 1,8,9 once the reserve holds 0."""
    with pytest.raises(ValueError, match=r"NUMA node\(s\) \[0\] have 3 free CPUs, 4 are needed"):
        take_full_cores_on_numa(DUMMY, ALL - RESERVED, (0,), 4)


EVEN_CASES = [
    ("TestAllocate 'distribute evenly across numa enabled and numa number more than 1'", 4, "4,6,12,14"),
    (
        "TestAllocate 'full pcpus pairing enabled can allocate HT after physical cores are allocated'",
        6,
        "4-7,12,14",
    ),
]


@pytest.mark.parametrize(("anchor", "n", "expected"), EVEN_CASES, ids=[c[0][:60] for c in EVEN_CASES])
def test_take_evenly_across_numas(anchor: str, n: int, expected: str) -> None:
    """Anchor: katalyst allocateEvenlyAcrossNUMAs on hint {2,3} of the dummy node."""
    assert format_cpuset(take_evenly_across_numas(DUMMY, ALL - RESERVED, (2, 3), n)) == expected, anchor


def test_take_evenly_refuses_an_uneven_split() -> None:
    """katalyst: "unable to evenly distribute cpus across numa nodes"."""
    with pytest.raises(ValueError, match="cannot be split evenly"):
        take_evenly_across_numas(DUMMY, ALL, (2, 3), 5)


@pytest.mark.parametrize(
    ("x", "expected"),
    [
        (118.00000000000001, 118),
        (0.6, 1),
        (2.0001, 2),
        (2.001, 3),
        (0.0001, 0),
        (4.0, 4),
        (0.1 + 0.2 + 0.7, 1),
    ],
)
def test_cpu_precise_ceil(x: float, expected: int) -> None:
    """katalyst state.CPUPreciseCeil, whose comment gives the 118.00000000000001 -> 118 case; below a
    millicore a fraction is dropped (2.0001 -> 2), from one millicore up it rounds up (2.001 -> 3)."""
    assert cpu_precise_ceil(x) == expected


# --------------------------------------------------------------------------- properties


@st.composite
def topologies(draw: st.DrawFn) -> Topology:
    sockets = draw(st.integers(1, 2))
    numa_per_socket = draw(st.integers(1, 2))
    cores = draw(st.integers(1, 4))
    threads = draw(st.integers(1, 2))
    cpus = []
    core_id = 0
    for s in range(sockets):
        for j in range(numa_per_socket):
            for _ in range(cores):
                for t in range(threads):
                    # Linux-style numbering: second threads after all first threads.
                    cpus.append((core_id, t, s, s * numa_per_socket + j))
                core_id += 1
    total = core_id
    return Topology(cpus=tuple(Cpu(id=c + t * total, core=c, socket=s, numa=n, l3=n) for c, t, s, n in cpus))


@st.composite
def takes(draw: st.DrawFn) -> tuple[CpuDetails, frozenset[int], int]:
    details = CpuDetails.of(draw(topologies()))
    available = frozenset(draw(st.sets(st.sampled_from(sorted(details.cpus)))))
    n = draw(st.integers(0, len(available)))
    return details, available, n


@settings(max_examples=300, deadline=None)
@given(takes(), st.booleans(), st.booleans())
def test_numa_balance_properties(
    case: tuple[CpuDetails, frozenset[int], int], full: bool, reverse: bool
) -> None:
    """Subset of available, exactly n CPUs, deterministic, and with full cores and an even n it never
    splits a core while enough whole free cores exist (the point of TakeByNUMABalance's core phase)."""
    details, available, n = case
    got = take_by_numa_balance(details, available, n, full_cores=full, reverse=reverse)
    assert got <= available
    assert len(got) == n
    assert got == take_by_numa_balance(
        details, frozenset(sorted(available)), n, full_cores=full, reverse=reverse
    )
    if full and details.cpus_per_core == 2 and n % 2 == 0 and details.free_cores(available) >= n // 2:
        assert all(set(details.siblings(c)) <= got for c in got)


@settings(max_examples=300, deadline=None)
@given(takes())
def test_topology_and_pack_properties(case: tuple[CpuDetails, frozenset[int], int]) -> None:
    """The best-fit and packed takers return exactly n available CPUs, deterministically."""
    details, available, n = case
    for take in (take_by_topology, take_packed):
        got = take(details, available, n)
        assert got <= available and len(got) == n
        assert got == take(details, available, n)


@settings(max_examples=200, deadline=None)
@given(takes())
def test_take_more_than_available_always_raises(case: tuple[CpuDetails, frozenset[int], int]) -> None:
    details, available, _ = case
    for take in (take_by_numa_balance, take_by_topology, take_packed):
        with pytest.raises(ValueError):
            take(details, available, len(available) + 1)
