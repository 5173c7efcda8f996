"""The recording adapter: dry-run and audit without side effects.

It executes nothing. It keeps every operation it is given, in order, and answers each with a
*skipped* result carrying the reason, so a dry-run daemon logs, audits and counts exactly what the
real executor would have been asked to do. Nothing here touches the filesystem or the network,
which is what makes "dry-run/audit is side-effect free" a property of the wiring, not of care.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.adapters.result import OperationResult
from engine.model.operations import Operation


class RecordingExecutor:
    def __init__(self, reason: str = "dry-run: recorded, not executed", limit: int | None = 10_000):
        self.reason = reason
        self.limit = limit  # keep at most this many (oldest dropped): a long dry run must not grow
        self.recorded: list[Operation] = []

    def apply(self, operations: Sequence[Operation]) -> list[OperationResult]:
        self.recorded.extend(operations)
        if self.limit is not None and len(self.recorded) > self.limit:
            del self.recorded[: len(self.recorded) - self.limit]
        return [OperationResult(op, "skipped", self.reason) for op in operations]

    def finished(self) -> list[OperationResult]:
        return []  # nothing is started, so nothing completes later

    def wait(self, timeout: float) -> bool:
        return True

    def to_dicts(self) -> list[dict[str, Any]]:
        return [op.to_dict() for op in self.recorded]
