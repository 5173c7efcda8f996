"""The evaluation engine: rule timing (for, cooldown, hysteresis, clearWhen, limits), audit mode,
eviction accounting and the planner's guards. Numbers follow the anchors where they have them."""

from __future__ import annotations

import pytest

from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState, Evicting
from engine.model.intents import EvictIntent
from engine.plan.planner import Guards
from engine.tick import TickResult, run_tick
from tests.builders import GiB, pod, policy, snapshot
from tests.features.rules.test_durable_backend import HAVE_DURABLE, NO_DURABLE

CLASSES = """\
defaultClass: ls
classes:
  - name: system
    protected: true
    match: [{labels: {tier: system}}]
  - name: be
    evictionPriority: 0
    match: [{labels: {koordinator.sh/qosClass: BE}}]
    cpu: {policy: reclaimed}
  - name: ls
    evictionPriority: 100
    match: [{labels: {koordinator.sh/qosClass: LS}}]
"""

BE = {"koordinator.sh/qosClass": "BE"}
LS = {"koordinator.sh/qosClass": "LS"}


def engine_for(rules: str, **kw: str) -> Engine:
    return Engine(policy(CLASSES + rules))


def tick(engine: Engine, snap, state: EngineState | None = None, **guards) -> TickResult:  # type: ignore[no-untyped-def]
    return run_tick(engine, snap, state or EngineState(), Guards(**guards))


def evicted(result: TickResult) -> list[str]:
    return [op.name for op in result.plan.operations if op.kind == "evictPod"]


MEM_RULE = """\
rules:
  - name: mem-evict
    when: {node.memory.usage_percent: {gte: 70}}
    then:
      evict:
        victims: {classes: [be]}
        orderBy: [priority, -memory.usage, -name]
        release: {lowerPercent: 68}
"""


def mem_snapshot(used_gib: float, pods: list, usage: dict[str, float], time: float = 1000.0):  # type: ignore[no-untyped-def, type-arg]
    return snapshot(
        time=time,
        memory=100 * GiB,
        node={"memory.usage_bytes": used_gib * GiB},
        pods=pods,
        pod_metrics={uid: {"memory.usage_bytes": gib * GiB} for uid, gib in usage.items()},
    )


@pytest.mark.parametrize(
    ("used", "usage", "expected", "target_gib"),
    [
        # Koordinator BEMemoryEvict: usage% = floor(used*100/cap); release = cap * (usage% - lower) / 100.
        (80, {"a": 5, "b": 8, "c": 3}, ["b", "a"], 12),  # 12 GiB: 8 + 5 released
        (79.9, {"a": 5, "b": 8, "c": 3}, ["b", "a"], 11),  # 79.9% floors to 79
        (70, {"a": 9, "b": 8, "c": 3}, ["a"], 2),  # 2 GiB: the largest user alone covers it
        (69.99, {"a": 5, "b": 8, "c": 3}, [], None),  # below the threshold
        (99, {"a": 5, "b": 8, "c": 3}, ["b", "a", "c"], 31),  # everything, still short of the target
    ],
)
def test_memory_eviction_release_arithmetic(used: float, usage: dict[str, float], expected: list[str], target_gib: float | None) -> None:
    pods = [pod("a", labels=BE, priority=5500), pod("b", labels=BE, priority=5500), pod("c", labels=BE, priority=5500)]
    result = tick(engine_for(MEM_RULE), mem_snapshot(used, pods, usage))
    assert evicted(result) == expected
    if target_gib is not None:
        release = next(i for i in result.evaluation.intents if isinstance(i, EvictIntent)).release
        assert release is not None and release.target == pytest.approx(target_gib * GiB)


def test_lower_priority_is_evicted_before_larger_usage() -> None:
    pods = [pod("big", labels=BE, priority=5500), pod("small", labels=BE, priority=5000)]
    result = tick(engine_for(MEM_RULE), mem_snapshot(71, pods, {"big": 20, "small": 1}))
    assert evicted(result) == ["small", "big"]


