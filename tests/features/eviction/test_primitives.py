"""Eviction primitives of issue 17: release arithmetic (``rounding``, ``excessPercent``) and orderBy
keys over any pod fact and any requested resource (engine/features/eviction/strategy.py), and the
pod start time they and conditions read (the facts snapshot's ``startTime``, the Kubernetes pod's
``status.startTime``).

The release tables work the arithmetic by hand: ``floor`` is Koordinator's whole-percent formula,
capacity x (floor(usage%) - lower) / 100; ``exact`` is used - capacity x lower / 100; the excess
multiplies whichever target the rule ends up with by (1 + X / 100).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from engine.evaluate.factview import ItemFacts
from engine.features.eviction.spec import ReleaseSpec, compile_spec
from engine.features.eviction.strategy import Candidate, Round, choose, rank, release_target, with_excess
from engine.model.facts import Container, snapshot_from_dict
from engine.sources.kubepods import workload_from_pod
from tests.builders import pod
from tests.features.eviction.test_eviction import BE

CPU16 = {"cpu.capacity_cores": 16.0}


@pytest.mark.parametrize(
    ("release", "facts", "expected", "formula"),
    [
        # 50.7% of 16 cores: whole percents give 16 x (50 - 50) / 100 = 0; exact 8.112 - 8 = 0.112
        pytest.param(
            {"resource": "cpu", "lowerPercent": 50},
            {"cpu.usage_cores": 8.112},
            0.0,
            "16 * (50 - 50) / 100",
            id="floor-releases-nothing-inside-the-percent",
        ),
        pytest.param(
            {"resource": "cpu", "lowerPercent": 50, "rounding": "exact"},
            {"cpu.usage_cores": 8.112},
            0.112,
            "8.112 - 16 * 50 / 100",
            id="exact-releases-the-gap",
        ),
        # only the percent fact: used = 62.5% of 16 = 10
        pytest.param(
            {"resource": "cpu", "lowerPercent": 50, "rounding": "exact"},
            {"cpu.usage_percent": 62.5},
            2.0,
            "10 - 16 * 50 / 100",
            id="exact-from-the-percent-fact",
        ),
        pytest.param(
            {"resource": "cpu", "lowerPercent": 50, "rounding": "exact"},
            {"cpu.usage_cores": 7.0},
            0.0,
            "7 - 16 * 50 / 100",
            id="exact-below-the-threshold-is-zero",
        ),
        pytest.param(
            {"resource": "cpu", "lowerPercent": 50},
            {"cpu.usage_cores": 10.0},
            1.92,
            "16 * (62 - 50) / 100",
            id="floor-koordinator-arithmetic",
        ),
    ],
)
def test_release_rounding(release: dict[str, Any], facts: dict[str, Any], expected: float, formula: str) -> None:
    target = release_target(ReleaseSpec.of(release), ItemFacts({**CPU16, **facts}))
    assert target is not None
    assert target[0] == pytest.approx(expected)
    assert target[1] == formula


@pytest.mark.parametrize(
    ("excess", "expected"),
    [(0.0, 2.0), (10.0, 2.2), (50.0, 3.0), (100.0, 4.0)],
)
def test_excess_scales_the_target(excess: float, expected: float) -> None:
    amount, formula, inputs = with_excess((2.0, "gap", {"a": 1}), excess)
    assert amount == pytest.approx(expected)
    if excess:
        assert formula == f"(gap) * (1 + {excess:g} / 100)" and inputs["beforeExcess"] == 2.0
    else:
        assert (formula, inputs) == ("gap", {"a": 1})


def cand(uid: str, usage: float) -> Candidate:
    return Candidate(pod(uid), ItemFacts({"cpu.usage_cores": usage}), BE)


def test_excess_evicts_past_the_gap() -> None:
    """Gap 2 cores; busiest first 1.5, 0.6, 0.5: without excess 2.1 >= 2 after two pods, with 10%
    (2.2) a third pod is needed; the round's arithmetic says so."""
    pods = [cand("a", 1.5), cand("b", 0.6), cand("c", 0.5)]
    scope = ItemFacts({**CPU16, "cpu.usage_cores": 10.0})
    base = {"orderBy": ["-cpu.usage"], "maxPerRound": 5}
    plain = compile_spec({**base, "release": {"resource": "cpu", "lowerPercent": 50, "rounding": "exact"}})
    more = replace(plain, release=replace(plain.release, excess_percent=10.0))
    chosen, release = choose(pods, plain, scope, {}, Round(), 5)
    assert [c.candidate.workload.uid for c in chosen] == ["a", "b"] and release is not None
    assert release.target == pytest.approx(2.0)
    chosen, release = choose(pods, more, scope, {}, Round(), 5)
    assert [c.candidate.workload.uid for c in chosen] == ["a", "b", "c"] and release is not None
    assert release.target == pytest.approx(2.2) and "(1 + 10 / 100)" in release.formula


