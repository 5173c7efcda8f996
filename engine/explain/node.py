"""The wording of node-level decisions: taints, node conditions, events, published resources, and any
other intent kind (its parameters as given)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from engine.explain.provenance import conditions_text, rule_ref
from engine.explain.units import num, with_unit


def explain_node_intent(intent: Mapping[str, Any], held: str | None) -> str:
    p = intent.get("provenance") or {}
    kind = str(intent.get("kind"))
    would = held is not None
    why = f"because {rule_ref(p)} {conditions_text(p.get('conditions') or ())}"
    if kind == "taint":
        taint = f"{intent.get('key')}" + (f"={intent['value']}" if intent.get("value") else "")
        what = f"{'Would have tainted' if would else 'Tainted'} the node with {taint}:{intent.get('effect')}"
    elif kind == "condition":
        what = f"{'Would have set' if would else 'Set'} node condition {intent.get('type')}=True"
    elif kind == "notify":
        what = (
            f"{'Would have sent' if would else 'Sent'} a {intent.get('severity', 'Warning')} event "
            f"{intent.get('reason', 'QosdRule')}"
        )
    elif kind == "publish":
        value = intent.get("value")
        resource = intent.get("resource")
        if value is None:
            what = f"{'Would have withdrawn' if would else 'Withdrew'} {resource} ({intent.get('formula')})"
        else:
            unit = (
                "bytes" if intent.get("unit") == "bytes" else "cores" if intent.get("unit") == "cores" else ""
            )
            what = (
                f"{'Would have published' if would else 'Published'} {resource} = {with_unit(value, unit)} "
                f"(formula {intent.get('formula')})"
            )
        inputs = p.get("inputs") or {}
        if inputs:
            unit = "bytes" if intent.get("unit") == "bytes" else "cores"
            shown = ", ".join(
                f"{k} {num(v) if 'Percent' in k else with_unit(v, unit)}" for k, v in inputs.items()
            )
            why += f"; inputs: {shown}"
    else:
        params = {k: v for k, v in intent.items() if k not in ("kind", "target", "provenance")}
        shown = ", ".join(f"{k}={json.dumps(v)}" for k, v in params.items())
        what = f"{'Would have applied' if would else 'Applied'} {kind} to {intent.get('target')}" + (
            f" ({shown})" if shown else ""
        )
    text = f"{what} {why}."
    if held is not None:
        text += f" Held: {held}."
    return text
