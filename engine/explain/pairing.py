"""What became of each intent: the reason the planner held it back, and what the adapters reported for
an eviction (audit records carry the results; ``qosd eval`` and ``simulate`` only plan)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def held_reasons(doc: Mapping[str, Any]) -> list[str | None]:
    """For each intent of an Evaluation, the reason the planner held it back (None: it became an
    operation). Held entries are listed in intent order, so each pairs with the first intent of the
    same kind, target and rule not yet paired."""
    held = list(doc.get("held") or ())
    used = [False] * len(held)
    out: list[str | None] = []
    for intent in doc.get("intents") or ():
        rule = (intent.get("provenance") or {}).get("rule")
        reason = None
        for j, h in enumerate(held):
            if not used[j] and (h.get("kind"), h.get("target"), h.get("rule")) == (
                intent.get("kind"),
                intent.get("target"),
                rule,
            ):
                used[j] = True
                reason = str(h.get("reason"))
                break
        out.append(reason)
    return out


def evict_results(doc: Mapping[str, Any]) -> dict[str, Mapping[str, Any]] | None:
    """What the adapters reported for each evicted pod uid in an audit record; None for a document
    without results (``qosd eval`` and ``simulate`` plan, they do not execute)."""
    if "results" not in doc:
        return None
    out: dict[str, Mapping[str, Any]] = {}
    for r in doc.get("results") or ():
        op = r.get("operation") or {}
        if op.get("kind") == "evictPod":
            out[str(op.get("uid"))] = r
    return out
