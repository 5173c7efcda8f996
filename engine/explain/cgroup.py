"""The wording of a cgroup file value: written, planned, not done (and why), or already in place."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engine.explain.pairing import outcome
from engine.explain.provenance import because


def explain_cgroup(
    intent: Mapping[str, Any],
    held: str | None,
    operations: Sequence[Mapping[str, Any]],
    result: Mapping[str, Any] | None = None,
    recorded: bool = False,
) -> str:
    """A cgroup file value. The planner writes only what differs from the observed value, so a
    steady state writes nothing ("Kept"). "Wrote" only when the adapter reported the write applied
    (an audit record); ``qosd eval`` and ``simulate`` plan, so their writes are "Chose to write"."""
    p = intent.get("provenance") or {}
    where = f"{intent.get('path')}/{intent.get('file')}"
    pod = f" (pod {intent['pod']})" if intent.get("pod") else ""
    value = intent.get("value")
    planned = any(
        o.get("kind") == "writeCgroup"
        and (o.get("path"), o.get("file"), o.get("value")) == (intent.get("path"), intent.get("file"), value)
        for o in operations
    )
    form, after = outcome(held, recorded, result) if planned or held is not None else ("kept", "")
    what = {
        "would": f"Would have set {where}{pod} to {value}",
        "chose": f"Chose to write {value} to {where}{pod}",
        "not": f"Did not write {value} to {where}{pod}",
        "done": f"Wrote {value} to {where}{pod}",
    }.get(form, f"Kept {where}{pod} at {value} (it already holds that value; nothing written)")
    text = f"{what} {because(p)}."
    return text + after
