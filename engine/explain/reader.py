"""``qosd explain``: why each decision was made, in words, from recorded Evaluation documents.

An on-call engineer holds an eviction, a taint or a published resource and needs to know which rule
did it, where that rule is written, what it saw and what arithmetic chose the victim. Intents carry
all of that as provenance; this module only reads it back. It never re-evaluates anything: the
recorded document is the truth about what happened, even if the rules have changed since.

Input is one of (see docs/outputs.md):

- an Evaluation document (``qosd eval --output json``),
- a Simulation document (``qosd simulate --output json``: ``kind: Simulation``, Evaluations under
  ``ticks``),
- an audit log: JSON Lines, one Evaluation document per tick.

Every document is checked against schemas/evaluation.schema.json first, so garbled or truncated
input is a located error (file:line:column and JSON path), never a traceback or a wrong sentence.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from engine.config.errors import Location, PolicyError, Problem
from engine.config.load import JsonPath, decode_utf8, json_loads_bounded, json_path, parse_documents
from engine.config.schema_check import inline_refs, validation_problems
from engine.model.factnames import registry
from engine.resources import data_dir

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2
API_VERSION = "qosd.io/v1alpha1"

Locate = Callable[[JsonPath, bool], Location]


# ---------------------------------------------------------------- reading Evaluation documents


@cache
def evaluation_validator() -> Draft202012Validator:
    """The validator of schemas/evaluation.schema.json, built once per process."""
    with (data_dir("schemas") / "evaluation.schema.json").open(encoding="utf-8") as fh:
        schema: dict[str, Any] = json.load(fh)
    return Draft202012Validator(inline_refs(schema))


def evaluation_problems(data: Any, locate: Locate) -> list[Problem]:
    """Located schema problems of one Evaluation document (empty when it is well formed)."""
    return validation_problems(evaluation_validator(), data, locate)


@dataclass(frozen=True)
class Tick:
    """One Evaluation document and where it came from (for messages: file:line or ticks[i])."""

    origin: str
    doc: Mapping[str, Any]


def _marks_locator(text: str, source: str, line_offset: int = 0) -> Locate:
    """A locator over JSON text, built only when there is something to locate (parsing with marks
    is far slower than json.loads, and an audit log can be long)."""
    try:
        docs = parse_documents(text, source)
    except PolicyError:
        docs = []

    def locate(path: JsonPath, prefer_key: bool = False) -> Location:
        if not docs:
            return Location(source, line_offset + 1, 1, json_path(path))
        loc = docs[0].locate(path, prefer_key)
        return Location(loc.source, loc.line + line_offset, loc.column, loc.path)

    return locate


def _json_error(source: str, exc: json.JSONDecodeError, line_offset: int = 0) -> Problem:
    return Problem(
        Location(source, exc.lineno + line_offset, exc.colno),
        f"not valid JSON: {exc.msg}",
        "explain reads `qosd eval --output json`, `qosd simulate --output json` or an audit log "
        "(one JSON document per line); was the file cut short or edited by hand?",
    )


KIND_HINTS = {
    "FactsSnapshot": "this is a facts snapshot; evaluate it first: qosd eval --facts FILE --output json",
    "QoSPolicy": "this is a rule document; explain reads what rules decided: qosd eval --rules FILE ...",
    "RuleTest": "this is a rule test suite; run it with qosd test FILE",
}


def _kind_problem(source: str, locate: Locate, doc: Any) -> Problem:
    kind = doc.get("kind") if isinstance(doc, dict) else None
    got = f"kind {kind!r}" if kind is not None else "a document without `kind`"
    return Problem(
        locate(("kind",) if kind is not None else (), kind is not None),
        f"expected an Evaluation or a Simulation document, got {got}",
        KIND_HINTS.get(
            str(kind), "produce one with `qosd eval --output json` or `qosd simulate --output json`"
        ),
    )


def read_ticks(path: Path) -> list[Tick]:
    """Every Evaluation in ``path`` (Evaluation, Simulation or JSONL audit log), validated.

    Raises PolicyError with located problems for unreadable, non-JSON or malformed input.
    """
    source = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PolicyError([Problem(Location(source), f"cannot read file: {exc.strerror or exc}")]) from None
    text = decode_utf8(raw, source)
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        raise PolicyError([Problem(Location(source, 1, 1), "file is empty: there is nothing to explain")])
    if _is_json_line(lines[first]) and sum(1 for line in lines if line.strip()) > 1:
        return _read_jsonl(source, lines)
    try:
        doc = json_loads_bounded(text)
    except json.JSONDecodeError as exc:
        # Not JSON: maybe the same document as YAML, or a file of another kind (a facts snapshot
        # passed by mistake), which deserves a better message than a JSON syntax error.
        try:
            docs = parse_documents(text, source)
        except PolicyError:
            docs = []
        if len(docs) != 1 or not isinstance(docs[0].data, dict) or "kind" not in docs[0].data:
            raise PolicyError([_json_error(source, exc)]) from None
        yaml_doc = docs[0]
        return _ticks_of(source, yaml_doc.data, lambda: yaml_doc.locate, source)
    return _ticks_of(source, doc, lambda: _marks_locator(text, source), source)


def _is_json_line(line: str) -> bool:
    try:
        return isinstance(json_loads_bounded(line), dict)
    except json.JSONDecodeError:
        return False


def _read_jsonl(source: str, lines: Sequence[str]) -> list[Tick]:
    ticks: list[Tick] = []
    problems: list[Problem] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            doc = json_loads_bounded(line)
        except json.JSONDecodeError as exc:
            problems.append(_json_error(source, exc, number - 1))
            continue
        try:
            ticks.extend(
                _ticks_of(
                    source,
                    doc,
                    functools.partial(_marks_locator, line, source, number - 1),
                    f"{source}:{number}",
                )
            )
        except PolicyError as exc:
            problems.extend(exc.problems)
    if problems:
        raise PolicyError(problems)
    return ticks


def _ticks_of(source: str, doc: Any, locator: Callable[[], Locate], origin: str) -> list[Tick]:
    kind = doc.get("kind") if isinstance(doc, dict) else None
    if kind == "Evaluation":

        def locate_doc(p: JsonPath, k: bool = False) -> Location:
            return locator()(p, k)

        problems = evaluation_problems(doc, locate_doc)
        if problems:
            raise PolicyError(problems)
        return [Tick(origin, doc)]
    if kind == "Simulation":
        ticks = doc.get("ticks")
        if not isinstance(ticks, list):
            raise PolicyError(
                [
                    Problem(
                        locator()(("ticks",), True),
                        "a Simulation document lists its Evaluations under `ticks`",
                    )
                ]
            )
        out: list[Tick] = []
        problems = []
        for i, tick in enumerate(ticks):

            def locate(p: JsonPath, k: bool = False, i: int = i) -> Location:
                return locator()(("ticks", i, *p), k)

            if not isinstance(tick, dict) or tick.get("kind") != "Evaluation":
                problems.append(_kind_problem(source, locate, tick))
                continue
            found = evaluation_problems(tick, locate)
            problems.extend(found)
            if not found:
                out.append(Tick(f"{origin} ticks[{i}]", tick))
        if problems:
            raise PolicyError(problems)
        return out
    raise PolicyError([_kind_problem(source, locator(), doc)])


# ---------------------------------------------------------------- pairing intents with the plan


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


# ---------------------------------------------------------------- human units


def human_bytes(value: float) -> str:
    """GiB with one decimal from 1 GiB up, MiB or KiB below; exact bytes under 1 KiB."""
    sign = "-" if value < 0 else ""
    v = abs(float(value))
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if v >= size:
            return f"{sign}{v / size:.1f} {unit}"
    return f"{sign}{num(v)} B"


def num(value: Any) -> str:
    """A number as people write it: 82, 0.5, 9620726743.04 -> '9620726743.04', never 1e+09."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if float(value).is_integer():
        return str(int(value))
    text = f"{value:.12g}"
    if "e" in text:
        text = f"{value:.6f}".rstrip("0").rstrip(".")
    return text if text not in ("", "-0") else "0"


