"""``cpu.burstContainers: main``: only the pod's main container gets a burst.

Katalyst's burst manager with EnableCPUBurstForMainContainerOnly bursts only the container its
main-container annotation names, else the pod's first container (qrm util GetMainContainer). In
qosd the class section says so, for a burst policy and for the ``burst`` knob alike; the pod's
``{sum: containers}`` then is the main container's value.
"""

from __future__ import annotations

import pytest

from engine.config.errors import PolicyError
from engine.features.class_knobs.knobs import main_container
from engine.model.facts import Container
from tests.builders import policy
from tests.features.class_knobs.test_class_knobs import KATALYST, burst_pod, classes, evaluate, files, node

MAIN = "test.main.container"
POD = "kubepods/burstable/podw"


@pytest.mark.parametrize(
    ("annotations", "key", "expected"),
    [
        ({MAIN: "c2"}, MAIN, "c2"),  # named by the annotation
        ({}, MAIN, "c1"),  # no annotation: the first app container
        ({MAIN: ""}, MAIN, "c1"),  # an empty value names nothing
        ({MAIN: "c2"}, None, "c1"),  # no key configured: the first app container
        ({MAIN: "gone"}, MAIN, "gone"),  # a name the pod lacks: no container matches
    ],
)
def test_main_container(annotations: dict[str, str], key: str | None, expected: str) -> None:
    ctrs = [
        Container("init", "kubepods/p/init", init=True),
        Container("c1", "kubepods/p/c1"),
        Container("c2", "kubepods/p/c2"),
    ]
    assert main_container(ctrs, annotations, key) == expected


def test_no_app_container_has_no_main() -> None:
    assert main_container([Container("init", "kubepods/p/init", init=True)], {}, None) is None


@pytest.mark.parametrize(
    ("annotations", "burst"),
    [
        ({MAIN: "c2"}, {"c1": None, "c2": "100"}),
        (None, {"c1": "100", "c2": None}),
    ],
)
def test_a_burst_policy_reaches_the_main_container_only(
    annotations: dict[str, str] | None, burst: dict[str, str | None]
) -> None:
    """TestManagerImpl_UpdateCPUBurst "cpu burst main container only ...": static 50 % of 200."""
    spec = KATALYST + classes(
        f"cpu: {{burstPolicy: static, burstPercent: 50, burstContainers: main, mainContainerAnnotation: {MAIN}}}"
    )
    w = burst_pod("w", None)
    if annotations:
        w = w.__class__(**{**w.__dict__, "annotations": annotations})
    observed = {f"{POD}/{c}": {"cpu.cfs_quota_us": "200"} for c in ("c1", "c2")}
    got = files(evaluate(spec, node([w], version=1, cgroups=observed)))
    assert {c: got.get((f"{POD}/{c}", "cpu.cfs_burst_us")) for c in ("c1", "c2")} == burst


def test_the_burst_knob_and_its_pod_sum_follow_the_main_container() -> None:
    """{percent: 50, of: limit} of 2 cores is 100000 us per container; the pod sums the main one's."""
    body = "cpu: {burst: {percent: 50, of: limit}, burstContainers: main}"
    got = files(evaluate(classes(body), node([burst_pod("w", None)], version=1)))
    assert got.get((f"{POD}/c1", "cpu.cfs_burst_us")) == "100000"
    assert (f"{POD}/c2", "cpu.cfs_burst_us") not in got
    assert got.get((POD, "cpu.cfs_burst_us")) == "100000"
    every = files(
        evaluate(classes("cpu: {burst: {percent: 50, of: limit}}"), node([burst_pod("w", None)], version=1))
    )
    assert every.get((POD, "cpu.cfs_burst_us")) == "200000"  # without it: both containers


def test_an_annotation_without_main_is_refused_where_it_is_written() -> None:
    with pytest.raises(PolicyError) as err:
        policy(classes(f"cpu: {{burstPolicy: static, mainContainerAnnotation: {MAIN}}}"))
    message = str(err.value)
    assert "mainContainerAnnotation" in message and "burstContainers: main" in message
