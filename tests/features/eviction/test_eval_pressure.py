"""Engine-computed eviction triggers, end to end: facts -> Engine.evaluate -> intents and state.

The pure step functions are table-tested in test_pressure.py and test_suppress.py. Here the same
anchor numbers go through the engine: the NUMA watermark counter kept in EngineState (and resumed
after a restart through to_dict/from_dict), system memory pressure with PSI, and the evict triggers
(per-pod RSS thresholds, suppression tolerance, reclaimed overcommit, Koordinator BE satisfaction).
Each test names the anchor test or formula its figures come from (katalyst-core d8c28ea,
koordinator a7a1b76).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from engine.config.errors import PolicyError
from engine.config.load import Layer, parse_documents
from engine.config.pipeline import build_policy, load_documents
from engine.config.policy import Policy
from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState
from engine.features.reclaim.report import ReportHistory
from engine.model.facts import Container, Snapshot, Workload
from engine.model.intents import EvictIntent
from engine.plan.planner import Guards
from engine.tick import TickResult, run_tick
from tests.builders import GiB, snapshot
from tests.conftest import policy_text

ROOT = Path(__file__).resolve().parents[3]
T0 = 1_700_000_000.0
RECLAIMED_MILLICPU = "resource.katalyst.kubewharf.io/reclaimed_millicpu"
RECLAIMED_MEMORY = "resource.katalyst.kubewharf.io/reclaimed_memory"
BATCH_CPU = "kubernetes.io/batch-cpu"


def bundled(overlay: str = "", labels: dict[str, str] | None = None) -> Engine:
    """The built-in layer (default.yaml for an unlabelled node) plus an optional overlay document."""
    docs = load_documents([], builtin=True)
    if overlay:
        docs += parse_documents(policy_text(overlay, "overlay"), "overlay.yaml", Layer.FILE)
    node = snapshot().node
    return Engine(build_policy(docs, node.with_labels(labels or {})))


def own(spec: str) -> Policy:
    docs = parse_documents(policy_text(spec), "test.yaml", Layer.FILE)
    return build_policy(docs, snapshot().node)


def tick(engine: Engine, snap: Snapshot, state: EngineState) -> TickResult:
    return run_tick(engine, snap, state, Guards())


def restart(state: EngineState) -> EngineState:
    """What a restarted daemon reads back: the state through JSON."""
    return EngineState.from_dict(json.loads(json.dumps(state.to_dict())))


def evictions(result: TickResult) -> list[EvictIntent]:
    return [i for i in result.evaluation.intents if isinstance(i, EvictIntent)]


def targets(result: TickResult) -> list[str]:
    return [i.name for i in evictions(result)]


def counts(state: EngineState) -> list[tuple[str, int]]:
    return [(state.pressure.numa[k].action, state.pressure.numa[k].count) for k in sorted(state.pressure.numa)]


def workload(
    uid: str,
    qos: str,
    *,
    priority: int | None = None,
    requests: list[dict[str, float]] | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    namespace: str = "default",
) -> Workload:
    ann = {"katalyst.kubewharf.io/qos_level": qos} if qos else {}
    ann.update(annotations or {})
    containers = tuple(
        Container(f"c{i}", requests=MappingProxyType(r)) for i, r in enumerate(requests or [{}])
    )
    return Workload(
        uid=uid,
        name=uid,
        namespace=namespace,
        annotations=MappingProxyType(ann),
        labels=MappingProxyType(labels or {}),
        priority=priority,
        containers=containers,
    )


# ---------------------------------------------------------------- Katalyst NUMA watermark counter

ANCHOR_COUNTER = """\
pressure:
  numaWatermark: {timesThreshold: 3, reclaimedTimesThreshold: 1, fastEvictionWaitCycle: 0}
