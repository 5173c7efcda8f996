"""Running a suite's cases through the one tick every mode shares (engine.tick.run_tick)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.config.errors import Location, PolicyError, Problem
from engine.config.load import Document
from engine.config.pipeline import PROFILE_LABEL, build_policy, load_documents
from engine.config.policy import Policy
from engine.evaluate.engine import Engine
from engine.model.facts import snapshot_from_dict
from engine.model.node import NodeInfo
from engine.resources import API_VERSION
from engine.ruletest.check import Failure, check_tick
from engine.ruletest.model import Anchor, Case, Suite
from engine.ruletest.refused import check_refused
from engine.tick import TickResult, run_tick


@dataclass
class CaseResult:
    source: str  # the suite's file
    suite: str
    name: str
    location: Location
    status: str  # pass | fail | error | xfail | xpass
    xfail: str | None = None
    anchor: Anchor | None = None
    failures: list[Failure] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    # For rule coverage: the enabled rules of the case's policy, and those that fired in some tick.
    rules: tuple[str, ...] = ()
    fired: frozenset[str] = frozenset()

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
            "anchor": self.anchor.to_dict() if self.anchor else None,
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


class Policies:
    """The policies of one run by (documents, node): cases of a suite mostly share their documents
    and a facts file's node, and a policy is a pure function of the two (build_policy), so each
    distinct pair is built once per run (``qosd test examples/`` builds 295 of its 508). The
    documents are kept with their policy, so the ids in a key stay theirs; a refusal is not kept."""

    def __init__(self) -> None:
        self._built: dict[tuple[tuple[int, ...], str], tuple[list[Document], Policy]] = {}

    def build(self, docs: list[Document], node: NodeInfo) -> Policy:
        key = (tuple(id(d) for d in docs), repr(node))
        hit = self._built.get(key)
        if hit is None:
            hit = self._built[key] = (docs, build_policy(docs, node))
        return hit[1]


def run_case(
    suite: Suite, case: Case, backend: str = "python", policies: Policies | None = None
) -> tuple[CaseResult, list[dict[str, Any]]]:
    """Run every step of a case with state carried over; the Evaluation documents come back too."""
    result = CaseResult(suite.source, suite.name, case.name, case.location, "pass", case.xfail, case.anchor)
    ticks: list[dict[str, Any]] = []
    spec = case.policy
    labels = dict(spec.labels)
    if spec.profile:
        labels[PROFILE_LABEL] = spec.profile
    try:
        first = snapshot_from_dict(case.steps[0].facts)
        node = first.node.with_labels(labels) if labels else first.node
        docs = load_documents(list(spec.paths), builtin=spec.builtin) + list(spec.overlay)
        policy = (policies or Policies()).build(docs, node)
    except PolicyError as exc:
        problems = [_at_policy(p, spec.location or case.location) for p in exc.problems]
        if case.refused is not None:
            result.failures = check_refused(case.refused, problems, case.location)
            return _settled(result, case), ticks
        # A policy qosd refuses is a failure of the case: a known one when the case is marked xfail
        # (an anchor test that runs a configuration qosd's validation, like the anchor's own, refuses).
        result.status = "error" if case.xfail is None else "xfail"
        result.problems = problems
        return result, ticks
    result.rules = tuple(r.name for r in policy.rules)
    if case.refused is not None:
        result.failures = check_refused(case.refused, None, case.location)
        return _settled(result, case), ticks
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
    result.fired = frozenset(name for doc in ticks for name in doc["fired"])
    return _settled(result, case), ticks


def _settled(result: CaseResult, case: Case) -> CaseResult:
    """The case's status from its failures and its xfail marker."""
    failed = bool(result.failures)
    if case.xfail is not None:
        result.status = "xfail" if failed else "xpass"
    else:
        result.status = "fail" if failed else "pass"
    return result


def run(
    suites: Sequence[Suite], backend: str = "python", select: re.Pattern[str] | None = None
) -> list[CaseResult]:
    out = []
    policies = Policies()
    for suite in suites:
        for case in suite.cases:
            if select is None or select.search(case.name):
                out.append(run_case(suite, case, backend, policies)[0])
    return out
