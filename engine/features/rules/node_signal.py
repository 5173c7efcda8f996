"""taint, condition and notify: node-level signals while a rule holds."""

from __future__ import annotations

from types import MappingProxyType

from engine.evaluate.context import ActionContext
from engine.model.intents import NodeIntent


def node_signal(ctx: ActionContext, kind: str) -> bool:
    """Taints and conditions hold while the rule is latched; an Event is sent when it first fires."""
    _, _, _, latched = ctx.matched[0]
    if kind == "notify" and latched:
        return False
    ctx.tick.intents.append(NodeIntent(kind, MappingProxyType(dict(ctx.params)), ctx.first_provenance()))
    return True
