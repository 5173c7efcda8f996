"""Per-container knob values (issue 17 item 2): a container's knob reads that container's own
requests, limits and current value; a pod's value may be the sum over its containers; different
values per container reach the planner, and the cgroup adapter on real cgroupfs."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from types import MappingProxyType
from typing import Any

import pytest

from engine.adapters.cgroup import CgroupAdapter
from engine.config.errors import PolicyError
from engine.config.load import Layer, parse_documents
from engine.config.pipeline import REFERENCE_NODE, build_policy
from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState
from engine.features.class_knobs.knobs import compile_knob, sum_texts
from engine.model.facts import Container, Workload
from engine.model.intents import CgroupIntent
from engine.plan.planner import Guards
from engine.tick import run_tick
from tests.builders import GiB, policy, snapshot
from tests.conftest import policy_text
from tests.realcgroup import Subtree, real_subtree, v1_layout

CLASSES = """\
defaultClass: ls
classes:
  - name: batch
    match: [{labels: {tier: batch}}]
  - name: ls
    match: [{labels: {tier: ls}}]
"""

BURST_RULE = """\
rules:
  - name: batch-burst
    then:
      setCgroup:
        target: {class: batch}
        containers:
          cpu.cfs_burst_us: {percent: 50, of: limit}
          cpu.cfs_quota_us: {expr: "container.limits.cpu * 0.8 if container.limits.cpu else none"}
        values:
          cpu.cfs_burst_us: {sum: containers}
          cpu.cfs_quota_us: {sum: containers}
"""


def two_container_pod(prefix: str = "kubepods/podb1") -> Workload:
    return Workload(
        uid="b1",
        name="etl",
        namespace="batch",
        labels=MappingProxyType({"tier": "batch"}),
        kube_qos="Burstable",
        cgroup_path=prefix,
        containers=(
            Container("big", requests={"cpu": 2.0}, limits={"cpu": 4.0}, cgroup_path=f"{prefix}/big"),
            Container("small", requests={"cpu": 0.5}, limits={"cpu": 1.0}, cgroup_path=f"{prefix}/small"),
            Container("init", requests={"cpu": 1.0}, limits={"cpu": 1.0}, cgroup_path=f"{prefix}/init", init=True),
        ),
    )


def cgroup_intents(rules: str, pod: Workload, cgroups: dict[str, dict[str, str]] | None = None) -> dict[tuple[str, str], str]:
    engine = Engine(policy(CLASSES + rules))
    snap = snapshot(pods=[pod])
    if cgroups:
        snap = dataclasses.replace(snap, cgroups=cgroups)
    result = run_tick(engine, snap, EngineState(), Guards())
    return {(i.path, i.file): i.value for i in result.evaluation.intents if isinstance(i, CgroupIntent)}


def test_each_container_gets_its_own_value_and_the_pod_their_sum() -> None:
    got = cgroup_intents(BURST_RULE, two_container_pod())
    # burst: 50 % of each container's own limit (Koordinator's per-container cpuBurstPercent),
    # quota: 0.8 x the container's limit; the pod holds the sums; the init container gets nothing.
    assert got[("kubepods/podb1/big", "cpu.cfs_burst_us")] == "200000"
    assert got[("kubepods/podb1/small", "cpu.cfs_burst_us")] == "50000"
    assert got[("kubepods/podb1", "cpu.cfs_burst_us")] == "250000"
    assert got[("kubepods/podb1/big", "cpu.cfs_quota_us")] == "320000"
    assert got[("kubepods/podb1/small", "cpu.cfs_quota_us")] == "80000"
    assert got[("kubepods/podb1", "cpu.cfs_quota_us")] == "400000"
    assert not any(path.endswith("/init") for path, _ in got)


def test_a_container_without_a_limit_leaves_the_pod_without_one() -> None:
    pod = two_container_pod()
    unlimited = Container("sidecar", requests={"cpu": 0.1}, cgroup_path="kubepods/podb1/sidecar")
    pod = dataclasses.replace(pod, containers=(*pod.containers, unlimited))
    rules = BURST_RULE.replace(
        '{expr: "container.limits.cpu * 0.8 if container.limits.cpu else none"}',
        """{expr: "container.limits.cpu * 0.8 if container.limits.cpu else '-1'"}""",
    )
    got = cgroup_intents(rules, pod)
    assert got[("kubepods/podb1/sidecar", "cpu.cfs_quota_us")] == "-1"
    assert got[("kubepods/podb1", "cpu.cfs_quota_us")] == "-1"
    # the burst of a container without a limit is 0 (koordlet resets it), and adds 0 to the sum
    assert got[("kubepods/podb1/sidecar", "cpu.cfs_burst_us")] == "0"
    assert got[("kubepods/podb1", "cpu.cfs_burst_us")] == "250000"


CLASS_KNOB = """\
  - name: quota
    match: [{labels: {tier: quota}}]
    cpu: {cfsQuota: {expr: "container.requests.cpu * 2"}}