"""

N, R, E = "noop", "reclaimed_eviction", "eviction"

# TestNumaMemoryPressurePlugin_ThresholdMet: (free NUMA 0, free NUMA 1) in GiB per 5s round and the
# anchor's (action, count) per NUMA node.
ANCHOR_ROUNDS = [
    ((20, 25), [(N, 0), (N, 0)]),
    ((1, 2), [(N, 1), (N, 1)]),
    ((1, 2), [(R, 2), (R, 2)]),
    ((1, 10), [(E, 4), (N, 1)]),
    ((1, 2), [(E, 6), (R, 2)]),
    ((1, 2), [(E, 8), (E, 3)]),
    ((10, 2), [(N, 1), (E, 4)]),
]


def numa_snapshot(free0: float, free1: float, now: float, **extra: Any) -> Snapshot:
    """The anchor's node: two NUMA nodes of 50 GiB, metric fallback with watermark_scale_factor 600,
    and one reclaimed pod to evict."""
    numa = {
        0: {"memory.free_bytes": free0 * GiB, "memory.total_bytes": 50 * GiB},
        1: {"memory.free_bytes": free1 * GiB, "memory.total_bytes": 50 * GiB},
    }
    for nid, facts in extra.items():
        numa[int(nid[1:])].update(facts)
    pods = [workload("rc", "reclaimed_cores", priority=10)]
    return snapshot(time=now, memory=100 * GiB, node={"memory.watermark_scale_factor": 600}, numa=numa, pods=pods)


@pytest.mark.parametrize("restart_after", [None, 1, 3, 5])
def test_counter_follows_katalyst_sequence_across_restarts(restart_after: int | None) -> None:
    """TestNumaMemoryPressurePlugin_ThresholdMet (thresholds 3/1, wait 0, low = 50 GiB x 600 / 10000 =
    3 GiB) through the engine, one round per 5s. Restarting after any round (state through JSON, a
    new Engine) gives the same counts as running straight through."""
    engine = bundled(ANCHOR_COUNTER)
    state = EngineState()
    for i, ((free0, free1), want) in enumerate(ANCHOR_ROUNDS):
        state = tick(engine, numa_snapshot(free0, free1, T0 + 5 * i), state).state
        assert counts(state) == want, f"round {i + 1}"
        if restart_after == i + 1:
            engine, state = bundled(ANCHOR_COUNTER), restart(state)


def test_counter_thresholds_come_from_yaml() -> None:
    """The same two rounds below low: with the bundled thresholds (12 / 6) the count 2 is noop, with
    the anchor's (3 / 1) it is RECLAIMED_EVICTION, and the reclaimed-only rule fires on both NUMA nodes."""
    for engine, action, fired in ((bundled(), N, False), (bundled(ANCHOR_COUNTER), R, True)):
        state = tick(engine, numa_snapshot(1, 2, T0), EngineState()).state
        result = tick(engine, numa_snapshot(1, 2, T0 + 5), state)
        assert counts(result.state) == [(action, 2), (action, 2)]
        assert ("numa-memory-pressure-reclaimed" in result.evaluation.fired) is fired


def test_counter_steps_once_per_interval() -> None:
    """Katalyst's counter is in eviction-manager rounds (5s); ticks in between keep the count, and a
    restart keeps the time of the last round."""
    engine = bundled(ANCHOR_COUNTER)
    state = EngineState()
    seen = []
    for dt in (0, 1, 2, 4, 5, 6, 9, 10):
        if dt == 6:
            state = restart(state)
        state = tick(engine, numa_snapshot(1, 20, T0 + dt), state).state
        seen.append(state.pressure.numa["0"].count)
    assert seen == [1, 1, 1, 1, 2, 2, 2, 4]  # round 3 is deep below low: 2 -> 4


def test_supplied_count_wins_and_the_counter_resumes_from_it() -> None:
    """A collector's count is authoritative for its tick (action from the thresholds: 5 >= 3 is
    eviction); the next round without it continues from 5: below low + 1, deep + 1 = 7."""
    engine = bundled(ANCHOR_COUNTER)
    first = tick(engine, numa_snapshot(1, 20, T0, n0={"memory.below_watermark_count": 5}), EngineState())
    assert counts(first.state)[0] == (E, 5)
    second = tick(engine, numa_snapshot(1, 20, T0 + 5), first.state)
    assert counts(second.state)[0] == (E, 7)


def test_zoneinfo_fast_path_with_bundled_thresholds() -> None:
    """Defaults 12 / 6 / 1 from default.yaml and test_below_min_fast_path_with_default_wait's
    watermarks: zone min 1 GiB -> 2 GiB, zone low 4.75 GiB -> 5 GiB (10 GiB inactive file). 1 GiB
    free is below min: 11 (reclaimed eviction at once); 2.5 GiB is deep below low: 13 (eviction);
    6 GiB is above low: capped at 6 (noop)."""
    engine = bundled()
    zone = {
        "memory.watermark_min_bytes": 1 * GiB,
        "memory.watermark_low_bytes": 4.75 * GiB,
        "memory.inactive_file_bytes": 10 * GiB,
    }
    state = EngineState()
    seen = []
    for i, free in enumerate((1, 2.5, 6)):
        result = tick(engine, numa_snapshot(free, 20, T0 + 5 * i, n0=zone, n1=zone), state)
        state = result.state
        seen.append(counts(state)[0])
        if i == 0:  # the reclaimed pod goes at once, with the fast path in its provenance
            (intent,) = evictions(result)
            counter = intent.provenance.inputs["watermarkCounter"]
            assert (intent.provenance.rule, intent.provenance.item) == ("numa-memory-pressure-reclaimed", "0")
            assert (counter["branch"], counter["minBytes"], counter["lowBytes"]) == ("below_min", 2 * GiB, 5 * GiB)
    assert seen == [(R, 11), (E, 13), (N, 6)]


