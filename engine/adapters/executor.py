"""One executor for the daemon: each operation to the adapter of its kind, in the order given.

Order matters across kinds as well as within them (a resctrl group is created before its schemata,
a parent cgroup loosened before its child), so operations are dispatched one at a time rather than
grouped per adapter. An operation whose adapter is not configured on this node (no Kubernetes
client in standalone mode, say) is answered *skipped* with that reason.

One operation never stops the others: whatever an adapter raises for one operation (an OSError it
did not classify, a ValueError from a value that slipped past validation, a bug) becomes a *failed*
result for that operation, with the exception named, and the rest of the plan is still applied. The
daemon then writes its audit record and metrics as for any failure. The traceback is logged once per
(operation kind, exception type), since the same bad value fails again every tick.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from engine.adapters.cgroup import CgroupAdapter
from engine.adapters.resctrl import RESCTRL_OPS, ResctrlAdapter
from engine.adapters.result import OperationResult
from engine.model.operations import Operation, WriteCgroup

Handler = Callable[[Operation], OperationResult]


class Finishing(Protocol):
    """An adapter whose operations complete after their tick (standalone evictions): their
    outcomes are collected later, and the daemon waits for them before it exits."""

    def finished(self) -> list[OperationResult]: ...

    def wait(self, timeout: float) -> bool: ...


log = logging.getLogger("qosd.adapters")


class NodeExecutor:
    """``others`` maps an operation kind (``evictPod``, ``setNodeTaint``...) to its handler."""

    def __init__(
        self,
        cgroup: CgroupAdapter | None = None,
        resctrl: ResctrlAdapter | None = None,
        others: Mapping[str, Handler] | None = None,
        finishing: Sequence[Finishing] = (),
    ):
        self.cgroup = cgroup
        self.resctrl = resctrl
        self.others = dict(others or {})
        self.finishing = tuple(finishing)
        self._traced: set[tuple[str, str]] = set()

    def apply(self, operations: Sequence[Operation]) -> list[OperationResult]:
        return [self.apply_one(op) for op in operations]

    def finished(self) -> list[OperationResult]:
        """Outcomes of operations started in an earlier tick that completed since the last call."""
        return [r for adapter in self.finishing for r in adapter.finished()]

    def wait(self, timeout: float) -> bool:
        """Until nothing started is still in progress, at most ``timeout`` seconds in all."""
        deadline = time.monotonic() + timeout
        return all(adapter.wait(max(0.0, deadline - time.monotonic())) for adapter in self.finishing)

    def apply_one(self, op: Operation) -> OperationResult:
        """The adapter's result for ``op``; an exception it raised becomes a failed result."""
        try:
            return self._dispatch(op)
        except Exception as exc:  # one operation must not take the rest of the plan down
            return self._raised(op, exc)

    def _raised(self, op: Operation, exc: Exception) -> OperationResult:
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        key = (op.kind, type(exc).__name__)
        if key not in self._traced:
            self._traced.add(key)
            log.error(
                "adapter raised for one operation; it is reported failed and the plan goes on "
                "(traceback logged once per operation kind and exception type)",
                exc_info=exc,
                extra={"fields": {**op.to_dict(), "error": reason}},
            )
        return OperationResult(op, "failed", f"{op.kind} raised {reason}")

    def _dispatch(self, op: Operation) -> OperationResult:
        if isinstance(op, WriteCgroup):
            if self.cgroup is None:
                return OperationResult(op, "skipped", "no cgroup adapter configured")
            return self.cgroup.apply_one(op)
        if isinstance(op, RESCTRL_OPS):
            if self.resctrl is None:
                return OperationResult(op, "skipped", "no resctrl adapter configured")
            return self.resctrl.apply_one(op)
        handler = self.others.get(op.kind)
        if handler is None:
            return OperationResult(op, "skipped", f"no adapter for {op.kind} on this node")
        return handler(op)
