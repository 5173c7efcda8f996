"""The wording of a cgroup file value: written this tick, or already in place."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engine.explain.provenance import conditions_text, rule_ref


def explain_cgroup(
    intent: Mapping[str, Any], held: str | None, operations: Sequence[Mapping[str, Any]]
) -> str:
    """A cgroup file value: written this tick, or already in place (the planner writes only what
    differs from the observed value, so a steady state writes nothing)."""
    p = intent.get("provenance") or {}
    where = f"{intent.get('path')}/{intent.get('file')}"
    pod = f" (pod {intent['pod']})" if intent.get("pod") else ""
    value = intent.get("value")
    written = any(
        o.get("kind") == "writeCgroup"
        and (o.get("path"), o.get("file"), o.get("value")) == (intent.get("path"), intent.get("file"), value)
        for o in operations
    )
    if held is not None:
        what = f"Would have set {where}{pod} to {value}"
    elif written:
        what = f"Wrote {value} to {where}{pod}"
    else:
        what = f"Kept {where}{pod} at {value} (it already holds that value; nothing written)"
    text = f"{what} because {rule_ref(p)} {conditions_text(p.get('conditions') or ())}."
    if held is not None:
        text += f" Held: {held}."
    return text