def test_pending_evictions_count_as_released() -> None:
    """Koordinator PR #3137: pods already being evicted are credited, so no extra victims."""
    pods = [pod("a", labels=BE, priority=5500), pod("b", labels=BE, priority=5500)]
    engine = engine_for(MEM_RULE)
    snap = mem_snapshot(80, pods, {"a": 6, "b": 13})
    first = tick(engine, snap)
    assert evicted(first) == ["b"]
    assert set(first.state.evicting) == {"b"}
    again = tick(engine, mem_snapshot(80, pods, {"a": 6, "b": 13}, time=1010), first.state)
    assert evicted(again) == []
    release = next(i for i in again.evaluation.intents if isinstance(i, EvictIntent)).release if again.evaluation.intents else None
    assert release is None  # nothing new chosen: the pending 13 GiB covers the 12 GiB target


def test_terminating_pods_count_as_released() -> None:
    pods = [pod("a", labels=BE, priority=5500), pod("b", labels=BE, priority=5500, terminating=True)]
    result = tick(engine_for(MEM_RULE), mem_snapshot(80, pods, {"a": 6, "b": 13}))
    assert evicted(result) == []


def test_protected_and_unlisted_classes_are_never_victims() -> None:
    rules = MEM_RULE.replace("victims: {classes: [be]}", "victims: {}").replace(
        "orderBy: [priority, -memory.usage, -name]", "orderBy: [class, -memory.usage]"
    )
    pods = [pod("sys", labels={"tier": "system"}), pod("web", labels=LS), pod("be", labels=BE)]
    result = tick(engine_for(rules), mem_snapshot(90, pods, {"sys": 30, "web": 20, "be": 1}))
    assert "sys" not in evicted(result)
    assert evicted(result)[0] == "be"  # class order: evictionPriority 0 before 100


def test_cooldown_counts_from_the_last_eviction() -> None:
    rules = MEM_RULE.replace("    then:", "    cooldown: 4s\n    then:")
    engine = engine_for(rules)
    pods = [pod("a", labels=BE), pod("b", labels=BE)]
    first = tick(engine, mem_snapshot(71, pods, {"a": 5, "b": 4}, time=100))
    assert evicted(first) == ["a"]
    gone = [pod("b", labels=BE)]
    during = tick(engine, mem_snapshot(71, gone, {"b": 4}, time=102), first.state)
    assert evicted(during) == [] and "cooldown" in during.evaluation.skipped[0].reason
    after = tick(engine, mem_snapshot(71, gone, {"b": 4}, time=104), during.state)
    assert evicted(after) == ["b"]


def test_sustain_timer_resets_when_the_condition_drops() -> None:
    rules = MEM_RULE.replace("    then:", "    for: 10s\n    then:")
    engine = engine_for(rules)
    pods = [pod("a", labels=BE)]
    s = EngineState()
    for t, used, expect in ((0, 75, []), (5, 75, []), (8, 60, []), (12, 75, []), (21, 75, []), (22, 75, ["a"])):
        r = tick(engine, mem_snapshot(used, pods, {"a": 5}, time=1000 + t), s)
        assert evicted(r) == expect, t
        s = r.state


def test_hysteresis_keeps_a_fired_rule_until_the_margin() -> None:
    rules = """\
rules:
  - name: hot
    when: {node.cpu.usage_percent: {gte: 80, hysteresis: 5}}
    then: {taint: {key: qosd.io/hot, effect: NoSchedule}}
"""
    engine = engine_for(rules)
    s = EngineState()
    seen = []
    for usage in (70, 80, 78, 76, 74.9, 78):
        r = tick(engine, snapshot(node={"cpu.usage_cores": usage * 16 / 100}), s)
        seen.append(bool(r.plan.operations))
        s = r.state
    assert seen == [False, True, True, True, False, False]


BACKENDS = [
    "python",
    pytest.param("durable", marks=[pytest.mark.durable, pytest.mark.skipif(not HAVE_DURABLE, reason=NO_DURABLE)]),
]


