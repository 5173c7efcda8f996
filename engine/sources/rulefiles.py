"""Hot reload of rule files: tell the reload path when the rule files' *content* may have changed.

``qosd run --rules PATH`` takes files and directories. This watcher calls ``on_change(reason)`` when
the bytes the loader would read from them changed; the reload path (engine.reload) then re-reads,
validates and swaps. Why it is built the way it is (measurements with watchdog 7.1 in
shared/reference/ecosystem.md section 4.4):

* A ConfigMap volume is updated by kubelet's AtomicWriter: a new ``..<timestamp>`` directory, a
  ``..data_tmp`` link renamed over ``..data``, the old directory removed. No event ever names
  ``rules.yaml`` (a visible symlink into ``..data``), and a watch on the file itself sees nothing.
  So every path is watched through its **parent directory** (non-recursive), and a directory path
  also recursively (a rules directory may nest); never a file.
* Editors save atomically (write a temp sibling, rename it over the file): the rename is the event.
* An in-place write is taken at IN_CLOSE_WRITE (watchdog's ``closed``), never at IN_MODIFY, so a
  half-written file is not read. The inotify mask holds no IN_MODIFY, IN_OPEN, IN_ATTRIB or
  IN_CLOSE_NOWRITE at all: the daemon's own reads of the rule files make no events, a touch makes
  none, and a busy writer cannot flood the queue.
* An event only says "maybe". The decision is a sha256 over the names and bytes of every rule file
  the paths expand to (engine.config.load.expand_paths, the loader's own expansion), compared with
  the last hash reported: a touch or an identical re-save calls nothing, and the bursts of an
  editor's save or of a ConfigMap swap call once (debounce, see ``RuleFileWatcher``).
* Except one event: the rename of ``..data`` into place (or its creation as a link) is a
  ConfigMap update's atomic switch. kubelet wrote the payload and the links to new keys before
  it, so the new content is complete at that instant, and waiting would only add latency: the
  check runs at once. The swap's other events (the payload directory's creation before, the old
  one's removal after) are covered by that check or make a check that finds nothing new.
* Events get lost: the inotify queue overflows, the watch limit is reached, a watched directory is
  deleted and recreated (a watch follows an inode, not a name), a bug kills watchdog's thread. A
  periodic full re-read (the backstop) runs the same check and first repairs the watches and, if
  needed, the observer.

Threads: watchdog's observer thread only filters an event and moves a deadline (microseconds, never
blocks on the callback). One dedicated thread, ``qosd-rulefiles``, does every check and calls
``on_change`` serially, so a slow reload delays the next check instead of piling up reloads.

Linux only (inotify), as qosd is.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileMovedEvent,
)
from watchdog.observers.inotify import InotifyObserver

from engine.config.load import expand_paths, is_rule_file_name, skipped_entry

log = logging.getLogger("qosd")

REASON_EVENT = "event"  # a debounced filesystem event, and the content hash changed
REASON_BACKSTOP = "backstop"  # the periodic full re-read found a change no event reported
REASON_RESCAN = "rescan"  # rescan() was asked for, and the content hash changed

DEFAULT_DEBOUNCE = 0.05
DEFAULT_BACKSTOP = 60.0
DEFAULT_MAX_DELAY = 1.0

DATA_LINK = "..data"
# kubelet AtomicWriter's payload directories: ..2026_11_22_10_00_00.123456789
_TIMESTAMP_DIR = re.compile(r"^\.\.\d{4}_\d{2}_\d{2}_\d{2}_\d{2}_\d{2}\.\d+$")
# The kinds of events asked of inotify (anything else is not even queued by the kernel).
_EVENT_FILTER = [
    FileCreatedEvent,
    DirCreatedEvent,
    FileDeletedEvent,
    DirDeletedEvent,
    FileMovedEvent,
    DirMovedEvent,
    FileClosedEvent,
]
_RELEVANT_TYPES = frozenset({"created", "deleted", "moved", "closed"})
_JOIN_TIMEOUT = 30.0  # longest wait in stop() for an on_change in progress


@dataclass
class _Watch:
    path: str
    recursive: bool
    ident: tuple[int, int]  # (st_dev, st_ino) when scheduled: a recreated directory is a new watch
    handle: Any  # watchdog ObservedWatch


def _under(path: str, directory: str) -> bool:
    """``path`` is strictly below ``directory`` (both absolute and normalized)."""
    return path.startswith(directory if directory.endswith(os.sep) else directory + os.sep)


def _ident(path: str) -> tuple[int, int] | None:
    """The directory's identity, following symlinks; None when it is not a directory (now)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if os.path.isdir(path) else None


