"""taint, condition and notify: node-level signals while a rule holds."""

from __future__ import annotations

from types import MappingProxyType

from engine.evaluate.context import ActionContext
from engine.model.intents import NodeIntent


def node_signal(ctx: ActionContext, kind: str) -> bool:
    """Taints and conditions hold while the rule is latched; an Event is sent when an item first
    matches (a NUMA node newly under pressure while another stays latched is news too)."""
    if kind == "notify" and not ctx.newly_matched:
        return False
    ctx.tick.intents.append(NodeIntent(kind, MappingProxyType(dict(ctx.params)), ctx.node_provenance()))
    return True
