"""The shares <-> weight formula travels on each cgroup write; the adapter holds no policy.

Before, a reload pushed the policy's ``spec.cgroup.weightFormula`` into the live cgroup adapter
(``adapter.weight_formula = ...``): the adapter held policy, and a plan made under one generation was
converted by whatever formula the adapter held when it ran. Now the planner puts the generation's
formula on each cpu.shares/cpu.weight ``WriteCgroup``, and reads are told the formula per call.

The v2 cases use a temporary tree with the kernel's v2 file names: this machine's only cgroup2 mount
carries no controllers (see tests/test_cgroup_adapter_v2.py). The v1 case writes real cgroups.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from engine.adapters.cgroup import CgroupAdapter
from engine.cgroups.mounts import CgroupLayout
from engine.cgroups.weight import WeightFormula, shares_to_weight, weight_to_shares
from engine.daemon.wiring import CollectorSource
from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState
from engine.model.operations import WriteCgroup
from engine.plan.planner import Guards
from engine.sources.collector import CollectorOptions
from engine.sources.standalone import standalone_collector
from engine.tick import run_tick
from tests.builders import GiB, pod, policy, snapshot
from tests.realcgroup import Subtree, real_subtree, v1_layout

LINEAR_AND_QUADRATIC: tuple[WeightFormula, WeightFormula] = ("linear", "quadratic")


def v2_tree(root: Path, *cgroups: str) -> CgroupLayout:
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    for rel in cgroups:
        (root / rel).mkdir(parents=True)
        (root / rel / "cpu.weight").write_text("100\n")
        (root / rel / "cpu.stat").write_text("usage_usec 0\nnr_periods 0\nnr_throttled 0\n")
    return CgroupLayout.unified_tree(root)


@pytest.mark.parametrize(("shares", "linear", "quadratic"), [(512, 20, 59), (1024, 39, 100), (2, 1, 1)])
def test_two_writes_in_one_apply_each_convert_by_their_own_formula(
    tmp_path: Path, shares: int, linear: int, quadratic: int
) -> None:
    """cpu.shares on a v2 host: the same share count lands as two different weights in one apply,
    each by the formula its operation carries (ecosystem.md §5.2 table), and each reads back as
    already in place by that same formula."""
    adapter = CgroupAdapter(v2_tree(tmp_path / "cg", "a", "b"))
    ops = [
        WriteCgroup("a", "cpu.shares", str(shares), "r", "linear"),
        WriteCgroup("b", "cpu.shares", str(shares), "r", "quadratic"),
    ]
    results = adapter.apply(ops)
    expected_status = ["applied" if w != 100 else "unchanged" for w in (linear, quadratic)]
    assert [r.status for r in results] == expected_status
    assert (tmp_path / "cg/a/cpu.weight").read_text().strip() == str(linear)
    assert (tmp_path / "cg/b/cpu.weight").read_text().strip() == str(quadratic)
    assert [r.status for r in adapter.apply(ops)] == ["unchanged", "unchanged"]


def test_two_weight_writes_on_real_v1_cgroups_each_convert_by_their_own_formula() -> None:
    """cpu.weight on a v1 host: the kernel stores each operation's own share count."""
    adapter = CgroupAdapter(v1_layout())
    with real_subtree() as tree:
        tree.mkdir("lin")
        tree.mkdir("quad")
        ops = [
            WriteCgroup(f"{tree.name}/lin", "cpu.weight", "200", "r", "linear"),
            WriteCgroup(f"{tree.name}/quad", "cpu.weight", "200", "r", "quadratic"),
        ]
        assert [r.status for r in adapter.apply(ops)] == ["applied", "applied"]
        lin, quad = _shares(tree, "lin"), _shares(tree, "quad")
        assert (lin, quad) == (weight_to_shares(200, "linear"), weight_to_shares(200, "quadratic"))
        assert lin != quad
        assert [r.status for r in adapter.apply(ops)] == ["unchanged", "unchanged"]


def _shares(tree: Subtree, rel: str) -> int:
    return int(tree.read("cpu", rel, "cpu.shares"))


def test_a_reload_leaves_the_adapter_alone_and_reads_follow_the_new_formula(tmp_path: Path) -> None:
    """Adopting a generation changes nothing in the adapter; the observed cpu.shares of a v2 host
    (read from cpu.weight) follows the adopted generation's formula at once, also for a file the
    collector re-reads only every 10 ticks."""
    layout = v2_tree(tmp_path / "cg", "qosd-x/app")
    (tmp_path / "cg/qosd-x/app/cpu.weight").write_text("20\n")
    adapter = CgroupAdapter(layout)
    collector = standalone_collector(
        layout, options=CollectorOptions(observe_every=10), observe=adapter.observe
    )
    source = CollectorSource(collector, adapter)
    collector.track([("qosd-x/app", "cpu.shares")])
    for formula in (*LINEAR_AND_QUADRATIC, "linear"):
        before = _state(adapter)
        source.adopt(Engine(policy(f"cgroup: {{weightFormula: {formula}}}\n")))
        assert _state(adapter) == before
        expected = str(weight_to_shares(20, formula))
        assert source.observe({"qosd-x/app": ["cpu.shares"]}) == {"qosd-x/app": {"cpu.shares": expected}}
        assert collector.collect().cgroups["qosd-x/app"]["cpu.shares"] == expected


def _state(adapter: CgroupAdapter) -> dict[str, object]:
    return {k: (v.copy() if isinstance(v, dict | set) else v) for k, v in vars(adapter).items()}


@pytest.mark.parametrize(("spec", "formula"), [("cgroup: {weightFormula: linear}\n", "linear"), ("", "quadratic")])
def test_the_planner_puts_the_generations_formula_on_share_writes_only(spec: str, formula: str) -> None:
    rules = spec + (
        "rules:\n  - name: r\n    then: {setCgroup: {target: {path: qosd/x}, "
        "values: {cpu.shares: 512, memory.high: 1073741824}}}\n"
    )
    snap = snapshot(pods=[replace(pod("a", memory=1 * GiB), cgroup_path="qosd/x/a")])
    ops = run_tick(Engine(policy(rules)), snap, EngineState(), Guards()).plan.operations
    writes = {op.file: op for op in ops if isinstance(op, WriteCgroup)}
    assert writes["cpu.shares"].weight_formula == formula
    assert writes["cpu.shares"].to_dict()["weightFormula"] == formula
    assert writes["memory.high"].weight_formula is None
    assert "weightFormula" not in writes["memory.high"].to_dict()
    assert shares_to_weight(512, writes["cpu.shares"].weight_formula) == (20 if formula == "linear" else 59)
