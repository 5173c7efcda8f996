"""The audit log (``--audit-log``): JSON Lines, one Evaluation document per tick that decided
something, each intent with its provenance and each operation's result; ``qosd explain`` reads it."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from engine.daemon.faults import FileFault
from engine.daemon.parts import OperationOutcome
from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState
from engine.resources import API_VERSION
from engine.tick import TickResult


def audit_record(result: TickResult, outcomes: Sequence[OperationOutcome]) -> dict[str, Any] | None:
    """The tick as an Evaluation document, reduced to its decisions; None for a tick that decided nothing.

    A steady tick re-derives every pooled cpuset as an intent that changes nothing; logging those
    every second would bury the decisions. Kept: every intent that became an operation or was held,
    every non-cgroup intent, and the operations with their results."""
    ev, plan = result.evaluation, result.plan
    if not (plan.operations or plan.held or ev.skipped or ev.workload_issues):
        return None
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

    def append(self, record: Mapping[str, Any]) -> bool:
        try:
            append_record(self.path, (json.dumps(record, default=str) + "\n").encode("utf-8"))
        except Exception as exc:
            self.failed(exc)
            return False
        self.succeeded()
        return True

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
