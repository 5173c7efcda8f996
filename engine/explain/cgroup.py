"""The wording of a cgroup file value: written, planned, not done (and why), or already in place."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engine.explain.pairing import not_done
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
    after = ""
    if held is not None:
        what = f"Would have set {where}{pod} to {value}"
    elif not planned:
        what = f"Kept {where}{pod} at {value} (it already holds that value; nothing written)"
    elif not recorded:
        what = f"Chose to write {value} to {where}{pod}"
    elif result is None:
        what = f"Chose to write {value} to {where}{pod}"
        after = " No operation result was recorded for it."
    elif (why := not_done(result)) is not None:
        what = f"Did not write {value} to {where}{pod}"
        after = f" Not done ({why})."
    elif result.get("status") == "unchanged":
        what = f"Kept {where}{pod} at {value} (the kernel already held it; nothing written)"
    else:
        what = f"Wrote {value} to {where}{pod}"
    text = f"{what} {because(p)}."
    if held is not None:
        text += f" Held: {held}."
    return text + after
