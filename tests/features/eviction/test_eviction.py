"""Eviction strategy tables: victim ranking, filters and the release accounting of one round.

Each table row names the anchor rule it pins, so a mutation of the rule (a missing metric sorted
last, a descending key read ascending, ``>=`` read as ``>`` at the release target) fails a named row.
The ranking anchors: the kubelet's eviction manager and Katalyst's ``qos.pod``/``priority.pod``/
metric ranking put a pod *without* the ranking metric first (katalyst.md, "Ranking": "metric
larger first (missing metric first)"), lower priority first, and a leading ``-`` sorts descending.
"""

from __future__ import annotations

from typing import Any

import pytest

from engine.config.errors import Location
from engine.config.policy import OomPriority, QoSClass
from engine.evaluate.factview import ItemFacts
from engine.features.class_knobs.spec import ClassCpu, ClassMemory
from engine.features.eviction.spec import Victims, compile_spec
from engine.features.eviction.strategy import Candidate, Round, choose, eligible, rank
from tests.builders import GiB, pod


def qos_class(name: str, eviction_priority: int | None = None, protected: bool = False) -> QoSClass:
    return QoSClass(
        name=name,
        index=0,
        matchers=(),
        cpu_policy=None,
        pool=None,
        requires=(),
        protected=protected,
        oom_priority=OomPriority(),
        eviction_priority=eviction_priority,
        cpu=ClassCpu(),
        memory=ClassMemory(),
        resctrl=None,
        origin=Location("test.yaml", 1, 1),
    )


BE = qos_class("be", 0)
LS = qos_class("ls", 100)
SYSTEM = qos_class("system", protected=True)


def cand(
    uid: str,
    facts: dict[str, Any] | None = None,
    cls: QoSClass | None = BE,
    priority: int | None = None,
    phase: str = "Running",
    labels: dict[str, str] | None = None,
    terminating: bool = False,
) -> Candidate:
    workload = pod(uid, priority=priority, phase=phase, labels=labels, terminating=terminating)
    return Candidate(workload, ItemFacts(facts or {}), cls)


def order(candidates: list[Candidate], keys: tuple[str, ...]) -> list[str]:
    return [c.workload.uid for c, _ in rank(candidates, keys)]


@pytest.mark.parametrize(
    ("candidates", "keys", "expected"),
    [
        # A pod without the metric ranks first, descending or ascending (kubelet, Katalyst).
        pytest.param(
            [cand("a", {"memory.usage_bytes": 5 * GiB}), cand("b"), cand("c", {"memory.usage_bytes": 9 * GiB})],
            ("-memory.usage",),
            ["b", "c", "a"],
            id="missing-metric-first-descending",
        ),
        pytest.param(
            [cand("a", {"memory.usage_bytes": 5 * GiB}), cand("b"), cand("c", {"memory.usage_bytes": 1 * GiB})],
            ("memory.usage",),
            ["b", "c", "a"],
            id="missing-metric-first-ascending",
        ),
        pytest.param(
            [cand("z", {"cpu.usage_cores": 0.1}), cand("y", {"cpu.usage_cores": 0.0})],
            ("-cpu.usage",),
            ["z", "y"],
            id="zero-is-a-value-not-missing",
        ),
        pytest.param(
            [cand("a", priority=10), cand("b", priority=-5), cand("c")],
            ("priority",),
            ["b", "c", "a"],  # no priority counts as 0
            id="lower-priority-first",
        ),
        pytest.param(
            [cand("a", cls=LS), cand("b", cls=BE), cand("c", cls=None)],
            ("class",),
            ["b", "c", "a"],  # evictionPriority 0 (and no class: 0) before 100; then uid
            id="class-eviction-priority",
        ),
        pytest.param(
            [cand("m"), cand("z"), cand("a")],
            ("-name",),
            ["z", "m", "a"],
            id="descending-names",
        ),
        pytest.param(
            [cand("ab"), cand("a"), cand("b")],
            ("-name",),
            ["b", "ab", "a"],  # a prefix sorts after its extensions when descending
            id="descending-name-prefix",
        ),
        pytest.param(
            [
                cand("a", {"memory.usage_bytes": 1 * GiB}, priority=1),
                cand("b", {"memory.usage_bytes": 3 * GiB}, priority=1),
                cand("c", {"memory.usage_bytes": 2 * GiB}, priority=0),
            ],
            ("priority", "-memory.usage"),
            ["c", "b", "a"],  # the second key breaks the first one's tie
            id="second-key-breaks-ties",
        ),
        pytest.param(
            [cand("b", {"memory.usage_bytes": GiB}), cand("a", {"memory.usage_bytes": GiB})],
            ("-memory.usage",),
            ["a", "b"],  # full tie: by uid, so the order never depends on the input order
            id="tie-by-uid",
        ),
    ],
)
def test_rank(candidates: list[Candidate], keys: tuple[str, ...], expected: list[str]) -> None:
    assert order(candidates, keys) == expected
    assert order(list(reversed(candidates)), keys) == expected


