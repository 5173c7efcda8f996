"""The HTTP side: routing, authentication, authorization, watch streams, fault injection, and the
``ApiServer`` object tests drive.

Why real HTTP and a kubeconfig: qosd talks to Kubernetes only through the official client, so the only
honest test is that client, unmodified, reaching a server over a socket: its URL building, content
types, chunked watch decoding, error deserialization and connection pooling are all part of what is
tested. The server is a ThreadingHTTPServer (one thread per connection, HTTP/1.1 keep-alive) in a
background thread; watch responses are chunked streams of JSON lines, one event per chunk, as the API
server writes them.
"""

from __future__ import annotations

import contextlib
import json
import queue
import re
import secrets
import select
import socket
import ssl
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, overload
from urllib.parse import parse_qsl, urlsplit

import yaml

from tests.kubeapi import apply, discovery, openapi, policy, table
from tests.kubeapi import errors as E
from tests.kubeapi.admission import REQUESTER, Admission
from tests.kubeapi.crd import crd_type
from tests.kubeapi.errors import ApiError
from tests.kubeapi.kinds import bootstrap_objects, install_kinds
from tests.kubeapi.rbac import Identity, RequestInfo, authorize, parse_request
from tests.kubeapi.registry import DeleteOptions, Registry, ResourceType, default_namespaces
from tests.kubeapi.selectors import (
    FieldSelector,
    LabelSelector,
    parse_field_selector,
    parse_label_selector,
)
from tests.kubeapi.store import ADDED, DELETED, MODIFIED, Change, Store, TooOld, Watcher
from tests.kubeapi.tls import ServingCert, serving_cert
from tests.kubeapi.typed import FIELD_VALIDATION, FIELD_VALIDATION_MODES, WARNINGS

Json = dict[str, Any]

ADMIN_USER = "kubernetes-admin"
SERVER_VERSION = {
    "major": "1",
    "minor": "37",
    "gitVersion": "v1.37.0-qosd-kubeapi-emulator",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.25.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}
_TRUE = frozenset({"1", "t", "T", "true", "TRUE", "True"})
# How often an idle watch stream wakes up to notice a client that went away.
_IDLE_POLL = 0.25


@dataclass(frozen=True)
class LoggedRequest:
    """One request as the server saw it. ``body`` is the request body as text ("" when none; use
    ``json`` for it parsed), ``query`` the last value of each query parameter, ``status`` the HTTP code
    answered, ``verb`` the authorizer's verb (list, watch, get, create, update, patch, delete)."""

    method: str
    path: str
    query: dict[str, str]
    status: int
    body: str
    verb: str = ""
    user: str = ""
    content_type: str = ""
    warnings: tuple[str, ...] = ()  # the Warning headers answered (dropped unknown fields)

    @property
    def json(self) -> Any:
        """The body parsed as JSON; None when empty or not JSON."""
        try:
            return json.loads(self.body) if self.body else None
        except ValueError:
            return None


class RequestLog:
    """Thread-safe, append-only request log (``server.requests``); iterate, index, ``len`` or ``clear``."""

    def __init__(self) -> None:
        self._items: list[LoggedRequest] = []
        self._lock = threading.Lock()

    def append(self, item: LoggedRequest) -> None:
        with self._lock:
            self._items.append(item)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def snapshot(self) -> list[LoggedRequest]:
        with self._lock:
            return list(self._items)

    def __iter__(self) -> Iterator[LoggedRequest]:
        return iter(self.snapshot())

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    @overload
    def __getitem__(self, index: int) -> LoggedRequest: ...

    @overload
    def __getitem__(self, index: slice) -> list[LoggedRequest]: ...

    def __getitem__(self, index: int | slice) -> LoggedRequest | list[LoggedRequest]:
        with self._lock:
            return self._items[index]

    def matching(self, method: str | None = None, path: str | None = None) -> list[LoggedRequest]:
        """Requests with this method whose path matches the regex ``path`` (re.search)."""
        pattern = re.compile(path) if path else None
        return [
            r
            for r in self.snapshot()
            if (method is None or r.method == method.upper()) and (pattern is None or pattern.search(r.path))
        ]


@dataclass
class _Failure:
    remaining: int
    status: int
    method: str | None
    path: re.Pattern[str] | None
    verb: str | None = None
    retry_after: int | None = None

    def matches(self, method: str, path: str, verb: str) -> bool:
        return (
            self.method in (None, method)
            and (self.path is None or bool(self.path.search(path)))
            and self.verb in (None, verb)
        )