def cores(value: float) -> str:
    return f"{num(round(float(value), 3))} core{'s' if value != 1 else ''}"


def with_unit(value: Any, unit: str) -> str:
    """A value in the unit the fact registry gives it (bytes, cores, seconds; percent stays bare,
    since fact names already say ``_percent``)."""
    if value is None:
        return "(no value)"
    if not isinstance(value, int | float) or isinstance(value, bool):
        return json.dumps(value) if not isinstance(value, str) else value
    if unit == "bytes":
        return human_bytes(value)
    if unit == "cores":
        return cores(value)
    if unit in ("seconds",):
        return f"{num(value)}s"
    return num(value)


def fact_unit(fact: str) -> str:
    ref = registry().resolve(fact)
    return ref.spec.unit if ref is not None else ""


def key_unit(key: str) -> str:
    """Unit of an orderBy key or input name: memory.* are bytes, cpu.* and load are cores."""
    k = key.lstrip("-")
    if k.endswith(("over_request", "over_limit", "Percent", "percent", "ratio")):
        return ""
    if k.startswith("memory.") or k.endswith("bytes"):
        return "bytes"
    if k.startswith("cpu.") or k == "load" or k.endswith("cores"):
        return "cores"
    return ""


def resource_amount(value: float, resource: str) -> str:
    """An amount of an eviction's release resource, in its unit."""
    if resource in ("memory", "batch-memory"):
        return human_bytes(value)
    if resource == "cpu":
        return cores(value)
    if resource == "batch-cpu":
        return cores(value / 1000.0)  # batch-cpu requests are milli-cores
    return num(value)