def _existing_ancestor(path: str) -> str:
    """``path`` if it is a directory, else its nearest ancestor that is (a rules path may name a
    directory that is created later: its creation is seen from there)."""
    while not os.path.isdir(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def _decode(path: Any) -> str:
    return os.fsdecode(path) if path else ""


def _describe(event: Any) -> str:
    src, dest = _decode(event.src_path), _decode(getattr(event, "dest_path", ""))
    return f"{event.event_type} {src} -> {dest}" if dest else f"{event.event_type} {src}"


class _Handler:
    """What watchdog's observer thread calls. Never raises: an exception here would end the
    observer's dispatch thread (the backstop restarts it, but events would be lost meanwhile)."""

    def __init__(self, on_event: Callable[[Any], None]) -> None:
        self._on_event = on_event

    def dispatch(self, event: Any) -> None:
        try:
            self._on_event(event)
        except Exception:
            log.exception("rule file event handling failed", extra={"fields": {"event": repr(event)}})


def _switches_data(event: Any) -> bool:
    """A ConfigMap update's atomic switch: ``..data`` renamed into place (kubelet renames
    ``..data_tmp`` over it) or created as a link; see the module docstring."""
    if event.event_type == "moved":
        return os.path.basename(_decode(event.dest_path)) == DATA_LINK
    return event.event_type == "created" and os.path.basename(_decode(event.src_path)) == DATA_LINK


def content_hash(paths: Sequence[Path]) -> tuple[str, tuple[str, ...]]:
    """sha256 over every rule file ``paths`` expand to, exactly as the loader expands them
    (expand_paths: named files, rule files below directories, hidden and editor files skipped):
    each file's path and bytes in sorted path order, plus a marker per named path that does not
    exist (so a file's disappearance and return are changes) and per unreadable file. Returns the
    hex digest and the files read."""
    files, problems = expand_paths(list(paths))
    h = hashlib.sha256()
    names = sorted({str(f) for f in files})
    for name in names:
        encoded = name.encode("utf-8", "surrogateescape")
        try:
            data = Path(name).read_bytes()
        except OSError as exc:
            h.update(b"unreadable\0" + encoded + b"\0" + str(exc.errno).encode() + b"\0")
            continue
        h.update(b"file\0" + encoded + b"\0" + len(data).to_bytes(8, "big"))
        h.update(data)
    for missing in sorted(p.location.source for p in problems):
        h.update(b"missing\0" + missing.encode("utf-8", "surrogateescape") + b"\0")
    return h.hexdigest(), tuple(names)


class RuleFileWatcher:
    """Calls ``on_change(reason)`` when the content of the rule files under ``paths`` changed.

    ``paths``: the files and directories given to ``qosd run --rules`` (a path may not exist yet).
    ``on_change(reason)``: called from the watcher's own thread, serially, only when the content
    hash differs from the last one delivered; ``reason`` is ``"event"``, ``"backstop"`` or
    ``"rescan"``. If it raises, the exception is logged and the hash is not recorded as delivered,
    so the next check (any relevant event, ``rescan()`` or the backstop) offers it again.
    ``debounce`` (seconds, default 0.05): quiet time after the last relevant event before the
    check. Why 50 ms: the budget is p99 <= 100 ms from a save to a new generation in effect, and a
    reload (read, validate, compile) takes a few tens of ms on top of the debounce; the bursts to
    coalesce are an editor's save (create, close, rename) and kubelet's ``..data`` swap, both a
    handful of syscalls that finish within a millisecond or two, so 50 ms covers them with a wide
    margin on a loaded node while leaving half the budget to the reload. The 200-500 ms usual for
    config reloaders would break the budget on its own.
    ``max_delay`` (seconds, default 1.0, or ``debounce`` if longer): a steady stream of events (a
    tool rewriting a file in a loop) postpones the check at most this long after a burst's start.
    ``backstop`` (seconds, default 60): period of the full re-read that catches what events missed
    (queue overflow, watch limit, a directory replaced, a dead observer) and repairs the watches.
    A ConfigMap ``..data`` switch skips the debounce (module docstring).
    """

    def __init__(
        self,
        paths: Sequence[Path | str],
        on_change: Callable[[str], None],
        *,
        debounce: float = DEFAULT_DEBOUNCE,
        backstop: float = DEFAULT_BACKSTOP,
        max_delay: float | None = None,
    ) -> None:
        max_delay = max(DEFAULT_MAX_DELAY, debounce) if max_delay is None else max_delay
        if debounce < 0 or backstop <= 0 or max_delay < debounce:
            raise ValueError(
                f"rule file watcher: need debounce >= 0, backstop > 0 and max_delay >= debounce "
                f"(got debounce={debounce}, backstop={backstop}, max_delay={max_delay})"
            )
        self.paths: tuple[Path, ...] = tuple(Path(p) for p in paths)
        self.debounce = debounce
        self.backstop = backstop
        self.max_delay = max_delay
        self._on_change = on_change
        # Absolute but not resolved: resolving rules.yaml -> ..data/rules.yaml would watch the
        # timestamped directory that the next ConfigMap update deletes.
        self._targets = tuple(os.path.abspath(p) for p in self.paths)
        self._target_parents = tuple(os.path.dirname(t) for t in self._targets)
        self._handler = _Handler(self._on_event)
        self._cond = threading.Condition()
        self._lifecycle = threading.Lock()
        # Guarded by _cond:
        self._deadline: float | None = None  # when the debounced check is due
        self._switched = False  # a ..data switch is waiting for its (immediate) check
        self._burst_start: float | None = None
        self._trigger: str | None = None  # the last relevant event, for the log
        self._rescan = False
        self._stopping = False
        self._current: str | None = None  # hash at the last check
        self._files: tuple[str, ...] = ()  # files read at the last check
        self._checks = 0
        self._watch_keys: tuple[tuple[str, bool], ...] = ()
        # Owned by the worker thread (and by start() before it exists, stop() after it ended):
        self._reported: str | None = None  # the hash last delivered to on_change (or the baseline)
        self._observer: Any = None
        self._watches: dict[tuple[str, bool], _Watch] = {}
        self._failing: dict[str, str] = {}  # path -> error, to log a failing watch once
        self._thread: threading.Thread | None = None
        self._stopped = False

    # -- lifecycle

    def start(self) -> None:
        """Watch, take the current content as the baseline (no callback for it: the daemon's first
        tick loads the files), and start the check thread. Idempotent; a stopped watcher cannot be
        restarted."""
        with self._lifecycle:
            if self._stopped:
                raise RuntimeError("this RuleFileWatcher was stopped; create a new one")
            if self._thread is not None:
                return
            try:
                # Watches first: a change after them is an event, one before them is in the baseline.
                self._reconcile()
            except Exception as exc:
                log.error(
                    "cannot watch the rule files; changes are picked up by the periodic re-read only",
                    extra={"fields": {"error": str(exc), "backstopSeconds": self.backstop}},
                )
            digest, files = content_hash(self.paths)
            with self._cond:
                self._current, self._files = digest, files
            self._reported = digest
            self._thread = threading.Thread(target=self._run, name="qosd-rulefiles", daemon=True)
            self._thread.start()
        log.info(
            "watching rule files",
            extra={
                "fields": {
                    "paths": [str(p) for p in self.paths],
                    "watches": [f"{p}{' (recursive)' if r else ''}" for p, r in self.watches()],
                    "files": len(files),
                    "hash": digest[:12],
                    "debounceSeconds": self.debounce,
                    "backstopSeconds": self.backstop,
                }
            },
        )

    def stop(self) -> None:
        """Stop checking and watching; waits for an on_change in progress (bounded). Idempotent, and
        safe to call from on_change itself."""
        with self._lifecycle:
            if self._stopped:
                return
            self._stopped = True
            thread = self._thread
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(_JOIN_TIMEOUT)
            if thread.is_alive():
                log.warning(
                    "rule file watcher: on_change still running at stop; leaving its thread behind",
                    extra={"fields": {"waitedSeconds": _JOIN_TIMEOUT}},
                )
        observer, self._observer = self._observer, None
        self._watches.clear()
        if observer is not None:
            self._close_observer(observer)

    def __enter__(self) -> RuleFileWatcher:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- queries and requests

    def current_hash(self) -> str:
        """The content hash as of the last check: during an on_change call, the content that call
        is about. Before start(), the hash of the files now."""
        with self._cond:
            current = self._current
        return current if current is not None else content_hash(self.paths)[0]

    @property
    def checks(self) -> int:
        """Checks completed since start (each debounced event burst, rescan and backstop is one)."""
        with self._cond:
            return self._checks

    def wait_for_checks(self, count: int, timeout: float | None = None) -> bool:
        """Block until at least ``count`` checks have completed; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._checks >= count, timeout)

    def rescan(self) -> None:
        """Ask for a full re-read now, as the backstop does (repairing watches too), without waiting
        for it; on_change follows if the content changed. For SIGHUP-style requests."""
        with self._cond:
            self._rescan = True
            self._cond.notify_all()

    def scheduled(self) -> float | None:
        """Seconds until the check that the events seen so far scheduled (0 or less: due now);
        None when every event seen is covered by a check."""
        with self._cond:
            return None if self._deadline is None else self._deadline - time.monotonic()

    def wait_pending(self, timeout: float | None = None) -> bool:
        """Block until an event schedules a check (see ``scheduled``); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._deadline is not None, timeout)

    def watches(self) -> list[tuple[str, bool]]:
        """The directories watched now, as (path, recursive)."""
        with self._cond:
            return list(self._watch_keys)

    # -- the observer thread

    def _on_event(self, event: Any) -> None:
        if not self._relevant(event):
            return
        now = time.monotonic()
        with self._cond:
            if self._burst_start is None:
                self._burst_start = now
            if _switches_data(event):
                self._switched = True
                self._deadline = now
            elif not self._switched:  # a later event must not postpone the switch's check
                self._deadline = min(now + self.debounce, self._burst_start + self.max_delay)
            self._trigger = _describe(event)
            self._cond.notify_all()

    def _relevant(self, event: Any) -> bool:
        """Whether an event may mean the rule files' content changed (the hash decides)."""
        kind = event.event_type
        if kind not in _RELEVANT_TYPES:
            return False  # opened, closed_no_write, modified, attrib: reads, touches, writes under way
        src = _decode(event.src_path)
        if kind == "created" and not event.is_directory and not os.path.islink(src):
            return False  # a file being written: its close (IN_CLOSE_WRITE) comes when it is complete
        dest = _decode(getattr(event, "dest_path", "")) if kind == "moved" else ""
        return any(self._relevant_path(p, kind, bool(event.is_directory)) for p in (src, dest) if p)

    def _relevant_path(self, path: str, kind: str, is_directory: bool) -> bool:
        name = os.path.basename(path)
        swap = name == DATA_LINK or _TIMESTAMP_DIR.match(name) is not None
        for target, parent in zip(self._targets, self._target_parents, strict=True):
            if path == target or _under(target, path):
                return True  # the path itself, or a directory on its way, came, went or was replaced
            if os.path.dirname(path) == parent:
                if swap:
                    return True  # a ConfigMap ..data swap beside the path
                if kind == "closed" and os.path.basename(target) in name:
                    # An editor's temp or backup sibling (rules.yaml.swp~, .rules.yaml.tmp) was just
                    # written; the rename over the file follows within a millisecond. Checking on
                    # this event too keeps the reload fast even when watchdog holds the rename back
                    # (it pairs IN_MOVED_FROM/TO through a 0.5 s delay queue).
                    return True
            if _under(path, target) and self._relevant_below(path, target, name, swap, kind, is_directory):
                return True
        return False

    def _relevant_below(
        self, path: str, directory: str, name: str, swap: bool, kind: str, is_directory: bool
    ) -> bool:
        """An event below a watched rules directory: what the loader reads, or may read next."""
        if swap:
            return True  # a ConfigMap mounted at (or below) the rules directory
        parents = os.path.relpath(path, directory).split(os.sep)[:-1]
        if any(skipped_entry(part) for part in parents):
            return False  # inside ..data, a ..<timestamp> copy or another hidden directory
        if skipped_entry(name):
            # An editor's temp copy of a rule file, closed just before the rename (see above).
            return kind == "closed" and (".yaml" in name or ".yml" in name)
        if is_directory or is_rule_file_name(name):
            return True
        if kind in ("created", "moved") and os.path.isdir(path):
            return True  # a symlink to a directory of rules
        # A link to a directory of rules went away (its event does not say it was a directory).
        with self._cond:
            files = self._files
        return kind in ("deleted", "moved") and any(_under(f, path) for f in files)

    # -- the check thread

    def _run(self) -> None:
        next_backstop = time.monotonic() + self.backstop
        while True:
            with self._cond:
                while True:
                    if self._stopping:
                        return
                    now = time.monotonic()
                    if self._rescan:
                        self._rescan = False
                        reason = REASON_RESCAN
                        break
                    if self._deadline is not None and now >= self._deadline:
                        reason = REASON_EVENT
                        break
                    if now >= next_backstop:
                        reason = REASON_BACKSTOP
                        break
                    wake = next_backstop if self._deadline is None else min(self._deadline, next_backstop)
                    self._cond.wait(wake - now)
                # A check covers every event seen so far, whatever triggered it.
                self._deadline = self._burst_start = None
                self._switched = False
                trigger, self._trigger = self._trigger, None
            # Every check is a full re-read and repairs the watches, so it also restarts the period.
            next_backstop = time.monotonic() + self.backstop
            self._check(reason, trigger)

    def _check(self, reason: str, trigger: str | None) -> None:
        try:
            self._reconcile()
        except Exception as exc:
            log.error(
                "cannot (re)establish the rule file watches; retrying at the next check",
                extra={"fields": {"error": str(exc), "backstopSeconds": self.backstop}},
            )
        try:
            digest, files = content_hash(self.paths)
        except Exception:
            log.exception("reading the rule files for their hash failed; retrying at the next check")
            self._checked()
            return
        with self._cond:
            self._current, self._files = digest, files
        if digest != self._reported:
            log.info(
                "rule files changed",
                extra={
                    "fields": {
                        "reason": reason,
                        "trigger": trigger,
                        "hash": digest[:12],
                        "files": len(files),
                    }
                },
            )
            try:
                self._on_change(reason)
            except Exception:
                log.exception(
                    "rule file change handler failed; the change is offered again at the next check",
                    extra={"fields": {"hash": digest[:12], "reason": reason}},
                )
            else:
                self._reported = digest
        self._checked()

    def _checked(self) -> None:
        with self._cond:
            self._checks += 1
            self._cond.notify_all()

    # -- watches

    def _desired(self) -> set[tuple[str, bool]]:
        """(directory, recursive) to watch: each path's parent (or the nearest existing ancestor,
        to see it appear), and each existing directory path recursively."""
        want: set[tuple[str, bool]] = set()
        for target, parent in zip(self._targets, self._target_parents, strict=True):
            want.add((_existing_ancestor(parent), False))
            if os.path.isdir(target):
                want.add((target, True))
        return {(p, r) for p, r in want if r or (p, True) not in want}

    def _reconcile(self) -> None:
        """Make the watches match _desired(): restart a dead observer, drop watches whose emitter
        ended (its directory was deleted) or whose directory was replaced, add the missing ones."""
        if self._observer is None or not self._observer.is_alive():
            self._restart_observer()
        observer = self._observer
        desired = self._desired()
        alive = {emitter.watch for emitter in list(observer.emitters) if emitter.is_alive()}
        for key, watch in list(self._watches.items()):
            if key in desired and watch.handle in alive and _ident(watch.path) == watch.ident:
                continue
            with contextlib.suppress(KeyError):
                observer.unschedule(watch.handle)
            del self._watches[key]
        for key in sorted(desired - self._watches.keys()):
            path, recursive = key
            ident = _ident(path)
            if ident is None:
                continue  # gone since _desired(); the event that removed it brings another check
            try:
                handle = observer.schedule(
                    self._handler,
                    path,
                    recursive=recursive,
                    event_filter=_EVENT_FILTER,
                    follow_symlink=os.path.islink(path),
                )
            except OSError as exc:
                self._watch_failed(path, exc)
                continue
            if self._failing.pop(path, None) is not None:
                log.info("rule file watch added after all", extra={"fields": {"path": path}})
            self._watches[key] = _Watch(path, recursive, ident, handle)
        with self._cond:
            self._watch_keys = tuple(sorted(self._watches))

    def _watch_failed(self, path: str, exc: OSError) -> None:
        if exc.errno == errno.ENOSPC:
            message = "inotify watch limit reached (raise fs.inotify.max_user_watches)"
        elif exc.errno == errno.EMFILE:
            message = "inotify instance limit reached (raise fs.inotify.max_user_instances)"
        else:
            message = exc.strerror or str(exc)
        if self._failing.get(path) != message:
            self._failing[path] = message
            log.warning(
                "cannot watch a rule directory; its changes are picked up by the periodic re-read",
                extra={"fields": {"path": path, "error": message, "backstopSeconds": self.backstop}},
            )

    def _restart_observer(self) -> None:
        old = self._observer
        if old is not None:
            log.warning(
                "rule file watch thread ended; restarting it",
                extra={"fields": {"watches": len(self._watches)}},
            )
            self._close_observer(old)
        self._observer = None
        self._watches.clear()
        # Unmatched moves reported as moves: a file moved in from elsewhere is complete, while a
        # created one is still being written (only its close counts, see _relevant).
        observer = InotifyObserver(generate_full_events=True)
        try:
            observer.start()
        except Exception:
            self._close_observer(observer)
            raise
        self._observer = observer

    @staticmethod
    def _close_observer(observer: Any) -> None:
        try:
            observer.stop()
        except Exception:
            log.debug("stopping the rule file observer failed", exc_info=True)
        with contextlib.suppress(RuntimeError):  # never started
            observer.join(_JOIN_TIMEOUT)
