"""The wording of an eviction: the verb (what the adapter reported, never more), the victim's rank and
ranking keys, and the release arithmetic of its round."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from engine.explain.provenance import because
from engine.model.units import key_unit, num, resource_amount, with_unit

# Ranking keys that are amounts of the ranking's ``resource`` (Katalyst's overcommit ranking by
# request of reclaimed_millicpu: milli-cores).
AMOUNT_KEYS = frozenset({"request", "usage", "limit"})


def _ranking_text(ranking: Mapping[str, Any]) -> str:
    resource = str(ranking.get("resource") or "")
    parts = []
    for key, value in ranking.items():
        if key == "class":
            parts.append(f"class eviction priority {num(value)}")
        elif key == "name":
            parts.append(f"name {value}")
        elif key in AMOUNT_KEYS and resource and isinstance(value, int | float):
            parts.append(f"{key} {resource_amount(value, resource)}")
        else:
            parts.append(f"{key} {with_unit(value, key_unit(key))}")
    return ", ".join(parts)


def _release_text(intent: Mapping[str, Any], round_intents: Sequence[Mapping[str, Any]]) -> str:
    release = intent.get("release")
    if not isinstance(release, Mapping):
        return "it has no release target, so it evicts its top-ranked candidates up to its per-round limit"
    resource = str(release.get("resource"))

    def amount(value: Any) -> str:
        return resource_amount(float(value), resource)

    formula = str(release.get("formula"))
    target = float(release.get("target") or 0.0)
    m = re.fullmatch(r"(\S+) \* \((\S+) - (\S+)\) / 100", formula)
    head = f"it releases down to {m.group(3)}%: " if m else "it releases "
    pending = float(release.get("pendingCredit") or 0.0)
    pending_text = "0" if pending == 0 else amount(pending)
    rank = int(intent.get("rank") or 0)
    so_far = pending + sum(
        float(i.get("credit") or 0.0) for i in round_intents if int(i.get("rank") or 0) <= rank
    )
    text = (
        f"{head}{formula} = {amount(target)}, {pending_text} already pending; "
        f"this eviction brings released to {amount(so_far)}"
    )
    last = rank == max(int(i.get("rank") or 0) for i in round_intents)
    if last:
        text += " (target met)" if so_far >= target else " (target not met: no eligible candidate left)"
    return text


def _evict_verb(held: str | None, result: Mapping[str, Any] | None, recorded: bool) -> tuple[str, str]:
    """(verb, what followed) of an evict intent: "Evicted" only when the adapter reported it done
    (the API accepted the Eviction; standalone: the processes are gone)."""
    if held is not None:
        return "Would have evicted", ""
    if not recorded:
        return "Chose to evict", ""
    if result is None:
        return "Chose to evict", " No operation result was recorded for it."
    status = str(result.get("status"))
    detail = result.get("detail") or result.get("error") or ""
    if status == "applied":
        return "Evicted", ""
    if status == "started":
        return "Started evicting", f" In progress: {detail}."
    if status == "unchanged":
        return "Chose to evict", f" Nothing to do: {detail}."
    return "Did not evict", f" Not done ({status}): {detail}."


def explain_finished(result: Mapping[str, Any]) -> str:
    """An eviction an earlier tick started, now ended (its intent is in that tick's record)."""
    op = result.get("operation") or {}
    who = f"{op.get('namespace')}/{op.get('name')} (rule {op.get('rule')}, started in an earlier tick)"
    if result.get("status") == "applied":
        return f"Evicted {who}: {result.get('detail')}."
    why = result.get("error") or result.get("detail")
    return f"Did not evict {who}: {result.get('status')}: {why}."


def explain_evict(
    intent: Mapping[str, Any],
    held: str | None,
    round_intents: Sequence[Mapping[str, Any]],
    result: Mapping[str, Any] | None = None,
    recorded: bool = False,
) -> str:
    """``recorded``: the document holds the adapters' results (an audit log); ``result`` is the one
    of this intent's operation."""
    p = intent.get("provenance") or {}
    inputs = p.get("inputs") or {}
    verb, after = _evict_verb(held, result, recorded)
    details = [f"class {intent.get('class') or 'none'}"]
    rank = f"rank {intent.get('rank')}"
    if isinstance(inputs.get("candidates"), int):
        rank += f" of {inputs['candidates']} eligible"
    ranking = intent.get("ranking") or {}
    if ranking:
        rank += " by " + _ranking_text(ranking)
    details.append(rank)
    grace = intent.get("gracePeriodSeconds")
    if isinstance(grace, int):
        details.append("the pod's own grace period" if grace < 0 else f"grace period {grace}s")
    text = (
        f"{verb} {intent.get('target')} ({', '.join(details)}) {because(p)}; "
        f"{_release_text(intent, round_intents)}."
    )
    if held is not None:
        text += f" Held: {held}."
    return text + after
