"""Located problems: the one error type every part of the rule pipeline raises.

A platform engineer reading a failed rollout at 3 a.m. needs the file, line and column (or the custom
resource and JSON path), the offending value and a hint. Every check collects ``Problem`` values
instead of stopping at the first, so one run reports everything wrong with a file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol, overload

if TYPE_CHECKING:
    from engine.cgroups.declared import DeclaredFiles
    from engine.config.load import JsonPath
    from engine.model.node import NodeInfo


@dataclass(frozen=True, order=True)
class Location:
    """Where a value came from: a file position (1-based) or, for a custom resource, just its name."""

    source: str
    line: int = 0
    column: int = 0
    path: str = "$"

    def __str__(self) -> str:
        if self.line:
            return f"{self.source}:{self.line}:{self.column}"
        return self.source if self.path == "$" else f"{self.source} {self.path}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "line": self.line or None,
            "column": self.column or None,
            "path": self.path,
        }


@dataclass(frozen=True)
class Variant:
    """A kind of node ``qosd validate`` built the policy for: the values of the labels the documents'
    selectors distinguish (None: the label is absent) and the bundled profile that applies there.
    A problem that only some kinds of node have names them, so an overlay that breaks only the
    Koordinator profile says so instead of looking broken everywhere."""

    labels: tuple[tuple[str, str | None], ...]
    profile: str | None = None

    def __str__(self) -> str:
        present = [f"{k}={v}" for k, v in self.labels if v is not None]
        absent = [k for k, v in self.labels if v is None]
        where = f"labelled {', '.join(present)}" if present else f"without {', '.join(absent)}"
        if not self.labels:
            where = "of any labels"
        return f"profile {self.profile} (nodes {where})" if self.profile else f"nodes {where}"

    def to_dict(self) -> dict[str, Any]:
        return {"labels": dict(self.labels), "profile": self.profile}


Severity = Literal["error", "warning", "note"]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a document, with enough context to fix it without reading qosd's code.
    A ``warning`` is a policy that loads and runs but works against itself (engine.config.lints);
    ``qosd validate --strict`` treats warnings as errors. A ``note`` says what validate noticed and
    accepted (a patch left out where nothing defines its entry)."""

    location: Location
    message: str
    hint: str = ""
    related: tuple[Location, ...] = field(default=())
    variants: tuple[Variant, ...] = field(default=())  # empty: every node
    severity: Severity = "error"

    def format(self) -> str:
        loc = self.location
        head = f"{loc}: {self.severity}: {self.message}"
        if loc.line and loc.path not in ("$", ""):
            head += f" (at {loc.path})"
        lines = [head]
        for rel in self.related:
            lines.append(f"  see also: {rel}" + (f" ({rel.path})" if rel.line and rel.path else ""))
        if self.variants:
            lines.append("  on: " + "; ".join(str(v) for v in self.variants))
        if self.hint:
            lines.append(f"  hint: {self.hint}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.location.to_dict(),
            "severity": self.severity,
            "message": self.message,
            "hint": self.hint or None,
            "related": [r.to_dict() for r in self.related],
            "variants": [v.to_dict() for v in self.variants],
        }


def unique_problems(problems: Iterable[Problem]) -> list[Problem]:
    """Problems in location order, one per (location, message); the node variants of duplicates
    (the same problem found on several kinds of node) are joined on the one kept."""
    seen: dict[tuple[Location, str], Problem] = {}
    for p in problems:
        key = (p.location, p.message)
        first = seen.get(key)
        if first is None:
            seen[key] = p
        elif p.variants and first.variants:
            joined = tuple(sorted(set(first.variants) | set(p.variants), key=lambda v: (str(v), repr(v))))
            seen[key] = replace(first, variants=joined)
        elif not p.variants and first.variants:
            seen[key] = replace(first, variants=())  # found without a variant: it holds everywhere
    return sorted(seen.values(), key=lambda p: p.location)


