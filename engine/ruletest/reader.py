"""``qosd test``: rule unit tests in YAML, in the manner of ``kyverno test`` and gator suites.

A platform team changing a threshold wants to know, before rollout, which pods the new rules would
evict on the nodes they know. A ``RuleTest`` suite pins that down: a policy (rule files, with or
without the bundled layer), facts snapshots, and the decisions expected on them. The suite runs the
one tick code path every mode shares (engine.tick.run_tick), so what passes here is what the daemon
decides. Suites over the bundled profiles double as the parity oracle against Katalyst and
Koordinator: each case says which anchor behaviour it shows.

Expectations match by fields: an expected entry lists only the fields it cares about, and matches
any actual entry whose fields agree (nested mappings, dotted paths such as ``release.target``,
quantities such as ``12Gi``, and operators such as ``{approx: 9Gi, tolerance: 1%}``). A failure
prints the expected entry next to the closest actual entries, field by field, with the suite's
file:line:column, because at 3 a.m. nobody wants to diff JSON by eye.

Exit codes: 0 every case passed, 1 a case failed (or a suite is malformed: located errors), 2 usage
error (a path that does not exist, no suites found).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from engine.config.errors import Location, PolicyError, Problem, UsageError, short
from engine.config.load import Document, JsonPath, read_file, yaml_files_under
from engine.config.pipeline import API_VERSION, PROFILE_LABEL, build_policy, load_documents
from engine.config.schema_check import did_you_mean, inline_refs, validation_problems
from engine.config.unitcheck import schema_file, unit_problems
from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState
from engine.explain import held_reasons, human_bytes
from engine.model.facts import snapshot_from_dict
from engine.model.units import parse_duration, parse_quantity
from engine.plan.planner import Guards
from engine.resources import data_dir
from engine.sources.facts_check import facts_problems
from engine.sources.named_files import named_file, shown, unusable
from engine.sources.snapshot_file import read_facts
from engine.tick import TickResult, run_tick

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
SUITE_KIND = "RuleTest"

Locate = Callable[[JsonPath, bool], Location]


# ---------------------------------------------------------------- schemas


def _load_schema(name: str) -> dict[str, Any]:
    """A bundled schema by file name (engine.resources.load_schema knows only policy and facts)."""
    with (data_dir("schemas") / name).open(encoding="utf-8") as fh:
        schema: dict[str, Any] = json.load(fh)
    return schema


@cache
def _suite_validator() -> Draft202012Validator:
    return Draft202012Validator(inline_refs(_load_schema("ruletest.schema.json")))


@cache
def _state_validator() -> Draft202012Validator:
    """Engine state as a suite gives it: the shape of an Evaluation's ``state``, every part optional
    (a case that only pins a cooldown writes just ``lastFired``)."""
    defs = copy.deepcopy(_load_schema("evaluation.schema.json")["$defs"])
    defs["engineState"].pop("required", None)
    return Draft202012Validator(inline_refs({"$defs": defs, "$ref": "#/$defs/engineState"}))


def _problems(validator: Draft202012Validator, data: Any, locate: Locate) -> list[Problem]:
    """Located, human schema problems (the same wording as ``qosd validate``)."""
    return validation_problems(validator, data, locate)


# Aliases an expected entry may use besides the fields printed by `qosd eval --output json`.
INTENT_ALIASES = ("rule", "mode", "item", "source", "conditions", "inputs", "held")


@cache
def field_vocabulary() -> Mapping[str, frozenset[str]]:
    """Top-level field names each expectation list can match on, derived from the schemas so a
    misspelt field in ``notIntents`` is an error instead of a check that can never fail."""
    evaluation = _load_schema("evaluation.schema.json")["$defs"]
    policy = _load_schema("qospolicy.schema.json")["$defs"]

    def props(node: Any) -> set[str]:
        found: set[str] = set()
        if isinstance(node, dict):
            found |= set((node.get("properties") or {}).keys())
            for key in ("allOf", "then"):
                value = node.get(key)
                for sub in value if isinstance(value, list) else [value]:
                    found |= props(sub)
        return found

    action_params = set().union(*(props(v) for k, v in policy.items() if k.endswith("Action")))
    intents = props(evaluation["evictIntent"]) | props(evaluation["actionIntent"]) | action_params
    return {
        "intents": frozenset(intents | set(INTENT_ALIASES)),
        "operations": frozenset(props(evaluation["operation"]) | {"target"}),
        "held": frozenset({"target", "kind", "rule", "reason"}),
        "skipped": frozenset({"rule", "reason"}),
        "workloadIssues": frozenset({"uid", "name", "class", "errors"}),
    }


LISTS = ("intents", "operations", "held", "skipped", "workloadIssues")


def _cap(name: str) -> str:
    return name[0].upper() + name[1:]


# ---------------------------------------------------------------- value matching

OPERATORS = frozenset(
    {"approx", "tolerance", "gt", "gte", "lt", "lte", "contains", "matches", "oneOf", "absent"}
)
DEFAULT_TOLERANCE = "1%"


def is_operator(value: Any) -> bool:
    """An expected mapping made only of operator keys is a matcher, not a nested entry."""
    return isinstance(value, Mapping) and bool(value) and all(k in OPERATORS for k in value)


def _number(value: Any) -> float | None:
    """A number, or a Kubernetes quantity string ("12Gi", "500m"), as a float; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return parse_quantity(value)
        except ValueError:
            return None
    return None


