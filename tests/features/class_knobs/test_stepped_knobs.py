"""Stepped controllers (issue 17 item 1): knob expressions read the file's ``current`` value, and a
dead band and a growth cap bound a computed value relative to it. The current value is the cgroup
read back, else the value qosd last computed (engine state, which survives a restart)."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Iterator
from types import MappingProxyType
from typing import Any

import pytest

from engine.adapters.cgroup import CgroupAdapter
from engine.config.errors import PolicyError
from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState, state_from_json
from engine.features.class_knobs.knobs import compile_knob, current_value, relative
from engine.model.facts import Container, Workload
from engine.model.intents import CgroupIntent
from engine.plan.planner import Guards
from engine.tick import TickResult, run_tick
from tests.builders import GiB, policy, snapshot
from tests.features.class_knobs.test_per_container import CLASSES
from tests.realcgroup import Subtree, real_subtree, v1_layout

# Throttle by x0.9 per tick while the node is busy, floored at max(request, limit x 0.3); restore
# by x1.1 once it is quiet, capped at the limit, never more than +10 % of the current value per
# tick; a change of the throttle within 2 % of the current value is not written.
CONTROLLER = """\
rules:
  - name: throttle
    when: {node.cpu.usage_percent: {gte: 80}}
    then:
      setCgroup:
        target: {class: batch}
        containers:
          cpu.cfs_quota_us:
            expr: >-
              [(current or container.limits.cpu) * 0.9,
               [container.requests.cpu, container.limits.cpu * 0.3] | max] | max
            deadBandPercent: 2
  - name: restore
    when: {node.cpu.usage_percent: {lt: 80}}
    then:
      setCgroup:
        target: {class: batch}
        containers:
          cpu.cfs_quota_us:
            expr: "[(current or container.limits.cpu) * 1.1, container.limits.cpu] | min"
            maxGrowthPercent: 10
