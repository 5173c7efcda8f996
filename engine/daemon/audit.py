"""The audit log (``--audit-log``): JSON Lines, one Evaluation document per tick that decided or changed
something, each intent with its provenance and each operation's result; ``qosd explain`` reads it.

A tick is recorded when an operation was performed (applied, or started: an eviction), or when what
the tick decided differs from the last tick: a rule starts or stops firing, a guard holds something
else, a note (skipped, workload issue) appears, changes or goes, an adapter refuses or fails
differently. Operations that changed nothing (unchanged; skipped: no adapter here) are no news, nor
is a rule whose only effect they were. A steady node, which re-plans the same publish and notes
every second, writes nothing (it wrote a ~2 KB record on each of 637 ticks of 637 before). The file
is rotated by size (``--audit-log-max-bytes``, ``--audit-log-keep``): ``audit.jsonl`` becomes
``audit.jsonl.1`` and so on, the oldest dropped, so the host path a DaemonSet writes to stays
bounded."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from prometheus_client import Counter

from engine.daemon.faults import FileFault
from engine.daemon.parts import OperationOutcome
from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState
from engine.resources import API_VERSION
from engine.tick import TickResult


def audit_record(result: TickResult, outcomes: Sequence[OperationOutcome]) -> dict[str, Any] | None:
    """The tick as an Evaluation document, reduced to its decisions; None for a tick that decided nothing."""
    ev, plan = result.evaluation, result.plan
    if not (plan.operations or plan.held or ev.skipped or ev.workload_issues):
        return None
    return tick_document(result, outcomes)


def tick_document(result: TickResult, outcomes: Sequence[OperationOutcome]) -> dict[str, Any]:
    """The tick as an Evaluation document with its results, reduced to its decisions.

    A steady tick re-derives every pooled cpuset as an intent that changes nothing; logging those
    every second would bury the decisions. Kept: every intent that became an operation or was held,
    every non-cgroup intent, and the operations with their results."""
    ev, plan = result.evaluation, result.plan
    doc = {
        "apiVersion": API_VERSION,
        "kind": "Evaluation",
        **result.to_dict(),
        "state": result.state.to_dict(),
    }
    touched = {(getattr(op, "path", None), getattr(op, "file", None)) for op in plan.operations}
    touched |= {(getattr(h.intent, "path", None), getattr(h.intent, "file", None)) for h in plan.held}
    doc["intents"] = [
        i.to_dict()
        for i in ev.intents
        if i.kind != "cgroup" or (getattr(i, "path", None), getattr(i, "file", None)) in touched
    ]
    doc["results"] = [o.to_dict() for o in outcomes]
    return doc


PERFORMED = frozenset({"applied", "started"})


QUIET = frozenset({"unchanged", "skipped"})  # nothing happened: the value was there, or no adapter here


def decision_signature(result: TickResult, outcomes: Sequence[OperationOutcome]) -> tuple[Any, ...]:
    """What a tick decided, as equal signatures on consecutive ticks mean the second decided nothing
    new. Left out: the operations it performed (a tick that performs is recorded anyway), operations
    that changed nothing (the adapter found the value in place, or has none here: standalone
    publishing), and rules whose only effect was such operations (a publish rule that re-announces
    the same amount on its report interval). Kept: failures, holds, notes (without their numbers,
    which tick on) and workload issues."""
    ev, plan = result.evaluation, result.plan
    ops = []
    quiet: set[str] = set()
    loud: set[str] = {h.intent.provenance.rule for h in plan.held}
    for op, o in zip(plan.operations, outcomes, strict=False):
        rule = str(getattr(op, "rule", ""))
        if o.status in QUIET:
            quiet.add(rule)
            continue
        loud.add(rule)
        if o.status in PERFORMED:
            continue
        target = getattr(op, "path", None) or getattr(op, "name", None) or getattr(op, "key", None)
        ops.append((op.kind, getattr(op, "file", None), target, o.status, _shape(o.error or "")))
    return (
        tuple(r for r in ev.fired if r not in quiet or r in loud),
        tuple(sorted(ops, key=repr)),
        tuple((h.intent.kind, h.intent.target, h.intent.provenance.rule, h.reason) for h in plan.held),
        tuple((sk.rule, _shape(sk.reason)) for sk in ev.skipped),
        tuple((w.uid, tuple(w.errors)) for w in ev.workload_issues),
    )


_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def _shape(text: str) -> str:
    """A note without its numbers: "cooldown: 2s of 4s left" and "cooldown: 1s of 4s left", or a
    dead band's ``|5120 - 5000| < 500`` and ``|5100 - 5000| < 500``, are the same note ticking on."""
    return _NUMBER.sub("#", text)


