"""Sample-count triggers (issue 17 item 3): ``samples: {fire: N, clear: M}`` fires after N samples that
met ``when``; a sample that did not meet it does not reset the count, only M in a row do (they also end
the firing). Beside ``for`` (which restarts on any false tick) and ``clearWhen``; kept in the engine
state, so a restart resumes the counts."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.config.errors import PolicyError
from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState, state_from_json
from engine.explain.provenance import rule_ref
from engine.plan.planner import Guards
from engine.tick import TickResult, run_tick
from tests.builders import pod, policy, snapshot

HEAD = """\
classes:
  - {name: be, match: [{labels: {tier: be}}]}
rules:
  - name: hot
    when: {node.cpu.usage_percent: {gte: 80}}
"""
TAINT = "    then: {taint: {key: example.com/cpu-hot, effect: NoSchedule}}\n"


def rule(samples: str, extra: str = "") -> Engine:
    return Engine(policy(HEAD + f"    samples: {samples}\n" + extra + TAINT))


def tick(engine: Engine, cpu: float | None, state: EngineState, t: float) -> TickResult:
    node = {} if cpu is None else {"cpu.usage_percent": cpu}
    return run_tick(engine, snapshot(time=t, node=node), state, Guards())


def run(engine: Engine, cpus: list[float | None]) -> list[bool]:
    state = EngineState()
    out = []
    for i, cpu in enumerate(cpus):
        result = tick(engine, cpu, state, 1000.0 + i)
        out.append("hot" in result.evaluation.fired)
        state = result.state
    return out


H, L, MID = 90.0, 50.0, 75.0  # above, below, between the thresholds of the clearWhen case


@pytest.mark.parametrize(
    ("samples", "cpus", "fired"),
    [
        pytest.param("{fire: 3, clear: 2}", [H, H, H, H], [0, 0, 1, 1], id="fires-on-the-third"),
        pytest.param("{fire: 3, clear: 2}", [H, L, H, H], [0, 0, 0, 1], id="one-dip-does-not-reset"),
        pytest.param("{fire: 3, clear: 2}", [H, L, L, H, H], [0, 0, 0, 0, 0], id="two-dips-in-a-row-reset"),
        pytest.param("{fire: 3, clear: 2}", [H, L, H, L, H], [0, 0, 0, 0, 1], id="dips-apart-do-not-reset"),
        pytest.param("{fire: 2, clear: 2}", [H, H, L, H, L, L, H], [0, 1, 1, 1, 1, 0, 0], id="firing-ends-after-m-in-a-row"),
        pytest.param("{fire: 1, clear: 1}", [H, L, H], [1, 0, 1], id="one-and-one-is-plain-when"),
        pytest.param("{fire: 2, clear: 3}", [H, None, H], [0, 0, 1], id="a-missing-fact-is-a-sample-below"),
    ],
)
def test_counting(samples: str, cpus: list[float | None], fired: list[int]) -> None:
    assert run(rule(samples), cpus) == [bool(x) for x in fired]


def test_clear_when_sets_what_counts_toward_clearing() -> None:
    """With clearWhen below 60: a sample between 60 and 80 neither adds to the count nor clears."""
    engine = rule("{fire: 2, clear: 2}", "    clearWhen: {node.cpu.usage_percent: {lt: 60}}\n")
    assert run(engine, [H, H, MID, MID, MID, L, MID, L]) == [False, True, True, True, True, True, True, False]
    assert run(engine, [H, MID, MID, MID, H]) == [False, False, False, False, True]


def test_for_still_restarts_on_any_false_tick() -> None:
    """The contrast that makes samples worth having: for: 2s needs three ticks in a row."""
    engine = Engine(policy(HEAD + "    for: 2s\n" + TAINT))
    assert run(engine, [H, L, H, H, L, H, H, H]) == [False] * 7 + [True]


def test_counts_survive_a_restart_through_the_state_file() -> None:
    engine = rule("{fire: 4, clear: 2}")
    state = EngineState()
    for i, cpu in enumerate([H, L, H]):
        state = tick(engine, cpu, state, 1000.0 + i).state
    assert state.samples == {"hot": (2, 0)}  # H, L (one toward clearing), H (the run is over)
    saved = json.dumps({"apiVersion": "qosd.io/v1alpha1", "kind": "EngineState", "state": state.to_dict()})
    restarted = rule("{fire: 4, clear: 2}")  # a new process: nothing but the file
    a = tick(engine, H, state, 1003.0)
    b = tick(restarted, H, state_from_json(saved), 1003.0)
    assert "hot" not in a.evaluation.fired and "hot" not in b.evaluation.fired
    assert a.state.to_dict() == b.state.to_dict()
    assert "hot" in tick(restarted, H, b.state, 1004.0).evaluation.fired


def test_per_pod_counts_and_pods_that_leave() -> None:
    engine = Engine(policy("""\
