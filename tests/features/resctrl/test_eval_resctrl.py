"""resctrl wired into the engine: the setResctrl action, class-level ``resctrl`` and the step that
plans every group of a tick against the node's CLOSIDs (engine/features/resctrl/step.py).

Mask and bandwidth numbers are Koordinator's (koordinator.md §3.6): ``CalculateCatL3MaskValue`` in
``pkg/koordlet/util/system/resctrl.go`` (its comment works cbm 0x7ff, 0-30% -> 0xf and 10-50% ->
0x3c, the ``Test_calculateCatL3Schemata`` rows) and ``calculateMbaPercentForGroup`` in
``pkg/koordlet/qosmanager/plugins/resctrl/resctrl_reconcile.go`` (Intel: round up to 10; AMD:
``int(160 × p / 100)``, 100 -> 2048; ``TestResctrlReconcile_calculateAndApplyRDTMbPolicyForGroup``).
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Any

import pytest

from engine.evaluate.engine import Engine, Evaluation
from engine.evaluate.state import EngineState
from engine.features.resctrl import step as resctrl_step
from engine.features.resctrl.step import task_cgroups
from engine.model.facts import Container, ResctrlInfo, Snapshot, Workload
from engine.model.intents import ResctrlIntent
from engine.model.operations import AssignTasks, CreateResctrlGroup, WriteSchemata
from engine.plan.planner import Guards
from engine.tick import run_tick
from tests.builders import policy, snapshot

CLASSES = """\
classes:
  - name: be
    match: [{labels: {tier: be}}]
    cpu: {policy: reclaimed}
    resctrl: {group: reclaim, l3Percent: [0, 30], mbPercent: 100}
  - name: ls
    match: [{labels: {tier: ls}}]
  - name: lsr
    match: [{labels: {tier: lsr}}]
"""

INTEL = ResctrlInfo(
    mounted=True,
    cbm_mask="7ff",
    min_cbm_bits=1,
    num_closids=16,
    mb_granularity=10,
    mb_min=10,
    vendor="intel",
    cache_ids=(0, 1),
    mb_domains=(0, 1),
    groups=MappingProxyType({"": "L3:0=7ff;1=7ff\nMB:0=100;1=100"}),
)


def member(uid: str, tier: str, *, phase: str = "Running", init: bool = False) -> Workload:
    containers = [Container("main", cgroup_path=f"kubepods/pod{uid}/main")]
    if init:
        containers.insert(0, Container("setup", cgroup_path=f"kubepods/pod{uid}/setup", init=True))
    return Workload(
        uid=uid,
        name=uid,
        namespace="ns",
        labels=MappingProxyType({"tier": tier}),
        phase=phase,
        containers=tuple(containers),
    )


PODS = [member("be-1", "be"), member("be-2", "be", init=True), member("ls-1", "ls"), member("lsr-1", "lsr")]


def node(info: ResctrlInfo | None = INTEL, pods: list[Workload] | None = None, **changes: Any) -> Snapshot:
    snap = snapshot(pods=PODS if pods is None else pods)
    if info is None:
        return snap
    return replace(snap, resctrl=replace(info, **changes) if changes else info)


def engine(rules: str = "") -> Engine:
    return Engine(policy(CLASSES + rules))


def evaluate(e: Engine, snap: Snapshot) -> Evaluation:
    return e.evaluate(snap, EngineState())


def groups(ev: Evaluation) -> dict[str, ResctrlIntent]:
    return {i.group: i for i in ev.intents if isinstance(i, ResctrlIntent)}


RULE_LS = """\
rules:
  - name: ls-cache
    then: {setResctrl: {class: ls, l3Percent: [10, 50], mbPercent: 90}}
