"""engine.kube.reflector: list+watch with client-go's reflector semantics.

Two kinds of tests. The scripted ones drive the reflector with a fake list function (no HTTP) to pin
down the store rules exactly: events not newer than the stored object are ignored, a relist that
changes nothing moves nothing, a 410 relists while any other error only backs off. The integration
ones use the API server.

Kubernetes API: the in-repo emulator (tests/kubeapi), reached over real HTTP by the official client;
no kube-apiserver can run here.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from engine.kube.apicall import _cut_text, cut_deep, json_loads_capped
from engine.kube.client import API_VERSION, GROUP, POLICY_KIND, POLICY_PLURAL, VERSION, Backoff
from engine.kube.reflector import Reflector, is_newer, object_key
from tests.kubeapi import ApiServer

Json = dict[str, Any]
FAST = {"base": 0.001, "cap": 0.01}


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not reached within {timeout}s"
        time.sleep(0.005)


# ------------------------------------------------------------------------------------------------
# Scripted: a fake list function
# ------------------------------------------------------------------------------------------------


def obj(name: str, rv: int, namespace: str = "ns", **extra: Any) -> Json:
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": str(rv)}, **extra}


def event(kind: str, o: Json) -> Json:
    return {"type": kind, "object": o}


def error_event(code: int, reason: str = "Expired") -> Json:
    return {
        "type": "ERROR",
        "object": {"kind": "Status", "code": code, "reason": reason, "message": "scripted"},
    }


def listing(rv: int, *items: Json, cont: str = "") -> Json:
    meta: Json = {"resourceVersion": str(rv)}
    if cont:
        meta["continue"] = cont
    return {"metadata": meta, "items": list(items)}


class FakeResponse:
    """What ``_preload_content=False`` returns: ``data`` for a list, ``stream()`` for a watch. A watch
    script of None blocks until the reflector shuts the response down (stop())."""

    def __init__(self, api: FakeApi, body: Json | None = None, lines: list[Json] | None = None) -> None:
        self.api = api
        self.data = json.dumps(body).encode() if body is not None else b""
        self.lines = lines
        self.closed = threading.Event()

    def stream(self, amt: Any = None, decode_content: Any = None) -> Iterator[bytes]:
        if self.lines is None:
            self.api.idle.set()
            self.closed.wait(30)
            return
        for line in self.lines:
            yield json.dumps(line).encode() + b"\n"

    def shutdown(self) -> None:
        self.closed.set()

    def close(self) -> None:
        self.closed.set()

    def release_conn(self) -> None:
        pass


class FakeApi:
    """A list function with scripted answers. ``lists``: list bodies or exceptions, in order (the
    last one repeats). ``watches``: event lists (the stream then ends) or exceptions, in order;
    once they run out, a watch blocks and ``idle`` is set."""

    def __init__(
        self, lists: list[Json | Exception], watches: list[list[Json] | Exception] | None = None
    ) -> None:
        self.lists = list(lists)
        self.watches = list(watches or [])
        self.calls: list[Json] = []
        self.idle = threading.Event()

    def __call__(self, **kwargs: Any) -> FakeResponse:
        self.calls.append(kwargs)
        if kwargs.get("watch"):
            script = self.watches.pop(0) if self.watches else None
            if isinstance(script, Exception):
                raise script
            return FakeResponse(self, lines=script)
        answer = self.lists.pop(0) if len(self.lists) > 1 else self.lists[0]
        if isinstance(answer, Exception):
            raise answer
        return FakeResponse(self, body=answer)

    def watch_calls(self) -> list[Json]:
        return [c for c in self.calls if c.get("watch")]

    def list_calls(self) -> list[Json]:
        return [c for c in self.calls if not c.get("watch")]


@pytest.fixture
def run() -> Iterator[Callable[..., Reflector]]:
    """Start a reflector over a FakeApi and wait until it consumed every script; stop it after."""
    started: list[Reflector] = []

    def _run(api: FakeApi, _holder: list[Reflector] | None = None, **kwargs: Any) -> Reflector:
        reflector = Reflector("fake", api, backoff=Backoff(**FAST), **kwargs)
        if _holder is not None:
            _holder.append(reflector)  # for callbacks that read the reflector
        started.append(reflector)
        reflector.start()
        assert api.idle.wait(10), "the reflector did not reach its idle watch"
        return reflector

    yield _run
    for reflector in started:
        reflector.stop()
        assert reflector._thread is not None and not reflector._thread.is_alive()


def test_events_not_newer_than_the_stored_object_are_ignored(run: Callable[..., Reflector]) -> None:
    """A relist racing a watch can deliver an event the store already reflects; applying it would
    roll an object back. A DELETED of the stored version (or later) still removes it."""
    a5, b6 = obj("a", 5), obj("b", 6)
    a7, c8 = obj("a", 7, spec=1), obj("c", 8)
    changes: list[None] = []
    api = FakeApi(
        [listing(6, a5, b6)],
        [
            [
                event("MODIFIED", obj("a", 4, spec=0)),  # older: ignored
                event("MODIFIED", a7),  # applied
                event("ADDED", obj("b", 6, spec=2)),  # same version: ignored
                event("DELETED", obj("b", 5)),  # older than the stored b: ignored
                event("ADDED", c8),  # applied
                event("DELETED", c8),  # same version as stored: gone
                event("BOOKMARK", {"metadata": {"resourceVersion": "9"}}),
            ]
        ],
    )
    r = run(api, on_change=lambda: changes.append(None))
    assert dict(r.items()) == {"ns/a": a7, "ns/b": b6}
    assert r.version == 4  # the list, a@7, c added, c deleted
    assert len(changes) == 4
    s = r.stats
    assert (s.lists, s.events, s.stale_events, s.bookmarks, s.errors) == (1, 6, 3, 1, 0)
    assert r.resource_version == "9"
    assert api.watch_calls()[-1]["resource_version"] == "9"  # the resumed watch starts at the bookmark


def test_an_in_stream_410_relists_and_an_unchanged_relist_moves_nothing(
    run: Callable[..., Reflector],
) -> None:
    api = FakeApi([listing(5, obj("a", 5)), listing(12, obj("a", 5))], [[error_event(410)]])
    holder: list[Reflector] = []
    first: list[Json] = []  # the stored "a" as of the first list (the one change)
    r = run(api, on_change=lambda: first.append(holder[0].items()["ns/a"]), _holder=holder)
    s = r.stats
    assert (s.lists, s.relists_410, s.errors) == (2, 1, 0)
    assert r.version == 1 and len(first) == 1  # only the first list changed anything
    assert r.items()["ns/a"] is first[0]  # identity kept: consumers' caches stay valid
    assert r.resource_version == "12"
    assert [c["resource_version"] for c in api.watch_calls()] == ["5", "12"]


def test_a_410_answer_to_the_watch_request_also_relists(run: Callable[..., Reflector]) -> None:
    api = FakeApi(
        [listing(5, obj("a", 5)), listing(9, obj("b", 9))],
        [ApiException(status=410, reason="Gone")],
    )
    r = run(api)
    assert (r.stats.lists, r.stats.relists_410) == (2, 1)
    assert list(r.items()) == ["ns/b"]


def test_other_watch_errors_back_off_and_resume_without_a_relist(run: Callable[..., Reflector]) -> None:
    api = FakeApi(
        [listing(5)],
        [
            [event("ADDED", obj("x", 6)), error_event(500, "InternalError")],
            ApiException(status=503, reason="Service Unavailable"),
            [event("ADDED", obj("y", 7))],
        ],
    )
    r = run(api)
    s = r.stats
    assert (s.lists, s.relists_410, s.errors) == (1, 0, 2)
    assert sorted(r.items()) == ["ns/x", "ns/y"]
    # Each watch resumed from the last event it had seen.
    assert [c["resource_version"] for c in api.watch_calls()] == ["5", "6", "6", "7"]
    assert "503" in s.last_error


def test_every_watch_asks_for_bookmarks_and_a_server_timeout(run: Callable[..., Reflector]) -> None:
    """With timeout_seconds the official client never re-issues a watch by itself (v37 retries once
    after a 410 otherwise, from a resourceVersion it does not track for plain JSON)."""
    api = FakeApi([listing(5)], [[]])
    run(api, field_selector="spec.nodeName=n1", label_selector="app=web", timeout_seconds=17)
    for call in api.watch_calls():
        assert call["timeout_seconds"] == 17
        assert call["allow_watch_bookmarks"] is True
        assert call["field_selector"] == "spec.nodeName=n1"
        assert call["label_selector"] == "app=web"
    (lst,) = api.list_calls()
    assert (lst["field_selector"], lst["label_selector"], lst["_preload_content"]) == (
        "spec.nodeName=n1",
        "app=web",
        False,
    )


def test_lists_are_paged_and_an_expired_continue_token_restarts_the_list(
    run: Callable[..., Reflector],
) -> None:
    api = FakeApi(
        [
            listing(5, obj("a", 1), obj("b", 2), cont="t1"),
            ApiException(status=410, reason="Expired"),
            listing(7, obj("a", 1), obj("b", 2), cont="t2"),
            listing(7, obj("c", 7)),
        ]
    )
    r = run(api, page_size=2)
    assert sorted(r.items()) == ["ns/a", "ns/b", "ns/c"]
    assert r.resource_version == "7"
    assert [(c["limit"], c.get("_continue")) for c in api.list_calls()] == [
        (2, None),
        (2, "t1"),
        (2, None),
        (2, "t2"),
    ]
    assert (r.stats.lists, r.stats.errors) == (1, 0)


def test_list_failures_back_off_until_one_succeeds(run: Callable[..., Reflector]) -> None:
    api = FakeApi(
        [ApiException(status=500, reason="boom"), OSError("connection refused"), listing(3, obj("a", 3))]
    )
    r = run(api)
    assert r.synced and list(r.items()) == ["ns/a"]
    assert (r.stats.errors, r.stats.lists) == (2, 1)


def test_a_malformed_event_or_a_failing_callback_never_stops_the_thread(
    run: Callable[..., Reflector],
) -> None:
    def boom() -> None:
        raise RuntimeError("consumer bug")

    api = FakeApi(
        [listing(5), listing(8, obj("z", 8))],
        [[event("ADDED", obj("x", 6))], [{"type": "ADDED", "object": "not an object"}]],
    )
    r = run(api, on_change=boom)
    # The callback's failure was logged and ignored; the malformed event cost a relist.
    assert list(r.items()) == ["ns/z"]
    assert (r.stats.lists, r.stats.errors) == (2, 1)


def test_stop_is_idempotent_and_unblocks_a_quiet_watch() -> None:
    api = FakeApi([listing(1)])
    r = Reflector("fake", api, backoff=Backoff(**FAST))
    r.start()
    assert api.idle.wait(10)
    r.stop()
    r.stop()
    assert r._thread is not None and not r._thread.is_alive()


def test_construction_rules() -> None:
    with pytest.raises(ValueError, match="timeout_seconds"):
        Reflector("x", FakeApi([listing(1)]), timeout_seconds=0)
    assert object_key({"metadata": {"name": "n"}}) == "n"
    assert object_key({"metadata": {"name": "p", "namespace": "ns"}}) == "ns/p"
    assert is_newer("10", "9") and not is_newer("9", "10") and not is_newer("9", "9")
    assert is_newer("b", "a") and not is_newer("a", "a")  # opaque versions: any difference


# ------------------------------------------------------------------------------------------------
# Integration: the emulator over HTTP
# ------------------------------------------------------------------------------------------------


def pod(name: str, node: str | None = "n1", **labels: str) -> Json:
    spec: Json = {"containers": [{"name": "c", "image": "busybox"}]}
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": spec,
        "status": {"phase": "Running"},
    }


class Gate:
    """Wraps a list function: while closed, watch requests wait here (lists pass), so a test can
    change the server while the reflector is disconnected, deterministically."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.opened = threading.Event()
        self.opened.set()
        self.waiting = threading.Event()

    def close(self) -> None:
        self.waiting.clear()
        self.opened.clear()

    def open(self) -> None:
        self.opened.set()

    def __call__(self, **kwargs: Any) -> Any:
        if kwargs.get("watch") and not self.opened.is_set():
            self.waiting.set()
            self.opened.wait(30)
        return self.fn(**kwargs)


