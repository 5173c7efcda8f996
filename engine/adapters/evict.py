"""Evictions of standalone workloads: every process of the workload's cgroup stopped, for good.

Without Kubernetes there is no kubelet to carry out an ``evictPod``: qosd does what the kubelet does
to a pod's containers. It decides nothing (which workload, which grace period: the planner's
operation says); it executes and reports.

1. **SIGTERM** to every process in the workload's cgroup and its descendants, at once: on cgroup v1
   the processes are first gathered into a freezer cgroup at the same path (created if the freezer
   hierarchy has none) and frozen, so none can fork a child the signal would miss while the list is
   walked; then every process is signalled and the cgroup thawed, so the SIGTERM handlers run. On
   cgroup v2 the same with ``cgroup.freeze``.
2. **The grace period** (the operation's ``gracePeriodSeconds``; DEFAULT_GRACE_SECONDS when it names
   none): the tick loop is not blocked. A worker thread polls the cgroup; when it is empty early, the
   eviction is done.
3. **SIGKILL** to whatever is left: v2 writes ``cgroup.kill`` (the kernel kills the whole subtree,
   forks in flight included); v1 freezes, signals every process, thaws (a frozen task dies as it
   thaws and cannot fork first). Repeated every poll until the cgroup is empty, or reported failed
   after KILL_TIMEOUT (a process stuck in uninterruptible sleep, say).

``evict`` answers the tick with *started* (SIGTERM sent), or at once with why nothing was started
(*vanished*: the cgroup is gone; *unchanged*: no process was running in it; *failed*: refused or
the signals could not be sent). The final outcome, *applied* when the processes are gone or *failed*
with the reason, is handed to the daemon by ``finished()``, which records it (metrics, audit log,
the eviction record of the engine state) then: "evicted" is only ever said of processes that are gone.

A pure step function (``next_step``) holds the timing: what to do for one eviction, given the time
and how many processes are alive. The rest is the file and signal I/O around it.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Literal

from engine.adapters.evict_journal import Entry, EvictionJournal
from engine.adapters.fsio import PathEscape, relative_parts
from engine.adapters.result import OperationResult
from engine.cgroups.mounts import CgroupLayout
from engine.model.operations import DEFAULT_GRACE_SECONDS, EvictPod, Operation

log = logging.getLogger("qosd.adapters.evict")

POLL_SECONDS = 0.1  # how often the worker looks at the cgroups of evictions in progress
KILL_TIMEOUT = 10.0  # seconds after the first SIGKILL before a survivor is reported
FREEZE_TIMEOUT = 5.0  # seconds a freeze may take (tasks in uninterruptible sleep delay it)
GATHER_ROUNDS = 50  # v1: rounds of moving newly forked processes into the frozen cgroup

Step = Literal["wait", "kill", "done", "stuck"]
Locate = Callable[[str], str | None]  # workload uid -> its cgroup path, None when unknown


# ------------------------------------------------------------------------------- the state machine


@dataclass(frozen=True)
class Kill:
    """One eviction in progress (times on the adapter's monotonic clock)."""

    op: EvictPod
    path: str  # the workload's cgroup, relative to the cgroup root
    started: float
    term_deadline: float  # started + grace: SIGKILL from then on
    signalled: int  # processes sent SIGTERM
    kill_deadline: float | None = None  # set by the first SIGKILL
    killed: int = 0  # processes sent SIGKILL, over every sweep


def next_step(kill: Kill, now: float, alive: int) -> Step:
    """What to do for ``kill`` now that ``alive`` processes are left in its cgroup."""
    if alive == 0:
        return "done"
    if kill.kill_deadline is None:
        return "kill" if now >= kill.term_deadline else "wait"
    return "stuck" if now >= kill.kill_deadline else "kill"


def grace_of(op: EvictPod) -> int:
    """The operation's grace period; the planner already resolved -1 (the pod's own)."""
    grace = op.grace_period_seconds
    return DEFAULT_GRACE_SECONDS if grace is None or grace < 0 else grace


def finished_result(kill: Kill, step: Step, now: float, alive: int) -> OperationResult:
    """The outcome of an eviction whose step is ``done`` or ``stuck``."""
    took = f"{now - kill.started:.1f}s"
    where = f"{kill.op.namespace}/{kill.op.name} (cgroup {kill.path})"
    if step == "done":
        how = (
            f"after SIGKILL to {kill.killed} process(es) at the end of the {grace_of(kill.op)}s grace period"
            if kill.kill_deadline is not None
            else "within the grace period, after SIGTERM"
        )
        return OperationResult(
            kill.op,
            "applied",
            None,
            1,
            f"evicted {where}: its {kill.signalled} process(es) are gone {how} ({took})",
        )
    return OperationResult(
        kill.op,
        "failed",
        f"eviction of {where} not complete: {alive} process(es) still in the cgroup {KILL_TIMEOUT:g}s "
        "after SIGKILL (uninterruptible sleep? see their state in /proc/<pid>/status); not evicted",
        1,
    )


# ------------------------------------------------------------------------------- cgroup signals


class Signals:
    """Signals to every process of a cgroup subtree, with the subtree frozen while they are sent."""

    def __init__(self, fs: CgroupLayout, freezer: str | None = None) -> None:
        self.fs = fs
        # the v1 freezer hierarchy (its own mount or a co-mount naming it), from the one detection
        self.freezer = freezer if freezer is not None else fs.v1.get("freezer") if fs.version == 1 else None
        self.created: set[str] = set()  # freezer cgroups made for an eviction, removed after it
        self._created_lock = threading.Lock()  # the tick starts evictions, the worker ends them

    def base(self, path: str) -> str:
        """The workload's directory in the hierarchy its processes are listed in (v1: cpu's)."""
        return self.fs.dir(path, "cpu")

    def procs(self, path: str) -> set[int]:
        """Every process in the cgroup and its descendants (a missing cgroup has none)."""
        return _subtree_procs(self.base(path))

    def send(self, path: str, sig: signal.Signals) -> tuple[int, str]:
        """Signal every process of ``path``'s subtree; (how many were signalled, a note)."""
        if self.fs.version == 2:
            base = self.base(path)
            if sig == signal.SIGKILL and os.path.exists(f"{base}/cgroup.kill"):
                pids = _subtree_procs(base)
                _write(f"{base}/cgroup.kill", "1")
                return len(pids), "cgroup.kill"
            with _frozen_v2(base):
                return _kill_all(_subtree_procs(base), sig), "frozen (cgroup.freeze)"
        if self.freezer is None:
            return (
                _kill_all(self.procs(path), sig),
                "no freezer hierarchy: signalled unfrozen, swept again until empty",
            )
        frozen = f"{self.freezer}/{path.strip('/')}"
        step = self.freezer
        for part in path.strip("/").split("/"):
            step = f"{step}/{part}"
            if not os.path.isdir(step):
                try:
                    os.mkdir(step)
                except FileExistsError:
                    continue  # made meanwhile, by someone else: not ours to remove
                with self._created_lock:
                    self.created.add(step)
        try:
            _write(f"{frozen}/freezer.state", "FROZEN")
            pids = self._gather(path, frozen)
            how = "frozen (freezer.state)"
            if not _reaches(f"{frozen}/freezer.state", "FROZEN"):
                # A task in uninterruptible sleep delays the freeze: signal anyway, sweep again later.
                how = f"not all frozen within {FREEZE_TIMEOUT:g}s (a task in uninterruptible sleep?)"
            return _kill_all(pids, sig), how
        finally:
            _write(f"{frozen}/freezer.state", "THAWED")

    def _gather(self, path: str, frozen: str) -> set[int]:
        """Move every process of the workload into the frozen freezer cgroup; a task moved there
        stops, so only the not yet moved can fork, and each round moves what they forked."""
        for _ in range(GATHER_ROUNDS):
            outside = self.procs(path) - _subtree_procs(frozen)
            if not outside:
                return self.procs(path)
            for pid in outside:
                try:
                    _write(f"{frozen}/cgroup.procs", str(pid))
                except OSError as exc:
                    if exc.errno != errno.ESRCH:  # exited meanwhile: churn
                        raise
        raise OSError(
            errno.EAGAIN, f"processes kept forking faster than {GATHER_ROUNDS} rounds gathered them"
        )

    def release(self, path: str) -> None:
        """Remove the freezer cgroups made for this eviction (deepest first), those now empty."""
        if self.freezer is None:
            return
        frozen = f"{self.freezer}/{path.strip('/')}"
        with self._created_lock:
            mine = [d for d in self.created if frozen == d or frozen.startswith(d + "/")]
            for directory in sorted(mine, key=len, reverse=True):
                with contextlib.suppress(OSError):  # in use by another eviction: its release removes it
                    os.rmdir(directory)
                    self.created.discard(directory)


def _subtree_procs(base: str) -> set[int]:
    pids: set[int] = set()
    for directory, _dirs, files in os.walk(base):
        if "cgroup.procs" in files:
            with contextlib.suppress(OSError), open(f"{directory}/cgroup.procs") as fh:  # or removed
                pids.update(int(x) for x in fh.read().split())
    return pids


def _kill_all(pids: Iterable[int], sig: signal.Signals) -> int:
    sent = 0
    for pid in pids:
        try:
            os.kill(pid, sig)
            sent += 1
        except ProcessLookupError:
            continue  # exited meanwhile
    return sent


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _reaches(path: str, want: str) -> bool:
    """Whether ``path`` reads ``want`` within FREEZE_TIMEOUT (FREEZING becomes FROZEN once every
    task stopped)."""
    deadline = time.monotonic() + FREEZE_TIMEOUT
    while True:
        with open(path) as fh:
            if fh.read().strip() == want:
                return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)


