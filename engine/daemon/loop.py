"""The daemon's tick loop (``Daemon``); see engine.daemon for what a long-running process adds around
the pure tick (generations, write-ahead state, signals)."""

from __future__ import annotations

import dataclasses
import gc
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any

from engine.daemon.audit import AuditLog, finished_record
from engine.daemon.endpoints import serve
from engine.daemon.faults import REPORT_SECONDS, Throttle
from engine.daemon.logs import log
from engine.daemon.metrics import Metrics
from engine.daemon.parts import Executor, NodeSource, OperationOutcome, Service
from engine.daemon.state_file import StateFile, hold_back_evictions, load_state
from engine.daemon.tick_metrics import TickView
from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState
from engine.model.facts import Snapshot
from engine.model.operations import EvictPod, Operation, PublishNodeResource, WriteCgroup
from engine.plan.planner import Guards
from engine.reload import PolicyLayer, ReloadConfig, Reloader
from engine.sources.snapshot_file import snapshot_to_dict
from engine.tick import TickResult, plan_tick, run_tick


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
    audit_max_bytes: int = 0  # rotate the audit log past this size (0: never)
    audit_keep: int = 3  # rotated audit files kept (audit.jsonl.1 ... .N)
    audit_facts: bool = False  # every tick recorded with its facts snapshot (qosd trace record)
    listen: str | None = None  # host:port for /metrics, /healthz, /readyz
    stat_files: bool = True  # stat rule files each tick; off when a file watcher reports changes
    sync_timeout: float = 60.0  # longest wait for the first lists from the API server at start
    print_plan: bool = False  # --once --dry-run: print what the tick would do to stdout
    mode: str = "standalone"  # standalone | kubernetes, for the start-up line
    describe: Mapping[str, Any] = field(default_factory=dict)  # where workloads come from (start-up line)
    # operation kinds this node refuses, and why (standalone: the Kubernetes ones): the dry-run plan
    # says "would skip" for them, as a real run's executor would
    unavailable: Mapping[str, str] = field(default_factory=dict)


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
PERFORMED = ("applied", "started")  # logged at info, one line per operation (a steady state has none)


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


# ---------------------------------------------------------------- the loop


FINISH_TIMEOUT = 900.0  # longest wait at exit for started evictions (their grace periods) to end