@pytest.fixture
def pods(apiserver: ApiServer) -> Iterator[Callable[..., tuple[Reflector, Gate]]]:
    """A reflector of the pods on node n1, through a Gate; stopped at teardown."""
    made: list[tuple[Reflector, Gate]] = []

    def _make(**kwargs: Any) -> tuple[Reflector, Gate]:
        gate = Gate(client.CoreV1Api(apiserver.api_client()).list_pod_for_all_namespaces)
        kwargs.setdefault("backoff", Backoff(**FAST))
        r = Reflector("pods", gate, field_selector="spec.nodeName=n1", **kwargs)
        made.append((r, gate))
        r.start()
        assert r.wait_synced(10)
        wait_until(lambda: apiserver.open_watches() >= 1, what="the watch open")
        return r, gate

    yield _make
    for r, gate in made:
        gate.open()
        r.stop()
        assert r._thread is not None and not r._thread.is_alive()


def names(r: Reflector) -> set[str]:
    return {o["metadata"]["name"] for o in r.items().values()}


def verbs(server: ApiServer) -> list[str]:
    return [q.verb for q in server.requests if q.path == "/api/v1/pods"]


def test_list_then_watch_delivers_adds_changes_and_deletes(
    apiserver: ApiServer, pods: Callable[..., tuple[Reflector, Gate]]
) -> None:
    apiserver.put(pod("a"))
    apiserver.put(pod("b"))
    changes: list[int] = []
    r, _ = pods(on_change=lambda: changes.append(1))
    assert names(r) == {"a", "b"}
    v = r.version
    apiserver.put(pod("c"))
    wait_until(lambda: "c" in names(r), what="c added")
    assert r.version > v
    v = r.version
    apiserver.put(pod("a", tier="gold"))
    wait_until(lambda: r.items()["default/a"]["metadata"]["labels"] == {"tier": "gold"}, what="a modified")
    assert r.version > v
    apiserver.delete("v1", "Pod", "b", "default")
    wait_until(lambda: names(r) == {"a", "c"}, what="b deleted")
    assert len(changes) == r.version  # one callback per change (the first list included)
    assert r.stats.lists == 1 and r.stats.errors == 0
    assert verbs(apiserver).count("list") == 1
    assert r.resource_version == apiserver.resource_version


