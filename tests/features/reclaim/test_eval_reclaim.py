"""Reclaimed resources through the engine: the publish action (engine/features/reclaim/action.py),
what it reads from a snapshot, its state across ticks, the operation it plans, the policy checks
of spec.reclaim and the bundled policies' reclaim sections.

Figures follow katalyst.md 2.4 / 4.1-4.3 (canonical estimates, reporter) and koordinator.md 4.1-4.3
(batch formula, dangling pods, LSE, degradation, per-node ratio labels); each test shows its sums.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from engine.config.pipeline import REFERENCE_NODE, build_policy, load_documents, validate
from engine.evaluate.engine import Engine, Evaluation
from engine.evaluate.state import EngineState
from engine.features.reclaim.spec import ReclaimHeadroom, ReclaimUpdate
from engine.model.facts import Snapshot, Workload
from engine.model.intents import NodeIntent
from engine.model.operations import PublishNodeResource
from engine.plan.planner import Guards
from engine.tick import run_tick
from tests.builders import GiB, pod, policy, snapshot
from tests.conftest import policy_text

CLASSES = """\
classes:
  - {name: dedicated, match: [{labels: {q: dedicated}}], cpu: {policy: exclusive}}
  - {name: shared, match: [{labels: {q: shared}}], cpu: {policy: shared}}
  - {name: system, match: [{labels: {q: system}}], cpu: {policy: system}}
  - {name: reclaimed, match: [{labels: {q: reclaimed}}], cpu: {policy: reclaimed}}
  - {name: lse, match: [{labels: {q: lse}}], cpu: {policy: exclusive}}
"""
PUBLISH = """\
rules:
  - name: publish
    then: [{publish: {resource: cpu}}, {publish: {resource: memory}}]