def summary_line(problems: Sequence[Problem], documents: int | None = None, files: int | None = None) -> str:
    """``2 errors, 1 warning in 3 document(s) from 2 file(s)``: the last line of every report."""
    errors = sum(1 for p in problems if p.severity == "error")
    warnings = sum(1 for p in problems if p.severity == "warning")
    counts = [f"{errors} error{'s' if errors != 1 else ''}"] if errors else []
    counts += [f"{warnings} warning{'s' if warnings != 1 else ''}"] if warnings else []
    where = f" in {documents} document(s) from {files} file(s)" if documents is not None else ""
    if not counts:
        return f"valid: {documents} document(s) from {files} file(s)" if documents is not None else "valid"
    return ", ".join(counts) + where


def problems_document(problems: Sequence[Problem], summary: str, valid: bool | None = None) -> dict[str, Any]:
    """The machine-readable report of problems (``--output json|yaml``), one shape for every command."""
    ok = valid if valid is not None else not any(p.severity == "error" for p in problems)
    return {"valid": ok, "summary": summary, "problems": [p.to_dict() for p in problems]}


class PolicyError(Exception):
    """Raised when documents cannot become a policy; carries every problem found, in file order."""

    def __init__(self, problems: Iterable[Problem]):
        self.problems: tuple[Problem, ...] = tuple(unique_problems(problems))
        if not self.problems:
            raise ValueError("PolicyError needs at least one problem")
        super().__init__(self.format())

    @property
    def summary(self) -> str:
        return summary_line(self.problems) + " found"

    def format(self) -> str:
        body = "\n".join(p.format() for p in self.problems)
        return f"{body}\n{self.summary}"

    def to_dict(self) -> dict[str, Any]:
        return problems_document(self.problems, self.summary, valid=False)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def short(value: Any, limit: int = 60) -> str:
    """A value as it appears in a message: JSON-ish and bounded, so a huge list cannot flood a log."""
    try:
        text = json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class UsageError(Exception):
    """Bad command-line usage (a path that does not exist, a malformed option): exit 2."""


class Checker(Protocol):
    """What a feature's semantic checks may use of the compiler (``config.compile``): the merged
    spec's named sections, the node, and the one way to report a located problem. Features check
    their own specs beside them without importing the compiler."""

    spec: dict[str, Any]  # the merged spec
    classes: dict[str, Any]  # name -> raw class section
    enhancements: dict[str, Any]  # name -> raw enhancement section
    pools: dict[str, Any]  # name -> raw pool section
    node: NodeInfo  # the node the policy is compiled for
    cgroup_files: DeclaredFiles  # spec.cgroup.files, once compiled (before the rules)

    def loc(self, path: JsonPath) -> Location:
        """Where ``path`` (under spec) was written, for a problem's ``related`` locations and origins."""

    def add(self, path: JsonPath, message: str, hint: str = "", related: Iterable[Location] = ()) -> None: ...

    def hidden(self, key: JsonPath) -> bool:
        """Whether spec ``key`` (``("reclaim", "cpu")``) was taken out of a document for its schema
        errors (engine/config/withheld.py): a check that reads it must not report it missing."""

    def ref(self, path: JsonPath, name: Any, table: dict[str, Any], what: str) -> None: ...

    def cgroup_path(self, path: JsonPath, what: str, value: Any) -> None:
        """Report ``value`` unless it is a usable cgroup path under the cgroup root."""

    def quantity(self, path: JsonPath, value: Any) -> float | None:
        """The quantity ``value`` in base units, or None (reported) when it is not one."""

    @overload
    def duration(self, path: JsonPath, value: Any, default: float) -> float: ...
    @overload
    def duration(self, path: JsonPath, value: Any, default: None = None) -> float | None: ...
    def duration(self, path: JsonPath, value: Any, default: float | None = None) -> float | None:
        """Seconds of the duration ``value``; ``default`` when absent or not one (then reported)."""

    def knob(
        self, path: JsonPath, knob: Any, file: str | None, pods: bool, *, containers: bool = False
    ) -> None:
        """Report an expression knob that cannot parse, reads unknown names, or can only fail
        (``containers``: it is evaluated for each app container's own cgroup)."""

    def cgroup_value(self, path: JsonPath, file: str, knob: Any) -> str | None:
        """A literal knob's text if ``file`` accepts it (else reported); None for computed knobs."""

    def cgroup_combination(self, path: JsonPath, literals: dict[str, str], files: set[str]) -> None:
        """Report values of one write the kernel refuses together (burst over quota, idle + weight)."""
