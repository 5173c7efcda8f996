"""What a simulation run takes and reports: its options, the timeline's events, the per-tick numbers and
the ``kind: Simulation`` document."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.config.policy import Policy
from engine.plan.planner import Guards
from engine.resources import API_VERSION
from engine.sources.trace import (
    Trace,
    clock_text,
)


@dataclass(frozen=True)
class Options:
    """What a simulation run may vary besides the trace and the policy."""

    guards: Guards = field(default_factory=Guards)
    risk_cpu_percent: float = 90.0
    risk_memory_percent: float = 90.0
    keep_ticks: bool = False  # keep every tick's Evaluation document (JSON output)
    publish_delta_percent: float = 10.0  # timeline: a publish is news when it moves this % of capacity
    risk_gap_seconds: float = 300.0  # timeline: risk episodes closer than this are one episode
    performed_gap_seconds: float = 1800.0  # timeline: a rule's operations closer than this are one line
    progress: Callable[[int, int], None] | None = None


@dataclass(frozen=True)
class Event:
    """One line of the timeline."""

    time: float
    offset: float
    kind: str  # fired, cleared, performed, evict, admit, publish, risk, taint, skipped, issue, warning
    message: str
    rule: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "offset": self.offset,
            "clock": clock_text(self.offset),
            "kind": self.kind,
            "rule": self.rule,
            "message": self.message,
        }


@dataclass
class TickNumbers:
    """The simulator's own numbers for one tick (what the plot and the summary are made of)."""

    time: float
    offset: float
    duration: float
    system_cpu: float
    system_memory: float
    online_cpu: float  # online and static non-batch pods
    online_memory: float
    batch_cpu: float  # running batch pods (reclaimed classes), after CPU yields to online
    batch_memory: float
    cpu_without: float  # percent of capacity: outside-pod + online
    cpu_with: float  # percent of capacity: + batch (what the node ran)
    memory_without: float
    memory_with: float
    published: dict[str, float | None]  # resource kind (cpu, memory) -> cores / bytes, None = withdrawn
    batch_requested_cpu: float
    batch_requested_memory: float
    batch_running: int
    batch_waiting: int
    admitted: int
    finished: int
    evicted: list[dict[str, str]]
    fired: list[str]
    risk_without: list[str]  # which resources are over the risk threshold without reclaim
    risk_with: list[str]
    batch_cpu_allowed: float  # cores the batch pods' cgroup allowed (suppression); capacity when unlimited

    def to_dict(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "offset": self.offset,
            "clock": clock_text(self.offset),
            "durationSeconds": self.duration,
            "usage": {
                "system": {"cpuCores": self.system_cpu, "memoryBytes": self.system_memory},
                "online": {"cpuCores": self.online_cpu, "memoryBytes": self.online_memory},
                "batch": {"cpuCores": self.batch_cpu, "memoryBytes": self.batch_memory},
            },
            "utilizationPercent": {
                "withoutReclaim": {"cpu": self.cpu_without, "memory": self.memory_without},
                "withReclaim": {"cpu": self.cpu_with, "memory": self.memory_with},
            },
            "published": {
                "cpuCores": self.published.get("cpu"),
                "memoryBytes": self.published.get("memory"),
            },
            "batch": {
                "running": self.batch_running,
                "waiting": self.batch_waiting,
                "admitted": self.admitted,
                "finished": self.finished,
                "requestedCpuCores": self.batch_requested_cpu,
                "requestedMemoryBytes": self.batch_requested_memory,
                "cpuAllowedCores": self.batch_cpu_allowed,
            },
            "evicted": self.evicted,
            "fired": self.fired,
            "sloRisk": {"withoutReclaim": self.risk_without, "withReclaim": self.risk_with},
        }


@dataclass
class Simulation:
    trace: Trace
    policy: Policy
    options: Options
    numbers: list[TickNumbers]
    events: list[Event]
    ticks: list[dict[str, Any]]
    summary: dict[str, Any]
    runtime_seconds: float
    published_names: dict[str, str]  # resource kind -> extended resource name
    generation: int = 0
    # per tick, what was decided (see engine.simulate.diff.decision): compared by --baseline
    decisions: list[tuple[Any, ...]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The ``kind: Simulation`` document. ``ticks`` are Evaluation documents exactly as
        ``qosd eval --output json`` prints them (what ``qosd explain`` reads); the simulator's own
        per-tick numbers are in ``series``, index for index."""
        return {
            "apiVersion": API_VERSION,
            "kind": "Simulation",
            "trace": {
                "source": self.trace.source,
                "name": self.trace.name,
                "samples": len(self.trace.samples),
                "start": self.trace.start,
                "stepSeconds": self.trace.step,
                "durationSeconds": self.trace.duration,
                "closedLoop": self.trace.closed_loop,
            },
            "policy": {"hash": self.policy.hash, "generation": self.generation, "node": self.policy.node},
            "options": {
                "riskCpuPercent": self.options.risk_cpu_percent,
                "riskMemoryPercent": self.options.risk_memory_percent,
                "dryRun": self.options.guards.dry_run,
                "evictionBurst": self.options.guards.eviction_burst,
            },
            "summary": self.summary,
            "events": [e.to_dict() for e in self.events],
            "series": [n.to_dict() for n in self.numbers],
            "ticks": self.ticks,
        }
