"""spec.cfsQuotaBurst through the engine: the buckets live in the engine state (and survive its JSON
form, as the state file keeps them), a raise is written pod first and a cut container first, and a
section switched off holds quotas at their base."""

from __future__ import annotations

import json
from dataclasses import replace
from types import MappingProxyType
from typing import Any

import pytest

from engine.config.errors import PolicyError
from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState, state_from_json
from engine.model.facts import snapshot_from_dict
from engine.model.operations import WriteCgroup
from engine.plan.planner import Guards
from engine.tick import run_tick
from tests.builders import policy

POD = "kubepods/burstable/podp"
CLASSES = """\
classes:
  - {name: LS, match: [{labels: {tier: ls}}], cpu: {policy: shared}}
  - {name: LSR, match: [{labels: {tier: lsr}}], cpu: {policy: shared}}
"""


def spec(**fields: Any) -> str:
    body = {"enabled": True, "classes": ["LS"], "dedicatedClasses": ["LSR"], **fields}
    return CLASSES + "cfsQuotaBurst: " + json.dumps(body) + "\n"


def facts(time: float, quota: int, usage: float = 1.5, throttled: float = 0.5, node: float = 1.0) -> Any:
    return snapshot_from_dict(
        {
            "time": time,
            "node": {"name": "n", "capacity": {"cpu": 8, "memory": 17179869184}},
            "workloads": [
                {
                    "uid": "p",
                    "name": "p",
                    "labels": {"tier": "ls"},
                    "kubeQoS": "Burstable",
                    "cgroupPath": POD,
                    "containers": [{"name": "c", "limits": {"cpu": 2}, "cgroupPath": f"{POD}/c"}],
                }
            ],
            "metrics": {
                "node": {"cpu": {"usage_cores": node}},
                "containers": {"p/c": {"cpu": {"usage_cores": usage, "throttled_ratio": throttled}}},
            },
            "cgroups": {POD: {"cpu.cfs_quota_us": str(quota)}, f"{POD}/c": {"cpu.cfs_quota_us": str(quota)}},
        }
    )


def writes(result: Any) -> list[tuple[str, str]]:
    return [(o.path, o.value) for o in result.plan.operations if isinstance(o, WriteCgroup)]


def test_a_raise_goes_pod_first_and_a_cut_container_first() -> None:
    engine = Engine(policy(spec()))
    up = run_tick(engine, facts(1000, 200000), EngineState(), Guards())
    assert writes(up) == [(POD, "240000"), (f"{POD}/c", "240000")]
    down = run_tick(engine, facts(1001, 400000, node=6.0), up.state, Guards())  # 6/8: overload
    assert writes(down) == [(f"{POD}/c", "320000"), (POD, "320000")]


def test_the_bucket_is_engine_state_and_survives_the_state_file() -> None:
    """Period 10 s at 150%: capacity 500, a new bucket holds 125. At 200% of its limit the container
    spends 100 per second: after 1 s 25 are left (still bursting), after 2 s more it is empty and
    its quota is cut, although it is still throttled. The state goes through its JSON form between
    ticks, as a daemon restart would."""
    engine = Engine(policy(spec(periodSeconds=10, maxPercent=150)))
    first = run_tick(engine, facts(1000, 200000, usage=4.0), EngineState(), Guards())
    assert first.state.burst["p/c"].tokens == 125
    state = state_from_json(json.dumps(first.state.to_dict()))
    second = run_tick(engine, facts(1001, 240000, usage=4.0), state, Guards())
    assert second.state.burst["p/c"].tokens == 25
    assert writes(second) == [(POD, "288000"), (f"{POD}/c", "288000")]
    third = run_tick(engine, facts(1003, 288000, usage=4.0), second.state, Guards())
    assert third.state.burst["p/c"].tokens == -175
    assert writes(third) == [(f"{POD}/c", "230400"), (POD, "230400")]


def test_switched_off_the_classes_go_back_to_their_base() -> None:
    """Koordinator's policy none resets a burst quota every round; nothing is kept in the state."""
    result = run_tick(Engine(policy(spec(enabled=False))), facts(1000, 480000), EngineState(), Guards())
    assert writes(result) == [(f"{POD}/c", "200000"), (POD, "200000")]
    assert result.state.burst == {}
    steady = run_tick(Engine(policy(spec(enabled=False))), facts(1001, 200000), EngineState(), Guards())
    assert writes(steady) == []


def test_without_the_section_nothing_is_written() -> None:
    result = run_tick(Engine(policy(CLASSES)), facts(1000, 480000), EngineState(), Guards())
    assert writes(result) == []


def test_an_unknown_class_is_refused_at_its_place() -> None:
    try:
        policy(CLASSES + "cfsQuotaBurst: {enabled: true, classes: [LX]}\n")
    except PolicyError as exc:
        assert any(
            "LX" in p.message and p.location.path == "$.spec.cfsQuotaBurst.classes[0]" for p in exc.problems
        )
    else:
        raise AssertionError("an unknown class was accepted")


def annotated(text: str) -> Any:
    snap = facts(1000, 200000)
    w = snap.workloads[0]
    pod = replace(w, annotations=MappingProxyType({"koordinator.sh/cpuBurst": text}))
    return replace(snap, workloads=(pod,))


def test_a_pods_annotation_overlays_the_section() -> None:
    """Test_genPodBurstConfig: the pod's policy and percents over the node's; a section that is off
    bursts for a pod whose annotation says auto, and cpuBurstOnly holds the pod at its base."""
    rules = spec(enabled=False, podAnnotation="koordinator.sh/cpuBurst")
    on = run_tick(
        Engine(policy(rules)),
        annotated('{"policy": "auto", "cfsQuotaBurstPercent": 150}'),
        EngineState(),
        Guards(),
    )
    assert writes(on) == [(POD, "240000"), (f"{POD}/c", "240000")]
    assert on.state.burst == {}  # the pod's period is the node's -1: no bucket
    capped = run_tick(
        Engine(policy(rules)),
        annotated('{"policy": "auto", "cfsQuotaBurstPercent": 110}'),
        EngineState(),
        Guards(),
    )
    assert writes(capped) == [(POD, "220000"), (f"{POD}/c", "220000")]  # 240000 capped at 110%


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{not json", "it is not JSON"),
        (
            '{"policy": "sometimes"}',
            "policy 'sometimes' is not one of none, cpuBurstOnly, cfsQuotaBurstOnly, auto",
        ),
        ('{"cfsQuotaBurstPercent": 50}', "cfsQuotaBurstPercent 50 is not an integer in [100, 10000]"),
    ],
)
def test_a_bad_annotation_is_ignored_with_a_note(text: str, why: str) -> None:
    rules = spec(podAnnotation="koordinator.sh/cpuBurst")
    result = run_tick(Engine(policy(rules)), annotated(text), EngineState(), Guards())
    assert writes(result) == [(POD, "240000"), (f"{POD}/c", "240000")]  # the section's own values
    notes = [s.to_dict()["reason"] for s in result.evaluation.skipped]
    assert [n for n in notes if n.startswith(f"annotation koordinator.sh/cpuBurst of p ignored: {why}")], notes


def test_without_observed_quotas_the_kubelets_are_the_start() -> None:
    """The daemon reads a quota once qosd manages it; before, the container's and the pod's are the
    kubelet's for their limits (2 cores: 200000)."""
    snap = facts(1000, 200000)
    unread = replace(snap, cgroups={})
    result = run_tick(Engine(policy(spec())), unread, EngineState(), Guards())
    assert writes(result) == [(POD, "240000"), (f"{POD}/c", "240000")]
