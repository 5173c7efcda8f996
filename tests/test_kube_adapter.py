"""The Kubernetes adapter (engine.adapters.kube) and the Event recorder (engine.kube.events).

Kubernetes API: the in-repo emulator (tests/kubeapi), reached over real HTTP by the official client;
no kube-apiserver can run here. The first tests need no API server: they drive the recorder's spam
filter and bounded queue with a fake clock and a recorder that was never started.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from engine.adapters.executor import NodeExecutor
from engine.adapters.kube import HEARTBEAT_REFRESH, KubeOperations, _same_quantity, retry_delay
from engine.kube.apicall import describe_error, parse_time, retryable, rfc3339
from engine.kube.client import COMPONENT, REPORTING_CONTROLLER, Backoff
from engine.kube.events import EventRecorder, ObjectRef
from engine.model.facts import Workload
from engine.model.operations import (
    DEFAULT_GRACE_SECONDS,
    EmitEvent,
    EvictPod,
    PublishNodeResource,
    SetNodeCondition,
    SetNodeTaint,
)
from engine.plan.planner import deletion_grace

NODE = "node-a"
RECLAIMED_CPU = "resource.katalyst.kubewharf.io/reclaimed_millicpu"
POD_REF = ObjectRef("v1", "Pod", "web-1", "shop", "uid-web-1")


class FakeClock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class _Status:
    """Enough of an HTTP response for ApiException(http_resp=...)."""

    def __init__(self, status: int, reason: str, body: Mapping[str, Any]) -> None:
        self.status, self.reason = status, reason
        self.data = json.dumps(body).encode()
        self.headers: dict[str, str] = {}


def _api_exception(status: int, reason: str, body: Mapping[str, Any]) -> ApiException:
    return ApiException(http_resp=_Status(status, reason, body))


def _offline_recorder(clock: FakeClock, **kwargs: Any) -> EventRecorder:
    """A recorder whose worker never runs: what ``record`` keeps is visible in ``counts()``."""
    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:1"))
    return EventRecorder(api, host=NODE, clock=clock, **kwargs)


# ---------------------------------------------------------------------------- no API server


def test_describe_error_gives_status_reason_message_and_causes() -> None:
    """The server's Status for a PDB refusal (apiserver eviction REST: 429 TooManyRequests with a
    DisruptionBudget cause) becomes one line an engineer can act on."""
    exc = _api_exception(
        429,
        "Too Many Requests",
        {
            "kind": "Status",
            "status": "Failure",
            "reason": "TooManyRequests",
            "message": "Cannot evict pod as it would violate the pod's disruption budget.",
            "code": 429,
            "details": {
                "causes": [
                    {
                        "type": "DisruptionBudget",
                        "message": "The disruption budget web needs 2 healthy pods and has 2 currently",
                    }
                ]
            },
        },
    )
    assert describe_error(exc) == (
        "HTTP 429 TooManyRequests: Cannot evict pod as it would violate the pod's disruption budget. "
        "(DisruptionBudget: The disruption budget web needs 2 healthy pods and has 2 currently)"
    )
    forbidden = _api_exception(
        403, "Forbidden", {"reason": "Forbidden", "message": "pods/eviction is forbidden"}
    )
    assert "ClusterRole" in describe_error(forbidden)
    assert describe_error(ConnectionRefusedError(111, "Connection refused")).startswith(
        "API server unreachable"
    )


@pytest.mark.parametrize(
    ("exc", "again"),
    [
        (_api_exception(500, "Internal Server Error", {}), True),
        (_api_exception(503, "Service Unavailable", {}), True),
        (_api_exception(429, "Too Many Requests", {}), True),
        (_api_exception(403, "Forbidden", {}), False),
        (_api_exception(422, "Unprocessable Entity", {}), False),
        (TimeoutError("read timed out"), True),
        (ValueError("a bug"), False),
    ],
)
def test_retryable(exc: BaseException, again: bool) -> None:
    assert retryable(exc) is again


def test_times_round_trip_at_second_precision() -> None:
    assert rfc3339(1_700_000_000.7) == "2023-11-14T22:13:20Z"
    assert parse_time("2023-11-14T22:13:20Z") == 1_700_000_000.0
    assert parse_time("2023-11-14T22:13:20.5+00:00") == 1_700_000_000.5
    assert parse_time("yesterday") is None
    assert parse_time(None) is None


@pytest.mark.parametrize(
    ("have", "want", "same"),
    [
        ("4k", 4000.0, True),
        ("4000", 4000.0, True),
        ("4Gi", 4 * 2**30, True),
        ("3999", 4000.0, False),
        (None, 1.0, False),
        ("x", 1.0, False),
    ],
)
def test_quantities_compare_by_value(have: object, want: float, same: bool) -> None:
    """The API server returns quantities in canonical form ("4000" as "4k"): string comparison would
    rewrite the Node on every tick."""
    assert _same_quantity(have, want) is same


def test_spam_filter_is_a_token_bucket_per_object() -> None:
    """client-go's EventSourceObjectSpamFilter defaults: burst 25, one token back per 5 minutes."""
    clock = FakeClock()
    recorder = _offline_recorder(clock)
    for i in range(30):
        recorder.record(POD_REF, "Warning", "Evicted", f"message {i}")
    assert recorder.counts()["queued"] == 25
    assert recorder.throttled == 5
    other = ObjectRef("v1", "Pod", "web-2", "shop", "uid-web-2")
    recorder.record(other, "Warning", "Evicted", "another object has its own budget")
    assert recorder.counts()["queued"] == 26
    clock.now += 299
    recorder.record(POD_REF, "Warning", "Evicted", "still empty")
    assert recorder.throttled == 6
    clock.now += 2  # 301 s: one token back
    recorder.record(POD_REF, "Warning", "Evicted", "one more")
    recorder.record(POD_REF, "Warning", "Evicted", "and out again")
    assert recorder.counts()["queued"] == 27
    assert recorder.throttled == 7
    recorder.close()


