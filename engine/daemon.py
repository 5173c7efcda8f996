"""``qosd run``: the node daemon's tick loop, policy generations, state, audit log, metrics and health.

One tick is the same pure path as ``qosd eval`` (``engine.tick.run_tick``); the daemon only adds what a
long-running process needs around it:

- **Generations.** Rule files are re-read when their fingerprint (path, inode, size, mtime) or the
  node's labels and sizes change. A new generation that fails to load, render, validate or compile is
  rejected as a whole and the last good one keeps running; the failure is logged with its locations
  and counted. Nothing is re-parsed on a steady tick.
- **Write-ahead state.** The engine state after a tick (sustain timers, latches, cooldowns, pods being
  evicted) is written atomically *before* the tick's operations are executed. After a ``kill -9``
  anywhere in a tick the restarted daemon either never saw the decision (and makes it again, against
  freshly observed cgroups, so writes are not repeated) or already has the eviction on record (and
  counts the pod as released instead of evicting it twice).
- **When the state file cannot be saved** (full or read-only file system): operations that set a
  value (cgroup and resctrl writes, taints, node conditions, published resources) and Events are
  still applied, because repeating them after a restart is harmless (a value set again, a duplicate
  notice). Evictions are held back (``held`` in the audit record, with the reason) and their rule's
  firing is not recorded, so they are decided again on the first tick whose save succeeds: an
  eviction is never requested without its write-ahead record. Counted in
  ``qosd_state_write_failures_total``, reported on ``/readyz`` and logged at most every
  REPORT_SECONDS.
- **Signals.** SIGTERM and SIGINT only set a flag: the tick in progress finishes, its whole plan is
  applied, then the loop exits. A plan is never left half-applied by a signal. SIGQUIT stops the
  same way after logging every thread's stack (a daemon that seems stuck says where; no core dump,
  which a DaemonSet would only restart from). SIGHUP re-reads the rule files through the one reload
  path (the daemon convention; a save the file watcher missed, or ``--no-watch``). SIGUSR1 logs the
  generation, health, readiness and engine state and changes nothing. Each is logged.
- **Audit log.** JSON Lines, one Evaluation document per tick in which something was decided (an
  operation, something held back, a skipped rule or a workload issue), each intent with its
  provenance, plus each operation's result. ``qosd explain`` reads it.
- **Metrics and health** on one HTTP port: ``/metrics`` (prometheus-client), ``/healthz`` (the loop is
  alive), ``/readyz`` (a policy is loaded and a tick completed).
"""

from __future__ import annotations

import abc
import argparse
import contextlib
import dataclasses
import errno
import gc
import json
import logging
import os
import signal
import stat
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from engine.adapters.cgroup import CgroupAdapter
from engine.adapters.evict import StandaloneEvictions
from engine.adapters.executor import NodeExecutor
from engine.adapters.fsio import errno_name, open_nofollow
from engine.adapters.recorder import RecordingExecutor
from engine.adapters.resctrl import ResctrlAdapter
from engine.adapters.result import OperationResult
from engine.argtypes import cgroup_pattern, duration, integer, listen_address, profile
from engine.cgroups.mounts import CgroupUnavailable
from engine.config.errors import UsageError
from engine.config.pipeline import PROFILE_LABEL, node_labels
from engine.evaluate.engine import Engine
from engine.evaluate.state import MAX_STATE_BYTES, CorruptState, EngineState, state_from_json
from engine.model.facts import Snapshot
from engine.model.intents import CgroupIntent
from engine.model.operations import EvictPod, Operation, WriteCgroup
from engine.plan.planner import Guards, Held, Plan
from engine.reload import PolicyLayer, ReloadConfig, Reloader
from engine.sources.collector import CollectorOptions, NodeCollector
from engine.sources.files import PinnedReader
from engine.sources.standalone import PatternError, StandaloneSource, standalone_collector
from engine.tick import TickResult, plan_tick, run_tick

API_VERSION = "qosd.io/v1alpha1"
TICK_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

log = logging.getLogger("qosd")


# ---------------------------------------------------------------- the parts the daemon drives


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


@dataclass(frozen=True)
class DaemonConfig:
    rules: tuple[Path, ...] = ()
    builtin: bool = True
    labels: Mapping[str, str] = field(default_factory=dict)  # extra node labels (e.g. the profile)
    interval: float = 1.0
    once: bool = False
    dry_run: bool = False
    eviction_burst: int = 3
    backend: str = "python"
    state_file: Path | None = None
    audit_log: Path | None = None
    listen: str | None = None  # host:port for /metrics, /healthz, /readyz
    stat_files: bool = True  # stat rule files each tick; off when a file watcher reports changes
    sync_timeout: float = 60.0  # longest wait for the first lists from the API server at start


# ---------------------------------------------------------------- metrics