class Daemon:
    """The tick loop. Wiring (which source, which executor) is done by the caller (engine.daemon.wiring)."""

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
        self._announced = False  # the start-up line, at the first tick a policy is in effect
        self.state = load_state(config.state_file)
        self.guards = Guards(dry_run=config.dry_run, eviction_burst=config.eviction_burst)
        self.stop = threading.Event()
        self.ticks = 0
        self.last_tick_at: float | None = None
        self.last_error: str | None = None
        self.audit = (
            AuditLog(
                config.audit_log,
                self.metrics.audit_failures,
                max_bytes=config.audit_max_bytes,
                keep=config.audit_keep,
            )
            if config.audit_log
            else None
        )
        if self.audit is not None:
            self.readiness.append(self.audit.problem)
        self.state_file = (
            StateFile(config.state_file, self.metrics.state_failures) if config.state_file else None
        )
        if self.state_file is not None:
            self.readiness.append(self.state_file.problem)
        self.op_failures = Throttle(clock=clock)
        self._server: ThreadingHTTPServer | None = None
        self.metrics.built(config.backend, config.mode)

    def _reloaded(self, source: str, result: str) -> None:
        m = self.metrics
        m.reloads.labels(source, {"loaded": "success", "failed": "failure"}.get(result, result)).inc()
        engine = self.reloader.engine
        if result == "loaded" and engine is not None:
            m.reload_success.set(time.time())
            m.generation.set(self.reloader.generation)
            m.config_info.clear()
            m.config_info.labels(str(self.reloader.generation), engine.policy.hash[:12]).set(1)
        elif result == "failed":
            m.reload_failure.set(time.time())

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
            if not self._announced:
                self._announced = True
                self._first_tick(engine, snap)
            if self.config.print_plan:
                self._print_plan(engine, result, snap)
            sf = self.state_file
            evictions = len(result.plan.evicted)
            if sf is not None and not sf.save(result.state, engine.generation, snap.time, evictions):
                result = hold_back_evictions(result, self.state, sf.error or "unknown error")
            outcomes = self.executor.apply(result.plan.operations)
            self.state = _unrecord_refused(result.state, outcomes)
            # The gauges of this tick: references handed over, built only when scraped.
            members = engine.members(snap.workloads)  # the tick's own cached class index
            self.metrics.tick.saw(TickView(engine, result.evaluation, self.state, snap.metrics.node, members))
            try:
                self.source.applied(result, outcomes)
                self._account(result, outcomes, engine)
            finally:
                self._audit(result, outcomes, snap)  # the record of what was applied, whatever follows
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

    def _first_tick(self, engine: Engine, snap: Snapshot) -> None:
        """The start-up line (mode, where workloads come from, how many per class, the generation in
        effect), and a warning when there is nothing to manage: a --root that matches no cgroup is
        a typo far more often than an intention, and a silent daemon looks like a working one."""
        classes: dict[str, int] = {}
        for w in snap.workloads:
            name = engine.classifier.classify(w).class_name or "(no class)"
            classes[name] = classes.get(name, 0) + 1
        fields = {
            "mode": self.config.mode,
            **self.config.describe,
            "workloads": len(snap.workloads),
            "workloadsByClass": dict(sorted(classes.items())),
            "generation": self.reloader.generation,
            "hash": engine.policy.hash[:12],
            "policies": [d.name for d in engine.policy.documents],
            "dryRun": self.config.dry_run,
        }
        log.info("qosd running: first tick done", extra={"fields": fields})
        if not snap.workloads and self.config.mode == "standalone":
            roots = ", ".join(str(r) for r in self.config.describe.get("roots", ()))
            log.warning(
                f"no workload found: the patterns {roots} match no cgroup under "
                f"{self.config.describe.get('discoveryBase', '')}; qosd has nothing to manage. Create "
                "the cgroups (e.g. qosd/web, qosd/batch) or pass --root PATTERN or --workloads FILE "
                "(docs/standalone.md)",
                extra={"fields": {"roots": list(self.config.describe.get("roots", ()))}},
            )

    def _print_plan(self, engine: Engine, result: TickResult, snap: Snapshot) -> None:
        """What this tick would do if it were not a dry run: the plan the same evaluation makes with
        the dry-run guard lifted (nothing is executed; the executor only records)."""
        from engine.output import format_plan

        guards = dataclasses.replace(self.guards, dry_run=False)
        would = plan_tick(engine, result.evaluation, snap, guards)
        unseen = _unobserved(would, snap)
        if unseen:  # as a real tick does: what the kernel already holds is not a write
            would = plan_tick(
                engine, result.evaluation, _with_observed(snap, self.source.observe(unseen)), guards
            )
        sys.stdout.write(format_plan(would, self.config.unavailable))
        sys.stdout.flush()

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
        if outcome.status in PERFORMED:
            done = outcome.to_dict()
            log.info(
                f"{op.kind} {outcome.status}",
                extra={
                    "fields": {
                        **done["operation"],
                        "status": outcome.status,
                        "detail": done.get("detail", ""),
                    }
                },
            )
        if isinstance(op, PublishNodeResource):
            self.metrics.tick.published(op, outcome.status)
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

    def _audit(self, result: TickResult, outcomes: Sequence[OperationOutcome], snap: Snapshot) -> None:
        """Append the tick's record; a failure is the audit log's (counted, reported), not the tick's."""
        if self.audit is None:
            return
        try:
            facts = snapshot_to_dict(snap, self.config.labels) if self.config.audit_facts else None
            self.audit.tick(result, outcomes, facts)
        except Exception as exc:  # a bug building the record: lose it, keep enforcing
            self.audit.failed(exc)

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
        """The daemon's signals, each logged (see "Signals" in engine.daemon's docstring)."""
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
        self._server = serve(listen, self.metrics.registry, self.healthy, self.ready)
        bound = self._server.server_address
        return str(bound[0]), int(bound[1])