def test_field_selector_keeps_other_nodes_out_and_a_pod_bound_later_comes_in(
    apiserver: ApiServer, pods: Callable[..., tuple[Reflector, Gate]]
) -> None:
    apiserver.put(pod("here"))
    apiserver.put(pod("there", node="n2"))
    apiserver.put(pod("pending", node=None))
    r, _ = pods()
    assert names(r) == {"here"}
    apiserver.put(pod("there", node="n2", changed="yes"))  # a change elsewhere: not seen
    apiserver.put(pod("pending", node="n1"))  # scheduled to this node now
    wait_until(lambda: names(r) == {"here", "pending"}, what="the bound pod")
    assert "default/there" not in r.items()
    assert all(
        q.query.get("fieldSelector") == "spec.nodeName=n1"
        for q in apiserver.requests
        if q.path == "/api/v1/pods"
    )


def test_a_dropped_watch_resumes_from_the_last_resource_version_without_a_relist_or_a_lost_event(
    apiserver: ApiServer, pods: Callable[..., tuple[Reflector, Gate]]
) -> None:
    apiserver.put(pod("a"))
    r, gate = pods()
    gate.close()
    apiserver.drop_watches()
    assert gate.waiting.wait(10)  # the reflector is reconnecting: change things meanwhile
    last_rv = r.resource_version
    apiserver.put(pod("b"))
    apiserver.put(pod("a", v="2"))
    gate.open()
    wait_until(lambda: names(r) == {"a", "b"} and r.items()["default/a"]["metadata"]["labels"] == {"v": "2"})
    s = r.stats
    assert (s.lists, s.relists_410, s.errors) == (1, 0, 0)
    assert s.watch_restarts >= 1
    watches = [q for q in apiserver.requests if q.path == "/api/v1/pods" and q.verb == "watch"]
    assert watches[1].query["resourceVersion"] == last_rv
    assert verbs(apiserver).count("list") == 1


