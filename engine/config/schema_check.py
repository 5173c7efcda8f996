"""JSON Schema validation of rendered documents, with errors turned into located, human problems.

jsonschema's raw messages ("... is not valid under any of the given schemas") do not help anyone
at 3 a.m.; we descend into the most relevant branch, name the field, suggest the nearest valid
spelling, and point at the key or value in the file.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from functools import cache
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match, relevance

from engine.config.errors import Location, Problem, short
from engine.config.load import JsonPath, json_path
from engine.config.unitcheck import unit_problems
from engine.resources import load_schema

Locator = Callable[[JsonPath, bool], Location]


@cache
def validator(kind: str) -> Draft202012Validator:
    """One validator per schema per process: building it costs more than validating a policy.

    Non-recursive ``$ref``s are inlined first: resolving a reference on every descent is a third of
    the validation time, and the result is the same schema.
    """
    return Draft202012Validator(inline_refs(load_schema(kind)))


def ref_targets(node: Any) -> set[str]:
    """Names of the ``#/$defs/...`` definitions referenced anywhere inside ``node``."""
    found: set[str] = set()
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            found.add(ref.removeprefix("#/$defs/"))
        for value in node.values():
            found |= ref_targets(value)
    elif isinstance(node, list):
        for value in node:
            found |= ref_targets(value)
    return found


def recursive_defs(defs: dict[str, Any]) -> set[str]:
    """Definitions that reach themselves through ``$ref``: they cannot be inlined
    (into a finite CRD, or into the schema validation uses)."""
    edges = {name: ref_targets(body) for name, body in defs.items()}
    recursive: set[str] = set()
    for start in edges:
        seen: set[str] = set()
        todo = list(edges[start])
        while todo:
            name = todo.pop()
            if name == start:
                recursive.add(start)
                break
            if name not in seen:
                seen.add(name)
                todo.extend(edges.get(name, ()))
    return recursive


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``schema`` with every ``#/$defs/`` reference inlined, except recursive ones."""
    defs: dict[str, Any] = schema.get("$defs", {})

    recursive = recursive_defs(defs)

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/") and ref[8:] not in recursive:
                # The definition's own description (e.g. what a duration looks like) is what error
                # messages quote, so it wins over the referring property's description.
                siblings = {k: inline(v) for k, v in node.items() if k != "$ref"}
                return {**siblings, **inline(defs[ref[8:]])}
            return {k: inline(v) for k, v in node.items()}
        if isinstance(node, list):
            return [inline(v) for v in node]
        return node

    out: dict[str, Any] = inline({k: v for k, v in schema.items() if k != "$defs"})
    out["$defs"] = {name: inline(body) for name, body in defs.items() if name in recursive}
    return out


def _leaf_errors(error: ValidationError) -> ValidationError:
    """For oneOf/anyOf failures, the branch error that best explains the problem.

    Branches that fail only because the value has another type (a mapping where a list was allowed)
    say nothing useful; among the rest, the deepest error is the most specific.
    """
    while error.context:
        depth = len(error.absolute_path)
        informative = [
            e
            for e in error.context
            if not (e.validator in ("type", "const", "enum") and len(e.absolute_path) == depth)
        ]
        pool = informative or list(error.context)
        deepest = max(len(e.absolute_path) for e in pool)
        error = best_match([e for e in pool if len(e.absolute_path) == deepest], key=relevance)
    return error


NAMED_SECTIONS = frozenset({"classes", "enhancements", "pools", "rules"})


def _overlay_required(err: ValidationError) -> bool:
    """A missing field inside a named entry: fine in one document, since another may supply it."""
    path = tuple(err.absolute_path)
    return (
        err.validator == "required"
        and len(path) >= 3
        and path[0] == "spec"
        and path[1] in NAMED_SECTIONS
        and "'name' is a required property" not in err.message
    )


def schema_problems(
    data: Any, locate: Locator, kind: str = "policy", partial: list[str] | None = None
) -> list[Problem]:
    """Schema problems of ``data``; when it has none, its quantities and durations out of bounds
    (engine/config/unitcheck.py), so no caller can forget them.

    With ``partial`` (a list), entries may lack required fields other than ``name``, since an overlay
    document sets only what it changes; the JSON paths of such gaps are appended to ``partial`` so the
    caller knows the merged spec must be checked in full.
    """
    problems = validation_problems(validator(kind), data, locate, partial)
    if problems:
        return problems
    # The patterns admit 1e9999999 and 99999999h; the bounds live with the parsers.
    return unit_problems(load_schema(kind), data, locate)


