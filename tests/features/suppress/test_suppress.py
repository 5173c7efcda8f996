"""CPU suppression strategies: Koordinator's CPUSuppress arithmetic, cpuset picker and cfs quota, and
Katalyst's suppression-tolerance eviction and reclaim-pool floor, checked against the anchors' own
test numbers (cited per test) plus cases of our own where the anchors leave an edge untested."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.features.suppress.strategy import (
    SuppressUsage,
    UsageSample,
    be_suppress_amount,
    pick_suppress_cpus,
    reserved_for_reclaim,
    suppress_cfs_quota,
    suppress_cpuset,
)
from engine.model.facts import Cpu, Topology
from engine.model.units import parse_cpuset


def cpus(*rows: tuple[int, int, int, int]) -> tuple[Cpu, ...]:
    """Processors as (cpu id, core id, socket id, numa id) rows, like the anchors' ProcessorInfo lists."""
    return tuple(Cpu(id=i, core=c, socket=s, numa=n) for i, c, s, n in rows)


# Two sockets x one NUMA each, 2 cores x 2 HTs per socket (the anchors' 8-CPU node).
EIGHT = cpus(
    (0, 0, 0, 0), (1, 0, 0, 0), (2, 1, 0, 0), (3, 1, 0, 0),
    (4, 2, 1, 1), (5, 2, 1, 1), (6, 3, 1, 1), (7, 3, 1, 1),
)  # fmt: skip

# Four sockets over two NUMA nodes, 2 cores x 2 HTs per socket (the anchors' 16-CPU node).
SIXTEEN = cpus(
    (0, 0, 0, 0), (1, 0, 0, 0), (2, 1, 0, 0), (3, 1, 0, 0),
    (4, 2, 1, 0), (5, 2, 1, 0), (6, 3, 1, 0), (7, 3, 1, 0),
    (8, 4, 2, 1), (9, 4, 2, 1), (10, 5, 2, 1), (11, 5, 2, 1),
    (12, 6, 3, 1), (13, 6, 3, 1), (14, 7, 3, 1), (15, 7, 3, 1),
)  # fmt: skip


# ---------------------------------------------------------------- Koordinator: suppress amount


def ls(name: str, cores: float) -> UsageSample:
    return UsageSample(name, cores, non_be=True)


def be(name: str, cores: float) -> UsageSample:
    return UsageSample(name, cores, non_be=False)


AMOUNT_CASES = [
    # id, usage, thresholdPercent, minPercent, expected milli, expected systemUsed milli
    ("empty input", SuppressUsage(0, 0, 0.0), 70, None, 0, 0),
    # A pod with a metric but no pod object counts as non-BE: 20 x 70% - 8 - max(11 - 12, 0) = 6.
    ("missing podMeta", SuppressUsage(20000, 20000, 11.0, (ls("abc", 8), be("def", 4))), 70, None, 6000, 0),
    # 20 x 70% - 8 - (12 - 8 - 2) = 4
    (
        "ls and be pods",
        SuppressUsage(20000, 20000, 12.0, (ls("podA", 8), be("podB", 2))),
        70,
        None,
        4000,
        2000,
    ),
    # 20 x 70% - 8 - 1 - (12 - 8 - 2 - 1) = 4
    (
        "ls host app",
        SuppressUsage(20000, 20000, 12.0, (ls("podA", 8), be("podB", 2)), (ls("test-ls-app", 1),)),
        70,
        None,
        4000,
        1000,
    ),
    # A BE host app in the besteffort cgroup is not subtracted, only left out of systemUsed: 14 - 8 - 1 = 5.
    (
        "be host app",
        SuppressUsage(20000, 20000, 12.0, (ls("podA", 8), be("podB", 2)), (be("test-be-app", 1),)),
        70,
        None,
        5000,
        1000,
    ),
    # 14 - 8 - 2 = 4 is raised to 20 x 60% = 12.
    ("min percent", SuppressUsage(20000, 20000, 12.0, (ls("podA", 8), be("podB", 2))), 70, 60, 12000, 2000),
    # Test_cpuSuppress_suppressBECPU on a 16-core node: 16 x 70% - 8 - 0 = 3.2 and 11.2 - 8 - 2 = 1.2.
    (
        "16 cores, missing podMeta",
        SuppressUsage(16000, 16000, 12.0, (ls("ls-pod", 8), be("be-pod", 4))),
        70,
        None,
        3200,
        0,
    ),
    (
        "16 cores, ls and be pods",
        SuppressUsage(16000, 16000, 12.0, (ls("ls-pod", 8), be("be-pod", 2))),
        70,
        None,
        1200,
        2000,
    ),
]


