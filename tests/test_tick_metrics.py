"""The tick gauges (engine/daemon/tick_metrics.py) against the numbers a tick computed, row by row.

Pure: a compiled policy, hand-made snapshots (tests/builders.py) and ``run_tick``, the path every
mode runs; the collector is then read as a scrape reads it. The end-to-end scrape of a real daemon
is tests/test_monitoring.py.
"""

from __future__ import annotations

import builtins
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from engine.adapters.recorder import RecordingExecutor
from engine.daemon.loop import Daemon, DaemonConfig
from engine.daemon.metrics import Metrics
from engine.daemon.tick_metrics import TickCollector, TickView
from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState
from engine.model.facts import Snapshot
from engine.model.intents import NodeIntent
from engine.model.operations import PublishNodeResource
from engine.plan.planner import Guards
from engine.tick import TickResult, run_tick
from tests.builders import GiB, pod, policy, snapshot
from tests.conftest import policy_text

SPEC = """\
classes:
  - name: be
    match: [{labels: {qos: be}}]
    cpu: {policy: reclaimed}
  - name: ls
    match: [{labels: {qos: ls}}]
reclaim:
  enabled: true
  degradeAfter: 60s
  cpu: {policy: request, reclaimThresholdPercent: 100, publishAs: example.com/batch-cpu}
rules:
  - name: publish
    then: {publish: {resource: cpu}}
  - name: numa-pressure
    when: {numa.memory.below_watermark_count: {gte: 1}}
    then: {notify: {reason: Numa, message: pressure}}
"""

NODE_CPU = {"cpu.capacity_cores": 16.0, "cpu.allocatable_cores": 14.0, "cpu.usage_cores": 2.0}
PODS = [pod("b1", labels={"qos": "be"}), pod("b2", labels={"qos": "be"}), pod("l1", labels={"qos": "ls"})]


def scrape(collector: TickCollector) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in collector.collect()
        for s in family.samples
    }


def run(
    node: dict[str, Any], numa: dict[int, dict[str, Any]] | None = None
) -> tuple[TickResult, TickCollector]:
    engine = Engine(policy(SPEC))
    facts = {**NODE_CPU, **node}
    snap = snapshot(node=facts, numa=numa or {}, pods=PODS, allocatable={"cpu": 14.0, "memory": 60 * GiB})
    result = run_tick(engine, snap, EngineState(), Guards())
    collector = TickCollector()
    collector.saw(
        TickView(engine, result.evaluation, result.state, snap.metrics.node, engine.members(snap.workloads))
    )
    return result, collector


def published_intent(result: TickResult) -> NodeIntent:
    (intent,) = [i for i in result.evaluation.intents if isinstance(i, NodeIntent) and i.kind == "publish"]
    return intent


@pytest.mark.parametrize(
    ("age", "degraded", "withdrawn"),
    [(0.0, 0.0, False), (59.9, 0.0, False), (60.0, 0.0, False), (60.1, 1.0, True), (3600.0, 1.0, True)],
)
def test_degraded_is_exactly_when_the_reclaim_strategy_withdraws(
    age: float, degraded: float, withdrawn: bool
) -> None:
    """degradeAfter 60s: the gauge and the strategy's withdrawal agree at and around the boundary."""
    result, collector = run({"reclaim.metrics_age_seconds": age})
    got = scrape(collector)
    assert got[("qosd_reclaim_degraded", ())] == degraded
    assert got[("qosd_reclaim_metrics_age_seconds", ())] == age
    value = published_intent(result).params["value"]
    assert (value is None) == withdrawn
    computed = got.get(("qosd_reclaimed_resource_computed", (("resource", "example.com/batch-cpu"),)))
    # request policy: allocatable 14 cores - the ls pod's 1-core request = 13 cores, in milli-cores
    assert computed == (None if withdrawn else 13000.0) == (None if value is None else round(value * 1000))


@pytest.mark.parametrize(
    ("facts", "labels", "ratio"),
    [
        ({"psi.memory.some.avg10": 12.5}, ("memory", "some", "10s"), 0.125),
        ({"psi.cpu.full.avg300": 0.0}, ("cpu", "full", "300s"), 0.0),
        ({"psi.io.some.avg60": 100.0}, ("io", "some", "60s"), 1.0),
    ],
)
def test_psi_percent_is_exposed_as_a_ratio(
    facts: dict[str, float], labels: tuple[str, str, str], ratio: float
) -> None:
    _, collector = run(facts)
    psi = {k[1]: v for k, v in scrape(collector).items() if k[0] == "qosd_node_psi_ratio"}
    key = tuple(sorted(zip(("resource", "kind", "window"), labels, strict=True)))
    assert psi == {key: ratio}


def test_no_psi_series_without_psi_facts() -> None:
    _, collector = run({})
    assert not [k for k in scrape(collector) if k[0] == "qosd_node_psi_ratio"]


@pytest.mark.parametrize(
    ("count", "level"),
    # Katalyst's defaults: reclaimed_eviction above reclaimedTimesThreshold (6), eviction from timesThreshold (12)
    [(0, 0.0), (6, 0.0), (7, 1.0), (11, 1.0), (12, 2.0), (40, 2.0)],
)
def test_numa_counter_and_its_decision_level(count: int, level: float) -> None:
    result, collector = run(
        {}, numa={0: {"memory.below_watermark_count": count}, 1: {"memory.below_watermark_count": 0}}
    )
    got = scrape(collector)
    assert got[("qosd_numa_watermark_count", (("numa", "0"),))] == float(count)
    assert got[("qosd_numa_watermark_pressure", (("numa", "0"),))] == level
    assert got[("qosd_numa_watermark_pressure", (("numa", "1"),))] == 0.0
    assert result.state.pressure.numa["0"].count == count
    fired = got[("qosd_rule_fired", (("mode", "enforce"), ("rule", "numa-pressure")))]
    assert fired == float(count >= 1) == float("numa-pressure" in result.evaluation.fired)
    assert got[("qosd_rule_active_items", (("rule", "numa-pressure"),))] == float(count >= 1)