def test_a_policy_rejection_is_not_silenced_by_a_rule_that_used_up_the_nodes_event_budget() -> None:
    """A policy emitting an Event about the Node every tick spends the Node's budget; the Warning
    that qosd refused a new policy still goes out (its own budget), and only once more than 25 of
    those came within the refill does the filter hold it."""
    clock = FakeClock()
    recorder = _offline_recorder(clock)
    node = ObjectRef("v1", "Node", "node-1", "", "uid-node-1")
    for i in range(30):
        recorder.record(node, "Warning", "MemoryPressure", f"tick {i}")
    assert recorder.throttled == 5
    recorder.record(node, "Warning", "PolicyRejected", "qosd rejected a policy reload")
    assert recorder.counts()["queued"] == 26 and recorder.throttled == 5
    for i in range(25):
        recorder.record(node, "Warning", "PolicyRejected", f"rejected again {i}")
    assert recorder.throttled == 6
    recorder.close()


class _Untouchable:
    """An API stand-in that notes every method the code under test reaches for."""

    def __init__(self, touched: list[str]) -> None:
        self._touched = touched

    def __getattr__(self, name: str) -> Any:
        self._touched.append(name)
        raise AssertionError(f"the API was used ({name}) where it must not be")


def test_bounded_queue_drops_when_full_and_close_drops_the_rest() -> None:
    clock = FakeClock()
    recorder = _offline_recorder(clock, queue_size=3)
    touched: list[str] = []
    recorder.api = _Untouchable(touched)  # type: ignore[assignment]
    for i in range(5):
        recorder.record(ObjectRef("v1", "Pod", f"p{i}", "ns", f"u{i}"), "Normal", "Test", "m")
    assert touched == []  # record only queues: the caller never talks to the API
    assert recorder.counts() == {
        "queued": 3,
        "created": 0,
        "patched": 0,
        "throttled": 0,
        "dropped": 2,
        "failed": 0,
    }
    assert recorder.flush(0.05) is False  # never started: nothing goes out
    recorder.close()
    recorder.record(POD_REF, "Normal", "Test", "after close")
    assert recorder.counts()["queued"] == 0
    assert recorder.dropped == 2 + 3 + 1


# ---------------------------------------------------------------------------- emulator helpers

Server = Any  # tests.kubeapi.ApiServer


def _node(server: Server, taints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return server.put(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}},
            "spec": {"taints": taints} if taints else {},
            "status": {
                "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                "allocatable": {"cpu": "7800m", "memory": "31Gi", "pods": "110"},
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "kubelet is posting ready status",
                        "lastHeartbeatTime": "2023-11-14T22:00:00Z",
                        "lastTransitionTime": "2023-11-14T20:00:00Z",
                    }
                ],
            },
        }
    )


def _pod(server: Server, name: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    return server.put(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "shop", "labels": dict(labels or {"app": "web"})},
            "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "nginx"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }
    )


def _get_node(server: Server) -> dict[str, Any]:
    node = server.get("v1", "Node", NODE)
    assert node is not None
    return node


def _requests(server: Server, method: str | None = None) -> list[Any]:
    return [r for r in server.requests if method is None or r.method == method]


def _events(server: Server, namespace: str) -> list[dict[str, Any]]:
    return [e for e in server.list("v1", "Event", namespace) if e.get("reason") != "Scheduled"]