def test_a_410_after_compaction_relists_and_converges(
    apiserver: ApiServer, pods: Callable[..., tuple[Reflector, Gate]]
) -> None:
    apiserver.put(pod("a"))
    apiserver.put(pod("b"))
    r, gate = pods()
    gate.close()
    apiserver.drop_watches()
    assert gate.waiting.wait(10)
    apiserver.put(pod("c"))
    apiserver.delete("v1", "Pod", "a", "default")
    apiserver.compact()  # the reflector's resourceVersion is now too old
    gate.open()
    wait_until(lambda: names(r) == {"b", "c"}, what="converged after the relist")
    s = r.stats
    assert (s.lists, s.relists_410) == (2, 1)
    assert verbs(apiserver).count("list") == 2
    served = {p["metadata"]["name"] for p in apiserver.list("v1", "Pod") if p["spec"].get("nodeName") == "n1"}
    assert names(r) == served
    # And it keeps watching from the fresh list.
    apiserver.put(pod("d"))
    wait_until(lambda: "d" in names(r))


def test_bookmarks_advance_the_resource_version_without_a_change(
    apiserver: ApiServer, pods: Callable[..., tuple[Reflector, Gate]]
) -> None:
    apiserver.bookmark_interval = 0.05
    apiserver.put(pod("a"))
    r, _ = pods()
    v = r.version
    apiserver.put(pod("elsewhere", node="n2"))  # moves the server's resourceVersion only
    target = apiserver.resource_version
    wait_until(lambda: r.resource_version == target, what="a bookmark at the new resourceVersion")
    assert r.stats.bookmarks >= 1
    assert r.version == v and names(r) == {"a"}


