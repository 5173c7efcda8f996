"""Class-level cgroup knobs, memory QoS and OOM priority wired into the engine
(engine/features/class_knobs/step.py), the weight formula selectable in YAML, the memoryGuard action and
the cpu.idle write order.

Anchors, by test:
- memory.min/low/high: Koordinator ``cgroup_reconcile.go`` calculateContainerResources /
  calculatePodResources and ``cgroup_reconcile_test.go`` TestCgroupResourceReconcile_calculateResources
  ("single pod using pod-level config": BE pod, min 100%, low 0%, throttling 80%, 1Gi; container
  without a request -> memory.high ((1Gi x 80 / 100) / PageSize) x PageSize = 858992640).
- cpu.shares -> cpu.weight: KEP-2254 / koordlet ``1 + (shares - 2) x 9999 / 262142`` (1024 -> 39)
  and runc >= 1.3.2's quadratic (opencontainers/cgroups utils_test TestConvertCPUSharesToCgroupV2Value:
  2 -> 1, 1024 -> 100, 262144 -> 10000).
- CPU burst: Katalyst ``cpuburst/manager_test.go`` TestManagerImpl_UpdateCPUBurst ("mix of shared
  cores and dedicated cores pods with cpu burst enabled": quota 200, percent 50 -> 100, 25 -> 50;
  "... cpu burst policy closed sets cpu burst value to 0"), defaultCPUBurstPercent 100.
- OOM priority: Katalyst ``pkg/util/qos/oom_priority.go`` AlignOOMPriority (300 passes through,
  everything else into [min, max), unknown -> class default).
- Memory guard: Katalyst ``memory_guard.go`` (crit = max(4Gi, zone low), limit = usage + free - crit,
  high = 0.95 x max on v2).
"""

from __future__ import annotations

import json
from dataclasses import replace
from types import MappingProxyType
from typing import Any

import jsonschema
import pytest

from engine.config.errors import PolicyError
from engine.config.pipeline import REFERENCE_NODE, build_policy, load_documents
from engine.evaluate.engine import Engine, Evaluation
from engine.evaluate.state import EngineState
from engine.features.memory_qos.reconcile import kube_qos_dirs
from engine.model.facts import Container, Snapshot, Workload
from engine.model.intents import CgroupIntent
from engine.output import format_table
from engine.plan.cgroups import Desired, order_writes
from engine.plan.planner import Guards
from engine.resources import data_dir
from engine.tick import run_tick
from tests.builders import policy, snapshot

Ki, Mi, Gi = 1 << 10, 1 << 20, 1 << 30
PAGE = 4096
MEM = "katalyst.kubewharf.io/memory_enhancement"
CPU = "katalyst.kubewharf.io/cpu_enhancement"
QOS = "katalyst.kubewharf.io/qos_level"


def ctr(
    name: str, pod: str, requests: dict[str, float] | None = None, limits: dict[str, float] | None = None
) -> Container:
    return Container(
        name,
        requests=MappingProxyType(requests or {}),
        limits=MappingProxyType(limits or {}),
        cgroup_path=f"{pod}/{name}",
    )


def workload(
    uid: str,
    tier: str,
    *containers: tuple[str, dict[str, float] | None, dict[str, float] | None],
    qos: str = "Burstable",
    path: str | None = None,
    annotations: dict[str, str] | None = None,
    phase: str = "Running",
) -> Workload:
    pod_path = (
        path
        or {
            "Guaranteed": f"kubepods/pod{uid}",
            "Burstable": f"kubepods/burstable/pod{uid}",
            "BestEffort": f"kubepods/besteffort/pod{uid}",
        }[qos]
    )
    return Workload(
        uid=uid,
        name=uid,
        namespace="ns",
        labels=MappingProxyType({"tier": tier}),
        annotations=MappingProxyType(annotations or {}),
        kube_qos=qos,
        phase=phase,
        cgroup_path=pod_path,
        containers=tuple(ctr(n, pod_path, r, lim) for n, r, lim in containers),
    )


def node(pods: list[Workload], version: int | None = 2, **changes: Any) -> Snapshot:
    snap = snapshot(pods=pods, allocatable={"memory": 60 * Gi, "cpu": 16})
    return replace(snap, cgroup_version=version, **changes)


def evaluate(spec: str, snap: Snapshot) -> Evaluation:
    return Engine(policy(spec)).evaluate(snap, EngineState())


def files(ev: Evaluation) -> dict[tuple[str, str], str]:
    return {(i.path, i.file): i.value for i in ev.intents if isinstance(i, CgroupIntent)}