def test_workloads_per_class_and_the_rule_timestamps() -> None:
    result, collector = run({})
    got = scrape(collector)
    assert got[("qosd_workloads", (("class", "be"),))] == 2.0
    assert got[("qosd_workloads", (("class", "ls"),))] == 1.0
    assert got[("qosd_rule_last_fired_timestamp_seconds", (("rule", "publish"),))] == result.evaluation.time
    assert ("qosd_rule_last_fired_timestamp_seconds", (("rule", "numa-pressure"),)) not in got


@pytest.mark.parametrize(
    ("outcomes", "expected"),
    [
        ([("1500", "applied")], {"example.com/batch-cpu": 1500.0}),
        ([("1500", "unchanged")], {"example.com/batch-cpu": 1500.0}),  # already on the Node
        ([("1500", "failed")], {}),  # the Node does not hold it
        ([("1500", "applied"), ("900", "failed")], {"example.com/batch-cpu": 1500.0}),
        ([("1500", "applied"), (None, "applied")], {}),  # withdrawn
        ([("1500", "applied"), (None, "failed")], {"example.com/batch-cpu": 1500.0}),
        ([("1500", "applied"), ("2000", "applied")], {"example.com/batch-cpu": 2000.0}),
    ],
)
def test_published_is_what_the_node_holds_after_the_outcomes(
    outcomes: list[tuple[str | None, str]], expected: dict[str, float]
) -> None:
    collector = TickCollector()
    for quantity, status in outcomes:
        collector.published(PublishNodeResource("example.com/batch-cpu", quantity, "publish"), status)
    got = {
        dict(k[1])["resource"]: v
        for k, v in scrape(collector).items()
        if k[0] == "qosd_reclaimed_resource_published"
    }
    assert got == expected


def test_before_any_tick_the_gauges_are_declared_without_samples() -> None:
    metrics = Metrics()
    families = {f.name: f for f in metrics.tick.collect()}
    assert "qosd_workloads" in families and not families["qosd_workloads"].samples
    assert metrics.registry.get_sample_value("qosd_policy_generation") == 0.0


class StaticSource:
    """A node source that hands over the same hand-made snapshot every tick."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap

    def collect(self) -> Snapshot:
        return self.snap

    def adopt(self, engine: Engine) -> None:
        return None

    def applied(self, result: TickResult, outcomes: Sequence[Any]) -> None:
        return None

    def observe(self, wanted: Mapping[str, Sequence[str]]) -> Mapping[str, Mapping[str, str]]:
        return {}


def test_the_reload_alert_fires_on_a_refused_generation_and_resolves_on_the_next_good_one(
    tmp_path: Path,
) -> None:
    """QosdPolicyReloadFailed is `failure timestamp > success timestamp`, QosdNoPolicy
    `qosd_policy_generation == 0`: what the daemon sets on each reload outcome makes them true exactly
    while the newest change is refused, or before any generation loaded."""
    rules = tmp_path / "rules.yaml"
    good = policy_text(SPEC)
    rules.write_text(good)
    config = DaemonConfig(rules=(rules,), builtin=False, stat_files=True, labels={})
    snap = snapshot(node=dict(NODE_CPU), pods=PODS, allocatable={"cpu": 14.0, "memory": 60 * GiB})
    daemon = Daemon(config, StaticSource(snap), RecordingExecutor())

    def value(name: str) -> float:
        got = daemon.metrics.registry.get_sample_value(name)
        assert got is not None, name
        return got

    def reload_alert() -> bool:
        return value("qosd_config_last_reload_failure_timestamp_seconds") > value(
            "qosd_config_last_reload_success_timestamp_seconds"
        )

    try:
        assert value("qosd_policy_generation") == 0.0  # QosdNoPolicy's condition, before any load
        assert daemon.tick() is not None
        assert value("qosd_policy_generation") == 1.0 and not reload_alert()
        rules.write_text(good[: good.index("rules:")] + "rules:\n  - name: [broken\n")
        time.sleep(0.01)  # the failure's timestamp must be later than the success's
        daemon.tick()
        assert reload_alert() and value("qosd_policy_generation") == 1.0  # the last good one runs
        rules.write_text(good.replace("name: publish", "name: publish-again"))
        time.sleep(0.01)
        assert daemon.tick() is not None
        assert not reload_alert() and value("qosd_policy_generation") == 2.0
    finally:
        daemon.shutdown()


def test_a_scrape_reads_no_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gauges come from what the tick already holds: building them opens nothing."""
    _, collector = run({"psi.memory.some.avg10": 1.0, "reclaim.metrics_age_seconds": 1.0})
    metrics = Metrics()
    metrics.tick.saw(collector.view)  # type: ignore[arg-type]

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"a scrape opened {args[:1]}")

    monkeypatch.setattr(builtins, "open", refuse)
    monkeypatch.setattr(os, "open", refuse)
    text = generate_latest(metrics.registry).decode()
    assert "qosd_node_psi_ratio" in text and "qosd_reclaim_degraded 0.0" in text