class Metrics:
    """The daemon's Prometheus metrics, in their own registry (tests run several daemons in one process)."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.tick_seconds = Histogram(
            "qosd_tick_duration_seconds",
            "Time of one tick: collect, evaluate, plan and apply.",
            buckets=TICK_BUCKETS,
            registry=r,
        )
        self.evaluation_seconds = Histogram(
            "qosd_evaluation_duration_seconds",
            "Time to evaluate the policy and plan operations for one snapshot.",
            buckets=TICK_BUCKETS,
            registry=r,
        )
        self.ticks = Counter("qosd_ticks_total", "Ticks run, by result.", ["result"], registry=r)
        self.rule_matches = Counter(
            "qosd_rule_matches_total", "Rules that acted in a tick.", ["rule", "mode"], registry=r
        )
        self.actions = Counter(
            "qosd_actions_total",
            "Operations executed, by action and result.",
            ["action", "result"],
            registry=r,
        )
        self.held = Counter(
            "qosd_held_total", "Intents the planner held back, by rule.", ["rule"], registry=r
        )
        self.evictions = Counter(
            "qosd_evictions_total",
            "Evictions carried out (the API accepted it; standalone: the processes are gone), by rule.",
            ["rule"],
            registry=r,
        )
        self.reloads = Counter(
            "qosd_config_reloads_total",
            "Policy reloads, by source and result.",
            ["source", "result"],
            registry=r,
        )
        self.reload_success = Gauge(
            "qosd_config_last_reload_success_timestamp_seconds",
            "When a policy generation was last loaded successfully.",
            registry=r,
        )
        self.config_info = Gauge(
            "qosd_config_info",
            "The policy generation in effect (value 1).",
            ["generation", "hash"],
            registry=r,
        )
        self.last_tick = Gauge(
            "qosd_last_tick_timestamp_seconds", "When the last tick completed.", registry=r
        )
        self.audit_failures = Counter(
            "qosd_audit_write_failures_total",
            "Audit log records lost because the write failed (full disk, read-only file system...).",
            registry=r,
        )
        self.state_failures = Counter(
            "qosd_state_write_failures_total",
            "State file saves that failed (full disk, read-only file system...); evictions wait meanwhile.",
            registry=r,
        )


# ---------------------------------------------------------------- state and audit files


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


def _unobserved(result: TickResult, snap: Snapshot) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for op in result.plan.operations:
        if isinstance(op, WriteCgroup) and op.file not in snap.cgroups.get(op.path, {}):
            out.setdefault(op.path, []).append(op.file)
    return out


def _with_observed(snap: Snapshot, found: Mapping[str, Mapping[str, str]]) -> Snapshot:
    if not found:
        return snap
    cgroups = {path: dict(files) for path, files in snap.cgroups.items()}
    for path, files in found.items():
        cgroups.setdefault(path, {}).update(files)
    return dataclasses.replace(snap, cgroups=cgroups)


NOT_DONE = ("deferred", "failed", "skipped")


def _unrecord_refused(state: EngineState, outcomes: Sequence[OperationOutcome]) -> EngineState:
    """Forget the evictions not carried out (a PodDisruptionBudget's 429, an error, no adapter, a
    standalone eviction whose processes outlived SIGKILL), so the
    pods are not counted as released and a later round may choose them again. The rule's firing
    stays recorded, so its rate limits still count the attempt. No pod can be evicted twice: each
    request carries the pod's UID as a precondition."""
    refused = {
        op.uid
        for o in outcomes
        if o.status in NOT_DONE and isinstance(op := getattr(o, "op", None), EvictPod)
    }
    if not refused or not refused & state.evicting.keys():
        return state
    return dataclasses.replace(
        state, evicting={uid: rec for uid, rec in state.evicting.items() if uid not in refused}
    )


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


FINISH_TIMEOUT = 900.0  # longest wait at exit for started evictions (their grace periods) to end
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


class StateFile(FileFault):
    """The ``--state-file``, and what went wrong saving it (see the module docstring for the rule:
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


def operation_subject(op: Operation) -> tuple[str, str]:
    """(target, what) of an operation: the key its repeated failures are grouped by."""
    if isinstance(op, WriteCgroup):
        return op.path, f"{op.kind} {op.file}"
    if isinstance(op, EvictPod):
        return f"{op.namespace}/{op.name}", op.kind
    for attr in ("group", "key", "type", "name", "reason"):
        value = getattr(op, attr, None)
        if isinstance(value, str):
            return value, op.kind
    return "", op.kind


def thread_stacks() -> dict[str, str]:
    """Every thread's current stack, by thread name: what SIGQUIT logs before stopping, so that a
    daemon that seems stuck says where (as a Go program's goroutine dump on SIGQUIT does)."""
    names = {t.ident: t.name for t in threading.enumerate()}
    return {
        f"{names.get(ident, 'thread')}-{ident}": "".join(traceback.format_stack(frame))
        for ident, frame in sys._current_frames().items()
    }


# ---------------------------------------------------------------- JSON logs


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, message and the record's structured fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": round(record.created, 3),
            "level": record.levelname.lower(),
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, Mapping):
            out.update(fields)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure_logging(level: str = "info", stream: Any = None) -> None:
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    log.handlers[:] = [handler]
    log.setLevel(level.upper())
    log.propagate = False


# ---------------------------------------------------------------- the loop