def test_policies_without_counter_rules_keep_no_counter_state() -> None:
    """The counter exists for the rules that read its facts; a policy without them carries nothing."""
    engine = Engine(own("rules:\n  - {name: r, when: {node.memory.usage_percent: {gte: 99}}, then: {taint: {key: k, effect: NoSchedule}}}"))
    state = tick(engine, numa_snapshot(1, 1, T0), EngineState()).state
    assert state.pressure.numa == {} and "pressure" not in state.to_dict()


# ---------------------------------------------------------------- Katalyst system memory pressure

PSI_PODS = {f"p{i}": "shared_cores" for i in range(3)}


def psi_snapshot(now: float, gate: float | None, pods: list[float], free_gib: float = 30) -> Snapshot:
    node: dict[str, Any] = {"memory.free_bytes": free_gib * GiB}
    if gate is not None:
        node["workload_psi.memory.some.avg10"] = gate
    workloads = [workload(f"p{i}", "shared_cores") for i in range(len(pods))]
    workloads.append(workload("rc", "reclaimed_cores", priority=10))
    metrics = {f"p{i}": {"psi.memory.some.avg10": v} for i, v in enumerate(pods)}
    return snapshot(time=now, memory=64 * GiB, node=node, pods=workloads, pod_metrics=metrics)


def pressure_of(result: TickResult) -> str:
    """node.memory.pressure as the MemoryPressure taint rule observed it (noop without a taint)."""
    for intent in result.evaluation.intents:
        if intent.kind == "taint":
            observed: str = intent.provenance.conditions[0].observed
            return observed
    return N


def test_psi_timer_through_the_engine_and_a_restart() -> None:
    """system_pressure.go detectWorkloadMemPSI with the flag defaults 15 / 4 / 15s (the figures of
    test_psi_timer_reclaimed_then_eviction): the pod average held 15s is RECLAIMED_EVICTION, 45s
    EVICTION; the gate dropping (14.99 truncates to 14) resets the timer. A restart at t+44.9 keeps it.
    The decision is read where the MemoryPressure taint rule observed node.memory.pressure."""
    engine = bundled()
    state = EngineState()
    rounds = [(0.0, 20.0, N, T0), (9.0, 20.0, N, T0), (15.0, 20.0, R, T0), (44.9, 20.0, R, T0)]
    rounds += [(45.0, 20.0, E, T0), (54.0, 14.99, N, None), (63.0, 20.0, N, T0 + 63)]
    victims = []
    for now, gate, pressure, since in rounds:
        result = tick(engine, psi_snapshot(T0 + now, gate, [5.0, 5.0, 5.0]), state)
        state = result.state
        victims += [(now, e.name, e.provenance.rule) for e in evictions(result)]
        assert (pressure_of(result), state.pressure.psi_since) == (pressure, since), now
        if now == 44.9:
            engine, state = bundled(), restart(state)
            assert state.pressure.psi_since == T0
    # The reclaimed pod goes at 15s; at 45s it is still terminating, so EVICTION has nothing new.
    assert victims == [(15.0, "rc", "system-memory-pressure-reclaimed")]


def test_system_pressure_provenance_and_the_reclaimed_victim() -> None:
    """Average (8 + 6 + 3 + 0) // 4 = 4 >= 4 with 3 pods above 1 (0.5 truncates to 0, still
    averaged): held 15s, the reclaimed pod goes with the terms of both checks in its provenance."""
    engine = bundled()
    state = tick(engine, psi_snapshot(T0, 22, [8, 6, 3, 0.5]), EngineState()).state
    result = tick(engine, psi_snapshot(T0 + 15, 22, [8, 6, 3, 0.5]), state)
    (intent,) = evictions(result)
    assert (intent.name, intent.provenance.rule, intent.grace_period_seconds) == ("rc", "system-memory-pressure-reclaimed", 1)
    terms = intent.provenance.inputs["systemMemoryPressure"]
    assert terms["psi"]["podAverage"] == 4 and terms["psi"]["pressuredPods"] == 3 and terms["psi"]["heldFor"] == 15
    assert terms["watermark"]["met"] is False