def validation_problems(
    checker: Draft202012Validator, data: Any, locate: Locator, partial: list[str] | None = None
) -> list[Problem]:
    """Located problems from any validator (rule tests, evaluation outputs, traces use their own)."""
    out: list[Problem] = []
    for err in checker.iter_errors(data):
        leaf = _leaf_errors(err)
        if partial is not None and _overlay_required(leaf):
            partial.append(leaf.json_path)
            continue
        if leaf.validator == "additionalProperties" and isinstance(leaf.instance, dict):
            out.extend(_to_problem(leaf, locate, key) for key in _extra_keys(leaf))  # each one
        else:
            out.append(_to_problem(leaf, locate))
    return out


def plain_error(err: ValidationError) -> tuple[JsonPath, str, str]:
    """One schema error (say ``best_match``'s) in the words ``qosd validate`` uses: where (the
    field itself for an unknown one), the message and the hint. For files that are not policies
    (the state file), which have no line numbers to locate by."""
    leaf = _leaf_errors(err)
    keys = _extra_keys(leaf) if leaf.validator == "additionalProperties" else ["?"]
    where: list[JsonPath] = []

    def locate(path: JsonPath, _key: bool) -> Location:
        where.append(path)
        return Location("", path=json_path(path))

    problem = _to_problem(leaf, locate, keys[0])
    return where[0], problem.message, problem.hint


def _extra_keys(err: ValidationError) -> list[str]:
    allowed = (err.schema.get("properties") or {}) if isinstance(err.schema, dict) else {}
    instance = err.instance if isinstance(err.instance, dict) else {}
    return [str(k) for k in instance if k not in allowed] or ["?"]


def refused_paths(data: Any, kind: str = "policy") -> list[JsonPath]:
    """The values of ``data`` its schema refuses, as paths to take out so that the rest can still be
    checked for meaning (engine/config/withheld.py): an unknown field or key itself, the mapping that
    lacks a required field, else the value the deepest error is about. A partial entry (an overlay's
    patch) is not refused, and neither is ``metadata``, which no semantic check reads."""
    out: list[JsonPath] = []
    for err in validator(kind).iter_errors(data):
        leaf = _leaf_errors(err)
        path: JsonPath = tuple(leaf.absolute_path)
        if _overlay_required(leaf) or path[:1] == ("metadata",):
            continue
        if not path and leaf.validator == "required" and "'metadata'" in leaf.message:
            continue
        if leaf.validator == "additionalProperties" and isinstance(leaf.instance, dict):
            out.extend((*path, key) for key in _extra_keys(leaf))
        elif "propertyNames" in leaf.absolute_schema_path:
            out.append((*path, str(leaf.instance)))
        else:
            out.append(path)
    return out


_NUMBERISH = re.compile(r"^\s*[-+]?[0-9]+(\.[0-9]+)?\s*%?\s*$")


def _to_problem(err: ValidationError, locate: Locator, key: str = "?") -> Problem:
    path: JsonPath = tuple(err.absolute_path)
    validator_kw = str(err.validator)
    schema = err.schema if isinstance(err.schema, dict) else {}
    instance = err.instance
    if validator_kw == "additionalProperties" and isinstance(instance, dict):
        allowed = sorted((schema.get("properties") or {}).keys())
        hint = did_you_mean(key, allowed) or (f"allowed fields here: {', '.join(allowed)}" if allowed else "")
        return Problem(locate((*path, key), True), f"unknown field {key!r}", hint)
    if validator_kw == "required":
        missing = re.findall(r"'([^']+)' is a required property", err.message)
        field = missing[0] if missing else "field"
        return Problem(locate(path, True), f"missing required field {field!r}", _required_hint(path, field))
    if validator_kw == "type":
        want = schema.get("type")
        wanted = [str(w) for w in want] if isinstance(want, list) else [str(want)]
        hint = ""
        if isinstance(instance, str) and _NUMBERISH.match(instance) and set(wanted) & {"number", "integer"}:
            number = instance.strip().rstrip("%")
            hint = f"write {number} without quotes: numbers, thresholds above all, are never strings"
        elif set(wanted) & {"number", "integer"} and isinstance(instance, bool):
            hint = "true/false is not a number"
        expected = " or ".join(_TYPE_NAMES.get(w, w) for w in wanted)
        return Problem(locate(path, False), f"expected {expected}, got {describe_value(instance)}", hint)
    if validator_kw in ("enum", "const"):
        options = schema.get("enum") or [schema.get("const")]
        hint = did_you_mean(str(instance), [str(o) for o in options])
        return Problem(
            locate(path, False),
            f"{short(instance)} is not one of {', '.join(map(str, options))}",
            hint,
        )
    names = validator_kw == "pattern" and "propertyNames" in err.absolute_schema_path
    if names and schema.get("description"):
        return Problem(locate((*path, str(instance)), True), f"{instance!r} is not {schema['description']}")
    if names:
        return Problem(
            locate((*path, str(instance)), True),
            f"{instance!r} is neither all/any/not nor a fact name",
            "a condition is {all: [...]}, {any: [...]}, {not: {...}} or {<fact>: {<op>: value}}; "
            "list fact names with `qosd schema facts --names`",
        )
    if validator_kw == "pattern":
        what = schema.get("description") or f"must match {schema.get('pattern')}"
        return Problem(locate(path, False), f"{short(instance)} is not valid here: {what}")
    if validator_kw in ("minProperties", "maxProperties") and isinstance(instance, dict):
        if validator_kw == "maxProperties":
            return Problem(
                locate(path, False),
                f"only one of {', '.join(instance)} may be given here",
                "split them into separate list items",
            )
        return Problem(locate(path, False), "this mapping must not be empty")
    bound = _plain_message(err, schema)
    if bound is not None:
        return Problem(locate(path, False), bound)
    return Problem(locate(path, False), err.message)