def cgroup(ev: Evaluation, path: str, file: str) -> CgroupIntent:
    found = [i for i in ev.intents if isinstance(i, CgroupIntent) and (i.path, i.file) == (path, file)]
    assert len(found) == 1, f"{path}/{file}: {found}"
    return found[0]


def classes(body: str, name: str = "c") -> str:
    return f"classes:\n  - name: {name}\n    match: [{{labels: {{tier: {name}}}}}]\n" + "".join(
        f"    {line}\n" for line in body.strip("\n").splitlines()
    )


# ---------------------------------------------------------------- memory QoS (Koordinator)

BE_QOS = classes(
    "cpu: {policy: reclaimed}\n"
    "memoryQos: {minLimitPercent: 100, lowLimitPercent: 0, throttlingPercent: 80, wmarkRatio: 95,\n"
    "            wmarkScalePermill: 20, wmarkMinAdj: 50, resource: kubernetes.io/batch-memory}",
    "be",
)
BATCH = "kubernetes.io/batch-memory"


def test_koordinator_pod_level_config_anchor() -> None:
    """cgroup_reconcile_test "single pod using pod-level config": every number of want/want1/want2."""
    be = workload("be1", "be", ("c0", None, {BATCH: Gi}), ("c1", {BATCH: Gi}, {BATCH: Gi}), qos="BestEffort")
    got = files(evaluate(BE_QOS, node([be])))
    pod, c0, c1 = (
        "kubepods/besteffort/podbe1",
        "kubepods/besteffort/podbe1/c0",
        "kubepods/besteffort/podbe1/c1",
    )
    assert got[(pod, "memory.min")] == str(Gi) and got[(pod, "memory.low")] == "0"
    assert (pod, "memory.high") not in got  # Koordinator sets memory.high per container only
    assert got[(c0, "memory.min")] == "0" and got[(c0, "memory.low")] == "0"
    assert got[(c0, "memory.high")] == str((Gi * 80 // 100) // PAGE * PAGE) == "858992640"
    assert got[(c1, "memory.min")] == str(Gi) and got[(c1, "memory.high")] == str(Gi)
    for path in (pod, c0, c1):
        assert got[(path, "memory.wmark_ratio")] == "95"
        assert got[(path, "memory.wmark_scale_factor")] == "20"
        assert got[(path, "memory.wmark_min_adj")] == "50"
    # want: the Guaranteed dir (kubepods, ancestor of all) and the BestEffort dir carry the sums.
    assert got[("kubepods", "memory.min")] == str(Gi) and got[("kubepods", "memory.low")] == "0"
    assert got[("kubepods/besteffort", "memory.min")] == str(Gi)
    assert ("kubepods/burstable", "memory.min") not in got  # no Burstable pod configured


@pytest.mark.parametrize(
    ("request_", "limit", "throttling", "expected"),
    [
        # limit 1Gi at 80% without a request: floor(858993459 / 4096) x 4096 (Koordinator's test).
        (None, Gi, 80, "858992640"),
        # request 512Mi, limit 1Gi at 80%: 536870912 + 429496729 = 966367641 -> 966365184.
        (512 * Mi, Gi, 80, "966365184"),
        # no limit: node allocatable (60Gi) stands in: 512Mi + (60Gi - 512Mi) x 50 / 100, page-floored.
        (512 * Mi, None, 50, str((512 * Mi + (60 * Gi - 512 * Mi) * 50 // 100) // PAGE * PAGE)),
        # throttlingPercent 0 is "no throttling": max (Koordinator writes MaxInt64).
        (Gi, 2 * Gi, 0, "max"),
        # a value that is already whole pages stays: 1Gi + 1Gi x 50 / 100 = 1.5Gi.
        (Gi, 2 * Gi, 50, str(Gi + Gi // 2)),
    ],
)
def test_memory_high_per_container(
    request_: int | None, limit: int | None, throttling: int, expected: str
) -> None:
    spec = classes(f"memoryQos: {{throttlingPercent: {throttling}}}", "ls")
    requests = {"memory": float(request_)} if request_ is not None else None
    limits = {"memory": float(limit)} if limit is not None else None
    w = workload("w", "ls", ("main", requests, limits))
    got = files(evaluate(spec, node([w])))
    assert got[("kubepods/burstable/podw/main", "memory.high")] == expected
    assert ("kubepods/burstable/podw/main", "memory.min") not in got  # unset percent: file left alone


def test_low_is_raised_to_min_and_steps_are_in_the_provenance() -> None:
    spec = classes("memoryQos: {minLimitPercent: 50, lowLimitPercent: 20}", "ls")
    w = workload("w", "ls", ("main", {"memory": float(Gi)}, None))
    ev = evaluate(spec, node([w]))
    low = cgroup(ev, "kubepods/burstable/podw/main", "memory.low")
    assert low.value == str(Gi // 2)  # 20% < 50%: raised to memory.min
    assert low.provenance.rule == "classes"
    assert (
        "memory.low 214748364 < memory.min 536870912: raised to 536870912"
        in low.provenance.inputs["memoryQos"]
    )
    # kube-QoS sums use the raw terms (Koordinator sums before the lift): low stays 20% there.
    assert cgroup(ev, "kubepods/burstable", "memory.low").value == str(Gi * 20 // 100)


def test_qos_dir_sums_over_classes_and_kube_qos() -> None:
    spec = (
        BE_QOS + classes("memoryQos: {minLimitPercent: 50, lowLimitPercent: 100}", "ls")[len("classes:\n") :]
    )
    ls1 = workload("ls1", "ls", ("main", {"memory": float(Gi)}, None))
    ls2 = workload("ls2", "ls", ("main", {"memory": float(2 * Gi)}, None), qos="Guaranteed")
    be = workload("be1", "be", ("c1", {BATCH: float(Gi)}, {BATCH: float(Gi)}), qos="BestEffort")
    ev = evaluate(spec, node([ls1, ls2, be]))
    got = files(ev)
    assert got[("kubepods/burstable", "memory.min")] == str(Gi // 2)
    assert got[("kubepods/burstable", "memory.low")] == str(Gi)
    assert got[("kubepods/besteffort", "memory.min")] == str(Gi)
    # kubepods = every pod: 0.5Gi + 1Gi (ls2, Guaranteed) + 1Gi (be1)
    assert got[("kubepods", "memory.min")] == str(Gi // 2 + Gi + Gi)
    root = cgroup(ev, "kubepods", "memory.min")
    assert root.provenance.inputs["pods"] == 3 and root.pod is None
    assert root.provenance.inputs["sources"] == ["class ls", "class be"]


def test_cgroup_v1_writes_no_memory_qos_and_says_so_once() -> None:
    spec = classes("memoryQos: {minLimitPercent: 50}\nmemory: {high: {percent: 90, of: limit}}", "ls")
    pods = [workload(f"w{i}", "ls", ("main", {"memory": float(Gi)}, {"memory": float(Gi)})) for i in range(3)]
    ev = evaluate(spec, node(pods, version=1))
    assert not [i for i in ev.intents if isinstance(i, CgroupIntent) and i.file.startswith("memory.")]
    reasons = [s.reason for s in ev.skipped if s.rule == "classes"]
    assert len(reasons) == 2  # one for the memory knob, one for memoryQos, not one per pod
    assert all("cgroup v1" in r for r in reasons)


def test_pods_outside_kubelet_cgroups_get_no_qos_dir_sums() -> None:
    """Standalone cgroups have no kube-QoS parents: the sums would land on unrelated directories."""
    spec = classes("memoryQos: {minLimitPercent: 50}", "ls")
    w = workload("svc", "ls", ("main", {"memory": float(Gi)}, None), path="system.slice/svc.service")
    got = files(evaluate(spec, node([w])))
    assert got[("system.slice/svc.service", "memory.min")] == str(Gi // 2)
    assert not [k for k in got if k[0] in ("system.slice", "")]


@pytest.mark.parametrize(
    ("path", "qos", "expected"),
    [
        ("kubepods/burstable/pod1234", "Burstable", ("kubepods/burstable", "kubepods")),
        ("kubepods/pod1234", "Guaranteed", ("kubepods", "kubepods")),
        (
            "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod12_34.slice",
            "BestEffort",
            ("kubepods.slice/kubepods-besteffort.slice", "kubepods.slice"),
        ),
        ("kubepods.slice/kubepods-pod12_34.slice", "Guaranteed", ("kubepods.slice", "kubepods.slice")),
        ("kubepods/besteffort/pod1234", "Burstable", None),  # kube QoS and directory disagree
        ("system.slice/x.service", "Burstable", None),
    ],
)
def test_kube_qos_dirs(path: str, qos: str, expected: tuple[str, str] | None) -> None:
    assert kube_qos_dirs(Workload(uid="u", name="u", kube_qos=qos, cgroup_path=path)) == expected


def test_a_rules_memory_qos_replaces_the_class_declaration() -> None:
    spec = classes("memoryQos: {minLimitPercent: 10, throttlingPercent: 0}", "ls") + (
        "rules:\n  - name: ls-mem\n    then: {setCgroup: {target: {class: ls}, memoryQos: {minLimitPercent: 50}}}\n"
    )
    w = workload("w", "ls", ("main", {"memory": float(Gi)}, {"memory": float(Gi)}))
    ev = evaluate(spec, node([w]))
    got = files(ev)
    assert got[("kubepods/burstable/podw/main", "memory.min")] == str(Gi // 2)
    assert ("kubepods/burstable/podw/main", "memory.high") not in got  # the class's 0% is replaced
    intent = cgroup(ev, "kubepods/burstable/podw/main", "memory.min")
    assert intent.provenance.rule == "ls-mem" and intent.provenance.item == "ns/w"
    assert got[("kubepods/burstable", "memory.min")] == str(Gi // 2)
    assert "ls-mem" in ev.fired


# ---------------------------------------------------------------- CPU knobs


SHARES_BY_REQUEST = "cpu: {shares: {percent: 100, of: request}}"


@pytest.mark.parametrize(
    ("formula", "version", "file", "value"),
    [
        (None, 1, "cpu.shares", "1024"),
        (None, None, "cpu.shares", "1024"),  # unknown version: the adapter converts on v2
        (None, 2, "cpu.weight", "100"),  # default quadratic: 1024 -> 100
        ("quadratic", 2, "cpu.weight", "100"),
        ("linear", 2, "cpu.weight", "39"),  # KEP-2254: 1 + 1022 x 9999 / 262142 = 39
    ],
)
def test_shares_or_weight_by_version_and_formula(
    formula: str | None, version: int | None, file: str, value: str
) -> None:
    head = f"cgroup: {{weightFormula: {formula}}}\n" if formula else ""
    w = workload("w", "c", ("main", {"cpu": 1.0}, None))
    got = files(evaluate(head + classes(SHARES_BY_REQUEST), node([w], version=version)))
    assert got[("kubepods/burstable/podw", file)] == value
    assert ("kubepods/burstable/podw", "cpu.weight" if file == "cpu.shares" else "cpu.shares") not in got


@pytest.mark.parametrize(
    ("knob", "formula", "version", "expected"),
    [
        ("shares: 2", "quadratic", 2, ("cpu.weight", "1")),
        ("shares: 262144", "linear", 2, ("cpu.weight", "10000")),
        ("weight: 100", "quadratic", 1, ("cpu.shares", "1024")),  # exact right inverse
        ("weight: 100", "linear", 1, ("cpu.shares", "2597")),  # kubelet: 99 x 262142 / 9999 + 2
        ("weight: 100", "linear", 2, ("cpu.weight", "100")),
    ],
)
def test_literal_shares_and_weight_convert(
    knob: str, formula: str, version: int, expected: tuple[str, str]
) -> None:
    spec = f"cgroup: {{weightFormula: {formula}}}\n" + classes(f"cpu: {{{knob}}}")
    got = files(evaluate(spec, node([workload("w", "c", ("main", None, None))], version=version)))
    assert got[("kubepods/burstable/podw", expected[0])] == expected[1]


def test_set_cgroup_uses_the_policy_weight_formula() -> None:
    rule = "rules:\n  - name: w\n    then: {setCgroup: {target: {class: c}, values: {cpu.weight: {percent: 100, of: request}}}}\n"
    w = workload("w", "c", ("main", {"cpu": 1.0}, None))
    for formula, value in (("linear", "39"), ("quadratic", "100")):
        spec = f"cgroup: {{weightFormula: {formula}}}\n" + classes("cpu: {policy: shared}") + rule
        assert files(evaluate(spec, node([w])))[("kubepods/burstable/podw", "cpu.weight")] == value


def test_idle_class_writes_idle_and_no_shares() -> None:
    w = workload("w", "c", ("main", None, None))
    ev = evaluate(classes("cpu: {shares: 2, idle: true}"), node([w], version=1))
    got = files(ev)
    assert got[("kubepods/burstable/podw", "cpu.idle")] == "1"
    assert ("kubepods/burstable/podw", "cpu.shares") not in got  # EINVAL while idle
    assert "cpu.idle 1" in cgroup(ev, "kubepods/burstable/podw", "cpu.idle").provenance.inputs["shares"]
    got = files(evaluate(classes("cpu: {shares: 512, idle: false}"), node([w], version=1)))
    assert got[("kubepods/burstable/podw", "cpu.idle")] == "0"
    assert got[("kubepods/burstable/podw", "cpu.shares")] == "512"


@pytest.mark.parametrize(
    ("version", "file", "unlimited", "half"),
    [(1, "cpu.cfs_quota_us", "-1", "100000"), (2, "cpu.max", "max 100000", "100000 100000")],
)
def test_cfs_quota_on_pod_and_containers(version: int, file: str, unlimited: str, half: str) -> None:
    w = workload("w", "c", ("a", None, {"cpu": 1.0}), ("b", None, {"cpu": 3.0}))
    got = files(evaluate(classes("cpu: {cfsQuota: max}"), node([w], version=version)))
    assert {got[(p, file)] for p in ("kubepods/burstable/podw", "kubepods/burstable/podw/a")} == {unlimited}
    got = files(evaluate(classes("cpu: {cfsQuota: {percent: 50, of: limit}}"), node([w], version=version)))
    assert got[("kubepods/burstable/podw", file)] == half.replace("100000", "200000", 1)  # 50% of 4 cores
    assert got[("kubepods/burstable/podw/a", file)] == half.replace("100000", "50000", 1)  # 50% of 1 core


def test_koordinator_burst_percent_of_limit() -> None:
    """koord cpuBurstPercent 1000: int(limit x 1000/100 x 100000) per container, the pod the sum."""
    w = workload("w", "c", ("a", None, {"cpu": 1.0}), ("b", None, None))
    got = files(evaluate(classes("cpu: {burst: {percent: 1000, of: limit}}"), node([w], version=1)))
    assert got[("kubepods/burstable/podw/a", "cpu.cfs_burst_us")] == "1000000"
    assert got[("kubepods/burstable/podw", "cpu.cfs_burst_us")] == "1000000"  # b has no limit: adds 0


KATALYST = """\
enhancements:
  - name: cpu_burst_policy
    from: {jsonAnnotation: katalyst.kubewharf.io/cpu_enhancement, key: cpu_burst_policy}
    type: string
    values: [default, closed, static, dynamic]
    effect: {set: cpu.burstPolicy}
  - name: cpu_burst_percent
    from: {jsonAnnotation: katalyst.kubewharf.io/cpu_enhancement, key: cpu_burst_percent}
    type: number
    range: [0, 100]
    onInvalid: clamp
    effect: {set: cpu.burstPercent}
"""


def burst_pod(uid: str, enhancement: dict[str, str] | None, limit: float | None = 2.0) -> Workload:
    ann = {CPU: json.dumps(enhancement)} if enhancement else None
    lim = {"cpu": limit} if limit else None
    return workload(uid, "c", ("c1", None, lim), ("c2", None, lim), annotations=ann)


@pytest.mark.parametrize(
    ("enhancement", "class_policy", "version", "expected"),
    [
        # "mix of shared cores and dedicated cores pods with cpu burst enabled": quota 200.
        ({"cpu_burst_policy": "static", "cpu_burst_percent": "50"}, None, 1, "100"),
        ({"cpu_burst_policy": "static", "cpu_burst_percent": "25"}, None, 2, "50"),
        # "... cpu burst policy closed sets cpu burst value to 0".
        ({"cpu_burst_policy": "closed", "cpu_burst_percent": "100"}, None, 1, "0"),
        # the class's policy (reclaimed_cores: closed) applies without an enhancement.
        (None, "closed", 1, "0"),
        # static without a percent: defaultCPUBurstPercent 100.
        (None, "static", 1, "200"),
        # an enhancement wins over the class (Katalyst reads the annotation first).
        ({"cpu_burst_policy": "static", "cpu_burst_percent": "50"}, "closed", 1, "100"),
        # default and dynamic leave the file alone.
        ({"cpu_burst_policy": "default"}, None, 1, None),
        ({"cpu_burst_policy": "dynamic"}, "closed", 1, None),
    ],
)
def test_katalyst_burst(
    enhancement: dict[str, str] | None, class_policy: str | None, version: int, expected: str | None
) -> None:
    spec = KATALYST + classes(
        f"cpu: {{burstPolicy: {class_policy}}}" if class_policy else "cpu: {policy: shared}"
    )
    w = burst_pod("w", enhancement)
    quota = {"cpu.cfs_quota_us": "200"} if version == 1 else {"cpu.max": "200 100000"}
    observed = {f"kubepods/burstable/podw/{c}": quota for c in ("c1", "c2")}
    got = files(evaluate(spec, node([w], version=version, cgroups=observed)))
    file = "cpu.cfs_burst_us" if version == 1 else "cpu.max.burst"
    for c in ("c1", "c2"):
        assert got.get((f"kubepods/burstable/podw/{c}", file)) == expected
    assert ("kubepods/burstable/podw", file) not in got  # Katalyst bursts containers only


def test_katalyst_burst_follows_the_observed_quota_across_ticks() -> None:
    """Without an observed quota the kubelet's (2 cores -> 200000 us) is used; once the cgroup
    shows another quota, the cached result is recomputed."""
    spec = KATALYST + classes("cpu: {burstPolicy: static, burstPercent: 50}")
    engine = Engine(policy(spec))
    w = burst_pod("w", None)
    first = files(engine.evaluate(node([w], version=1), EngineState()))
    assert first[("kubepods/burstable/podw/c1", "cpu.cfs_burst_us")] == "100000"
    observed = {"kubepods/burstable/podw/c1": {"cpu.cfs_quota_us": "50000"}}
    second = files(engine.evaluate(node([w], version=1, cgroups=observed), EngineState()))
    assert second[("kubepods/burstable/podw/c1", "cpu.cfs_burst_us")] == "25000"
    assert second[("kubepods/burstable/podw/c2", "cpu.cfs_burst_us")] == "100000"
    unlimited = {"kubepods/burstable/podw/c1": {"cpu.cfs_quota_us": "-1"}}
    third = files(engine.evaluate(node([w], version=1, cgroups=unlimited), EngineState()))
    assert third[("kubepods/burstable/podw/c1", "cpu.cfs_burst_us")] == "0"  # nothing to burst over


def test_a_rule_wins_over_the_class_for_the_same_file() -> None:
    spec = classes("cpu: {idle: true}") + (
        "rules:\n  - name: wake\n    then: {setCgroup: {target: {class: c}, values: {cpu.idle: 0}}}\n"
    )
    ev = evaluate(spec, node([workload("w", "c", ("main", None, None))]))
    idle = cgroup(ev, "kubepods/burstable/podw", "cpu.idle")
    assert (idle.value, idle.provenance.rule) == ("0", "wake")


def test_inactive_pods_and_unclassified_pods_get_nothing() -> None:
    done = workload("done", "c", ("main", None, None), phase="Succeeded")
    other = workload("other", "zzz", ("main", None, None))
    ev = evaluate(classes("cpu: {idle: true}"), node([done, other]))
    assert not [i for i in ev.intents if isinstance(i, CgroupIntent)]
    assert ev.oom_priorities == ()


def test_steady_state_reuses_the_computation_and_writes_nothing() -> None:
    spec = classes(
        "cpu: {shares: 512, idle: false}\nmemoryQos: {minLimitPercent: 50, throttlingPercent: 80}", "ls"
    )
    engine = Engine(policy(spec))
    w = workload("w", "ls", ("main", {"memory": float(Gi)}, {"memory": float(2 * Gi)}))
    first = engine.evaluate(node([w]), EngineState())
    second = engine.evaluate(node([w]), EngineState())
    assert [i.to_dict() for i in first.intents] == [i.to_dict() for i in second.intents]
    assert all(a is b for a, b in zip(first.intents, second.intents, strict=True))  # cached per pod
    observed: dict[str, dict[str, str]] = {}
    for i in second.intents:
        if isinstance(i, CgroupIntent):
            observed.setdefault(i.path, {})[i.file] = i.value
    result = run_tick(engine, node([w], cgroups=observed), EngineState(), Guards())
    assert result.plan.operations == ()
    # A new allocatable changes memory.high of containers without a limit only; this one has one.
    moved = replace(node([w]), allocatable={"memory": 30 * Gi})
    assert files(engine.evaluate(moved, EngineState())) == files(second)


def test_reuse_of_a_whole_tick_ends_with_a_rule_ask_a_new_version_or_new_pods() -> None:
    """With the same workload objects every pod's result is stable, so the step hands back the last
    tick's output without visiting the pods. That must end when a rule asks for memory QoS (here
    only under memory pressure), when the cgroup version changes, and when a pod object changes."""
    spec = classes("cpu: {shares: 512}\nmemoryQos: {minLimitPercent: 10, throttlingPercent: 0}", "ls") + (
        "rules:\n  - name: ls-mem\n    when: {node.memory.usage_percent: {gte: 90}}\n"
        "    then: {setCgroup: {target: {class: ls}, memoryQos: {minLimitPercent: 50}}}\n"
    )
    engine = Engine(policy(spec))
    w = workload("w", "ls", ("main", {"memory": float(Gi)}, {"memory": float(Gi)}))
    pods = (w,)

    def tick(pressure: bool, version: int = 2, workloads: tuple[Workload, ...] = pods) -> dict[tuple[str, str], str]:
        snap = snapshot(
            pods=list(workloads),
            allocatable={"memory": 60 * Gi, "cpu": 16},
            node={"memory.usage_percent": 95.0 if pressure else 10.0},
        )
        return files(engine.evaluate(replace(snap, cgroup_version=version), EngineState()))

    main = ("kubepods/burstable/podw/main", "memory.min")
    calm = tick(False)
    assert calm[main] == str(Gi // 10) and tick(False) == calm
    assert tick(True)[main] == str(Gi // 2)  # the rule's ask replaces the reused output
    assert tick(False) == calm
    assert ("kubepods/burstable/podw", "cpu.shares") in tick(False, version=1)
    assert ("kubepods/burstable/podw", "cpu.weight") in tick(False)
    bigger = workload("w", "ls", ("main", {"memory": float(2 * Gi)}, {"memory": float(2 * Gi)}))
    assert tick(False, workloads=(bigger,))[main] == str(2 * Gi // 10)


# ---------------------------------------------------------------- cpu.idle write order


def test_idle_on_writes_shares_first_and_idle_off_writes_idle_first() -> None:
    """Kernel: while cpu.idle is 1, cpu.shares/cpu.weight writes fail (EINVAL); clearing idle
    resets the weight. Parents still go before children."""
    on = [
        Desired("kubepods/besteffort/pod1", "cpu.idle", "1"),
        Desired("kubepods/besteffort/pod1", "cpu.shares", "2"),
        Desired("kubepods/besteffort", "cpu.weight", "1"),
    ]
    order = [(d.path, d.file) for d in order_writes(on, {})]
    assert order == [
        ("kubepods/besteffort", "cpu.weight"),
        ("kubepods/besteffort/pod1", "cpu.shares"),
        ("kubepods/besteffort/pod1", "cpu.idle"),
    ]
    off = [Desired("p", "cpu.weight", "50"), Desired("p", "cpu.idle", "0")]
    observed = {"p": {"cpu.idle": "1", "cpu.weight": "1"}}
    assert [d.file for d in order_writes(off, observed)] == ["cpu.idle", "cpu.weight"]


# ---------------------------------------------------------------- OOM priority


@pytest.fixture(scope="module")
def katalyst_engine() -> Engine:
    return Engine(build_policy(load_documents([]), REFERENCE_NODE))


@pytest.mark.parametrize(
    ("level", "raw", "expected", "source"),
    [
        ("shared_cores", None, 0, "class default"),
        ("reclaimed_cores", None, -100, "class default"),
        ("shared_cores", "42", 42, "enhancement oom_priority"),
        ("shared_cores", "500", 99, "enhancement oom_priority"),  # >= max: max - 1, not 300
        ("shared_cores", "300", 300, "enhancement oom_priority"),  # TopOOMPriorityScore passes
        ("system_cores", "300", 300, "enhancement oom_priority"),
        ("shared_cores", "-300", 0, "enhancement oom_priority"),  # AlignOOMPriority clamps -300
        ("reclaimed_cores", "-150", -100, "enhancement oom_priority"),
        ("dedicated_cores", "250", 199, "enhancement oom_priority"),
        ("shared_cores", "abc", 0, "class default"),  # unparsable: ignored
    ],
)
def test_oom_priority_per_pod(
    katalyst_engine: Engine, level: str, raw: str | None, expected: int, source: str
) -> None:
    mem = {"numa_binding": "true"} | ({"oom_priority": raw} if raw is not None else {})
    w = workload(
        "p",
        "x",
        ("main", {"cpu": 1.0, "memory": float(Gi)}, None),
        annotations={QOS: level, MEM: json.dumps(mem)},
    )
    ev = katalyst_engine.evaluate(node([w], version=1), EngineState())
    (oom,) = ev.oom_priorities
    assert (oom.class_name, oom.value, oom.source, oom.ignored) == (level, expected, source, False)


def test_minus_300_is_ignored_where_a_band_admits_it() -> None:
    spec = (
        "classes:\n  - name: c\n    match: [{labels: {tier: c}}]\n    oomPriority: {default: 0, min: -300, max: 100}\n"
        "enhancements:\n  - name: oom\n    from: {annotation: oom}\n    type: integer\n"
        "    range: [-300, 300]\n    onInvalid: clamp\n    effect: {set: oomPriority}\n"
    )
    w = workload("p", "c", ("main", None, None), annotations={"oom": "-300"})
    ev = evaluate(spec, node([w]))
    (oom,) = ev.oom_priorities
    assert oom.value == -300 and oom.ignored and oom.to_dict()["ignored"] is True


def test_oom_priorities_are_in_eval_output_and_table() -> None:
    spec = "classes:\n  - name: c\n    match: [{labels: {tier: c}}]\n    oomPriority: {default: 7, min: 0, max: 100}\n"
    engine = Engine(policy(spec))
    pods = [workload(u, "c", ("main", None, None)) for u in ("a", "b")]
    result = run_tick(engine, node(pods), EngineState(), Guards())
    doc = {
        "apiVersion": "qosd.io/v1alpha1",
        "kind": "Evaluation",
        **result.to_dict(),
        "state": result.evaluation.state.to_dict(),
    }
    assert doc["oomPriorities"] == [
        {"uid": "a", "pod": "ns/a", "class": "c", "value": 7, "source": "class default"},
        {"uid": "b", "pod": "ns/b", "class": "c", "value": 7, "source": "class default"},
    ]
    schema = json.loads((data_dir("schemas") / "evaluation.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(json.loads(json.dumps(doc)))
    assert "  7 c, class default: ns/a, ns/b" in format_table(result)


# ---------------------------------------------------------------- memory guard (Katalyst)

GUARD = "rules:\n  - name: guard\n    then: {memoryGuard: {}}\n"


def guard_node(version: int | None, **numa1: Any) -> Snapshot:
    numa = {
        0: {
            "memory.free_bytes": 10 * Gi,
            "memory.watermark_low_bytes": 64 * Mi,
            "memory.reclaimed_usage_bytes": 3 * Gi,
        },
        1: {
            "memory.free_bytes": 2 * Gi,
            "memory.watermark_low_bytes": 64 * Mi,
            "memory.reclaimed_usage_bytes": Gi,
        },
    }
    numa[1].update(numa1)
    snap = snapshot(pods=[], numa=numa, node={"memory.watermark_scale_factor": 10})
    return replace(snap, cgroup_version=version)


def test_memory_guard_on_v2_and_v1() -> None:
    """crit = max(4Gi, 64Mi) on both; limit = 3Gi + 6Gi and 1Gi + 0: memory.max 10Gi,
    memory.high int(10Gi x 0.95)."""
    got = files(evaluate(GUARD, guard_node(2)))
    assert got == {
        ("kubepods/besteffort", "memory.max"): str(10 * Gi),
        ("kubepods/besteffort", "memory.high"): str(int(10 * Gi * 0.95)),
    }
    assert files(evaluate(GUARD, guard_node(1))) == {
        ("kubepods/besteffort", "memory.limit_in_bytes"): str(10 * Gi)
    }


def test_memory_guard_parameters_and_missing_usage() -> None:
    rule = "rules:\n  - name: guard\n    then: {memoryGuard: {cgroup: reclaim, minCriticalWatermark: 1Gi}}\n"
    got = files(evaluate(rule, guard_node(2)))
    # crit = 1Gi: 3Gi + 9Gi and 1Gi + 1Gi
    assert got[("reclaim", "memory.max")] == str(14 * Gi)
    ev = evaluate(GUARD, guard_node(2, **{"memory.reclaimed_usage_bytes": None}))
    assert not files(ev) and "guard" not in ev.fired
    assert [s.reason for s in ev.skipped] == [
        "memory guard for kubepods/besteffort: reclaimed cgroup usage on NUMA 1 is unknown; no memory guard advice"
    ]


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            classes("cpu: {policy: shared}")
            + "rules:\n  - name: r\n    then: {setCgroup: {target: {class: c}}}\n",
            "setCgroup needs values, containers, memoryQos or a mix",
        ),
        (
            "rules:\n  - name: r\n    then: {setCgroup: {target: {path: x}, memoryQos: {minLimitPercent: 5}}}\n",
            "memoryQos needs target.class",
        ),
        (
            "rules:\n  - name: r\n    then: {memoryGuard: {minCriticalWatermark: lots}}\n",
            "minCriticalWatermark",
        ),
        ("cgroup: {weightFormula: cubic}\n", "weightFormula"),
        (classes("memoryQos: {minLimitPercent: 101}"), "101"),
    ],
)
def test_invalid_settings_are_rejected(spec: str, message: str) -> None:
    with pytest.raises(PolicyError) as err:
        policy(spec)
    assert message in str(err.value)


def test_bundled_policies_compile_the_new_fields() -> None:
    katalyst = build_policy(load_documents([]), REFERENCE_NODE)
    assert katalyst.weight_formula is None
    assert "memory-guard" not in katalyst.rule_index  # shipped disabled
    koord = build_policy(load_documents([]), REFERENCE_NODE.with_labels({"qosd.io/profile": "koordinator"}))
    assert not {"memory-qos-ls", "memory-qos-be"} & set(koord.rule_index)
    reclaimed = katalyst.class_index["reclaimed_cores"]
    assert reclaimed.cpu.idle is True and reclaimed.cpu.burst_policy == "closed"


def test_shares_cannot_be_max() -> None:
    with pytest.raises(PolicyError) as err:
        policy(classes("cpu: {shares: max}"))
    assert 'cpu.shares cannot be "max"' in str(err.value)