def test_a_server_side_watch_timeout_resumes_the_watch(
    apiserver: ApiServer, pods: Callable[..., tuple[Reflector, Gate]]
) -> None:
    r, _ = pods(timeout_seconds=1)
    wait_until(lambda: r.stats.watch_restarts >= 2, what="two watch timeouts")
    apiserver.put(pod("late"))
    wait_until(lambda: "late" in names(r))
    assert (r.stats.lists, r.stats.errors) == (1, 0)


def test_injected_500s_back_off_then_recover(
    apiserver: ApiServer, pods: Callable[..., tuple[Reflector, Gate]]
) -> None:
    """500s, not 503s: urllib3 itself retries a 503 (or 429) that carries Retry-After, which the
    emulator sends, so those never reach the reflector."""
    apiserver.fail_next(2, 500, method="GET", path=r"^/api/v1/pods$")
    apiserver.put(pod("a"))
    r, gate = pods()  # the first two lists failed
    assert r.stats.errors == 2 and r.stats.lists == 1 and names(r) == {"a"}
    apiserver.fail_next(3, 500, method="GET", path=r"^/api/v1/pods$")
    gate.close()
    apiserver.drop_watches()
    assert gate.waiting.wait(10)
    last_rv = r.resource_version
    apiserver.put(pod("b"))
    gate.open()
    wait_until(lambda: "b" in names(r), what="recovered")
    s = r.stats
    assert s.errors == 5
    assert s.lists == 1  # watch errors other than 410 resume the watch; they do not relist
    assert "watch: HTTP 500" in s.last_error
    watches = [q for q in apiserver.requests if q.path == "/api/v1/pods" and q.verb == "watch"]
    assert [q.status for q in watches[1:]] == [500, 500, 500, 200]
    assert {q.query["resourceVersion"] for q in watches[1:]} == {last_rv}


def test_fresh_at_stops_advancing_while_the_api_server_is_unreachable(apiserver: ApiServer) -> None:
    now = [100.0]
    r = Reflector(
        "pods",
        client.CoreV1Api(apiserver.api_client()).list_pod_for_all_namespaces,
        backoff=Backoff(**FAST),
        clock=lambda: now[0],
    )
    assert r.fresh_at() is None  # nothing known yet
    r.start()
    try:
        assert r.wait_synced(10)
        wait_until(lambda: apiserver.open_watches() == 1)
        now[0] = 200.0
        assert r.fresh_at() == 200.0  # a healthy watch is current
        apiserver.stop()  # the stream ends and every reconnect is refused
        wait_until(lambda: r.stats.errors >= 1, what="a failed reconnect")
        now[0] = 300.0
        assert r.fresh_at() == 200.0
    finally:
        r.stop()


