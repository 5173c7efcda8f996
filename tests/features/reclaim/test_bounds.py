"""Every reclaim bound applies to every published resource, whatever the policy (issue 18:
`reclaim.max: 4` did not cap the published CPU, which reached 23 cores, because the headroom
policy never read min, max or maxPercent).

The bounds (engine/features/reclaim/strategy.py ``bound``) come after the report smoothing and
floors, so a minReport floor or a smoothed average cannot lift a report past ``max`` either.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.evaluate.state import EngineState
from engine.model.operations import PublishNodeResource
from engine.plan.planner import Guards
from engine.tick import run_tick
from tests.builders import GiB
from tests.features.reclaim.test_eval_reclaim import (
    CPU_NAME,
    MEM_NAME,
    engine,
    katalyst_node,
    published,
    with_containers,
)

ROOT = Path(__file__).resolve().parents[3]
POLICIES = ("headroom", "usage", "request", "maxUsageRequest")


def reclaim(policy: str, cpu_bounds: str, mem_bounds: str) -> str:
    margin = "" if policy == "headroom" else ", reclaimThresholdPercent: 100"
    return (
        "reclaim:\n"
        f"  cpu: {{policy: {policy}{margin}, publishAs: {CPU_NAME}{cpu_bounds}}}\n"
        f"  memory: {{policy: {policy}{margin}, publishAs: {MEM_NAME}{mem_bounds}}}\n"
    )


def node_values(policy: str, cpu_bounds: str = "", mem_bounds: str = "") -> dict[str, float]:
    snap = katalyst_node(**{"cpu.usage_cores": 5.0, "memory.usage_bytes": float(20 * GiB)})
    ev = engine(reclaim(policy, cpu_bounds, mem_bounds)).evaluate(snap, EngineState())
    return {name: float(i.params["value"]) for name, i in published(ev).items()}


@pytest.mark.parametrize("policy", POLICIES)
def test_max_caps_every_policy_and_resource(policy: str) -> None:
    """Unbounded, each policy publishes more than 1 core and 1Gi on this node; with max 1 and 1Gi
    the published values are exactly the caps, and the formula says so."""
    free = node_values(policy)
    assert free[CPU_NAME] > 1.0 and free[MEM_NAME] > GiB, free
    capped = node_values(policy, ", max: 1", ", max: 1Gi")
    assert capped == {CPU_NAME: 1.0, MEM_NAME: float(GiB)}


@pytest.mark.parametrize("policy", POLICIES)
def test_max_percent_and_min_apply_to_every_policy(policy: str) -> None:
    """maxPercent 5 of 16 cores is 0.8 cores (Koordinator's truncated milli arithmetic: 800m);
    min 60Gi lifts memory above anything this node can lend."""
    got = node_values(policy, ", maxPercent: 5", ", min: 60Gi")
    assert got == {CPU_NAME: 0.8, MEM_NAME: float(60 * GiB)}


def test_max_wins_over_the_report_floor() -> None:
    """minReport 4 would report 4 cores; max 2 is the last word on what the Node shows, and the
    history remembers the bounded value (util-based headroom builds on what was published)."""
    e = engine(reclaim("headroom", ", minReport: 4, max: 2", ""))
    # s1 at 3.6 cores (estimate 4.5): 15 - 4 - 10 = 1 core of headroom, floored at 4, capped at 2
    snap = with_containers(katalyst_node(), {"s1/main": {"cpu.usage_cores": 3.6}})
    result = run_tick(e, snap, EngineState(), Guards())
    cpu = published(result.evaluation)[CPU_NAME]
    assert cpu.params["value"] == 2.0
    assert str(cpu.params["formula"]).endswith("raised to minReport 4; capped at max 2")
    assert result.state.reports[CPU_NAME].reported == 2.0
    ops = {o.name: o.quantity for o in result.plan.operations if isinstance(o, PublishNodeResource)}
    assert ops[CPU_NAME] == "2000"


def test_qosd_eval_default_profile_honours_reclaim_max(tmp_path: Path) -> None:
    """The reported case through the CLI: the bundled Katalyst-style profile plus an overlay with
    reclaim.cpu.max 4, on a 48-core node with little use, publishes 4 cores, not the headroom."""
    overlay = tmp_path / "cap.yaml"
    overlay.write_text(
        "apiVersion: qosd.io/v1alpha1\nkind: QoSPolicy\nmetadata: {name: cap}\n"
        "spec:\n  priority: 10\n  reclaim: {cpu: {max: 4}}\n"
    )
    facts = tmp_path / "facts.yaml"
    facts.write_text(
        "apiVersion: qosd.io/v1alpha1\nkind: FactsSnapshot\ntime: 1700000000\n"
        "node:\n  name: n1\n  capacity: {cpu: 48, memory: 206158430208}\n  allocatable: {cpu: 48, memory: 206158430208}\n"
        "  topology: {cpus: [" + ", ".join(f"{{id: {i}, core: {i}, socket: 0, numa: 0}}" for i in range(48))
        + "]}\n"
        "metrics:\n  node: {cpu: {usage_cores: 2}, memory: {usage_bytes: 8589934592}}\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "engine.cli", "eval", "--facts", str(facts), "--rules", str(overlay),
         "--output", "json"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )
    assert out.returncode == 0, out.stderr
    intents = json.loads(out.stdout)["intents"]
    cpu = [i for i in intents if i.get("kind") == "publish" and i.get("reclaims") == "cpu"]
    assert cpu and cpu[0]["value"] == 4.0, cpu