@pytest.mark.parametrize(
    ("scale", "free_mib", "met"),
    [
        (None, 65, True),  # kernel default 10: 64 GiB x 10 / 10000 = 65.5 MiB
        (None, 66, False),
        (100, 600, True),  # the node's watermark_scale_factor 100: 655.4 MiB
        (100, 656, False),
    ],
)
def test_system_watermark_reads_the_scale_factor_fact(scale: int | None, free_mib: int, met: bool) -> None:
    """system_pressure.go: free < max(systemFreeMemoryThresholdMinimum 0, total x scale / 10000)."""
    snap = psi_snapshot(T0, None, [], free_gib=free_mib / 1024)
    if scale is not None:
        snap = replace(snap, metrics=replace(snap.metrics, node=MappingProxyType({**snap.metrics.node, "memory.watermark_scale_factor": scale})))
    result = tick(bundled(), snap, EngineState())
    assert (pressure_of(result) == R) is met


def test_memory_pressure_taint_clears_300s_after_the_last_pressure() -> None:
    """katalyst eviction-condition-transition-period 5m: the taint holds until 300s without pressure."""
    engine = bundled()
    state = EngineState()
    taints = []
    for now, free in ((0, 0.05), (10, 30), (299, 30), (300, 30)):
        result = tick(engine, psi_snapshot(T0 + now, None, [], free_gib=free), state)
        state = result.state
        taints.append(any(i.kind == "taint" for i in result.evaluation.intents))
    assert taints == [True, True, True, False]
    assert state.pressure.system_met_at == T0


# ---------------------------------------------------------------- Katalyst RSS overuse

T08 = json.dumps({"rss_overuse_threshold": "0.8"})
MEM = "katalyst.kubewharf.io/memory_enhancement"
# TestRssOveruseEvictionPlugin_GetEvictPods: (name, memory requests in GiB (None: no request),
# own threshold, RSS GiB, qos)
RSS_PODS = [
    ("pod-1", [10], None, 9, "shared_cores"),
    ("pod-2", [None], None, 9, "shared_cores"),
    ("pod-3", [10], T08, 9, "shared_cores"),
    ("pod-4", [None], T08, 9, "shared_cores"),
    ("pod-5", [10, 10], None, 16, "shared_cores"),
    ("pod-6", [10, None], None, 10, "shared_cores"),
    ("pod-7", [10, 4], T08, 7, "shared_cores"),
    ("pod-8", [10, 4], T08, 12, "shared_cores"),
    ("pod-9", [10], json.dumps({"numa_binding": "true", "rss_overuse_threshold": "0.8"}), 12, "dedicated_cores"),
]


def rss_snapshot() -> Snapshot:
    pods = [
        workload(
            name,
            qos,
            priority=1000,
            requests=[{"cpu": 1.0} if r is None else {"cpu": 1.0, "memory": r * GiB} for r in reqs],
            annotations={MEM: th} if th else None,
        )
        for name, reqs, th, _, qos in RSS_PODS
    ]
    metrics = {name: {"memory.rss_bytes": rss * GiB, "memory.usage_bytes": rss * GiB} for name, _, _, rss, _ in RSS_PODS}
    return snapshot(time=T0, pods=pods, pod_metrics=metrics)


@pytest.mark.parametrize(
    ("threshold", "want"),
    [
        # pod-3: 9 > 0.8 x 10; pod-8: 12 > 0.8 x 14 (own thresholds win); ranked by usage over request.
        (1.05, ["pod-3", "pod-8"]),
        # Default 0.1: pod-1 (9 > 1) and pod-5 (16 > 2) join; pod-7 (7 < 11.2) keeps its own 0.8.
        # Ranked by usage over request: 0.9, 0.9 (the uid breaks the tie), 12 / 14, 16 / 20.
        (0.1, ["pod-1", "pod-3", "pod-8", "pod-5"]),
    ],
)
def test_rss_overuse_per_pod_threshold(threshold: float, want: list[str]) -> None:
    """TestRssOveruseEvictionPlugin_GetEvictPods through rule rss-overuse: each pod against its own
    rss_overuse_threshold, else the rule's; pods with a container lacking a memory request
    (pod-2/4/6) and the dedicated pod-9 are never candidates. The plugin's whole candidate list
    shows as the rule's victims with ``soft: false`` (no soft round narrowing them to one) and
    maxPerRound raised."""
    overlay = f"""\
rules:
  - name: rss-overuse
    enabled: true
    then:
      evict:
        trigger: {{rssOveruse: {{threshold: {threshold}}}}}
        soft: false
        maxPerRound: 10
"""
    result = tick(bundled(overlay), rss_snapshot(), EngineState())
    assert targets(result) == want
    pod3 = next(i for i in evictions(result) if i.name == "pod-3")
    assert pod3.provenance.inputs["trigger"]["pod"]["threshold"] == 0.8
    assert pod3.provenance.inputs["trigger"]["pod"]["formula"] == f"{9 * GiB} > 0.8 * {10 * GiB}"


