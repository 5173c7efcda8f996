"""Kubernetes Events from qosd, posted the way client-go's recorder posts them.

An Event is the first thing an on-call engineer sees (``kubectl describe pod``), so qosd writes
core/v1 Events exactly like the kubelet and controllers do: in the object's namespace ("default" for
cluster-scoped objects such as the Node), named ``<object>.<hex nanoseconds>``, with
``source``/``reportingComponent``/``reportingInstance`` naming qosd and this node.

Two client-go behaviours (``tools/record/events_cache.go``, EventCorrelator) keep a noisy rule from
flooding etcd:

- **correlation**: the same (object, type, reason, message) again within 10 minutes of its last
  occurrence PATCHes ``count`` and ``lastTimestamp`` of the Event already posted instead of
  creating another one;
- **spam filter**: a token bucket per involved object (burst 25, one token back every 5 minutes,
  client-go's defaults) drops the excess, logged at debug level and counted. The reasons in
  ``OWN_BUDGET`` (PolicyRejected) have a bucket of their own per object: a policy that emits an
  Event about the Node every tick must not use up the budget that tells on-call qosd refused their
  new policy.

Posting never blocks the caller (the tick): ``record`` only timestamps and enqueues, into a bounded
queue (1000, dropped and counted when full) that one background thread drains, retrying 5xx,
timeouts and connection errors with jittered backoff a few times before giving up (counted).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from kubernetes import client
from kubernetes.client.rest import ApiException

from engine.kube.apicall import SMP, consume, describe_error, retryable, rfc3339
from engine.kube.client import COMPONENT, REPORTING_CONTROLLER, REQUEST_TIMEOUT, Backoff

log = logging.getLogger("qosd")

EventType = Literal["Normal", "Warning"]

QUEUE_SIZE = 1000
CORRELATION_WINDOW = 600.0  # seconds since the last occurrence; client-go aggregates over 10 minutes
SPAM_BURST = 25  # client-go defaultSpamBurst
# Reasons with a spam budget of their own per object (see the module docstring).
OWN_BUDGET = frozenset({"PolicyRejected"})
SPAM_REFILL_SECONDS = 300.0  # client-go defaultSpamQPS = 1/300
CACHE_SIZE = 4096  # client-go maxLruCacheEntries: objects and correlation keys remembered
POST_ATTEMPTS = 5  # per Event, for 5xx/timeouts/connection errors
NAME_LIMIT = 253  # an Event's name is a DNS subdomain


@dataclass(frozen=True)
class ObjectRef:
    """The object an Event is about (``involvedObject``). ``namespace`` is "" for cluster-scoped
    objects; ``uid`` may be "" when unknown (the Event then matches the object by name only)."""

    api_version: str
    kind: str
    name: str
    namespace: str = ""
    uid: str = ""

    def to_dict(self) -> dict[str, str]:
        out = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.namespace:
            out["namespace"] = self.namespace
        if self.uid:
            out["uid"] = self.uid
        return out


@dataclass
class _Pending:
    ref: ObjectRef
    type: EventType
    reason: str
    message: str
    time: float


@dataclass
class _Posted:
    """An Event already in the API, for correlation."""

    name: str
    namespace: str
    count: int
    first: float
    last: float


class _TokenBucket:
    __slots__ = ("last", "tokens")

    def __init__(self, tokens: float, now: float) -> None:
        self.tokens = tokens
        self.last = now

    def take(self, now: float, burst: int, refill_seconds: float) -> bool:
        self.tokens = min(float(burst), self.tokens + max(0.0, now - self.last) / refill_seconds)
        self.last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class EventRecorder:
    """Posts core/v1 Events without ever blocking the caller. A daemon service: nothing is posted
    before ``start`` (what was recorded meanwhile waits in the queue); ``stop`` at shutdown.

    Counters (plain ints, read by the daemon for its metrics): ``created`` and ``patched`` Events,
    ``throttled`` by the per-object spam filter, ``dropped`` because the queue was full or the
    recorder closed, ``failed`` after the retries or on a refusal (4xx)."""

    def __init__(
        self,
        api_client: client.ApiClient,
        host: str,
        component: str = COMPONENT,
        clock: Callable[[], float] = time.time,
        *,
        queue_size: int = QUEUE_SIZE,
        burst: int = SPAM_BURST,
        refill_seconds: float = SPAM_REFILL_SECONDS,
        correlation_window: float = CORRELATION_WINDOW,
        attempts: int = POST_ATTEMPTS,
        backoff: Backoff | None = None,
    ) -> None:
        self.api = client.CoreV1Api(api_client)
        self.host = host
        self.component = component
        self.clock = clock
        self.queue_size = queue_size
        self.burst = burst
        self.refill_seconds = refill_seconds
        self.correlation_window = correlation_window
        self.attempts = attempts
        self.backoff = backoff or Backoff(base=0.5, cap=5.0)
        self.created = 0
        self.patched = 0
        self.throttled = 0
        self.dropped = 0
        self.failed = 0
        self._queue: collections.deque[_Pending] = collections.deque()
        self._busy = False
        self._cv = threading.Condition()
        self._stop = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._buckets: collections.OrderedDict[ObjectRef | tuple[ObjectRef, str], _TokenBucket] = (
            collections.OrderedDict()
        )
        self._posted: collections.OrderedDict[tuple[ObjectRef, str, str, str], _Posted] = (
            collections.OrderedDict()
        )
        self._last_name_ns = 0

    # ------------------------------------------------------------------ caller side (the tick)

    def record(self, ref: ObjectRef, type_: EventType, reason: str, message: str) -> None:
        """Queue an Event about ``ref``; returns at once. Dropped (counted) when the object used up
        its spam budget, the queue is full, or the recorder is closed."""
        now = self.clock()
        with self._cv:
            if self._closed:
                self.dropped += 1
                return
            key: ObjectRef | tuple[ObjectRef, str] = (ref, reason) if reason in OWN_BUDGET else ref
            bucket = self._buckets.get(key)
            if bucket is None:
                bucket = self._buckets[key] = _TokenBucket(float(self.burst), now)
                if len(self._buckets) > CACHE_SIZE:
                    self._buckets.popitem(last=False)
            else:
                self._buckets.move_to_end(key)
            if not bucket.take(now, self.burst, self.refill_seconds):
                self.throttled += 1
                log.debug(
                    "event dropped by the spam filter",
                    extra={"fields": {"object": _describe(ref), "reason": reason, "message": message}},
                )
                return
            if len(self._queue) >= self.queue_size:
                self.dropped += 1
                log.debug(
                    "event dropped: queue full",
                    extra={"fields": {"object": _describe(ref), "reason": reason, "queue": self.queue_size}},
                )
                return
            self._queue.append(_Pending(ref, type_, reason, message, now))
            self._cv.notify()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the posting thread. Idempotent; a closed recorder stays closed."""
        with self._cv:
            if self._thread is not None or self._closed:
                return
            self._thread = threading.Thread(target=self._run, name="qosd-events", daemon=True)
            self._thread.start()

    def flush(self, timeout: float) -> bool:
        """Wait until every queued Event was posted or given up; False on timeout (always, while
        Events wait for a recorder that was never started)."""
        with self._cv:
            return self._cv.wait_for(lambda: not self._queue and not self._busy, timeout)

    def close(self) -> None:
        """Stop posting; what is still queued is dropped (counted). Idempotent."""
        with self._cv:
            self._closed = True
            self.dropped += len(self._queue)
            self._queue.clear()
            self._cv.notify_all()
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def stop(self) -> None:
        """Daemon shutdown: give queued Events a moment to go out, then close."""
        self.flush(2.0)
        self.close()

    def counts(self) -> dict[str, int]:
        """The counters, and ``queued``: Events waiting to be posted."""
        with self._cv:
            queued = len(self._queue)
        return {
            "queued": queued,
            "created": self.created,
            "patched": self.patched,
            "throttled": self.throttled,
            "dropped": self.dropped,
            "failed": self.failed,
        }

    # ------------------------------------------------------------------ worker side

    def _run(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: bool(self._queue) or self._closed)
                if self._closed:
                    return
                item = self._queue.popleft()
                self._busy = True
            try:
                self._post(item)
            except Exception:  # a bug here must not end Event posting for the daemon's life
                self.failed += 1
                log.exception("posting an Event failed", extra={"fields": {"object": _describe(item.ref)}})
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()

    def _post(self, item: _Pending) -> None:
        key = (item.ref, item.type, item.reason, item.message)
        seen = self._posted.get(key)
        if seen is not None and item.time - seen.last <= self.correlation_window:
            seen.count += 1
            seen.last = item.time
            self._posted.move_to_end(key)
            patch = {"count": seen.count, "lastTimestamp": rfc3339(item.time)}
            outcome = self._call(item, "patch", lambda: self._patch(seen.name, seen.namespace, patch))
            if outcome == "ok":
                self.patched += 1
                return
            if outcome != "gone":
                return
            # Expired (Events live an hour by default) or deleted: post it anew with its count.
            first, count = seen.first, seen.count
        else:
            first, count = item.time, 1
        name = self._event_name(item.ref.name, item.time)
        namespace = item.ref.namespace or "default"
        body = self._event_body(item, name, namespace, first, count)
        if self._call(item, "create", lambda: self._create(namespace, body)) == "ok":
            self.created += 1
            self._posted[key] = _Posted(name, namespace, count, first, item.time)
            self._posted.move_to_end(key)
            if len(self._posted) > CACHE_SIZE:
                self._posted.popitem(last=False)
        else:
            self._posted.pop(key, None)

    def _call(self, item: _Pending, verb: str, call: Callable[[], None]) -> str:
        """``ok``, ``gone`` (404) or ``failed``, after retrying what is worth retrying."""
        self.backoff.reset()
        for attempt in range(1, self.attempts + 1):
            try:
                call()
                return "ok"
            except Exception as exc:
                if isinstance(exc, ApiException) and exc.status == 404 and verb == "patch":
                    return "gone"
                if isinstance(exc, ApiException) and exc.status == 409 and verb == "create":
                    return "ok"  # AlreadyExists: an earlier try went through after all
                if not retryable(exc) or attempt == self.attempts:
                    self.failed += 1
                    log.warning(
                        "cannot post an Event; it is lost",
                        extra={
                            "fields": {
                                "object": _describe(item.ref),
                                "reason": item.reason,
                                "verb": verb,
                                "attempts": attempt,
                                "error": describe_error(exc),
                            }
                        },
                    )
                    return "failed"
                if self.backoff.sleep(self._stop):
                    self.failed += 1
                    return "failed"
        return "failed"  # pragma: no cover - the loop returns on its last attempt

    def _create(self, namespace: str, body: dict[str, Any]) -> None:
        resp = self.api.create_namespaced_event(
            namespace, body, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
        )
        consume(resp)

    def _patch(self, name: str, namespace: str, body: dict[str, Any]) -> None:
        resp = self.api.patch_namespaced_event(
            name,
            namespace,
            body,
            _content_type=SMP,
            _preload_content=False,
            _request_timeout=REQUEST_TIMEOUT,
        )
        consume(resp)

    def _event_name(self, object_name: str, t: float) -> str:
        """client-go's ``<name>.<hex UnixNano>``, kept strictly increasing so two Events recorded in
        the same nanosecond (a coarse clock, a test clock) never collide."""
        ns = max(int(t * 1e9), self._last_name_ns + 1)
        self._last_name_ns = ns
        suffix = f".{ns:016x}"
        return object_name[: NAME_LIMIT - len(suffix)] + suffix

    def _event_body(
        self, item: _Pending, name: str, namespace: str, first: float, count: int
    ) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": item.ref.to_dict(),
            "type": item.type,
            "reason": item.reason,
            "message": item.message,
            "source": {"component": self.component, "host": self.host},
            "firstTimestamp": rfc3339(first),
            "lastTimestamp": rfc3339(item.time),
            "count": count,
            "reportingComponent": REPORTING_CONTROLLER,
            "reportingInstance": self.host,
        }


def _describe(ref: ObjectRef) -> str:
    where = f"{ref.namespace}/" if ref.namespace else ""
    return f"{ref.kind}/{where}{ref.name}"