def _close(a: float, b: float) -> bool:
    """Equal up to float noise: JSON round trips and sums of credits must not fail a test."""
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def _tolerance(spec: Any, target: float) -> float | None:
    if isinstance(spec, str) and spec.strip().endswith("%"):
        try:
            return abs(target) * float(spec.strip()[:-1]) / 100.0
        except ValueError:
            return None
    return _number(spec)


def scalar_equal(expected: Any, actual: Any) -> bool:
    if isinstance(expected, bool) or isinstance(actual, bool):
        return isinstance(expected, bool) and isinstance(actual, bool) and expected == actual
    if expected is None or actual is None:
        return expected is None and actual is None
    if isinstance(actual, int | float):
        number = _number(expected)
        return number is not None and _close(number, float(actual))
    if isinstance(actual, str) and isinstance(expected, int | float):
        # cgroup files hold text: `value: 4000000` should match "4000000" as written to the file.
        try:
            return _close(float(expected), float(actual))
        except ValueError:
            return False
    return bool(expected == actual)


def _operators_hold(ops: Mapping[str, Any], actual: Any, found: bool) -> bool:
    present = found and actual is not None
    if "absent" in ops and bool(ops["absent"]) == present:
        return False
    rest = {k: v for k, v in ops.items() if k != "absent"}
    if not rest:
        return True
    if not present:
        return False
    value = _number(actual) if not isinstance(actual, str) else None
    for op, want in rest.items():
        if op == "approx":
            target = _number(want)
            tol = _tolerance(ops.get("tolerance", DEFAULT_TOLERANCE), target or 0.0)
            if value is None or target is None or tol is None or abs(value - target) > tol + 1e-9:
                return False
        elif op in ("gt", "gte", "lt", "lte"):
            bound = _number(want)
            if value is None or bound is None:
                return False
            if not {"gt": value > bound, "gte": value >= bound, "lt": value < bound, "lte": value <= bound}[
                op
            ]:
                return False
        elif op == "contains":
            if isinstance(actual, str):
                if str(want) not in actual:
                    return False
            elif isinstance(actual, list):
                if not any(value_matches(want, item, True) for item in actual):
                    return False
            else:
                return False
        elif op == "matches":
            if not isinstance(actual, str) or re.search(str(want), actual) is None:
                return False
        elif op == "oneOf" and not any(value_matches(option, actual, found) for option in want):
            return False
    return True


def value_matches(expected: Any, actual: Any, found: bool = True) -> bool:
    """Does an actual value satisfy an expected one (scalar, operator mapping, nested mapping, list)?"""
    if is_operator(expected):
        return _operators_hold(expected, actual, found)
    if not found:
        return False
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and all(r.ok for r in field_results(expected, actual))
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(expected)
            and all(value_matches(e, a) for e, a in zip(expected, actual, strict=True))
        )
    return scalar_equal(expected, actual)


def resolve(actual: Any, key: str) -> tuple[bool, Any]:
    """``actual[key]``, where ``key`` may be a dotted path (``release.target``). A literal key wins:
    ranking keys and fact names contain dots themselves (``memory.usage``)."""
    if not isinstance(actual, Mapping):
        return False, None
    if key in actual:
        return True, actual[key]
    for i, ch in enumerate(key):
        if ch == "." and key[:i] in actual:
            found, value = resolve(actual[key[:i]], key[i + 1 :])
            if found:
                return True, value
    return False, None