"""

PATH = "kubepods/podb1/app"


def batch_pod(path: str = PATH, request: float = 1.0, limit: float = 4.0) -> Workload:
    pod_path = path.rsplit("/", 1)[0]
    return Workload(
        uid="b1",
        name="etl",
        namespace="batch",
        labels=MappingProxyType({"tier": "batch"}),
        kube_qos="Burstable",
        cgroup_path=pod_path,
        containers=(Container("app", requests={"cpu": request}, limits={"cpu": limit}, cgroup_path=path),),
    )


def quota(result: TickResult, path: str = PATH) -> str | None:
    values = [i.value for i in result.evaluation.intents if isinstance(i, CgroupIntent) and i.path == path]
    return values[0] if values else None


def tick(engine: Engine, busy: bool, state: EngineState, t: float, cgroups: dict[str, dict[str, str]] | None = None,
         pod: Workload | None = None) -> TickResult:
    snap = snapshot(time=t, node={"cpu.usage_percent": 90.0 if busy else 20.0}, pods=[pod or batch_pod()])
    if cgroups is not None:
        snap = dataclasses.replace(snap, cgroups=cgroups)
    return run_tick(engine, snap, state, Guards())


def test_throttle_steps_down_to_the_floor_and_restore_steps_back_to_the_limit() -> None:
    """Limit 4 cores, request 1: the floor is max(1, 4 x 0.3) = 1.2 cores. Without read-back (a
    facts snapshot, a RuleTest's steps) each tick steps from the value qosd computed last."""
    engine = Engine(policy(CLASSES + CONTROLLER))
    state = EngineState()
    seen: list[str | None] = []
    for i, busy in enumerate([True] * 14 + [False] * 14):
        result = tick(engine, busy, state, 1000.0 + i)
        seen.append(quota(result))
        state = result.state
    down = [int(q) for q in seen[:14] if q is not None]
    assert down[:4] == [360000, 324000, 291600, 262440]  # x0.9 from the limit (400000 us)
    assert down[-1] == 120000 and down.count(120000) >= 2  # floored at 1.2 cores and held there
    up = [int(q) for q in seen[14:] if q is not None]
    assert up[0] == 132000  # x1.1 from the floor
    assert all(b <= a * 1.1 + 1 for a, b in itertools.pairwise(up))  # growth cap
    assert up[-1] == 400000  # capped at the limit
    assert state.knob_values == {f"{PATH}/cpu.cfs_quota_us": "400000"}


def test_the_value_read_back_wins_over_the_remembered_one() -> None:
    """The kernel's value is what the controller steps from: a kubelet that reset the quota to the
    limit (or a write that failed) restarts the descent from there."""
    engine = Engine(policy(CLASSES + CONTROLLER))
    first = tick(engine, True, EngineState(), 1000.0)
    assert quota(first) == "360000"
    from_state = tick(engine, True, first.state, 1001.0)
    assert quota(from_state) == "324000"
    reset = tick(engine, True, first.state, 1001.0, {PATH: {"cpu.cfs_quota_us": "400000"}})
    assert quota(reset) == "360000"
    v2 = tick(engine, True, first.state, 1001.0, {PATH: {"cpu.max": "200000 100000"}})
    assert quota(v2) == "180000"  # read back under the other version's name, in its own format


def test_the_controller_state_survives_a_restart_through_the_state_file() -> None:
    engine = Engine(policy(CLASSES + CONTROLLER))
    state = EngineState()
    for i in range(3):
        state = tick(engine, True, state, 1000.0 + i).state
    saved = json.dumps({"apiVersion": "qosd.io/v1alpha1", "kind": "EngineState", "state": state.to_dict()})
    restarted = Engine(policy(CLASSES + CONTROLLER))  # a new process: nothing but the file
    a = tick(engine, True, state, 1003.0)
    b = tick(restarted, True, state_from_json(saved), 1003.0)
    assert quota(a) == quota(b) == "262440"
    assert a.state.to_dict() == b.state.to_dict()


def test_values_of_cgroups_that_are_gone_are_dropped_from_the_state() -> None:
    engine = Engine(policy(CLASSES + CONTROLLER))
    state = tick(engine, True, EngineState(), 1000.0).state
    assert state.knob_values
    other = dataclasses.replace(batch_pod("kubepods/podb2/app"), uid="b2", name="other")
    state = tick(engine, False, state, 1001.0, pod=other).state
    assert set(state.knob_values) == {"kubepods/podb2/app/cpu.cfs_quota_us"}


@pytest.mark.parametrize(
    ("value", "current", "band", "growth", "expected"),
    [
        (3.0, None, 2.0, 10.0, 3.0),  # nothing to be relative to: the first value stands
        (3.0, 0.0, 2.0, 10.0, 3.0),
        (1.01, 1.0, 2.0, None, 1.0),  # within the dead band: keep the current value
        (0.98, 1.0, 2.0, None, 0.98),  # exactly on the band's edge counts as inside
        (0.97, 1.0, 2.0, None, 0.97),
        (2.0, 1.0, 0.0, 10.0, 1.1),  # growth capped at +10 %
        (2.0, 1.0, 0.0, None, 2.0),
        (0.5, 1.0, 0.0, 10.0, 0.5),  # the cap only limits growth
    ],
)
def test_relative(value: float, current: float | None, band: float, growth: float | None, expected: float) -> None:
    assert relative(value, current, band, growth) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("file", "text", "expected"),
    [
        ("cpu.cfs_quota_us", "150000", 1.5),
        ("cpu.cfs_quota_us", "-1", None),
        ("cpu.max", "50000 50000", 1.0),
        ("cpu.max", "max 100000", None),
        ("cpu.cfs_burst_us", "20000", 0.2),
        ("cpu.shares", "2048", 2.0),
        ("cpu.weight", "100", None),
        ("memory.high", str(GiB), float(GiB)),
        ("memory.max", "max", None),
        ("memory.limit_in_bytes", "9223372036854771712", None),  # v1's "no limit"
        ("memory.low", "garbage", None),
        (None, None, None),
    ],
)
def test_current_value(file: str | None, text: str | None, expected: float | None) -> None:
    assert current_value(file or "cpu.cfs_quota_us", text) == expected


def test_dead_band_on_a_percent_knob() -> None:
    knob = compile_knob("cpu.cfs_quota_us", {"percent": 100, "of": "limit", "deadBandPercent": 5})
    pod = batch_pod()
    assert knob(pod, {}, pod.containers[0], 3.9) == "390000"  # 4.0 is within 5 % of 3.9
    assert knob(pod, {}, pod.containers[0], 3.0) == "400000"


