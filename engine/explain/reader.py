"""Reading what explain explains: Evaluation documents from ``qosd eval --output json``, a Simulation's
``ticks`` or an audit log (JSON Lines, one Evaluation per tick), each checked against
schemas/evaluation.schema.json so that garbled or truncated input is a located error (file:line:column
and JSON path), never a traceback or a wrong sentence."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from engine.config.errors import Location, PolicyError, Problem
from engine.config.load import JsonPath, decode_utf8, json_loads_bounded, json_path, parse_documents
from engine.config.schema_check import inline_refs, validation_problems
from engine.resources import data_dir

Locate = Callable[[JsonPath, bool], Location]


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
    nonblank = [i for i, line in enumerate(lines) if line.strip()]
    if not nonblank:
        raise PolicyError([Problem(Location(source, 1, 1), "file is empty: there is nothing to explain")])
    # A file of one line is one document: parsed once, below (`qosd simulate -o json` writes a day
    # as one line of megabytes, and parsing it to ask whether it is a JSON line doubled the read).
    if len(nonblank) > 1 and _is_json_line(lines[nonblank[0]]):
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
