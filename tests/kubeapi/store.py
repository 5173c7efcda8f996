"""Objects, the global resourceVersion, the change history and the watchers.

Why one counter for every resource: that is etcd's revision, which the API server exposes as
resourceVersion; a client may compare versions only for equality, but a watch resumes "after N" across
the whole history, and a list's resourceVersion is the revision it was read at. The history is the watch
cache: a watch from N replays every change after N, unless N is older than the compaction floor, in
which case the server answers 410 Expired and the client must list again.

Stored dicts are never mutated once stored (every write stores a new dict), so history entries and
watcher queues can share them without copying; everything handed out is a deep copy.
"""

from __future__ import annotations

import copy
import queue
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"


@dataclass(frozen=True)
class Change:
    """One write: the object after it (for DELETED: the last state, stamped with the deletion's
    resourceVersion, as etcd reports it) and the object before it (to turn a change of a filtered
    watch's selector match into ADDED/DELETED, as the watch cache does)."""

    rv: int
    storage: str
    type: str
    obj: Json
    prev: Json | None


class Watcher:
    """A live watch's queue of changes. ``None`` in the queue means "stop now"."""

    def __init__(self, storage: str) -> None:
        self.storage = storage
        self._queue: queue.SimpleQueue[Change | None] = queue.SimpleQueue()

    def push(self, change: Change) -> None:
        self._queue.put(change)

    def close(self) -> None:
        self._queue.put(None)

    def idle(self) -> bool:
        return self._queue.empty()

    def next(self, timeout: float) -> Change | None:
        """The next change; raises ``queue.Empty`` after ``timeout`` seconds without one."""
        return self._queue.get(timeout=max(timeout, 0.0))


class TooOld(Exception):
    """The requested resourceVersion is older than the compaction floor (the caller answers 410)."""

    def __init__(self, requested: int, floor: int) -> None:
        super().__init__(f"too old resource version: {requested} ({floor})")
        self.requested = requested
        self.floor = floor