def _frozen_v2(base: str) -> contextlib.AbstractContextManager[None]:
    """cgroup v2's freezer around the signals (a no-op where the kernel has no cgroup.freeze)."""
    freeze = f"{base}/cgroup.freeze"
    if not os.path.exists(freeze):
        return contextlib.nullcontext()
    return _frozen_v2_file(base, freeze)


@contextlib.contextmanager
def _frozen_v2_file(base: str, freeze: str) -> Iterator[None]:
    _write(freeze, "1")
    try:
        deadline = time.monotonic() + FREEZE_TIMEOUT
        while time.monotonic() < deadline:
            with open(f"{base}/cgroup.events") as fh:
                if "frozen 1" in fh.read():
                    break
            time.sleep(0.005)
        yield
    finally:
        _write(freeze, "0")


# ------------------------------------------------------------------------------- the adapter


class StandaloneEvictions:
    """The ``evictPod`` handler of standalone mode. ``locate(uid)`` is the workload's cgroup path
    (the standalone source knows it); ``clock`` is monotonic seconds."""

    def __init__(
        self,
        fs: CgroupLayout,
        locate: Locate,
        *,
        signals: Signals | None = None,
        clock: Callable[[], float] = time.monotonic,
        poll: float = POLL_SECONDS,
        journal: EvictionJournal | None = None,
    ) -> None:
        self.fs = fs
        self.locate = locate
        self.signals = signals or Signals(fs)
        self.clock = clock
        self.poll = poll
        self.journal = journal
        self._lock = threading.Condition()
        self._running: dict[str, Kill] = {}  # uid -> eviction in progress
        self._finished: list[OperationResult] = []
        self._worker: threading.Thread | None = None
        if journal is not None:
            self._resume(journal)

    def _resume(self, journal: EvictionJournal) -> None:
        """Take over the evictions a previous daemon left unfinished (engine.adapters.evict_journal):
        each goes on with the grace period it had left, its SIGKILL due when that is over."""
        now = self.clock()
        with self._lock:
            for r in journal.load():
                kill_deadline = None if r.kill_left is None else now + r.kill_left
                self._running[r.op.uid] = Kill(
                    r.op, r.path, now - r.started_ago, now + r.term_left, r.signalled, kill_deadline, r.killed
                )
                log.info(
                    "eviction resumed after a restart",
                    extra={
                        "fields": {
                            "workload": f"{r.op.namespace}/{r.op.name}",
                            "cgroup": r.path,
                            "graceLeft": round(max(r.term_left, 0.0), 1),
                        }
                    },
                )
            if self._running:
                self._start_worker()

    def _journal(self) -> None:
        """Save the evictions in progress (called with the lock held, after each change)."""
        if self.journal is not None:
            entries: list[Entry] = [
                (k.op, k.path, k.started, k.term_deadline, k.kill_deadline, k.signalled, k.killed)
                for k in self._running.values()
            ]
            self.journal.save(entries, self.clock())

    # -- the tick's side

    def evict(self, op: Operation) -> OperationResult:
        """Start evicting: SIGTERM sent (*started*), or why nothing was started."""
        if not isinstance(op, EvictPod):
            return OperationResult(op, "skipped", f"{op.kind} is not an eviction")
        who = f"{op.namespace}/{op.name}"
        with self._lock:
            if op.uid in self._running:
                return OperationResult(op, "unchanged", None, 0, f"eviction of {who} already under way")
        path = self.locate(op.uid)
        if path is None:
            return OperationResult(
                op, "vanished", f"workload {who} is no longer among the discovered cgroups"
            )
        try:
            parts = relative_parts(path)
        except PathEscape as exc:
            return OperationResult(op, "failed", str(exc))
        if not parts:
            return OperationResult(op, "failed", f"refused to evict {who}: its cgroup is the cgroup root")
        path = "/".join(parts)
        if not os.path.isdir(self.signals.base(path)):
            return OperationResult(op, "vanished", f"cgroup {path} of {who} no longer exists")
        pids = self.signals.procs(path)
        if os.getpid() in pids:
            return OperationResult(
                op, "failed", f"refused to evict {who}: qosd itself runs in its cgroup {path}"
            )
        if not pids:
            return OperationResult(
                op, "unchanged", None, 0, f"no process runs in cgroup {path}: nothing to stop"
            )
        try:
            sent, how = self.signals.send(path, signal.SIGTERM)
        except OSError as exc:
            self.signals.release(path)
            return OperationResult(
                op, "failed", f"eviction of {who}: SIGTERM to cgroup {path} failed: {exc}", 1
            )
        now = self.clock()
        grace = grace_of(op)
        kill = Kill(op, path, now, now + grace, sent)
        log.info(
            "eviction started",
            extra={"fields": {"workload": who, "cgroup": path, "sigterm": sent, "grace": grace, "how": how}},
        )
        with self._lock:
            self._running[op.uid] = kill
            self._journal()
            self._start_worker()
            self._lock.notify_all()
        return OperationResult(
            op,
            "started",
            None,
            1,
            f"SIGTERM sent to {sent} process(es) of cgroup {path} ({how}); SIGKILL after {grace}s if any is "
            "left; recorded as evicted once they are gone",
        )

    def finished(self) -> list[OperationResult]:
        """Outcomes of evictions that ended since the last call (applied: the processes are gone)."""
        with self._lock:
            done, self._finished = self._finished, []
        return done

    def in_progress(self) -> int:
        with self._lock:
            return len(self._running)

    def wait(self, timeout: float) -> bool:
        """Until no eviction is in progress, at most ``timeout`` seconds; True when none is."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._running:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(min(left, self.poll))
        return True

    # -- the worker's side

    def _start_worker(self) -> None:
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._work, name="qosd-evict", daemon=True)
            self._worker.start()

    def _work(self) -> None:
        while True:
            with self._lock:
                if not self._running:
                    self._worker = None
                    return
                running = list(self._running.values())
            for kill in running:
                try:
                    self._advance(kill)
                except Exception as exc:  # one eviction's fault must not stop the others
                    log.exception("eviction step raised", extra={"fields": {"cgroup": kill.path}})
                    self._end(kill, OperationResult(kill.op, "failed", f"eviction step raised {exc!r}", 1))
            time.sleep(self.poll)

    def _advance(self, kill: Kill) -> None:
        alive = len(self.signals.procs(kill.path))
        now = self.clock()
        step = next_step(kill, now, alive)
        if step == "wait":
            return
        if step == "kill":
            sent, _ = self.signals.send(kill.path, signal.SIGKILL)
            first = kill.kill_deadline is None
            kill = replace(
                kill,
                kill_deadline=now + KILL_TIMEOUT if first else kill.kill_deadline,
                killed=kill.killed + sent,
            )
            with self._lock:
                self._running[kill.op.uid] = kill
                self._journal()
            return
        self._end(kill, finished_result(kill, step, now, alive))

    def _end(self, kill: Kill, result: OperationResult) -> None:
        self.signals.release(kill.path)
        log.log(
            logging.INFO if result.status == "applied" else logging.WARNING,
            "eviction finished",
            extra={"fields": {"workload": f"{kill.op.namespace}/{kill.op.name}", **result.to_dict()}},
        )
        with self._lock:
            self._running.pop(kill.op.uid, None)
            self._journal()
            self._finished.append(result)
            self._lock.notify_all()