class Stall:
    """Requests held by ``ApiServer.stall``: ``hit`` is set once one is held, ``held`` counts them.
    A held watch has its 200 and headers sent and then nothing at all (no event, no bookmark) until
    released or the client goes away; any other request waits unanswered. ``release()`` lets the
    held requests proceed as if they had just arrived (a write the client gave up on still happens,
    as on a real server); ``release(drop=True)`` cuts their connections unanswered."""

    def __init__(self, remaining: int, method: str | None, path: re.Pattern[str] | None, verb: str | None) -> None:
        self.remaining = remaining
        self.rule = _Failure(remaining, 0, method, path, verb)
        self.hit = threading.Event()
        self.held = 0
        self.drop = False
        self._released = threading.Event()

    def release(self, drop: bool = False) -> None:
        self.drop = drop
        self._released.set()

    @property
    def released(self) -> bool:
        return self._released.is_set()

    def wait(self, timeout: float) -> bool:
        return self._released.wait(timeout)


@dataclass(eq=False)
class _Stream:
    """An open watch response: its socket (to cut) and its watcher (to wake)."""

    handler: _Handler
    watcher: Watcher
    dropped: bool = False

    @property
    def sock(self) -> socket.socket:
        conn: socket.socket = self.handler.connection
        return conn


class _Abort(Exception):
    """The watch stream must end without the terminating chunk (drop_watches, client gone)."""


@dataclass
class _Timers:
    """Delayed actions (a terminating pod's final delete), cancelled at stop."""

    timers: list[threading.Timer] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def schedule(self, delay: float, action: Callable[[], None]) -> None:
        timer = threading.Timer(delay, action)
        timer.daemon = True
        with self.lock:
            self.timers = [t for t in self.timers if t.is_alive()]
            self.timers.append(timer)
        timer.start()

    def cancel_all(self) -> None:
        with self.lock:
            for timer in self.timers:
                timer.cancel()
            self.timers.clear()