OP_WORDS = {
    "eq": "=",
    "ne": "!=",
    "lt": "<",
    "lte": "<=",
    "gt": ">",
    "gte": ">=",
    "in": "in",
    "exists": "exists",
}


def observation_text(o: Mapping[str, Any]) -> str:
    """``node.psi.memory.some.avg10 (min over 15s) = 18 >= 15``; one that did not hold reads
    ``... = 9, not >= 15``."""
    fact = str(o.get("fact"))
    unit = fact_unit(fact)
    window = o.get("window")
    label = fact if window is None else f"{fact} ({o.get('agg', 'last')} over {num(window)}s)"
    op = str(o.get("op"))
    if op == "exists":
        wanted = "present" if o.get("threshold") else "absent"
        got = "present" if o.get("observed") is not None else "absent"
        return f"{label} is {got} (wanted {wanted})"
    threshold = o.get("threshold")
    shown = (
        "[" + ", ".join(with_unit(t, unit) for t in threshold) + "]"
        if isinstance(threshold, list)
        else with_unit(threshold, unit)
    )
    relation = f"{OP_WORDS.get(op, op)} {shown}"
    observed = with_unit(o.get("observed"), unit)
    return f"{label} = {observed} {relation}" if o.get("met") else f"{label} = {observed}, not {relation}"


def conditions_text(conditions: Sequence[Mapping[str, Any]]) -> str:
    """What the rule saw: the comparisons that held, then (for any/not) those that did not."""
    if not conditions:
        return "has no condition (it acts every tick)"
    met = [observation_text(o) for o in conditions if o.get("met")]
    unmet = [observation_text(o) for o in conditions if not o.get("met")]
    text = "saw " + " and ".join(met) if met else "fired with none of its comparisons met"
    if unmet:
        text += " (its any/not branches allow what did not hold: " + "; ".join(unmet) + ")"
    return text


def scope_of(conditions: Sequence[Mapping[str, Any]]) -> str:
    for o in conditions:
        prefix = str(o.get("fact", "")).split(".", 1)[0]
        if prefix in ("numa", "pod", "container"):
            return prefix
    return "node"


def short_hash(h: Any) -> str:
    return str(h)[:12]


