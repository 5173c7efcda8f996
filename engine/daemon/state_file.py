"""The write-ahead state file (``--state-file``): loaded at start, saved before each tick's
operations, and what the tick may still apply when a save fails (see engine.daemon, "Write-ahead
state" and "When the state file cannot be saved")."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client import Counter

from engine.adapters.fsio import errno_name
from engine.daemon.faults import FileFault, describe_exception
from engine.daemon.logs import log
from engine.evaluate.state import MAX_STATE_BYTES, CorruptState, EngineState, state_from_json
from engine.model.operations import EvictPod
from engine.plan.planner import Held, Plan
from engine.resources import API_VERSION
from engine.tick import TickResult


def load_state(path: Path | None) -> EngineState:
    """The state a previous run left, or a fresh one. Never raises: a daemon that cannot start
    because of its own state file would crash-loop in a DaemonSet and never repair it.

    A file that is not a state qosd wrote (wrong shape, truncated, garbage; schemas/state.schema.json)
    is moved aside to ``<file>.corrupt`` for a post-mortem, with a warning, and the run starts with
    empty timers and no eviction records (a pod can still not be evicted twice: each eviction
    carries the pod's UID). A file that cannot be read at all (permissions) is left where it is."""
    if path is None:
        return EngineState()
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_STATE_BYTES + 1)
    except FileNotFoundError:
        return EngineState()
    except OSError as exc:
        log.warning(
            "state file unreadable; starting with empty timers and no eviction records",
            extra={"fields": {"path": str(path), "error": describe_exception(exc)}},
        )
        return EngineState()
    try:
        return state_from_json(data)
    except CorruptState as exc:
        aside = path.with_name(path.name + ".corrupt")
        try:
            os.replace(path, aside)
            moved: str | None = str(aside)
        except OSError as move:
            moved = None
            log.warning(
                "could not move the corrupt state file aside; the next tick's save replaces it",
                extra={"fields": {"path": str(path), "error": f"{move.strerror} ({errno_name(move)})"}},
            )
        log.warning(
            "state file is not a state qosd wrote; moved aside, starting with empty timers and no "
            "eviction records",
            extra={"fields": {"path": str(path), "movedTo": moved, "error": str(exc)}},
        )
        return EngineState()


def save_state(path: Path, state: EngineState, generation: int, now: float) -> None:
    """Atomic replace: a crash leaves either the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.tmp")
    body = json.dumps(
        {
            "apiVersion": API_VERSION,
            "kind": "EngineState",
            "time": now,
            "generation": generation,
            "state": state.to_dict(),
        }
    )
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(body)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class StateFile(FileFault):
    """The ``--state-file``, and what went wrong saving it (see engine.daemon's docstring for the rule:
    while a save fails, evictions wait and everything repeatable is applied)."""

    what = "state file"

    def __init__(self, path: Path, failures: Counter, clock: Callable[[], float] = time.monotonic):
        super().__init__(path, failures, clock)
        self.held = 0  # evictions held back since the last good save
        self._held_reported = 0

    def save(self, state: EngineState, generation: int, now: float, evictions: int = 0) -> bool:
        """Save; False when it failed, and then the ``evictions`` of this tick are held back."""
        try:
            save_state(self.path, state, generation, now)
        except Exception as exc:
            self.held += evictions
            self.failed(exc)
            return False
        self.succeeded()
        self.held = self._held_reported = 0
        return True

    def failure_message(self) -> str:
        return (
            "state file save failed: evictions are held back until the write-ahead record can be "
            "saved; cgroup, resctrl and node status operations are still applied"
        )

    def counts(self, suppressed: int | None) -> dict[str, int]:
        if suppressed is None:
            return {"failedSaves": self.lost, "evictionsHeld": self.held}
        held, self._held_reported = self.held - self._held_reported, self.held
        return {"failedSaves": suppressed + 1, "evictionsHeld": held}

    def problem(self) -> str | None:
        if self.error is None:
            return None
        return (
            f"state file {self.path} failing: {self.error}; {self.lost} save(s) failed and "
            f"{self.held} eviction(s) held back since the last good save"
        )


def hold_back_evictions(result: TickResult, previous: EngineState, why: str) -> TickResult:
    """The tick as it may be applied without its write-ahead record: evictions held, with the
    reason, and their rules' firing (latches, cooldown, rate-limit window) as it was before the
    tick, so the same decision is made again on the first tick whose save succeeds rather than
    waiting out a cooldown or a latch for an eviction that never happened. Everything else (sustain
    timers, other rules, what was published) moves on as computed."""
    evicted = result.plan.evicted
    if not evicted:
        return result
    reason = f"held back: the write-ahead state could not be saved ({why}); decided again once it can"
    plan = Plan(
        tuple(op for op in result.plan.operations if not isinstance(op, EvictPod)),
        (*result.plan.held, *(Held(intent, reason) for intent in evicted)),
    )
    rules = {intent.provenance.rule for intent in evicted}

    def of(key: str) -> bool:
        return key.split("|", 1)[0] in rules

    new = result.evaluation.state  # before record_evictions: none of these pods is being evicted
    state = dataclasses.replace(
        new,
        latched=frozenset({k for k in new.latched if not of(k)} | {k for k in previous.latched if of(k)}),
        last_fired={
            **{k: v for k, v in new.last_fired.items() if k not in rules},
            **{k: v for k, v in previous.last_fired.items() if k in rules},
        },
        fired_at={
            **{k: v for k, v in new.fired_at.items() if k not in rules},
            **{k: v for k, v in previous.fired_at.items() if k in rules},
        },
    )
    return TickResult(result.evaluation, plan, state)