def test_stop_ends_the_watch_and_joins(
    apiserver: ApiServer, pods: Callable[..., tuple[Reflector, Gate]]
) -> None:
    r, _ = pods()
    r.stop()
    assert r._thread is not None and not r._thread.is_alive()
    wait_until(lambda: apiserver.open_watches() == 0, what="the server saw the watch close")
    before = len(apiserver.requests)
    r.stop()  # idempotent
    apiserver.put(pod("after"))
    assert len(apiserver.requests) == before and "after" not in names(r)


def test_custom_resources_are_reflected_through_a_partial_list_function(apiserver: ApiServer) -> None:
    """The shape qosd's QoSPolicy watch uses: CustomObjectsApi.list_cluster_custom_object with the
    group, version and plural bound; cluster-scoped objects keyed by name."""
    api = client.CustomObjectsApi(apiserver.api_client())
    r = Reflector(
        "qospolicies",
        functools.partial(api.list_cluster_custom_object, GROUP, VERSION, POLICY_PLURAL),
        backoff=Backoff(**FAST),
    )

    def policy(name: str, priority: int) -> Json:
        return {
            "apiVersion": API_VERSION,
            "kind": POLICY_KIND,
            "metadata": {"name": name},
            "spec": {"priority": priority},
        }

    apiserver.put(policy("base", 0))
    r.start()
    try:
        assert r.wait_synced(10)
        assert list(r.items()) == ["base"]
        apiserver.put(policy("canary", 10))
        wait_until(lambda: "canary" in r.items(), what="canary added")
        apiserver.put(policy("base", 5))
        wait_until(lambda: r.items()["base"]["spec"]["priority"] == 5, what="base modified")
        apiserver.delete(API_VERSION, POLICY_KIND, "canary")
        wait_until(lambda: list(r.items()) == ["base"], what="canary deleted")
        assert (r.stats.lists, r.stats.errors) == (1, 0)
    finally:
        r.stop()


class CountingBackoff(Backoff):
    def __init__(self) -> None:
        super().__init__(**FAST)
        self.sleeps = 0

    def sleep(self, stop: threading.Event) -> bool:
        self.sleeps += 1
        return super().sleep(stop)


def test_a_watch_that_keeps_expiring_right_after_a_list_backs_off_between_relists() -> None:
    """One 410 relists at once (the normal case after compaction); a fresh list whose watch is
    expired again before any event means trouble on the server: relist, but not in a tight loop."""
    api = FakeApi([listing(5)], [[error_event(410)], [error_event(410)], [error_event(410)]])
    backoff = CountingBackoff()
    r = Reflector("fake", api, backoff=backoff)
    r.start()
    try:
        assert api.idle.wait(10)
        assert (r.stats.relists_410, r.stats.lists) == (3, 4)
        assert backoff.sleeps == 2
    finally:
        r.stop()


