"""A local, always-readable copy of one Kubernetes resource, kept current by list+watch.

This is client-go's reflector reduced to what qosd needs (ideas, not code):

- **List**, then **watch from the list's resourceVersion**. The list replaces the store; the watch
  applies ADDED / MODIFIED / DELETED; a BOOKMARK only advances the resourceVersion, so the next
  watch starts close to "now" even when nothing qosd watches has changed.
- **A watch that ends is resumed, not relisted**: the server closes every watch after
  ``timeoutSeconds``, proxies and load balancers cut idle connections, and a re-watch from the last
  resourceVersion replays exactly what was missed. Relisting a node's pods every few minutes would
  cost the API server a list per node per timeout for nothing.
- **410 Gone relists**: the server no longer has the history since our resourceVersion (etcd
  compaction). It comes as an ERROR event inside an established stream, or as an HTTP 410.
- **A resourceVersion the server has not reached relists** too: after an API server comes back
  from an etcd restore or rebuild, revisions start lower, and a watch from ours would wait for a
  revision that never comes: the watch cache answers "Too large resource version" (504, cause
  ResourceVersionTooLarge) after waiting for it, and that answer relists at once, since backing off
  and asking again from the same resourceVersion would never succeed.
- **A watch that says nothing for ``idle_timeout``** (no event and no bookmark: the API server sends
  bookmarks about every minute) is presumed dead (a proxy holding a half-open connection, a wedged
  watch cache) and relisted; the read timeout on the stream is that bound.
- **Every other failure backs off** (``engine.kube.client.Backoff``: exponential, jittered, reset by
  the next success, and never shorter than a 429's or 503's ``Retry-After``), and no exception ever
  leaves the thread: a reflector that dies silently leaves the daemon acting on a frozen view.
  ``problem()`` says, for readiness, what is failing and why (403: which verb on which resource).

``kubernetes.watch.Watch`` (v37) has two behaviours worth knowing. Without ``timeout_seconds`` it
re-issues the watch by itself once after a 410 and after a stream ends, from a resourceVersion it
only tracks when it builds model objects; qosd always passes ``timeout_seconds``, which turns those
retries off, so the resume/relist decisions above are made here, once. And with
``deserialize=False`` an in-stream ERROR event raises ``KeyError('raw_object')`` instead of the
ApiException that carries the 410, so plain dicts are obtained another way: the watch is told the
call has no return type (``_PlainWatch``), which makes it hand back each event's JSON untouched.

The store is read without locks by the tick thread. Each change builds a new dict and swaps one
reference to an immutable ``StoreView`` (version, items, resourceVersion), so a reader sees one
consistent state and never a dict being mutated. Stored objects are the API's JSON dicts: readers
must not modify them. ``version`` bumps on every real change only, so a consumer detects "nothing
changed" in O(1) and can rebuild derived data (workloads, documents) only when needed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

import urllib3
from kubernetes import watch as kwatch
from kubernetes.client.rest import ApiException
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from engine.kube.apicall import (
    MAX_OBJECT_DEPTH,
    causes_of,
    cut_deep,
    describe_error,
    json_loads_capped,
    read_json,
    retry_after,
)
from engine.kube.client import REQUEST_TIMEOUT, WATCH_TIMEOUT_SECONDS, Backoff

log = logging.getLogger("qosd")

Json = dict[str, Any]
KeyFn = Callable[[Mapping[str, Any]], str]

SHORT_WATCH_SECONDS = 1.0
"""A watch that ends this soon after it was opened without delivering anything counts as a failure
for backoff (client-go's "very short watch"): an API server or proxy that accepts and drops every
watch at once must not be hammered in a tight loop."""

PAGE_SIZE = 500  # client-go's pager default


def object_key(obj: Mapping[str, Any]) -> str:
    """``namespace/name``, or ``name`` for a cluster-scoped object (client-go's MetaNamespaceKeyFunc)."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    namespace = meta.get("namespace")
    return f"{namespace}/{name}" if namespace else name


def resource_version_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _rv_number(rv: str) -> int | None:
    try:
        return int(rv)
    except ValueError:
        return None


def is_newer(rv: str, than: str) -> bool:
    """Whether resourceVersion ``rv`` is later than ``than``. resourceVersions are opaque by contract
    but etcd revisions in practice; when either is not a number, any difference counts as newer
    (the watch stream's order is then the only order there is)."""
    a, b = _rv_number(rv), _rv_number(than)
    if a is None or b is None:
        return rv != than
    return a > b


@dataclass(frozen=True)
class StoreView:
    """One consistent state of the store: read ``view()`` once and use its fields together."""

    version: int
    items: Mapping[str, Json]
    resource_version: str


@dataclass
class ReflectorStats:
    """Counters for metrics and tests. ``watch_restarts``: watches resumed from the last
    resourceVersion after the stream ended or broke (no relist); ``relists_410``: lists forced by a
    410; ``lists``: successful lists, the first one included; ``stale_events``: events ignored because
    the store already held that version or a newer one."""

    lists: int = 0
    relists_410: int = 0
    watch_restarts: int = 0
    errors: int = 0
    events: int = 0
    bookmarks: int = 0
    stale_events: int = 0
    relists_reset: int = 0
    idle_timeouts: int = 0
    cut_objects: int = 0  # objects nested deeper than MAX_OBJECT_DEPTH, cut (see apicall.cut_deep)
    last_error: str = ""


class _Stopped(Exception):
    """The reflector is stopping: unwind the thread."""


def too_large_resource_version(exc: ApiException) -> bool:
    """The watch cache's "Too large resource version" (504 Timeout, cause ResourceVersionTooLarge):
    our resourceVersion is ahead of the server's. Inside a watch stream the client keeps only the
    code and "reason: message", so the text is checked as well as the causes."""
    if exc.status != 504:
        return False
    text = f"{exc.reason or ''} {exc.body or ''}"
    return "ResourceVersionTooLarge" in causes_of(exc) or "Too large resource version" in text


class _PlainWatch(kwatch.Watch):  # type: ignore[misc]  # kubernetes is untyped (Any)
    """A Watch that yields each event's JSON as is: with no return type, ``unmarshal_event`` builds
    no model object, and ERROR events still become ApiExceptions with their code (unlike
    ``deserialize=False`` in v37)."""

    def get_return_type(self, func: Any) -> None:
        return None

    def unmarshal_event(self, data: Any, return_type: Any) -> Any:
        """The client's own, with a decoder that cannot raise RecursionError on a deep object
        (an event wraps its object in one level; one more is kept, as in apicall.read_json)."""
        if not data or data.isspace():
            return None
        try:
            js = json_loads_capped(data, MAX_OBJECT_DEPTH + 2)
        except json.JSONDecodeError:
            return None
        js["raw_object"] = js["object"]
        return js


def _shutdown(resp: Any) -> None:
    """Unblock a thread reading this streaming response: shut its socket down for reading."""
    with contextlib.suppress(Exception):
        resp.shutdown()  # urllib3 >= 2.3
        return
    with contextlib.suppress(Exception):
        resp.connection.sock.shutdown(2)  # socket.SHUT_RDWR


def _close(resp: Any) -> None:
    with contextlib.suppress(Exception):
        resp.close()
    with contextlib.suppress(Exception):
        resp.release_conn()


class _Attempt:
    """One watch request: the response once the server answered (None while connecting)."""

    __slots__ = ("response",)

    def __init__(self) -> None:
        self.response: Any = None


class Reflector:
    """List+watch one resource into a lock-free readable store, on a daemon thread.

    ``list_fn`` is a list function of the official client's typed APIs, called with keyword
    arguments only: ``CoreV1Api(api).list_pod_for_all_namespaces``, ``CoreV1Api(api).list_node``,
    or ``functools.partial(CustomObjectsApi(api).list_cluster_custom_object, GROUP, VERSION,
    PLURAL)``. ``on_change`` runs on the reflector's thread after each change (a list that changed
    something, or one watch event that did); keep it cheap and non-blocking, it delays the next
    event. It is never called with a lock held, and its exceptions are logged, not propagated.
    """

    def __init__(
        self,
        name: str,
        list_fn: Callable[..., Any],
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
        key: KeyFn = object_key,
        on_change: Callable[[], None] | None = None,
        backoff: Backoff | None = None,
        timeout_seconds: int = WATCH_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        page_size: int = PAGE_SIZE,
        request_timeout: tuple[float, float] = REQUEST_TIMEOUT,
        idle_timeout: float | None = None,
    ) -> None:
        if timeout_seconds <= 0:
            # Without a server-side timeout the client's Watch retries by itself (see the module
            # docstring) and a silently dead connection is never noticed.
            raise ValueError(f"reflector {name}: timeout_seconds must be a positive number of seconds")
        self.name = name
        self.on_change = on_change
        self._list_fn = list_fn
        self._selectors: dict[str, str] = {}
        if field_selector:
            self._selectors["field_selector"] = field_selector
        if label_selector:
            self._selectors["label_selector"] = label_selector
        self._key = key
        self._backoff = backoff if backoff is not None else Backoff()
        self._timeout = int(timeout_seconds)
        self._clock = clock
        self._page_size = page_size
        self._request_timeout = request_timeout
        # A watch is expected to end by the server's timeout; a read blocked past it (plus the
        # usual read timeout) means the connection died without a FIN (a NAT or node reboot).
        # Bookmarks make a shorter bound safe (``idle_timeout``).
        default_idle = float(timeout_seconds) + request_timeout[1]
        self.idle_timeout = default_idle if idle_timeout is None else idle_timeout
        if self.idle_timeout <= 0:
            raise ValueError(f"reflector {name}: idle_timeout must be a positive number of seconds")
        self._watch_request_timeout = (request_timeout[0], self.idle_timeout)
        self._state = StoreView(0, MappingProxyType({}), "")
        self._stats = ReflectorStats()
        self._synced = threading.Event()
        self._stopping = threading.Event()
        self._lock = threading.Lock()  # guards only _watch/_response hand-over with stop()
        self._watch: _PlainWatch | None = None
        self._response: Any = None
        self._thread: threading.Thread | None = None
        self._healthy = False
        self._fresh: float | None = None
        self._failures = 0
        self._expired_in_a_row = False  # the last watch got a 410 before any event

    # ------------------------------------------------------------------------------ reading

    def view(self) -> StoreView:
        """The current state: version, items and resourceVersion that belong together."""
        return self._state

    def items(self) -> Mapping[str, Json]:
        """Objects by key; an immutable mapping of the API's JSON dicts (do not modify them)."""
        return self._state.items

    def get(self, key: str) -> Json | None:
        return self._state.items.get(key)

    @property
    def version(self) -> int:
        """Bumped on every change of the items (not by bookmarks or unchanged relists)."""
        return self._state.version

    @property
    def resource_version(self) -> str:
        """The resourceVersion the next watch starts from."""
        return self._state.resource_version

    @property
    def synced(self) -> bool:
        """Whether a first list has completed."""
        return self._synced.is_set()

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    @property
    def stats(self) -> ReflectorStats:
        """A copy of the counters."""
        return replace(self._stats)

    def fresh_at(self) -> float | None:
        """When (on ``clock``) the store was last known to be current: now while the list+watch is
        healthy (a watch open or being re-opened), else the last moment it was (None before the
        first list). A quiet open watch counts as current: the server would have sent any change.
        A connection that died silently is noticed only at the watch's read timeout."""
        if self._healthy:
            return self._clock()
        return self._fresh

    def problem(self) -> str | None:
        """None while the list+watch works; else, for readiness and on-call, what fails and why
        ("pods: list failing (3 attempts): HTTP 403 Forbidden: pods is forbidden: ...")."""
        if self._healthy:
            return None
        error = self._stats.last_error
        if not error:
            return None if self.synced else f"{self.name}: waiting for the first list"
        held = "no objects yet" if not self.synced else "acting on the last objects seen"
        return f"{self.name} {error} ({self._failures} failed attempts in a row; {held})"

    # ------------------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the list+watch thread (once; a stopped reflector stays stopped)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=f"reflector-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the watch (its socket is shut down, so a blocked read returns at once) and join the
        thread. Idempotent. A list request in flight cannot be interrupted: it finishes within the
        request timeout on a daemon thread if ``timeout`` runs out first."""
        with self._lock:
            self._stopping.set()
            current, response = self._watch, self._response
        if current is not None:
            with contextlib.suppress(Exception):
                current.stop()
        if response is not None:
            _shutdown(response)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                log.warning(
                    "reflector did not stop in time; leaving its daemon thread to finish its request",
                    extra={"fields": {"reflector": self.name, "timeout_seconds": timeout}},
                )

    # ------------------------------------------------------------------------------ the loop

    def _run(self) -> None:
        need_list = True
        while not self._stopping.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                    self._recovered()
                need_list = self._watch_once()
            except _Stopped:
                return
            except Exception as exc:  # the thread must survive anything
                # A list that failed is retried; anything unexpected while watching (a malformed
                # object, a bug in a key function) may have left an event half-applied: relist.
                self._failed("list" if need_list else "watch", exc)
                need_list = True
                if self._backoff.sleep(self._stopping, retry_after(exc)):
                    return

    def _list(self) -> None:
        """One consistent list (paged: every page is served from the first page's snapshot), then
        the store replaced by it."""
        items: dict[str, Json] = {}
        token = ""
        rv = ""
        restarted = False
        while True:
            if self._stopping.is_set():
                raise _Stopped
            kwargs: dict[str, Any] = {**self._selectors, "limit": self._page_size}
            if token:
                kwargs["_continue"] = token
            try:
                body = read_json(
                    self._list_fn(_preload_content=False, _request_timeout=self._request_timeout, **kwargs)
                )
            except ApiException as exc:
                if exc.status == 410 and token and not restarted:
                    # The continue token expired between pages: start over, from a new snapshot.
                    items.clear()
                    token, rv, restarted = "", "", True
                    continue
                raise
            if not isinstance(body, dict):
                raise ValueError(f"the list answer is not a JSON object but {type(body).__name__}")
            meta = body.get("metadata") or {}
            rv = str(meta.get("resourceVersion") or rv)
            for obj in body.get("items") or ():
                if isinstance(obj, dict):
                    self._bound(obj)
                    items[self._key(obj)] = obj
            token = str(meta.get("continue") or "")
            if not token:
                break
        self._stats.lists += 1
        changed = self._replace(items, rv)
        self._observed()
        first = not self._synced.is_set()
        self._synced.set()
        log.debug(
            "listed",
            extra={
                "fields": {
                    "reflector": self.name,
                    "items": len(items),
                    "resourceVersion": rv,
                    "changed": changed,
                    "first": first,
                }
            },
        )
        if changed:
            self._notify()

    def _watch_once(self) -> bool:
        """Watch from the current resourceVersion until the stream ends. True: relist first."""
        attempt = _Attempt()
        watcher = _PlainWatch()
        with self._lock:
            if self._stopping.is_set():
                raise _Stopped
            self._watch = watcher

        def open_stream(**kwargs: Any) -> Any:
            resp = self._list_fn(**kwargs)
            with self._lock:
                if self._stopping.is_set():
                    _close(resp)
                    raise _Stopped
                attempt.response = resp
                self._response = resp
            return resp

        started = self._clock()
        received = 0
        events: Generator[Any, None, None] = watcher.stream(
            open_stream,
            resource_version=self._state.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=self._timeout,
            _request_timeout=self._watch_request_timeout,
            **self._selectors,
        )
        try:
            for event in events:
                if self._stopping.is_set():
                    raise _Stopped
                if not isinstance(event, dict):
                    continue  # a line that was not JSON (the client yields None for it)
                received += 1
                self._expired_in_a_row = False
                self._apply(event)
        except ApiException as exc:
            if self._stopping.is_set():
                raise _Stopped from None
            if too_large_resource_version(exc):
                return self._reset(describe_error(exc))
            if exc.status == 410:
                self._stats.relists_410 += 1
                # Expired again straight after a fresh list: something is wrong on the server
                # side; relist, but do not turn it into a list storm.
                again = received == 0 and self._expired_in_a_row
                if again and self._backoff.sleep(self._stopping):
                    raise _Stopped from None
                self._expired_in_a_row = received == 0
                log.info(
                    "watch resourceVersion expired (410 Gone); relisting",
                    extra={
                        "fields": {
                            "reflector": self.name,
                            "resourceVersion": self.resource_version,
                            "error": describe_error(exc),
                        }
                    },
                )
                return True
            self._expired_in_a_row = False
            self._failed("watch", exc)
            if self._backoff.sleep(self._stopping, retry_after(exc)):
                raise _Stopped from None
            return False
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            if self._stopping.is_set():
                raise _Stopped from None
            if attempt.response is None:  # never connected: the API server is unreachable
                self._failed("watch", exc)
                if self._backoff.sleep(self._stopping):
                    raise _Stopped from None
                return False
            if _is_read_timeout(exc):
                self._stats.idle_timeouts += 1
                log.warning(
                    "watch silent for too long (no event, no bookmark); relisting",
                    extra={
                        "fields": {
                            "reflector": self.name,
                            "idleTimeoutSeconds": self.idle_timeout,
                            "resourceVersion": self.resource_version,
                        }
                    },
                )
                return True
            log.debug(
                "watch stream broke; resuming from the last resourceVersion",
                extra={"fields": {"reflector": self.name, "error": describe_error(exc)}},
            )
        finally:
            with contextlib.suppress(Exception):
                events.close()  # a generator: closing it closes its response
            with self._lock:
                self._watch = None
                self._response = None
        if self._stopping.is_set():
            raise _Stopped
        self._stats.watch_restarts += 1
        self._expired_in_a_row = False
        self._observed()
        if received == 0 and self._clock() - started < SHORT_WATCH_SECONDS:
            if self._backoff.sleep(self._stopping):
                raise _Stopped
        else:
            self._recovered()
        return False

    def _reset(self, why: str) -> bool:
        """Our resourceVersion is ahead of the server's history: relist (True for the caller)."""
        self._stats.relists_reset += 1
        log.warning(
            "the API server's resourceVersions are behind ours (restarted from a restored or new "
            "etcd?); relisting",
            extra={
                "fields": {"reflector": self.name, "resourceVersion": self.resource_version, "error": why}
            },
        )
        return True

    # ------------------------------------------------------------------------------ the store

    def _apply(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            raise ValueError(f"a {kind} watch event without an object")
        rv = resource_version_of(obj)
        state = self._state
        self._observed()
        if kind == "BOOKMARK":
            self._stats.bookmarks += 1
            if rv:
                self._state = StoreView(state.version, state.items, rv)
            return
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning(
                "ignoring a watch event of unknown type",
                extra={"fields": {"reflector": self.name, "type": str(kind)}},
            )
            return
        self._stats.events += 1
        self._bound(obj)
        key = self._key(obj)
        current = state.items.get(key)
        position = rv or state.resource_version
        if kind == "DELETED":
            # A deletion is ignored only when the store already holds a later version (a relist
            # that saw the object re-created); an equal version still means "gone".
            if current is None or is_newer(resource_version_of(current), rv):
                self._stale(state, position)
                return
            items = dict(state.items)
            del items[key]
        else:
            if current is not None and not is_newer(rv, resource_version_of(current)):
                self._stale(state, position)
                return
            items = dict(state.items)
            items[key] = obj
        self._state = StoreView(state.version + 1, MappingProxyType(items), position)
        self._notify()

    def _bound(self, obj: dict[str, Any]) -> None:
        """Cut an object nested deeper than MAX_OBJECT_DEPTH (it stays in the store, too deep for
        what reads it, which refuses it by name) and say so once per version."""
        cut = cut_deep(obj)
        if cut is None:
            return
        self._stats.cut_objects += 1
        raw_meta = obj.get("metadata")
        meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
        log.warning(
            "object nested deeper than qosd reads; its deepest values were cut",
            extra={
                "fields": {
                    "reflector": self.name,
                    "object": str(meta.get("name", "?")),
                    "namespace": str(meta.get("namespace", "")),
                    "resourceVersion": str(meta.get("resourceVersion", "")),
                    "maxDepth": MAX_OBJECT_DEPTH,
                    "at": "$" + "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in cut),
                }
            },
        )

    def _stale(self, state: StoreView, position: str) -> None:
        self._stats.stale_events += 1
        self._state = StoreView(state.version, state.items, position)

    def _replace(self, listed: dict[str, Json], rv: str) -> bool:
        """Swap in a list's items; objects whose resourceVersion did not change keep their identity.
        Returns whether anything differs (only then does the version move)."""
        state = self._state
        old = state.items
        changed = len(old) != len(listed)
        merged: dict[str, Json] = {}
        for key, obj in listed.items():
            prev = old.get(key)
            if prev is not None and _same(prev, obj):
                merged[key] = prev
            else:
                merged[key] = obj
                changed = True
        if changed:
            self._state = StoreView(state.version + 1, MappingProxyType(merged), rv)
        else:
            self._state = StoreView(state.version, old, rv)
        return changed

    # ------------------------------------------------------------------------------ health

    def _notify(self) -> None:
        callback = self.on_change
        if callback is None:
            return
        try:
            callback()
        except Exception:  # a consumer's bug must not stop the watch
            log.exception("reflector on_change callback failed", extra={"fields": {"reflector": self.name}})

    def _observed(self) -> None:
        """The store was just confirmed current (a list, an event, a stream that ended normally)."""
        self._healthy = True
        self._fresh = self._clock()

    def _recovered(self) -> None:
        if self._failures:
            log.info(
                "list+watch recovered",
                extra={"fields": {"reflector": self.name, "failures": self._failures}},
            )
            self._failures = 0
        self._backoff.reset()

    def _failed(self, what: str, exc: BaseException) -> None:
        self._healthy = False
        self._stats.errors += 1
        self._failures += 1
        message = describe_error(exc)
        if isinstance(exc, ApiException) and exc.status == 404:
            message += " — the resource is not served: is its CustomResourceDefinition installed?"
        self._stats.last_error = f"{what}: {message}"
        unexpected = not isinstance(exc, ApiException | urllib3.exceptions.HTTPError | OSError)
        log.log(
            logging.ERROR if unexpected else logging.WARNING,
            f"{what} {self.name} failed; retrying with backoff",
            exc_info=exc if unexpected else None,
            extra={
                "fields": {
                    "reflector": self.name,
                    "verb": what,
                    "resource": self.name,
                    "status": getattr(exc, "status", None),
                    "error": message,
                    "failures": self._failures,
                }
            },
        )


def _is_read_timeout(exc: BaseException) -> bool:
    """A read on an open stream timed out (urllib3 raises ReadTimeoutError from the socket's)."""
    return isinstance(exc, urllib3.exceptions.ReadTimeoutError) or isinstance(exc.__cause__, TimeoutError)


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    ra, rb = resource_version_of(a), resource_version_of(b)
    if ra and rb:
        return ra == rb
    return a == b


class ReflectorCollector(Collector):
    """The reflectors' counters as Prometheus metrics, read at scrape time.

    The counters already live in each reflector (``ReflectorStats``), so the watch threads pay
    nothing per event; a scrape copies them. Labelled by the reflector's resource name, so an
    operator can tell a pod watch that keeps relisting (410s: the API server compacts faster than
    qosd reconnects) from a QoSPolicy watch that fails (RBAC, a missing CRD)."""

    COUNTERS = (
        ("lists", "qosd_kube_watch_lists", "Successful lists, the first one included."),
        ("relists_410", "qosd_kube_watch_expired", "Lists forced by 410 Gone (resourceVersion too old)."),
        ("watch_restarts", "qosd_kube_watch_restarts", "Watches resumed from the last resourceVersion."),
        ("errors", "qosd_kube_watch_errors", "Failed lists and watches (retried with backoff)."),
        ("events", "qosd_kube_watch_events", "Watch events applied to the store."),
    )

    def __init__(self, reflectors: Sequence[Reflector]) -> None:
        self._reflectors = tuple(reflectors)

    def collect(self) -> Generator[Any, None, None]:
        reflectors = self._reflectors
        stats = [(r.name, r.stats) for r in reflectors]
        for attr, name, doc in self.COUNTERS:
            family = CounterMetricFamily(name, doc, labels=["resource"])
            for resource, s in stats:
                family.add_metric([resource], float(getattr(s, attr)))
            yield family
        synced = GaugeMetricFamily(
            "qosd_kube_watch_synced", "1 once the first list has filled the store.", labels=["resource"]
        )
        objects = GaugeMetricFamily("qosd_kube_watch_objects", "Objects in the store.", labels=["resource"])
        for r in reflectors:
            synced.add_metric([r.name], 1.0 if r.synced else 0.0)
            objects.add_metric([r.name], float(len(r.items())))
        yield synced
        yield objects
