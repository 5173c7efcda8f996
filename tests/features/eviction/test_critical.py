"""Kubelet-critical pods are never eviction victims, whatever the rule selects (issue 16).

Anchor: katalyst-core ``evictionmanager/rule/rule_test.go`` TestEvictionStrategyImp ("critical pod
should be skipped": a pod annotated kubernetes.io/config.source) and the kubelet's IsCriticalPod
(static and mirror pods, priority >= 2000000000). Katalyst drops them before its plugins see them
(FilterOutSkipEvictionPods), so the next pod in the ranking is the victim, not nobody.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState
from engine.features.eviction.strategy import kubelet_critical
from engine.model.intents import EvictIntent
from tests.builders import GiB, pod, policy, snapshot


@pytest.mark.parametrize(
    ("annotations", "priority", "priority_class", "why"),
    [
        pytest.param({"kubernetes.io/config.source": "test"}, None, "", "static pod", id="anchor-config-source"),
        pytest.param({"kubernetes.io/config.source": "file"}, 0, "", "static pod", id="static-file"),
        pytest.param({"kubernetes.io/config.source": "api"}, 0, "", None, id="api-source-is-not-static"),
        pytest.param({"kubernetes.io/config.mirror": "abc"}, 0, "", "mirror pod", id="mirror"),
        pytest.param({}, 2_000_000_000, "", "priority", id="system-critical-priority"),
        pytest.param({}, 1_999_999_999, "", None, id="just-below-critical"),
        pytest.param({}, None, "system-node-critical", "priority class", id="node-critical-class"),
        pytest.param({}, None, "system-cluster-critical", "priority class", id="cluster-critical-class"),
        pytest.param({}, 1000, "high", None, id="ordinary"),
    ],
)
def test_kubelet_critical(
    annotations: dict[str, str], priority: int | None, priority_class: str, why: str | None
) -> None:
    w = replace(pod("p", annotations=annotations, priority=priority), priority_class_name=priority_class)
    reason = kubelet_critical(w)
    if why is None:
        assert reason is None
    else:
        assert reason is not None and why in reason


SPEC = """
classes:
  - {name: shared, match: [{labels: {app: web}}]}
rules:
  - name: evict-shared
    when: {node.memory.usage_percent: {gte: 90}}
    then:
      evict:
        victims: {classes: [shared]}
        orderBy: [priority, -memory.usage]
        maxPerRound: 1
"""


def test_critical_pod_is_skipped_with_a_reason_and_the_next_pod_goes() -> None:
    """The static pod ranks first (lowest priority, largest usage) but is left out, said under
    skipped; the next pod in the ranking is the victim."""
    pol = policy(SPEC)
    static = pod("static", labels={"app": "web"}, priority=0, annotations={"kubernetes.io/config.source": "file"})
    web = pod("web", labels={"app": "web"}, priority=10)
    snap = snapshot(
        node={"memory.usage_percent": 95},
        pods=[static, web],
        pod_metrics={"static": {"memory.usage_bytes": 9 * GiB}, "web": {"memory.usage_bytes": 1 * GiB}},
    )
    ev = Engine(pol).evaluate(snap, EngineState())
    evicted = [i.uid for i in ev.intents if isinstance(i, EvictIntent)]
    assert evicted == ["web"]
    reasons = [s.reason for s in ev.skipped if s.rule == "evict-shared"]
    assert len(reasons) == 1
    assert "default/static is kubelet-critical" in reasons[0]
    assert "kubernetes.io/config.source=file" in reasons[0]


def test_only_critical_pods_means_no_victim() -> None:
    pol = policy(SPEC)
    crit = pod("crit", labels={"app": "web"}, priority=2_000_001_000)
    snap = snapshot(node={"memory.usage_percent": 95}, pods=[crit])
    ev = Engine(pol).evaluate(snap, EngineState())
    assert not [i for i in ev.intents if isinstance(i, EvictIntent)]
    assert any("priority 2000001000" in s.reason for s in ev.skipped)


# ---------------------------------------------------------------- the soft round (same anchor file)

SOFT_SPEC = """
classes:
  - {name: shared, match: [{labels: {app: web}}], evictionPriority: 100}
  - {name: batch, match: [{labels: {app: batch}}], evictionPriority: 0}
rules:
  - name: soft-a
    then: {evict: {soft: true, scope: cpu, victims: {requireLabel: {nominate: a}}}}
  - name: soft-b
    then: {evict: {soft: true, scope: memory, victims: {requireLabel: {nominate: b}}}}
  - name: force
    then: {evict: {victims: {requireLabel: {force: "true"}}}}
"""


def _evicts(pods: list[object]) -> tuple[list[str], list[str]]:
    snap = snapshot(pods=pods)  # type: ignore[arg-type]
    ev = Engine(policy(SOFT_SPEC)).evaluate(snap, EngineState())
    return [i.uid for i in ev.intents if isinstance(i, EvictIntent)], [s.reason for s in ev.skipped]


def test_one_soft_candidate_per_tick_in_katalyst_order() -> None:
    """TestEvictionStrategyImp's CandidateSort: reclaimed first, then lower priority, then the
    scope Katalyst ranks last (cpu after memory), then name; only that pod is evicted."""
    pods = [
        pod("web-hi", labels={"app": "web", "nominate": "a"}, priority=100),
        pod("web-lo-mem", labels={"app": "web", "nominate": "b"}, priority=10),
        pod("web-lo-cpu", labels={"app": "web", "nominate": "a"}, priority=10),
    ]
    evicted, skipped = _evicts(pods)
    assert evicted == ["web-lo-cpu"]
    assert sum("not chosen" in r for r in skipped) == 2
    pods.append(pod("batch", labels={"app": "batch", "nominate": "b"}, priority=1000))
    evicted, _ = _evicts(pods)
    assert evicted == ["batch"]


def test_a_forced_pod_leaves_the_soft_pool() -> None:
    """Katalyst filterOutCandidatePodsWithForcePods: a pod a force rule evicts is not also the soft
    pick; the soft round takes the next one."""
    pods = [
        pod("a1", labels={"app": "web", "nominate": "a", "force": "true"}, priority=1),
        pod("a2", labels={"app": "web", "nominate": "a"}, priority=5),
    ]
    evicted, skipped = _evicts(pods)
    assert sorted(evicted) == ["a1", "a2"]
    assert any("evicted by a force rule" in r for r in skipped)
