"""What an adapter reports for one operation.

One result per operation, in the order the operations were given, so the daemon can zip the two for
metrics and the audit log. The status vocabulary is small on purpose: it becomes a Prometheus label.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from engine.model.operations import Operation

Status = Literal["applied", "unchanged", "vanished", "failed", "skipped", "deferred", "started"]
"""applied: written. unchanged: the kernel already held the value, nothing written. vanished: the
target (cgroup, pid) went away between plan and write, which churn makes normal. failed: the kernel
refused or the operation was refused before any write (path escape, bad value). skipped: nothing to
do on this node (dry run, file or controller not offered, resctrl not mounted). deferred: the API
refused for now and said to come back later (an eviction a PodDisruptionBudget blocks, HTTP 429);
nothing happened, and the decision may be made again in a later round. started: begun, and it
completes after the tick (a standalone eviction: SIGTERM sent, the grace period running); its
outcome (applied once the processes are gone, or failed) is reported by a later record."""

STATUSES: tuple[Status, ...] = (
    "applied",
    "unchanged",
    "vanished",
    "failed",
    "skipped",
    "deferred",
    "started",
)


@dataclass(frozen=True)
class OperationResult:
    op: Operation
    status: Status
    error: str | None = None  # why it failed, vanished or was skipped, for an engineer
    attempts: int = 0  # write (or mkdir/rmdir) syscalls tried; 0 when nothing needed writing
    detail: str = ""  # what was done: "cpu.shares 1024 -> 512", "moved 3 tasks, 1 exited"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "operation": self.op.to_dict(),
            "status": self.status,
            "attempts": self.attempts,
        }
        if self.error:
            out["error"] = self.error
        if self.detail:
            out["detail"] = self.detail
        return out
