"""The per-pod memory QoS annotation (memoryQos.podAnnotation; Koordinator koordinator.sh/memoryQOS).

Cases of TestCgroupResourcesReconcile_getMergedPodResourceQoS (koordinator-sh/koordinator a7a1b76,
pkg/koordlet/qosmanager/plugins/cgreconcile/cgroup_reconcile_test.go), on a BE class with
Koordinator's beClass defaults (min 0, low 0, throttling 0, wmarkRatio 95, wmarkScalePermill 20,
wmarkMinAdj 50): {"policy":"none"} resets the pod to NoneMemoryQOS, {"policy":"auto",
"throttlingPercent":90} keeps the class values with throttling 90, and fields overlay the class's
field by field. An annotation that does not parse is ignored as a whole, with a note.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import pytest

from engine.evaluate.engine import Engine, Evaluation
from engine.evaluate.state import EngineState
from engine.model.facts import Container, Workload
from engine.model.intents import CgroupIntent
from tests.builders import policy, snapshot

Gi = 1 << 30
PAGE = 4096
ANNOTATION = "koordinator.sh/memoryQOS"
SPEC = f"""\
classes:
  - name: BE
    match: [{{labels: {{koordinator.sh/qosClass: BE}}}}]
    memoryQos: {{minLimitPercent: 0, lowLimitPercent: 0, throttlingPercent: 0, wmarkRatio: 95,
                wmarkScalePermill: 20, wmarkMinAdj: 50, priorityEnable: 0, priority: 0, oomKillGroup: 0,
                podAnnotation: {ANNOTATION}}}
"""
POD = "kubepods/burstable/podp"
CTR = f"{POD}/main"


def evaluate(annotation: str | None) -> Evaluation:
    w = Workload(
        uid="p",
        name="p",
        namespace="ns",
        labels=MappingProxyType({"koordinator.sh/qosClass": "BE"}),
        annotations=MappingProxyType({} if annotation is None else {ANNOTATION: annotation}),
        kube_qos="Burstable",
        cgroup_path=POD,
        containers=(
            Container(
                "main", requests={"memory": float(Gi)}, limits={"memory": float(2 * Gi)}, cgroup_path=CTR
            ),
        ),
    )
    snap = replace(snapshot(pods=[w], allocatable={"memory": 60 * Gi}), cgroup_version=2)
    return Engine(policy(SPEC)).evaluate(snap, EngineState())


def files(ev: Evaluation, path: str) -> dict[str, str]:
    return {i.file: i.value for i in ev.intents if isinstance(i, CgroupIntent) and i.path == path}


CLASS_VALUES = {
    "memory.min": "0",
    "memory.low": "0",
    "memory.wmark_ratio": "95",
    "memory.wmark_scale_factor": "20",
    "memory.wmark_min_adj": "50",
    "memory.use_priority_oom": "0",
    "memory.priority": "0",
    "memory.oom.group": "0",
}
# Koordinator's NoneMemoryQOS: min/low/throttling 0, wmarkRatio 0, wmarkScalePermill 50, the rest 0.
NONE_VALUES = {
    **CLASS_VALUES,
    "memory.wmark_ratio": "0",
    "memory.wmark_scale_factor": "50",
    "memory.wmark_min_adj": "0",
}
# 1Gi + (2Gi - 1Gi) x 90 / 100, floored to pages
HIGH_90 = str((Gi + Gi * 90 // 100) // PAGE * PAGE)


@pytest.mark.parametrize(
    ("annotation", "pod", "container"),
    [
        # "node enabled, use node config": no annotation, the class values.
        (None, CLASS_VALUES, {**CLASS_VALUES, "memory.high": "max"}),
        # "pod policy is None, use pod config": NoneMemoryQOS.
        ('{"policy":"none"}', NONE_VALUES, {**NONE_VALUES, "memory.high": "max"}),
        # "pod policy is Auto, use merged pod config": the class values with throttling 90.
        ('{"policy":"auto","throttlingPercent":90}', CLASS_VALUES, {**CLASS_VALUES, "memory.high": HIGH_90}),
        # policy default (or none given) with fields: the fields overlay the class's. The class's
        # low stays 0: Koordinator lifts low to min only when low is above 0.
        ('{"minLimitPercent":50,"wmarkMinAdj":-25}', {**CLASS_VALUES, "memory.min": str(Gi // 2),
         "memory.wmark_min_adj": "-25"},
         {**CLASS_VALUES, "memory.min": str(Gi // 2), "memory.wmark_min_adj": "-25", "memory.high": "max"}),
    ],
)  # fmt: skip
def test_the_annotation_overlays_the_class(
    annotation: str | None, pod: dict[str, str], container: dict[str, str]
) -> None:
    ev = evaluate(annotation)
    assert files(ev, POD) == pod
    assert files(ev, CTR) == container
    if annotation is not None:
        [intent] = [
            i for i in ev.intents if isinstance(i, CgroupIntent) and i.path == POD and i.file == "memory.min"
        ]
        assert intent.provenance.inputs["podAnnotation"] == annotation


def test_the_kube_qos_sums_use_the_pods_overlaid_values() -> None:
    ev = evaluate('{"minLimitPercent":50}')
    assert files(ev, "kubepods/burstable")["memory.min"] == str(Gi // 2)
    assert files(ev, "kubepods")["memory.min"] == str(Gi // 2)


@pytest.mark.parametrize(
    ("annotation", "why"),
    [
        ("{not json", "it is not JSON"),
        ('["policy"]', "it is not a JSON object"),
        ('{"policy":"sometimes"}', "policy 'sometimes' is not one of default, auto, none"),
        ('{"throttlingPercent":101}', "throttlingPercent 101 is not an integer in [0, 100]"),
        ('{"wmarkMinAdj":"5"}', "wmarkMinAdj 5 is not an integer in [-25, 50]"),
    ],
)
def test_an_annotation_that_does_not_parse_is_ignored_with_a_note(annotation: str, why: str) -> None:
    ev = evaluate(annotation)
    assert files(ev, POD) == CLASS_VALUES
    notes = [s.reason for s in ev.skipped if "ignored" in s.reason]
    assert len(notes) == 1 and notes[0].startswith(f"class BE: annotation {ANNOTATION} of ns/p ignored: {why}"), notes
