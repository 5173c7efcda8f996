"""Checking one tick's Evaluation against a step's expectations, with the closest actual entries."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.config.errors import Location
from engine.config.load import JsonPath
from engine.explain.pairing import held_reasons
from engine.ruletest.match import FieldResult, field_results, flow
from engine.ruletest.model import LISTS, PROVENANCE_ALIASES, Expect, Locate, capitalized


@dataclass(frozen=True)
class Closest:
    """An actual entry near an expected one, with the field-by-field comparison."""

    index: int
    label: str
    fields: tuple[FieldResult, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "label": self.label, "fields": [f.to_dict() for f in self.fields]}


@dataclass(frozen=True)
class Failure:
    location: Location
    step: str
    message: str
    notes: tuple[str, ...] = ()
    closest: tuple[Closest, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.location.to_dict(),
            "step": self.step or None,
            "message": self.message,
            "notes": list(self.notes),
            "closest": [c.to_dict() for c in self.closest],
        }


def _views(doc: Mapping[str, Any]) -> dict[str, list[Mapping[str, Any]]]:
    """What each expectation list matches against: the printed entries plus convenience aliases."""
    intents = []
    for intent, held in zip(doc["intents"], held_reasons(doc), strict=True):
        p = intent.get("provenance") or {}
        view = dict(intent)
        for alias in PROVENANCE_ALIASES:
            view.setdefault(alias, p.get(alias))
        view.setdefault("held", held)
        intents.append(view)
    operations = []
    for op in doc["operations"]:
        view = dict(op)
        if "target" not in view:
            view["target"] = f"{op['namespace']}/{op['name']}" if op.get("kind") == "evictPod" else "node"
        operations.append(view)
    return {
        "intents": intents,
        "operations": operations,
        "held": list(doc["held"]),
        "skipped": list(doc["skipped"]),
        "workloadIssues": list(doc["workloadIssues"]),
        "oomPriorities": list(doc.get("oomPriorities") or ()),
    }


def label_of(kind: str, entry: Mapping[str, Any]) -> str:
    """A one-line name of an actual entry, for diffs."""
    if kind == "intents":
        extra = [f"rule {entry.get('rule')}"]
        if "rank" in entry:
            extra.append(f"rank {entry['rank']}")
        if entry.get("mode") == "audit":
            extra.append("audit")
        if entry.get("held"):
            extra.append(f"held: {entry['held']}")
        return f"{entry.get('kind')} {entry.get('target')} ({', '.join(extra)})"
    if kind == "operations":
        what = (
            entry.get("target")
            if entry.get("kind") == "evictPod"
            else entry.get("key") or entry.get("name") or entry.get("type") or entry.get("reason")
        )
        return f"{entry.get('kind')} {what} (rule {entry.get('rule')})"
    if kind == "held":
        return f"{entry.get('kind')} {entry.get('target')} (rule {entry.get('rule')}): {entry.get('reason')}"
    if kind == "skipped":
        return f"{entry.get('rule')}: {entry.get('reason')}"
    if kind == "oomPriorities":
        return f"{entry.get('pod')} ({entry.get('class')}): {entry.get('value')} from {entry.get('source')}"
    return f"{entry.get('name')} ({entry.get('class')}): {'; '.join(entry.get('errors') or ())}"


def _singular(kind: str) -> str:
    return {
        "intents": "intent",
        "operations": "operation",
        "held": "held entry",
        "skipped": "skipped rule",
        "workloadIssues": "workload issue",
        "oomPriorities": "OOM priority",
    }[kind]


def _entry(raw: Any) -> Mapping[str, Any]:
    return {"rule": raw} if isinstance(raw, str) else raw  # skipped/held shorthand: a rule name


def _entry_ok(expected: Mapping[str, Any], actual: Mapping[str, Any]) -> bool:
    return all(r.ok for r in field_results(expected, actual))


def _undecided(expected: Mapping[str, Any], actual: Mapping[str, Any]) -> list[FieldResult]:
    """The fields that cannot be judged when every other field matches: the entry might match, and
    no answer would be honest (a ``gt`` against "max" must not pass a ``notIntents`` quietly)."""
    results = field_results(expected, actual)
    if any(not r.ok and not r.problem for r in results):
        return []
    return [r for r in results if r.problem]


def _cannot_compare(kind: str, j: int, actual: Mapping[str, Any], undecided: list[FieldResult]) -> str:
    what = "; ".join(f"{r.field}: {r.problem}" for r in undecided)
    return f"{_singular(kind)} {j + 1} ({label_of(kind, actual)}) cannot be compared: {what}"


def _assign(ok: list[list[bool]], ordered: bool) -> list[int | None]:
    """Which actual entry each expected entry claims: a maximum one-to-one matching, or with
    ``ordered`` the earliest in-order one (greedy is optimal for a subsequence)."""
    n = len(ok)
    assign: list[int | None] = [None] * n
    if ordered:
        pos = 0
        for i in range(n):
            j = next((j for j in range(pos, len(ok[i])) if ok[i][j]), None)
            if j is not None:
                assign[i] = j
                pos = j + 1
        return assign
    owner: dict[int, int] = {}

    def augment(i: int, seen: set[int]) -> bool:
        for j, good in enumerate(ok[i]):
            if good and j not in seen:
                seen.add(j)
                if j not in owner or augment(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    for i in range(n):
        augment(i, set())
    for j, i in owner.items():
        assign[i] = j
    return assign


def _closest(
    kind: str, expected: Mapping[str, Any], actuals: Sequence[Mapping[str, Any]], limit: int = 2
) -> tuple[Closest, ...]:
    scored = []
    for j, actual in enumerate(actuals):
        results = field_results(expected, actual)
        label = f"{_singular(kind)} {j + 1}: {label_of(kind, actual)}"
        scored.append((sum(r.ok for r in results), -j, Closest(j + 1, label, tuple(results))))
    scored.sort(key=lambda s: (s[0], s[1]), reverse=True)
    best = [c for score, _, c in scored[:limit] if score > 0] or [c for _, _, c in scored[:1]]
    return tuple(best)


def check_tick(expect: Expect, doc: Mapping[str, Any], locate: Locate, step: str) -> list[Failure]:
    """Every way one Evaluation document fails one ``expect`` block."""
    data = expect.data
    ordered = bool(data.get("ordered", False))
    views = _views(doc)
    failures: list[Failure] = []
    for kind in LISTS:
        actuals = views[kind]
        claimed: set[int] = set()
        entries = [_entry(e) for e in data.get(kind) or ()]
        if entries:
            ok = [[_entry_ok(e, a) for a in actuals] for e in entries]
            assign = _assign(ok, ordered)
            claimed = {j for j in assign if j is not None}
            for i, (entry, j) in enumerate(zip(entries, assign, strict=True)):
                if j is not None:
                    continue
                notes = []
                matching = [k for k, good in enumerate(ok[i]) if good]
                if matching and ordered:
                    notes.append(
                        f"it matches {_singular(kind)} {', '.join(str(k + 1) for k in matching)}, "
                        "but not after the entries before it (ordered: true)"
                    )
                elif matching:
                    notes.append(
                        f"it matches {_singular(kind)} {', '.join(str(k + 1) for k in matching)}, "
                        "but another expected entry claims it; each expected entry needs its own actual entry"
                    )
                if not actuals:
                    notes.append(f"there were no {kind} at all")
                for k, actual in enumerate(actuals):
                    undecided = _undecided(entry, actual)
                    if undecided:
                        notes.append(_cannot_compare(kind, k, actual, undecided))
                failures.append(
                    Failure(
                        locate((*expect.path, kind, i), False),
                        step,
                        f"{kind}[{i}]: no {_singular(kind)} matches {flow(entry)}",
                        tuple(notes),
                        () if matching or not actuals else _closest(kind, entry, actuals),
                    )
                )
        for k, raw in enumerate(data.get("not" + capitalized(kind)) or ()):
            forbidden = _entry(raw)
            for j, actual in enumerate(actuals):
                if j in claimed:
                    continue
                where = locate((*expect.path, "not" + capitalized(kind), k), False)
                if _entry_ok(forbidden, actual):
                    failures.append(
                        Failure(
                            where,
                            step,
                            f"not{capitalized(kind)}[{k}]: {_singular(kind)} {j + 1} matches "
                            f"{flow(forbidden)}: {label_of(kind, actual)}",
                        )
                    )
                elif undecided := _undecided(forbidden, actual):
                    failures.append(
                        Failure(
                            where,
                            step,
                            f"not{capitalized(kind)}[{k}]: cannot tell whether {_singular(kind)} {j + 1} "
                            f"matches {flow(forbidden)}",
                            (_cannot_compare(kind, j, actual, undecided),),
                        )
                    )
        if data.get("no" + capitalized(kind)) and actuals:
            failures.append(
                Failure(
                    locate((*expect.path, "no" + capitalized(kind)), True),
                    step,
                    f"expected no {kind}, got {len(actuals)}",
                    tuple(label_of(kind, a) for a in actuals[:5]) + (("...",) if len(actuals) > 5 else ()),
                )
            )
    if "state" in data:
        failures.extend(_check_state(data["state"], doc["state"], locate, (*expect.path, "state"), step))
    fired = list(doc["fired"])
    for k, rule in enumerate(data.get("fired") or ()):
        if rule not in fired:
            why = next((s["reason"] for s in doc["skipped"] if s["rule"] == rule), None)
            failures.append(
                Failure(
                    locate((*expect.path, "fired", k), False),
                    step,
                    f"rule {rule} did not fire" + (f" (skipped: {why})" if why else ""),
                    (f"fired: {', '.join(fired) or 'none'}",),
                )
            )
    for k, rule in enumerate(data.get("notFired") or ()):
        if rule in fired:
            failures.append(
                Failure(
                    locate((*expect.path, "notFired", k), False),
                    step,
                    f"rule {rule} fired, expected it not to",
                )
            )
    return failures


def _check_state(
    expected: Mapping[str, Any], actual: Mapping[str, Any], locate: Locate, path: JsonPath, step: str
) -> list[Failure]:
    """The engine state after the tick (the ``state`` of ``qosd eval --output json``) against an
    expected mapping: the counters and latches an anchor test asserts (a NUMA watermark count, a
    latched rule, an eviction under way), matched field by field like any entry."""
    results = field_results(expected, actual)
    bad = [r for r in results if not r.ok]
    if not bad:
        return []
    return [
        Failure(
            locate((*path, *r.keys), False),
            step,
            f"state.{r.field}: expected {r.expected}, got {r.actual}"
            + (f" ({r.problem})" if r.problem else ""),
        )
        for r in bad
    ]