def rule_ref(p: Mapping[str, Any]) -> str:
    """``rule be-memory-evict (builtin:rules/profiles/koordinator.yaml:284:7, policy 4465e1203873)``."""
    policy = p.get("policy") or {}
    where = f"{p.get('source')}, policy {short_hash(policy.get('hash'))}"
    if policy.get("generation"):
        where += f" generation {policy.get('generation')}"
    text = f"rule {p.get('rule')} ({where})"
    item = p.get("item")
    if item is not None:
        scope = scope_of(p.get("conditions") or ())
        text += {"numa": f" on NUMA node {item}", "pod": f" for pod {item}"}.get(scope, f" for {item}")
    return text


# ---------------------------------------------------------------- sentences


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


def _ranking_text(ranking: Mapping[str, Any]) -> str:
    parts = []
    for key, value in ranking.items():
        if key == "class":
            parts.append(f"class eviction priority {num(value)}")
        elif key == "name":
            parts.append(f"name {value}")
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
        rank += f" of {inputs['candidates']}"
    ranking = intent.get("ranking") or {}
    if ranking:
        rank += " by " + _ranking_text(ranking)
    details.append(rank)
    grace = intent.get("gracePeriodSeconds")
    if isinstance(grace, int):
        details.append("the pod's own grace period" if grace < 0 else f"grace period {grace}s")
    text = (
        f"{verb} {intent.get('target')} ({', '.join(details)}) because {rule_ref(p)} "
        f"{conditions_text(p.get('conditions') or ())}; {_release_text(intent, round_intents)}."
    )
    if held is not None:
        text += f" Held: {held}."
    return text + after


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
        if intent.get("kind") == "evict":
            text = explain_evict(
                intent,
                held,
                rounds[(p.get("rule"), p.get("item"))],
                (results or {}).get(str(intent.get("uid"))),
                results is not None,
            )
        elif intent.get("kind") == "cgroup":
            text = explain_cgroup(intent, held, doc.get("operations") or ())
        else:
            text = explain_node_intent(intent, held)
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
                out.append(
                    Sentence(
                        "skipped", s.get("rule"), None, f"Skipped rule {s.get('rule')}: {s.get('reason')}."
                    )
                )
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


# ---------------------------------------------------------------- command line


def cmd_explain(args: argparse.Namespace) -> int:
    path: Path = args.file
    if not path.exists():
        print(f"qosd: error: {path} does not exist", file=sys.stderr)
        return EXIT_USAGE
    if path.is_dir():
        print(f"qosd: error: {path} is a directory; explain reads one file", file=sys.stderr)
        return EXIT_USAGE
    if not path.is_file():  # /dev/zero would be read forever
        print(f"qosd: error: {path} is not a regular file; explain reads one file", file=sys.stderr)
        return EXIT_USAGE
    try:
        ticks = read_ticks(path)
    except PolicyError as exc:
        if args.output == "json":
            print(exc.to_json())
        else:
            print(exc.format(), file=sys.stderr)
        return EXIT_INVALID
    results = explain(ticks, args.rule, args.target)
    sys.stdout.write(
        format_json(results) + "\n" if args.output == "json" else format_text(results, args.rule, args.target)
    )
    return EXIT_OK


def add_parser(sub: Any) -> None:
    """Register ``explain`` on an argparse subparsers object (engine/cli.py wires it in)."""
    p = sub.add_parser(
        "explain",
        help="say in words why each decision in an eval/simulate JSON output or audit log was made",
        description=(
            "Read an Evaluation (qosd eval --output json), a Simulation (qosd simulate --output json) "
            "or an audit log (JSON Lines of Evaluations) and explain every eviction, taint and "
            "published resource: the rule and where it is written, what it saw, how the victim was "
            "ranked and the release arithmetic. Exit 0 explained, 1 unreadable input, 2 usage error."
        ),
    )
    p.add_argument("file", type=Path, metavar="FILE", help="eval/simulate JSON output or audit log (JSONL)")
    p.add_argument("--rule", metavar="NAME", help="only decisions of this rule")
    p.add_argument(
        "--target", metavar="POD", help="only decisions about this pod (namespace/name, name or uid)"
    )
    p.add_argument("--output", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_explain)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="qosd")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["explain", *(argv if argv is not None else sys.argv[1:])])
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
