"""The oracle: what one input did to qosd's public entry points, in one of five classes.

* OK        accepted (and, if it validated, evaluated for one tick and its plan applied to a
            scratch cgroup tree without an exception or a failed operation).
* LOCATED   rejected with a located error: a ``PolicyError`` whose every problem carries a position.
            A problem is located when its Location has ``line >= 1 and column >= 1`` (a file
            position, what ``file:line:col`` in the CLI message comes from) or, for a source that is
            not a file (a custom resource), a JSON path other than ``$``. When the input's only
            mutation put a bad character on line N > 1 and every problem is at 1:1, the error points
            at the wrong place: UNLOCATED (issue 14, defect 9).
* UNLOCATED rejected without a location: a problem without a position, a ``UsageError`` (one line,
            no position), or the mislocation above.
* CRASH     any other exception escaping the entry point (MemoryError and RecursionError included),
            an input that was accepted and then failed at run time (policy rejected for the node
            that validated it, a tick that raised, an operation the adapter answered ``failed``),
            or a worker that died.
* HANG      more than the time limit (5 s) for one input (decided by the runner, which kills it).
"""

from __future__ import annotations

import os
import re
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

from engine.config.errors import PolicyError, Problem, UsageError

OK, LOCATED, UNLOCATED, CRASH, HANG = "OK", "LOCATED", "UNLOCATED", "CRASH", "HANG"
CLASSES = (OK, LOCATED, UNLOCATED, CRASH, HANG)

ENGINE_DIR = os.path.dirname(os.path.abspath(__import__("engine").__file__))


@dataclass
class Outcome:
    cls: str
    signature: str = ""  # what makes two findings the same (empty for OK / LOCATED)
    detail: str = ""  # the message or traceback a reader needs


class AcceptedButFailed(Exception):
    """Raised by a target when an input that the entry point accepted fails later (run time)."""

    def __init__(self, what: str, message: str):
        super().__init__(f"{what}: {message}")
        self.what = what
        self.message = message


class OtherEntry(Exception):
    """An exception from a second entry point fed the same input (``qosd eval --state`` after
    ``qosd run --state-file``): classified like any other, under its own entry name."""

    def __init__(self, entry: str, exc: BaseException):
        super().__init__(f"{entry}: {type(exc).__name__}: {exc}")
        self.entry = entry
        self.inner = exc


def is_located(problem: Problem) -> bool:
    loc = problem.location
    if loc.line >= 1 and loc.column >= 1:
        return True
    return not loc.line and bool(loc.path) and loc.path != "$"


def normalize(message: str, limit: int = 70) -> str:
    """A message reduced to its shape: numbers, quoted values and paths elided, so one defect is
    one signature whatever value triggered it."""
    text = message.splitlines()[0] if message else ""
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", text)
    text = re.sub(r"#x[0-9a-fA-F]+|\\x[0-9a-fA-F]{2}|U\+[0-9A-F]{4}", "#x…", text)
    text = re.sub(r"(/[\w.\-]+)+", "/…", text)
    text = re.sub(r"\d+(\.\d+)?", "N", text)
    return text[:limit]


def classify_problems(problems: Sequence[Problem], surface: str, fault_line: int | None = None) -> Outcome:
    if not problems:
        return Outcome(OK)
    for p in problems:
        if not is_located(p):
            return Outcome(UNLOCATED, f"{surface} | UNLOCATED | {normalize(p.message)}", p.format())
    at_start = all((p.location.line, p.location.column) == (1, 1) for p in problems)
    if fault_line is not None and fault_line > 1 and at_start:
        p = problems[0]
        return Outcome(
            UNLOCATED,
            f"{surface} | AT 1:1 | {normalize(p.message)}",
            f"the fault is on line {fault_line}, the error says 1:1:\n{p.format()}",
        )
    return Outcome(LOCATED)


def innermost_frame(tb: TracebackType | None) -> str:
    """``engine/<file>:<function>`` of the innermost traceback frame inside the engine package,
    else the innermost frame at all."""
    frames = traceback.extract_tb(tb)
    for fr in reversed(frames):
        if fr.filename.startswith(ENGINE_DIR):
            rel = os.path.relpath(fr.filename, os.path.dirname(ENGINE_DIR))
            return f"{rel}:{fr.name}"
    if frames:
        fr = frames[-1]
        return f"{os.path.basename(fr.filename)}:{fr.name}"
    return "?"


def classify_exception(exc: BaseException, surface: str, fault_line: int | None = None) -> Outcome:
    if isinstance(exc, OtherEntry):
        return classify_exception(exc.inner, f"{surface} ({exc.entry})", fault_line)
    if isinstance(exc, PolicyError):
        return classify_problems(exc.problems, surface, fault_line)
    if isinstance(exc, UsageError):
        return Outcome(UNLOCATED, f"{surface} | UsageError | {normalize(str(exc))}", str(exc))
    if isinstance(exc, AcceptedButFailed):
        return Outcome(
            CRASH,
            f"{surface} | {exc.what} | {normalize(exc.message)}",
            f"{exc.what}: {exc.message}",
        )
    detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if len(detail) > 8000:
        detail = detail[:2000] + "\n...\n" + detail[-6000:]
    return Outcome(CRASH, f"{surface} | {type(exc).__name__} | {innermost_frame(exc.__traceback__)}", detail)
