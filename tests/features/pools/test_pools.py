"""Pool sizing and placement (engine.features.pools.strategy) against Katalyst's request-based path.

Anchors: katalyst-core ``dynamicpolicy/policy_test.go`` TestAllocate (its cpusets on the dummy
16-CPU / 2-socket / 4-NUMA node) and ``generatePoolsAndIsolation`` / ``getProportionalPoolsQuantityMap``
in ``policy_allocation_handlers.go`` (katalyst.md §2.2-2.3), whose behaviour has no table test
upstream, so those rows are hand-checked here. Every expected cpuset is written as a cpuset string.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.config.pipeline import REFERENCE_NODE, build_policy, load_documents
from engine.features.pools.cpuset import CpuDetails
from engine.features.pools.strategy import CpuDemand, PoolPlan, PoolSpec, allocate, proportional_sizes
from engine.model.facts import Cpu, Topology
from engine.model.units import format_cpuset, parse_cpuset
from tests.features.pools.test_cpuset import katalyst_dummy

# CPU i: NUMA i//4, core i//2, socket i//8 (2 threads per core, 2 NUMA nodes per socket).
D16 = CpuDetails.of(
    Topology(cpus=tuple(Cpu(id=i, numa=i // 4, core=i // 2, socket=i // 8) for i in range(16)))
)
DUMMY = CpuDetails.of(katalyst_dummy(16, 2, 4))


@cache
def default_specs() -> tuple[PoolSpec, ...]:
    """The pools of the bundled rules/default.yaml, compiled and converted with PoolSpec.from_policy."""
    policy = build_policy(load_documents([]), REFERENCE_NODE)
    return tuple(PoolSpec.from_policy(p) for p in policy.pools)


def whole_core_reserve_specs() -> tuple[PoolSpec, ...]:
    """The default pools with the reserve overlaid to ``ht: fullCores`` (whole cores, not Katalyst's taker)."""
    return tuple(
        dataclasses.replace(s, ht_policy="fullCores") if s.name == "reserve" else s for s in default_specs()
    )


def demand(uid: str, pool: str, request: float, cls: str = "shared_cores", **kw: object) -> CpuDemand:
    return CpuDemand(
        uid=uid, pod=f"prod/{uid}", container="main", class_name=cls, pool=pool, request=request, **kw
    )  # type: ignore[arg-type]


def dedicated(uid: str, request: float, **kw: object) -> CpuDemand:
    return demand(uid, "dedicated", request, "dedicated_cores", numa_binding=True, **kw)


def snb(uid: str, request: float, **kw: object) -> CpuDemand:
    return demand(uid, "share", request, numa_binding=True, **kw)


def reclaimed(uid: str) -> CpuDemand:
    return demand(uid, "reclaim", 0.0, "reclaimed_cores")


def texts(cpusets: Mapping[object, frozenset[int]]) -> dict[object, str]:
    return {k: format_cpuset(v) for k, v in cpusets.items()}


def nodes(text: str) -> frozenset[int]:
    return parse_cpuset(text)


# --------------------------------------------------------------------------- specs


def test_from_policy_reads_the_bundled_pools() -> None:
    """The compiled default policy becomes the specs allocate() runs on (katalyst.md §2.1 pools)."""
    specs = {s.name: s for s in default_specs()}
    assert specs["reserve"] == PoolSpec(name="reserve", kind="reserve", static_count=2, ht_policy="any")
    assert (
        specs["share"].kind,
        specs["share"].from_requests,
        specs["share"].min,
        specs["share"].template,
    ) == (
        "share",
        1.0,
        4,
        True,
    )
    assert (
        specs["share-numa"].per_numa,
        specs["share-numa"].from_requests,
        specs["share-numa"].placement,
    ) == (
        True,
        2.0,
        "bound",
    )
    assert (specs["reclaim"].remainder, specs["reclaim"].min) == (True, 4)
    assert specs["dedicated"].is_dedicated


# --------------------------------------------------------------------------- Katalyst TestAllocate

TEST_ALLOCATE = [
    # (anchor, demand, where to look, expected cpuset)
    (
        "TestAllocate 'dedicated_cores with numa_binding & numa_exclusive main container'",
        dedicated("p", 2, numa_exclusive=True, numa_ids=nodes("0")),
        "dedicated",
        "1,8-9",
    ),
    (
        "TestAllocate 'dedicated_cores with numa_binding & not numa_exclusive main container'",
        dedicated("p", 2, numa_ids=nodes("0")),
        "dedicated",
        "1,9",
    ),
    (
        "TestAllocate 'shared_cores numa_binding main container with enableReclaim false': 2 x 2.0 > 3 free, proportional",
        snb("p", 2, numa_ids=nodes("0")),
        "share-NUMA0",
        "1,8-9",
    ),
    (
        "TestAllocate 'shared_cores numa_binding main container with enableReclaim true': CPUPreciseCeil(0.3 x 2) = 1",
        snb("p", 0.3, numa_ids=nodes("0")),
        "share-NUMA0",
        "1",
    ),
    (
        "TestAllocate 'system_cores with specified cpuset pool' reserve",
        demand("p", "reserve", 0, "system_cores"),
        "reserve",
        "0,2",
    ),
    (
        "TestAllocate 'dedicated cores numa binding with distribute evenly across numa enabled and numa number more than 1'",
        dedicated("p", 4, numa_ids=nodes("2-3"), numa_number=2, distribute_evenly_across_numa=True),
        "dedicated",
        "4,6,12,14",
    ),
    (
        "TestAllocate 'dedicated cores numa binding with full pcpus pairing enabled'",
        dedicated("p", 2, numa_ids=nodes("2"), full_pcpus_pairing=True),
        "dedicated",
        "4,12",
    ),
    (
        "TestAllocate 'full pcpus pairing enabled can allocate HT after physical cores are allocated'",
        dedicated(
            "p",
            6,
            numa_ids=nodes("2-3"),
            numa_number=2,
            full_pcpus_pairing=True,
            distribute_evenly_across_numa=True,
        ),
        "dedicated",
        "4-7,12,14",
    ),
    (
        "TestAllocate 'dedicated cores numa binding with numa number more than 1 can cross numa'",
        dedicated("p", 6, numa_ids=nodes("2-3"), numa_number=2),
        "dedicated",
        "4-6,12-14",
    ),
]


@pytest.mark.parametrize(
    ("anchor", "d", "where", "expected"), TEST_ALLOCATE, ids=[c[0][:80] for c in TEST_ALLOCATE]
)
def test_katalyst_allocate_cases(anchor: str, d: CpuDemand, where: str, expected: str) -> None:
    """Anchor: katalyst policy_test.go TestAllocate on GenerateDummyCPUTopology(16, 2, 4), whose reserve
    is TakeHTByNUMABalance(all, 2) = 0,2 (see ``anchor`` for the case)."""
    plan = allocate(DUMMY, default_specs(), [d], {})
    assert not plan.errors, plan.errors
    got = plan.dedicated[d.key] if where == "dedicated" else plan.pools[where]
    assert format_cpuset(got) == expected, anchor
    assert plan.cpuset_of(d.key) == got


def test_katalyst_numa_bindings_follow_the_hint() -> None:
    """TestAllocate 'numa number more than 1 can cross numa': the container's memory is bound to the
    hint's nodes 2-3; an SNB container to its single node."""
    cross = dedicated("p", 6, numa_ids=nodes("2-3"), numa_number=2)
    shared = snb("q", 0.3, numa_ids=nodes("1"))
    plan = allocate(DUMMY, default_specs(), [cross, shared], {})
    assert plan.numa_bindings == {cross.key: nodes("2-3"), shared.key: nodes("1")}
    assert plan.assignments == {shared.key: "share-NUMA1"}


# --------------------------------------------------------------------------- invalid combinations

INVALID = [
    # (anchor, demand, words the on-call message must carry)
    (
        "dedicatedCoresWithoutNUMABindingAllocationHandler: 'not support dedicated_cores without NUMA binding'",
        demand("p", "dedicated", 2, "dedicated_cores"),
        ["without NUMA binding", "memory_enhancement", "numa_binding"],
    ),
    (
        "calculateHints: 'NUMA exclusive and distribute_evenly_across_numa is not supported'",
        dedicated("p", 4, numa_exclusive=True, distribute_evenly_across_numa=True),
        ["numa_exclusive", "distribute_evenly_across_numa", "remove one"],
    ),
    (
        "calculateHints: 'NUMA exclusive and full_pcpus_pairing is not supported'",
        dedicated("p", 4, numa_exclusive=True, full_pcpus_pairing=True),
        ["numa_exclusive", "full_pcpus_pairing", "remove one"],
    ),
    (
        "calculateHints: 'NUMA not exclusive binding container ... has request larger than 1 NUMA'",
        dedicated("p", 5),
        ["one NUMA node", "5 CPUs", "numa_number"],
    ),
    (
        "allocateNumaBindingCPUs: non-exclusive hint spanning two nodes without numa_number",
        dedicated("p", 2, numa_ids=nodes("0-1"), numa_number=1),
        ["spans 2", "numa_number"],
    ),
    (
        "TestAllocate 'shared_cores numa_binding main container with invalid hint' (NUMAs 0,1)",
        snb("p", 0.3, numa_ids=nodes("0-1")),
        ["per-NUMA pool", "numa_ids=0-1", "single node"],
    ),
    (
        "TestAllocate 'full pcpus pairing ... returns error if there are not enough physical cores'",
        dedicated("p", 4, numa_ids=nodes("0"), full_pcpus_pairing=True),
        ["numa_ids=0", "4 free CPUs", "full_pcpus_pairing"],
    ),
    (
        "AnnotationsGetNUMAIDs: numa_ids must be a subset of the machine's NUMAs",
        dedicated("p", 2, numa_ids=nodes("7")),
        ["numa_ids=7", "does not have", "0-3"],
    ),
    (
        "AnnotationsGetNUMANumber: numa_number in 0..#NUMA",
        dedicated("p", 2, numa_number=9),
        ["numa_number=9", "0..4"],
    ),
    (
        "allocateEvenlyAcrossNUMAs: 'unable to evenly distribute cpus across numa nodes'",
        dedicated("p", 5, numa_number=2, distribute_evenly_across_numa=True),
        ["divisible", "2 NUMA"],
    ),
]


@pytest.mark.parametrize(("anchor", "d", "words"), INVALID, ids=[c[0][:70] for c in INVALID])
def test_invalid_demands_are_reported_not_raised(anchor: str, d: CpuDemand, words: list[str]) -> None:
    """katalyst.md §1.4 (anchor per row). Katalyst fails the admission; qosd reports the pod with an
    on-call message (what, which annotation, how to fix) and gives it no cpuset."""
    plan = allocate(DUMMY, default_specs(), [d, demand("ok", "share", 1)], {})
    (message,) = plan.errors[d.uid]
    for word in words:
        assert word in message, (anchor, message)
    assert "prod/p" in message
    assert d.key not in plan.dedicated and d.key not in plan.assignments and d.key not in plan.numa_bindings
    assert plan.cpuset_of(d.key) is None
    assert plan.assignments[("ok", "main")] == "share"  # the rest of the node is unaffected


def test_unknown_pool_without_template() -> None:
    """A cpuset_pool naming a pool the policy lacks, on a policy with no template to create it from."""
    specs = tuple(dataclasses.replace(s, template=False) for s in default_specs())
    plan = allocate(D16, specs, [demand("p", "batch", 1)], {})
    assert "cpuset_pool" in plan.errors["p"][0] and "'batch'" in plan.errors["p"][0]


def test_a_pod_with_one_bad_container_gets_nothing() -> None:
    """Katalyst rejects the pod at admission, so its valid containers must not hold dedicated CPUs either."""
    good = dedicated("p", 2)
    bad = dataclasses.replace(
        dedicated("p", 2, numa_exclusive=True, full_pcpus_pairing=True), container="side"
    )
    plan = allocate(D16, default_specs(), [good, bad], {})
    assert set(plan.errors) == {"p"} and not plan.dedicated


def test_exclusive_needs_empty_nodes() -> None:
    """calculateHints: a numa_exclusive pod skips NUMA nodes with allocated CPUs; when every node holds a
    NUMA-bound pod it does not fit anywhere."""
    demands = [snb(f"s{n}", 0.5, numa_ids=nodes(str(n))) for n in range(4)] + [
        dedicated("x", 2, numa_exclusive=True)
    ]
    plan = allocate(D16, default_specs(), demands, {})
    assert "empty NUMA node" in plan.errors["x"][0]
    hinted = allocate(
        D16,
        default_specs(),
        [snb("s", 0.5, numa_ids=nodes("1")), dedicated("x", 2, numa_exclusive=True, numa_ids=nodes("1"))],
        {},
    )
    assert "numa_ids" in hinted.errors["x"][0] and "empty" in hinted.errors["x"][0]


def test_snb_hinted_onto_an_exclusive_node() -> None:
    """An SNB pod cannot join a node another pod owns exclusively (its hint would not be offered)."""
    owner = dedicated("x", 2, numa_exclusive=True, numa_ids=nodes("2"))
    first = allocate(D16, default_specs(), [owner], {})
    plan = allocate(D16, default_specs(), [owner, snb("s", 1, numa_ids=nodes("2"))], first.dedicated)
    assert "held exclusively by pod prod/x" in plan.errors["s"][0]


# --------------------------------------------------------------------------- the full node

FULL_NODE_DEMANDS = [
    dedicated("excl", 3, numa_exclusive=True),
    dedicated("ded", 2),
    snb("snb", 1, numa_ids=nodes("3")),
    demand("s1", "share", 1.5),
    demand("s2", "share", 1),
    reclaimed("r1"),
    reclaimed("r2"),
]

FULL_NODE = [
    # (name, specs, pools, dedicated, numa bindings)
    (
        "reserve overlaid to whole cores (ht: fullCores)",
        whole_core_reserve_specs,
        # reserve: core 0-1 of NUMA 0. excl: most free empty node = NUMA 1 (4-7). ded: most free
        # non-exclusive node = NUMA 2, whole core 8-9. SNB on NUMA 3: ceil(1 x 2.0) = 2 -> core 12-13.
        # share: ceil(2.5) = 3, min 4, on the unbound nodes 0 and 2: 2-3 and 10-11. reclaim: the
        # remainder 14-15 is below max(4, #NUMA) = 4, topped up one thread per node: 2 and 10.
        {"reserve": "0-1", "share-NUMA3": "12-13", "share": "2-3,10-11", "reclaim": "2,10,14-15"},
        {"excl": "4-7", "ded": "8-9"},
        {"excl": "1", "ded": "2", "snb": "3"},
    ),
    (
        "bundled default pools: Katalyst reserve taker (TakeHTByNUMABalance)",
        default_specs,
        # reserve: one thread of NUMA 0 and of NUMA 1. excl: NUMA 2 (4 free). ded: NUMA 3 (4 free;
        # the SNB pod does not hold CPUs against dedicated ones) -> 12-13; SNB pool takes 14-15.
        # share: 4 of 1-3,5-7 as whole cores, balanced: 2-3 and 6-7. reclaim: 1,5 + 2,6.
        {"reserve": "0,4", "share-NUMA3": "14-15", "share": "2-3,6-7", "reclaim": "1-2,5-6"},
        {"excl": "8-11", "ded": "12-13"},
        {"excl": "2", "ded": "3", "snb": "3"},
    ),
]


@pytest.mark.parametrize(("name", "specs", "pools", "ded", "mems"), FULL_NODE, ids=[c[0] for c in FULL_NODE])
def test_full_node(
    name: str,
    specs: object,
    pools: dict[str, str],
    ded: dict[str, str],
    mems: dict[str, str],
) -> None:
    """Anchor: generatePoolsAndIsolation steps 1-8 (katalyst.md §2.3) with dedicated/SNB admission
    (§2.2) on a 16-CPU / 4-NUMA / 2-thread node; every cpuset hand-checked (see the row comments)."""
    assert callable(specs)
    plan = allocate(D16, specs(), FULL_NODE_DEMANDS, {})
    assert not plan.errors and not plan.warnings
    assert texts(plan.pools) == pools
    assert {k[0]: v for k, v in texts(plan.dedicated).items()} == ded
    assert {k[0]: format_cpuset(v) for k, v in plan.numa_bindings.items()} == mems
    assert plan.reclaim_overlap and not plan.overlapping
    assert {k[0]: v for k, v in plan.assignments.items()} == {
        "snb": "share-NUMA3",
        "s1": "share",
        "s2": "share",
        "r1": "reclaim",
        "r2": "reclaim",
    }


def test_reclaim_takes_a_large_remainder_without_overlap() -> None:
    """generatePoolsAndIsolation step 6: reclaim = all remaining CPUs when that is at least its minimum."""
    plan = allocate(D16, whole_core_reserve_specs(), [demand("s", "share", 3.2), reclaimed("r")], {})
    # share: ceil(3.2) = 4 -> whole cores balanced: 2-3 (NUMA 0), 4-5 (NUMA 1).
    assert texts(plan.pools) == {"reserve": "0-1", "share": "2-5", "reclaim": "6-15"}
    assert not plan.reclaim_overlap


def test_reclaim_fallback_when_nothing_is_left() -> None:
    """Step 8: reclaim empty -> Katalyst's reserved-reclaimed set, max(4, #NUMA) CPUs one per node
    (TestAllocate 'reclaimed_cores main container' expects 1,3-4,6 on the dummy node). qosd keeps it
    off dedicated CPUs while others exist, so here it lands on the share pool's threads."""
    plan = allocate(DUMMY, default_specs(), [demand("s", "share", 14)], {})
    assert format_cpuset(plan.pools["share"]) == "1,3-15"
    assert format_cpuset(plan.pools["reclaim"]) == "1,3-4,6"
    assert plan.reclaim_overlap


# --------------------------------------------------------------------------- sizing

PROPORTIONAL = [
    # (quantities, available, expected) — getProportionalPoolsQuantityMap, hand-checked
    ({"a": 4, "b": 4, "c": 8}, 8, {"a": 2, "b": 2, "c": 4}),
    ({"a": 3, "b": 3, "c": 3}, 8, {"a": 2, "b": 3, "c": 3}),  # ceil(8/3)=3 each, the first largest gives 1
    ({"a": 1, "b": 10}, 5, {"a": 1, "b": 4}),  # ceil(5/11)=1, ceil(50/11)=5; b gives 1
    ({"a": 5, "b": 5, "c": 5}, 2, {"a": 1, "b": 1, "c": 1}),  # cannot fit: stays 3 > 2, caller overlaps
    ({"a": 6, "b": 2}, 6, {"a": 4, "b": 2}),  # ceil(4.5)=5, ceil(1.5)=2 -> 7; a gives 1
]


@pytest.mark.parametrize(("quantities", "available", "expected"), PROPORTIONAL)
def test_proportional_sizes(quantities: dict[str, int], available: int, expected: dict[str, int]) -> None:
    """Anchor: katalyst getProportionalPoolsQuantityMap (generatePoolsAndIsolation step 4 when the pools
    do not fit): ceil(avail x q / sum), min 1, then minus 1 from the largest until the total fits."""
    assert proportional_sizes(quantities, available) == expected


def test_share_pools_shrink_proportionally() -> None:
    """Step 4 'else proportional' on a node with 14 free CPUs and 21 CPUs of share pools."""
    demands = [demand("a", "share", 14), demand("b", "batch", 7), reclaimed("r")]
    plan = allocate(D16, whole_core_reserve_specs(), demands, {})
    # ceil(14 x 14/21) = 10, ceil(14 x 7/21) = 5 -> 15 > 14 -> share (largest) gives 1: 9 and 5.
    # Taken in name order: batch first, 5 CPUs = cores 2-3, 4-5, 8-9 minus... whole cores round-robin
    # then one thread: 2-3 (N0), 4-5 (N1), thread 8 -> 8 is the first free thread of NUMA 2.
    assert len(plan.pools["share"]) == 9 and len(plan.pools["batch"]) == 5
    assert format_cpuset(plan.pools["batch"]) == "2-6"
    assert not plan.pools["share"] & plan.pools["batch"]
    assert not plan.overlapping and plan.reclaim_overlap


def test_pools_that_cannot_each_get_a_cpu_overlap() -> None:
    """Step 4: 'If the total still does not fit, every pool gets all available CPUs (overlap)'."""
    specs = (
        PoolSpec("reserve", "reserve", static_count=14),
        *(s for s in default_specs() if s.name != "reserve"),
    )
    plan = allocate(D16, specs, [demand("a", "share", 1), demand("b", "b2", 1), demand("c", "c3", 1)], {})
    assert plan.overlapping == {"share", "b2", "c3"}
    assert {format_cpuset(plan.pools[p]) for p in ("share", "b2", "c3")} == {
        format_cpuset(D16.cpus - plan.pools["reserve"])
    }


def test_precise_ceil_and_min_max_clamp() -> None:
    """CPUPreciseCeil(sum x ratio): 0.1 + 0.2 + 0.7 cores is one CPU, not two; spec min/max clamp it."""
    three = [demand(f"p{i}", "batch", r) for i, r in enumerate((0.1, 0.2, 0.7))]
    unclamped = tuple(dataclasses.replace(s, min=None) for s in default_specs())
    assert len(allocate(D16, unclamped, three, {}).pools["batch"]) == 1
    assert len(allocate(D16, default_specs(), three, {}).pools["batch"]) == 4  # share template min 4
    capped = tuple(dataclasses.replace(s, max=2) if s.name == "share" else s for s in default_specs())
    assert len(allocate(D16, capped, [demand("p", "share", 7)], {}).pools["share"]) == 2


def test_snb_pool_is_twice_the_requests_inside_its_node() -> None:
    """§2.2 SNB: pool quantity = CPUPreciseCeil(sum x 2.0), generated first inside the node; the node
    is then closed to non-binding pools (step 4) and its leftover goes to reclaim (step 6)."""
    plan = allocate(
        D16,
        whole_core_reserve_specs(),
        [snb("a", 0.5, numa_ids=nodes("2")), snb("b", 0.7, numa_ids=nodes("2")), reclaimed("r")],
        {},
    )
    assert format_cpuset(plan.pools["share-NUMA2"]) == "8-10"  # ceil(1.2 x 2) = 3
    assert format_cpuset(plan.pools["reclaim"]) == "2-7,11-15"


def test_snb_without_hint_picks_the_roomiest_node() -> None:
    """No hint: the node with the most room (free CPUs minus SNB requests), ties to the lowest id."""
    plan = allocate(D16, whole_core_reserve_specs(), [dedicated("d", 3), snb("a", 1), snb("b", 1)], {})
    # reserve 0-1 leaves NUMA 0 with 2; d takes NUMA 1 (first of the 4-free nodes); a -> NUMA 2; b -> NUMA 3.
    assert {k[0]: format_cpuset(v) for k, v in plan.numa_bindings.items()} == {"d": "1", "a": "2", "b": "3"}


# --------------------------------------------------------------------------- stability


def test_previous_dedicated_cpusets_are_kept() -> None:
    """A new pod (listed first) must not take the CPUs of a running dedicated pod: Katalyst never moves
    an admitted container; qosd recomputes from scratch, so ``previous`` carries that promise."""
    first = allocate(
        D16, whole_core_reserve_specs(), [dedicated("old", 2), dedicated("big", 3, numa_exclusive=True)], {}
    )
    assert texts(first.dedicated) == {("old", "main"): "8-9", ("big", "main"): "4-7"}
    demands = [dedicated("new", 2), dedicated("old", 2), dedicated("big", 3, numa_exclusive=True)]
    fresh = allocate(D16, whole_core_reserve_specs(), demands, {})
    assert format_cpuset(fresh.dedicated[("new", "main")]) == "8-9"  # without memory, new takes old's CPUs
    kept = allocate(D16, whole_core_reserve_specs(), demands, first.dedicated)
    assert texts(kept.dedicated) == {("old", "main"): "8-9", ("big", "main"): "4-7", ("new", "main"): "12-13"}


@pytest.mark.parametrize(
    ("why", "previous"),
    [
        ("overlaps the reserve", "1,9"),
        ("wrong size after a resize", "8-10"),
        ("outside the hinted node", "12-13"),
        ("CPUs the node does not have", "30-31"),
    ],
)
def test_invalid_previous_is_replaced(why: str, previous: str) -> None:
    """A previous cpuset that no longer satisfies the demand is dropped and the container re-placed."""
    d = dedicated("p", 2, numa_ids=nodes("2"))
    plan = allocate(D16, default_specs(), [d], {d.key: parse_cpuset(previous)})
    assert format_cpuset(plan.dedicated[d.key]) == "8-9", why


def test_running_snb_pod_is_not_readmitted() -> None:
    """Found by the fixed-point property: an SNB pod already running on a node keeps it even when the
    node's room no longer passes a fresh admission check (here a dedicated pod holds 8-9 and the SNB
    pod grew to 3 CPUs): Katalyst never re-admits a running pod, its pool just shrinks. A new SNB pod
    with the same hint is refused."""
    demands = [snb("s", 3, numa_ids=nodes("2")), dedicated("d", 2, numa_ids=nodes("2"))]
    previous = {("d", "main"): nodes("8-9"), ("s", "main"): nodes("10-11")}
    running = allocate(D16, default_specs(), demands, previous)
    assert not running.errors
    assert texts(running.pools)["share-NUMA2"] == "10-11" and texts(running.dedicated) == {
        ("d", "main"): "8-9"
    }
    fresh = allocate(D16, default_specs(), demands, {("d", "main"): nodes("8-9")})
    assert "too few CPUs" in fresh.errors["s"][0]


def test_dedicated_leaves_room_for_snb_pods() -> None:
    """Found by the fixed-point property: a dedicated pod must not take the CPUs an admitted SNB pod
    needs (the mirror of the SNB check, which subtracts dedicated CPUs): on NUMA 2 with an SNB pod of
    2.5 CPUs, a 2-CPU dedicated pod does not fit, since 4 - ceil(2.5) = 1 < 2."""
    plan = allocate(
        D16, default_specs(), [snb("s", 2.5, numa_ids=nodes("2")), dedicated("d", 2, numa_ids=nodes("2"))], {}
    )
    assert "no NUMA node set (numa_ids=2) has 2 free CPUs" in plan.errors["d"][0]
    fits = allocate(
        D16, default_specs(), [snb("s", 2, numa_ids=nodes("2")), dedicated("d", 2, numa_ids=nodes("2"))], {}
    )
    # The dedicated pod takes its 2 from the low end; the SNB pool (ceil(2 x 2.0) = 4) shrinks to 10-11.
    assert texts(fits.dedicated) == {("d", "main"): "8-9"} and texts(fits.pools)["share-NUMA2"] == "10-11"


def test_zero_request_dedicated_is_invalid_unless_exclusive() -> None:
    """A non-exclusive dedicated container with no CPU request would own nothing; an exclusive one still
    owns whole nodes (katalyst: numa_exclusive takes the whole NUMA whatever the request)."""
    plan = allocate(D16, whole_core_reserve_specs(), [dedicated("z", 0), dedicated("x", 0, numa_exclusive=True)], {})
    assert "without a CPU request" in plan.errors["z"][0]
    assert texts(plan.dedicated) == {("x", "main"): "4-7"}


# --------------------------------------------------------------------------- properties

POOL_NAMES = ["share", "batch", "dedicated", "reclaim", "reserve"]


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[CpuDetails, list[CpuDemand]]:
    numas = draw(st.integers(1, 4))
    cores = draw(st.integers(1, 4))
    threads = draw(st.integers(1, 2))
    per = cores * threads
    topology = Topology(
        cpus=tuple(
            Cpu(id=i, numa=i // per, core=i // threads, socket=(i // per) // 2) for i in range(numas * per)
        )
    )
    hints = st.one_of(st.none(), st.frozensets(st.integers(0, 4), max_size=3))
    one = st.builds(
        CpuDemand,
        uid=st.sampled_from(["a", "b", "c", "d", "e", "f"]),
        pod=st.just("ns/p"),
        container=st.sampled_from(["main", "side"]),
        class_name=st.just("c"),
        pool=st.sampled_from(POOL_NAMES),
        request=st.one_of(
            st.floats(0, 12, allow_nan=False), st.sampled_from([0.0, 1.0, 2.0, float("nan"), -1.0])
        ),
        numa_binding=st.booleans(),
        numa_exclusive=st.booleans(),
        numa_ids=hints,
        numa_number=st.one_of(st.none(), st.integers(0, 5)),
        full_pcpus_pairing=st.booleans(),
        distribute_evenly_across_numa=st.booleans(),
    )
    demands = draw(st.lists(one, max_size=10, unique_by=lambda d: (d.uid, d.container)))
    return CpuDetails.of(topology), demands


def check_plan(details: CpuDetails, plan: PoolPlan, demands: Sequence[CpuDemand]) -> None:
    everything = details.cpus
    static = plan.pools.get("reserve", frozenset())
    dedicated_cpus = frozenset().union(*plan.dedicated.values()) if plan.dedicated else frozenset()
    for cpus in [*plan.pools.values(), *plan.dedicated.values()]:
        assert cpus <= everything
    for a, b in itertools.combinations(plan.dedicated.values(), 2):
        assert not a & b
    assert not dedicated_cpus & static
    shared = {n: c for n, c in plan.pools.items() if n != "reclaim"}
    for (na, a), (nb, b) in itertools.combinations(shared.items(), 2):
        if a & b:
            assert na in plan.overlapping and nb in plan.overlapping, (na, nb)
    for name, cpus in shared.items():
        assert not cpus & dedicated_cpus, name
    if "reclaim" in plan.pools and not plan.reclaim_overlap:
        reclaim = plan.pools["reclaim"]
        assert not reclaim & frozenset().union(*shared.values()) and not reclaim & dedicated_cpus
    if plan.pools.get("reclaim", frozenset()) & dedicated_cpus:
        assert everything - static - dedicated_cpus <= plan.pools["reclaim"]
    for uid in plan.errors:
        assert all(k[0] != uid for k in [*plan.dedicated, *plan.assignments, *plan.numa_bindings])
    for d in demands:
        if d.uid not in plan.errors:
            assert plan.cpuset_of(d.key) is not None
            if d.key in plan.dedicated and not d.numa_exclusive:
                assert len(plan.dedicated[d.key]) == max(0, -int(-d.request // 1))


@settings(max_examples=400, deadline=None)
@given(scenarios())
def test_allocate_properties(case: tuple[CpuDetails, list[CpuDemand]]) -> None:
    """Never raises; cpusets inside the topology; dedicated cpusets disjoint from each other and the
    reserve; pools disjoint except the documented overlaps (all-available and reclaim top-up);
    invalid pods get nothing; every valid container gets a cpuset; deterministic."""
    details, demands = case
    plan = allocate(details, default_specs(), demands, {})
    check_plan(details, plan, demands)
    assert allocate(details, default_specs(), demands, {}) == plan


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_feeding_a_plan_back_reproduces_it(case: tuple[CpuDetails, list[CpuDemand]]) -> None:
    """Restart convergence: with ``previous`` = the cpusets a plan gave, the next plan is the same for
    every container that was placed (dedicated cpusets, pools, memory bindings)."""
    details, demands = case
    plan = allocate(details, default_specs(), demands, {})
    previous = {d.key: c for d in demands if (c := plan.cpuset_of(d.key)) is not None}
    again = allocate(details, default_specs(), demands, previous)
    check_plan(details, again, demands)
    assert again.dedicated == plan.dedicated
    assert again.numa_bindings == plan.numa_bindings
    assert again.pools == plan.pools


RECLAIM_OFF = [
    # (name, demands, pools with reclaim enabled, pools with reclaim disabled)
    (
        # share ceil(3.2) = 4 -> 2-5 (whole-core reserve 0-1); remainder 6-15 is 10 CPUs. Disabled:
        # reclaim keeps max(4, #NUMA) = 4 and the surplus of 6 goes to the only share pool.
        "one share pool takes the whole surplus",
        [demand("s", "share", 3.2), reclaimed("r")],
        {"reserve": "0-1", "share": "2-5", "reclaim": "6-15"},
        {"share": 10, "reclaim": 4},
    ),
    (
        # share 4, batch 4 (template min 4): remainder 6 -> surplus 2, floor(2 x 4/8) = 1 each.
        "two share pools split it by size",
        [demand("s", "share", 2), demand("b", "batch", 2), reclaimed("r")],
        None,
        {"share": 5, "batch": 5, "reclaim": 4},
    ),
]


@pytest.mark.parametrize(("name", "demands", "enabled", "disabled"), RECLAIM_OFF, ids=[r[0] for r in RECLAIM_OFF])
def test_reclaim_disabled_hands_the_surplus_to_the_share_pools(
    name: str, demands: list[CpuDemand], enabled: dict[str, str] | None, disabled: dict[str, int]
) -> None:
    """Anchor: katalyst generatePoolsAndIsolation step 7 (katalyst.md §2.3): with EnableReclaim=false
    the reclaim pool shrinks to reservedReclaimedCPUsSize = max(4, #NUMA) and the surplus is
    apportioned to the non-binding share pools, floor(surplus x size / total) each, minimum 1."""
    specs = whole_core_reserve_specs()
    on = allocate(D16, specs, demands, {})
    if enabled is not None:
        assert texts(on.pools) == enabled
    off = allocate(D16, specs, demands, {}, reclaim_enabled=False)
    assert {k: len(off.pools[k]) for k in disabled} == disabled
    pooled = [cpus for name, cpus in off.pools.items() if name != "reserve"]
    assert sum(len(c) for c in pooled) == len(frozenset().union(*pooled))  # still disjoint
    assert frozenset().union(*off.pools.values()) == frozenset().union(*on.pools.values())