"""


# ---------------------------------------------------------------- class declarations and the action


def test_class_declaration_and_rule_action_become_groups() -> None:
    """be: 0-30% of 11 ways -> f; ls: 10-50% -> 3c (both in CalculateCatL3MaskValue's comment),
    MB 90 stays 90 on Intel ("apply policy correctly on intel")."""
    ev = evaluate(engine(RULE_LS), node())
    got = groups(ev)
    assert set(got) == {"reclaim", "ls"}  # a rule naming only the class uses the class name as group
    reclaim, ls = got["reclaim"], got["ls"]
    assert dict(reclaim.schemata) == {"L3": "0=f;1=f", "MB": "0=100;1=100"}
    assert reclaim.pods == ("ns/be-1", "ns/be-2")
    assert reclaim.cgroups == ("kubepods/podbe-1/main", "kubepods/podbe-2/main")  # no init container
    assert reclaim.provenance.rule == "resctrl" and reclaim.provenance.inputs["l3Mask"] == "f"
    assert dict(ls.schemata) == {"L3": "0=3c;1=3c", "MB": "0=90;1=90"}
    assert ls.pods == ("ns/ls-1",)
    assert ls.provenance.rule == "ls-cache"
    assert ls.provenance.inputs["sources"] == ["rule ls-cache (class ls)"]
    assert "ls-cache" in ev.fired and ev.skipped == ()


def test_amd_bandwidth_units() -> None:
    """Koordinator "apply policy correctly on amd": MBA 30% -> int(160 × 0.3) = 48 on every
    domain; 100% -> 2048 ("apply unlimited policy correctly on amd")."""
    amd = replace(INTEL, vendor="amd", cbm_mask="ffff", cache_ids=(0, 1, 2, 3), mb_domains=(0, 1, 2, 3))
    rules = "rules:\n  - name: be-mb\n    then: {setResctrl: {class: be, mbPercent: 30}}\n"
    got = groups(evaluate(engine(rules), node(amd)))
    assert got["reclaim"].schemata["MB"] == "0=48;1=48;2=48;3=48"
    assert got["reclaim"].schemata["L3"] == "0=1f;1=1f;2=1f;3=1f"  # 16 ways: ⌈4.8⌉ = 5
    got = groups(evaluate(engine(), node(amd)))
    assert got["reclaim"].schemata["MB"] == "0=2048;1=2048;2=2048;3=2048"


def test_finished_pods_and_other_classes_are_not_members() -> None:
    pods = [*PODS, member("be-old", "be", phase="Succeeded")]
    got = groups(evaluate(engine(), node(pods=pods)))
    assert got["reclaim"].pods == ("ns/be-1", "ns/be-2")


def test_task_cgroups_fall_back_to_the_workload_cgroup() -> None:
    """Standalone mode: a workload is a cgroup, with no containers."""
    w = Workload(uid="svc", name="svc", cgroup_path="system.slice/batch.service")
    assert task_cgroups(w) == ("system.slice/batch.service",)
    assert task_cgroups(Workload(uid="x", name="x")) == ()


# ---------------------------------------------------------------- not mounted


def test_not_mounted_is_one_note_and_no_intents() -> None:
    rules = RULE_LS + "  - name: extra\n    then: {setResctrl: {group: extra, mbPercent: 50}}\n"
    e = engine(rules)
    for info in (None, ResctrlInfo(mounted=False)):
        ev = evaluate(e, node(info))
        assert groups(ev) == {}
        assert [s.rule for s in ev.skipped] == ["resctrl"]
        reason = ev.skipped[0].reason
        assert reason.startswith("resctrl is not mounted on this node")
        assert (
            "groups ls (rule ls-cache (class ls)), extra (rule extra), reclaim (class be) left alone"
            in reason
        )
        assert "ls-cache" not in ev.fired and "extra" not in ev.fired  # nothing could act: no cooldown
        result = run_tick(e, node(info), EngineState(), Guards())
        assert not [op for op in result.plan.operations if op.kind in ("createResctrlGroup", "writeSchemata")]


def test_no_closids_reported_is_one_note() -> None:
    ev = evaluate(engine(), node(num_closids=0))
    assert groups(ev) == {}
    assert len(ev.skipped) == 1 and "num_closids 0" in ev.skipped[0].reason


def test_policy_without_resctrl_says_nothing() -> None:
    e = Engine(policy("classes:\n  - name: ls\n    match: [{labels: {tier: ls}}]\n"))
    ev = evaluate(e, node(None))
    assert ev.skipped == () and groups(ev) == {}


# ---------------------------------------------------------------- CLOSIDs


def test_groups_beyond_num_closids_are_dropped_and_named() -> None:
    """num_closids 3: CLOSID 0 is the root, two groups fit; the third (in request order: rules,
    then class declarations) is dropped with its reason, and the rest still apply."""
    rules = RULE_LS + "  - name: lsr-cache\n    then: {setResctrl: {class: lsr, l3Percent: [0, 50]}}\n"
    ev = evaluate(engine(rules), node(num_closids=3))
    assert set(groups(ev)) == {"ls", "lsr"}
    [note] = ev.skipped
    assert note.rule == "resctrl"  # the dropped group was declared by a class, not a rule
    assert note.reason == (
        "resctrl group reclaim dropped (class be): no CLOSID left: num_closids=3, CLOSID 0 is the root "
        "group, 2 taken by ls, lsr; merge classes into fewer groups or free CLOSIDs (CDP halves them)"
    )


def test_foreign_groups_count_against_closids_and_rules_are_named() -> None:
    info = replace(INTEL, num_closids=3, groups=MappingProxyType({"": "", "ops-team": "L3:0=7ff;1=7ff"}))
    ev = evaluate(engine(RULE_LS), node(info))
    assert set(groups(ev)) == {"ls"}
    [note] = ev.skipped
    assert note.rule == "resctrl"
    assert "1 held by groups qosd does not manage (ops-team)" in note.reason
    rules = "rules:\n  - name: lsr-cache\n    then: {setResctrl: {class: lsr, l3Percent: [0, 50]}}\n"
    info2 = replace(info, groups=MappingProxyType({"ops-team": "", "reclaim": ""}))
    ev = evaluate(engine(rules), node(info2))
    # reclaim already exists and keeps its CLOSID; the new lsr group from the rule does not fit.
    assert set(groups(ev)) == {"reclaim"}
    assert [s.rule for s in ev.skipped] == ["lsr-cache"]
    assert ev.skipped[0].reason.startswith(
        "resctrl group lsr dropped (rule lsr-cache (class lsr)): no CLOSID"
    )


# ---------------------------------------------------------------- precedence


def test_rule_for_a_class_wins_over_its_declaration_field_by_field() -> None:
    """The rule names class be only: it retunes be's declared group reclaim. L3 0-10% of 11 ways:
    ⌈1.1⌉ = 2 ways -> 3; mbPercent is not set by the rule, so the class's 100 stays."""
    rules = "rules:\n  - name: squeeze-be\n    then: {setResctrl: {class: be, l3Percent: [0, 10]}}\n"
    ev = evaluate(engine(rules), node())
    got = groups(ev)
    assert set(got) == {"reclaim"}
    reclaim = got["reclaim"]
    assert dict(reclaim.schemata) == {"L3": "0=3;1=3", "MB": "0=100;1=100"}
    assert reclaim.pods == ("ns/be-1", "ns/be-2")
    assert reclaim.provenance.rule == "squeeze-be"
    notes = reclaim.provenance.inputs["notes"]
    assert "squeeze-be keeps mbPercent of class be" in notes
    assert "overrides class be's declaration (l3Percent [0, 30], mbPercent 100)" in notes
    assert ev.skipped == ()


def test_rule_for_a_group_keeps_the_declaring_class_pods() -> None:
    """A rule that names the group only (no class) still wins; the class's pods stay in it."""
    rules = "rules:\n  - name: reclaim-mb\n    then: {setResctrl: {group: reclaim, mbPercent: 20}}\n"
    reclaim = groups(evaluate(engine(rules), node()))["reclaim"]
    assert dict(reclaim.schemata) == {"L3": "0=f;1=f", "MB": "0=20;1=20"}
    assert reclaim.pods == ("ns/be-1", "ns/be-2") and reclaim.provenance.rule == "reclaim-mb"


def test_rule_moving_a_class_elsewhere_frees_the_declared_group() -> None:
    rules = "rules:\n  - name: jail\n    then: {setResctrl: {class: be, group: jail, l3Percent: [0, 10]}}\n"
    got = groups(evaluate(engine(rules), node()))
    assert set(got) == {"jail"}  # an empty reclaim group would only spend a CLOSID
    assert got["jail"].pods == ("ns/be-1", "ns/be-2")
    assert (
        "class be's pods moved here from its declared group reclaim" in got["jail"].provenance.inputs["notes"]
    )


def test_a_class_joins_one_group_only() -> None:
    rules = (
        "rules:\n"
        "  - name: first\n    then: {setResctrl: {class: ls, group: a, l3Percent: [0, 50]}}\n"
        "  - name: second\n    then: {setResctrl: {class: ls, group: b, l3Percent: [50, 100]}}\n"
    )
    ev = evaluate(engine(rules), node())
    got = groups(ev)
    assert got["a"].pods == ("ns/ls-1",) and got["b"].pods == ()
    assert [s.rule for s in ev.skipped] == ["second"]
    assert "class ls's pods stay in resctrl group a" in ev.skipped[0].reason
    # Without resctrl the tick still carries one note only.
    assert [s.rule for s in evaluate(engine(rules), node(None)).skipped] == ["resctrl"]


def test_two_rules_disagreeing_on_one_group_first_wins() -> None:
    rules = (
        "rules:\n"
        "  - name: first\n    then: {setResctrl: {group: shared, l3Percent: [0, 50]}}\n"
        "  - name: second\n    then: {setResctrl: {group: shared, l3Percent: [0, 60]}}\n"
    )
    ev = evaluate(engine(rules), node())
    assert groups(ev)["shared"].schemata["L3"] == "0=3f;1=3f"  # ⌈5.5⌉ = 6 ways
    assert [s.rule for s in ev.skipped] == ["second"]
    assert "conflicts with rule first" in ev.skipped[0].reason


# ---------------------------------------------------------------- through the planner


def test_first_tick_creates_and_a_steady_tick_only_moves_tasks() -> None:
    e = engine()
    first = run_tick(e, node(), EngineState(), Guards()).plan.operations
    assert [op for op in first if not isinstance(op, AssignTasks) and op.rule == "resctrl"] == [
        CreateResctrlGroup("reclaim", "resctrl"),
        WriteSchemata("reclaim", "L3:0=f;1=f", "resctrl"),
        WriteSchemata("reclaim", "MB:0=100;1=100", "resctrl"),
    ]
    # What the kernel reads back: indented lines, masks zero-padded to the cbm width.
    synced = MappingProxyType({**INTEL.groups, "reclaim": "    L3:0=00f;1=00f\n    MB:0=100;1=100\n"})
    steady = run_tick(e, node(groups=synced), EngineState(), Guards()).plan.operations
    resctrl_ops = [op for op in steady if op.kind in ("createResctrlGroup", "writeSchemata", "assignTasks")]
    assert resctrl_ops == [
        AssignTasks("reclaim", ("kubepods/podbe-1/main", "kubepods/podbe-2/main"), "resctrl")
    ]


def test_audit_rule_is_held_by_the_planner() -> None:
    rules = "rules:\n  - name: ls-cache\n    mode: audit\n    then: {setResctrl: {class: ls, l3Percent: [10, 50]}}\n"
    result = run_tick(engine(rules), node(), EngineState(), Guards())
    assert [h.reason for h in result.plan.held if h.intent.target == "resctrl/ls"] == [
        "audit mode: reported, not executed"
    ]
    assert not [op for op in result.plan.operations if getattr(op, "group", None) == "ls"]


# ---------------------------------------------------------------- caching


def test_group_plan_is_computed_once_for_steady_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = resctrl_step.plan_groups

    def counting(*args: Any, **kw: Any) -> Any:
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(resctrl_step, "plan_groups", counting)
    e = engine(RULE_LS)
    evaluate(e, node())
    plan = e.resctrl_step.last_plan
    assert plan is not None and len(calls) == 1
    # Same inputs; pods coming and going do not change the masks either.
    evaluate(e, node())
    evaluate(e, node(pods=PODS[:2]))
    assert e.resctrl_step.last_plan is plan and len(calls) == 1
    assert groups(evaluate(e, node(pods=PODS[:2])))["ls"].pods == ()  # members are re-listed
    # Other capabilities (20 ways) are other masks.
    evaluate(e, node(cbm_mask="fffff"))
    assert e.resctrl_step.last_plan is not plan and len(calls) == 2
    assert e.resctrl_step.last_plan.by_name["reclaim"].l3 is not None
    assert e.resctrl_step.last_plan.by_name["reclaim"].l3.mask == "3f"