@pytest.mark.parametrize(
    ("knob", "message"),
    [
        ('{expr: "current * 0.9", deadBandPercent: 10, maxGrowthPercent: 5}', "is not above deadBandPercent"),
        ('{expr: "current * 0.9", deadBandPercent: 10, maxGrowthPercent: 10}', "is not above deadBandPercent"),
        ('{expr: "previous * 0.9"}', "unknown name(s) previous"),
    ],
)
def test_bounds_that_cannot_work_are_refused(knob: str, message: str) -> None:
    spec = f"""rules:
  - name: r
    then: {{setCgroup: {{target: {{class: batch}}, containers: {{cpu.cfs_quota_us: {knob}}}}}}}
"""
    with pytest.raises(PolicyError) as exc:
        policy(CLASSES + spec)
    assert any(message in p.message for p in exc.value.problems), exc.value.format()


def test_a_dead_band_on_a_literal_is_a_schema_error() -> None:
    spec = """rules:
  - name: r
    then: {setCgroup: {target: {class: batch}, values: {cpu.cfs_quota_us: {deadBandPercent: 5}}}}
"""
    with pytest.raises(PolicyError):
        policy(CLASSES + spec)


# ---------------------------------------------------------------- real cgroupfs


@pytest.fixture
def tree() -> Iterator[Subtree]:
    with real_subtree(children=("pod", "pod/app"), sleeper="pod/app") as t:
        yield t


@pytest.mark.realcgroup
def test_the_controller_steps_from_what_the_kernel_holds(tree: Subtree) -> None:
    """Three ticks against a real v1 cgroup: evaluate, apply, read back, evaluate again. The second
    tick steps from the kernel's value; after an outside write (a kubelet resetting the quota), the
    third steps from that, not from what qosd wrote."""
    adapter = CgroupAdapter(v1_layout())
    path = f"{tree.name}/pod/app"
    pod = batch_pod(path)
    engine = Engine(policy(CLASSES + CONTROLLER))

    def observed() -> dict[str, dict[str, str]]:
        return adapter.observe({path: ["cpu.cfs_quota_us"]})

    state = EngineState()
    for i, expected in enumerate(["360000", "324000"]):
        result = tick(engine, True, state, 1000.0 + i, observed(), pod)
        adapter.apply(result.plan.operations)
        assert tree.read("cpu", "pod/app", "cpu.cfs_quota_us") == expected
        state = result.state
    (tree.dir("cpu", "pod/app") / "cpu.cfs_quota_us").write_text("200000")
    result = tick(engine, True, state, 1002.0, observed(), pod)
    adapter.apply(result.plan.operations)
    assert tree.read("cpu", "pod/app", "cpu.cfs_quota_us") == "180000"
    assert result.state.knob_values == {f"{path}/cpu.cfs_quota_us": "180000"}


def test_a_steady_controller_does_not_rerun_its_expression(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same pod object, container and current value give the same text: a controller at rest
    costs a lookup, not a sandboxed template call. An expression that reads node is always run."""
    from engine.features.class_knobs import knobs

    calls: list[str] = []
    real = knobs.bounded_expression

    def counting(text: str) -> Any:
        fn = real(text)

        def run(**context: Any) -> Any:
            calls.append(text)
            return fn(**context)

        return run

    monkeypatch.setattr(knobs, "bounded_expression", counting)
    pod = batch_pod()
    ctr = pod.containers[0]
    steady = knobs.compile_knob("cpu.cfs_quota_us", {"expr": "[(current or 4) * 0.9, 1.2] | max"})
    assert [steady(pod, {}, ctr, 1.2) for _ in range(3)] == ["120000"] * 3
    assert steady(pod, {}, ctr, 2.0) == "180000"
    assert len(calls) == 2
    calls.clear()
    with_node = knobs.compile_knob("cpu.cfs_quota_us", {"expr": "node['cpu.allocatable_cores'] * 0.1"})
    assert [with_node(pod, {"cpu.allocatable_cores": c}, ctr, None) for c in (10.0, 20.0)] == ["100000", "200000"]
    assert len(calls) == 2