# What a JSON Schema type is called in a message: "expected an integer", never "a integer".
_TYPE_NAMES = {
    "string": "a string",
    "number": "a number",
    "integer": "an integer",
    "boolean": "true or false",
    "object": "a mapping",
    "array": "a list",
    "null": "nothing (null)",
}


def describe_value(value: Any) -> str:
    """A value as the user wrote it, named by its kind: ``the string "5"``, ``the number 5``,
    ``a list of 2 items``, so a type error says what was found and not only what was wanted."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"the string {short(value)}"
    if isinstance(value, int | float):
        return f"the number {short(value)}"
    if isinstance(value, list):
        return f"a list of {_items(len(value))}" if value else "an empty list"
    if isinstance(value, dict):
        return f"a mapping ({short(value)})" if value else "an empty mapping"
    return short(value)


def _items(n: int) -> str:
    return f"{n} item{'s' if n != 1 else ''}"


_NUMBER_BOUNDS = {
    "minimum": "{value} is less than the minimum of {limit}",
    "maximum": "{value} is greater than the maximum of {limit}",
    "exclusiveMinimum": "{value} is less than or equal to the minimum of {limit} (it must be greater)",
    "exclusiveMaximum": "{value} is greater than or equal to the maximum of {limit} (it must be less)",
}


def _plain_message(err: ValidationError, schema: dict[str, Any]) -> str | None:
    """jsonschema says "[] should be non-empty" and "... is not valid under any of the given
    schemas"; these say what the bound or the rule is and what was found, in the words of the rest
    of qosd's messages (None: no better words than jsonschema's)."""
    keyword, instance = str(err.validator), err.instance
    limit: Any = err.validator_value
    if keyword in _NUMBER_BOUNDS:
        return _NUMBER_BOUNDS[keyword].format(value=short(instance), limit=limit)
    if keyword == "minItems" and isinstance(instance, list):
        got = f"it has {_items(len(instance))}" if instance else "it is empty"
        return f"this list needs at least {_items(int(limit))}; {got}"
    if keyword == "maxItems" and isinstance(instance, list):
        return f"this list takes at most {_items(int(limit))}; it has {len(instance)}"
    if keyword == "minLength" and isinstance(instance, str):
        if limit == 1:
            return "this string must not be empty"
        return f"{short(instance)} is shorter than {limit} characters"
    if keyword == "maxLength" and isinstance(instance, str):
        return f"{short(instance)} is longer than {limit} characters ({len(instance)})"
    if keyword == "uniqueItems" and isinstance(instance, list):
        twice = next((v for i, v in enumerate(instance) if v in instance[:i]), None)
        return f"{short(twice)} appears more than once in this list"
    if keyword == "dependentRequired" and isinstance(instance, dict) and isinstance(limit, dict):
        for key, needs in limit.items():
            missing = [n for n in needs if key in instance and n not in instance]
            if missing:
                return f"{key!r} needs {' and '.join(map(repr, missing))} beside it"
    if keyword == "format":
        return f"{short(instance)} is not a valid {limit}"
    if keyword == "multipleOf":
        return f"{short(instance)} is not a multiple of {limit}"
    what = f": {schema['description']}" if isinstance(schema.get("description"), str) else ""
    if keyword in ("oneOf", "anyOf"):
        several = keyword == "oneOf" and "is valid under each of" in err.message
        return (
            f"{short(instance)} matches more than one of the forms allowed here{what}"
            if several
            else f"{short(instance)} is none of the forms allowed here{what}"
        )
    if keyword == "not":
        return f"{short(instance)} is not allowed here{what}"
    if keyword == "false":
        return "no value is allowed here"
    return None


def did_you_mean(word: str, options: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else ""


def _required_hint(path: JsonPath, field: str) -> str:
    if field == "name":
        return "every class, enhancement, pool and rule needs a name; entries merge across documents by name"
    if field == "then":
        return "a rule needs at least one action under `then`"
    return ""