class Store:
    """Thread-safe object store. ``lock`` is re-entrant and public: the registry holds it across a
    read-check-write sequence so that preconditions and the write are atomic, as in etcd's
    GuaranteedUpdate."""

    def __init__(self, history_limit: int = 100_000) -> None:
        self.lock = threading.RLock()
        self._reached = threading.Condition(self.lock)
        self.history_limit = history_limit
        self._rv = 1
        self._floor = 1
        self._objects: dict[str, dict[Key, Json]] = {}
        self._history: deque[Change] = deque()
        self._watchers: set[Watcher] = set()

    @property
    def resource_version(self) -> int:
        with self.lock:
            return self._rv

    @property
    def floor(self) -> int:
        with self.lock:
            return self._floor

    def get(self, storage: str, namespace: str, name: str) -> Json | None:
        with self.lock:
            obj = self._objects.get(storage, {}).get((namespace, name))
            return copy_json(obj) if obj is not None else None

    def items(self, storage: str, namespace: str | None = None) -> list[Json]:
        """Current objects in etcd key order (namespace, then name), optionally in one namespace."""
        with self.lock:
            found = self._objects.get(storage, {})
            keys = sorted(k for k in found if namespace is None or k[0] == namespace)
            return [copy_json(found[k]) for k in keys]

    def items_at(self, storage: str, rv: int) -> list[Json]:
        """The objects as they were at ``rv`` (resourceVersionMatch=Exact, continue tokens): the current
        state with every later change undone. Raises TooOld below the compaction floor."""
        with self.lock:
            if rv < self._floor:
                raise TooOld(rv, self._floor)
            state = dict(self._objects.get(storage, {}))
            for change in reversed(self._history):
                if change.rv <= rv:
                    break
                if change.storage != storage:
                    continue
                key = _key(change.obj)
                if change.type == ADDED:
                    state.pop(key, None)
                elif change.prev is not None:
                    state[key] = change.prev
            return [copy_json(state[k]) for k in sorted(state)]

    def namespaces_in_use(self) -> set[str]:
        with self.lock:
            return {k[0] for objs in self._objects.values() for k in objs if k[0]}

    def write(self, storage: str, kind: str, obj: Json) -> Json:
        """Record one change (ADDED, MODIFIED or DELETED) of ``obj`` under the next resourceVersion and
        fan it out to the watchers. Returns a copy of what was stored."""
        with self.lock:
            key = _key(obj)
            bucket = self._objects.setdefault(storage, {})
            prev = bucket.get(key)
            self._rv += 1
            stored = copy_json(obj)
            stored.setdefault("metadata", {})["resourceVersion"] = str(self._rv)
            if kind == DELETED:
                bucket.pop(key, None)
            else:
                bucket[key] = stored
            change = Change(self._rv, storage, kind, stored, prev)
            self._history.append(change)
            while len(self._history) > self.history_limit:
                self._floor = self._history.popleft().rv
            for watcher in list(self._watchers):
                if watcher.storage == storage:
                    watcher.push(change)
            self._reached.notify_all()
            return copy_json(stored)

    def watch(self, storage: str, since: int | None) -> tuple[list[Json], list[Change], Watcher, int]:
        """Start a watch atomically with respect to writes. ``since`` None: the current objects (to be sent
        as synthetic ADDED) and no backlog; otherwise no objects and every change after ``since``. The
        last item is the resourceVersion the watch starts at."""
        with self.lock:
            watcher = Watcher(storage)
            if since is None:
                initial = self.items(storage)
                backlog: list[Change] = []
            else:
                if since < self._floor:
                    raise TooOld(since, self._floor)
                initial = []
                backlog = [c for c in self._history if c.rv > since and c.storage == storage]
            self._watchers.add(watcher)
            return initial, backlog, watcher, self._rv

    def idle_resource_version(self, watcher: Watcher) -> int | None:
        """The resourceVersion a BOOKMARK may carry for ``watcher``: the current one, provided the watcher
        has consumed every change so far (otherwise a client resuming from the bookmark would skip the
        changes still queued). None when changes are pending."""
        with self.lock:
            return self._rv if watcher.idle() else None

    def unwatch(self, watcher: Watcher) -> None:
        with self.lock:
            self._watchers.discard(watcher)

    def close_watchers(self) -> None:
        with self.lock:
            for watcher in self._watchers:
                watcher.close()

    def wait_for(self, rv: int, timeout: float) -> bool:
        """Whether the store has reached resourceVersion ``rv``, waiting up to ``timeout`` seconds
        for writes to get there (the watch cache's waitUntilFreshAndBlock)."""
        with self._reached:
            return self._reached.wait_for(lambda: self._rv >= rv, timeout)

    def reset_resource_versions(self) -> None:
        """Storage rebuilt with a new revision counter: every object is stored again, in key order,
        under resourceVersions counted from 1; the history is gone. Watchers must have been closed."""
        with self.lock:
            rv = 1
            for storage in sorted(self._objects):
                bucket = self._objects[storage]
                for key in sorted(bucket):
                    rv += 1
                    obj = copy_json(bucket[key])
                    obj.setdefault("metadata", {})["resourceVersion"] = str(rv)
                    bucket[key] = obj
            self._rv = rv
            self._history.clear()
            self._floor = rv

    def compact(self) -> None:
        """Forget the history: from now on only the current resourceVersion (or newer) can be resumed."""
        with self.lock:
            self._history.clear()
            self._floor = self._rv


def _key(obj: Json) -> Key:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


def copy_json(value: Any) -> Any:
    """A deep copy of a JSON value, as etcd hands out a fresh decode on every read. etcd holds
    bytes and the API server decodes up to 10,000 levels, so an object nested beyond Python's
    recursion limit is copied iteratively instead of failing the read."""
    try:
        return copy.deepcopy(value)
    except RecursionError:
        return _copy_deep(value)


def _copy_deep(value: Any) -> Any:
    if not isinstance(value, dict | list):
        return value
    root: Any = type(value)()
    stack: list[tuple[Any, Any]] = [(value, root)]
    while stack:
        src, dst = stack.pop()
        for key, child in src.items() if isinstance(src, dict) else enumerate(src):
            new = type(child)() if isinstance(child, dict | list) else child
            if isinstance(dst, dict):
                dst[key] = new
            else:
                dst.append(new)
            if new is not child:
                stack.append((child, new))
    return root