@dataclass(frozen=True)
class FieldResult:
    """One expected leaf field against the actual value (for the field-by-field diff)."""

    field: str
    expected: str
    actual: str
    ok: bool

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "expected": self.expected, "actual": self.actual, "ok": self.ok}


def field_results(expected: Mapping[str, Any], actual: Any, prefix: str = "") -> list[FieldResult]:
    """Every leaf of an expected mapping compared with the actual entry."""
    out: list[FieldResult] = []
    for key, want in expected.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        found, value = resolve(actual, str(key))
        if isinstance(want, Mapping) and not is_operator(want) and found and isinstance(value, Mapping):
            out.extend(field_results(want, value, name))
            continue
        out.append(
            FieldResult(
                name, flow(want), display(value) if found else "(missing)", value_matches(want, value, found)
            )
        )
    return out


def flow(value: Any) -> str:
    """A compact YAML-flow rendering of an expected value, as the suite author wrote it."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    if isinstance(value, str):
        return (
            value
            if value
            and re.fullmatch(r"[A-Za-z0-9_./@%:+-][A-Za-z0-9_./@%:+ -]*", value)
            and value.strip() == value
            else json.dumps(value)
        )
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return _num(value)


def _num(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def display(value: Any) -> str:
    """An actual value; large byte-like numbers also in GiB so 12884901888 reads as 12.0 GiB."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        text = _num(value)
        return f"{text} ({human_bytes(value)})" if abs(value) >= 1 << 20 else text
    if isinstance(value, Mapping | list):
        return short(value, 80)
    return flow(value)


# ---------------------------------------------------------------- suite model


@dataclass(frozen=True)
class PolicySpec:
    paths: tuple[Path, ...] = ()
    builtin: bool = True
    profile: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    # The ``policy:`` that chose these (the case's, else the suite's): where a policy that cannot be
    # built for the case's node is reported, since its own problem may name only the node.
    location: Location | None = None


@dataclass(frozen=True)
class Expect:
    data: Mapping[str, Any]
    path: JsonPath


@dataclass(frozen=True)
class Step:
    label: str
    facts: Mapping[str, Any]
    expects: tuple[Expect, ...]


@dataclass(frozen=True)
class Case:
    name: str
    location: Location
    xfail: str | None
    policy: PolicySpec
    guards: Guards
    state: EngineState
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class Suite:
    source: str
    name: str
    doc: Document
    cases: tuple[Case, ...]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: mappings merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def prefixed(doc: Document, prefix: JsonPath) -> Locate:
    """A locator for data that sits at ``prefix`` inside ``doc``."""

    def locate(path: JsonPath, prefer_key: bool = False) -> Location:
        return doc.locate((*prefix, *path), prefer_key)

    return locate