# ---------------------------------------------------------------- Katalyst suppression tolerance

TOLERANCE_RULE = """\
rules:
  - name: cpu-suppression-eviction
    enabled: true
    then:
      evict:
        trigger: {suppressionTolerance: {maxRate: 5, minDuration: %s}}
        maxPerRound: %d
"""


def reclaimed(uid: str, milli: float, tolerance: float | None, priority: int = 0) -> Workload:
    ann = {"katalyst.kubewharf.io/cpu_enhancement": json.dumps({"suppression_tolerance_rate": str(tolerance)})}
    return workload(
        uid,
        "reclaimed_cores",
        priority=priority,
        requests=[{RECLAIMED_MILLICPU: milli}],
        annotations=ann if tolerance is not None else None,
        namespace="ns",
    )


def supply_snapshot(now: float, pods: list[Workload], **reclaim: float) -> Snapshot:
    return snapshot(time=now, pods=pods, node={f"reclaim.{k}": v for k, v in reclaim.items()})


def test_tolerance_eviction_waits_longer_than_the_duration() -> None:
    """TestCPUPressureSuppression_GetEvictPods, "over tolerance rate": supply min(10 - 5 + 5, 20000 /
    1000) = 10; 19 / 10 = 1.9 > 1.2 for both pods. Nothing at t+0 or t+300s, pod-1 (largest
    request) at t+301s, and its 15 cores leave the sum: 4 / 10 keeps pod-2. The timers survive a
    restart (state through JSON)."""
    engine = bundled(TOLERANCE_RULE % ("300s", 1))
    pods = [reclaimed("pod-1", 15000, 1.2), reclaimed("pod-2", 4000, 1.2)]
    pool = {"pool_cpus": 10, "pool_usage_cores": 5, "cgroup_usage_cores": 5, "cfs_quota_us": 20000, "cfs_period_us": 1000}
    state = EngineState()
    seen = []
    for now in (0, 300, 301):
        result = tick(engine, supply_snapshot(T0 + now, pods, **pool), state)
        state = restart(result.state)
        seen.append(targets(result))
    assert seen == [[], [], ["pod-1"]]
    assert dict(state.pressure.tolerance["cpu-suppression-eviction"]) == {"ns/pod-1": T0}
    trigger = evictions(result)[0].provenance.inputs["trigger"]
    assert (trigger["supply"], trigger["totalRequestMilli"], trigger["pod"]["rate"]) == (10.0, 19000, 1.9)


def test_tolerance_victims_leave_the_sum_one_by_one() -> None:
    """test_victims_leave_the_sum_one_by_one through the engine, one eviction per round: pool of 2
    idle CPUs; a (4 cores, no annotation: cap 5), b and c (4 cores, tolerance 3). 12 / 2 = 6 evicts
    a; while a terminates its request still counts and nothing else goes; once a is gone 8 / 2 = 4
    evicts b, and then 4 / 2 = 2 keeps c."""
    engine = bundled(TOLERANCE_RULE % ("300s", 1))
    a, b, c = reclaimed("a", 4000, None), reclaimed("b", 4000, 3, priority=1), reclaimed("c", 4000, 3, priority=2)
    pool = {"pool_cpus": 2, "pool_usage_cores": 0, "cgroup_usage_cores": 0}
    state = EngineState()
    seen = []
    for now, pods in ((0, [a, b, c]), (301, [a, b, c]), (302, [a, b, c]), (303, [b, c]), (304, [c])):
        result = tick(engine, supply_snapshot(T0 + now, pods, **pool), state)
        state = result.state
        seen.append(targets(result))
    assert seen == [[], ["a"], [], ["b"], []]


