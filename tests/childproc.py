"""Run one function in a forked child and report what it returned or raised and how much memory
it really used.

Hostile inputs (templates, rule files) must be refused *before* anything large is built. The outcome
alone cannot tell "refused after building 800 MB" from "refused before building anything", so the
child reports its peak resident-set growth: ``ru_maxrss`` after the call minus ``ru_maxrss`` at
its start (a forked child's peak starts at its resident set at the fork, not at the parent's
peak). The address-space limit is only a safety net: a regression then ends in a MemoryError in
the child instead of taking the machine, or the test run, down with it. The timeout is a hang
guard, not a performance assertion.
"""

from __future__ import annotations

import multiprocessing
import resource
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

MiB = 1 << 20
# Safety net on top of what the child maps at the fork: far above what any refusal needs, far
# below the gigabytes of the blow-ups the tests are about.
ADDRESS_SPACE_EXTRA = 768 * MiB
# What a refusal may add to the resident set: generous (refusals need well under 10 MB), and far
# below the 300 MB - 2 GB that the unguarded payloads reach.
PEAK_GROWTH_LIMIT = 100 * MiB
HANG_GUARD_S = 60.0

# The ``fork`` real-part marker makes a skip fail the run where fork and /proc are there
# (tests/realparts.py detects them on its own, not through this condition).
_FORK_SKIP = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="children are forked and measured with /proc (Linux only)"
)


def needs_fork(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a test that runs its payload through :func:`run_in_child`."""
    marked: Callable[..., Any] = pytest.mark.fork(_FORK_SKIP(fn))
    return marked


@dataclass(frozen=True)
class ChildResult:
    kind: str  # "returned" | "raised" | "died" | "hung"
    value: Any  # what fn returned; for "raised": (exception type name, message)
    peak_growth: int  # bytes the resident set grew by at its peak during the call

    def describe(self) -> str:
        return f"{self.kind}: {str(self.value)[:300]} (peak RSS +{self.peak_growth / MiB:.1f} MiB)"


def _peak_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux


def _limit_address_space(extra: int) -> None:
    with open("/proc/self/statm") as fh:
        mapped = int(fh.read().split()[0]) * resource.getpagesize()
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = mapped + extra
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _child(conn: Any, fn: Callable[..., Any], args: tuple[Any, ...], extra: int) -> None:
    _limit_address_space(extra)
    start = _peak_bytes()
    try:
        outcome: tuple[str, Any] = ("returned", fn(*args))
    except BaseException as exc:
        outcome = ("raised", (type(exc).__name__, str(exc)[:1000]))
    growth = _peak_bytes() - start
    try:
        conn.send((*outcome, growth))
    except BaseException as exc:  # an unpicklable result is a test bug; say so
        conn.send(("raised", ("SendError", f"result could not be sent back: {exc}"), growth))
    conn.close()


def run_in_child(
    fn: Callable[..., Any], *args: Any, extra: int = ADDRESS_SPACE_EXTRA, timeout: float = HANG_GUARD_S
) -> ChildResult:
    """``fn(*args)`` in a forked child (fn and its result must be picklable, or module-level)."""
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, fn, args, extra), daemon=True)
    proc.start()
    send.close()
    try:
        if recv.poll(timeout):
            try:
                kind, value, growth = recv.recv()
                return ChildResult(kind, value, growth)
            except EOFError:
                proc.join(5)
                return ChildResult("died", f"child exited with {proc.exitcode}", 0)
        return ChildResult("hung", f"no answer within {timeout}s", 0)
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
        recv.close()
