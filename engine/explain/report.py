"""The output of ``qosd explain``: a text block per tick (its header, then a line per decision), or the
same sentences as data (``kind: Explanation``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from engine.explain.decisions import Sentence
from engine.explain.provenance import short_hash
from engine.explain.reader import Tick
from engine.model.units import num
from engine.resources import API_VERSION


def tick_header(doc: Mapping[str, Any]) -> str:
    t = float(doc.get("time") or 0.0)
    try:
        when = datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        when = "?"
    policy = doc.get("policy") or {}
    counts = (
        f"{len(doc.get('intents') or ())} intent(s), {len(doc.get('operations') or ())} operation(s), "
        f"{len(doc.get('held') or ())} held, {len(doc.get('skipped') or ())} skipped"
    )
    fired = ", ".join(doc.get("fired") or ()) or "none"
    return (
        f"Tick at {when} (t={num(t)}), policy {short_hash(policy.get('hash'))} generation "
        f"{policy.get('generation')}: {counts}; rules fired: {fired}."
    )


def format_text(results: Sequence[tuple[Tick, list[Sentence]]], rule: str | None, target: str | None) -> str:
    if not results and rule is None and target is None:
        return "This file holds no per-tick Evaluation documents: there is nothing to explain.\n"
    if not results:
        what = " and ".join(
            x for x in (f"rule {rule}" if rule else "", f"target {target}" if target else "") if x
        )
        return f"No decision in this file involves {what}.\n"
    blocks = []
    for tick, sentences in results:
        lines = [tick_header(tick.doc)]
        if len(results) > 1 or tick.origin.count(":"):
            lines[0] = f"[{tick.origin}] " + lines[0]
        lines += [f"- {s.text}" for s in sentences] or [
            "- Nothing to do: no rule acted and none was skipped."
        ]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def format_json(results: Sequence[tuple[Tick, list[Sentence]]]) -> str:
    return json.dumps(
        {
            "apiVersion": API_VERSION,
            "kind": "Explanation",
            "ticks": [
                {
                    "origin": tick.origin,
                    "time": tick.doc.get("time"),
                    "policy": tick.doc.get("policy"),
                    "summary": tick_header(tick.doc),
                    "decisions": [s.to_dict() for s in sentences],
                }
                for tick, sentences in results
            ],
        },
        indent=2,
    )
