"""What the daemon's loop drives, as protocols: the node source, background services, executors and
the outcomes they report. engine.daemon.wiring picks the implementations."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from engine.evaluate.engine import Engine
from engine.model.facts import Snapshot
from engine.model.operations import Operation
from engine.tick import TickResult


class NodeSource(Protocol):
    """Observes the node once per tick: topology, workloads, metrics and the cgroup values qosd manages.

    ``adopt`` hears of each new policy generation (which windows and facts to keep), ``applied`` of
    each tick's plan and outcomes (which files to keep observing, what was just written)."""

    def collect(self) -> Snapshot: ...

    def adopt(self, engine: Engine) -> None: ...

    def applied(self, result: TickResult, outcomes: Sequence[OperationOutcome]) -> None: ...

    def observe(self, wanted: Mapping[str, Sequence[str]]) -> Mapping[str, Mapping[str, str]]:
        """Read these cgroup files now (logical names), for files the snapshot did not carry."""
        ...


class Service(Protocol):
    """A background part the daemon starts before its first tick and stops after its last: watches,
    watchers, status writers. ``wait_synced`` says whether its first view of the world is complete."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


class OperationOutcome(Protocol):
    """What an adapter reports for one operation (see engine.adapters)."""

    @property
    def status(self) -> str: ...

    @property
    def error(self) -> str | None: ...

    def to_dict(self) -> dict[str, Any]: ...


class Executor(Protocol):
    """Executes operations in the order given and reports one outcome per operation; decides nothing."""

    def apply(self, operations: Sequence[Operation]) -> Sequence[OperationOutcome]: ...

    def finished(self) -> Sequence[OperationOutcome]:
        """Outcomes of operations an earlier tick started that completed since (standalone evictions)."""
        ...

    def wait(self, timeout: float) -> bool:
        """Until nothing started is in progress (at most ``timeout`` seconds); True when nothing is."""
        ...