"""
CPU_NAME, MEM_NAME = "example.com/reclaimed-cpu", "example.com/reclaimed-memory"


def engine(reclaim: str, extra: str = "") -> Engine:
    return Engine(policy(CLASSES + reclaim + extra + PUBLISH))


def headroom_policy(extra_cpu: str = "", extra: str = "", enabled: bool = True) -> str:
    return (
        f"reclaim:\n  enabled: {str(enabled).lower()}\n  reportInterval: 30s\n"
        f"  cpu: {{policy: headroom, publishAs: {CPU_NAME}{extra_cpu}}}\n"
        f"  memory: {{policy: headroom, publishAs: {MEM_NAME}}}\n" + extra
    )


def usage_policy(extra: str = "", enabled: bool = True) -> str:
    return (
        f"reclaim:\n  enabled: {str(enabled).lower()}\n  degradeAfter: 15m\n"
        f"  cpu: {{policy: usage, reclaimThresholdPercent: 100, requestAsUsage: [lse], publishAs: {CPU_NAME}}}\n"
        f"  memory: {{policy: usage, reclaimThresholdPercent: 100, publishAs: {MEM_NAME}}}\n" + extra
    )


def tier(uid: str, q: str | None, **kw: Any) -> Workload:
    return pod(uid, labels={"q": q} if q else {}, **kw)


def published(ev: Evaluation) -> dict[str, NodeIntent]:
    return {
        str(i.params["resource"]): i for i in ev.intents if isinstance(i, NodeIntent) and i.kind == "publish"
    }


def with_containers(snap: Snapshot, containers: dict[str, dict[str, Any]]) -> Snapshot:
    metrics = replace(snap.metrics, containers={k: MappingProxyType(v) for k, v in containers.items()})
    return replace(snap, metrics=metrics)


# ------------------------------------------------------------------ Katalyst headroom


def katalyst_node(**node: Any) -> Snapshot:
    pods = [
        tier("s1", "shared", cpu=2.0, memory=4 * GiB),
        tier("s2", "shared", cpu=2.0, memory=4 * GiB),
        tier("s3", "shared", cpu=1.0, memory=1 * GiB, phase="Pending"),
        tier("d1", "dedicated", cpu=4.0, memory=8 * GiB, qos="Guaranteed"),
        tier("sys1", "system", cpu=0.0, memory=0.0),
        tier("r1", "reclaimed", cpu=0.0, memory=0.0, qos="BestEffort"),
        tier("u1", None, cpu=1.0, memory=GiB),
        tier("gone", "shared", cpu=8.0, memory=32 * GiB, phase="Succeeded"),
    ]
    snap = snapshot(
        pods=pods,
        allocatable={"cpu": 15.0, "memory": float(60 * GiB)},
        node=node,
        pod_metrics={
            "s2": {"cpu.usage_cores": 0.8, "memory.usage_bytes": 2.0 * GiB},
            "d1": {"cpu.usage_cores": 2.4, "memory.rss_bytes": 4.0 * GiB},
            "sys1": {"cpu.usage_cores": 0.3, "memory.rss_bytes": 1.0 * GiB, "memory.cache_bytes": 3.0 * GiB},
            "r1": {"cpu.usage_cores": 3.0, "memory.rss_bytes": 6.0 * GiB},
            "u1": {"cpu.usage_cores": 0.4, "memory.usage_bytes": 1.0 * GiB},
            "gone": {"cpu.usage_cores": 5.0, "memory.rss_bytes": 9.0 * GiB},
        },
    )
    return with_containers(
        snap, {"s1/main": {"cpu.usage_cores": 1.2, "memory.rss_bytes": GiB, "memory.cache_bytes": GiB}}
    )


def test_headroom_estimates_every_non_reclaimed_container() -> None:
    """katalyst.md 2.4, canonical estimates. cpu (x1.25 on usage; the request without a metric;
    system containers 0): s1 1.2 -> 1.5 (container metrics), s2 0.8 -> 1.0 (pod metrics only),
    s3 request 1, d1 2.4 -> 3.0, sys1 0, u1 (no class: estimated as shared) 0.4 -> 0.5; sum 7.0.
    No reserve pool: allocatable 15 - reservedForAllocate 4 - 7 = 4 cores.
    memory ((rss + cache + shmem) x 1.1; system rss x 1.0; 8Gi without a metric): s1 2 x 1.1,
    s2 usage 2 x 1.1, s3 8, d1 4 x 1.1, sys1 1, u1 1 x 1.1 = 18.9Gi; 64 - 5 - 18.9 = 40.1Gi.
    The reclaimed pod and the Succeeded pod are not estimated."""
    ev = engine(headroom_policy()).evaluate(katalyst_node(), EngineState())
    cpu, mem = published(ev)[CPU_NAME], published(ev)[MEM_NAME]
    assert cpu.params["value"] == pytest.approx(4.0)
    inputs = cpu.provenance.inputs
    assert (inputs["available"], inputs["reserveCpus"], inputs["estimate"]) == (
        15.0,
        None,
        pytest.approx(7.0),
    )
    assert inputs["estimatedBy"] == {"cpu.usage": 4, "request": 1, "none": 1}
    assert mem.params["value"] == int(59 * GiB - (2.2 + 2.2 + 8 + 4.4 + 1 + 1.1) * GiB)
    assert mem.provenance.inputs["estimatedBy"] == {"metrics": 5, "fallback": 1}
    assert mem.provenance.rule == "publish" and "reservedForAllocate 5368709120" in str(mem.params["formula"])


def test_reserve_pool_is_not_available() -> None:
    """Katalyst numaAvailable = CPUs - reserve: a 2-CPU reserve pool on 16 CPUs leaves 14, so the
    same node gets 14 - 4 - 7 = 3 cores (kubelet's allocatable is not used then)."""
    pools = "pools:\n  - {name: reserve, kind: reserve, cpus: {count: 2}}\n  - {name: reclaim, kind: reclaim, size: {remainder: true}}\n"
    ev = engine(headroom_policy(), pools).evaluate(katalyst_node(), EngineState())
    cpu = published(ev)[CPU_NAME]
    assert (cpu.params["value"], cpu.provenance.inputs["reserveCpus"]) == (pytest.approx(3.0), 2)


def test_util_based_cpu_oversells_an_underused_supply() -> None:
    """EstimateUtilBasedCapacity with the canonical headroom as supply (4 cores, above): reclaimed
    pods use 3 -> u 0.75 above target 0.6: no oversold, max(last 0 + 0, 4) = 4. 30s later r1 uses
    0.8 -> u 0.2, oversold 4 x 0.4 = 1.6 on the last report 4 -> 5.6, capped at 4 x 1.2 = 4.8."""
    e = engine(headroom_policy(", headroom: {utilBased: {enabled: true}}"))
    first = e.evaluate(katalyst_node(), EngineState())
    assert published(first)[CPU_NAME].params["value"] == pytest.approx(4.0)
    snap = katalyst_node()
    metrics = dict(snap.metrics.pods)
    metrics["r1"] = MappingProxyType({"cpu.usage_cores": 0.8})
    snap = replace(snap, time=snap.time + 30, metrics=replace(snap.metrics, pods=metrics))
    cpu = published(e.evaluate(snap, first.state))[CPU_NAME]
    assert cpu.params["value"] == pytest.approx(4.8)
    assert cpu.provenance.inputs["oversold"] == pytest.approx(1.6)


def test_smoothing_and_report_interval_across_ticks() -> None:
    """reportInterval 30s: the publish rule acts once per 30s. Window 2m avg, minStep 0.3: t=0 raw 4
    -> 4; t=10 nothing; t=30 s1 drops to 0.4 cores (estimate 0.5, one core less), raw 5 -> avg 4.5,
    a 0.5 step -> 4.5; t=60 raw 5 -> avg 4.667, a 0.167 step below minStep -> kept 4.5."""
    e = engine(headroom_policy(", smoothing: {window: 2m, minStep: 0.3}"))
    state = EngineState()
    values = []
    for t in (0.0, 10.0, 30.0, 60.0):
        snap = replace(katalyst_node(), time=1000.0 + t)
        if t >= 30:
            snap = with_containers(snap, {"s1/main": {"cpu.usage_cores": 0.4}})
        ev = e.evaluate(snap, state)
        state = ev.state
        got = published(ev).get(CPU_NAME)
        values.append(None if got is None else round(float(got.params["value"]), 3))
    assert values == [4.0, None, 4.5, 4.5]
    history = state.reports[CPU_NAME]
    assert (history.last, history.reported, len(history.samples)) == (4.5, 4.5, 3)
    assert EngineState.from_dict(state.to_dict()).reports[CPU_NAME] == history


def test_minimum_report_floor_through_the_plan() -> None:
    """minReport 4 (Katalyst's floor): a node whose estimates leave 1 core publishes 4000 milli;
    the operation carries the anchors' integer milli-cores."""
    e = engine(headroom_policy(", minReport: 4"))
    snap = with_containers(katalyst_node(), {"s1/main": {"cpu.usage_cores": 3.6}})  # 4.5: 15 - 4 - 10 = 1
    result = run_tick(e, snap, EngineState(), Guards())
    cpu = published(result.evaluation)[CPU_NAME]
    assert cpu.provenance.inputs["canonical"] == pytest.approx(1.0) and cpu.params["value"] == 4.0
    ops = {o.name: o.quantity for o in result.plan.operations if isinstance(o, PublishNodeResource)}
    assert ops[CPU_NAME] == "4000"


def test_disabled_reclaim_publishes_zero_for_headroom_and_withdraws_batch() -> None:
    """Katalyst's reporter sets 0 when enableReclaim is false; Koordinator resets (removes) batch
    resources when colocation is disabled."""
    katalyst = run_tick(engine(headroom_policy(enabled=False)), katalyst_node(), EngineState(), Guards())
    ops = {o.name: o.quantity for o in katalyst.plan.operations if isinstance(o, PublishNodeResource)}
    assert ops == {CPU_NAME: "0", MEM_NAME: "0"}
    assert katalyst.state.reports == {}
    koord = run_tick(engine(usage_policy(enabled=False)), koord_node(), EngineState(), Guards())
    ops = {o.name: o.quantity for o in koord.plan.operations if isinstance(o, PublishNodeResource)}
    assert ops == {CPU_NAME: None, MEM_NAME: None}


# ------------------------------------------------------------------ Koordinator batch resources


def koord_node(age: float | None = None, time: float = 1000.0) -> Snapshot:
    node: dict[str, Any] = {"cpu.usage_cores": 10.0, "memory.usage_bytes": float(40 * GiB)}
    if age is not None:
        node["reclaim.metrics_age_seconds"] = age
    pods = [
        tier("lse", "lse", cpu=4.0, memory=4 * GiB, qos="Guaranteed"),
        tier("ls", "shared", cpu=1.0, memory=8 * GiB),
        tier("be", "reclaimed", cpu=0.0, memory=0.0, qos="BestEffort"),
        tier("be-done", "reclaimed", cpu=0.0, memory=0.0, qos="BestEffort", phase="Succeeded"),
        tier("new", "shared", cpu=2.0, memory=2 * GiB, phase="Pending"),
    ]
    return snapshot(
        time=time,
        pods=pods,
        node=node,
        allocatable={"cpu": 16.0, "memory": float(64 * GiB)},
        pod_metrics={
            "lse": {"cpu.usage_cores": 1.0, "memory.usage_bytes": 2.0 * GiB},
            "ls": {"cpu.usage_cores": 2.0, "memory.usage_bytes": 10.0 * GiB},
            "be": {"cpu.usage_cores": 3.0, "memory.usage_bytes": 12.0 * GiB},
            "be-done": {"cpu.usage_cores": 1.0, "memory.usage_bytes": 1.0 * GiB},
            "ghost": {"cpu.usage_cores": 0.5, "memory.usage_bytes": 1.0 * GiB},
        },
    )


def test_koordinator_pods_dangling_and_lse() -> None:
    """koordinator.md 4.1 at reclaimThresholdPercent 100 (no margin). cpu: systemUsed = 10 - all pod
    metrics (1 + 2 + 3 + 1 + 0.5) = 2.5; HPUsed = LSE request 4 (not its usage 1) + ls 2 + new (no
    metric) request 2 + the ghost metric 0.5 (dangling, HP) = 8.5; be-done's metric is dangling
    but reclaimed, so not HP. 16 - 2.5 - 8.5 = 5 cores.
    memory: systemUsed 40 - 26 = 14Gi; HPUsed 2 + 10 + 2 + 1 = 15Gi; 64 - 14 - 15 = 35Gi."""
    result = run_tick(engine(usage_policy()), koord_node(), EngineState(), Guards())
    cpu, mem = published(result.evaluation)[CPU_NAME], published(result.evaluation)[MEM_NAME]
    assert cpu.params["value"] == pytest.approx(5.0)
    assert {k: cpu.provenance.inputs[k] for k in ("systemUsed", "hpUsed", "danglingUsed", "hpRequest")} == {
        "systemUsed": 2.5,
        "hpUsed": 8.5,
        "danglingUsed": 0.5,
        "hpRequest": 7.0,
    }
    assert mem.params["value"] == 35 * GiB and mem.provenance.inputs["hpUsed"] == 15 * GiB
    ops = {o.name: o.quantity for o in result.plan.operations if isinstance(o, PublishNodeResource)}
    assert ops == {CPU_NAME: "5000", MEM_NAME: str(35 * GiB)}


def test_stale_metrics_withdraw_then_restart_smoothing() -> None:
    """degradeAfter 15m (Koordinator degradeTimeMinutes): 900s old still publishes, 901s withdraws
    (now.After(update + 15m) is strict) and forgets the smoothing history; fresh metrics publish
    again from a single sample."""
    e = engine(
        usage_policy().replace("requestAsUsage: [lse], ", "requestAsUsage: [lse], smoothing: {window: 5m}, ")
    )
    state = EngineState()
    quantities = []
    for t, age in ((0.0, 900.0), (60.0, 901.0), (120.0, 0.0)):
        result = run_tick(e, koord_node(age, time=1000.0 + t), state, Guards())
        state = result.state
        ops = {o.name: o.quantity for o in result.plan.operations if isinstance(o, PublishNodeResource)}
        quantities.append(ops[CPU_NAME])
        if t == 60.0:
            assert CPU_NAME not in state.reports
            assert "metrics are 901s old" in str(published(result.evaluation)[CPU_NAME].params["formula"])
    assert quantities == ["5000", None, "5000"]
    assert len(state.reports[CPU_NAME].samples) == 1  # t=0's sample went with the withdrawal


def test_publish_rounds_to_whole_milli_cores() -> None:
    """1.001 cores is 1000.9999999999999 milli-cores in binary floating point; the operation must
    say 1001, not 1000."""
    snap = snapshot(node={"cpu.capacity_cores": 1.001, "cpu.usage_cores": 0.0, "memory.usage_bytes": 0.0})
    result = run_tick(engine(usage_policy()), snap, EngineState(), Guards())
    ops = {o.name: o.quantity for o in result.plan.operations if isinstance(o, PublishNodeResource)}
    assert ops[CPU_NAME] == "1001"


# ------------------------------------------------------------------ policy checks and the bundled layer


def problems(tmp_path: Path, reclaim: str) -> list[str]:
    (tmp_path / "p.yaml").write_text(policy_text(CLASSES + reclaim), encoding="utf-8")
    return [p.message for p in validate(load_documents([tmp_path], builtin=False))]


@pytest.mark.parametrize(
    ("reclaim", "message"),
    [
        ("reclaim:\n  cpu: {policy: usage, requestAsUsage: [lsee]}\n", "class 'lsee' is not defined"),
        (
            "reclaim:\n  cpu: {policy: usage, headroom: {fallback: 2}}\n",
            "reclaim cpu has headroom parameters but policy 'usage'",
        ),
        (
            "reclaim:\n  memory: {policy: headroom, reclaimThresholdPercent: 65}\n",
            "reclaim memory policy headroom takes no reclaimThresholdPercent",
        ),
        (
            "reclaim:\n  cpu: {policy: headroom, headroom: {utilBased: {freeBasedRatio: 0.5}}}\n",
            "utilBased.freeBasedRatio applies to reclaim.memory, not reclaim.cpu",
        ),
        (
            "reclaim:\n  memory: {policy: headroom, headroom: {utilBased: {maxOversoldRate: 1.5}}}\n",
            "utilBased.maxOversoldRate applies to reclaim.cpu, not reclaim.memory",
        ),
        (
            "reclaim:\n  cpu: {policy: headroom, headroom: {systemFactor: 1.2}}\n",
            "systemFactor applies to reclaim.memory only",
        ),
        (
            "reclaim:\n  memory: {policy: headroom, headroom: {utilBased: {cpuMemRatioLower: 0.5, cpuMemRatioUpper: 0.2}}}\n",
            "cpuMemRatioLower 0.5 is above cpuMemRatioUpper 0.2",
        ),
        (
            "reclaim:\n  cpu: {policy: headroom, headroom: {usageFactor: 0}}\n",
            "is less than or equal to the minimum of 0",  # a buffer factor must be positive
        ),
        ("reclaim:\n  update: {diffThreshold: 0}\n", "is less than or equal to the minimum of 0"),
        ("reclaim:\n  update: {diffThreshold: 1.5}\n", "is greater than the maximum of 1"),
        ("reclaim:\n  update: {maxInterval: 5m}\n", "missing required field 'diffThreshold'"),
        ("reclaim:\n  update: {diffThreshold: 0.1, maxInterval: 5 min}\n", "A Go-style duration such as"),
    ],
)
def test_reclaim_checks(tmp_path: Path, reclaim: str, message: str) -> None:
    found = problems(tmp_path, reclaim)
    assert any(message in m for m in found), found


def test_headroom_defaults_are_katalysts() -> None:
    """reservedResourceForAllocate cpu 4 / memory 5Gi, the x1.25 / x1.1 / x1.0 buffers and the
    4-core / 8Gi fallbacks (estimation_canonical.go); util-based off with 0.6 / 0 / 1.2 / 1.0 and
    0.6 / 20Gi / 0 (katalyst.md 4.1, 4.2)."""
    p = policy(CLASSES + "reclaim:\n  cpu: {policy: headroom}\n  memory: {policy: headroom}\n")
    assert p.reclaim.cpu is not None and p.reclaim.memory is not None
    assert p.reclaim.cpu.headroom == ReclaimHeadroom(4.0, 1.25, 4.0)
    assert p.reclaim.memory.headroom == ReclaimHeadroom(float(5 * GiB), 1.1, float(8 * GiB))
    h = p.reclaim.cpu.headroom
    assert (h.util_based, h.target_utilization, h.max_utilization, h.max_oversold_rate) == (
        False,
        0.6,
        0.0,
        1.2,
    )
    m = p.reclaim.memory.headroom
    assert (m.free_based_ratio, m.static_based_capacity, m.cache_based_ratio) == (0.6, 20 * GiB, 0.0)


def bundled(labels: dict[str, str]) -> Any:
    return build_policy(load_documents([], builtin=True), REFERENCE_NODE.with_labels(labels))


def test_bundled_default_policy_uses_katalyst_headroom() -> None:
    p = bundled({})
    cpu, mem = p.reclaim.cpu, p.reclaim.memory
    assert cpu is not None and mem is not None
    assert (cpu.policy, cpu.headroom, cpu.min_report, cpu.min_ignored) == (
        "headroom",
        ReclaimHeadroom(4.0, 1.25, 4.0),
        4.0,
        0.1,
    )
    assert (mem.policy, mem.min_report, mem.min_step, mem.max_step) == (
        "headroom",
        5 * GiB,
        300 * (1 << 20),
        5 * GiB,
    )
    assert cpu.publish_as == "resource.katalyst.kubewharf.io/reclaimed_millicpu"
    assert p.reclaim.update is None  # Katalyst writes every differing report


@pytest.mark.parametrize(
    ("cpu_ratio", "mem_ratio", "expected"),
    [
        (None, None, (60, 65)),  # colocation-config defaults
        ("0.65", "0.8", (65, 80)),  # int(0.65 x 100) = 65 (65.00000000000001 truncated)
        ("1.15", None, (114, 65)),  # int(114.99999999999999): Go truncates the same way
        ("-0.1", "abc", (60, 65)),  # negative or unparsable: ignored
        ("3", None, (200, 65)),  # capped at qosd's 200% bound
        # not a finite number: ignored like any unparsable value (the fuzz harness found "1e9999999"
        # failing the whole built-in policy for the node with OverflowError in the int filter)
        ("1e9999999", "inf", (60, 65)),
        ("nan", "-1e9999", (60, 65)),
    ],
)
def test_koordinator_profile_ratio_labels(
    cpu_ratio: str | None, mem_ratio: str | None, expected: tuple[int, int]
) -> None:
    """UpdateColocationStrategyForNode / getNodeReclaimPercent: the node labels
    node.koordinator.sh/cpu-reclaim-ratio and memory-reclaim-ratio replace the reclaim percents."""
    labels = {"qosd.io/profile": "koordinator"}
    if cpu_ratio is not None:
        labels["node.koordinator.sh/cpu-reclaim-ratio"] = cpu_ratio
    if mem_ratio is not None:
        labels["node.koordinator.sh/memory-reclaim-ratio"] = mem_ratio
    p = bundled(labels)
    assert p.reclaim.cpu is not None and p.reclaim.memory is not None
    assert (p.reclaim.cpu.threshold_percent, p.reclaim.memory.threshold_percent) == expected
    assert p.reclaim.cpu.request_as_usage == frozenset({"LSE"})
    assert p.reclaim.degrade_after == 900.0
    assert p.reclaim.update == ReclaimUpdate(0.1, 300.0)  # resourceDiffThreshold, updateTimeThresholdSeconds


# ------------------------------------------------------------------ the node update gate


GATE = "  update: {diffThreshold: 0.1, maxInterval: 5m}\n"


def quantities(result: Any) -> dict[str, str | None]:
    return {o.name: o.quantity for o in result.plan.operations if isinstance(o, PublishNodeResource)}


def with_node_cpu(snap: Snapshot, usage: float) -> Snapshot:
    node = MappingProxyType({**snap.metrics.node, "cpu.usage_cores": usage})
    return replace(snap, metrics=replace(snap.metrics, node=node))


def test_update_gate_holds_small_changes_and_survives_a_restart() -> None:
    """koord_node publishes 5 cores / 35Gi. Node usage +0.3 cores is -6% of cpu: held at 5000 with
    the computed value in the inputs; the state goes through its JSON form (a daemon restart) and
    the gate still holds; degradation withdraws at once; fresh metrics publish again at once."""
    e = engine(usage_policy(GATE))
    state = EngineState()
    seen = []
    ticks = (
        (0.0, 10.0, 0.0),
        (60.0, 10.3, 0.0),
        (120.0, 10.3, 0.0),
        (180.0, 10.3, 901.0),
        (240.0, 10.3, 0.0),
    )
    for t, usage, age in ticks:
        result = run_tick(e, with_node_cpu(koord_node(age, time=1000.0 + t), usage), state, Guards())
        state = EngineState.from_dict(result.state.to_dict())
        seen.append(quantities(result)[CPU_NAME])
        if t == 60.0:
            cpu = published(result.evaluation)[CPU_NAME]
            assert cpu.provenance.inputs["computed"] == pytest.approx(4.7)
            assert cpu.provenance.inputs["lastPublished"] == pytest.approx(5.0)
            assert "held: example.com/reclaimed-cpu 5 -> 4.7 (-6.0%)" in str(cpu.params["formula"])
    assert seen == ["5000", "5000", "5000", None, "4700"]
    assert state.published.at == 1240.0


def test_update_gate_ignores_audit_rules_and_is_off_without_update() -> None:
    """An audit-mode publish changes nothing on the Node, so it neither moves nor is held by the
    gate; without spec.reclaim.update every report goes through."""
    rules = PUBLISH.replace("  - name: publish\n", "  - name: publish\n    mode: audit\n")
    e = Engine(policy(CLASSES + usage_policy(GATE) + rules))
    assert e.policy.reclaim.update == ReclaimUpdate(0.1, 300.0)
    first = e.evaluate(koord_node(), EngineState())
    assert first.state.published.at is None
    assert "updated" not in str(published(first)[CPU_NAME].params["formula"])
    plain = engine(usage_policy())
    state = EngineState()
    for t, usage in ((0.0, 10.0), (60.0, 10.3)):
        ev = plain.evaluate(with_node_cpu(koord_node(time=1000.0 + t), usage), state)
        state = ev.state
    assert published(ev)[CPU_NAME].params["value"] == pytest.approx(4.7)
    assert state.published.at is None