def test_tolerance_without_supply_facts_does_nothing() -> None:
    """No node.reclaim.pool_usage_cores: the rate would be a guess, so the trigger does not fire."""
    engine = bundled(TOLERANCE_RULE % ("0s", 1))
    result = tick(engine, supply_snapshot(T0, [reclaimed("a", 40000, 1)]), EngineState())
    assert targets(result) == []


# ---------------------------------------------------------------- Katalyst reclaimed overcommit


def overcommit_snapshot(node: dict[str, float], allocatable: dict[str, float] | None = None) -> Snapshot:
    """TestNewReclaimedResourcesEvictionPlugin's pods: 5000 + 5000 reclaimed millicpu, and none."""
    pods = [
        workload("test-pod-1", "reclaimed_cores", requests=[{RECLAIMED_MILLICPU: 5000, RECLAIMED_MEMORY: 1 * GiB}]),
        workload("test-pod-2", "reclaimed_cores", requests=[{RECLAIMED_MILLICPU: 5000, RECLAIMED_MEMORY: 2 * GiB}]),
        workload("test-pod-3", "reclaimed_cores"),
    ]
    return snapshot(time=T0, pods=pods, node=node, allocatable=allocatable)


@pytest.mark.parametrize(
    ("node", "allocatable", "reports", "victim", "source"),
    [
        # 10000 > 5.0 x 1000 (the CNR: 1 core): HARD_MET, largest request, the name breaks the tie.
        ({"reclaim.cpu_allocatable_cores": 1}, None, None, "test-pod-1", "node.reclaim.cpu_allocatable_cores"),
        # 10000 = 5.0 x 2000 is not over.
        ({"reclaim.cpu_allocatable_cores": 2}, None, None, None, None),
        # Memory: 3 GiB > 5.0 x 0.5 GiB; the largest memory request is test-pod-2's.
        ({"reclaim.cpu_allocatable_cores": 4, "reclaim.memory_allocatable_bytes": 0.5 * GiB}, None, None, "test-pod-2", None),
        # No fact: the Node's allocatable of the extended resource (millicores).
        ({}, {RECLAIMED_MILLICPU: 1000}, None, "test-pod-1", "node allocatable"),
        # Neither: qosd's last report (1.5 cores published -> 1500 millicores; 10000 > 7500).
        ({}, None, 1.5, "test-pod-1", "last report"),
        ({}, None, 2.0, None, None),  # 10000 = 5.0 x 2000
        # The observed fact wins over the last report.
        ({"reclaim.cpu_allocatable_cores": 4}, None, 1.0, None, None),
    ],
)
def test_reclaimed_overcommit_against_the_published_allocatable(
    node: dict[str, float], allocatable: dict[str, float] | None, reports: float | None, victim: str | None, source: str | None
) -> None:
    """TestNewReclaimedResourcesEvictionPlugin and reclaimed-resource-pressure's thresholds (5.0)."""
    state = EngineState()
    if reports is not None:
        state = replace(state, reports={RECLAIMED_MILLICPU: ReportHistory(last=reports)})
    result = tick(bundled(), overcommit_snapshot(node, allocatable), state)
    assert targets(result) == ([victim] if victim else [])
    if victim and source:
        trigger = evictions(result)[0].provenance.inputs["trigger"]
        assert trigger["allocatableFrom"][RECLAIMED_MILLICPU] == source
        assert evictions(result)[0].grace_period_seconds == 60


# ---------------------------------------------------------------- Koordinator BECPUEvict


def be_engine(lower: int, upper: int, extra: str = "") -> Engine:
    overlay = f"""\
rules:
  - name: be-cpu-evict
    enabled: true
    then:
      evict:
        trigger:
          beSatisfaction: {{lowerPercent: {lower}, upperPercent: {upper}, window: 1s{extra}}}
"""
    return bundled(overlay, {"qosd.io/profile": "koordinator"})


def be_snapshot(
    avg: tuple[float, float],
    now: tuple[float, float],
    requests: list[tuple[str, float, int, float]],
    extra: dict[str, float] | None = None,
    allocatable: dict[str, float] | None = None,
) -> Snapshot:
    """BE class facts (usage, limit in cores; avg over the 1s window and now) and BE pods
    (name, batch-cpu millicores, priority, usage cores)."""
    pods = [
        workload(name, "", priority=prio, requests=[{BATCH_CPU: milli}], labels={"koordinator.sh/qosClass": "BE"})
        for name, milli, prio, _ in requests
    ]
    metrics = {name: {"cpu.usage_cores": used} for name, _, _, used in requests}
    snap = snapshot(time=T0, pods=pods, pod_metrics=metrics, allocatable=allocatable)
    be: dict[str, float] = {
        "cpu.usage_cores": now[0],
        "cpu.usage_cores@avg:1s": avg[0],
        "cpu.limit_cores": now[1],
        "cpu.limit_cores@avg:1s": avg[1],
    }
    be.update(extra or {})
    return replace(snap, metrics=replace(snap.metrics, classes={"BE": MappingProxyType(be)}))