class Kit:
    """The adapter wired like the daemon wires it, against the emulator; ``node()`` reads the
    emulator's current Node unless a test pins a stale copy."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.api = server.api_client()
        self.clock = FakeClock()
        self.events = EventRecorder(
            self.api, host=NODE, clock=self.clock, backoff=Backoff(base=0.01, cap=0.05)
        )
        self.events.start()
        self.pinned: dict[str, Any] | None = None
        self.use_watch = True
        self.ops = KubeOperations(self.api, NODE, self.events, self.node, clock=self.clock)
        self.executor = NodeExecutor(others=self.ops.handlers())

    def node(self) -> Mapping[str, Any] | None:
        if self.pinned is not None:
            return self.pinned
        return self.server.get("v1", "Node", NODE) if self.use_watch else None

    def apply(self, op: Any) -> Any:
        return self.executor.apply_one(op)


@pytest.fixture
def kit(apiserver: Server) -> Iterator[Kit]:
    apiserver.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}})
    k = Kit(apiserver)
    yield k
    k.events.close()


# ---------------------------------------------------------------------------- evictPod

EVICT_REASON = (
    "qosd rule be-memory-evict: node.memory.usage_percent 93 gte 70"  # planner._evict_reason's form
)


def _evict(uid: str, name: str = "web-1", grace: int | None = 30) -> EvictPod:
    return EvictPod(uid, "shop", name, grace, EVICT_REASON, "be-memory-evict")


def _pdb(server: Server) -> None:
    server.put(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        }
    )


def _setup_running(server: Server) -> str:
    return str(_pod(server, "web-1")["metadata"]["uid"])


def _setup_gone(server: Server) -> str:
    uid = _setup_running(server)
    server.delete("v1", "Pod", "web-1", "shop")
    return uid


def _setup_replaced(server: Server) -> str:
    """The pod we planned for was replaced by a namesake (StatefulSet-style) before the call."""
    uid = _setup_running(server)
    server.delete("v1", "Pod", "web-1", "shop")
    _pod(server, "web-1")
    return uid


def _setup_pdb(server: Server) -> str:
    _pdb(server)
    return _setup_running(server)


def _setup_500(server: Server) -> str:
    uid = _setup_running(server)
    server.fail_next(1, 500, method="POST", path=r"/eviction$")
    return uid


EVICTIONS: list[tuple[str, Callable[[Server], str], str, str, bool]] = [
    # case, set-up (returns the UID planned for), status, error contains, pod still there
    ("allowed", _setup_running, "applied", "", False),
    ("pod already gone", _setup_gone, "vanished", "already gone", False),
    ("UID precondition failed", _setup_replaced, "vanished", "the name now belongs to another pod", True),
    ("PDB refuses", _setup_pdb, "deferred", "DisruptionBudget", True),
    ("server error", _setup_500, "failed", "HTTP 500", True),
]


@pytest.mark.parametrize(
    ("case", "setup", "status", "error", "remains"), EVICTIONS, ids=[c[0] for c in EVICTIONS]
)
def test_eviction_outcomes(
    kit: Kit, case: str, setup: Callable[[Server], str], status: str, error: str, remains: bool
) -> None:
    """Eviction API semantics (Kubernetes docs "API-initiated eviction"): 200/201 allowed, 404
    gone, 409 when the UID precondition fails, 429 while a PodDisruptionBudget disallows it."""
    server = kit.server
    uid = setup(server)
    result = kit.apply(_evict(uid))
    assert (result.status, result.attempts) == (status, 1), result
    assert error in (result.error or ""), result.error
    evictions = [r for r in _requests(server, "POST") if r.path.endswith("/eviction")]
    assert len(evictions) == 1
    body = evictions[0].json
    assert body["deleteOptions"]["preconditions"] == {"uid": uid}
    assert body["deleteOptions"]["gracePeriodSeconds"] == 30
    assert body["metadata"] == {"name": "web-1", "namespace": "shop"}
    assert (server.get("v1", "Pod", "web-1", "shop") is not None) is remains
    assert kit.events.flush(5)
    evicted = [e for e in _events(server, "shop") if e["reason"] == "Evicted"]
    if status == "applied":
        assert len(evicted) == 1
        event = evicted[0]
        assert event["type"] == "Warning"
        assert event["message"] == EVICT_REASON
        assert event["involvedObject"] == {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "web-1",
            "namespace": "shop",
            "uid": uid,
        }
        assert event["source"] == {"component": COMPONENT, "host": NODE}
        assert (event["reportingComponent"], event["reportingInstance"]) == (REPORTING_CONTROLLER, NODE)
        assert event["count"] == 1
        assert event["metadata"]["name"].startswith("web-1.")
    else:
        assert evicted == []


KILLERS = [
    # killer, set-up, status, the one pod request the server must have got
    ("evictionAPI", _setup_running, "applied", ("POST", "/api/v1/namespaces/shop/pods/web-1/eviction")),
    ("delete", _setup_running, "applied", ("DELETE", "/api/v1/namespaces/shop/pods/web-1")),
    # a PDB refuses an eviction but not a DELETE (Katalyst's deletion-api-killer bypasses PDBs)
    ("evictionAPI", _setup_pdb, "deferred", ("POST", "/api/v1/namespaces/shop/pods/web-1/eviction")),
    ("delete", _setup_pdb, "applied", ("DELETE", "/api/v1/namespaces/shop/pods/web-1")),
    ("delete", _setup_replaced, "vanished", ("DELETE", "/api/v1/namespaces/shop/pods/web-1")),
]


@pytest.mark.parametrize(("killer", "setup", "status", "request_line"), KILLERS)
def test_eviction_killer_picks_the_request(
    kit: Kit, killer: str, setup: Callable[[Server], str], status: str, request_line: tuple[str, str]
) -> None:
    """evict.killer travels on the operation: evictionAPI POSTs the Eviction subresource, delete
    sends a plain DELETE of the pod, each with the UID precondition and the grace period."""
    uid = setup(kit.server)
    kit.server.requests.clear()
    result = kit.apply(replace(_evict(uid), killer=killer))
    assert result.status == status, result
    pod_calls = [
        (r.method, r.path.split("?")[0])
        for r in kit.server.requests
        if r.method in ("POST", "DELETE") and "/pods/" in r.path
    ]
    assert pod_calls == [request_line]
    sent = next(r for r in kit.server.requests if (r.method, r.path.split("?")[0]) == request_line).json
    options = sent["deleteOptions"] if killer == "evictionAPI" else sent
    assert options["preconditions"] == {"uid": uid}
    assert options["gracePeriodSeconds"] == 30
    gone = kit.server.get("v1", "Pod", "web-1", "shop") is None
    assert gone is (status == "applied")


def test_eviction_without_grace_period_sends_none(kit: Kit) -> None:
    uid = _setup_running(kit.server)
    assert kit.apply(_evict(uid, grace=None)).status == "applied"
    body = next(r for r in _requests(kit.server, "POST") if r.path.endswith("/eviction")).json
    assert "gracePeriodSeconds" not in body["deleteOptions"]


def test_a_negative_grace_period_is_never_sent(kit: Kit) -> None:
    """-1 means the pod's own grace period; the planner resolves it (deletion_grace). Should a negative
    value reach the adapter anyway, it is refused before any request: DeleteOptions take seconds >= 0."""
    uid = _setup_running(kit.server)
    result = kit.apply(_evict(uid, grace=-1))
    assert (result.status, result.attempts) == ("failed", 0)
    assert "gracePeriodSeconds -1 is negative" in (result.error or "")
    assert [r for r in _requests(kit.server, "POST") if r.path.endswith("/eviction")] == []


@pytest.mark.parametrize(
    ("requested", "own", "sent"),
    [
        (-1, 45, 45),  # the pod's own terminationGracePeriodSeconds
        (-1, 0, 0),
        (-1, None, 30),  # the pod has none: Kubernetes' default
        (-5, 45, 45),  # any negative value means the pod's own
        (10, 45, 10),  # a rule's own number wins
        (0, 45, 0),
        (None, 45, None),  # not named: the API applies the pod's own itself
    ],
)
def test_deletion_grace_resolves_the_pods_own(
    requested: int | None, own: int | None, sent: int | None
) -> None:
    workload = Workload(uid="u", name="web-1", namespace="shop", termination_grace_seconds=own)
    assert deletion_grace(requested, workload) == sent


def test_deletion_grace_of_a_pod_the_snapshot_lacks_is_the_default() -> None:
    assert deletion_grace(-1, None) == DEFAULT_GRACE_SECONDS == 30


def test_eviction_when_the_api_server_is_unreachable_fails_readably() -> None:
    dead = client.ApiClient(client.Configuration(host="http://127.0.0.1:1"))
    recorder = EventRecorder(dead, host=NODE)
    ops = KubeOperations(dead, NODE, recorder, lambda: None)
    result = ops.handlers()["evictPod"](_evict("uid-1"))
    assert (result.status, result.attempts) == ("failed", 1)
    assert result.error is not None
    assert result.error.startswith("eviction of shop/web-1 (UID uid-1) failed: API server unreachable")
    assert recorder.counts()["queued"] == 0  # no Event for an eviction that did not happen
    recorder.close()


def test_eviction_that_times_out_fails_readably(monkeypatch: pytest.MonkeyPatch) -> None:
    """A listener that takes the connection and never answers (the emulator cannot stall a reply)."""
    import engine.adapters.kube as kube_adapter

    monkeypatch.setattr(kube_adapter, "REQUEST_TIMEOUT", (1.0, 0.2))
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        api = client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{port}"))
        recorder = EventRecorder(api, host=NODE)
        ops = KubeOperations(api, NODE, recorder, lambda: None)
        # Only the read timeout can end this call (the listener never answers). The thread and its
        # generous join are a guard against blocking forever, not a measure of speed.
        results: list[Any] = []
        worker = threading.Thread(target=lambda: results.append(ops.handlers()["evictPod"](_evict("uid-1"))))
        worker.start()
        worker.join(120)
        assert not worker.is_alive(), "the eviction blocked on a silent API server: no read timeout applied"
        (result,) = results
    assert (result.status, result.attempts) == ("failed", 1)
    assert "API server unreachable or too slow (ReadTimeoutError" in (result.error or ""), result.error
    recorder.close()


# ---------------------------------------------------------------------------- publishNodeResource


def test_publish_sets_updates_and_removes_in_capacity_and_allocatable(kit: Kit) -> None:
    server = kit.server
    _node(server)

    def published() -> tuple[Any, Any]:
        status = _get_node(server)["status"]
        return status["capacity"].get(RECLAIMED_CPU), status["allocatable"].get(RECLAIMED_CPU)

    result = kit.apply(PublishNodeResource(RECLAIMED_CPU, "4000", "reclaim"))
    assert (result.status, result.attempts) == ("applied", 1), result
    assert {_same_quantity(v, 4000.0) for v in published()} == {True}
    patch = _requests(server, "PATCH")[-1]
    assert (patch.path, patch.content_type) == (
        f"/api/v1/nodes/{NODE}/status",
        "application/strategic-merge-patch+json",
    )
    assert patch.json == {
        "status": {"capacity": {RECLAIMED_CPU: "4000"}, "allocatable": {RECLAIMED_CPU: "4000"}}
    }

    before = len(server.requests)
    again = kit.apply(PublishNodeResource(RECLAIMED_CPU, "4000", "reclaim"))
    assert (again.status, again.attempts) == ("unchanged", 0)
    assert len(server.requests) == before  # compared with the watched Node: no request

    assert kit.apply(PublishNodeResource(RECLAIMED_CPU, "2500", "reclaim")).status == "applied"
    assert {_same_quantity(v, 2500.0) for v in published()} == {True}

    removed = kit.apply(PublishNodeResource(RECLAIMED_CPU, None, "reclaim"))
    assert removed.status == "applied"
    assert published() == (None, None)
    status = _get_node(server)["status"]
    assert status["capacity"]["cpu"] == "8" and status["allocatable"]["memory"] == "31Gi"  # the rest is kept

    before = len(server.requests)
    assert kit.apply(PublishNodeResource(RECLAIMED_CPU, None, "reclaim")).status == "unchanged"
    assert len(server.requests) == before


def test_publish_before_the_node_watch_synced_reads_the_node(kit: Kit) -> None:
    _node(kit.server)
    kit.use_watch = False
    result = kit.apply(PublishNodeResource(RECLAIMED_CPU, "1000", "reclaim"))
    assert (result.status, result.attempts) == ("applied", 2)
    assert [r.method for r in kit.server.requests[-2:]] == ["GET", "PATCH"]
    assert kit.apply(PublishNodeResource(RECLAIMED_CPU, "1000", "reclaim")).status == "unchanged"


def test_publish_on_a_missing_node_fails_naming_node_name(kit: Kit) -> None:
    kit.pinned = {"metadata": {"name": NODE}, "status": {}}
    result = kit.apply(PublishNodeResource(RECLAIMED_CPU, "1000", "reclaim"))
    assert result.status == "failed"
    assert "HTTP 404" in (result.error or "") and f"NODE_NAME={NODE}" in (result.error or "")


def test_publish_refuses_a_bad_quantity_without_a_request(kit: Kit) -> None:
    _node(kit.server)
    before = len(kit.server.requests)
    result = kit.apply(PublishNodeResource(RECLAIMED_CPU, "four", "reclaim"))
    assert result.status == "failed" and "not a quantity" in (result.error or "")
    assert len(kit.server.requests) == before


# ---------------------------------------------------------------------------- setNodeCondition


def _condition(server: Server, type_: str) -> dict[str, Any] | None:
    return next((c for c in _get_node(server)["status"]["conditions"] if c["type"] == type_), None)


def test_condition_merges_by_type_and_keeps_transition_time_until_the_status_flips(kit: Kit) -> None:
    server = kit.server
    _node(server)
    op = SetNodeCondition("QosdMemoryPressure", "True", "MemoryAboveThreshold", "memory 93% >= 90%", "mem")
    first = kit.apply(op)
    assert (first.status, first.attempts) == ("applied", 1)
    cond = _condition(server, "QosdMemoryPressure")
    assert cond is not None
    assert cond["lastTransitionTime"] == cond["lastHeartbeatTime"] == rfc3339(kit.clock.now)
    assert _condition(server, "Ready") is not None  # the kubelet's condition survives (merge key: type)

    before = len(server.requests)
    kit.clock.now += HEARTBEAT_REFRESH - 1
    assert kit.apply(op).status == "unchanged"
    assert len(server.requests) == before

    transition = cond["lastTransitionTime"]
    kit.clock.now += 2  # heartbeat older than a minute: rewritten, transition kept
    beat = kit.apply(op)
    assert beat.status == "applied" and "heartbeat" in beat.detail
    cond = _condition(server, "QosdMemoryPressure")
    assert cond is not None
    assert cond["lastTransitionTime"] == transition
    assert cond["lastHeartbeatTime"] == rfc3339(kit.clock.now)

    kit.clock.now += 5  # same status, new message: rewritten, transition kept
    changed = SetNodeCondition(
        "QosdMemoryPressure", "True", "MemoryAboveThreshold", "memory 95% >= 90%", "mem"
    )
    updated = kit.apply(changed)
    assert updated.status == "applied" and "reason/message updated" in updated.detail
    cond = _condition(server, "QosdMemoryPressure")
    assert cond is not None and cond["message"] == "memory 95% >= 90%"
    assert cond["lastTransitionTime"] == transition

    kit.clock.now += 5  # the status flips: a new transition time
    flipped = kit.apply(
        SetNodeCondition("QosdMemoryPressure", "False", "MemoryBelowThreshold", "memory 60%", "mem")
    )
    assert flipped.status == "applied" and "True -> False" in flipped.detail
    cond = _condition(server, "QosdMemoryPressure")
    assert cond is not None
    assert cond["lastTransitionTime"] == rfc3339(kit.clock.now) != transition
    conditions = [c["type"] for c in _get_node(server)["status"]["conditions"]]
    assert sorted(conditions) == ["QosdMemoryPressure", "Ready"]


# ---------------------------------------------------------------------------- setNodeTaint

KUBELET_TAINT = {
    "key": "node.kubernetes.io/disk-pressure",
    "effect": "NoSchedule",
    "timeAdded": "2023-11-14T21:00:00Z",
}


def _taints(server: Server) -> list[dict[str, Any]]:
    return list((_get_node(server).get("spec") or {}).get("taints") or [])


def test_taint_is_added_next_to_existing_taints_and_replaced_by_key_and_effect(kit: Kit) -> None:
    server = kit.server
    _node(server, taints=[KUBELET_TAINT])
    op = SetNodeTaint("qosd.io/memory-pressure", "true", "NoSchedule", "mem")
    result = kit.apply(op)
    assert (result.status, result.attempts) == ("applied", 1), result
    assert _taints(server) == [
        KUBELET_TAINT,
        {"key": "qosd.io/memory-pressure", "value": "true", "effect": "NoSchedule"},
    ]

    before = len(server.requests)
    assert kit.apply(op).status == "unchanged"
    assert len(server.requests) == before

    replaced = kit.apply(SetNodeTaint("qosd.io/memory-pressure", "high", "NoSchedule", "mem"))
    assert replaced.status == "applied" and "'true' -> 'high'" in replaced.detail
    assert _taints(server) == [
        KUBELET_TAINT,
        {"key": "qosd.io/memory-pressure", "value": "high", "effect": "NoSchedule"},
    ]

    evict = kit.apply(SetNodeTaint("qosd.io/memory-pressure", "", "NoExecute", "mem"))
    assert evict.status == "applied"
    no_execute = [t for t in _taints(server) if t["effect"] == "NoExecute"]
    assert no_execute == [
        {"key": "qosd.io/memory-pressure", "effect": "NoExecute", "timeAdded": rfc3339(kit.clock.now)}
    ]
    assert len(_taints(server)) == 3


def test_taint_write_carries_the_resource_version_and_retries_a_conflict(kit: Kit) -> None:
    server = kit.server
    version = _node(server, taints=[KUBELET_TAINT])["metadata"]["resourceVersion"]
    server.fail_next(1, 409, method="PATCH", path=rf"^/api/v1/nodes/{NODE}$")
    result = kit.apply(SetNodeTaint("qosd.io/cpu-pressure", "true", "NoSchedule", "cpu"))
    assert (result.status, result.attempts) == ("applied", 3), result  # PATCH (409), GET, PATCH
    assert [r.method for r in server.requests[-3:]] == ["PATCH", "GET", "PATCH"]
    sent = server.requests[-1].json
    assert sent["metadata"]["resourceVersion"] == version
    assert [t["key"] for t in _taints(server)] == ["node.kubernetes.io/disk-pressure", "qosd.io/cpu-pressure"]


def test_taint_from_a_stale_view_does_not_clobber_a_concurrent_taint(kit: Kit) -> None:
    """The watched Node lags behind a write by another controller: the resourceVersion precondition
    turns the stale read-modify-write into a 409, and the re-read keeps the newcomer's taint."""
    server = kit.server
    kit.pinned = _node(server)
    newer = _get_node(server)
    newer["spec"] = {"taints": [KUBELET_TAINT]}
    server.put(newer)  # another writer, after our last look
    result = kit.apply(SetNodeTaint("qosd.io/cpu-pressure", "true", "NoSchedule", "cpu"))
    assert (result.status, result.attempts) == ("applied", 3), result
    assert [t["key"] for t in _taints(server)] == ["node.kubernetes.io/disk-pressure", "qosd.io/cpu-pressure"]