def test_the_counters_are_prometheus_metrics_per_resource(
    apiserver: ApiServer, pods: Callable[..., tuple[Reflector, Gate]]
) -> None:
    """ReflectorCollector in a registry, read back through the text exposition format a Prometheus
    server scrapes: a relist forced by a 410 and a resumed watch show up under the resource's label."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from engine.kube.reflector import ReflectorCollector

    apiserver.bookmark_interval = 3600.0  # the watch stays at its last pod event
    apiserver.put(pod("a"))
    r, _ = pods()
    registry = CollectorRegistry()
    registry.register(ReflectorCollector([r]))
    apiserver.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "elsewhere"}})
    apiserver.compact()  # the namespace moved the resourceVersion past the pod watch's
    apiserver.drop_watches()
    apiserver.put(pod("b"))
    wait_until(lambda: names(r) == {"a", "b"}, what="b after the relist")
    samples = {
        (s.name, s.labels.get("resource")): s.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for s in family.samples
    }
    assert samples[("qosd_kube_watch_expired_total", "pods")] == 1.0
    assert samples[("qosd_kube_watch_lists_total", "pods")] == 2.0
    assert samples[("qosd_kube_watch_restarts_total", "pods")] >= 1.0
    assert samples[("qosd_kube_watch_errors_total", "pods")] == 0.0
    assert samples[("qosd_kube_watch_synced", "pods")] == 1.0
    assert samples[("qosd_kube_watch_objects", "pods")] == 2.0


# ------------------------------------------------------------------ objects nested too deep to decode


def nested(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels - 1):
        value = [value]
    return value


def policy(name: str, **spec: Any) -> Json:
    return {"apiVersion": API_VERSION, "kind": POLICY_KIND, "metadata": {"name": name}, "spec": spec}


def test_a_policy_nested_past_the_decoders_limit_is_refused_by_name_and_the_reflector_lives_on(
    apiserver: ApiServer,
) -> None:
    """Issue 14. The API server takes 10,000 levels; json.loads stops at about 1,000 with a
    RecursionError, which used to fail every list (the reflector never synced and kept relisting).
    Written straight into the store, as an object etcd holds (the CRD schema would refuse it)."""
    from engine.config.errors import PolicyError
    from engine.config.pipeline import build_policy
    from engine.kube.status import PolicyStatusAggregator
    from engine.sources.policies import PolicyWatch
    from tests.builders import snapshot

    apiserver.put(policy("good", rules=[]))
    # under when:, which the CRD keeps as is (x-kubernetes-preserve-unknown-fields)
    apiserver.put(policy("deep", rules=[{"name": "r", "when": {"x": nested(3000)}}]))
    watch = PolicyWatch(apiserver.api_client())
    watch.start()
    try:
        assert watch.wait_synced(30), f"never synced: {watch.reflector.stats}"
        assert set(watch.objects()) == {"good", "deep"}
        with pytest.raises(PolicyError) as info:
            build_policy(list(watch.documents()), snapshot().node)
        deep = [p for p in info.value.problems if "nests deeper" in p.message]
        assert deep and all("deep" in str(p.location) for p in deep), info.value.format()
        assert not any("good" in str(p.location) for p in info.value.problems)

        # through the watch: another one arrives, and a change to a good one still comes in
        apiserver.put(policy("deeper", rules=[{"name": "r", "when": {"x": nested(5000)}}]))
        apiserver.put(policy("good", rules=[], priority=5))
        wait_until(
            lambda: "deeper" in watch.objects() and "priority" in watch.objects()["good"]["spec"],
            what="the watch delivering the deep object and the change after it",
        )
        stats = watch.reflector.stats
        assert stats.errors == 0 and stats.cut_objects == 2, stats
        assert stats.lists == 1  # the deep event did not break the watch into a relist

        # and its status says so: the write does not decode the object the server sends back
        statuses = PolicyStatusAggregator(apiserver.api_client(), watch.objects, watch.documents, dict)
        assert statuses.sync() == 3
        for name, valid in (("good", "True"), ("deep", "False"), ("deeper", "False")):
            stored = apiserver.get(API_VERSION, POLICY_KIND, name)
            assert stored is not None
            (cond,) = [c for c in stored["status"]["conditions"] if c["type"] == "Valid"]
            assert cond["status"] == valid, (name, cond)
            assert valid == "True" or "nests deeper" in cond["message"], cond
    finally:
        watch.stop()


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ('{"a": [[[1]]], "b": "[[[", "c": [2]}', 2, {"a": [[]], "b": "[[[", "c": [2]}),
        ('[{"k": {"x": 1}}, {"k": {}}]', 2, [{"k": {}}, {"k": {}}]),
        ('{"s": "\\"[[", "t": [[["\\\\"]]]}', 3, {"s": '"[[', "t": [[[]]]}),
    ],
)
def test_cut_text_replaces_values_below_the_limit_and_respects_strings(
    text: str, limit: int, expected: Any
) -> None:
    assert json.loads(_cut_text(text, limit)) == expected


def test_capped_decoding_never_raises_recursion_error_and_cuts_in_place() -> None:
    body = '{"items": [{"metadata": {"name": "d"}, "spec": ' + "[" * 5000 + "]" * 5000 + "}]}"
    with pytest.raises(RecursionError):
        json.loads(body)
    value = json_loads_capped(body, 10)
    (item,) = value["items"]
    assert item["metadata"] == {"name": "d"}
    assert cut_deep(item, 5) == ("spec", 0, 0, 0, 0)
    assert cut_deep(item, 5) is None  # nothing left that deep
    assert cut_deep("scalar", 1) is None and cut_deep({"a": {}}, 1) is None
