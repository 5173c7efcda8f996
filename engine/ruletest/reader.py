"""Reading RuleTest suite files: schema checks, located problems, and finding suites under paths."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from engine.config.errors import Location, PolicyError, Problem, UsageError, short
from engine.config.load import Document, JsonPath, Layer, read_file, yaml_files_under
from engine.config.schema_check import did_you_mean, inline_refs, validation_problems
from engine.config.unitcheck import schema_file, unit_problems
from engine.evaluate.state import EngineState
from engine.model.units import parse_duration
from engine.plan.planner import Guards
from engine.resources import data_dir
from engine.ruletest.match import CPUS_KEYS, OPERATORS, as_number, cpus_of, number_text, tolerance_of
from engine.ruletest.model import (
    LISTS,
    PROVENANCE_ALIASES,
    SUITE_KIND,
    Anchor,
    Case,
    Expect,
    Locate,
    PolicySpec,
    Step,
    Suite,
    capitalized,
    merge_patch,
    prefixed,
)
from engine.ruletest.overlay import overlay_documents
from engine.sources.facts_check import facts_problems, with_numbers
from engine.sources.named_files import named_file, shown, unusable
from engine.sources.snapshot_file import read_facts


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
INTENT_ALIASES = (*PROVENANCE_ALIASES, "held")


@cache
def field_vocabulary() -> Mapping[str, frozenset[str]]:
    """Top-level field names each expectation list can match on, derived from the schemas so a
    misspelt field in ``notIntents`` is an error instead of a check that can never fail."""
    evaluation_schema = _load_schema("evaluation.schema.json")
    evaluation = evaluation_schema["$defs"]
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
        "oomPriorities": frozenset(props(evaluation_schema["properties"]["oomPriorities"]["items"])),
    }


@cache
def state_vocabulary() -> frozenset[str]:
    """The top-level fields of the engine state an expectation may name (schemas/state.schema.json)."""
    return frozenset(_load_schema("state.schema.json")["$defs"]["state"]["properties"])


class SuiteReader:
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
        if "overlay" in data:
            name = self._overlay_name()
            docs = overlay_documents(self.doc, ("overlay",), data["overlay"], name, Layer.TEST)
            suite_policy = dataclasses.replace(suite_policy, overlay=docs)
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
        return Suite(self.doc.source, self._suite_name(), self.doc, tuple(cases))

    def _overlay_name(self) -> str:
        """metadata.name of an inline overlay: a Kubernetes object name, as the schema requires."""
        slug = re.sub(r"[^a-z0-9]+", "-", self._suite_name().lower()).strip("-")[:200] or "suite"
        return f"ruletest.{slug}"

    def _suite_name(self) -> str:
        meta = self.doc.data.get("metadata") or {}
        return str(meta.get("name") or Path(self.doc.source).stem)

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
            overlay=base.overlay,  # the suite's inline overlay stays under a case's own policy
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
        return copy.deepcopy(dict(with_numbers(raw)))

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
        return dict(with_numbers(merged))

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
        if "overlay" in raw:
            label = f"{self._overlay_name()}.case-{i + 1}"
            docs = overlay_documents(self.doc, (*base, "overlay"), raw["overlay"], label, Layer.TEST_CASE)
            case_policy = dataclasses.replace(case_policy, overlay=(*case_policy.overlay, *docs))
        anchor = self._anchor(raw.get("anchor"), base)
        if "refused" in raw and ("expect" in raw or "steps" in raw):
            self.add(
                (*base, "refused"),
                "a case that expects its policy refused runs no tick, so it has no `expect` or `steps`",
                prefer_key=True,
            )
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
                label += f" (t+{number_text(when - start)}s)" if start is not None else ""
            steps.append(Step(label, facts, tuple(expects)))
        if len(self.problems) != before:
            return None
        return Case(
            raw["name"],
            self.loc(base),
            raw.get("xfail"),
            case_policy,
            case_guards,
            state,
            tuple(steps),
            anchor,
            tuple(raw["refused"]) if "refused" in raw else None,
        )

    def _anchor(self, raw: Mapping[str, Any] | None, base: JsonPath) -> Anchor | None:
        """The suite's anchor overridden field by field by the case's; None when neither gives one."""
        suite = self.doc.data.get("anchor") or {}
        if raw is None and not suite:
            return None
        merged = {**suite, **(raw or {})}
        missing = [k for k in ("repo", "file", "function") if not merged.get(k)]
        if missing:
            self.add(
                (*base, "anchor") if raw is not None else ("anchor",),
                f"the anchor lacks {', '.join(missing)}",
                "an anchor names the ported Go test: repo (owner/name), file, function, and the table "
                "case; give the shared fields in the suite's `anchor` and `case` in each case's",
                prefer_key=True,
            )
            return None
        case = merged.get("case")
        return Anchor(
            str(merged["repo"]),
            str(merged["file"]),
            str(merged["function"]),
            None if case is None else str(case),
        )

    def _expect(self, raw: Mapping[str, Any], path: JsonPath) -> Expect:
        vocab = field_vocabulary()
        for name in LISTS:
            for key in (name, "not" + capitalized(name)):
                for k, entry in enumerate(raw.get(key) or ()):
                    if isinstance(entry, Mapping):
                        self._check_entry(entry, (*path, key, k), vocab[name], name)
        if "state" in raw:
            self._check_entry(raw["state"], (*path, "state"), state_vocabulary(), "engine states")
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
            if op in ("approx", "gt", "gte", "lt", "lte") and as_number(arg) is None:
                self.add(p, f"{op} needs a number or a quantity such as 9Gi or 500m, got {short(arg)}")
            elif op == "tolerance":
                if "approx" not in value:
                    self.add(p, "tolerance only goes with approx", prefer_key=True)
                elif tolerance_of(arg, 1.0) is None:
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
            elif op == "cpuset":
                self._check_cpuset(arg, p)

    def _check_cpuset(self, arg: Any, path: JsonPath) -> None:
        """``cpuset: "0-3"`` or ``cpuset: {count: 4 | {gte: 2}, within: "0-7"}``."""
        usage = 'cpuset takes a cpuset such as "0-3,8" or {count: 4, within: "0-7"}'
        if not isinstance(arg, Mapping):
            if cpus_of(arg) is None:
                self.add(path, f"{short(arg)} is not a cpuset", usage)
            return
        for key, value in arg.items():
            if key not in CPUS_KEYS:
                hint = did_you_mean(str(key), CPUS_KEYS) or usage
                self.add((*path, key), f"cpuset has no {key!r}", hint, True)
            elif key == "within" and cpus_of(value) is None:
                self.add((*path, key), f"{short(value)} is not a cpuset", usage)
            elif key == "count":
                if isinstance(value, Mapping):
                    self._check_value(value, (*path, key))
                elif as_number(value) is None:
                    self.add((*path, key), f"count is a number of CPUs, got {short(value)}", usage)
        if not arg:
            self.add(path, "cpuset: {} checks nothing", usage)


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
        reader = SuiteReader(doc)
        suite = reader.read()
        problems.extend(reader.problems)
        if suite is not None:
            suites.append(suite)
    if problems:
        raise PolicyError(problems)
    return suites