@pytest.mark.parametrize(
    ("candidate", "victims", "expected"),
    [
        pytest.param(cand("a", priority=100), {"maxPriority": 100}, True, id="max-priority-is-inclusive"),
        pytest.param(cand("a", priority=101), {"maxPriority": 100}, False, id="above-max-priority"),
        pytest.param(cand("a"), {"maxPriority": 0}, True, id="no-priority-counts-as-0"),
        pytest.param(cand("a", cls=SYSTEM), {}, False, id="protected-never"),
        pytest.param(cand("a", cls=SYSTEM), {"classes": ["system"]}, False, id="protected-even-when-named"),
        pytest.param(cand("a", cls=LS), {"classes": ["be"]}, False, id="other-class"),
        pytest.param(cand("a", cls=None), {"classes": ["be"]}, False, id="no-class-with-class-filter"),
        pytest.param(cand("a", cls=BE), {"excludeClasses": ["be"]}, False, id="excluded-class"),
        pytest.param(cand("a", phase="Succeeded"), {}, False, id="finished-pods-not-victims"),
        pytest.param(cand("a", phase="Pending"), {}, True, id="pending-is-a-victim"),
        pytest.param(cand("a", phase="Pending"), {"phases": ["Running"]}, False, id="phases-filter"),
        pytest.param(cand("a", labels={"x": "1"}), {"requireLabel": {"x": "1"}}, True, id="label-present"),
        pytest.param(cand("a", labels={"x": "2"}), {"requireLabel": {"x": "1"}}, False, id="label-differs"),
    ],
)
def test_eligible(candidate: Candidate, victims: dict[str, Any], expected: bool) -> None:
    assert eligible(candidate, Victims.of(victims)) is expected


NODE = {"memory.capacity_bytes": 100 * GiB, "memory.usage_percent": 80}


def usage(uid: str, gib: float, **kwargs: Any) -> Candidate:
    return cand(uid, {"memory.usage_bytes": gib * GiB}, **kwargs)


@pytest.mark.parametrize(
    ("candidates", "params", "pending", "limit", "chosen", "released"),
    [
        # 80% used, lower 70%: release 10 GiB; the largest first until the target is met
        pytest.param(
            [usage("a", 4), usage("b", 8), usage("c", 3)],
            {"release": {"lowerPercent": 70}}, {}, 10, ["b", "a"], 12.0, id="until-target",
        ),
        # exactly the target: released >= target stops, no extra victim
        pytest.param(
            [usage("a", 10), usage("b", 5)],
            {"release": {"lowerPercent": 70}}, {}, 10, ["a"], 10.0, id="exact-target-stops",
        ),
        # already under the lower percent: nothing to release, nobody evicted
        pytest.param(
            [usage("a", 10)], {"release": {"lowerPercent": 80}}, {}, 10, [], 0.0, id="zero-target",
        ),
        # pods being evicted are credited (Koordinator's pending release): only 4 GiB more needed
        pytest.param(
            [usage("a", 6), usage("b", 5), usage("c", 4)],
            {"release": {"lowerPercent": 70}}, {"a": 6 * GiB}, 10, ["b"], 11.0, id="pending-credit",
        ),
        # the per-round limit caps victims even below the target
        pytest.param(
            [usage("a", 2), usage("b", 2), usage("c", 2)],
            {"release": {"lowerPercent": 70}}, {}, 2, ["a", "b"], 4.0, id="limit-caps",
        ),
        # no target: evict up to the limit, minus evictions of candidates still under way
        pytest.param(
            [usage("a", 1), usage("b", 2), usage("c", 3, terminating=True)],
            {}, {}, 2, ["b"], None, id="no-target-counts-terminating",
        ),
        pytest.param(
            [usage("a", 1), usage("b", 2)], {}, {}, 1, ["b"], None, id="no-target-limit-1",
        ),
        # a pod without the metric is ranked first and credits nothing
        pytest.param(
            [usage("a", 6), cand("b"), usage("c", 5)],
            {"release": {"lowerPercent": 70}}, {}, 10, ["b", "a", "c"], 11.0, id="missing-metric-first",
        ),
    ],
)
def test_choose(
    candidates: list[Candidate],
    params: dict[str, Any],
    pending: dict[str, float],
    limit: int,
    chosen: list[str],
    released: float | None,
) -> None:
    params = {"orderBy": ["-memory.usage"], **params}
    picks, release = choose(candidates, compile_spec(params), NODE, pending, Round(), limit)
    assert [p.candidate.workload.uid for p in picks] == chosen
    assert [p.rank for p in picks] == list(range(1, len(picks) + 1))
    if released is None:
        assert release is None
    else:
        assert release is not None and release.released_after == pytest.approx(released * GiB)


def test_a_pod_chosen_by_an_earlier_rule_of_the_round_is_not_chosen_again() -> None:
    rnd = Round(chosen={"b": "earlier-rule"})
    picks, release = choose(
        [usage("a", 3), usage("b", 8)],
        compile_spec({"orderBy": ["-memory.usage"], "release": {"lowerPercent": 70}}),
        NODE, {}, rnd, 10,
    )
    # b's 8 GiB count as released already (it is going), so only a is added for the 10 GiB target
    assert [p.candidate.workload.uid for p in picks] == ["a"]
    assert release is not None and release.pending == pytest.approx(8 * GiB)