class _SuiteReader:
    """Turns one RuleTest document into a Suite, collecting every located problem on the way."""

    def __init__(self, doc: Document):
        self.doc = doc
        self.base = Path(doc.path).parent if doc.path is not None else Path(".")
        self.problems: list[Problem] = []
        self._facts_cache: dict[Path, dict[str, Any]] = {}

    def loc(self, path: JsonPath, prefer_key: bool = False) -> Location:
        return self.doc.locate(path, prefer_key)

    def under(self, prefix: JsonPath) -> Locate:
        """A locator for data that sits at ``prefix`` inside the suite document."""
        return prefixed(self.doc, prefix)

    def add(self, path: JsonPath, message: str, hint: str = "", prefer_key: bool = False) -> None:
        self.problems.append(Problem(self.loc(path, prefer_key), message, hint))

    def read(self) -> Suite | None:
        data = self.doc.data
        self.problems.extend(_problems(_suite_validator(), data, self.loc))
        if not self.problems:
            self.problems.extend(unit_problems(schema_file("ruletest.schema.json"), data, self.loc))
        if self.problems:
            return None
        suite_policy = self._policy(data.get("policy"), ("policy",), PolicySpec())
        suite_guards = self._guards(data.get("guards") or {}, Guards())
        names: dict[str, int] = {}
        cases = []
        for i, raw in enumerate(data["cases"]):
            if raw["name"] in names:
                self.add(
                    ("cases", i, "name"),
                    f"duplicate case name {raw['name']!r}",
                    f"case {names[raw['name']] + 1} has the same name; results are reported by name",
                )
            names.setdefault(raw["name"], i)
            case = self._case(i, raw, suite_policy, suite_guards)
            if case is not None:
                cases.append(case)
        if self.problems:
            return None
        meta = data.get("metadata") or {}
        return Suite(
            self.doc.source, str(meta.get("name") or Path(self.doc.source).stem), self.doc, tuple(cases)
        )

    # -- parts

    def _named(self, name: str, path: JsonPath, what: str, directory_ok: bool = False) -> Path | None:
        """The file a suite names, resolved against the suite's directory; None (and a problem at
        the naming field) when it cannot be read, whatever the operating system says about it."""
        full, message = named_file(self.base, name, what, directory_ok)
        if message:
            self.add(path, message)
        return full

    def _policy(self, given: Mapping[str, Any] | None, path: JsonPath, base: PolicySpec) -> PolicySpec:
        if given is None:
            return base
        raw = given
        paths = base.paths
        if "paths" in raw:
            resolved = []
            for j, p in enumerate(raw["paths"]):
                full = self._named(p, (*path, "paths", j), "rule path", directory_ok=True)
                if full is not None:
                    resolved.append(full)
            paths = tuple(resolved)
        return PolicySpec(
            paths=paths,
            builtin=bool(raw.get("builtin", base.builtin)),
            profile=raw.get("profile", base.profile),
            labels={**base.labels, **(raw.get("labels") or {})},
            location=self.loc(path, True),
        )

    @staticmethod
    def _guards(raw: Mapping[str, Any], base: Guards) -> Guards:
        return Guards(
            dry_run=bool(raw.get("dryRun", base.dry_run)),
            eviction_burst=int(raw.get("evictionBurst", base.eviction_burst)),
        )

    def _facts(self, raw: Any, path: JsonPath) -> dict[str, Any] | None:
        if isinstance(raw, str):
            full = self._named(raw, path, "facts file")
            if full is None:
                return None
            if full not in self._facts_cache:
                try:
                    self._facts_cache[full] = read_facts(full)
                except PolicyError as exc:
                    self.problems.extend(exc.problems)
                    return None
            return copy.deepcopy(self._facts_cache[full])
        found = facts_problems(raw, self.under(path))
        if found:
            self.problems.extend(found)
            return None
        return copy.deepcopy(dict(raw))

    def _patched(self, facts: dict[str, Any], patch: Any, path: JsonPath) -> dict[str, Any] | None:
        if patch is None:
            return facts
        merged: dict[str, Any] = merge_patch(facts, patch)
        found = facts_problems(merged, self.under(path))
        if found:
            self.problems.extend(
                Problem(p.location, f"the facts after this patch are invalid: {p.message}", p.hint)
                for p in found
            )
            return None
        return merged

    def _state(self, raw: Any, path: JsonPath) -> EngineState:
        if raw is None:
            return EngineState()
        data: Any = raw
        locate: Locate = self.under(path)
        if isinstance(raw, str):
            full = self._named(raw, path, "state file")
            if full is None:
                return EngineState()
            try:
                docs = read_file(full)
            except PolicyError as exc:
                self.problems.extend(exc.problems)
                return EngineState()
            if len(docs) != 1 or not isinstance(docs[0].data, dict):
                self.add(path, f"state file {raw} must hold exactly one JSON or YAML mapping")
                return EngineState()
            evaluation = docs[0].data.get("kind") == "Evaluation"
            data = docs[0].data.get("state") if evaluation else docs[0].data
            locate = prefixed(docs[0], ("state",) if evaluation else ())
        found = _problems(_state_validator(), data, locate)
        if found:
            self.problems.extend(found)
            return EngineState()
        return EngineState.from_dict(data)

    def _time(self, raw: Any, path: JsonPath) -> float | None:
        if raw is None:
            return None
        if isinstance(raw, int | float):
            return float(raw)
        try:
            return parse_duration(str(raw))
        except ValueError as exc:
            self.add(path, str(exc))
            return None

    def _case(self, i: int, raw: Mapping[str, Any], policy: PolicySpec, guards: Guards) -> Case | None:
        before = len(self.problems)
        base: JsonPath = ("cases", i)
        case_policy = self._policy(raw.get("policy"), (*base, "policy"), policy)
        case_guards = self._guards(raw.get("guards") or {}, guards)
        case_facts = None
        if "facts" in raw:
            case_facts = self._facts(raw["facts"], (*base, "facts"))
            if case_facts is not None:
                case_facts = self._patched(case_facts, raw.get("patch"), (*base, "patch"))
        elif "patch" in raw:
            self.add((*base, "patch"), "a case-level patch needs case-level facts to patch", prefer_key=True)
        state = self._state(raw.get("state"), (*base, "state"))
        steps: list[Step] = []
        raw_steps = raw.get("steps") or [{}]
        start: float | None = float(case_facts.get("time", 0.0)) if case_facts is not None else None
        previous: float | None = None
        for j, step in enumerate(raw_steps):
            spath: JsonPath = (*base, "steps", j) if "steps" in raw else base
            facts = case_facts
            own = "steps" in raw and "facts" in step
            if own:
                facts = self._facts(step["facts"], (*spath, "facts"))
            elif "facts" not in raw:
                self.add(
                    spath,
                    "this step has no facts",
                    "give the case `facts` (used by every step) or give each step its own `facts`",
                )
                continue
            if facts is None:
                continue
            if "steps" in raw and "patch" in step:
                facts = self._patched(facts, step["patch"], (*spath, "patch"))
                if facts is None:
                    continue
            if start is None:
                start = float(facts.get("time", 0.0))
            at = self._time(step.get("at") if "steps" in raw else None, (*spath, "at"))
            if at is not None:
                when = start + at
            elif own or "time" in (step.get("patch") or {}):
                when = float(facts.get("time", 0.0))
            else:
                when = previous if previous is not None else start
            facts = {**facts, "time": when}
            previous = when
            expects = []
            if "steps" in raw and "expect" in step:
                expects.append(self._expect(step["expect"], (*spath, "expect")))
            if j == len(raw_steps) - 1 and "expect" in raw:
                expects.append(self._expect(raw["expect"], (*base, "expect")))
            label = str(step.get("name") or f"step {j + 1}") if "steps" in raw else ""
            if label and when != start:
                label += f" (t+{_num(when - start)}s)" if start is not None else ""
            steps.append(Step(label, facts, tuple(expects)))
        if len(self.problems) != before:
            return None
        return Case(
            raw["name"], self.loc(base), raw.get("xfail"), case_policy, case_guards, state, tuple(steps)
        )

    def _expect(self, raw: Mapping[str, Any], path: JsonPath) -> Expect:
        vocab = field_vocabulary()
        for name in LISTS:
            for key in (name, "not" + _cap(name)):
                for k, entry in enumerate(raw.get(key) or ()):
                    if isinstance(entry, Mapping):
                        self._check_entry(entry, (*path, key, k), vocab[name], name)
        return Expect(raw, path)

    def _check_entry(
        self, entry: Mapping[str, Any], path: JsonPath, vocab: frozenset[str], what: str
    ) -> None:
        for key, value in entry.items():
            head = key if key in vocab else key.split(".", 1)[0]
            if head not in vocab:
                hint = did_you_mean(head, vocab) or f"fields of {what}: {', '.join(sorted(vocab))}"
                self.add((*path, key), f"{what} have no field {key!r}", hint, prefer_key=True)
            self._check_value(value, (*path, key))

    def _check_value(self, value: Any, path: JsonPath) -> None:
        if isinstance(value, list):
            for i, item in enumerate(value):
                self._check_value(item, (*path, i))
            return
        if not isinstance(value, Mapping):
            return
        ops = [k for k in value if k in OPERATORS]
        if not ops:
            for k, v in value.items():
                self._check_value(v, (*path, k))
            return
        others = [k for k in value if k not in OPERATORS]
        if others:
            self.add(
                path,
                f"mixes matcher operators ({', '.join(ops)}) with field names ({', '.join(others)})",
                "a mapping is either a nested entry or a matcher such as {approx: 9Gi, tolerance: 1%}",
            )
            return
        for op, arg in value.items():
            p = (*path, op)
            if op in ("approx", "gt", "gte", "lt", "lte") and _number(arg) is None:
                self.add(p, f"{op} needs a number or a quantity such as 9Gi or 500m, got {short(arg)}")
            elif op == "tolerance":
                if "approx" not in value:
                    self.add(p, "tolerance only goes with approx", prefer_key=True)
                elif _tolerance(arg, 1.0) is None:
                    self.add(
                        p, f"tolerance is a number, a quantity or a percent such as 1%, got {short(arg)}"
                    )
            elif op == "matches":
                try:
                    re.compile(str(arg))
                except re.error as exc:
                    self.add(p, f"not a regular expression: {exc}")
            elif op == "oneOf" and not isinstance(arg, list):
                self.add(p, "oneOf needs a list of allowed values")
            elif op == "absent" and not isinstance(arg, bool):
                self.add(p, "absent is true (the field is missing or null) or false")