FIFTY = [("be-a", 25000, 10, 5.0), ("be-b", 25000, 100, 5.0)]


@pytest.mark.parametrize(
    ("name", "avg", "now", "threshold", "release"),
    [
        # Test_CPUEvict_calculateMilliReleaseByBESatisfaction (lower 30, upper 40), (usage, limit) cores:
        ("test_avgRelease>currentRelease", (9.5, 10), (13, 14), "", 6000),
        ("test_avgRelease<currentRelease", (12, 13), (10, 11), "", 7000),
        ("test_avgMetricQueryResult_ResourceSatisfaction_enough", (19, 20), (19, 20), "", None),
        ("need_release_but_current_cpuUsage_not_enough", (9.5, 10), (5, 10), "", None),
        ("BEUsageThresholdPercent_50_avgRelease>currentRelease", (6, 10), (8, 14), ", usageThresholdPercent: 50", 6000),
        ("BEUsageThresholdPercent_50_current_cpuUsage_not_enough", (6, 10), (4, 10), ", usageThresholdPercent: 50", None),
    ],
)
def test_be_satisfaction_release_through_the_engine(
    name: str, avg: tuple[float, float], now: tuple[float, float], threshold: str, release: int | None
) -> None:
    """The anchor's cases with BE request 50000 millicores (two pods of 25000): the release target in
    the evict intent is koordlet's number, and be-a (priority 10) goes first."""
    result = tick(be_engine(30, 40, threshold), be_snapshot(avg, now, FIFTY), EngineState())
    if release is None:
        assert targets(result) == [], name
        return
    first = evictions(result)[0]
    assert first.release is not None and first.release.target == release, name
    assert (first.name, first.release.resource, first.credit) == ("be-a", "batch-cpu", 25000)


def test_be_satisfaction_by_allocatable() -> None:
    """"need_release_since_allocatable_is_small": evictByAllocatable takes the node's batch-cpu
    allocatable (8000) as the limit; usage 6000 / 8000 >= 50%; int(50000 x (0.4 - 0.16)) = 12000."""
    engine = be_engine(30, 40, ", usageThresholdPercent: 50, limit: allocatable")
    snap = be_snapshot((6, 99), (4, 99), FIFTY, allocatable={BATCH_CPU: 8000})
    first = evictions(tick(engine, snap, EngineState()))[0]
    assert first.release is not None and first.release.target == 12000


def test_be_victims_in_koordlet_order() -> None:
    """Test_getBEPodEvictInfoAndSort: be_3 (priority 10) first, then at priority 100 the higher
    usage / batch-cpu request, be_2 (4/16) before be_1 (3/16). With the docs example 60 / 80 and
    BE request 48000: min(int(48000 x (0.8 - 10/48)) = 28400, int(48000 x (0.8 - 12/48)) = 26400)
    = 26400 takes two pods of 16000."""
    pods = [("be_1", 16000, 100, 3.0), ("be_2", 16000, 100, 4.0), ("be_3", 16000, 10, 4.0)]
    engine = bundled("rules:\n  - {name: be-cpu-evict, enabled: true}", {"qosd.io/profile": "koordinator"})
    snap = be_snapshot((9.5, 10), (11, 12), pods)
    snap = replace(snap, metrics=replace(snap.metrics, classes={"BE": MappingProxyType({
        "cpu.usage_cores": 11, "cpu.usage_cores@avg:60s": 9.5, "cpu.limit_cores": 12, "cpu.limit_cores@avg:60s": 10,
    })}))
    result = tick(engine, snap, EngineState())
    assert targets(result) == ["be_3", "be_2"]
    assert [e.ranking for e in evictions(result)] == [
        (("priority", 10), ("batch-cpu.usage_over_request", 0.25)),
        (("priority", 100), ("batch-cpu.usage_over_request", 0.25)),
    ]
    release = evictions(result)[0].release
    assert release is not None and (release.target, release.released_after) == (26400, 32000)