def finished_record(
    done: Sequence[OperationOutcome], state: EngineState, engine: Engine, now: float
) -> dict[str, Any]:
    """An Evaluation document of operations that completed after the tick that started them (no
    new decisions: the intents are in the record of that tick)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "Evaluation",
        "time": now,
        "policy": {"hash": engine.policy.hash, "generation": engine.generation},
        "fired": [],
        "intents": [],
        "skipped": [],
        "workloadIssues": [],
        "operations": [o.to_dict()["operation"] for o in done],
        "held": [],
        "results": [o.to_dict() for o in done],
        "state": state.to_dict(),
    }


def append_record(path: Path, data: bytes) -> None:
    """Append one whole line in one write(2). A failed or short write is undone (the file is cut back
    to its previous size) so that ``qosd explain`` never meets half a record; OSError says why."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        st = os.fstat(fd)
        try:
            written = os.write(fd, data)
            if written != len(data):
                raise OSError(errno.ENOSPC, f"short write: {written} of {len(data)} bytes")
        except OSError:
            if stat.S_ISREG(st.st_mode):
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, st.st_size)
            raise
    finally:
        os.close(fd)


class AuditLog(FileFault):
    """The ``--audit-log`` file, and what went wrong writing it.

    A record that cannot be written (a full disk, a read-only remount, a removed directory) is lost
    and counted (``qosd_audit_write_failures_total``), ``/readyz`` says why until a write succeeds
    again, and the log says so at the first failure and then at most every REPORT_SECONDS.
    The tick is not failed: the operations were applied, only their record is missing, and
    stopping enforcement because of a full disk would be the worse outcome."""

    what = "audit log"

    def __init__(
        self,
        path: Path,
        failures: Counter,
        clock: Callable[[], float] = time.monotonic,
        max_bytes: int = 0,
        keep: int = 3,
    ):
        super().__init__(path, failures, clock)
        self.max_bytes = max_bytes  # 0: never rotate
        self.keep = keep
        self._last: tuple[Any, ...] | None = None
        self.unchanged = 0  # ticks not recorded since the last record: they decided nothing new

    def tick(
        self, result: TickResult, outcomes: Sequence[OperationOutcome], facts: Mapping[str, Any] | None = None
    ) -> bool:
        """Record a tick if it decided or changed something (see the module docstring). With
        ``facts`` (``--audit-log-facts``) every tick is recorded, with the facts it was decided on:
        a replay needs each tick, the quiet ones too (sustain timers count them)."""
        if facts is not None:
            return self.append({**tick_document(result, outcomes), "facts": facts})
        sig = decision_signature(result, outcomes)
        performed = any(o.status in PERFORMED for o in outcomes)
        if not performed and sig == self._last:
            self.unchanged += 1
            return False
        record = audit_record(result, outcomes)
        if record is None:
            self._last = sig
            return False
        if self.append(record):
            self._last, self.unchanged = sig, 0
            return True
        return False

    def append(self, record: Mapping[str, Any]) -> bool:
        data = (json.dumps(record, default=str) + "\n").encode("utf-8")
        try:
            self._rotate(len(data))
            append_record(self.path, data)
        except Exception as exc:
            self.failed(exc)
            return False
        self.succeeded()
        return True

    def _rotate(self, incoming: int) -> None:
        """Shift audit.jsonl -> .1 -> .2 ... (dropping the one past ``keep``) when this record would
        take the file past ``max_bytes``. Only regular files rotate: /dev/stdout or a pipe does not."""
        if not self.max_bytes:
            return
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0 or st.st_size + incoming <= self.max_bytes:
            return
        oldest = self.path.with_name(f"{self.path.name}.{self.keep}")
        with contextlib.suppress(FileNotFoundError):
            oldest.unlink()
        for n in range(self.keep - 1, 0, -1):
            with contextlib.suppress(FileNotFoundError):
                os.replace(
                    self.path.with_name(f"{self.path.name}.{n}"),
                    self.path.with_name(f"{self.path.name}.{n + 1}"),
                )
        if self.keep > 0:
            os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        else:
            os.truncate(self.path, 0)

    def failure_message(self) -> str:
        return "audit record lost: writing the audit log failed; enforcement continues"

    def counts(self, suppressed: int | None) -> dict[str, int]:
        return {"recordsLost": self.lost if suppressed is None else suppressed + 1}

    def problem(self) -> str | None:
        """Why readiness fails while records are lost (enforcement goes on), or None."""
        if self.error is None:
            return None
        return (
            f"audit log {self.path} failing: {self.error}; "
            f"{self.lost} record(s) lost since the last good write"
        )