# ---------------------------------------------------------------- discovery


def _is_suite(doc: Document) -> bool:
    return isinstance(doc.data, dict) and doc.data.get("kind") == SUITE_KIND


def discover(paths: Sequence[Path]) -> tuple[list[Document], list[Problem]]:
    """RuleTest documents in the given files (every document must be one) and directories (every
    ``*.yaml``/``*.yml`` below whose kind is RuleTest; facts snapshots and policies there are skipped)."""
    docs: list[Document] = []
    problems: list[Problem] = []
    for p in paths:
        why = unusable(p, directory_ok=True)
        if why:
            raise UsageError(f"{shown(str(p))} {why}")
        if p.is_dir():
            for f in yaml_files_under(p):
                try:
                    docs.extend(d for d in read_file(f) if _is_suite(d))
                except PolicyError as exc:
                    problems.extend(exc.problems)
        else:
            try:
                found = read_file(p)
            except PolicyError as exc:
                problems.extend(exc.problems)
                continue
            for d in found:
                if _is_suite(d):
                    docs.append(d)
                else:
                    kind = d.data.get("kind") if isinstance(d.data, dict) else None
                    problems.append(
                        Problem(
                            d.locate(("kind",) if kind else (), bool(kind)),
                            f"expected a {SUITE_KIND} suite, found "
                            + (f"kind {kind!r}" if kind else "a document without kind"),
                            "a suite starts with apiVersion: qosd.io/v1alpha1 and kind: RuleTest",
                        )
                    )
            if not found:
                problems.append(Problem(Location(str(p), 1, 1), "file holds no YAML document"))
    if not docs and not problems:
        raise UsageError(
            "no RuleTest suites found in "
            + ", ".join(str(p) for p in paths)
            + " (a suite has kind: RuleTest)"
        )
    return docs, problems