@pytest.mark.parametrize(
    ("facts", "limit"),
    [
        ({"cpu.cpuset_cpus": 14, "cpu.cfs_quota_us": 1_200_000, "cpu.cfs_period_us": 100_000}, 12000),
        ({"cpu.cpuset_cpus": 8}, 8000),  # no quota: the cpuset alone
        ({"cpu.cpuset_cpus": 8, "cpu.cfs_quota_us": -1}, 8000),
    ],
)
def test_be_real_limit_from_cpuset_and_quota(facts: dict[str, float], limit: int) -> None:
    """be_resource_collector's realLimit = min(cpuset x 1000, quota x 1000 / period) when the
    collector sends no limit_cores; used now and, with no windowed limit, for the average."""
    snap = be_snapshot((9.5, 0), (9.5, 0), FIFTY, extra=facts)
    be = {k: v for k, v in snap.metrics.classes["BE"].items() if not k.startswith("cpu.limit_cores")}
    snap = replace(snap, metrics=replace(snap.metrics, classes={"BE": MappingProxyType(be)}))
    result = tick(be_engine(60, 80, ", usageThresholdPercent: 10"), snap, EngineState())
    trigger = evictions(result)[0].provenance.inputs["trigger"]
    assert trigger["current"]["limitMilli"] == trigger["average"]["limitMilli"] == limit


# ---------------------------------------------------------------- configuration and state


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("pressure: {numaWatermark: {timesThreshold: 2, fastEvictionWaitCycle: 3}}", "fastEvictionWaitCycle 3 is above timesThreshold 2"),
        ("pressure: {systemMemory: {psi: {podClasses: [nope]}}}", "class 'nope' is not defined"),
        (
            "rules:\n  - {name: r, then: {evict: {trigger: {suppressionTolerance: {}}, orderBy: [priority]}}}",
            "trigger suppressionTolerance evicts in its anchor's own order",
        ),
        (
            "rules:\n  - {name: r, when: {node.memory.usage_percent: {gte: 9}}, then: {evict: {trigger: {suppressionTolerance: {}}}}}",
            "trigger suppressionTolerance keeps per-pod timers every tick",
        ),
        (
            "rules:\n  - {name: r, then: {evict: {victims: {classes: [a]}, trigger: {beSatisfaction: {lowerPercent: 70, upperPercent: 80}}}}}",
            "satisfaction lower percent 70 must be in (0,60]",
        ),
        (
            "rules:\n  - {name: r, then: {evict: {trigger: {beSatisfaction: {lowerPercent: 30, upperPercent: 40}}}}}",
            "trigger beSatisfaction needs victims.classes",
        ),
    ],
)
def test_pressure_configuration_errors(spec: str, message: str) -> None:
    with pytest.raises(PolicyError) as err:
        own("classes:\n  - {name: a, match: [{labels: {x: y}}]}\n" + spec)
    assert any(message in p.message for p in err.value.problems), [p.message for p in err.value.problems]


def test_pressure_state_matches_the_published_schema() -> None:
    """The pressure state qosd prints (and reads back with --state) validates against
    evaluation.schema.json's engineState.pressure and survives the round trip."""
    engine = bundled(ANCHOR_COUNTER + TOLERANCE_RULE % ("300s", 1))
    pods = [reclaimed("pod-1", 15000, 1.2)]
    snap = supply_snapshot(T0, pods, pool_cpus=10, pool_usage_cores=5, cgroup_usage_cores=5)
    numa = {0: MappingProxyType({"memory.free_bytes": 1.0 * GiB})}
    snap = replace(snap, metrics=replace(snap.metrics, numa=numa))
    psi = psi_snapshot(T0, 20, [5, 5, 5], free_gib=0.01)
    psi = replace(psi, metrics=replace(psi.metrics, numa=numa))
    first = tick(engine, psi, EngineState()).state
    second = tick(engine, snap, first).state
    schema = json.loads((ROOT / "schemas/evaluation.schema.json").read_text())
    pressure = {"$defs": schema["$defs"], "$ref": "#/$defs/engineState/properties/pressure"}
    validator = Draft202012Validator(pressure)
    for state, keys in ((first, {"numa", "psiSince", "systemMetAt"}), (second, {"numa", "systemMetAt", "tolerance"})):
        data = state.to_dict()
        assert set(data["pressure"]) == keys
        assert not list(validator.iter_errors(data["pressure"]))
        assert EngineState.from_dict(data).to_dict() == data
