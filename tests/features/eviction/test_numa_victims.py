"""victims.numaScoped and minNumaUsageRatio: who may be evicted for a pressured NUMA node.

Anchor: Katalyst's NUMA memory pressure plugin (katalyst.md §3.3): "for every NUMA, filter pods
whose NUMA usage (mem.total.numa.container) / NUMA total >= NumaVictimMinimumUtilizationThreshold",
default 0.001 (§3.5), the value the bundled rules carry. A pod whose NUMA metric cannot be read is
skipped. The rows use a 32 GiB NUMA node, so the threshold is 32 GiB x 0.001 = 33554432 bytes (32 MiB).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from engine.evaluate.engine import Engine
from engine.evaluate.factview import ItemFacts
from engine.evaluate.state import EngineState
from engine.features.eviction.strategy import Candidate, on_numa, rank, with_numa_usage
from engine.model.intents import EvictIntent
from engine.plan.planner import Guards
from engine.tick import run_tick
from tests.builders import GiB, pod, policy, snapshot
from tests.conftest import policy_text

NUMA_TOTAL = 32 * GiB
THRESHOLD = NUMA_TOTAL * 0.001  # 33554432.0 bytes


def cand(uid: str, facts: dict[str, Any]) -> Candidate:
    return Candidate(pod(uid), ItemFacts(facts), None)


@pytest.mark.parametrize(
    ("usage", "ratio", "kept"),
    [
        pytest.param(THRESHOLD, 0.001, True, id="exactly-the-threshold-is-kept (>=)"),
        pytest.param(THRESHOLD - 1, 0.001, False, id="one-byte-below-is-left-out"),
        pytest.param(2 * GiB, 0.001, True, id="a-large-user"),
        pytest.param(0.0, 0.001, False, id="no-use-of-this-numa"),
        pytest.param(None, 0.001, False, id="metric-missing-is-skipped"),
        pytest.param(1.0, None, True, id="no-ratio-any-use-counts"),
        pytest.param(0.0, None, False, id="no-ratio-zero-use"),
        pytest.param(NUMA_TOTAL * 0.5, 0.5, True, id="half-at-0.5"),
        pytest.param(NUMA_TOTAL * 0.5 - 1, 0.5, False, id="just-under-half-at-0.5"),
    ],
)
def test_numa_victim_filter(usage: float | None, ratio: float | None, kept: bool) -> None:
    facts = {} if usage is None else {"numa.1.memory_usage_bytes": usage}
    # A second pod with the fact keeps the facts "known" for the row's own pod.
    other = cand("other", {"numa.1.memory_usage_bytes": 0.0})
    result = on_numa([cand("p", facts), other], 1, NUMA_TOTAL, ratio)
    assert result is not None
    assert ("p" in [c.workload.uid for c in result]) is kept


def test_usage_on_another_numa_does_not_count() -> None:
    c = cand("p", {"numa.0.memory_usage_bytes": 8 * GiB, "numa.1.memory_usage_bytes": 0.0})
    assert on_numa([c], 1, NUMA_TOTAL, 0.001) == []
    assert on_numa([c], 0, NUMA_TOTAL, 0.001) == [c]


def test_without_any_numa_facts_the_filter_says_it_cannot_tell() -> None:
    assert on_numa([cand("p", {"memory.usage_bytes": GiB})], 0, NUMA_TOTAL, 0.001) is None


RULES = """
classes:
  - name: be
    match: [{labels: {tier: be}}]
rules:
  - name: numa-evict
    when:
      numa.memory.free_bytes: {lt: 1073741824}
    then:
      evict:
        victims: {classes: [be], numaScoped: true, minNumaUsageRatio: 0.001}
        orderBy: [-memory.usage]
"""


def test_numa_scoped_rule_evicts_only_a_pod_on_the_pressured_numa() -> None:
    """End to end: NUMA 1 is short of memory; the pod with the most memory overall lives on NUMA 0
    and must not be picked; the one using NUMA 1 is."""
    pods = [pod("big-on-0", labels={"tier": "be"}), pod("small-on-1", labels={"tier": "be"})]
    snap = snapshot(
        pods=pods,
        numa={0: {"memory.free_bytes": 10 * GiB}, 1: {"memory.free_bytes": 0.5 * GiB}},
        pod_metrics={
            "big-on-0": {"memory.usage_bytes": 8 * GiB, "numa.0.memory_usage_bytes": 8 * GiB},
            "small-on-1": {"memory.usage_bytes": 1 * GiB, "numa.1.memory_usage_bytes": 1 * GiB},
        },
    )
    result = run_tick(Engine(policy(RULES)), snap, EngineState(), Guards())
    evicted = [i.uid for i in result.evaluation.intents if isinstance(i, EvictIntent)]
    assert evicted == ["small-on-1"]


def test_numa_scoped_rule_without_numa_facts_says_so() -> None:
    pods = [pod("a", labels={"tier": "be"})]
    snap = snapshot(
        pods=pods,
        numa={1: {"memory.free_bytes": 0.5 * GiB}},
        pod_metrics={"a": {"memory.usage_bytes": GiB}},
    )
    result = run_tick(Engine(policy(RULES)), replace(snap), EngineState(), Guards())
    notes = [s.reason for s in result.evaluation.skipped]
    assert any("no pod has facts of its memory use on NUMA node 1" in n for n in notes), notes


@pytest.mark.parametrize(
    ("when", "victims", "path", "message"),
    [
        pytest.param(
            "node.memory.usage_percent: {gte: 90}",
            "{numaScoped: true}",
            "victims.numaScoped",
            "not evaluated per NUMA node",
            id="numa-scoped-on-a-node-rule",
        ),
        pytest.param(
            "numa.memory.free_bytes: {lt: 1073741824}",
            "{minNumaUsageRatio: 0.001}",
            "victims.minNumaUsageRatio",
            "has no effect without victims.numaScoped",
            id="ratio-without-numa-scoped",
        ),
    ],
)
def test_validate_locates_numa_victims_that_would_do_nothing(
    problems_of: Any, when: str, victims: str, path: str, message: str
) -> None:
    text = policy_text(
        f"""
rules:
  - name: r
    when:
      {when}
    then:
      evict:
        victims: {victims}
"""
    )
    problems = problems_of(text)
    hits = [p for p in problems if message in p.message]
    assert len(hits) == 1, [p.format() for p in problems]
    assert hits[0].location.path.endswith(path) and hits[0].location.line > 0


def test_numa_usage_ranks_by_the_matched_nodes_use() -> None:
    """katalyst numa_pressure_test.go TestNumaMemoryPressurePlugin_GetTopEvictionPods: on NUMA 0,
    pod-2 (4 GiB there) goes before pod-1 (1 GiB there, 9 GiB on NUMA 1); on NUMA 1 the reverse.
    ``memory.numa_usage`` ranked by the pods' total use before (issue 16), which picks pod-1 on both."""
    pods = [
        cand("pod-1", {"numa.0.memory_usage_bytes": 1 * GiB, "numa.1.memory_usage_bytes": 9 * GiB}),
        cand("pod-2", {"numa.0.memory_usage_bytes": 4 * GiB, "numa.1.memory_usage_bytes": 1 * GiB}),
    ]
    on0 = [c.workload.uid for c, _ in rank(with_numa_usage(pods, 0), ("-memory.numa_usage",))]
    on1 = [c.workload.uid for c, _ in rank(with_numa_usage(pods, "1"), ("-memory.numa_usage",))]
    assert on0 == ["pod-2", "pod-1"]
    assert on1 == ["pod-1", "pod-2"]
