"""``qosd eval``: one facts snapshot through the one tick (engine.tick.run_tick), printed as a table
or as an Evaluation document; and the ``--state`` file it carries timers and cooldowns in, whose faults
are located at their line:col."""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
from pathlib import Path
from typing import Any

from engine.config.command import not_a_file
from engine.config.errors import Location, PolicyError, Problem, UsageError
from engine.config.load import MAX_DEPTH, JsonPath, json_brackets, json_path, parse_documents
from engine.config.pipeline import PROFILE_LABEL, build_policy, load_documents
from engine.evaluate.engine import Engine
from engine.evaluate.state import CorruptState, EngineState, decode_state_json, state_from_document
from engine.output import format_table
from engine.plan.planner import Guards
from engine.sources.snapshot_file import load_snapshot
from engine.tick import run_tick

EXIT_OK = 0


def cmd_eval(args: argparse.Namespace) -> int:
    if not args.facts.is_file():
        raise UsageError(f"facts file {args.facts} {not_a_file(args.facts)}")
    snapshot = load_snapshot(args.facts)
    node = snapshot.node.with_labels({PROFILE_LABEL: args.profile}) if args.profile else snapshot.node
    policy = build_policy(load_documents(args.rules, builtin=not args.no_builtin), node)
    state = _eval_state(args.state) if args.state else EngineState()
    engine = Engine(policy, backend=args.backend)
    try:
        result = run_tick(
            engine, snapshot, state, Guards(dry_run=args.dry_run, eviction_burst=args.eviction_burst)
        )
    finally:
        engine.backend.close()
    if args.output == "json":
        print(
            json.dumps(
                {
                    "apiVersion": "qosd.io/v1alpha1",
                    "kind": "Evaluation",
                    **result.to_dict(),
                    "state": result.state.to_dict(),
                },
                indent=2,
                default=str,
            )
        )
    else:
        sys.stdout.write(format_table(result))
    return EXIT_OK


def _state_fault_position(text: str, reason: str) -> tuple[int, int]:
    """line:col for a state fault the JSON decoder gives no position for: the first NaN/Infinity
    token, the first bracket nested deeper than a state goes, else the document's first value."""
    index = -1
    if "NaN" in reason or "Infinity" in reason:
        token = re.search(r"-?Infinity|NaN", text)
        index = token.start() if token else -1
    elif "nested too deeply" in reason:
        index = next((i for i, ch, depth in json_brackets(text) if ch in "[{" and depth > MAX_DEPTH), -1)
    if index < 0:
        index = len(text) - len(text.lstrip())
    before = text[:index]
    return before.count("\n") + 1, index - (before.rfind("\n") + 1) + 1


STATE_HINT = (
    "--state takes a file `qosd run --state-file` wrote, an Evaluation document `qosd eval` printed "
    "(JSON or YAML; its `state` is read), or that `state` object alone (schemas/state.schema.json)"
)


def _decoded(data: bytes, text: str, source: str) -> Any:
    """JSON first (what ``qosd run`` and ``qosd eval --output json`` write, with the state file's
    limits); a document that does not start as JSON is read as YAML (an Evaluation printed as YAML)."""
    if text.lstrip()[:1] in ("{", "[", ""):
        return decode_state_json(data)
    try:
        return decode_state_json(data)
    except CorruptState:
        docs = parse_documents(text, source)  # PolicyError, located, when it is no YAML either
        if len(docs) != 1:
            raise CorruptState(f"{len(docs)} YAML documents; a state file holds one") from None
        return docs[0].data


def _eval_state(path: Path) -> EngineState:
    """The state ``--state`` names; a file that is not one is invalid input (exit 1), located at the
    broken JSON's line:col or, for a value the schema refuses, at that value.

    A whole Evaluation document (what ``qosd eval`` prints) is read for its ``state``: a timer or
    counter carried from one eval to the next must never restart silently because the user passed
    the document rather than the object inside it."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"--state {path}: {exc.strerror}") from None
    text = data.decode("utf-8", errors="replace")
    prefix: JsonPath = ()
    try:
        doc = _decoded(data, text, str(path))
        if isinstance(doc, dict) and doc.get("kind") == "Evaluation":
            if not isinstance(doc.get("state"), dict):
                raise CorruptState(
                    "an Evaluation document without its `state` object (printed by this qosd's eval)",
                    path=("kind",),
                )
            prefix, doc = ("state",), doc["state"]
        return state_from_document(doc)
    except CorruptState as exc:
        full = (*prefix, *exc.path)
        where = Location(str(path), exc.line, exc.column, json_path(full))
        if not exc.line:
            if exc.path or prefix:  # a value the schema refused: JSON is YAML, whose marks give its line:col
                with contextlib.suppress(PolicyError, ValueError):
                    docs = parse_documents(text, str(path))
                    if docs:
                        where = docs[0].locate(full)
            if not where.line:
                where = Location(str(path), *_state_fault_position(text, str(exc)), json_path(full))
        message = str(exc)
        if prefix and message.startswith("$"):
            message = "$.state" + message[1:]
        raise PolicyError([Problem(where, f"not an engine state: {message}", hint=STATE_HINT)]) from None