class Daemon:
    """The tick loop. Wiring (which source, which executor) is done by the caller (``engine.cli``)."""

    def __init__(
        self,
        config: DaemonConfig,
        source: NodeSource,
        executor: Executor,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        policies: PolicyLayer | None = None,
        labels: Callable[[], Mapping[str, str]] | None = None,
        services: Sequence[Service] = (),
        synced: Sequence[tuple[str, Callable[[float], bool]]] = (),
    ):
        self.config = config
        self.source = source
        self.executor = executor
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.reloader = Reloader(
            ReloadConfig(
                files=config.rules,
                builtin=config.builtin,
                backend=config.backend,
                labels=config.labels,
                stat_files=config.stat_files,
            ),
            policies=policies,
            labels=labels,
            on_reload=self._reloaded,
        )
        self._adopted: Engine | None = None
        self.services = list(services)
        self.synced = list(synced)  # (what, wait_synced): waited for before the first tick
        # Each says why the daemon is not ready (a failing watch or audit log), or None.
        self.readiness: list[Callable[[], str | None]] = []
        self._started = False
        self.state = load_state(config.state_file)
        self.guards = Guards(dry_run=config.dry_run, eviction_burst=config.eviction_burst)
        self.stop = threading.Event()
        self.ticks = 0
        self.last_tick_at: float | None = None
        self.last_error: str | None = None
        self.audit = AuditLog(config.audit_log, self.metrics.audit_failures) if config.audit_log else None
        if self.audit is not None:
            self.readiness.append(self.audit.problem)
        self.state_file = (
            StateFile(config.state_file, self.metrics.state_failures) if config.state_file else None
        )
        if self.state_file is not None:
            self.readiness.append(self.state_file.problem)
        self.op_failures = Throttle(clock=clock)
        self._server: ThreadingHTTPServer | None = None

    def _reloaded(self, source: str, result: str) -> None:
        m = self.metrics
        m.reloads.labels(source, {"loaded": "success", "failed": "failure"}.get(result, result)).inc()
        engine = self.reloader.engine
        if result == "loaded" and engine is not None:
            m.reload_success.set(time.time())
            m.config_info.clear()
            m.config_info.labels(str(self.reloader.generation), engine.policy.hash[:12]).set(1)

    # -- one tick

    def tick(self) -> TickResult | None:
        """Collect, (re)load the policy if needed, evaluate, plan, persist state, apply. Never raises."""
        started = time.perf_counter()
        try:
            self._settle()
            snap = self.source.collect()
            self.reloader.observe_node(snap.node)
            engine = self.reloader.engine  # one read: a reload in another thread swaps it atomically
            if engine is not self._adopted and engine is not None:
                self.source.adopt(engine)
                self._adopted = engine
                self.reloader.retire()
            if engine is None:
                self.last_error = self.reloader.last_error or "no policy loaded"
                self.metrics.ticks.labels("no_policy").inc()
                return None
            t0 = time.perf_counter()
            result = run_tick(engine, snap, self.state, self.guards)
            unseen = _unobserved(result, snap)
            if unseen:
                # Files the snapshot did not carry (the first tick, a new pod): read them and plan
                # again, so a restart never re-writes what the kernel already holds.
                snap = _with_observed(snap, self.source.observe(unseen))
                result = plan_tick(engine, result.evaluation, snap, self.guards)
            self.metrics.evaluation_seconds.observe(time.perf_counter() - t0)
            sf = self.state_file
            evictions = len(result.plan.evicted)
            if sf is not None and not sf.save(result.state, engine.generation, snap.time, evictions):
                result = hold_back_evictions(result, self.state, sf.error or "unknown error")
            outcomes = self.executor.apply(result.plan.operations)
            self.state = _unrecord_refused(result.state, outcomes)
            try:
                self.source.applied(result, outcomes)
                self._account(result, outcomes, engine)
            finally:
                self._audit(result, outcomes)  # the record of what was applied, whatever follows
            self.metrics.ticks.labels("ok").inc()
            self.last_error = None
            return result
        except Exception as exc:  # the loop must survive anything one tick throws
            self.last_error = f"{type(exc).__name__}: {exc}"
            self.metrics.ticks.labels("error").inc()
            log.exception("tick failed; the next tick starts fresh from observation")
            return None
        finally:
            self.ticks += 1
            self.last_tick_at = time.time()
            self.metrics.last_tick.set(self.last_tick_at)
            self.metrics.tick_seconds.observe(time.perf_counter() - started)

    def _settle(self) -> None:
        """Record the operations earlier ticks started that completed since (a standalone eviction
        is *applied* once its processes are gone, or *failed*): metrics, the audit log and the
        engine's eviction records then say what happened, not what was begun."""
        done = self.executor.finished()
        if not done:
            return
        self.state = _unrecord_refused(self.state, done)
        for outcome in done:
            op = getattr(outcome, "op", None)
            if op is not None:
                self._count(op, outcome)
        engine = self.reloader.engine  # set: the tick that started them had one
        if self.audit is not None and engine is not None:
            self.audit.append(finished_record(done, self.state, engine, time.time()))

    def _count(self, op: Operation, outcome: OperationOutcome) -> None:
        self.metrics.actions.labels(op.kind, outcome.status).inc()
        if op.kind == "evictPod" and outcome.status in ("applied", "unchanged"):
            self.metrics.evictions.labels(str(getattr(op, "rule", ""))).inc()
        self._report_failure(op, outcome)

    def _account(self, result: TickResult, outcomes: Sequence[OperationOutcome], engine: Engine) -> None:
        modes = {r.name: r.mode for r in engine.policy.rules}
        for rule in result.evaluation.fired:
            self.metrics.rule_matches.labels(rule, modes.get(rule, "enforce")).inc()
        for op, outcome in zip(result.plan.operations, outcomes, strict=False):
            self._count(op, outcome)
        for held in result.plan.held:
            self.metrics.held.labels(held.intent.provenance.rule).inc()

    def _report_failure(self, op: Operation, outcome: OperationOutcome) -> None:
        """Log a failed operation once per (target, what, reason), then at most every REPORT_SECONDS
        with the repeats suppressed: the same bad value fails again every tick. Its success clears it."""
        subject = operation_subject(op)
        if outcome.status != "failed":
            if outcome.status == "applied":
                self.op_failures.clear(lambda key: key[:2] == subject)
            return
        suppressed = self.op_failures.admit((*subject, outcome.error))
        if suppressed is None:
            return
        fields = {**op.to_dict(), "error": outcome.error, "repeatsSuppressed": suppressed}
        log.warning(
            f"operation failed (the same failure is logged at most every {REPORT_SECONDS:g}s)",
            extra={"fields": fields},
        )

    def _audit(self, result: TickResult, outcomes: Sequence[OperationOutcome]) -> None:
        """Append the tick's record; a failure is the audit log's (counted, reported), not the tick's."""
        if self.audit is None:
            return
        try:
            record = audit_record(result, outcomes)
        except Exception as exc:  # a bug building the record: lose it, keep enforcing
            self.audit.failed(exc)
            return
        if record is not None:
            self.audit.append(record)

    # -- the loop

    def run(self) -> int:
        """Tick every ``interval`` until stopped; exit code 0 on a clean stop, 1 if no policy ever loaded."""
        self._install_signals()
        fields: dict[str, Any] = {"interval": self.config.interval, "dryRun": self.config.dry_run}
        if self.config.listen:
            host, port = self.serve(self.config.listen)
            fields["listen"] = f"{host}:{port}"  # the port bound, when asked for :0
        log.info("qosd started", extra={"fields": fields})
        try:
            self.start()
            next_at = self.clock()
            while not self.stop.is_set():
                self.tick()
                if self.ticks == 1 and not self.config.once:
                    # What start-up built (modules, the first generation, the collector's caches)
                    # lives as long as the process: the cyclic collector stops re-scanning it.
                    gc.collect()
                    gc.freeze()
                if self.config.once:
                    break
                next_at += self.config.interval
                delay = next_at - self.clock()
                if delay < 0:  # overran: skip the missed ticks instead of bursting to catch up
                    next_at = self.clock()
                    delay = 0
                self.stop.wait(delay)
            self._finish_started()
        finally:
            self.shutdown()
            if self._server is not None:
                self._server.shutdown()
                self._server.server_close()
            log.info("qosd stopped", extra={"fields": {"ticks": self.ticks}})
        return 0 if self.reloader.engine is not None else 1

    def _finish_started(self) -> None:
        """Before exiting, let what the ticks started complete (a standalone eviction's grace period
        and SIGKILL) and record it: a process left SIGTERMed and never followed up is neither
        evicted nor reported."""
        if not self.executor.wait(0):
            log.info("waiting for evictions in progress to finish before stopping")
            if not self.executor.wait(FINISH_TIMEOUT):
                log.warning(
                    "evictions still in progress at exit; their outcome is not recorded",
                    extra={"fields": {"waitedSeconds": FINISH_TIMEOUT}},
                )
        self._settle()

    def start(self, sync_timeout: float | None = None) -> None:
        """Start the background services and wait (bounded) until their first lists are in, so the
        first generation already holds the cluster's QoSPolicies and the first tick sees every pod
        (a tick on an empty pod list would plan pools for nothing). Idempotent."""
        if self._started:
            return
        self._started = True
        for service in self.services:
            service.start()
        deadline = time.monotonic() + (self.config.sync_timeout if sync_timeout is None else sync_timeout)
        for what, wait in self.synced:
            if not wait(max(0.0, deadline - time.monotonic())) and not self.stop.is_set():
                log.warning(
                    "not synced with the API server yet; starting anyway, it will catch up",
                    extra={"fields": {"what": what, "timeoutSeconds": self.config.sync_timeout}},
                )

    def shutdown(self) -> None:
        """Stop the services (newest first) and close the engines. Idempotent."""
        services, self.services = self.services, []
        for service in reversed(services):
            try:
                service.stop()
            except Exception:
                log.exception("stopping a service failed", extra={"fields": {"service": repr(service)}})
        self.reloader.close()

    def _install_signals(self) -> None:
        """The daemon's signals, each logged (see "Signals" in the module docstring)."""
        if threading.current_thread() is not threading.main_thread():
            return

        def stop(signum: int, _frame: FrameType | None) -> None:
            fields: dict[str, Any] = {"signal": signal.Signals(signum).name}
            if signum == signal.SIGQUIT:
                fields["threads"] = thread_stacks()
            log.info("stop requested; finishing the current tick", extra={"fields": fields})
            self.stop.set()

        def reload(signum: int, _frame: FrameType | None) -> None:
            # The handler runs in the main thread, which may hold the reload lock mid-tick: the
            # reload runs in a thread of its own and waits for the lock there.
            log.info("SIGHUP: reloading the rule files", extra={"fields": {"signal": "SIGHUP"}})
            threading.Thread(target=self._reload_on_signal, name="qosd-sighup", daemon=True).start()

        def dump(signum: int, _frame: FrameType | None) -> None:
            log.info("SIGUSR1: state dump; the daemon keeps running", extra={"fields": self.dump()})

        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
            signal.signal(signum, stop)
        signal.signal(signal.SIGHUP, reload)
        signal.signal(signal.SIGUSR1, dump)

    def _reload_on_signal(self) -> None:
        try:
            outcome = self.reloader.request("signal")
        except Exception:  # a reload must never take the daemon down
            log.exception("reload on SIGHUP failed")
            return
        if outcome is None:
            log.info("SIGHUP: the reload runs at the first tick (no node observed yet)")
        elif outcome.result == "unchanged":
            log.info(
                "SIGHUP: the rule files give the policy in effect; nothing to do",
                extra={"fields": {"generation": outcome.generation}},
            )
        # loaded and failed are logged by the reload path itself, with the trigger "signal"

    def dump(self) -> dict[str, Any]:
        """What a SIGUSR1 logs: the generation in effect, the loop's health and the engine state."""
        engine = self.reloader.engine
        healthy, health = self.healthy()
        ready, readiness = self.ready()
        return {
            "generation": self.reloader.generation,
            "hash": engine.policy.hash[:12] if engine is not None else None,
            "ticks": self.ticks,
            "lastError": self.last_error,
            "reloadError": self.reloader.last_error,
            "healthz": ("ok: " if healthy else "not ok: ") + health,
            "readyz": ("ok: " if ready else "not ok: ") + readiness,
            "state": self.state.to_dict(),
        }

    # -- health and metrics over HTTP

    def healthy(self) -> tuple[bool, str]:
        if self.last_tick_at is None:
            return True, "starting"
        age = time.time() - self.last_tick_at
        limit = 3 * self.config.interval + 10
        return (age <= limit, f"last tick {age:.1f}s ago (limit {limit:g}s)")

    def ready(self) -> tuple[bool, str]:
        if self.reloader.engine is None:
            return False, self.reloader.last_error or "no policy generation loaded yet"
        if self.ticks == 0:
            return False, "no tick completed yet"
        problems = [why for check in self.readiness if (why := check())]
        if problems:
            return False, "; ".join(problems)
        return True, f"generation {self.reloader.generation}"

    def serve(self, listen: str) -> tuple[str, int]:
        """Start the HTTP endpoints in a background thread; returns the bound address."""
        host, _, port = listen.rpartition(":")
        daemon = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/metrics":
                    self._send(200, generate_latest(daemon.metrics.registry), CONTENT_TYPE_LATEST)
                elif self.path in ("/healthz", "/readyz"):
                    ok, why = daemon.healthy() if self.path == "/healthz" else daemon.ready()
                    self._send(200 if ok else 503, (("ok: " if ok else "not ok: ") + why + "\n").encode())
                else:
                    self._send(404, b"not found; try /metrics, /healthz or /readyz\n")

            def _send(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return  # scrapes every few seconds would drown the JSON log

        try:
            self._server = ThreadingHTTPServer((host.strip("[]") or "0.0.0.0", int(port)), Handler)
        except (OSError, OverflowError, ValueError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise UsageError(
                f"--listen {listen}: cannot serve /metrics, /healthz and /readyz there: {why}"
            ) from None
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="qosd-http", daemon=True).start()
        bound = self._server.server_address
        return str(bound[0]), int(bound[1])


# ---------------------------------------------------------------- start-up wiring (standalone)


# What a daemon's collector reads how often (docs/standalone.md, "What a tick costs"). Each cgroup
# file qosd manages is re-read at least every OBSERVE_SECONDS (staggered over the ticks) and reported
# as last read or last written in between, so a value changed behind qosd's back is corrected within
# that bound; Koordinator's executor trusts its own last write for 60 s (ResourceForceUpdateSeconds).
# Per-cgroup memory.stat is re-read every MEMORY_SECONDS; CPU counters and node files every tick.
OBSERVE_SECONDS = 10.0
MEMORY_SECONDS = 10.0
REREAD_AFTER = frozenset({"failed", "vanished", "unchanged"})


def daemon_options(interval: float) -> CollectorOptions:
    """The collector options of ``qosd run`` at this tick interval (see OBSERVE_SECONDS)."""
    return CollectorOptions(
        interval=interval,
        observe_every=max(1, round(OBSERVE_SECONDS / interval)),
        memory_every=max(1, round(MEMORY_SECONDS / interval)),
    )


class CollectorSource:
    """The node collector as the daemon's NodeSource: it learns each generation's windows and
    classes, and keeps observing the files the last plan manages (so a steady state writes nothing).
    Writes that succeeded are reported as observed until the file's next re-read; writes that failed,
    found the cgroup gone or found the value already there are re-read at the next tick."""

    def __init__(self, collector: NodeCollector, adapter: CgroupAdapter | None = None):
        self.collector = collector
        self.adapter = adapter
        self._tracked: tuple[tuple[Any, ...], tuple[tuple[str, str], ...]] = ((), ())  # intents, pairs
        collector.prime()

    def collect(self) -> Snapshot:
        return self.collector.collect()

    def adopt(self, engine: Engine) -> None:
        classify = engine.classifier.classify
        self.collector.use_policy(engine.policy, lambda w: classify(w).class_name)

    def observe(self, wanted: Mapping[str, Sequence[str]]) -> Mapping[str, Mapping[str, str]]:
        # The adapter reads the host files of logical names, exactly as it will compare on write
        # (share files by the formula of the generation the collector last adopted).
        if self.adapter is None:
            return {}
        return self.adapter.observe(wanted, self.collector.weight_formula)

    def applied(self, result: TickResult, outcomes: Sequence[OperationOutcome]) -> None:
        intents = result.evaluation.intents
        if intents != self._tracked[0]:  # else the same pairs object: the collector skips them
            pairs = tuple((i.path, i.file) for i in intents if isinstance(i, CgroupIntent))
            self._tracked = (intents, pairs)
        self.collector.track(self._tracked[1])
        for o in outcomes:
            op = getattr(o, "op", None)
            if not isinstance(op, WriteCgroup):
                continue
            if o.status == "applied":
                self.collector.note_written(op.path, op.file, op.value)
            elif o.status in REREAD_AFTER:
                # What the kernel holds is not what was planned against: read it at the next tick
                # instead of waiting for the file's turn in the stagger.
                self.collector.reread(op.path, op.file)


def _common(
    args: argparse.Namespace, adapter: CgroupAdapter | None = None
) -> tuple[float, dict[str, str], CgroupAdapter]:
    interval: float = args.interval  # parsed and bounded by argparse (engine.argtypes)
    labels = node_labels(args.label, args.profile)
    if adapter is None:
        try:
            # Observed files stay open between ticks (one pread each); see engine/sources/files.py.
            adapter = CgroupAdapter.detect(args.cgroup_root, observe_reader=PinnedReader(open_nofollow))
        except (CgroupUnavailable, OSError) as exc:
            raise UsageError(f"--cgroup-root {args.cgroup_root}: {exc}") from None
    return interval, labels, adapter


def _config(
    args: argparse.Namespace, interval: float, labels: Mapping[str, str], watch: bool
) -> DaemonConfig:
    return DaemonConfig(
        rules=tuple(args.rules),
        builtin=not args.no_builtin,
        labels=labels,
        interval=interval,
        once=args.once,
        dry_run=args.dry_run,
        eviction_burst=args.eviction_burst,
        backend=args.backend,
        state_file=_state_file(args.state_file),
        audit_log=_audit_file(args.audit_log),
        listen=args.listen or None,
        stat_files=not watch,
        sync_timeout=args.sync_timeout,
    )


def _file_watcher(args: argparse.Namespace, daemon: Daemon) -> None:
    """Hot reload from rule files: the watcher asks the reload path for a new generation."""
    from engine.sources.rulefiles import RuleFileWatcher

    def changed(reason: str) -> None:
        daemon.reloader.request("file")

    watcher = RuleFileWatcher(list(args.rules), changed, debounce=args.reload_debounce)
    daemon.services.append(watcher)


def _watch_files(args: argparse.Namespace) -> bool:
    return bool(args.rules) and not args.once and not args.no_watch


def build_standalone(args: argparse.Namespace) -> Daemon:
    """``qosd run`` without Kubernetes: cgroups under --cgroup-root are the workloads."""
    interval, labels, adapter = _common(args)
    if args.workloads is not None and not args.workloads.is_file():
        raise UsageError(f"--workloads {args.workloads}: no such file")
    # One adapter reads resctrl's facts for every snapshot (dry run too) and applies its operations.
    resctrl = ResctrlAdapter(args.resctrl_root, tasks_of=adapter.tasks)
    try:
        collector = standalone_collector(
            adapter.layout,  # one detection: the collector reads the hierarchy the adapter writes
            args.workloads,
            args.root or None,
            options=daemon_options(interval),
            observe=adapter.observe,
            resctrl=resctrl.info,
        )
    except PatternError as exc:
        raise UsageError(f"--root: {exc}") from None
    except (CgroupUnavailable, OSError) as exc:
        raise UsageError(f"--cgroup-root {args.cgroup_root}: {exc}") from None
    executor: Executor
    if args.dry_run:
        executor = RecordingExecutor()
    else:
        source = collector.source
        if not isinstance(source, StandaloneSource):
            raise TypeError(f"standalone_collector returned a {type(source).__name__} workload source")
        evictions = StandaloneEvictions(collector.cgroup, source.cgroup_of)
        executor = NodeExecutor(
            cgroup=adapter,
            resctrl=resctrl,
            others={
                **{kind: _standalone_refusal for kind in KUBE_OPERATIONS},
                EvictPod.kind: evictions.evict,
            },
            finishing=(evictions,),
        )
    watch = _watch_files(args)
    daemon = Daemon(_config(args, interval, labels, watch), CollectorSource(collector, adapter), executor)
    if watch:
        _file_watcher(args, daemon)
    return daemon


def build_kube(args: argparse.Namespace, adapter: CgroupAdapter | None = None) -> Daemon:
    """``qosd run`` on a Kubernetes node: pods of this node (watched) are the workloads, QoSPolicy
    resources and rule files are the policy, evictions and node resources go through the API, and
    the node's QoSNodeStatus (and, when elected, every QoSPolicy's status) report what runs."""
    from kubernetes.config import ConfigException

    from engine.adapters.kube import KubeOperations
    from engine.cgroups.paths import detect_driver
    from engine.kube.client import load_api_client
    from engine.kube.events import EventRecorder
    from engine.kube.reflector import ReflectorCollector
    from engine.kube.status import NodeStatusWriter, PolicyStatusAggregator, PolicyStatusController
    from engine.sources.kubenode import NodeWatch
    from engine.sources.kubepods import KubePodSource, pod_reflector
    from engine.sources.policies import PolicyWatch

    node_name = args.node_name or os.environ.get("NODE_NAME", "")
    if not node_name:
        raise UsageError(
            "Kubernetes mode needs the node's name: set NODE_NAME (the DaemonSet sets it from "
            "spec.nodeName through the downward API) or pass --node-name"
        )
    interval, labels, adapter = _common(args, adapter)
    try:
        api = load_api_client(args.kubeconfig)
    except Exception as exc:
        # The client's loader reports a malformed file with whatever its parsing hit (ConfigException,
        # TypeError for a file that is not a mapping, YAML errors): all mean "not a usable kubeconfig".
        where = f"--kubeconfig {args.kubeconfig}" if args.kubeconfig else "in-cluster / $KUBECONFIG"
        why = str(exc) if isinstance(exc, ConfigException | OSError) else f"{type(exc).__name__}: {exc}"
        raise UsageError(f"cannot configure the Kubernetes client ({where}): {why}") from None
    fs = adapter.layout  # one detection: the collector reads the hierarchy the adapter writes
    driver = args.cgroup_driver
    if driver == "auto":
        driver = detect_driver(fs.dir("", "cpu").rstrip("/")) or "systemd"
    node = NodeWatch(api, node_name)
    pods = KubePodSource(pod_reflector(api, node_name), driver)
    resctrl = ResctrlAdapter(args.resctrl_root, tasks_of=adapter.tasks)
    collector = NodeCollector(
        pods,
        fs,
        node_name=node_name,
        options=daemon_options(interval),
        observe=adapter.observe,
        resctrl=resctrl.info,
    )
    events = EventRecorder(api, host=node_name)
    policies = PolicyWatch(api)
    executor: Executor
    if args.dry_run:
        executor = RecordingExecutor()
    else:
        kube_ops = KubeOperations(api, node_name, events, node.node)
        executor = NodeExecutor(
            cgroup=adapter,
            resctrl=resctrl,
            others=kube_ops.handlers(),
        )
    watch = _watch_files(args)
    daemon = Daemon(
        _config(args, interval, labels, watch),
        CollectorSource(collector, adapter),
        executor,
        policies=policies,
        labels=node.labels,
        services=[node, pods.reflector, policies],
        synced=[
            ("node", node.wait_synced),
            ("pods", pods.reflector.wait_synced),
            ("qospolicies", policies.wait_synced),
        ],
    )
    reloader = daemon.reloader
    reflectors = [node.reflector, pods.reflector, policies.reflector]
    daemon.metrics.registry.register(ReflectorCollector(reflectors))
    daemon.readiness.extend(r.problem for r in reflectors)

    def crd_changed() -> None:
        reloader.request("crd")

    def labels_changed() -> None:
        reloader.request("node")

    policies.on_change = crd_changed
    node.on_labels = labels_changed
    status = NodeStatusWriter(api, node_name, events, node_uid=node.uid)
    daemon.reloader.listeners.append(status)
    daemon.services.extend([status, events])
    if args.policy_status:
        aggregator = PolicyStatusAggregator(
            api, policies.objects, policies.documents, lambda: {}, events=events, builtin=not args.no_builtin
        )
        controller = PolicyStatusController(
            api,
            aggregator,
            lambda poke: _node_status_reflector(api, poke, aggregator),
            namespace=args.namespace or os.environ.get("POD_NAMESPACE", "") or "qosd-system",
            identity=node_name,
        )
        policies.on_any = controller.poke
        daemon.services.append(controller)
    if watch:
        _file_watcher(args, daemon)
    return daemon


def _node_status_reflector(api: Any, poke: Callable[[], None], aggregator: Any) -> Any:
    """A started reflector of every QoSNodeStatus, wired as the aggregator's input (leader only)."""
    import functools

    from kubernetes import client

    from engine.kube.client import GROUP, NODE_STATUS_PLURAL, VERSION
    from engine.kube.reflector import Reflector

    reflector = Reflector(
        "qosnodestatuses",
        functools.partial(
            client.CustomObjectsApi(api).list_cluster_custom_object, GROUP, VERSION, NODE_STATUS_PLURAL
        ),
        on_change=poke,
    )
    aggregator.node_statuses = reflector.items
    reflector.start()
    return reflector


KUBE_OPERATIONS = ("evictPod", "setNodeTaint", "setNodeCondition", "emitEvent", "publishNodeResource")


def _standalone_refusal(op: Operation) -> OperationResult:
    return OperationResult(op, "skipped", "standalone mode: no Kubernetes API on this node")


def _state_file(path: Path | None) -> Path | None:
    """--state-file: a regular file (or none yet) in a directory qosd can write, created if missing.
    The file is replaced atomically each tick, so anything else there (a directory, /dev/null) is
    refused at start rather than replaced."""
    if path is None:
        return None
    if path.exists() and not path.is_file():
        raise UsageError(
            f"--state-file {path}: not a regular file; qosd replaces this file atomically on every "
            "tick, so name a file of its own (e.g. /var/lib/qosd/state.json)"
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--state-file {path}: cannot create {path.parent}: {exc.strerror}") from None
    _writable_dir("--state-file", path)
    return path


def _audit_file(path: Path | None) -> Path | None:
    """--audit-log: a file (or device) records can be appended to, in an existing directory. A
    write that fails later (a full disk) is counted and reported, not fatal (AuditLog)."""
    if path is None:
        return None
    if path.is_dir():
        raise UsageError(f"--audit-log {path}: is a directory; name the JSON Lines file to append to")
    if not path.exists():
        if not path.parent.is_dir():
            raise UsageError(f"--audit-log {path}: the directory {path.parent} does not exist")
        _writable_dir("--audit-log", path)
    elif not os.access(path, os.W_OK):
        raise UsageError(f"--audit-log {path}: not writable")
    return path


def _writable_dir(flag: str, path: Path) -> None:
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {path}: cannot write in {path.parent} (read-only or no permission)")


def kube_mode(args: argparse.Namespace) -> bool:
    """Kubernetes mode when asked (--kubeconfig) or when running in a pod; --standalone forces it off."""
    if args.standalone:
        return False
    return args.kubeconfig is not None or bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def _starting(signum: int, _frame: FrameType | None) -> None:
    log.info(
        "signal during start-up ignored: the first tick loads the rule files",
        extra={"fields": {"signal": signal.Signals(signum).name}},
    )


def cmd_run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    # Until the loop installs its handlers, SIGHUP and SIGUSR1 would kill a daemon still starting.
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGHUP, signal.SIGUSR1):
            signal.signal(signum, _starting)
    daemon = build_kube(args) if kube_mode(args) else build_standalone(args)
    return daemon.run()


def add_parser(sub: Any) -> None:
    """Register ``run`` on the ``qosd`` subcommand parser."""
    r = sub.add_parser(
        "run",
        help="run the node daemon: observe, evaluate and enforce every tick",
        description=(
            "The node daemon. Standalone mode (this version): the cgroups under --cgroup-root that the "
            "workloads file (or the default name mapping, docs/standalone.md) selects are the workloads."
        ),
    )
    r.add_argument(
        "--rules",
        action="append",
        default=[],
        type=Path,
        metavar="PATH",
        help="rule file or directory (repeatable); re-read when it changes",
    )
    r.add_argument("--no-builtin", action="store_true", help="leave out the built-in default layer")
    r.add_argument(
        "--profile", type=profile, help=f"bundled profile to use (sets node label {PROFILE_LABEL})"
    )
    r.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra node label (repeatable): selects policies by nodeSelector",
    )
    r.add_argument(
        "--interval",
        type=duration(0.01, 3600.0),
        default="1s",
        help="tick period, a duration from 10ms to 1h (default 1s)",
    )
    r.add_argument("--once", action="store_true", help="run one tick and exit")
    r.add_argument("--dry-run", action="store_true", help="decide and log, change nothing")
    r.add_argument(
        "--eviction-burst",
        type=integer(0, 10000),
        default=3,
        help="evictions per tick across all rules (default 3)",
    )
    r.add_argument("--backend", choices=("python", "durable"), default="python")
    r.add_argument("--cgroup-root", type=Path, default=Path("/sys/fs/cgroup"))
    r.add_argument("--resctrl-root", type=Path, default=Path("/sys/fs/resctrl"))
    r.add_argument("--workloads", type=Path, help="standalone workloads file (schemas/workloads.schema.json)")
    r.add_argument(
        "--root",
        action="append",
        default=[],
        type=cgroup_pattern,
        metavar="PATTERN",
        help="cgroup pattern whose matches are workloads (repeatable; default qosd*/*)",
    )
    r.add_argument("--state-file", type=Path, help="engine state, written before each tick's operations")
    r.add_argument("--audit-log", type=Path, help="append one Evaluation per deciding tick (JSON Lines)")
    r.add_argument(
        "--listen",
        type=listen_address,
        default=":9464",
        help="host:port of /metrics, /healthz, /readyz ('' = off)",
    )
    r.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    r.add_argument(
        "--no-watch",
        action="store_true",
        help="do not watch rule files (they are then re-checked every tick)",
    )
    r.add_argument(
        "--reload-debounce",
        type=duration(0.0, 60.0),
        default="50ms",
        help="quiet time after a rule file event, up to 1m (default 50ms; none for a ConfigMap ..data swap)",
    )
    k = r.add_argument_group(
        "Kubernetes mode",
        "on by default in a pod (KUBERNETES_SERVICE_HOST) or with --kubeconfig; see docs/kubernetes.md",
    )
    k.add_argument("--standalone", action="store_true", help="never talk to Kubernetes, even in a pod")
    k.add_argument("--kubeconfig", type=Path, help="kubeconfig file (default: in-cluster configuration)")
    k.add_argument("--node-name", help="this node's name (default $NODE_NAME)")
    k.add_argument(
        "--namespace", help="namespace of the policy-status Lease (default $POD_NAMESPACE, else qosd-system)"
    )
    k.add_argument(
        "--cgroup-driver",
        choices=("auto", "cgroupfs", "systemd"),
        default="auto",
        help="the kubelet's cgroup driver (auto: look for kubepods.slice, then kubepods)",
    )
    k.add_argument(
        "--no-policy-status",
        dest="policy_status",
        action="store_false",
        help="do not stand for election as the writer of QoSPolicy status",
    )
    k.add_argument(
        "--sync-timeout",
        type=duration(0.0, 3600.0),
        default="60s",
        help="longest wait for the first lists at start, up to 1h (default 60s)",
    )
    r.set_defaults(func=cmd_run)
