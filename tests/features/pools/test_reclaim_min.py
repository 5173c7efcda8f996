"""The reclaim pool's min split per NUMA node (``size.minPerNuma``), issue 16.

Anchor: katalyst-core ``sysadvisor/plugin/qosaware/resource/cpu/advisor_helper_test.go``
Test_cpuResourceAdvisor_updateReservedForReclaim and machine.GetCoreNumReservedForReclaim: every
NUMA node keeps max(1, floor(min / #NUMA)) CPUs for reclaim. The issue: a bare reclaim ``min: 1``
that should mean one CPU per NUMA node could only be written as a template.
"""

from __future__ import annotations

import dataclasses

import pytest

from engine.config.errors import PolicyError
from engine.features.pools.cpuset import CpuDetails
from engine.features.pools.strategy import PoolSpec, allocate, numa_quotas, reclaim_quotas
from tests.builders import policy
from tests.features.pools.test_cpuset import katalyst_dummy
from tests.features.pools.test_pools import default_specs, demand, reclaimed


@pytest.mark.parametrize(
    ("total", "numas", "expected"),
    [
        pytest.param(4, 2, {0: 2, 1: 2}, id="anchor-reserved-for-reclaim"),
        pytest.param(16, 2, {0: 8, 1: 8}, id="anchor-reserved-all-for-reclaim"),
        pytest.param(4, 8, dict.fromkeys(range(8), 1), id="anchor-less-than-numa-num"),
        pytest.param(1, 4, dict.fromkeys(range(4), 1), id="min-1-is-one-per-numa"),
        pytest.param(5, 2, {0: 2, 1: 2}, id="floor-of-the-split"),
    ],
)
def test_numa_quotas(total: int, numas: int, expected: dict[int, int]) -> None:
    assert numa_quotas(total, range(numas)) == expected


def _reclaim_cpus(min_cpus: int, per_numa: bool, numas: int) -> dict[int, int]:
    details = CpuDetails.of(katalyst_dummy(16, 1 if numas <= 2 else 2, numas))
    specs = tuple(
        dataclasses.replace(s, min=min_cpus, min_per_numa=per_numa)
        if s.kind == "reclaim"
        else dataclasses.replace(s, static_count=0)
        if s.kind == "reserve"
        else s
        for s in default_specs()
    )
    plan = allocate(details, specs, [demand("big", "share", 16.0), reclaimed("r")])
    cpus = plan.pools["reclaim"]
    return {n: len(cpus & details.cpus_in_numas((n,))) for n in details.numa_ids}


def test_min_one_per_numa_tops_up_every_node() -> None:
    """The share pool takes every CPU; the reclaim pool's min 1 split per NUMA keeps one CPU on each
    of 4 nodes (overlapping the share pool), where a node-wide min of 1 keeps one CPU in all."""
    assert _reclaim_cpus(1, True, 4) == {0: 1, 1: 1, 2: 1, 3: 1}
    assert sum(_reclaim_cpus(1, False, 4).values()) == 1


def test_min_per_numa_needs_a_min_on_the_remainder_pool() -> None:
    with pytest.raises(PolicyError) as err:
        policy("pools:\n  - {name: r, kind: reclaim, size: {remainder: true, minPerNuma: true}}\n")
    assert "minPerNuma" in str(err.value) and "no min" in str(err.value)
    with pytest.raises(PolicyError) as err:
        policy("pools:\n  - {name: s, kind: share, size: {fromRequests: 1.0, min: 2, minPerNuma: true}}\n")
    assert "not the remainder pool" in str(err.value)


def test_pool_spec_reads_min_per_numa() -> None:
    pol = policy("pools:\n  - {name: r, kind: reclaim, size: {remainder: true, min: 1, minPerNuma: true}}\n")
    spec = PoolSpec.from_policy(pol.pools[0])
    assert spec.min == 1 and spec.min_per_numa


@pytest.mark.parametrize(
    ("ratio", "floor", "expected"),
    [
        pytest.param(0.05, 2, {0: 2, 1: 2}, id="anchor-reserved-with-numa-size-ratio"),
        pytest.param(0.1, 2, {0: 4, 1: 4}, id="ratio-above-the-floor"),
        pytest.param(0.01, 3, {0: 3, 1: 3}, id="floor-above-the-ratio"),
    ],
)
def test_ratio_quotas(ratio: float, floor: int, expected: dict[int, int]) -> None:
    """numaMinReclaimedResourceRatioForAllocate on a 64-CPU, 2-NUMA node: max(floor, ceil(ratio x 32))."""
    spec = PoolSpec("reclaim", "reclaim", remainder=True, min=floor, min_numa_ratio=ratio)
    assert reclaim_quotas(spec, floor, {0: 32, 1: 32}) == expected


def test_min_per_numa_and_ratio_together_are_refused() -> None:
    with pytest.raises(PolicyError) as err:
        policy(
            "pools:\n  - {name: r, kind: reclaim, size: {remainder: true, min: 2, minPerNuma: true, "
            "minNumaRatio: 0.1}}\n"
        )
    assert "both minPerNuma" in str(err.value)