"""


def test_a_class_knob_that_reads_container_gives_the_pod_the_sum() -> None:
    pod = two_container_pod()
    pod = dataclasses.replace(pod, labels=MappingProxyType({"tier": "quota"}))
    engine = Engine(policy(CLASSES + CLASS_KNOB))
    result = run_tick(engine, snapshot(pods=[pod]), EngineState(), Guards())
    got = {(i.path, i.file): i.value for i in result.evaluation.intents if isinstance(i, CgroupIntent)}
    assert got[("kubepods/podb1/big", "cpu.cfs_quota_us")] == "400000"
    assert got[("kubepods/podb1/small", "cpu.cfs_quota_us")] == "100000"
    assert got[("kubepods/podb1", "cpu.cfs_quota_us")] == "500000"
    planned = {(op.path, op.value) for op in result.plan.operations if getattr(op, "file", "") == "cpu.cfs_quota_us"}
    assert planned == {("kubepods/podb1/big", "400000"), ("kubepods/podb1/small", "100000"), ("kubepods/podb1", "500000")}


@pytest.mark.parametrize(
    ("file", "texts", "expected"),
    [
        ("cpu.cfs_quota_us", ["180000", "90000"], "270000"),
        ("cpu.cfs_quota_us", ["180000", "-1"], "-1"),
        ("cpu.max", ["20000 100000", "30000 100000"], "50000 100000"),
        ("cpu.max", ["20000 100000", "max 100000"], "max 100000"),
        ("memory.max", [str(GiB), "max"], "max"),
        ("memory.limit_in_bytes", [str(GiB), str(2 * GiB)], str(3 * GiB)),
        ("cpu.cfs_burst_us", [], None),
    ],
)
def test_sum_texts(file: str, texts: list[str], expected: str | None) -> None:
    assert sum_texts(file, texts) == expected


def test_percent_and_expression_read_the_container_not_the_pod() -> None:
    pod = two_container_pod()
    big, small = pod.containers[0], pod.containers[1]
    quota = compile_knob("cpu.cfs_quota_us", {"percent": 50, "of": "limit"})
    assert quota(pod, {}, big) == "200000"
    assert quota(pod, {}, small) == "50000"
    assert quota(pod, {}) == "250000"  # the pod's limit is the sum of its app containers'
    expr = compile_knob("memory.limit_in_bytes", {"expr": "container.requests.cpu * 1024 + pod.requests.cpu"})
    assert expr(pod, {}, small) == str(int(0.5 * 1024 + 2.5))


@pytest.mark.parametrize(
    ("spec", "where", "message"),
    [
        pytest.param(
            """rules:
  - name: r
    then: {setCgroup: {target: {path: kubepods/besteffort}, containers: {cpu.cfs_quota_us: 100000}}}
""",
            "$.spec.rules[0].then.setCgroup.containers",
            "containers needs target.class",
            id="containers-without-class",
        ),
        pytest.param(
            """rules:
  - name: r
    then: {setCgroup: {target: {class: batch}, values: {cpu.cfs_quota_us: {sum: containers}}}}
""",
            "$.spec.rules[0].then.setCgroup.values['cpu.cfs_quota_us']",
            "needs a value of cpu.cfs_quota_us under containers",
            id="sum-without-containers",
        ),
        pytest.param(
            """rules:
  - name: r
    then: {setCgroup: {target: {class: batch}, values: {cpu.cfs_quota_us: {expr: "container.limits.cpu"}}}}
""",
            "$.spec.rules[0].then.setCgroup.values['cpu.cfs_quota_us'].expr",
            "reads container, but values are for the pod's own cgroup",
            id="container-in-pod-values",
        ),
        pytest.param(
            """  - name: mem
    match: [{labels: {tier: mem}}]
    memory: {high: {expr: "container.limits.memory"}}
