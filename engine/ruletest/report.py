"""The output of ``qosd test``: a line per case, failures field by field, a summary; or JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence

from engine.resources import API_VERSION
from engine.ruletest.check import Failure
from engine.ruletest.runner import CaseResult

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