def load_suites(paths: Sequence[Path]) -> list[Suite]:
    """Every suite under ``paths``, checked in full before anything runs; PolicyError lists all
    problems of all suites at once."""
    docs, problems = discover(paths)
    suites = []
    for doc in docs:
        reader = _SuiteReader(doc)
        suite = reader.read()
        problems.extend(reader.problems)
        if suite is not None:
            suites.append(suite)
    if problems:
        raise PolicyError(problems)
    return suites


# ---------------------------------------------------------------- checking one tick


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
        for alias in ("rule", "mode", "item", "source", "conditions", "inputs"):
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
    return f"{entry.get('name')} ({entry.get('class')}): {'; '.join(entry.get('errors') or ())}"


def _singular(kind: str) -> str:
    return {
        "intents": "intent",
        "operations": "operation",
        "held": "held entry",
        "skipped": "skipped rule",
        "workloadIssues": "workload issue",
    }[kind]


def _entry(raw: Any) -> Mapping[str, Any]:
    return {"rule": raw} if isinstance(raw, str) else raw  # skipped/held shorthand: a rule name


def _entry_ok(expected: Mapping[str, Any], actual: Mapping[str, Any]) -> bool:
    return all(r.ok for r in field_results(expected, actual))


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
                failures.append(
                    Failure(
                        locate((*expect.path, kind, i), False),
                        step,
                        f"{kind}[{i}]: no {_singular(kind)} matches {flow(entry)}",
                        tuple(notes),
                        () if matching or not actuals else _closest(kind, entry, actuals),
                    )
                )
        for k, raw in enumerate(data.get("not" + _cap(kind)) or ()):
            forbidden = _entry(raw)
            for j, actual in enumerate(actuals):
                if j not in claimed and _entry_ok(forbidden, actual):
                    failures.append(
                        Failure(
                            locate((*expect.path, "not" + _cap(kind), k), False),
                            step,
                            f"not{_cap(kind)}[{k}]: {_singular(kind)} {j + 1} matches {flow(forbidden)}: "
                            f"{label_of(kind, actual)}",
                        )
                    )
        if data.get("no" + _cap(kind)) and actuals:
            failures.append(
                Failure(
                    locate((*expect.path, "no" + _cap(kind)), True),
                    step,
                    f"expected no {kind}, got {len(actuals)}",
                    tuple(label_of(kind, a) for a in actuals[:5]) + (("...",) if len(actuals) > 5 else ()),
                )
            )
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


# ---------------------------------------------------------------- running


