"""taint, condition and notify: node-level signals while a rule holds."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from engine.evaluate.context import ActionContext
from engine.model.intents import NodeIntent


def node_signal(ctx: ActionContext, kind: str) -> bool:
    """Taints and conditions hold while the rule is latched; an Event is sent when an item first
    matches (a NUMA node newly under pressure while another stays latched is news too)."""
    if kind == "notify" and not ctx.newly_matched:
        return False
    provenance = ctx.node_provenance(_pressure_terms(ctx))
    ctx.tick.intents.append(NodeIntent(kind, MappingProxyType(dict(ctx.params)), provenance))
    return True


def _pressure_terms(ctx: ActionContext) -> Mapping[str, Any] | None:
    """The engine-computed pressure decision a signal's rule tested (system memory pressure, the
    shared-pool load rings), so a taint says why as an eviction does."""
    env, found = ctx.env, ctx.tick.pressure_inputs
    terms: dict[str, Any] = {}
    if ctx.name in env.system_pressure_rules and "node" in found:
        terms["systemMemoryPressure"] = dict(found["node"])
    if ctx.name in env.pool_load_rules and "pool_load" in found:
        terms["poolLoad"] = dict(found["pool_load"])
    return terms or None