class _HttpServer(ThreadingHTTPServer):
    """One daemon thread per connection, tracked with its socket: stop() unblocks keep-alive threads by
    cutting their sockets and joins them all, while a server a test forgot to stop cannot keep the
    interpreter from exiting."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], api: ApiServer, tls: ssl.SSLContext | None = None) -> None:
        self.api = api
        self.connections: set[socket.socket] = set()
        self.connection_threads: set[threading.Thread] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _Handler)
        if tls is not None:
            # The handshake runs in the connection's own thread (_Handler.setup), so a client that
            # stalls in it cannot block the accept loop.
            self.socket = tls.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self.process_request_thread,
            args=(request, client_address),
            name="kubeapi-conn",
            daemon=True,
        )
        with self.connections_lock:
            self.connections.add(request)
            self.connection_threads = {t for t in self.connection_threads if t.is_alive()}
            self.connection_threads.add(thread)
        thread.start()

    def join_connection_threads(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self.connections_lock:
            threads = list(self.connection_threads)
        for thread in threads:
            thread.join(max(deadline - time.monotonic(), 0.0))

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def cut_connections(self) -> None:
        with self.connections_lock:
            for conn in list(self.connections):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that vanished mid-response is not a server error; anything else is re-raised in
        the log of the test run by the default handler."""
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | OSError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # small JSON responses: no 40 ms delayed-ACK stalls
    server: _HttpServer
    # How a watch stream shows each event's object (a Table for kubectl get -w), None: as stored.
    watch_view: Callable[[Json], Json] | None = None

    def setup(self) -> None:
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(10.0)
            self.request.do_handshake()
            self.request.settimeout(None)
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the per-request stderr line; ``server.requests`` is the log."""

    def do_GET(self) -> None:
        self.server.api._handle(self)

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_GET


@dataclass
class _Request:
    handler: _Handler
    method: str
    path: str
    query: dict[str, str]
    body: Any
    raw: bytes
    content_type: str
    info: RequestInfo
    identity: Identity | None = None


class ApiServer:
    """An in-process Kubernetes API server for tests. See tests/kubeapi/__init__.py for the interface."""

    def __init__(
        self,
        *,
        bookmark_interval: float = 1.0,
        pod_termination_delay: float = 0.0,
        history_limit: int = 100_000,
        host: str = "127.0.0.1",
        tls: bool = False,
    ) -> None:
        self.bookmark_interval = bookmark_interval
        self.host = host
        # HTTPS with a throwaway CA (tests/kubeapi/tls.py): what the real kubectl needs to send a token.
        self.serving_cert: ServingCert | None = serving_cert(host) if tls else None
        self.token = secrets.token_hex(16)
        self.requests = RequestLog()
        self._identities: dict[str, Identity] = {self.token: Identity(ADMIN_USER)}
        self._failures: list[_Failure] = []
        self._stalls: list[Stall] = []
        self._failures_lock = threading.Lock()
        # How long a watch from a resourceVersion the server has not reached yet waits for it before
        # the watch cache answers "Too large resource version" (the API server's 3 s).
        self.too_large_wait = 3.0
        self._streams: set[_Stream] = set()
        self._streams_lock = threading.Lock()
        self._timers = _Timers()
        self.store = Store(history_limit)
        self.registry = Registry(self.store, self._timers.schedule)
        self.registry.register(crd_type(self.registry))
        for rt in install_kinds():
            self.registry.register(rt)
        self.registry.on_update = apply.track_update
        self.admission = Admission(self.registry)  # webhooks and ValidatingAdmissionPolicies
        self.registry.admit = self.admission.admit
        for ns in default_namespaces():
            self.store.write("namespaces", ADDED, ns)
        for obj in bootstrap_objects():
            self.registry.put(obj)
        self._httpd: _HttpServer | None = None
        self._thread: threading.Thread | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    # ------------------------------------------------------------------------------ lifecycle

    def start(self) -> str:
        """Listen on an ephemeral port; returns the base URL."""
        if self._httpd is not None:
            return self.url
        context = self.serving_cert.server_context() if self.serving_cert else None
        self._httpd = _HttpServer((self.host, 0), self, context)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="kubeapi-emulator",
            daemon=True,
        )
        self._thread.start()
        return self.url

    def stop(self) -> None:
        """End every watch stream cleanly, stop accepting, cut idle keep-alive connections, join every
        connection thread and cancel pending timers."""
        if self._httpd is None:
            return
        with self._failures_lock:
            stalls, self._stalls = self._stalls, []
        for stall in stalls:
            stall.release(drop=True)
        self._timers.cancel_all()
        self.store.close_watchers()
        deadline = time.monotonic() + 2.0
        while self.open_watches() and time.monotonic() < deadline:
            time.sleep(0.005)  # let each stream write its terminating chunk before connections are cut
        self._httpd.shutdown()
        self._httpd.cut_connections()
        self._httpd.server_close()
        self._httpd.join_connection_threads(5.0)
        if self._thread is not None:
            self._thread.join()
        self._httpd = None
        self._thread = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> ApiServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("ApiServer not started")
        scheme = "https" if self.serving_cert else "http"
        return f"{scheme}://{self.host}:{self._httpd.server_address[1]}"

    # ------------------------------------------------------------------------------ client set-up

    def kubeconfig(self, path: Path | str, token: str | None = None) -> Path:
        """Write a kubeconfig for this server (bearer ``token``, default the admin's) and return its
        path; ``path`` may be a directory (the file is then ``<path>/kubeconfig``)."""
        target = Path(path)
        if target.is_dir():
            target = target / "kubeconfig"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(yaml.safe_dump(self._kubeconfig_dict(token)), encoding="utf-8")
        return target

    def _kubeconfig_dict(self, token: str | None) -> Json:
        token = token or self.token
        user = self._identities[token].user if token in self._identities else "unknown"
        cluster: Json = {"server": self.url}
        if self.serving_cert is not None:
            cluster["certificate-authority-data"] = self.serving_cert.ca_data
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "kubeapi-emulator", "cluster": cluster}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [
                {
                    "name": "kubeapi-emulator",
                    "context": {"cluster": "kubeapi-emulator", "user": user, "namespace": "default"},
                }
            ],
            "current-context": "kubeapi-emulator",
        }

    def api_client(self, token: str | None = None) -> Any:
        """A ``kubernetes.client.ApiClient`` loaded from this server's kubeconfig."""
        from kubernetes import client, config

        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="kubeapi-")
        index = len(list(Path(self._tmp.name).iterdir()))
        path = self.kubeconfig(Path(self._tmp.name) / f"kubeconfig-{index}", token)
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(path), client_configuration=cfg)
        return client.ApiClient(configuration=cfg)

    def authorize(
        self, token: str, rules: list[Json], user: str = "system:serviceaccount:qosd-system:qosd"
    ) -> str:
        """Accept ``token`` as ``user``, allowed only what the ClusterRole ``rules`` allow (403
        otherwise). Returns the token, for ``kubeconfig(path, token)`` / ``api_client(token)``."""
        self._identities[token] = Identity(user, tuple(rules))
        return token

    # ------------------------------------------------------------------------------ direct access

    def put(self, obj: Json) -> Json:
        """Create or replace ``obj`` directly (no HTTP, no admission or validation), emitting the watch
        events a write would. Its namespace is created if missing. Returns the stored object."""
        return self.registry.put(obj)

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Json | None:
        """The object as ``api_version`` serves it, or None; namespaced kinds default to "default"."""
        rt = self.registry.for_kind(api_version, kind)
        stored = self.store.get(rt.bucket, (namespace or "default") if rt.namespaced else "", name)
        return rt.present(stored) if stored is not None else None

    def list(self, api_version: str, kind: str, namespace: str | None = None) -> list[Json]:
        """Objects of a kind (all namespaces when ``namespace`` is None), in etcd key order."""
        rt = self.registry.for_kind(api_version, kind)
        return [rt.present(o) for o in self.store.items(rt.bucket, namespace if rt.namespaced else None)]

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        """Remove at once (no grace period, finalizers ignored), emitting DELETED; absent is fine."""
        rt = self.registry.for_kind(api_version, kind)
        self.registry.remove(rt, (namespace or "default") if rt.namespaced else "", name)

    def install_crd(self, crd: Json) -> Json:
        """Create (or replace) a CustomResourceDefinition, which starts serving its resources. An
        invalid CRD raises the ApiError the API server would answer."""
        rt = self.registry.lookup("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        assert rt is not None
        name = (crd.get("metadata") or {}).get("name", "")
        if self.store.get(rt.bucket, "", name) is None:
            return self.registry.create(rt, "", crd)
        body = {**crd, "metadata": {**crd.get("metadata", {}), "resourceVersion": None}}
        return self.registry.update(rt, "", name, body)[0]

    def compact(self) -> None:
        """Forget the change history: watches and Exact lists from an older resourceVersion get 410."""
        self.store.compact()

    def drop_watches(self) -> None:
        """Cut every open watch connection without the terminating chunk: clients see a broken stream."""
        with self._streams_lock:
            streams = list(self._streams)
        for stream in streams:
            stream.dropped = True
            with contextlib.suppress(OSError):
                stream.sock.shutdown(socket.SHUT_RDWR)
            stream.watcher.close()

    def open_watches(self) -> int:
        """How many watch streams are open now (tests wait for a client to (re)connect)."""
        with self._streams_lock:
            return len(self._streams)

    def fail_next(
        self,
        count: int,
        status: int,
        method: str | None = None,
        path: str | None = None,
        *,
        verb: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        """Answer the next ``count`` requests matching ``method``, the regex ``path`` (searched in the
        URL path) and the authorizer's ``verb`` (``list`` and ``watch`` share a path) with a Status
        error of code ``status``. ``retry_after``: the seconds of a ``Retry-After`` header and of
        ``details.retryAfterSeconds`` (default 1 for 429 and 503, as the API server's priority and
        fairness and its 503s send; 0 for none)."""
        with self._failures_lock:
            self._failures.append(
                _Failure(
                    count,
                    status,
                    method.upper() if method else None,
                    re.compile(path) if path else None,
                    verb,
                    retry_after,
                )
            )

    def stall(
        self, method: str | None = None, path: str | None = None, *, verb: str | None = None, count: int = 1
    ) -> Stall:
        """Hold the next ``count`` matching requests (see ``Stall``): a watch that stays open and
        says nothing, a write that hangs until the client times out, an eviction in flight while the
        test kills its client."""
        stall = Stall(count, method.upper() if method else None, re.compile(path) if path else None, verb)
        with self._failures_lock:
            self._stalls.append(stall)
        return stall

    def revoke(self, token: str) -> None:
        """Stop accepting ``token`` (401 from now on), as after a service-account token expired or
        its pod was deleted."""
        self._identities.pop(token, None)

    def restart(self, reset_resource_versions: bool = False) -> None:
        """An API server restart as clients see it: every connection is cut (watches without their
        terminating chunk). With ``reset_resource_versions`` the storage comes back with a new
        revision counter (etcd restored from a backup, or rebuilt): every object gets a new, lower
        resourceVersion and the history is gone, so a client's last resourceVersion is now one the
        server has not reached."""
        self.drop_watches()
        if self._httpd is not None:
            self._httpd.cut_connections()
        if reset_resource_versions:
            self.store.reset_resource_versions()

    @property
    def pod_termination_delay(self) -> float:
        return self.registry.pod_termination_delay

    @pod_termination_delay.setter
    def pod_termination_delay(self, seconds: float) -> None:
        self.registry.pod_termination_delay = seconds

    @property
    def resource_version(self) -> str:
        return str(self.store.resource_version)

    # ------------------------------------------------------------------------------ request handling

    def _handle(self, handler: _Handler) -> None:
        split = urlsplit(handler.path)
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        method = handler.command
        raw = _read_body(handler)
        content_type = (handler.headers.get("Content-Type") or "").split(";")[0].strip()
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
                if content_type == apply.APPLY_PATCH:  # an apply configuration may be YAML
                    with contextlib.suppress(yaml.YAMLError):
                        body = yaml.safe_load(body)
        req = _Request(
            handler,
            method,
            split.path,
            query,
            body,
            raw,
            content_type,
            parse_request(method, split.path, query),
        )
        warnings = WARNINGS.set([])
        validation = FIELD_VALIDATION.set(query.get("fieldValidation") or "Warn")
        manager = apply.FIELD_MANAGER.set(query.get("fieldManager") or "")
        try:
            req.identity = self._authenticate(handler)
            REQUESTER.set(req.identity)  # the admission review's userInfo
            if FIELD_VALIDATION.get() not in FIELD_VALIDATION_MODES:
                raise E.bad_request(
                    f"fieldValidation parameter unsupported: {FIELD_VALIDATION.get()!r} "
                    f"(one of {', '.join(FIELD_VALIDATION_MODES)})"
                )
            authorize(req.identity, req.info)
            self._inject_failure(req)
            stall = self._take_stall(req)
            if stall is not None and not self._hold(req, stall):
                return
            if isinstance(body, str) and method in ("POST", "PUT", "PATCH"):
                raise E.bad_request(f"the body of the request could not be decoded as JSON: {body[:100]!r}")
            if not req.info.resource_request:
                payload, content_type = self._non_resource(req)
                self._respond(req, 200, payload, content_type=content_type)
                return
            self._resource(req)
        except ApiError as err:
            self._respond(req, err.code, err.status(), err.headers)
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True
        except Exception as err:  # an emulator bug: answer as the API server does, and show it
            traceback.print_exc()
            message = f"Internal error occurred: {type(err).__name__}: {err}"
            self._respond(
                req,
                500,
                ApiError(500, "InternalError", message, {"causes": [{"message": str(err)}]}).status(),
            )
        finally:
            WARNINGS.reset(warnings)
            FIELD_VALIDATION.reset(validation)
            apply.FIELD_MANAGER.reset(manager)

    def _authenticate(self, handler: _Handler) -> Identity:
        header = handler.headers.get("Authorization") or ""
        scheme, _, token = header.partition(" ")
        identity = self._identities.get(token.strip()) if scheme.lower() == "bearer" else None
        if identity is None:
            raise E.unauthorized()
        return identity

    def _inject_failure(self, req: _Request) -> None:
        with self._failures_lock:
            for failure in self._failures:
                if not failure.matches(req.method, req.path, req.info.verb):
                    continue
                failure.remaining -= 1
                if failure.remaining <= 0:
                    self._failures.remove(failure)
                reason = E.REASON_FOR_CODE.get(failure.status, "")
                seconds = failure.retry_after
                if seconds is None:
                    seconds = 1 if failure.status in (429, 503) else 0
                headers = {"Retry-After": str(seconds)} if seconds else {}
                details: Json = {"retryAfterSeconds": seconds} if seconds else {}
                raise ApiError(
                    failure.status,
                    reason,
                    f"injected by the test (fail_next): {reason or failure.status}",
                    details or None,
                    headers,
                )

    def _take_stall(self, req: _Request) -> Stall | None:
        with self._failures_lock:
            for stall in self._stalls:
                if stall.rule.matches(req.method, req.path, req.info.verb):
                    stall.remaining -= 1
                    if stall.remaining <= 0:
                        self._stalls.remove(stall)
                    stall.held += 1
                    return stall
        return None

    def _hold(self, req: _Request, stall: Stall) -> bool:
        """Hold a request; True when it is to be processed now, False when it was answered (a silent
        watch ended) or its connection cut."""
        handler = req.handler
        if req.info.verb == "watch":
            self._start_stream(req)
            stall.hit.set()
            while not stall.wait(0.05):
                if _peer_closed(handler.connection):
                    break
            handler.close_connection = True
            return False
        stall.hit.set()
        stall.wait(60.0)
        if stall.drop or not stall.released:
            handler.close_connection = True
            with contextlib.suppress(OSError):
                handler.connection.shutdown(socket.SHUT_RDWR)
            return False
        return True

    def _respond(
        self,
        req: _Request,
        code: int,
        payload: Json,
        headers: dict[str, str] | None = None,
        *,
        content_type: str = "application/json",
    ) -> None:
        data = encode_json(payload)
        handler = req.handler
        self._log(req, code)  # before the reply: a client that has its answer finds its request logged
        handler.send_response(code)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Cache-Control", "no-cache, private")
        for key, value in (headers or {}).items():
            handler.send_header(key, value)
        for warning in WARNINGS.get() or []:
            handler.send_header("Warning", '299 - "' + warning.replace('"', '\\"') + '"')
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if req.method != "HEAD":
            handler.wfile.write(data)

    def _log(self, req: _Request, code: int) -> None:
        self.requests.append(
            LoggedRequest(
                req.method,
                req.path,
                req.query,
                code,
                req.raw.decode("utf-8", "replace"),
                req.info.verb,
                req.identity.user if req.identity else "",
                req.content_type,
                tuple(WARNINGS.get() or ()),
            )
        )

    # ------------------------------------------------------------------------------ discovery

    def _non_resource(self, req: _Request) -> tuple[Json, str]:
        """/version, the health checks, discovery (tests/kubeapi/discovery.py) and OpenAPI
        (tests/kubeapi/openapi.py), with the Content-Type each answers in."""
        path = req.path.rstrip("/") or "/"
        if req.method not in ("GET", "HEAD"):
            raise E.method_not_allowed(req.method)
        if path == "/version":
            return dict(SERVER_VERSION), discovery.JSON
        if path in ("/healthz", "/livez", "/readyz"):
            return {"status": "ok"}, discovery.JSON
        types = self.registry.types()
        accept = req.handler.headers.get("Accept") or ""
        found = discovery.serve(path, accept, types, self.url.split("//")[1])
        if found is None:
            found = openapi.serve(path, types)
        if found is None:
            raise E.page_not_found()
        return found

    # ------------------------------------------------------------------------------ resources

    def _resource(self, req: _Request) -> None:
        info = req.info
        name = info.path_name
        rt = self.registry.lookup(info.group, info.version, info.resource)
        if rt is None:
            raise E.page_not_found()
        namespace = info.namespace
        if rt.kind == "Namespace" and not rt.group:
            namespace = ""  # the request attribute names the namespace object itself
        elif rt.namespaced and not namespace and name:
            raise E.page_not_found()  # /api/v1/pods/<name>: there is no such route
        elif not rt.namespaced and namespace:
            raise E.page_not_found()
        if info.subresource and info.subresource not in rt.subresources:
            raise E.page_not_found()
        dry_run = req.query.get("dryRun") == "All"
        verb = info.verb
        if verb == "watch":
            self._watch(req, rt, namespace or None)
        elif verb == "list":
            self._respond_read(req, rt, self._list(req, rt, namespace or None), listed=True)
        elif verb == "get":
            self._respond_read(req, rt, self.registry.get(rt, namespace, name), listed=False)
        elif verb == "create" and info.subresource == "eviction":
            self._respond(req, 201, policy.evict(self.registry, namespace, name, req.body))
        elif verb == "create" and not name:
            if rt.namespaced and not namespace:
                raise E.method_not_allowed(req.method)
            self._respond(req, 201, self.registry.create(rt, namespace, req.body, dry_run=dry_run))
        elif verb in ("update", "patch") and not name:
            raise E.method_not_allowed(req.method)
        elif verb == "update":
            obj, created = self.registry.update(
                rt, namespace, name, req.body, subresource=info.subresource, dry_run=dry_run
            )
            self._respond(req, 201 if created else 200, obj)
        elif verb == "patch" and req.content_type == apply.APPLY_PATCH:
            obj, created = apply.server_side_apply(
                self.registry,
                rt,
                namespace,
                name,
                req.body,
                force=req.query.get("force") in _TRUE,
                subresource=info.subresource,
                dry_run=dry_run,
            )
            self._respond(req, 201 if created else 200, obj)
        elif verb == "patch":
            obj = self.registry.patch(
                rt, namespace, name, req.content_type, req.body, subresource=info.subresource, dry_run=dry_run
            )
            self._respond(req, 200, obj)
        elif verb == "delete" and not info.subresource:
            options = DeleteOptions.parse(req.body if isinstance(req.body, dict) else None, req.query)
            obj, _ = self.registry.delete(rt, namespace, name, options)
            self._respond(req, 200, obj)
        elif verb == "deletecollection":
            self._respond(req, 200, self._delete_collection(req, rt, namespace or None))
        else:
            raise E.method_not_allowed(req.method)

    def _respond_read(self, req: _Request, rt: ResourceType, payload: Json, *, listed: bool) -> None:
        """A get or list answer, as a Table when the client asked for one (tests/kubeapi/table.py)."""
        if not table.wants_table(req.handler.headers.get("Accept") or ""):
            self._respond(req, 200, payload)
            return
        if listed:
            items = [{"apiVersion": rt.api_version, "kind": rt.kind, **item} for item in payload["items"]]
            meta = payload["metadata"]
        else:
            items, meta = [payload], {"resourceVersion": payload["metadata"].get("resourceVersion", "")}
        converted = table.to_table(rt, items, meta, req.query.get("includeObject", ""))
        self._respond(req, 200, converted, content_type=table.TABLE)

    def _selectors(self, req: _Request, rt: ResourceType) -> tuple[LabelSelector, FieldSelector]:
        return (
            parse_label_selector(req.query.get("labelSelector")),
            parse_field_selector(req.query.get("fieldSelector"), rt.field_labels),
        )

    def _list(self, req: _Request, rt: ResourceType, namespace: str | None) -> Json:
        labels, fields = self._selectors(req, rt)
        try:
            limit = int(req.query.get("limit") or 0)
        except ValueError:
            raise E.bad_request(f"invalid limit {req.query.get('limit')!r}") from None
        result = self.registry.list(
            rt,
            namespace,
            labels,
            fields,
            limit=max(limit, 0),
            continue_token=req.query.get("continue", ""),
            resource_version=req.query.get("resourceVersion", ""),
            match=req.query.get("resourceVersionMatch", ""),
        )
        meta: Json = {"resourceVersion": str(result.resource_version)}
        if result.continue_token:
            meta["continue"] = result.continue_token
            meta["remainingItemCount"] = result.remaining
        items = result.items
        if rt.builtin:
            # Typed lists carry no apiVersion/kind per item; custom resource lists (unstructured) do.
            items = [{k: v for k, v in item.items() if k not in ("apiVersion", "kind")} for item in items]
        return {"apiVersion": rt.api_version, "kind": f"{rt.kind}List", "metadata": meta, "items": items}

    def _delete_collection(self, req: _Request, rt: ResourceType, namespace: str | None) -> Json:
        labels, fields = self._selectors(req, rt)
        options = DeleteOptions.parse(req.body if isinstance(req.body, dict) else None, req.query)
        deleted = []
        for item in self.registry.list(rt, namespace, labels, fields).items:
            meta = item["metadata"]
            with contextlib.suppress(ApiError):
                deleted.append(
                    self.registry.delete(rt, meta.get("namespace") or "", meta["name"], options)[0]
                )
        return {
            "apiVersion": rt.api_version,
            "kind": f"{rt.kind}List",
            "metadata": {"resourceVersion": self.resource_version},
            "items": deleted,
        }

    # ------------------------------------------------------------------------------ watch

    def _watch(self, req: _Request, rt: ResourceType, namespace: str | None) -> None:
        labels, fields = self._selectors(req, rt)
        query = req.query
        rv = query.get("resourceVersion", "")
        send_initial = query.get("sendInitialEvents") in _TRUE
        bookmarks = query.get("allowWatchBookmarks") in _TRUE
        if send_initial and (query.get("resourceVersionMatch") != "NotOlderThan" or not bookmarks):
            raise E.invalid_object(
                "meta.k8s.io",
                "ListOptions",
                "",
                [
                    E.forbidden(
                        "sendInitialEvents",
                        "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled and resourceVersionMatch is NotOlderThan and allowWatchBookmarks is true",
                    )
                ],
            )
        timeout: float | None = None
        if query.get("timeoutSeconds"):
            try:
                timeout = float(query["timeoutSeconds"]) or None  # 0: the server's default (none here)
            except ValueError:
                raise E.bad_request(f"invalid timeoutSeconds {query['timeoutSeconds']!r}") from None
        since: int | None = None
        if rv not in ("", "0") and not send_initial:
            try:
                since = int(rv)
            except ValueError:
                raise E.bad_request(f"invalid resource version: {rv!r}") from None
        handler = req.handler
        if since is not None and not self.store.wait_for(since, self.too_large_wait):
            # The watch cache waited for a revision it has not seen (a client ahead of a restored
            # etcd) and gives up: an ERROR event, as for every error found after the request was
            # admitted (cacher.Watch -> newErrWatcher).
            self._start_stream(req)
            current = self.store.resource_version
            status = ApiError(
                504,
                "Timeout",
                f"Timeout: Too large resource version: {since}, current: {current}",
                {
                    "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                    "retryAfterSeconds": 1,
                },
            ).status()
            self._send_event(handler, {"type": "ERROR", "object": status})
            self._end_stream(handler)
            return
        try:
            initial, backlog, watcher, start_rv = self.store.watch(rt.bucket, since)
        except TooOld as err:
            # The watch cache answers a too-old version inside an established stream (HTTP 200).
            self._start_stream(req)
            status = E.expired(str(err)).status()
            self._send_event(handler, {"type": "ERROR", "object": status})
            self._end_stream(handler)
            return
        stream = _Stream(handler, watcher)
        with self._streams_lock:
            self._streams.add(stream)
        if table.wants_table(handler.headers.get("Accept") or ""):
            # kubectl get -w: each event's object is a one-row Table (tests/kubeapi/table.py)
            include = req.query.get("includeObject", "")

            def as_table(obj: Json) -> Json:
                meta = {"resourceVersion": (obj.get("metadata") or {}).get("resourceVersion", "")}
                return table.to_table(rt, [obj], meta, include)

            handler.watch_view = as_table
        try:
            self._start_stream(req)
            for obj in initial:
                if self._selected(obj, rt, namespace, labels, fields):
                    self._send_event(handler, {"type": ADDED, "object": rt.present(obj)})
            if send_initial:
                self._send_event(
                    handler, {"type": "BOOKMARK", "object": self._bookmark(rt, start_rv, initial_end=True)}
                )
            for change in backlog:
                self._send_change(handler, change, rt, namespace, labels, fields)
            self._stream_loop(stream, rt, namespace, labels, fields, timeout, bookmarks)
        except _Abort:
            handler.close_connection = True
        except (BrokenPipeError, ConnectionResetError, OSError):
            handler.close_connection = True
        finally:
            handler.watch_view = None
            self.store.unwatch(watcher)
            with self._streams_lock:
                self._streams.discard(stream)

    def _stream_loop(
        self,
        stream: _Stream,
        rt: ResourceType,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        timeout: float | None,
        bookmarks: bool,
    ) -> None:
        handler = stream.handler
        deadline = time.monotonic() + timeout if timeout is not None else None
        next_bookmark = time.monotonic() + self.bookmark_interval
        while True:
            if stream.dropped:
                raise _Abort
            clock = time.monotonic()
            if deadline is not None and clock >= deadline:
                self._end_stream(handler)
                return
            if bookmarks and clock >= next_bookmark:
                rv = self.store.idle_resource_version(stream.watcher)
                if rv is not None:
                    self._send_event(handler, {"type": "BOOKMARK", "object": self._bookmark(rt, rv)})
                    next_bookmark = clock + self.bookmark_interval
            waits = [_IDLE_POLL]
            if deadline is not None:
                waits.append(deadline - clock)
            if bookmarks:
                waits.append(max(next_bookmark - clock, 0.01))
            try:
                change = stream.watcher.next(min(waits))
            except queue.Empty:
                if _peer_closed(stream.sock):
                    raise _Abort from None
                if not rt.builtin and self.registry.lookup(rt.group, rt.version, rt.plural) is not rt:
                    self._end_stream(handler)  # its CRD was deleted: the resource is no longer served
                    return
                continue
            if change is None:
                if stream.dropped:
                    raise _Abort
                self._end_stream(handler)  # server stopping: a clean end of the stream
                return
            self._send_change(handler, change, rt, namespace, labels, fields)

    def _start_stream(self, req: _Request) -> None:
        handler = req.handler
        self._log(req, 200)
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Cache-Control", "no-cache, private")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        handler.wfile.flush()

    @staticmethod
    def _send_event(handler: _Handler, event: Json) -> None:
        view = handler.watch_view
        if view is not None and event["type"] in (ADDED, MODIFIED, DELETED):
            event = {**event, "object": view(event["object"])}
        data = encode_json(event) + b"\n"
        handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    @staticmethod
    def _end_stream(handler: _Handler) -> None:
        handler.wfile.write(b"0\r\n\r\n")

    @staticmethod
    def _bookmark(rt: ResourceType, rv: int, initial_end: bool = False) -> Json:
        meta: Json = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}

    @staticmethod
    def _selected(
        obj: Json, rt: ResourceType, namespace: str | None, labels: LabelSelector, fields: FieldSelector
    ) -> bool:
        meta = obj.get("metadata") or {}
        if namespace is not None and meta.get("namespace") != namespace:
            return False
        return labels.matches(meta.get("labels")) and fields.matches(rt.present(obj), rt.field_labels)

    def _send_change(
        self,
        handler: _Handler,
        change: Change,
        rt: ResourceType,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
    ) -> None:
        """cacheWatcher.convertToWatchEvent: a change is seen through the watch's selectors; an object
        that starts matching is ADDED, one that stops matching is DELETED (with its previous content
        and the change's resourceVersion)."""
        now_in = change.type != DELETED and self._selected(change.obj, rt, namespace, labels, fields)
        if change.type == ADDED:
            if now_in:
                self._send_event(handler, {"type": ADDED, "object": rt.present(change.obj)})
            return
        before = change.prev if change.prev is not None else change.obj
        was_in = self._selected(before, rt, namespace, labels, fields)
        if change.type == DELETED:
            if self._selected(change.obj, rt, namespace, labels, fields) or was_in:
                self._send_event(handler, {"type": DELETED, "object": rt.present(change.obj)})
            return
        if now_in and was_in:
            self._send_event(handler, {"type": MODIFIED, "object": rt.present(change.obj)})
        elif now_in:
            self._send_event(handler, {"type": ADDED, "object": rt.present(change.obj)})
        elif was_in:
            gone = rt.present(before)
            gone["metadata"] = {**gone.get("metadata", {}), "resourceVersion": str(change.rv)}
            self._send_event(handler, {"type": DELETED, "object": gone})


def _read_body(handler: _Handler) -> bytes:
    """The request body, by Content-Length or chunked transfer encoding."""
    if "chunked" in (handler.headers.get("Transfer-Encoding") or "").lower():
        parts: list[bytes] = []
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            parts.append(handler.rfile.read(size))
            handler.rfile.readline()
    length = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(length) if length else b""


def _peer_closed(sock: socket.socket) -> bool:
    """True when the client closed its end (readable with no data). Only asked of a connection
    the client sends nothing more on (a watch, a held request): over TLS a peek would see the
    close_notify record rather than the end of the stream, so the readable record is read."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        if not readable:
            return False
        if isinstance(sock, ssl.SSLSocket):
            timeout = sock.gettimeout()
            sock.settimeout(0.0)
            try:
                return sock.recv(1) == b""
            except (ssl.SSLWantReadError, BlockingIOError):
                return False
            finally:
                sock.settimeout(timeout)
        return sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


def encode_json(value: Any) -> bytes:
    """Compact JSON, as the API server writes it. Go's encoder has no depth limit worth the name
    (its decoder takes 10,000 levels), so an object etcd holds nested beyond Python's recursion
    limit is still served: written by an iterative encoder instead of json.dumps."""
    try:
        return json.dumps(value, separators=(",", ":")).encode()
    except RecursionError:
        return _encode_deep(value).encode()


def _encode_deep(value: Any) -> str:
    out: list[str] = []
    stack: list[tuple[bool, Any]] = [(False, value)]  # (is literal text, value)
    while stack:
        literal, item = stack.pop()
        if literal:
            out.append(item)
        elif isinstance(item, dict):
            out.append("{")
            stack.append((True, "}"))
            entries = list(item.items())
            for i in range(len(entries) - 1, -1, -1):
                key, child = entries[i]
                stack.append((False, child))
                stack.append((True, json.dumps(str(key)) + ":"))
                if i:
                    stack.append((True, ","))
        elif isinstance(item, list):
            out.append("[")
            stack.append((True, "]"))
            for i in range(len(item) - 1, -1, -1):
                stack.append((False, item[i]))
                if i:
                    stack.append((True, ","))
        else:
            out.append(json.dumps(item))
    return "".join(out)
