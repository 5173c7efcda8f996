"""One tick's decisions as sentences, in the record's order, filtered by rule or target: each intent in
the wording of its kind, then evictions that ended after their tick, skipped rules and workload issues."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.explain.cgroup import explain_cgroup
from engine.explain.evict import explain_evict, explain_finished
from engine.explain.node import explain_node_intent
from engine.explain.pairing import evict_results, held_reasons, intent_result
from engine.explain.reader import Tick
from engine.model.intents import step_description


@dataclass(frozen=True)
class Sentence:
    """One explained decision: the words, plus what filters and JSON output need."""

    kind: str  # evict, taint, publish, ..., skipped, workloadIssue
    rule: str | None
    target: str | None
    text: str
    held: str | None = None
    audit: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "rule": self.rule,
            "target": self.target,
            "held": self.held,
            "audit": self.audit,
            "text": self.text,
        }


def explain_tick(
    doc: Mapping[str, Any], rule: str | None = None, target: str | None = None
) -> list[Sentence]:
    """Every decision of one Evaluation, as sentences, optionally only those of one rule or target."""
    intents: list[Mapping[str, Any]] = list(doc.get("intents") or ())
    reasons = held_reasons(doc)
    rounds: dict[tuple[Any, Any], list[Mapping[str, Any]]] = {}
    for intent in intents:
        if intent.get("kind") == "evict":
            p = intent.get("provenance") or {}
            rounds.setdefault((p.get("rule"), p.get("item")), []).append(intent)
    results = evict_results(doc)
    out: list[Sentence] = []
    for intent, held in zip(intents, reasons, strict=True):
        p = intent.get("provenance") or {}
        name = str(p.get("rule"))
        tgt = str(intent.get("target"))
        if rule is not None and name != rule:
            continue
        if target is not None and not _target_matches(target, intent):
            continue
        recorded = results is not None
        result = intent_result(doc, intent) if recorded else None
        if intent.get("kind") == "evict":
            text = explain_evict(intent, held, rounds[(p.get("rule"), p.get("item"))], result, recorded)
        elif intent.get("kind") == "cgroup":
            text = explain_cgroup(intent, held, doc.get("operations") or (), result, recorded)
        else:
            text = explain_node_intent(intent, held, result, recorded)
        out.append(Sentence(str(intent.get("kind")), name, tgt, text, held, p.get("mode") == "audit"))
    decided = {str(i.get("uid")) for i in intents if i.get("kind") == "evict"}
    for uid, r in (results or {}).items():
        op = r.get("operation") or {}
        who = f"{op.get('namespace')}/{op.get('name')}"
        if uid in decided or (rule is not None and op.get("rule") != rule):
            continue
        if target is not None and target not in (who, uid, str(op.get("name"))):
            continue
        out.append(Sentence("evict", op.get("rule"), who, explain_finished(r)))
    if target is None:
        for s in doc.get("skipped") or ():
            if rule is None or s.get("rule") == rule:
                step = step_description(str(s.get("rule")))
                who = f"by {step}" if step is not None else f"rule {s.get('rule')}"
                out.append(Sentence("skipped", s.get("rule"), None, f"Skipped {who}: {s.get('reason')}."))
    if rule is None:
        for w in doc.get("workloadIssues") or ():
            if target is not None and target not in (
                w.get("name"),
                w.get("uid"),
                str(w.get("name")).split("/")[-1],
            ):
                continue
            errors = "; ".join(str(e) for e in w.get("errors") or ())
            out.append(
                Sentence(
                    "workloadIssue",
                    None,
                    w.get("name"),
                    f"Workload {w.get('name')} (uid {w.get('uid')}, class {w.get('class') or 'none'}) "
                    f"breaks its class or enhancement rules: {errors}.",
                )
            )
    return out


def _target_matches(target: str, intent: Mapping[str, Any]) -> bool:
    """--target names a pod (namespace/name, name or uid), ``node``, or a cgroup path/file."""
    full = str(intent.get("target"))
    pod = intent.get("pod")
    names = {full, intent.get("uid")}
    if intent.get("kind") == "evict":
        names.add(full.split("/")[-1])
    if isinstance(pod, str):
        names |= {pod, pod.split("/")[-1]}
    return target in names


def explain(
    ticks: Iterable[Tick], rule: str | None = None, target: str | None = None
) -> list[tuple[Tick, list[Sentence]]]:
    """Sentences per tick; with a filter, only ticks where the rule or target took part."""
    out = []
    for tick in ticks:
        sentences = explain_tick(tick.doc, rule, target)
        if sentences or (rule is None and target is None):
            out.append((tick, sentences))
    return out
