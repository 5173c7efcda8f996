"""The `free` reclaim policy (engine/features/reclaim/free.py), the weighted report smoothing
(engine/features/reclaim/report.py) and the kubelet's CPU manager policy they read
(engine/sources/kubelet.py). Every row works its arithmetic by hand.

    value = max((base - used) x ratio, 0), used = usage - reclaimed usage + idle held requests
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from engine.features.eviction.tolerance import ReclaimPoolSupply
from engine.features.reclaim.free import FreePod, free_reclaimable
from engine.features.reclaim.headroom import UtilOptions
from engine.features.reclaim.report import ReportHistory, report, weighted
from engine.features.reclaim.spec import HeldRequests, ReclaimFree
from engine.sources.kubelet import CpuManagerState, cpu_manager_policy
from tests.features.reclaim.test_reclaim import spec

NODE = {"cpu.capacity_cores": 16.0, "cpu.allocatable_cores": 15.0, "cpu.usage_cores": 10.0}
PODS = [
    FreePod(request=4.0, usage=1.0, reclaimed=False, held=True),  # Guaranteed, 3 cores idle
    FreePod(request=2.0, usage=None, reclaimed=False, held=True),  # Guaranteed, no metric: all idle
    FreePod(request=1.0, usage=2.0, reclaimed=False),  # bursting Burstable
    FreePod(request=0.0, usage=2.5, reclaimed=True),
]
STATIC = HeldRequests(frozenset({"Guaranteed"}), "static")


def free_spec(**kw: object) -> object:
    return spec("free", None, free=ReclaimFree(**kw))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("free", "manager", "expected", "used"),
    [
        # (15 - (10 - 2.5)) x 1 = 7.5
        pytest.param({}, None, 7.5, 7.5, id="allocatable-minus-usage"),
        # (16 - 7.5) x 0.5 = 4.25
        pytest.param({"of": "capacity", "ratio": 0.5}, None, 4.25, 7.5, id="capacity-times-ratio"),
        # reclaimed usage counted: (15 - 10) x 0.8 = 4
        pytest.param({"ratio": 0.8, "reclaimed_usage": "include"}, None, 4.0, 10.0, id="reclaimed-included"),
        # static: idle held 3 + 2 = 5 -> used 12.5 -> 2.5
        pytest.param({"held": STATIC}, "static", 2.5, 12.5, id="held-under-static"),
        pytest.param({"held": STATIC}, "none", 7.5, 7.5, id="held-not-under-none"),
        pytest.param({"held": STATIC}, None, 7.5, 7.5, id="held-not-when-unknown"),
        pytest.param({"held": HeldRequests(frozenset({"Guaranteed"}))}, None, 2.5, 12.5, id="held-always"),
        pytest.param({"ratio": 0.3, "rounding": "floor"}, None, 2.0, 7.5, id="floor"),
        pytest.param({"ratio": 0.3, "rounding": "ceil"}, None, 3.0, 7.5, id="ceil"),
    ],
)
def test_free_node_formulas(free: dict[str, object], manager: str | None, expected: float, used: float) -> None:
    r = free_reclaimable("cpu", free_spec(**free), NODE, PODS, manager_policy=manager)  # type: ignore[arg-type]
    assert r.value == pytest.approx(expected)
    assert r.inputs["usage"] == 10.0
    assert 10.0 - r.inputs["reclaimedUsage"] + r.inputs["heldIdle"] == pytest.approx(used)


def test_free_clamps_at_zero() -> None:
    busy = {**NODE, "cpu.usage_cores": 20.0}
    r = free_reclaimable("cpu", free_spec(held=STATIC), busy, PODS, manager_policy="static")  # type: ignore[arg-type]
    assert r.value == 0.0 and r.inputs["free"] == 0.0


def test_unknown_manager_policy_is_said() -> None:
    r = free_reclaimable("cpu", free_spec(held=STATIC), NODE, PODS)  # type: ignore[arg-type]
    assert "heldRequests not counted: the node's CPU manager policy is unknown" in r.formula
    assert r.inputs["heldCounted"] is False


def test_measured_reclaimed_usage_wins_over_the_pods_sum() -> None:
    node = {**NODE, "reclaim.cgroup_usage_cores": 4.0}
    r = free_reclaimable("cpu", free_spec(), node, PODS)  # type: ignore[arg-type]
    assert r.value == pytest.approx(15 - 6.0) and r.inputs["reclaimedUsage"] == 4.0


def test_memory_free_and_unknown_usage_withdraws() -> None:
    mem = {"memory.capacity_bytes": 64.0, "memory.allocatable_bytes": 60.0, "memory.usage_bytes": 20.0}
    pods = [FreePod(0.0, 5.0, True)]
    assert free_reclaimable("memory", free_spec(ratio=0.6), mem, pods).value == pytest.approx(27.0)  # type: ignore[arg-type]
    gone = free_reclaimable("memory", free_spec(), {"memory.capacity_bytes": 64.0}, pods)  # type: ignore[arg-type]
    assert gone.value is None and "unknown" in gone.formula


@pytest.mark.parametrize(
    ("pool", "free", "expected"),
    [
        # Katalyst GetReclaimMetrics: max(10 - 3, 0) + 3 = 10
        pytest.param(ReclaimPoolSupply(10, 3.0, 3.0), {}, 10.0, id="supply"),
        # quota 5000 / 1000 = 5 cores caps it
        pytest.param(ReclaimPoolSupply(10, 3.0, 3.0, 5000.0, 1000.0), {}, 5.0, id="quota-cap"),
        # reclaimed usage counted as busy: 10 - 3 = 7
        pytest.param(ReclaimPoolSupply(10, 3.0, 3.0), {"reclaimed_usage": "include"}, 7.0, id="include"),
        pytest.param(ReclaimPoolSupply(10, 2.5, 0.2), {"rounding": "floor"}, 7.0, id="floor"),
    ],
)
def test_free_of_the_reclaim_pool(pool: ReclaimPoolSupply, free: dict[str, object], expected: float) -> None:
    r = free_reclaimable("cpu", free_spec(of="reclaimPool", **free), NODE, [], pool=pool)  # type: ignore[arg-type]
    assert r.value == pytest.approx(expected) and r.inputs["poolCpus"] == 10


def test_free_of_an_unknown_pool_withdraws() -> None:
    r = free_reclaimable("cpu", free_spec(of="reclaimPool"), NODE, [], pool=None)  # type: ignore[arg-type]
    assert r.value is None and "reclaim pool unknown" in r.formula


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([5.0], 5.0),
        ([3.0, 6.0], (3 + 2 * 6) / 3),
        ([4.0, 2.0, 8.0], (4 + 2 * 2 + 4 * 8) / 7),
        # a long window neither overflows nor loses the newest value's dominance
        ([1.0] * 5000 + [2.0], pytest.approx(1.5, rel=1e-9)),
    ],
)
def test_weighted_history(values: list[float], expected: float) -> None:
    assert weighted(values) == pytest.approx(expected)


def test_weighted_smoothing_through_the_reporter() -> None:
    s = replace(spec("usage", 60), smoothing_window=300.0, smoothing_agg="weighted")
    value, history, steps = report(3.0, s, ReportHistory(), 0.0)
    value, history, steps = report(6.0, s, history, 30.0)
    assert value == pytest.approx(5.0) and steps[0] == "weighted of 2 over 300s: 5"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (json.dumps({"policyName": "static", "defaultCpuSet": "0-3", "checksum": 1}), "static"),
        (json.dumps({"policyName": "none", "defaultCpuSet": "", "checksum": 1}), "none"),
        (json.dumps({"policyName": "best-effort"}), None),
        ("{not json", None),
        ("[]", None),
        ("", None),
        (None, None),
    ],
)
def test_cpu_manager_checkpoint(text: str | None, expected: str | None) -> None:
    assert cpu_manager_policy(text) == expected


def test_cpu_manager_state_is_reread_after_its_interval(tmp_path: Path) -> None:
    """The kubelet rewrites its checkpoint by rename: each read opens the file anew, at most every
    ``every`` seconds; a missing file is an unknown policy."""
    path = tmp_path / "cpu_manager_state"
    state = CpuManagerState(path, every=10.0)
    assert state.policy(0.0) is None
    path.write_text(json.dumps({"policyName": "static"}))
    assert state.policy(5.0) is None  # within the interval: the last answer
    assert state.policy(10.0) == "static"
    tmp = tmp_path / "new"
    tmp.write_text(json.dumps({"policyName": "none"}))
    tmp.rename(path)
    assert state.policy(20.0) == "none"


@pytest.mark.parametrize(
    ("pool", "last", "rounding", "expected"),
    [
        # katalyst "limited by quota": supply min(10, 5) = 5, utilization 3 / 5 = 0.6 at target: no
        # oversold; min(max(10, 5), 5 x 1.5) = 7.5, rounded up as Quantity.Value() does
        pytest.param(ReclaimPoolSupply(10, 3.0, 3.0, 5000.0, 1000.0), 10.0, "ceil", 8.0, id="limited-by-quota"),
        # an idle pool: oversold 10 x 0.6 = 6 on the last 10 -> 16, capped at 10 x 1.5 = 15
        pytest.param(ReclaimPoolSupply(10, 0.0, 0.0), 10.0, "none", 15.0, id="oversold-cap"),
        # no last report: max(0 + 6, 10) = 10
        pytest.param(ReclaimPoolSupply(10, 0.0, 0.0), None, "none", 10.0, id="first-report"),
    ],
)
def test_util_based_on_the_free_supply(
    pool: ReclaimPoolSupply, last: float | None, rounding: str, expected: float
) -> None:
    options = UtilOptions(0.6, 0.0, 1.5, 1.0)
    s = free_spec(of="reclaimPool", rounding=rounding, util_based=options)
    r = free_reclaimable("cpu", s, NODE, [], pool=pool, last_report=last)  # type: ignore[arg-type]
    assert r.value == pytest.approx(expected)
    assert "util-based: max(last" in r.formula


def test_util_based_is_cpu_only_at_validate(tmp_path: Path) -> None:
    from engine.config.pipeline import load_documents, validate
    from tests.conftest import policy_text

    (tmp_path / "p.yaml").write_text(
        policy_text("reclaim:\n  memory: {policy: free, free: {utilBased: {enabled: true}}, publishAs: x/m}\n")
    )
    problems = validate(load_documents([tmp_path], builtin=False))
    assert any("free.utilBased oversells CPU" in p.message and p.location.line == 6 for p in problems)
