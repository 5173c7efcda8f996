"""The output of ``qosd test``: a line per case, failures field by field, the result table, rule
coverage and a summary; or the same as a RuleTestReport document in JSON or YAML."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from engine.config.output import dump_yaml
from engine.resources import API_VERSION
from engine.ruletest.check import Failure
from engine.ruletest.runner import CaseResult
from engine.ruletest.summary import (
    by_directory,
    by_suite,
    count_text,
    counts,
    coverage,
    coverage_by_suite,
    table,
)

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
            if r.problem:
                lines.append(f"          CANNOT    {r.field:<{width}}  expected {r.expected}: {r.problem}")
            elif r.ok:
                got = "" if r.expected == r.actual else f", got {r.actual}"
                lines.append(f"          ok        {r.field:<{width}}  {r.expected}{got}")
            else:
                lines.append(f"          MISMATCH  {r.field:<{width}}  expected {r.expected}, got {r.actual}")
    return lines


def _suite_count(results: Sequence[CaseResult]) -> int:
    """Suites that ran at least one (selected) case."""
    return len({(r.source, r.suite) for r in results})


def summary_line(results: Sequence[CaseResult]) -> str:
    return f"{len(results)} case(s) in {_suite_count(results)} suite(s): " + count_text(counts(results))


def format_text(results: Sequence[CaseResult]) -> str:
    """Each suite's cases with their failures field by field, then the result table, counts per
    directory when there are several, rule coverage, and the one-line summary."""
    lines: list[str] = []
    current: tuple[str, str] | None = None
    for r in results:
        if (r.source, r.suite) != current:
            current = (r.source, r.suite)
            lines.append(f"{r.source}: suite {r.suite}")
        lines.append(f"  {STATUS_WORDS[r.status]} {r.name}")
        if r.anchor is not None and r.status != "pass":
            lines.append(f"      anchor: {r.anchor}")
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
    lines.append("")
    lines.extend(table(results))
    directories = by_directory(results)
    if len(directories) > 1:
        lines.append("")
        for d in directories:
            lines.append(f"{d['directory']}: {d['cases']} case(s) in {d['suites']} suite(s): {count_text(d)}")
    lines.append("")
    lines.append(coverage(results).line())
    lines.append(summary_line(results))
    return "\n".join(lines) + "\n"


def report_document(results: Sequence[CaseResult]) -> dict[str, Any]:
    """The RuleTestReport (``--output json`` / ``yaml``): cases, counts per suite and directory, coverage."""
    return {
        "apiVersion": API_VERSION,
        "kind": "RuleTestReport",
        "passed": all(r.ok for r in results),
        "summary": {"suites": _suite_count(results), "cases": len(results), **counts(results)},
        "bySuite": by_suite(results),
        "byDirectory": by_directory(results),
        "coverage": {**coverage(results).to_dict(), "bySuite": coverage_by_suite(results)},
        "cases": [r.to_dict() for r in results],
    }


def format_json(results: Sequence[CaseResult]) -> str:
    return json.dumps(report_document(results), indent=2)


def format_yaml(results: Sequence[CaseResult]) -> str:
    return dump_yaml(report_document(results))
