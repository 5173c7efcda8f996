"""Located problems: the one error type every part of the rule pipeline raises.

A platform engineer reading a failed rollout at 3 a.m. needs the file, line and column (or the custom
resource and JSON path), the offending value and a hint. Every check collects ``Problem`` values
instead of stopping at the first, so one run reports everything wrong with a file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, overload

if TYPE_CHECKING:
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
class Problem:
    """One thing wrong with a document, with enough context to fix it without reading qosd's code."""

    location: Location
    message: str
    hint: str = ""
    related: tuple[Location, ...] = field(default=())

    def format(self) -> str:
        loc = self.location
        head = f"{loc}: error: {self.message}"
        if loc.line and loc.path != "$":
            head += f" (at {loc.path})"
        lines = [head]
        for rel in self.related:
            lines.append(f"  see also: {rel}" + (f" ({rel.path})" if rel.line else ""))
        if self.hint:
            lines.append(f"  hint: {self.hint}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.location.to_dict(),
            "message": self.message,
            "hint": self.hint or None,
            "related": [r.to_dict() for r in self.related],
        }


class PolicyError(Exception):
    """Raised when documents cannot become a policy; carries every problem found, in file order."""

    def __init__(self, problems: Iterable[Problem]):
        unique: dict[tuple[Location, str], Problem] = {}
        for p in problems:
            unique.setdefault((p.location, p.message), p)
        self.problems: tuple[Problem, ...] = tuple(sorted(unique.values(), key=lambda p: p.location))
        if not self.problems:
            raise ValueError("PolicyError needs at least one problem")
        super().__init__(self.format())

    def format(self) -> str:
        n = len(self.problems)
        body = "\n".join(p.format() for p in self.problems)
        return f"{body}\n{n} problem{'s' if n != 1 else ''} found"

    def to_json(self) -> str:
        return json.dumps({"valid": False, "problems": [p.to_dict() for p in self.problems]}, indent=2)


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

    def loc(self, path: JsonPath) -> Location:
        """Where ``path`` (under spec) was written, for a problem's ``related`` locations and origins."""

    def add(self, path: JsonPath, message: str, hint: str = "", related: Iterable[Location] = ()) -> None: ...

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
