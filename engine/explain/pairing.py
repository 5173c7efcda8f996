"""What became of each intent: the reason the planner held it back, and what the adapters reported for
an eviction (audit records carry the results; ``qosd eval`` and ``simulate`` only plan)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


# The operation an intent of each kind becomes, and the fields that say it is that intent's
# (the rule is compared too). Evictions pair by uid (evict_results).
_OPERATION_OF: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "cgroup": ("writeCgroup", (("path", "path"), ("file", "file"), ("value", "value"))),
    "taint": ("setNodeTaint", (("key", "key"), ("effect", "effect"))),
    "condition": ("setNodeCondition", (("type", "type"),)),
    "notify": ("emitEvent", (("reason", "reason"),)),
    "publish": ("publishNodeResource", (("resource", "name"),)),
}


def intent_result(doc: Mapping[str, Any], intent: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """What the adapter reported for the operation ``intent`` became, in an audit record; None when
    the document holds no results or the intent became no operation (held, or already in place)."""
    kind = str(intent.get("kind"))
    if kind == "evict":
        return (evict_results(doc) or {}).get(str(intent.get("uid")))
    shape = _OPERATION_OF.get(kind)
    if shape is None or "results" not in doc:
        return None
    op_kind, fields = shape
    rule = (intent.get("provenance") or {}).get("rule")
    results: Sequence[Mapping[str, Any]] = doc.get("results") or ()
    for r in results:
        op = r.get("operation") or {}
        if (
            op.get("kind") == op_kind
            and op.get("rule") == rule
            and all(op.get(o) == intent.get(i) for i, o in fields if intent.get(i) is not None)
        ):
            return r
    return None


NOT_DONE = frozenset({"failed", "deferred", "skipped", "vanished"})


def not_done(result: Mapping[str, Any] | None) -> str | None:
    """Why an operation was not carried out (``skipped: standalone mode: no Kubernetes API``), or
    None when it was (or nothing was recorded)."""
    if result is None or str(result.get("status")) not in NOT_DONE:
        return None
    why = result.get("error") or result.get("detail") or "no reason recorded"
    return f"{result.get('status')}: {why}"


def outcome(
    held: str | None, recorded: bool, result: Mapping[str, Any] | None
) -> tuple[str, str]:
    """What became of one decision, as (form, what to add after the sentence). The form is
    ``would`` (the planner held it), ``chose`` (a plan: ``qosd eval``/``simulate``, or an audit
    record without a result for it), ``not`` (the adapter refused or failed), ``kept`` (the value
    was already in place) or ``done`` (performed). Every decision kind words its sentence from it,
    so none says more than happened."""
    if held is not None:
        return "would", f" Held: {held}."
    if not recorded:
        return "chose", ""
    if result is None:
        return "chose", " No operation result was recorded for it."
    refused = not_done(result)
    if refused is not None:
        return "not", f" Not done ({refused})."
    if result.get("status") == "unchanged":
        return "kept", ""
    return "done", ""