def test_taint_gives_up_after_three_conflicting_retries(kit: Kit) -> None:
    _node(kit.server)
    kit.server.fail_next(4, 409, method="PATCH", path=rf"^/api/v1/nodes/{NODE}$")
    result = kit.apply(SetNodeTaint("qosd.io/cpu-pressure", "true", "NoSchedule", "cpu"))
    assert (result.status, result.attempts) == ("failed", 7)  # 4 PATCHes, 3 GETs in between
    assert "gave up after 4 conflicting writes" in (result.error or "")
    assert _taints(kit.server) == []


# ---------------------------------------------------------------------------- emitEvent and the recorder


def test_emit_event_lands_on_the_node_in_the_default_namespace(kit: Kit) -> None:
    node_uid = _node(kit.server)["metadata"]["uid"]
    result = kit.apply(EmitEvent("CpuSuppressed", "be pods suppressed to 12 CPUs", "Normal", "suppress"))
    assert result.status == "applied"
    assert kit.events.flush(5)
    events = [e for e in _events(kit.server, "default") if e["reason"] == "CpuSuppressed"]
    assert len(events) == 1
    assert events[0]["type"] == "Normal"
    assert events[0]["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node_uid}
    assert events[0]["metadata"]["namespace"] == "default"


def test_same_event_twice_is_one_event_counted_twice(kit: Kit) -> None:
    """client-go's EventCorrelator: a repeat within 10 minutes PATCHes count and lastTimestamp."""
    server = kit.server
    first_seen = kit.clock.now
    kit.events.record(POD_REF, "Warning", "Evicted", "same message")
    assert kit.events.flush(5)
    kit.clock.now += 30
    kit.events.record(POD_REF, "Warning", "Evicted", "same message")
    kit.events.record(POD_REF, "Warning", "Evicted", "another message")
    assert kit.events.flush(5)
    events = sorted(_events(server, "shop"), key=lambda e: e["message"])
    assert [(e["message"], e["count"]) for e in events] == [("another message", 1), ("same message", 2)]
    same = events[1]
    assert same["firstTimestamp"] == rfc3339(first_seen)
    assert same["lastTimestamp"] == rfc3339(first_seen + 30)
    assert [r.method for r in _requests(server) if "/events" in r.path] == ["POST", "PATCH", "POST"]
    assert kit.events.counts()["created"] == 2 and kit.events.patched == 1

    kit.clock.now += 601  # outside the window: a new Event
    kit.events.record(POD_REF, "Warning", "Evicted", "same message")
    assert kit.events.flush(5)
    assert len(_events(server, "shop")) == 3


def test_a_correlated_event_that_expired_is_posted_again(kit: Kit) -> None:
    """Events expire (an hour's TTL by default); the PATCH then gets 404 and the Event is created anew."""
    server = kit.server
    kit.events.record(POD_REF, "Warning", "Evicted", "m")
    assert kit.events.flush(5)
    (event,) = _events(server, "shop")
    server.delete("v1", "Event", event["metadata"]["name"], "shop")
    kit.events.record(POD_REF, "Warning", "Evicted", "m")
    assert kit.events.flush(5)
    (again,) = _events(server, "shop")
    assert again["count"] == 2 and again["metadata"]["name"] != event["metadata"]["name"]


def test_event_posting_retries_server_errors_and_gives_up_on_refusals(kit: Kit) -> None:
    server = kit.server
    server.fail_next(2, 503, method="POST", path=r"/events$")
    kit.events.record(POD_REF, "Warning", "Evicted", "after two 503s")
    assert kit.events.flush(5)
    assert [e["message"] for e in _events(server, "shop")] == ["after two 503s"]
    assert kit.events.failed == 0

    server.fail_next(1, 403, method="POST", path=r"/events$")
    kit.events.record(POD_REF, "Warning", "Evicted", "forbidden")
    assert kit.events.flush(5)
    assert kit.events.failed == 1
    assert (
        len([r for r in _requests(server, "POST") if r.path.endswith("/events")]) == 4
    )  # 3 + 1, no retry of a 403


def test_record_does_not_wait_for_a_slow_api_and_flush_waits_for_it(kit: Kit) -> None:
    server = kit.server
    # The first POST is held in the posting thread until released: record must return regardless.
    held, release = threading.Event(), threading.Event()
    create = kit.events.api.create_namespaced_event

    def slow_create(*args: Any, **kwargs: Any) -> Any:
        held.set()
        release.wait(120)
        return create(*args, **kwargs)

    kit.events.api.create_namespaced_event = slow_create  # type: ignore[method-assign]
    kit.events.record(ObjectRef("v1", "Pod", "p0", "shop", "u0"), "Normal", "Test", "m")
    assert held.wait(120), "the posting thread never picked up the first Event"

    def record_nine() -> None:
        for i in range(1, 10):
            kit.events.record(ObjectRef("v1", "Pod", f"p{i}", "shop", f"u{i}"), "Normal", "Test", "m")

    caller = threading.Thread(target=record_nine)
    caller.start()
    caller.join(120)  # a deadlock guard only; record takes no lock the posting thread holds while posting
    finished = not caller.is_alive()
    queued = kit.events.counts()["queued"]
    flushed_early = kit.events.flush(0)
    release.set()
    assert finished, "record blocked while an Event was being posted"
    assert queued == 9 and not flushed_early  # all nine wait behind the held POST
    assert kit.events.flush(10)
    assert kit.events.counts()["queued"] == 0
    assert len(_events(server, "shop")) == 10


def test_a_throttling_429_without_a_pdb_defers_every_eviction_until_retry_after_has_passed(kit: Kit) -> None:
    """API priority and fairness answers 429 with Retry-After and no DisruptionBudget cause: the
    eviction is deferred as throttled (not blamed on a PDB), and no eviction is asked for again
    before Retry-After has passed; then it goes through, once."""
    server = kit.server
    uid = _setup_running(server)
    other = str(_pod(server, "web-2")["metadata"]["uid"])
    server.fail_next(1, 429, method="POST", path=r"/eviction$", retry_after=30)
    first = kit.apply(_evict(uid))
    assert (first.status, first.attempts) == ("deferred", 1)
    assert "throttling" in (first.error or "") and "retry after 30s" in (first.error or "")
    assert "PodDisruptionBudget" not in (first.error or "")
    kit.clock.now += 10
    held = kit.apply(_evict(other, name="web-2"))
    assert (held.status, held.attempts) == ("deferred", 0)
    assert "20.0s more" in (held.error or "")
    assert len([r for r in _requests(server, "POST") if r.path.endswith("/eviction")]) == 1
    kit.clock.now += 21
    assert kit.apply(_evict(uid)).status == "applied"
    evictions = [r for r in _requests(server, "POST") if r.path.endswith("/eviction")]
    assert [r.status for r in evictions] == [429, 201]


def test_a_pdb_429_does_not_hold_back_other_evictions(kit: Kit) -> None:
    server = kit.server
    _pdb(server)
    uid = _setup_running(server)
    free = str(_pod(server, "batch-1", labels={"app": "batch"})["metadata"]["uid"])
    assert kit.apply(_evict(uid)).status == "deferred"
    assert kit.apply(_evict(free, name="batch-1")).status == "applied"


def test_a_refused_eviction_is_retried_with_a_per_pod_backoff(kit: Kit) -> None:
    """Katalyst's pod killer retries a failed eviction through client-go's rate-limited queue: per
    pod 5ms, doubling to 1000s (issue 16). A PDB keeps refusing: the pod is asked again only once
    its backoff has passed, other pods are not held, and a success clears the record."""
    server = kit.server
    _pdb(server)
    uid = _setup_running(server)
    free = str(_pod(server, "batch-1", labels={"app": "batch"})["metadata"]["uid"])
    asked = 0
    for failures in range(1, 12):
        result = kit.apply(_evict(uid))
        assert (result.status, result.attempts) == ("deferred", 1)
        asked += 1
        held = kit.apply(_evict(uid))  # at once again: inside the backoff, nothing is sent
        assert (held.status, held.attempts) == ("deferred", 0)
        assert f"failed {failures} time(s)" in (held.error or "")
        kit.clock.now += retry_delay(failures)
    assert retry_delay(11) == pytest.approx(5.12)
    assert kit.apply(_evict(free, name="batch-1")).status == "applied"  # other pods are not held
    evictions = [r for r in _requests(server, "POST") if r.path.endswith("/eviction") and "web-1" in r.path]
    assert len(evictions) == asked == 11
    server.delete("policy/v1", "PodDisruptionBudget", "web", "shop")
    assert kit.apply(_evict(uid)).status == "applied"
    assert uid not in kit.ops.retry


@pytest.mark.parametrize(
    ("failures", "delay"), [(1, 0.005), (2, 0.01), (9, 1.28), (18, 655.36), (19, 1000.0), (500, 1000.0)]
)
def test_retry_delay_doubles_from_5ms_to_1000s(failures: int, delay: float) -> None:
    assert retry_delay(failures) == pytest.approx(delay)
