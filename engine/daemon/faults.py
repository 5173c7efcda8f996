"""Faults that come back every tick: logged the first time, then at most every REPORT_SECONDS, and
counted; a file the daemon writes beside its enforcement says on ``/readyz`` why it fails."""

from __future__ import annotations

import abc
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client import Counter

from engine.adapters.fsio import errno_name
from engine.daemon.logs import log

REPORT_SECONDS = 60.0  # a fault that repeats every tick is logged at most this often per key
MAX_THROTTLE_KEYS = 4096  # distinct faults remembered; the oldest reports are forgotten beyond


class Throttle:
    """When to log a fault that comes back every tick: the first time for each key, then at most
    once every ``every`` seconds with the number of repeats suppressed in between. One warning a
    second for the same bad value buries everything else in the node's log; silence after the
    first would hide that it still happens. ``clear`` (the fault went away) makes the next
    occurrence of the key log at once."""

    def __init__(self, every: float = REPORT_SECONDS, clock: Callable[[], float] = time.monotonic):
        self.every = every
        self.clock = clock
        self._seen: dict[Any, tuple[float, int]] = {}  # key -> (last report, repeats suppressed since)

    def admit(self, key: Any) -> int | None:
        """None to stay silent; otherwise log now, saying this many repeats were suppressed."""
        now = self.clock()
        seen = self._seen.get(key)
        if seen is not None and now - seen[0] < self.every:
            self._seen[key] = (seen[0], seen[1] + 1)
            return None
        self._seen.pop(key, None)
        if len(self._seen) >= MAX_THROTTLE_KEYS:
            del self._seen[next(iter(self._seen))]  # insertion order: the longest unreported
        self._seen[key] = (now, 0)
        return seen[1] if seen is not None else 0

    def clear(self, match: Callable[[Any], bool]) -> None:
        if self._seen:
            for key in [k for k in self._seen if match(k)]:
                del self._seen[key]


def describe_exception(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.errno is not None:
        return f"{exc.strerror or exc} ({errno_name(exc)})"
    return f"{type(exc).__name__}: {exc}"


class FileFault(abc.ABC):
    """A file the daemon writes every tick beside its enforcement (audit log, state file), and what
    went wrong writing it: counted, reported on ``/readyz`` until a write succeeds, logged at the
    first failure and then at most every REPORT_SECONDS, and logged again when it recovers."""

    what = "file"

    def __init__(self, path: Path, failures: Counter, clock: Callable[[], float] = time.monotonic):
        self.path = path
        self.failures = failures
        self.error: str | None = None  # why the last write failed; None once one succeeds
        self.lost = 0  # failed writes since the last successful one
        self._throttle = Throttle(clock=clock)

    def failed(self, exc: Exception) -> None:
        """One write lost to ``exc``: count it, and log it unless the last report was recent."""
        self.error = describe_exception(exc)
        self.lost += 1
        self.failures.inc()
        suppressed = self._throttle.admit("write")
        if suppressed is None:
            return
        log.warning(
            self.failure_message() + f" (reported at most every {REPORT_SECONDS:g}s)",
            exc_info=None if isinstance(exc, OSError) else exc,  # anything else is a bug: show where
            extra={"fields": {"path": str(self.path), "error": self.error, **self.counts(suppressed)}},
        )

    def succeeded(self) -> None:
        if self.error is not None:
            fields = {"path": str(self.path), **self.counts(None)}
            log.info(f"{self.what} writable again", extra={"fields": fields})
        self.error, self.lost = None, 0
        self._throttle.clear(lambda _key: True)

    @abc.abstractmethod
    def failure_message(self) -> str:
        """The warning logged when a write fails."""

    @abc.abstractmethod
    def counts(self, suppressed: int | None) -> dict[str, int]:
        """The log fields: what was lost since the last report (``suppressed`` repeats not logged),
        or since the last good write (``suppressed`` None, on recovery)."""