@dataclass
class CaseResult:
    source: str  # the suite's file
    suite: str
    name: str
    location: Location
    status: str  # pass | fail | error | xfail | xpass
    xfail: str | None = None
    failures: list[Failure] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status in ("pass", "xfail")

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "suite": self.suite,
            "name": self.name,
            "location": str(self.location),
            "result": self.status,
            "xfail": self.xfail,
            "failures": [f.to_dict() for f in self.failures],
            "problems": [p.to_dict() for p in self.problems],
        }


def evaluation_document(result: TickResult) -> dict[str, Any]:
    """The tick as ``qosd eval --output json`` prints it (plain JSON types), so expectations are
    written against exactly what users see."""
    doc = {
        "apiVersion": API_VERSION,
        "kind": "Evaluation",
        **result.to_dict(),
        "state": result.state.to_dict(),
    }
    plain: dict[str, Any] = json.loads(json.dumps(doc, default=str))
    return plain


def _at_policy(problem: Problem, where: Location) -> Problem:
    """A policy problem with no file position ("no policy document applies to node 'n'") moved to
    the ``policy:`` that chose the documents, the line an engineer edits to fix it; what it named
    before (the node, an unreadable file) stays as related."""
    if problem.location.line:
        return problem
    named = problem.location.source in problem.message  # "... node 'n'" already says where
    related = problem.related if named else (problem.location, *problem.related)
    return Problem(where, problem.message, problem.hint, related)


def run_case(suite: Suite, case: Case, backend: str = "python") -> tuple[CaseResult, list[dict[str, Any]]]:
    """Run every step of a case with state carried over; the Evaluation documents come back too."""
    result = CaseResult(suite.source, suite.name, case.name, case.location, "pass", case.xfail)
    ticks: list[dict[str, Any]] = []
    spec = case.policy
    labels = dict(spec.labels)
    if spec.profile:
        labels[PROFILE_LABEL] = spec.profile
    try:
        first = snapshot_from_dict(case.steps[0].facts)
        node = first.node.with_labels(labels) if labels else first.node
        policy = build_policy(load_documents(list(spec.paths), builtin=spec.builtin), node)
    except PolicyError as exc:
        result.status = "error"
        result.problems = [_at_policy(p, spec.location or case.location) for p in exc.problems]
        return result, ticks
    engine = Engine(policy, backend=backend)
    state = case.state
    try:
        for step in case.steps:
            snapshot = first if step is case.steps[0] else snapshot_from_dict(step.facts)
            tick = run_tick(engine, snapshot, state, case.guards)
            state = tick.state
            doc = evaluation_document(tick)
            ticks.append(doc)
            for expect in step.expects:
                result.failures.extend(check_tick(expect, doc, suite.doc.locate, step.label))
    finally:
        engine.backend.close()
    failed = bool(result.failures)
    if case.xfail is not None:
        result.status = "xfail" if failed else "xpass"
    else:
        result.status = "fail" if failed else "pass"
    return result, ticks


def run(
    suites: Sequence[Suite], backend: str = "python", select: re.Pattern[str] | None = None
) -> list[CaseResult]:
    out = []
    for suite in suites:
        for case in suite.cases:
            if select is None or select.search(case.name):
                out.append(run_case(suite, case, backend)[0])
    return out


# ---------------------------------------------------------------- reporting

STATUS_WORDS = {"pass": "PASS ", "fail": "FAIL ", "error": "ERROR", "xfail": "XFAIL", "xpass": "XPASS"}


def _failure_text(f: Failure) -> list[str]:
    where = f"{f.location}: " if f.location.line else ""
    head = f"      {where}{f.step + ': ' if f.step else ''}{f.message}"
    lines = [head]
    lines += [f"        {note}" for note in f.notes]
    for c in f.closest:
        lines.append(f"        closest actual: {c.label}")
        width = max((len(r.field) for r in c.fields), default=0)
        for r in c.fields:
            if r.ok:
                got = "" if r.expected == r.actual else f", got {r.actual}"
                lines.append(f"          ok        {r.field:<{width}}  {r.expected}{got}")
            else:
                lines.append(f"          MISMATCH  {r.field:<{width}}  expected {r.expected}, got {r.actual}")
    return lines


def _suite_count(results: Sequence[CaseResult]) -> int:
    """Suites that ran at least one (selected) case."""
    return len({(r.source, r.suite) for r in results})