def gpu_pod(uid: str, gpus: float, start: float | None, **facts: Any) -> Candidate:
    w = pod(uid)
    containers = (Container("main", requests={"cpu": 1.0, "nvidia.com/gpu": gpus} if gpus else {"cpu": 1.0}),)
    w = replace(w, containers=containers, start_time=start)
    static = {"start_time_seconds": start} if start is not None else {}
    return Candidate(w, ItemFacts({**static, **facts}), BE)


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        pytest.param(("-pod.start_time_seconds",), ["unknown", "new", "mid", "old"], id="newest-first-unknown-first"),
        pytest.param(("pod.start_time_seconds",), ["unknown", "old", "mid", "new"], id="oldest-first"),
        pytest.param(("uses(nvidia.com/gpu)", "-pod.start_time_seconds"), ["unknown", "old", "new", "mid"], id="gpu-last"),
        pytest.param(("-request(nvidia.com/gpu)", "name"), ["new", "mid", "old", "unknown"], id="most-gpus-first"),
        pytest.param(("-pod.memory.rss_bytes",), ["unknown", "mid", "new", "old"], id="any-numeric-pod-fact"),
        pytest.param(("-pod.name",), ["unknown", "old", "new", "mid"], id="a-string-fact"),
    ],
)
def test_order_keys_over_any_fact(keys: tuple[str, ...], expected: list[str]) -> None:
    pods = [
        gpu_pod("old", 0, 100.0, **{"memory.rss_bytes": 1.0, "name": "old"}),
        gpu_pod("mid", 1, 200.0, **{"memory.rss_bytes": 5.0, "name": "mid"}),
        gpu_pod("new", 2, 300.0, **{"memory.rss_bytes": 3.0, "name": "new"}),
        gpu_pod("unknown", 0, None, name="unknown"),
    ]
    assert [c.workload.uid for c, _ in rank(pods, keys)] == expected


def test_ranking_values_are_reported_under_the_key() -> None:
    ranked = rank([gpu_pod("a", 1, 42.0)], ("uses(nvidia.com/gpu)", "-pod.start_time_seconds"))
    assert dict(ranked[0][1]) == {"uses(nvidia.com/gpu)": 1, "pod.start_time_seconds": 42.0}


def test_uses_counts_a_limit_only_container_and_not_init_containers() -> None:
    limit_only = replace(pod("l"), containers=(Container("c", limits={"example.com/fpga": 1.0}),))
    init_only = replace(pod("i"), containers=(Container("c", requests={"example.com/fpga": 1.0}, init=True),))
    ranked = rank(
        [Candidate(limit_only, ItemFacts(), BE), Candidate(init_only, ItemFacts(), BE)], ("uses(example.com/fpga)",)
    )
    assert {c.workload.uid: dict(v)["uses(example.com/fpga)"] for c, v in ranked} == {"l": 1, "i": 0}


def test_start_time_from_a_snapshot_and_from_a_kubernetes_pod() -> None:
    snap = snapshot_from_dict(
        {"time": 1000, "node": {"name": "n"}, "workloads": [{"uid": "a", "name": "a", "startTime": 900}, {"uid": "b", "name": "b"}]}
    )
    assert [w.start_time for w in snap.workloads] == [900.0, None]
    api_pod = {
        "metadata": {"uid": "u1", "name": "p", "namespace": "ns"},
        "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": "Running", "startTime": "2023-11-14T22:13:20Z", "qosClass": "BestEffort"},
    }
    assert workload_from_pod(api_pod, "cgroupfs").start_time == 1700000000.0
