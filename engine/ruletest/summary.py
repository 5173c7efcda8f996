"""What a ``qosd test`` run adds up to: counts per suite and per directory, the result table, and rule
coverage (which rules of the policies under test no case ever saw fire).

A green run says nothing about a rule no case exercises; Kyverno and OPA print coverage for the same
reason. Parity suites are counted per directory because a directory is an anchor package.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.ruletest.runner import CaseResult

STATUSES = ("pass", "fail", "error", "xfail", "xpass")
REASON_WIDTH = 100


def counts(results: Iterable[CaseResult]) -> dict[str, int]:
    out = dict.fromkeys(STATUSES, 0)
    for r in results:
        out[r.status] += 1
    return out


def directory_of(r: CaseResult) -> str:
    return str(Path(r.source).parent)


def by_suite(results: Sequence[CaseResult]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str], list[CaseResult]] = {}
    for r in results:
        groups.setdefault((r.source, r.suite), []).append(r)
    return [
        {"source": source, "suite": suite, "cases": len(rs), **counts(rs)}
        for (source, suite), rs in groups.items()
    ]


def by_directory(results: Sequence[CaseResult]) -> list[dict[str, Any]]:
    groups: dict[str, list[CaseResult]] = {}
    for r in results:
        groups.setdefault(directory_of(r), []).append(r)
    return [
        {"directory": d, "suites": len({r.source for r in rs}), "cases": len(rs), **counts(rs)}
        for d, rs in sorted(groups.items())
    ]


def reason(r: CaseResult) -> str:
    """Why a case did not simply pass, in one line: the known failure, or its first problem."""
    if r.status in ("xfail", "xpass"):
        text = f"xfail: {r.xfail}" + (" (but it passed: remove xfail)" if r.status == "xpass" else "")
    elif r.failures:
        f = r.failures[0]
        text = (f"{f.step}: " if f.step else "") + f.message
        if len(r.failures) > 1:
            text += f" (+{len(r.failures) - 1} more)"
    elif r.problems:
        text = r.problems[0].message
    else:
        text = ""
    text = " ".join(text.split())
    return text if len(text) <= REASON_WIDTH else text[: REASON_WIDTH - 3] + "..."


def table(results: Sequence[CaseResult]) -> list[str]:
    """One row per case (suite, case, result, reason), like ``kyverno test``'s result table."""
    rows = [("SUITE", "CASE", "RESULT", "REASON")]
    rows += [(r.suite, r.name, r.status.upper(), reason(r)) for r in results]
    widths = [min(max(len(row[i]) for row in rows), limit) for i, limit in enumerate((40, 70, 6))]

    def cell(text: str, width: int) -> str:
        return (text if len(text) <= width else text[: width - 3] + "...").ljust(width)

    return [("  ".join(cell(row[i], widths[i]) for i in range(3)) + "  " + row[3]).rstrip() for row in rows]


@dataclass(frozen=True)
class Coverage:
    """Rules of the policies the cases built, and those that fired in at least one tick of a case."""

    rules: tuple[str, ...]
    fired: frozenset[str]

    @property
    def never_fired(self) -> tuple[str, ...]:
        return tuple(r for r in self.rules if r not in self.fired)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rules": len(self.rules),
            "fired": len([r for r in self.rules if r in self.fired]),
            "neverFired": list(self.never_fired),
        }

    def line(self) -> str:
        n, hit = len(self.rules), len(self.rules) - len(self.never_fired)
        if not n:
            return "rule coverage: no policy was built (every case errored)"
        text = f"rule coverage: {hit} of {n} rules fired in some case ({100 * hit // n}%)"
        return text + (f"; never fired: {', '.join(self.never_fired)}" if self.never_fired else "")


def coverage(results: Iterable[CaseResult]) -> Coverage:
    rules: dict[str, None] = {}
    fired: set[str] = set()
    for r in results:
        rules.update(dict.fromkeys(r.rules))
        fired |= r.fired
    return Coverage(tuple(sorted(rules)), frozenset(fired))


def coverage_by_suite(results: Sequence[CaseResult]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str], list[CaseResult]] = {}
    for r in results:
        groups.setdefault((r.source, r.suite), []).append(r)
    return [{"source": s, "suite": n, **coverage(rs).to_dict()} for (s, n), rs in groups.items()]


def count_text(c: Mapping[str, int]) -> str:
    parts = [f"{c['pass']} passed"]
    for status, word in (
        ("fail", "failed"),
        ("error", "errored"),
        ("xfail", "expected to fail (xfail)"),
        ("xpass", "passed unexpectedly (xpass)"),
    ):
        if c[status]:
            parts.append(f"{c[status]} {word}")
    return ", ".join(parts)