def summary_line(results: Sequence[CaseResult]) -> str:
    counts = {s: sum(1 for r in results if r.status == s) for s in STATUS_WORDS}
    parts = [f"{counts['pass']} passed"]
    for status, word in (
        ("fail", "failed"),
        ("error", "errored"),
        ("xfail", "expected to fail (xfail)"),
        ("xpass", "passed unexpectedly (xpass)"),
    ):
        if counts[status]:
            parts.append(f"{counts[status]} {word}")
    return f"{len(results)} case(s) in {_suite_count(results)} suite(s): " + ", ".join(parts)


def format_text(results: Sequence[CaseResult]) -> str:
    lines: list[str] = []
    current: tuple[str, str] | None = None
    for r in results:
        if (r.source, r.suite) != current:
            current = (r.source, r.suite)
            lines.append(f"{r.source}: suite {r.suite}")
        lines.append(f"  {STATUS_WORDS[r.status]} {r.name}")
        if r.status in ("xfail", "xpass"):
            lines.append(f"      known failure: {r.xfail}")
        if r.status == "xpass":
            lines.append(
                f"      {r.location}: this case is marked xfail but passed; "
                "remove `xfail` if the bug is fixed"
            )
        if r.status in ("fail", "error"):
            for f in r.failures:
                lines.extend(_failure_text(f))
            for p in r.problems:
                lines.extend("      " + line for line in p.format().splitlines())
        elif r.status == "xfail":
            # Only the first line of each failure: enough to see which expectation the bug breaks.
            lines.extend(_failure_text(f)[0] for f in r.failures)
    lines.append(summary_line(results))
    return "\n".join(lines) + "\n"


def format_json(results: Sequence[CaseResult]) -> str:
    counts = {s: sum(1 for r in results if r.status == s) for s in STATUS_WORDS}
    return json.dumps(
        {
            "apiVersion": API_VERSION,
            "kind": "RuleTestReport",
            "passed": all(r.ok for r in results),
            "summary": {"suites": _suite_count(results), "cases": len(results), **counts},
            "cases": [r.to_dict() for r in results],
        },
        indent=2,
    )


# ---------------------------------------------------------------- command line


def cmd_test(args: argparse.Namespace) -> int:
    select = None
    if args.run:
        try:
            select = re.compile(args.run)
        except re.error as exc:
            print(f"qosd: error: --run {args.run!r} is not a regular expression: {exc}", file=sys.stderr)
            return EXIT_USAGE
    try:
        suites = load_suites(args.paths)
    except UsageError as exc:
        print(f"qosd: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except PolicyError as exc:
        if args.output == "json":
            print(
                json.dumps(
                    {
                        "apiVersion": API_VERSION,
                        "kind": "RuleTestReport",
                        "passed": False,
                        "problems": [p.to_dict() for p in exc.problems],
                    },
                    indent=2,
                )
            )
        else:
            print(exc.format(), file=sys.stderr)
        return EXIT_FAILED
    try:
        results = run(suites, args.backend, select)
    except RuntimeError as exc:
        # An optional evaluator that is missing or whose worker died (DurableBackendError): the
        # suites are fine, the environment is not. The in-process evaluator has no such failure.
        if args.backend == "python":
            raise
        print(f"qosd: error: the {args.backend} backend cannot run the suites: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if select is not None and not results:
        print(f"qosd: error: no case name matches --run {args.run!r}", file=sys.stderr)
        return EXIT_USAGE
    sys.stdout.write(format_json(results) + "\n" if args.output == "json" else format_text(results))
    return EXIT_OK if all(r.ok for r in results) else EXIT_FAILED


def add_parser(sub: Any) -> None:
    """Register ``test`` on an argparse subparsers object (engine/cli.py wires it in)."""
    p = sub.add_parser(
        "test",
        help="run RuleTest suites (rule unit tests in YAML); exit 0 all pass, 1 failures, 2 usage error",
        description=(
            "Run rule unit tests: each RuleTest suite names a policy and cases that evaluate it on facts "
            "snapshots and compare intents, operations, held and skipped entries with expectations. "
            "Directories are searched for *.yaml files of kind RuleTest. Exit 0 when every case passes, "
            "1 when a case fails or a suite is malformed, 2 on usage errors."
        ),
    )
    p.add_argument("paths", nargs="+", type=Path, metavar="SUITE", help="suite files or directories")
    p.add_argument("--run", metavar="REGEX", help="only cases whose name matches this regular expression")
    p.add_argument("--backend", choices=("python", "durable"), default="python", help="condition evaluator")
    p.add_argument("--output", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_test)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="qosd")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["test", *(argv if argv is not None else sys.argv[1:])])
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