def fired_over(engine: Engine, steps: list[tuple[float, float]]) -> list[bool]:
    """Whether the rule fired at each (time offset, node cpu.usage_percent) step, state carried."""
    s = EngineState()
    out = []
    for at, percent in steps:
        r = tick(engine, snapshot(time=1000 + at, node={"cpu.usage_percent": percent}), s)
        out.append(bool(r.evaluation.fired))
        s = r.state
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("condition", "percents", "expected"),
    [
        # gte 80, hysteresis 5: once fired it holds down to 75 inclusive, then it needs 80 again
        ("{gte: 80, hysteresis: 5}", [79.9, 80, 75, 74.99, 76, 80], [False, True, True, False, False, True]),
        # gt: strict at both thresholds
        ("{gt: 80, hysteresis: 5}", [80, 80.1, 75.1, 75, 80.1], [False, True, True, False, True]),
        # lte / lt: the margin is above the threshold
        ("{lte: 20, hysteresis: 5}", [20.1, 20, 25, 25.01, 24, 20], [False, True, True, False, False, True]),
        ("{lt: 20, hysteresis: 5}", [20, 19.9, 24.9, 25, 19.9], [False, True, True, False, True]),
        # without hysteresis the threshold alone decides, latched or not
        ("{gte: 80}", [80, 79.99, 80], [True, False, True]),
        # a fractional margin
        ("{gte: 80, hysteresis: 0.5}", [80, 79.5, 79.49, 79.6], [True, True, False, False]),
    ],
    ids=["gte", "gt", "lte", "lt", "none", "fraction"],
)
def test_hysteresis_table(backend: str, condition: str, percents: list[float], expected: list[bool]) -> None:
    rules = f"""\
rules:
  - name: hot
    when: {{node.cpu.usage_percent: {condition}}}
    then: {{condition: {{type: CPUPressure, reason: Hot}}}}
"""
    engine = Engine(policy(CLASSES + rules), backend=backend)
    assert fired_over(engine, [(float(i), p) for i, p in enumerate(percents)]) == expected


@pytest.mark.parametrize(
    ("timing", "steps", "expected"),
    [
        # cooldown 4s counts from the last firing; exactly 4 s later it may fire again
        ("cooldown: 4s", [(0, 90), (2, 90), (3.9, 90), (4, 90), (7, 90), (8, 90)],
         [True, False, False, True, False, True]),
        # the condition dropping in between does not end the cooldown (a new episode still waits)
        ("cooldown: 4s", [(0, 90), (1, 10), (2, 90), (4, 90)], [True, False, False, True]),
        # for (sustain): held for the whole duration, exactly 10 s counts
        ("for: 10s", [(0, 90), (9.9, 90), (10, 90), (11, 90)], [False, False, True, True]),
        # a drop restarts the timer from the next time it holds
        ("for: 10s", [(0, 90), (5, 10), (6, 90), (15.9, 90), (16, 90)], [False, False, False, False, True]),
        # for: 0s fires at once
        ("for: 0s", [(0, 90), (1, 10), (2, 90)], [True, False, True]),
        # sustain, then cooldown: the timer keeps running through the cooldown
        ("for: 2s\n    cooldown: 5s", [(0, 90), (2, 90), (3, 90), (7, 90), (8, 90)],
         [False, True, False, True, False]),
    ],
    ids=["cooldown", "cooldown-across-episodes", "sustain", "sustain-reset", "sustain-zero", "sustain-cooldown"],
)
def test_sustain_and_cooldown_table(timing: str, steps: list[tuple[float, float]], expected: list[bool]) -> None:
    rules = f"""\
rules:
  - name: hot
    when: {{node.cpu.usage_percent: {{gte: 80}}}}
    {timing}
    then: {{condition: {{type: CPUPressure, reason: Hot}}}}
"""
    assert fired_over(engine_for(rules), steps) == expected


@pytest.mark.parametrize(
    ("rule_cooldown", "evict_cooldown", "effective"),
    [("", "", 0.0), ("cooldown: 2s\n    ", "", 2.0), ("", "cooldown: 4s, ", 4.0),
     ("cooldown: 2s\n    ", "cooldown: 4s, ", 4.0), ("cooldown: 5s\n    ", "cooldown: 4s, ", 5.0)],
)
def test_the_longer_of_the_rule_and_evict_cooldowns_applies(rule_cooldown: str, evict_cooldown: str, effective: float) -> None:
    """Katalyst and Koordinator configure a cooldown per evictor; a rule may add its own."""
    rules = f"""\
rules:
  - name: mem-evict
    when: {{node.memory.usage_percent: {{gte: 70}}}}
    {rule_cooldown}then:
      evict: {{{evict_cooldown}victims: {{classes: [be]}}, release: {{lowerPercent: 68}}}}
"""
    assert engine_for(rules).cooldowns["mem-evict"] == effective