classes:
  - {name: be, match: [{labels: {tier: be}}]}
rules:
  - name: pod-hot
    when: {pod.cpu.usage_cores: {gt: 1}}
    samples: {fire: 2, clear: 2}
    then: {taint: {key: example.com/pod-hot, effect: NoSchedule}}
"""))
    pods = [pod("a", labels={"tier": "be"}), pod("b", labels={"tier": "be"})]

    def at(t: float, usage: dict[str, float], state: EngineState, live: list[str]) -> TickResult:
        snap = snapshot(time=t, pods=[p for p in pods if p.uid in live],
                        pod_metrics={u: {"cpu.usage_cores": c} for u, c in usage.items() if u in live})
        return run_tick(engine, snap, state, Guards())

    r1 = at(1000.0, {"a": 2.0, "b": 2.0}, EngineState(), ["a", "b"])
    r2 = at(1001.0, {"a": 2.0, "b": 0.0}, r1.state, ["a", "b"])
    assert "pod-hot" not in r1.evaluation.fired
    assert [i.provenance.item for i in r2.evaluation.intents if i.provenance.rule == "pod-hot"] == ["default/a"]
    assert set(r2.state.samples) == {"pod-hot|default/a", "pod-hot|default/b"}
    r3 = at(1002.0, {"a": 2.0}, r2.state, ["a"])
    assert set(r3.state.samples) == {"pod-hot|default/a"}  # b left: its count goes with it


@pytest.mark.parametrize(
    ("extra", "where", "message"),
    [
        ("    samples: {fire: 3, clear: 2}\n    for: 10s\n", "$.spec.rules[0].samples", "either for or samples"),
        ("    samples: {fire: 0, clear: 2}\n", "$.spec.rules[0].samples.fire", ""),
        ("    samples: {fire: 3}\n", "$.spec.rules[0].samples", ""),
    ],
)
def test_samples_are_validated_where_written(extra: str, where: str, message: str) -> None:
    with pytest.raises(PolicyError) as exc:
        policy(HEAD + extra + TAINT)
    assert any(p.location.path == where and message in p.message for p in exc.value.problems), exc.value.format()


def test_samples_without_when_is_refused() -> None:
    with pytest.raises(PolicyError) as exc:
        policy("rules:\n  - name: r\n    samples: {fire: 2, clear: 1}\n" + TAINT)
    assert any("samples needs a when" in p.message for p in exc.value.problems)


def model(fire: int, clear: int, met: list[bool]) -> list[bool]:
    """The semantics, written plainly: count up on a met sample (to fire), a run of `clear` unmet
    samples in a row resets; fires while the count is at `fire`."""
    count = run_below = 0
    out = []
    for m in met:
        if m:
            count, run_below = min(count + 1, fire), 0
        elif count:
            run_below += 1
            if run_below >= clear:
                count = run_below = 0
        out.append(count >= fire)
    return out


@settings(max_examples=60, deadline=None)
@given(
    fire=st.integers(1, 4),
    clear=st.integers(1, 4),
    met=st.lists(st.booleans(), min_size=1, max_size=12),
)
def test_engine_counts_as_the_model(fire: int, clear: int, met: list[bool]) -> None:
    engine = rule(f"{{fire: {fire}, clear: {clear}}}")
    assert run(engine, [H if m else L for m in met]) == model(fire, clear, met)


def test_explain_says_a_counted_rule_fired_on_its_count() -> None:
    """During a dip the comparisons do not hold; the provenance and `qosd explain` say why it fired."""
    engine = rule("{fire: 2, clear: 2}")
    state = EngineState()
    for i, cpu in enumerate([H, H, L]):
        result = tick(engine, cpu, state, 1000.0 + i)
        state = result.state
    [intent] = [i.to_dict() for i in result.evaluation.intents if i.provenance.rule == "hot"]
    p = intent["provenance"]
    assert p["inputs"]["samples"] == {"met": 2, "fire": 2, "towardClear": 1, "clear": 2}
    assert "after 2 of 2 samples met (1 of 2 in a row toward clearing)" in rule_ref(p)


def test_counts_of_a_rule_that_no_longer_counts_are_dropped() -> None:
    state = tick(rule("{fire: 3, clear: 2}"), H, EngineState(), 1000.0).state
    assert state.samples == {"hot": (1, 0)}
    plain = Engine(policy(HEAD + TAINT))  # the next generation has the rule without samples
    assert tick(plain, H, state, 1001.0).state.samples == {}
