"""The daemon's audit mode (`qosd run --mode audit`, the kustomize base's first install) in the planner.

The plan is made as in enforce mode (protected classes, the eviction burst, the steady state that
writes nothing all still apply), then only its Events are kept: each eviction enforce mode would
make becomes a WouldEvict Event, and every other intent that would have changed something is held
with the audit reason. Table-driven over every kind of intent the planner turns into a side effect.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest

from engine.model.intents import CgroupIntent, EvictIntent, Intent, NodeIntent, Provenance, ResctrlIntent
from engine.model.operations import EmitEvent
from engine.plan.planner import AUDIT_HELD, Guards, plan
from tests.builders import policy

PROV = Provenance("r", "h", 1, "test.yaml:1:1", "enforce")
POLICY = policy(
    "classes:\n  - {name: be, match: [{labels: {q: be}}]}\n"
    "  - {name: lse, match: [{labels: {q: lse}}], protected: true}\n"
)


def evict(uid: str, cls: str = "be") -> EvictIntent:
    return EvictIntent(uid, "default", f"pod-{uid}", cls, 0, (), 0.0, None, None, PROV)


def node_intent(kind: str, **params: Any) -> NodeIntent:
    return NodeIntent(kind, MappingProxyType(params), PROV)


SIDE_EFFECTS: list[tuple[str, Intent]] = [
    ("cgroup write", CgroupIntent("kubepods/besteffort/poda", "cpu.weight", "2", "default/a", PROV)),
    ("resctrl group", ResctrlIntent("BE", MappingProxyType({"L3": "0=f"}), ("default/a",), ("kubepods/a",), PROV)),
    ("publish", node_intent("publish", resource="example.com/batch-cpu", value=2.0, unit="cores")),
    ("taint", node_intent("taint", key="example.com/pressure", effect="NoSchedule")),
    ("condition", node_intent("condition", type="QosdPressure")),
    ("eviction", evict("u1")),
]


@pytest.mark.parametrize(("what", "intent"), SIDE_EFFECTS, ids=[w for w, _ in SIDE_EFFECTS])
def test_audit_mode_plans_no_side_effect_that_enforce_mode_plans(what: str, intent: Intent) -> None:
    enforce = plan((intent,), POLICY, Guards(), {}, {})
    assert enforce.operations and not enforce.held, f"enforce mode must act on the {what}"
    audit = plan((intent,), POLICY, Guards(audit=True), {}, {})
    assert all(isinstance(op, EmitEvent) for op in audit.operations)
    assert [(h.intent, h.reason) for h in audit.held] == [(intent, AUDIT_HELD)]
    assert audit.evicted == ()


def test_an_eviction_in_audit_mode_is_a_wouldevict_event_naming_the_pod_and_the_rule() -> None:
    audit = plan((evict("u1"),), POLICY, Guards(audit=True), {}, {})
    assert audit.operations == (
        EmitEvent(
            "WouldEvict",
            "audit mode: qosd would evict pod default/pod-u1 (rule r); nothing was evicted",
            "Normal",
            "r",
        ),
    )


def test_audit_mode_keeps_the_rules_own_events() -> None:
    event = node_intent("event", reason="HighMemory", message="node memory above 90%", severity="Warning")
    audit = plan((event,), POLICY, Guards(audit=True), {}, {})
    assert audit.operations == (EmitEvent("HighMemory", "node memory above 90%", "Warning", "r"),)
    assert audit.held == ()


def test_audit_mode_reports_only_what_enforce_mode_would_do() -> None:
    """A protected pod, evictions past the burst and a file already at its value are not
    WouldEvict Events or audit holds: enforce mode would not act on them either."""
    steady = CgroupIntent("kubepods/besteffort/poda", "cpu.weight", "2", "default/a", PROV)
    intents = (steady, evict("p", cls="lse"), evict("u1"), evict("u2"))
    observed = {"kubepods/besteffort/poda": {"cpu.weight": "2"}}
    audit = plan(intents, POLICY, Guards(audit=True, eviction_burst=1), observed, {})
    assert [op.message.split(" (")[0] for op in audit.operations if isinstance(op, EmitEvent)] == [
        "audit mode: qosd would evict pod default/pod-u1"
    ]
    reasons = {getattr(h.intent, "uid", "steady"): h.reason for h in audit.held}
    assert reasons == {
        "p": "class lse is protected",
        "u1": AUDIT_HELD,
        "u2": "eviction burst of 1 per tick reached",
    }