def test_clear_when_holds_a_rule_until_it_is_true() -> None:
    rules = """\
rules:
  - name: hot
    when: {node.cpu.usage_percent: {gte: 80}}
    clearWhen: {node.cpu.usage_percent: {lt: 50}}
    then: {condition: {type: CPUPressure, reason: Hot}}
"""
    engine = engine_for(rules)
    s = EngineState()
    seen = []
    for usage in (85, 60, 55, 49, 60):
        r = tick(engine, snapshot(node={"cpu.usage_cores": usage * 16 / 100}), s)
        seen.append(bool(r.plan.operations))
        s = r.state
    assert seen == [True, True, True, False, False]


def test_notify_fires_once_per_episode_while_taints_hold() -> None:
    rules = """\
rules:
  - name: hot
    when: {node.cpu.usage_percent: {gte: 80}}
    then:
      - notify: {reason: CPUHot, message: node is hot}
      - taint: {key: qosd.io/hot, effect: NoSchedule}
"""
    engine = engine_for(rules)
    s = EngineState()
    kinds = []
    for usage in (90, 90, 10, 90):
        r = tick(engine, snapshot(node={"cpu.usage_cores": usage * 16 / 100}), s)
        kinds.append(sorted(op.kind for op in r.plan.operations))
        s = r.state
    assert kinds == [["emitEvent", "setNodeTaint"], ["setNodeTaint"], [], ["emitEvent", "setNodeTaint"]]


def test_rate_limit_per_window() -> None:
    rules = """\
rules:
  - name: hot
    when: {node.cpu.usage_percent: {gte: 80}}
    limits: {perWindow: {count: 2, window: 1m}}
    then: {condition: {type: CPUPressure}}
"""
    engine = engine_for(rules)
    s = EngineState()
    fired = []
    for t in (0, 10, 20, 30, 61, 75):
        r = tick(engine, snapshot(time=1000 + t, node={"cpu.usage_cores": 15}), s)
        fired.append(bool(r.evaluation.fired))
        s = r.state
    assert fired == [True, True, False, False, True, True]  # at 75 s only the firing at 61 s is in the window


def test_audit_mode_reports_and_does_nothing() -> None:
    rules = MEM_RULE.replace("  - name: mem-evict\n", "  - name: mem-evict\n    mode: audit\n")
    pods = [pod("a", labels=BE)]
    result = tick(engine_for(rules), mem_snapshot(80, pods, {"a": 5}))
    assert [i.target for i in result.evaluation.intents] == ["default/a"]
    assert result.plan.operations == ()
    assert result.plan.held[0].reason.startswith("audit mode")
    assert result.state.evicting == {}


def test_dry_run_and_eviction_burst_guards() -> None:
    rules = MEM_RULE.replace("release: {lowerPercent: 68}", "release: {lowerPercent: 10}")
    pods = [pod(f"p{i}", labels=BE, priority=i) for i in range(5)]
    snap = mem_snapshot(90, pods, {f"p{i}": 1 for i in range(5)})
    burst = tick(engine_for(rules), snap, eviction_burst=3)
    assert evicted(burst) == ["p0", "p1", "p2"]
    assert [h.reason for h in burst.plan.held] == ["eviction burst of 3 per tick reached"] * 2
    assert set(burst.state.evicting) == {"p0", "p1", "p2"}  # held pods are not counted as evicting
    dry = tick(engine_for(rules), snap, dry_run=True)
    assert dry.plan.operations == () and len(dry.plan.held) == 5


