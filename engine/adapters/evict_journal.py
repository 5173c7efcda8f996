"""The standalone evictions in progress, kept on disk so that a restarted daemon finishes them.

A standalone eviction spans its grace period: SIGTERM now, SIGKILL to whatever is left when the
grace period ends (engine.adapters.evict). The kubelet keeps that timer for a pod; without one, a
daemon restarted in between (an upgrade, a crash, the DaemonSet's rollout) lost it, and a process
that ignored SIGTERM ran on although its eviction had begun. The journal is a small JSON file
beside the state file (``<state file>.evictions``), replaced atomically whenever an eviction starts,
steps or ends. At start the adapter reads it and resumes each eviction with the grace period that
was left: SIGKILL when it is over, *applied* once the processes are gone, as if nothing happened
in between. The time left is kept in seconds from the moment of the save plus the wall clock of
that moment, so neither a new monotonic clock nor the time the daemon was down shifts a deadline.

A journal that cannot be read (garbage, a file of another kind) is reported and set aside: a
daemon that cannot start because of its own bookkeeping would crash-loop in a DaemonSet.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.model.operations import EvictPod

log = logging.getLogger("qosd.adapters.evict")

SUFFIX = ".evictions"
VERSION = 1


@dataclass(frozen=True)
class Resumed:
    """One eviction read back: its operation, cgroup, seconds left of the grace period (and of the
    SIGKILL timeout, once SIGKILL was sent) at load time, and its counts so far."""

    op: EvictPod
    path: str
    started_ago: float
    term_left: float
    kill_left: float | None
    signalled: int
    killed: int


Entry = tuple[EvictPod, str, float, float, float | None, int, int]  # op, path, started, term, kill, counts


def journal_of(state_file: Path | None) -> Path | None:
    """Where the evictions of a daemon with this --state-file are kept (none without one)."""
    return state_file.with_name(state_file.name + SUFFIX) if state_file is not None else None


class EvictionJournal:
    """Reads and replaces the journal file; ``wall`` is the wall clock (injectable for tests)."""

    def __init__(self, path: Path, wall: Callable[[], float] = time.time) -> None:
        self.path = path
        self.wall = wall

    def load(self) -> list[Resumed]:
        """The evictions a previous daemon left unfinished (none when there is no journal)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except OSError as exc:
            log.warning("cannot read the eviction journal %s: %s; not resuming", self.path, exc.strerror)
            return []
        try:
            return self._parse(json.loads(text))
        except (ValueError, TypeError, KeyError) as exc:
            log.warning(
                "the eviction journal %s is not one qosd wrote (%s); set aside, nothing resumed",
                self.path,
                exc,
            )
            return []

    def _parse(self, data: Any) -> list[Resumed]:
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise ValueError(f"expected an object with version {VERSION}")
        down = max(self.wall() - float(data["savedAt"]), 0.0)
        out = []
        for item in data["evictions"]:
            op = item["op"]
            kill_in = item.get("killIn")
            out.append(
                Resumed(
                    op=EvictPod(
                        uid=str(op["uid"]),
                        namespace=str(op["namespace"]),
                        name=str(op["name"]),
                        grace_period_seconds=_grace(op["gracePeriodSeconds"]),
                        reason=str(op["reason"]),
                        rule=str(op["rule"]),
                        killer=str(op.get("killer", "evictionAPI")),
                    ),
                    path=str(item["path"]),
                    started_ago=float(item["startedAgo"]) + down,
                    term_left=float(item["termIn"]) - down,
                    kill_left=None if kill_in is None else float(kill_in) - down,
                    signalled=int(item["signalled"]),
                    killed=int(item["killed"]),
                )
            )
        return out

    def save(self, entries: Iterable[Entry], now: float) -> None:
        """Replace the journal with these evictions (deadlines on the adapter's clock, at ``now``);
        an empty list removes it. A failure is logged: the evictions go on, unjournaled."""
        items = [
            {
                "op": op.to_dict(),
                "path": path,
                "startedAgo": now - started,
                "termIn": term - now,
                "killIn": None if kill is None else kill - now,
                "signalled": signalled,
                "killed": killed,
            }
            for op, path, started, term, kill, signalled, killed in entries
        ]
        try:
            if not items:
                self.path.unlink(missing_ok=True)
                return
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text(
                json.dumps({"version": VERSION, "savedAt": self.wall(), "evictions": items}), encoding="utf-8"
            )
            os.replace(tmp, self.path)
        except OSError as exc:
            log.warning(
                "cannot save the eviction journal %s: %s; a restart now would not finish the evictions "
                "in progress (their SIGKILL after the grace period)",
                self.path,
                exc.strerror,
            )


def _grace(value: Any) -> int | None:
    return None if value is None else int(value)