@pytest.mark.parametrize(
    ("usage", "threshold", "min_percent", "milli", "system"),
    [c[1:] for c in AMOUNT_CASES],
    ids=[c[0] for c in AMOUNT_CASES],
)
def test_suppress_amount_matches_koordinator(
    usage: SuppressUsage, threshold: int, min_percent: int | None, milli: int, system: int
) -> None:
    """Test_cpuSuppress_calculateBESuppressCPU (all cases) and the two usage set-ups of
    Test_cpuSuppress_suppressBECPU: the BE budget and its systemUsed term."""
    result = be_suppress_amount(usage, threshold, min_percent)
    assert result.milli == milli
    assert result.system_used_milli == system
    assert result.floored == (min_percent is not None and milli == usage.capacity_milli * min_percent // 100)
    assert result.inputs()["suppressMilli"] == milli


OWN_AMOUNT_CASES = [
    # Kubelet reservation (capacity - allocatable = 2 cores) lifts systemUsed from 1 to 2: 14 - 8 - 2 = 4.
    ("kubelet reserved", SuppressUsage(20000, 18000, 11.0, (ls("a", 8), be("b", 2))), 70, 4000, 2000, 2000),
    # The annotation reservation wins when larger: systemUsed 3, 14 - 8 - 3 = 3.
    (
        "annotation reserved",
        SuppressUsage(20000, 18000, 11.0, (ls("a", 8), be("b", 2)), annotation_reserved_milli=3000),
        70,
        3000,
        3000,
        3000,
    ),
    # Allocatable above capacity never makes the reservation negative.
    (
        "allocatable above capacity",
        SuppressUsage(20000, 21000, 10.0, (ls("a", 8), be("b", 2))),
        70,
        6000,
        0,
        0,
    ),
    # Each term is truncated to milli on its own: nonBE int(1000.5) = 1000, system int((1.5 - 1.1672) x 1000)
    # = int(332.8) = 332; 2500 x 65 / 100 = 1625.
    (
        "milli truncation",
        SuppressUsage(2500, 2500, 1.5, (ls("a", 1.0005), be("b", 0.1667))),
        65,
        1625 - 1000 - 332,
        332,
        0,
    ),
    # Integer division of the threshold: 3333 x 65 / 100 = 2166 (not 2166.45).
    ("threshold truncation", SuppressUsage(3333, 3333, 0.0), 65, 2166, 0, 0),
    # No clamp at zero: LS above the threshold gives a negative budget for the policies to floor.
    ("negative budget", SuppressUsage(4000, 4000, 4.0, (ls("a", 4),)), 65, 2600 - 4000, 0, 0),
]


@pytest.mark.parametrize(
    ("usage", "threshold", "milli", "system", "reserved"),
    [c[1:] for c in OWN_AMOUNT_CASES],
    ids=[c[0] for c in OWN_AMOUNT_CASES],
)
def test_suppress_amount_reservations_and_rounding(
    usage: SuppressUsage, threshold: int, milli: int, system: int, reserved: int
) -> None:
    """koordinator.md §3 CalculateFilterPodsUsed: systemUsed = max(node - pods - apps, 0, nodeReserved),
    nodeReserved = max(capacity - allocatable, annotation); Koordinator truncates each term to milli."""
    result = be_suppress_amount(usage, threshold)
    assert (result.milli, result.system_used_milli, result.node_reserved_milli) == (milli, system, reserved)


def test_suppress_amount_min_percent_only_raises() -> None:
    """cpuSuppressMinPercent is a floor, not a target: a budget above it is kept as is."""
    usage = SuppressUsage(20000, 20000, 4.0, (ls("a", 2), be("b", 2)))
    result = be_suppress_amount(usage, 70, 10)
    assert (result.milli, result.floor_milli, result.floored) == (12000, 2000, False)


# ---------------------------------------------------------------- Koordinator: picking CPUs


EIGHT_SPREAD = cpus(
    (0, 0, 0, 0), (1, 1, 0, 0), (2, 2, 1, 1), (3, 3, 1, 1),
    (4, 0, 0, 0), (5, 1, 0, 0), (6, 2, 1, 1), (7, 3, 1, 1),
)  # fmt: skip

SIXTEEN_SHUFFLED = tuple(SIXTEEN[i] for i in (12, 13, 14, 2, 3, 11, 4, 5, 8, 15, 0, 1, 9, 10, 6, 7))

PICK_CASES = [
    ("insufficient (empty)", 0, (), ()),
    # HT siblings numbered apart (0/4): the pair is still found, the odd CPU comes from the other NUMA.
    ("scatter numa, stack HTs 0", 3, EIGHT_SPREAD, (0, 4, 2)),
    ("scatter numa, stack HTs 1", 3, EIGHT, (0, 1, 4)),
    ("scatter numa and sockets", 5, SIXTEEN, (0, 1, 4, 5, 8)),
    ("regardless of initial order", 5, SIXTEEN_SHUFFLED, (0, 1, 4, 5, 8)),
]


@pytest.mark.parametrize(
    ("n", "procs", "expected"), [c[1:] for c in PICK_CASES], ids=[c[0] for c in PICK_CASES]
)
def test_pick_matches_koordinator(n: int, procs: tuple[Cpu, ...], expected: tuple[int, ...]) -> None:
    """Test_calculateBESuppressCPUSetPolicy: every case, output compared in pick order."""
    assert pick_suppress_cpus(n, procs) == expected


OWN_PICK_CASES = [
    ("more than there are", 9, EIGHT, ()),
    ("all of them", 8, EIGHT, (0, 1, 4, 5, 2, 3, 6, 7)),
    # No HT at all: phase 1 finds no pair and phase 2 round-robins over the two NUMA buckets.
    ("no siblings", 3, cpus((0, 0, 0, 0), (1, 1, 0, 0), (2, 2, 1, 1), (3, 3, 1, 1)), (0, 2, 1)),
    # The larger bucket goes first even with higher CPU ids: its pair, not the smaller bucket's.
    (
        "larger bucket first",
        2,
        cpus((0, 0, 0, 0), (1, 0, 0, 0), (2, 1, 1, 1), (3, 1, 1, 1), (4, 2, 1, 1)),
        (2, 3),
    ),
    # SMT-4: one pair per bucket per round; the odd CPU comes from the bucket where phase 1 stopped.
    ("smt4", 5, cpus(*((i, i // 4, 0, 0) for i in range(8)), (8, 2, 1, 1), (9, 2, 1, 1)), (0, 1, 8, 9, 2)),
    # Phase 2 starts at the bucket after phase 1's last pair, not at bucket 0.
    (
        "singles resume round-robin",
        3,
        cpus((0, 0, 0, 0), (1, 0, 0, 0), (2, 1, 0, 0), (3, 2, 1, 1), (4, 3, 1, 1)),
        (0, 1, 3),
    ),
]


@pytest.mark.parametrize(
    ("n", "procs", "expected"), [c[1:] for c in OWN_PICK_CASES], ids=[c[0] for c in OWN_PICK_CASES]
)
def test_pick_edges(n: int, procs: tuple[Cpu, ...], expected: tuple[int, ...]) -> None:
    """koordinator.md §3.1 picking algorithm, at the edges the anchor's table does not reach."""
    assert pick_suppress_cpus(n, procs) == expected


def test_pick_rejects_duplicate_ids() -> None:
    """A cpuset is a set: the same CPU listed twice is a caller bug, not something to pick twice."""
    with pytest.raises(ValueError, match="distinct"):
        pick_suppress_cpus(1, cpus((0, 0, 0, 0), (0, 0, 0, 0)))


@st.composite
def processors(draw: st.DrawFn) -> list[Cpu]:
    """A random sub-topology: NUMA ids grow with sockets (as on real machines), 1-4 threads per core."""
    out: list[Cpu] = []
    numa = core = cid = 0
    for socket in range(draw(st.integers(1, 3))):
        for _ in range(draw(st.integers(1, 2))):
            for _ in range(draw(st.integers(1, 4))):
                for _ in range(draw(st.integers(1, 4))):
                    out.append(Cpu(id=cid, core=core, socket=socket, numa=numa))
                    cid += 1
                core += 1
            numa += 1
    kept = draw(st.lists(st.sampled_from(out), unique=True, min_size=0, max_size=len(out)))
    return draw(st.permutations(kept))


def siblings(a: Cpu, b: Cpu) -> bool:
    return (a.numa, a.socket, a.core) == (b.numa, b.socket, b.core)


@settings(max_examples=400, deadline=None)
@given(procs=processors(), data=st.data())
def test_pick_properties(procs: list[Cpu], data: st.DataObject) -> None:
    """Subset, exact size (or empty when short), no duplicates, order-independent, and HT pairs first:
    the picks open with sibling pairs, and once a single CPU is taken no free pair is left."""
    n = data.draw(st.integers(-1, len(procs) + 2))
    got = pick_suppress_cpus(n, procs)
    by_id = {p.id: p for p in procs}
    assert set(got) <= set(by_id)
    assert len(set(got)) == len(got)
    assert len(got) == (max(n, 0) if n <= len(procs) else 0)
    shuffled = list(procs)
    random.Random(data.draw(st.integers(0, 2**32))).shuffle(shuffled)
    assert pick_suppress_cpus(n, shuffled) == got

    pairs = 0
    while 2 * pairs + 1 < len(got) and siblings(by_id[got[2 * pairs]], by_id[got[2 * pairs + 1]]):
        pairs += 1
    singles = [by_id[i] for i in got[2 * pairs :]]
    assert not any(siblings(a, b) for k, a in enumerate(singles) for b in singles[k + 1 :])
    if len(singles) >= 2:
        free = [p for p in procs if p.id not in set(got[: 2 * pairs])]
        assert not any(siblings(a, b) for k, a in enumerate(free) for b in free[k + 1 :])


# ---------------------------------------------------------------- Koordinator: cpuset policy


def cs(text: str) -> frozenset[int]:
    return parse_cpuset(text)


# The anchors' pods: an LSR pod bound to 0,6 and an LSE pod bound to 7; LS is everything else.
CPUSET_CASES = [
    # id, suppress milli, topology, old, lsr, ls, expected cpuset ("" = keep the old one)
    ("scale lower", 3000, EIGHT, cs("2-3,6-7"), cs("0,6"), cs("1-5"), "2-4"),
    ("scale up", 3000, EIGHT, cs("6-7"), cs("0,6"), cs("1-5"), "2-4"),
    # Reserved CPU 3 (node annotation or exclusive SYSTEM cpuset): one of the three comes from LSR.
    ("reserved 3", 3000, EIGHT, cs("2-3,6-7"), cs("0,6"), cs("1-2,4-5"), "0,4-5"),
    # Reserved 1-6: LSR keeps only 0, LS nothing: floor(3 x 1/1) = 3 from one CPU fails, nothing is written.
    ("reserved 1-6", 3000, EIGHT, cs("2-3,6-7"), cs("0"), frozenset(), ""),
    ("reserved 0-1,5-6", 3000, EIGHT, cs("2-3,6-7"), frozenset(), cs("2-4"), "2-4"),
    # Test_cpuSuppress_suppressBECPU "calculate be suppress cpus correctly": 1.2 cores -> 2 CPUs, one HT pair.
    ("16 cpus, 1.2 cores", 1200, SIXTEEN, cs("0-9"), frozenset(), cs("0-15"), "0-1"),
]


@pytest.mark.parametrize(
    ("milli", "topo", "old", "lsr", "ls_", "expected"),
    [c[1:] for c in CPUSET_CASES],
    ids=[c[0] for c in CPUSET_CASES],
)
def test_cpuset_policy_matches_koordinator(
    milli: int,
    topo: tuple[Cpu, ...],
    old: frozenset[int],
    lsr: frozenset[int],
    ls_: frozenset[int],
    expected: str,
) -> None:
    """Test_cpuSuppress_adjustByCPUSet, Test_cpuSuppress_adjustByCPUSet_withCPUsReservedFromNodeAnno,
    Test_cpuSuppress_adjustByCPUSet_withSystemQOSResourceFromNodeAnno (the reserved or exclusive CPUs
    removed from the pools, as the engine does) and the cpuset case of Test_cpuSuppress_suppressBECPU."""
    result = suppress_cpuset(milli, Topology(topo), old, lsr, ls_)
    assert result.cpus == cs(expected)
    assert result.apply == bool(expected)


OWN_CPUSET_CASES = [
    # id, milli, topology size, old size, min cpus, step percent, expected target
    ("step cap", 8000, 16, 2, 2, 10, 4),  # 8 wanted, +ceil(1.6) = 2 over 2
    ("shrink is not capped", 1000, 16, 12, 2, 10, 2),
    ("negative budget floors to min", -500, 16, 8, 2, 10, 2),
    ("min cpus parameter", 500, 16, 8, 4, 10, 4),
    ("30 cpus step by ceil(3.0) = 3", 20000, 30, 2, 2, 10, 5),
    ("step percent parameter", 20000, 30, 2, 2, 20, 8),
    ("fraction of a core rounds up", 2001, 16, 8, 2, 10, 3),
]


@pytest.mark.parametrize(
    ("milli", "size", "old_size", "min_cpus", "step", "target"),
    [c[1:] for c in OWN_CPUSET_CASES],
    ids=[c[0] for c in OWN_CPUSET_CASES],
)
def test_cpuset_sizing(milli: int, size: int, old_size: int, min_cpus: int, step: int, target: int) -> None:
    """koordinator.md §3.1 steps 3-4: ceil(suppress/1000), min 2, growth capped at ceil(CPUs x step%);
    every picked CPU is in the pool."""
    topo = tuple(Cpu(id=i, core=i // 2, socket=0, numa=0) for i in range(size))
    result = suppress_cpuset(
        milli,
        topo,
        frozenset(range(old_size)),
        frozenset(),
        frozenset(range(size)),
        min_cpus=min_cpus,
        step_percent=step,
    )
    assert result.target == target
    assert len(result.cpus) == target


def test_cpuset_lsr_share_is_floored_and_proportional() -> None:
    """lsrShare = floor(cpus x |LSR| / (|LSR| + |LS|)): 5 x 4/16 = 1.25 -> 1 from LSR, 4 from LS."""
    result = suppress_cpuset(5000, SIXTEEN, cs("0-15"), cs("12-15"), cs("0-11"))
    assert result.lsr_share == 1
    assert len(result.cpus & cs("12-15")) == 1
    assert len(result.cpus & cs("0-11")) == 4
    assert result.inputs()["lsrShare"] == 1


def test_cpuset_overlapping_pools_count_as_lsr_and_unknown_cpus_are_ignored() -> None:
    """A CPU owned by an LSR pod is LSR even if the LS set also lists it; CPUs outside the topology are
    never picked (Koordinator iterates its processor list)."""
    result = suppress_cpuset(2000, EIGHT, cs("0-7"), cs("0-1"), cs("0-5,40-41"))
    assert (result.lsr_pool, result.ls_pool) == (2, 4)
    assert result.cpus <= cs("0-5")


def test_cpuset_empty_pools_keep_the_old_cpuset() -> None:
    """With every CPU reserved or LSE there is nothing to pick; the anchor would divide by zero, qosd
    keeps the current cpuset and says why."""
    result = suppress_cpuset(4000, EIGHT, cs("0-7"), frozenset(), frozenset())
    assert (result.apply, result.cpus) == (False, frozenset())
    assert "stays" in result.formula


# ---------------------------------------------------------------- Koordinator: cfs quota policy

QUOTA_CASES = [
    # id, suppress milli, current quota, capacity milli, expected quota (None = skip)
    ("increase above step", 20000, 1_000_000, 80000, 1_000_000 + 800_000),
    ("increase within step", 20000, 1_900_000, 80000, 2_000_000),
    ("suppress", 20000, 2_400_000, 80000, 2_000_000),
    ("dead band bypass", 20000, 1_980_000, 80000, None),
    ("min quota not bypassed", 1, 80_000, 80000, 2000),
    ("from unset, no step", 20000, -1, 80000, 2_000_000),
    # Test_cpuSuppress_suppressBECPU cfsQuota cases on a 16-core node.
    ("16 cores, missing podMeta", 3200, 1_000_000, 16000, 320_000),
    ("16 cores, ls and be pods", 1200, 1_500_000, 16000, 120_000),
]


@pytest.mark.parametrize(
    ("milli", "current", "capacity", "expected"),
    [c[1:] for c in QUOTA_CASES],
    ids=[c[0] for c in QUOTA_CASES],
)
def test_cfs_quota_matches_koordinator(milli: int, current: int, capacity: int, expected: int | None) -> None:
    """Test_cpuSuppress_adjustByCfsQuota (all cases) and the cfsQuota cases of Test_cpuSuppress_suppressBECPU."""
    result = suppress_cfs_quota(milli, current, capacity)
    assert result.quota == expected
    assert result.inputs()["quota"] == expected


OWN_QUOTA_CASES = [
    # Negative budgets truncate toward zero (-1500m -> -150000) and then floor at 2000.
    ("negative budget", -1500, -1, 16000, {}, 2000),
    # Already at the floor and staying there: written again (the floor is never dead-banded).
    ("floor again", 0, 2000, 16000, {}, 2000),
    # Capacity 2.5 cores counts as 3 (Quantity.Value() rounds up): dead band 3000, so 1000 -> skip.
    ("capacity rounds up", 1010, 100_000, 2500, {}, None),
    ("dead band parameter", 20000, 1_980_000, 80000, {"dead_band_percent": 0.1}, 2_000_000),
    ("step parameter", 20000, 1_000_000, 80000, {"step_percent": 5}, 1_400_000),
    ("min parameter", 1, 80_000, 80000, {"min_quota": 5000}, 5000),
]


@pytest.mark.parametrize(
    ("milli", "current", "capacity", "kw", "expected"),
    [c[1:] for c in OWN_QUOTA_CASES],
    ids=[c[0] for c in OWN_QUOTA_CASES],
)
def test_cfs_quota_edges(
    milli: int, current: int, capacity: int, kw: dict[str, Any], expected: int | None
) -> None:
    """koordinator.md §3.1 cfsQuota policy at the edges and with each parameter moved off its default."""
    result = suppress_cfs_quota(milli, current, capacity, **kw)
    assert result.quota == expected
    assert (result.quota is None) == result.reason.startswith("|")


# ---------------------------------------------------------------- Katalyst: reserved for reclaim


def topo(numas: int, cpus_total: int) -> Topology:
    per = cpus_total // numas
    return Topology(tuple(Cpu(id=i, core=i, socket=0, numa=i // per) for i in range(cpus_total)))


RESERVED_CASES = [
    # id, topology, min reclaimed cores, numa ratio, expected
    ("reserved for reclaim", topo(2, 16), 4, 0.0, {0: 2, 1: 2}),
    ("reserved all for reclaim", topo(2, 16), 16, 0.0, {0: 8, 1: 8}),
    ("less than numa num", topo(8, 16), 4, 0.0, dict.fromkeys(range(8), 1)),
    ("numa size ratio", topo(2, 64), 4, 0.05, {0: 2, 1: 2}),  # max(2, ceil(0.05 x 32) = 2)
    # TestGetCoreNumReservedForReclaim on 4 NUMA nodes.
    ("reserve 4", topo(4, 32), 4, 0.0, dict.fromkeys(range(4), 1)),
    ("reserve 2", topo(4, 32), 2, 0.0, dict.fromkeys(range(4), 1)),
    ("reserve 3", topo(4, 32), 3, 0.0, dict.fromkeys(range(4), 1)),
    ("reserve 0", topo(4, 32), 0, 0.0, dict.fromkeys(range(4), 1)),
    ("reserve 1", topo(4, 32), 1, 0.0, dict.fromkeys(range(4), 1)),
    ("reserve 8", topo(4, 32), 8, 0.0, dict.fromkeys(range(4), 2)),
    # Own: k above the node's CPUs is clamped first (4 -> 2 on 2 CPUs), and a ratio above the floor.
    ("k above cpus", topo(2, 2), 4, 0.0, {0: 1, 1: 1}),
    ("ratio above floor", topo(2, 64), 4, 0.1, {0: 4, 1: 4}),  # ceil(3.2)
]


@pytest.mark.parametrize(
    ("topology", "k", "ratio", "expected"),
    [c[1:] for c in RESERVED_CASES],
    ids=[c[0] for c in RESERVED_CASES],
)
def test_reserved_for_reclaim_matches_katalyst(
    topology: Topology, k: int, ratio: float, expected: dict[int, int]
) -> None:
    """Test_cpuResourceAdvisor_updateReservedForReclaim and TestGetCoreNumReservedForReclaim: the
    per-NUMA floor of the reclaim pool, from a Topology and from a CPUs-per-NUMA mapping alike."""
    assert reserved_for_reclaim(topology, min_reclaimed_cores=k, numa_min_ratio=ratio) == expected
    sizes = {n: len(topology.cpus_of_numa(n)) for n in topology.numa_ids}
    assert reserved_for_reclaim(sizes, min_reclaimed_cores=k, numa_min_ratio=ratio) == expected
