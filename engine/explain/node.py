"""The wording of node-level decisions: taints, node conditions, events, published resources, and any
other intent kind (its parameters as given). The verb says what happened, never more: "Published"
only when the adapter reported it done, "Chose to publish" for a plan (``qosd eval``, ``simulate``),
"Did not publish ... Not done (skipped: standalone mode: ...)" for what an adapter refused."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from engine.explain.pairing import outcome
from engine.explain.provenance import because
from engine.model.units import key_unit, with_unit

# verb in the infinitive -> its past tense
PAST = {"taint": "tainted", "set": "set", "send": "sent", "publish": "published", "withdraw": "withdrew"}


def _phrase(intent: Mapping[str, Any]) -> tuple[str, str]:
    """(verb, the rest) of what the intent asks: ("taint", "the node with k=v:NoSchedule")."""
    kind = str(intent.get("kind"))
    if kind == "taint":
        taint = f"{intent.get('key')}" + (f"={intent['value']}" if intent.get("value") else "")
        return "taint", f"the node with {taint}:{intent.get('effect')}"
    if kind == "condition":
        return "set", f"node condition {intent.get('type')}=True"
    if kind == "notify":
        return "send", f"a {intent.get('severity', 'Warning')} event {intent.get('reason', 'QosdRule')}"
    if kind == "publish":
        resource = intent.get("resource")
        if intent.get("value") is None:
            return "withdraw", f"{resource} ({intent.get('formula')})"
        unit = str(intent.get("unit") or "")
        return (
            "publish",
            f"{resource} = {with_unit(intent.get('value'), unit)} (formula {intent.get('formula')})",
        )
    params = {k: v for k, v in intent.items() if k not in ("kind", "target", "provenance")}
    shown = ", ".join(f"{k}={json.dumps(v)}" for k, v in params.items())
    return "apply", f"{kind} to {intent.get('target')}" + (f" ({shown})" if shown else "")


def explain_node_intent(
    intent: Mapping[str, Any],
    held: str | None,
    result: Mapping[str, Any] | None = None,
    recorded: bool = False,
) -> str:
    p = intent.get("provenance") or {}
    verb, rest = _phrase(intent)
    past = PAST.get(verb, verb + "ed")
    why = because(p)
    form, after = outcome(held, recorded, result)
    what = {
        "would": f"Would have {past} {rest}",
        "chose": f"Chose to {verb} {rest}",
        "not": f"Did not {verb} {rest}",
    }.get(form, f"{past[0].upper()}{past[1:]} {rest}")
    if intent.get("kind") == "publish":
        inputs = p.get("inputs") or {}
        if inputs:
            unit = str(intent.get("unit") or "")
            why += "; inputs: " + ", ".join(
                f"{k} {with_unit(v, key_unit(k, unit))}" for k, v in inputs.items()
            )
    return f"{what} {why}.{after}"