""",
            "$.spec.classes[2].memory.high.expr",
            "written to the pod's cgroup only, so it cannot read container",
            id="container-in-pod-only-class-knob",
        ),
    ],
)
def test_misplaced_container_values_are_refused_where_written(spec: str, where: str, message: str) -> None:
    with pytest.raises(PolicyError) as exc:
        policy(CLASSES + spec)
    problems = [(p.location.path, p.message) for p in exc.value.problems]
    assert any(path == where and message in text for path, text in problems), problems


# ---------------------------------------------------------------- real cgroupfs


@pytest.fixture
def tree() -> Iterator[Subtree]:
    with real_subtree(children=("pod", "pod/big", "pod/small"), sleeper="pod/big") as t:
        yield t


@pytest.mark.realcgroup
def test_different_values_per_container_reach_the_kernel(tree: Subtree) -> None:
    """Evaluate, plan and apply through the cgroup adapter on a real v1 subtree: each container's
    cpu.cfs_quota_us and cpu.cfs_burst_us (where the kernel has it) is its own, the pod's their sum."""
    adapter = CgroupAdapter(v1_layout())
    pod = two_container_pod(f"{tree.name}/pod")
    pod = dataclasses.replace(pod, containers=pod.containers[:2])
    engine = Engine(policy(CLASSES + BURST_RULE))
    result = run_tick(engine, snapshot(pods=[pod]), EngineState(), Guards())
    outcomes = adapter.apply(result.plan.operations)
    by = {(r.op.path, r.op.file): r for r in outcomes}  # type: ignore[union-attr]
    assert tree.read("cpu", "pod/big", "cpu.cfs_quota_us") == "320000"
    assert tree.read("cpu", "pod/small", "cpu.cfs_quota_us") == "80000"
    assert tree.read("cpu", "pod", "cpu.cfs_quota_us") == "400000"
    burst = by[(f"{tree.name}/pod/big", "cpu.cfs_burst_us")]
    if burst.status == "applied":
        assert tree.read("cpu", "pod/big", "cpu.cfs_burst_us") == "200000"
        assert tree.read("cpu", "pod/small", "cpu.cfs_burst_us") == "50000"
        assert tree.read("cpu", "pod", "cpu.cfs_burst_us") == "250000"
    else:  # kernels before 5.14 have no cpu.cfs_burst_us; the adapter says so instead of failing
        assert burst.status == "skipped", burst
    # read back, the next tick plans nothing: the values are the kernel's
    observed: dict[str, Any] = adapter.observe(
        {p: ["cpu.cfs_quota_us", "cpu.cfs_burst_us"] for p in (pod.cgroup_path, *(c.cgroup_path for c in pod.containers))}
    )
    again = run_tick(engine, dataclasses.replace(snapshot(pods=[pod], time=1001.0), cgroups=observed),
                     result.state, Guards())
    assert [op for op in again.plan.operations if getattr(op, "file", "") == "cpu.cfs_quota_us"] == []


def test_an_overlay_replaces_a_container_knob_as_a_whole() -> None:
    """A knob is a union ({percent, of} or {expr}): merging the two key by key would be neither."""
    over = """\
priority: 10
rules:
  - name: batch-burst
    then:
      setCgroup:
        containers:
          cpu.cfs_burst_us: {expr: "container.limits.cpu * 0.25"}
"""
    docs = parse_documents(policy_text(CLASSES + BURST_RULE, "base") + "---\n" + policy_text(over, "over"), "t.yaml",
                           Layer.FILE)
    engine = Engine(build_policy(docs, REFERENCE_NODE))
    result = run_tick(engine, snapshot(pods=[two_container_pod()]), EngineState(), Guards())
    got = {(i.path, i.file): i.value for i in result.evaluation.intents if isinstance(i, CgroupIntent)}
    assert got[("kubepods/podb1/big", "cpu.cfs_burst_us")] == "100000"  # 4 x 0.25 cores
    assert got[("kubepods/podb1", "cpu.cfs_burst_us")] == "125000"
    assert got[("kubepods/podb1/big", "cpu.cfs_quota_us")] == "320000"  # the rest of the rule stays