def test_a_pod_is_evicted_once_across_rules_in_one_round() -> None:
    rules = MEM_RULE + """\
  - name: cpu-evict
    when: {node.cpu.usage_percent: {gte: 50}}
    then: {evict: {victims: {classes: [be]}, orderBy: [-memory.usage], release: {resource: cpu, amount: 1}}}
"""
    pods = [pod("a", labels=BE), pod("b", labels=BE)]
    snap = snapshot(
        memory=100 * GiB,
        node={"memory.usage_bytes": 71 * GiB, "cpu.usage_cores": 12},
        pods=pods,
        pod_metrics={
            "a": {"memory.usage_bytes": 9 * GiB, "cpu.usage_cores": 0.5},
            "b": {"memory.usage_bytes": 1 * GiB, "cpu.usage_cores": 2},
        },
    )
    result = tick(engine_for(rules), snap)
    # mem-evict takes a; for cpu-evict a is already released (0.5 core credit) and b makes up the rest.
    assert evicted(result) == ["a", "b"]
    cpu_intent = next(i for i in result.evaluation.intents if i.provenance.rule == "cpu-evict")
    assert isinstance(cpu_intent, EvictIntent) and cpu_intent.release is not None
    assert (cpu_intent.release.pending, cpu_intent.release.released_after) == (0.5, 2.5)


def test_kubelet_style_one_victim_then_wait() -> None:
    """Without a release target a rule evicts maxPerRound pods, then waits while they terminate."""
    rules = """\
rules:
  - name: one-by-one
    when: {node.memory.usage_percent: {gte: 90}}
    then: {evict: {victims: {classes: [be]}, orderBy: [-memory.usage], maxPerRound: 1}}
"""
    engine = engine_for(rules)
    pods = [pod("a", labels=BE), pod("b", labels=BE)]
    first = tick(engine, mem_snapshot(95, pods, {"a": 2, "b": 3}))
    assert evicted(first) == ["b"]
    waiting = tick(engine, mem_snapshot(95, pods, {"a": 2, "b": 3}, time=1001), first.state)
    assert evicted(waiting) == []
    gone = tick(engine, mem_snapshot(95, [pods[0]], {"a": 2}, time=1002), waiting.state)
    assert evicted(gone) == ["a"]


def test_numa_scoped_rule_evaluates_each_numa_node() -> None:
    rules = """\
rules:
  - name: numa-pressure
    when: {numa.memory.below_watermark_count: {gte: 12}}
    then: {evict: {victims: {classes: [be]}, orderBy: [-memory.usage], maxPerRound: 1}}
"""
    pods = [pod("a", labels=BE), pod("b", labels=BE)]
    snap = snapshot(
        numa={0: {"memory.below_watermark_count": 3}, 1: {"memory.below_watermark_count": 12}},
        pods=pods,
        pod_metrics={"a": {"memory.usage_bytes": 2 * GiB}, "b": {"memory.usage_bytes": 3 * GiB}},
    )
    result = tick(engine_for(rules), snap)
    assert evicted(result) == ["b"]
    assert result.evaluation.intents[0].provenance.item == "1"


def test_pod_scoped_rule_evicts_only_the_pods_that_matched() -> None:
    rules = """\
rules:
  - name: rss-overuse
    when: {pod.memory.rss_over_request: {gt: 1.05}}
    then: {evict: {victims: {classes: [be, ls]}, orderBy: [-memory.rss], maxPerRound: 5}}
"""
    pods = [pod("fat", labels=LS, memory=1 * GiB), pod("ok", labels=LS, memory=1 * GiB)]
    snap = snapshot(pods=pods, pod_metrics={"fat": {"memory.rss_bytes": 1.2 * GiB}, "ok": {"memory.rss_bytes": 0.5 * GiB}})
    assert evicted(tick(engine_for(rules), snap)) == ["fat"]


def test_state_survives_serialization() -> None:
    state = EngineState(
        held_since={"r|1": 10.0},
        latched=frozenset({"r|1"}),
        last_fired={"r": 12.0},
        fired_at={"r": (11.0, 12.0)},
        evicting={"u": Evicting(12.0, "r", "memory", 5.0)},
    )
    import json

    again = EngineState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert again.to_dict() == state.to_dict()


def test_provenance_names_rule_source_and_observations() -> None:
    pods = [pod("a", labels=BE)]
    result = tick(engine_for(MEM_RULE), mem_snapshot(80, pods, {"a": 15}))
    p = result.evaluation.intents[0].provenance
    assert p.rule == "mem-evict" and p.source.startswith("test.yaml:")
    (obs,) = p.conditions
    assert (obs.fact, obs.op, obs.threshold, obs.observed, obs.met) == ("node.memory.usage_percent", "gte", 70, 80, True)
