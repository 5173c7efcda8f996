"""The Kubernetes API-server emulator (tests/kubeapi) against the documented API semantics.

Kubernetes API: the in-repo emulator (tests/kubeapi), reached over real HTTP by the official client;
no kube-apiserver can run here. Every test goes through the unmodified ``kubernetes`` client (typed
APIs, CustomObjectsApi, kubernetes.watch.Watch) and a kubeconfig, so what is checked is what qosd will
see: status codes, reasons, messages and causes of metav1.Status errors, resourceVersion and watch
semantics, the patch formats the client picks, and the Eviction API's PodDisruptionBudget arithmetic.
Expected values come from the Kubernetes API documentation (API concepts: resource versions, watch
bookmarks, 410 Gone; Eviction API; PodDisruptionBudget) and the messages of the API server's sources
quoted in tests/kubeapi.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.client import ApiException
from urllib3.exceptions import ProtocolError

from tests.kubeapi import ApiServer

Json = dict[str, Any]
NS = "default"


# ------------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------------


@pytest.fixture
def api(apiserver: ApiServer) -> client.ApiClient:
    return apiserver.api_client()


@pytest.fixture
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


def pod(
    name: str,
    node: str = "n1",
    *,
    labels: dict[str, str] | None = None,
    phase: str = "Running",
    ready: bool | None = True,
    namespace: str = NS,
) -> Json:
    """A pod as a kubelet would have reported it (written with server.put, which keeps the status)."""
    conditions = [] if ready is None else [{"type": "Ready", "status": "True" if ready else "False"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels if labels is not None else {"app": "web"},
        },
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": phase, "conditions": conditions},
    }


def node(name: str, **capacity: str) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"capacity": {"cpu": "8", "memory": "16Gi", **capacity}, "conditions": []},
    }


def data(resp: Any) -> Json:
    """The JSON body of a ``_preload_content=False`` response."""
    body: Json = json.loads(resp.data)
    return body


def error_of(call: Callable[[], Any]) -> tuple[int, Json]:
    with pytest.raises(ApiException) as info:
        call()
    return info.value.status, json.loads(info.value.body)


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def watch_events(
    server: ApiServer,
    func: Callable[..., Any],
    *args: Any,
    count: int,
    during: Callable[[], None] | None = None,
    **kwargs: Any,
) -> list[Json]:
    """The first ``count`` events of one watch (raw dicts); ``during`` runs once the stream is open.
    The server-side timeout bounds a test that receives fewer events than it expects."""
    opened = server.open_watches()
    failure: list[BaseException] = []

    def act() -> None:
        try:
            wait_until(lambda: server.open_watches() > opened)
            assert during is not None
            during()
        except BaseException as err:  # surfaced in the test thread below
            failure.append(err)

    thread = threading.Thread(target=act) if during else None
    if thread:
        thread.start()
    events: list[Json] = []
    w = watch.Watch()
    kwargs.setdefault("timeout_seconds", 5)
    for event in w.stream(func, *args, deserialize=False, **kwargs):
        events.append(event)
        if len(events) >= count:
            w.stop()
            break
    if thread:
        thread.join()
    if failure:
        raise failure[0]
    return events


def summary(events: list[Json]) -> list[tuple[str, str]]:
    return [(e["type"], e["object"]["metadata"].get("name", "")) for e in events]


# ------------------------------------------------------------------------------------------------
# Connection, authentication, authorization
# ------------------------------------------------------------------------------------------------


def test_kubeconfig_reaches_the_server_with_its_bearer_token(apiserver: ApiServer, tmp_path: Path) -> None:
    path = apiserver.kubeconfig(tmp_path)
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(path), client_configuration=cfg)
    names = [
        n["metadata"]["name"]
        for n in data(client.CoreV1Api(client.ApiClient(cfg)).list_namespace(_preload_content=False))["items"]
    ]
    assert {"default", "kube-system", "kube-node-lease", "kube-public"} <= set(names)
    assert apiserver.requests[-1].user == "kubernetes-admin"


@pytest.mark.parametrize("token", [None, "not-the-token"])
def test_requests_without_the_kubeconfig_token_are_401(apiserver: ApiServer, token: str | None) -> None:
    cfg = client.Configuration(host=apiserver.url)
    if token:
        cfg.api_key = {"BearerToken": f"Bearer {token}"}
    status, body = error_of(lambda: client.CoreV1Api(client.ApiClient(cfg)).list_node())
    assert (status, body["reason"], body["message"]) == (401, "Unauthorized", "Unauthorized")


QOSD_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"], "resourceNames": ["n1"]},
    {"apiGroups": ["qosd.io"], "resources": ["qospolicies"], "verbs": ["get", "list", "watch"]},
]
USER = "system:serviceaccount:qosd-system:qosd"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda c, o: c.list_namespaced_pod(NS), None),
        (lambda c, o: c.list_pod_for_all_namespaces(field_selector="spec.nodeName=n1"), None),
        (lambda c, o: c.patch_node_status("n1", {"status": {"capacity": {"example.com/x": "1"}}}), None),
        (lambda c, o: c.create_namespaced_pod_eviction("p1", NS, {"metadata": {"name": "p1"}}), None),
        (lambda c, o: o.list_cluster_custom_object("qosd.io", "v1alpha1", "qospolicies"), None),
        (
            lambda c, o: c.read_namespaced_pod("p1", NS),
            f'pods "p1" is forbidden: User "{USER}" cannot get resource "pods" in API group "" in the namespace "default"',
        ),
        (
            lambda c, o: c.patch_node_status("n2", {"status": {}}),
            f'nodes "n2" is forbidden: User "{USER}" cannot patch resource "nodes/status" in API group "" at the cluster scope',
        ),
        (
            lambda c, o: c.patch_node("n1", {"metadata": {"labels": {"a": "b"}}}),
            f'nodes "n1" is forbidden: User "{USER}" cannot patch resource "nodes" in API group "" at the cluster scope',
        ),
        (
            lambda c, o: c.delete_namespaced_pod("p1", NS),
            f'pods "p1" is forbidden: User "{USER}" cannot delete resource "pods" in API group "" in the namespace "default"',
        ),
        (
            lambda c, o: c.list_node(),
            f'nodes is forbidden: User "{USER}" cannot list resource "nodes" in API group "" at the cluster scope',
        ),
        (
            lambda c, o: o.patch_cluster_custom_object_status("qosd.io", "v1alpha1", "qospolicies", "x", {}),
            f'qospolicies.qosd.io "x" is forbidden: User "{USER}" cannot patch resource "qospolicies/status" in API group "qosd.io" at the cluster scope',
        ),
    ],
)
def test_rbac_rules_allow_exactly_their_verbs_resources_and_names(
    apiserver: ApiServer, call: Callable[[Any, Any], Any], message: str | None
) -> None:
    apiserver.put(node("n1"))
    apiserver.put(node("n2"))
    apiserver.put(pod("p1"))
    restricted = apiserver.api_client(apiserver.authorize("qosd-token", QOSD_RULES))
    c, o = client.CoreV1Api(restricted), client.CustomObjectsApi(restricted)
    if message is None:
        call(c, o)
        return
    status, body = error_of(lambda: call(c, o))
    assert (status, body["reason"], body["message"]) == (403, "Forbidden", message)


# ------------------------------------------------------------------------------------------------
# resourceVersion, lists, errors
# ------------------------------------------------------------------------------------------------


def test_every_write_bumps_the_global_resource_version_and_a_noop_does_not(
    apiserver: ApiServer, core: client.CoreV1Api
) -> None:
    created = core.create_node(node("n1"))
    rv1 = int(created.metadata.resource_version)
    assert created.metadata.uid and created.metadata.creation_timestamp
    patched = core.patch_node("n1", {"metadata": {"labels": {"zone": "a"}}})
    rv2 = int(patched.metadata.resource_version)
    assert rv2 > rv1
    again = core.patch_node("n1", {"metadata": {"labels": {"zone": "a"}}})
    assert int(again.metadata.resource_version) == rv2  # no change: etcd is not written
    listed = data(core.list_node(_preload_content=False))
    assert listed["metadata"]["resourceVersion"] == apiserver.resource_version == str(rv2)
    assert listed["kind"] == "NodeList" and "kind" not in listed["items"][0]  # typed list items carry no GVK
    core.create_namespaced_pod(
        NS, {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    )
    assert int(apiserver.resource_version) > rv2  # one counter across resources


def test_pod_create_resets_status_and_sets_generation_and_qos_class(core: client.CoreV1Api) -> None:
    body = pod("p")
    body["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1", "memory": "1Gi"}}
    created = data(core.create_namespaced_pod(NS, body, _preload_content=False))
    assert created["status"] == {"phase": "Pending", "qosClass": "Guaranteed"}  # requests default to limits
    assert created["metadata"]["generation"] == 1
    assert created["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}


@pytest.mark.parametrize(
    ("call", "code", "reason", "message"),
    [
        (lambda c, rv: c.read_namespaced_pod("nope", NS), 404, "NotFound", 'pods "nope" not found'),
        (
            lambda c, rv: c.create_namespaced_pod(NS, pod("p")),
            409,
            "AlreadyExists",
            'pods "p" already exists',
        ),
        (
            lambda c, rv: c.replace_namespaced_pod(
                "p", NS, {**pod("p"), "metadata": {"name": "p", "resourceVersion": str(int(rv) - 1)}}
            ),
            409,
            "Conflict",
            'Operation cannot be fulfilled on pods "p": the object has been modified; please apply your changes to the latest version and try again',
        ),
        (
            lambda c, rv: c.create_namespaced_pod("absent", pod("p", namespace="absent")),
            404,
            "NotFound",
            'namespaces "absent" not found',
        ),
        (lambda c, rv: c.patch_namespaced_pod("p", NS, {"spec": {"nodeName": "n2"}}), 422, "Invalid", None),
        (
            lambda c, rv: c.create_namespaced_pod(
                NS, {"metadata": {"name": "Bad_Name"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
            ),
            422,
            "Invalid",
            None,
        ),
    ],
)
def test_errors_are_metav1_status_with_the_api_server_codes_and_messages(
    apiserver: ApiServer,
    core: client.CoreV1Api,
    call: Callable[..., Any],
    code: int,
    reason: str,
    message: str | None,
) -> None:
    rv = apiserver.put(pod("p"))["metadata"]["resourceVersion"]
    status, body = error_of(lambda: call(core, rv))
    assert (status, body["kind"], body["status"], body["code"], body["reason"]) == (
        code,
        "Status",
        "Failure",
        code,
        reason,
    )
    if message:
        assert body["message"] == message
    if reason == "Invalid":
        assert body["details"]["causes"] and all("field" in c for c in body["details"]["causes"])


def test_lease_update_with_a_stale_resource_version_is_409(api: client.ApiClient) -> None:
    leases = client.CoordinationV1Api(api)
    lease = {"metadata": {"name": "qosd-leader"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}
    first = leases.create_namespaced_lease("kube-system", lease)
    assert error_of(lambda: leases.create_namespaced_lease("kube-system", lease))[0] == 409
    mine = {
        "metadata": {"name": "qosd-leader", "resourceVersion": first.metadata.resource_version},
        "spec": {"holderIdentity": "b"},
    }
    taken = leases.replace_namespaced_lease("qosd-leader", "kube-system", mine)
    assert taken.spec.holder_identity == "b"
    status, body = error_of(lambda: leases.replace_namespaced_lease("qosd-leader", "kube-system", mine))
    assert (status, body["reason"]) == (409, "Conflict")
    leases.delete_namespaced_lease("qosd-leader", "kube-system")
    assert error_of(lambda: leases.read_namespaced_lease("qosd-leader", "kube-system"))[0] == 404


def test_list_pagination_keeps_a_consistent_snapshot(apiserver: ApiServer, core: client.CoreV1Api) -> None:
    for i in range(5):
        apiserver.put(pod(f"p{i}"))
    first = data(core.list_namespaced_pod(NS, limit=2, _preload_content=False))
    assert [p["metadata"]["name"] for p in first["items"]] == ["p0", "p1"]
    assert first["metadata"]["remainingItemCount"] == 3
    apiserver.delete("v1", "Pod", "p3", NS)  # after the first page: the snapshot still has it
    rest = data(core.list_namespaced_pod(NS, _continue=first["metadata"]["continue"], _preload_content=False))
    assert [p["metadata"]["name"] for p in rest["items"]] == ["p2", "p3", "p4"]
    assert rest["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]


# ------------------------------------------------------------------------------------------------
# Selectors
# ------------------------------------------------------------------------------------------------


@pytest.fixture
def four_pods(apiserver: ApiServer) -> None:
    apiserver.put(pod("a", "n1", labels={"app": "web", "tier": "fe"}))
    apiserver.put(pod("b", "n1", labels={"app": "db"}, phase="Pending"))
    apiserver.put(pod("c", "n2", labels={"app": "web", "tier": "be"}))
    apiserver.put(pod("d", "n2", labels={}, namespace="other"))


@pytest.mark.parametrize(
    ("field_selector", "label_selector", "names"),
    [
        ("spec.nodeName=n1", None, ["a", "b"]),
        ("spec.nodeName==n2", None, ["c", "d"]),
        ("spec.nodeName!=n1", None, ["c", "d"]),
        ("spec.nodeName=n1,status.phase=Running", None, ["a"]),
        ("metadata.namespace=other", None, ["d"]),
        ("metadata.name=c", None, ["c"]),
        (None, "app=web", ["a", "c"]),
        (None, "app!=web", ["b", "d"]),
        (None, "app in (web,db),tier notin (be)", ["a", "b"]),
        (None, "tier", ["a", "c"]),
        (None, "!tier", ["b", "d"]),
        ("spec.nodeName=n2", "app=web", ["c"]),
    ],
)
def test_field_and_label_selectors_filter_lists(
    core: client.CoreV1Api,
    four_pods: None,
    field_selector: str | None,
    label_selector: str | None,
    names: list[str],
) -> None:
    kwargs = {k: v for k, v in (("field_selector", field_selector), ("label_selector", label_selector)) if v}
    listed = data(core.list_pod_for_all_namespaces(_preload_content=False, **kwargs))
    assert sorted(p["metadata"]["name"] for p in listed["items"]) == names


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda c: c.list_pod_for_all_namespaces(field_selector="spec.hostname=x"),
            "field label not supported: spec.hostname",
        ),
        (
            lambda c: c.list_node(field_selector="spec.nodeName=n1"),
            "field label not supported: spec.nodeName",
        ),
        (
            lambda c: c.list_namespaced_event(NS, field_selector="involvedObject.color=red"),
            "field label not supported: involvedObject.color",
        ),
    ],
)
def test_unsupported_field_selectors_are_400(
    core: client.CoreV1Api, call: Callable[..., Any], message: str
) -> None:
    status, body = error_of(lambda: call(core))
    assert (status, body["reason"], body["message"]) == (400, "BadRequest", message)


def test_filtered_watch_turns_a_pod_moving_between_nodes_into_deleted_and_added(
    apiserver: ApiServer, core: client.CoreV1Api
) -> None:
    def moves() -> None:
        apiserver.put(pod("mover", "n1"))
        apiserver.put(pod("other", "n2"))
        apiserver.put(pod("mover", "n2"))
        apiserver.put(pod("mover", "n1"))

    events = watch_events(
        apiserver, core.list_pod_for_all_namespaces, field_selector="spec.nodeName=n1", count=3, during=moves
    )
    assert summary(events) == [("ADDED", "mover"), ("DELETED", "mover"), ("ADDED", "mover")]
    gone = events[1]["object"]
    assert gone["spec"]["nodeName"] == "n1"  # the last state that matched ...
    assert int(gone["metadata"]["resourceVersion"]) > int(
        events[0]["object"]["metadata"]["resourceVersion"]
    )  # ... at the change's RV


def test_label_selector_watch_sees_a_label_change_as_added(
    apiserver: ApiServer, core: client.CoreV1Api
) -> None:
    def relabel() -> None:
        apiserver.put(pod("p", labels={"app": "db"}))
        core.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"app": "web"}}})
        core.delete_namespaced_pod("p", NS)

    events = watch_events(
        apiserver, core.list_namespaced_pod, NS, label_selector="app=web", count=2, during=relabel
    )
    assert summary(events) == [("ADDED", "p"), ("DELETED", "p")]


# ------------------------------------------------------------------------------------------------
# Watch
# ------------------------------------------------------------------------------------------------


def test_watch_without_resource_version_starts_with_synthetic_added(
    apiserver: ApiServer, core: client.CoreV1Api
) -> None:
    apiserver.put(pod("a"))
    apiserver.put(pod("b"))
    events = watch_events(
        apiserver, core.list_namespaced_pod, NS, count=3, during=lambda: apiserver.put(pod("c"))
    )
    assert summary(events) == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c")]


def test_watch_from_a_resource_version_replays_every_later_change(
    apiserver: ApiServer, core: client.CoreV1Api
) -> None:
    apiserver.put(pod("a"))
    start = apiserver.resource_version
    apiserver.put(node("n1"))  # another resource: not in this watch
    apiserver.put(pod("b"))
    apiserver.put({**pod("a"), "status": {"phase": "Succeeded"}})
    apiserver.delete("v1", "Pod", "b", NS)
    events = watch_events(apiserver, core.list_namespaced_pod, NS, resource_version=start, count=3)
    assert summary(events) == [("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions) and versions[0] > int(start)
    assert events[0]["object"]["kind"] == "Pod" and events[0]["object"]["apiVersion"] == "v1"


def test_bookmarks_carry_only_kind_api_version_and_resource_version(
    apiserver: ApiServer, core: client.CoreV1Api
) -> None:
    apiserver.bookmark_interval = 0.05
    apiserver.put(pod("a"))
    events = watch_events(apiserver, core.list_namespaced_pod, NS, allow_watch_bookmarks=True, count=3)
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK", "BOOKMARK"]
    assert events[1]["object"] == {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": apiserver.resource_version},
    }
    plain = watch_events(apiserver, core.list_namespaced_pod, NS, timeout_seconds=1, count=5)
    assert [e["type"] for e in plain] == ["ADDED"]  # no bookmarks unless asked for


def test_watch_timeout_ends_the_stream_cleanly(apiserver: ApiServer, core: client.CoreV1Api) -> None:
    resp = core.list_namespaced_pod(NS, watch=True, timeout_seconds=1, _preload_content=False)
    body = resp.read()  # raises if the chunked stream does not end with its terminating chunk
    assert body == b""  # no pods, no events: just a clean end after the timeout
    wait_until(lambda: apiserver.open_watches() == 0)


def test_watch_from_a_compacted_resource_version_gets_an_in_stream_410(
    apiserver: ApiServer, core: client.CoreV1Api
) -> None:
    apiserver.put(pod("a"))
    old = apiserver.resource_version
    apiserver.put(pod("b"))
    apiserver.compact()
    resp = core.list_namespaced_pod(
        NS, watch=True, resource_version=str(int(old) - 1), _preload_content=False
    )
    assert resp.status == 200  # the error arrives inside the established stream
    event = json.loads(resp.read().decode().strip())
    assert event["type"] == "ERROR"
    status = event["object"]
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 410, "Expired")
    assert status["message"].startswith("too old resource version:")
    # From the current version on, the watch works again.
    events = watch_events(
        apiserver,
        core.list_namespaced_pod,
        NS,
        resource_version=apiserver.resource_version,
        count=1,
        during=lambda: apiserver.put(pod("c")),
    )
    assert summary(events) == [("ADDED", "c")]


def test_the_client_watch_retries_a_410_once_then_raises(
    apiserver: ApiServer, core: client.CoreV1Api
) -> None:
    apiserver.put(pod("a"))
    stale = apiserver.resource_version
    apiserver.put(pod("b"))
    apiserver.compact()
    apiserver.requests.clear()
    with pytest.raises(ApiException) as info:
        for _ in watch.Watch().stream(core.list_namespaced_pod, NS, resource_version=str(int(stale) - 1)):
            pass
    assert info.value.status == 410
    assert [r.verb for r in apiserver.requests] == ["watch", "watch"]


def test_an_exact_list_at_a_compacted_version_is_410(apiserver: ApiServer, core: client.CoreV1Api) -> None:
    apiserver.put(pod("a"))
    at = apiserver.resource_version
    apiserver.put(pod("b"))
    exact = data(
        core.list_namespaced_pod(
            NS, resource_version=at, resource_version_match="Exact", _preload_content=False
        )
    )
    assert [p["metadata"]["name"] for p in exact["items"]] == ["a"]  # the state at that version
    apiserver.compact()
    status, body = error_of(
        lambda: core.list_namespaced_pod(NS, resource_version=at, resource_version_match="Exact")
    )
    assert (status, body["reason"]) == (410, "Expired")
    # NotOlderThan (the default for a set version) is served from the current state instead.
    assert len(core.list_namespaced_pod(NS, resource_version=at).items) == 2


def test_drop_watches_breaks_the_stream_instead_of_ending_it(
    apiserver: ApiServer, core: client.CoreV1Api
) -> None:
    apiserver.put(pod("a"))
    seen: list[str] = []
    with pytest.raises(ProtocolError):
        for event in watch.Watch().stream(core.list_namespaced_pod, NS, deserialize=False):
            seen.append(event["type"])
            apiserver.drop_watches()
    assert seen == ["ADDED"]
    wait_until(lambda: apiserver.open_watches() == 0)


def test_send_initial_events_ends_with_an_annotated_bookmark(
    apiserver: ApiServer, core: client.CoreV1Api
) -> None:
    apiserver.put(pod("a"))
    events = watch_events(
        apiserver,
        core.list_namespaced_pod,
        NS,
        send_initial_events=True,
        resource_version_match="NotOlderThan",
        allow_watch_bookmarks=True,
        count=2,
    )
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


# ------------------------------------------------------------------------------------------------
# Patches
# ------------------------------------------------------------------------------------------------


def _running_pod(apiserver: ApiServer) -> None:
    body = pod("p")
    body["spec"]["containers"] = [
        {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}]},
        {"name": "b", "image": "b:1"},
    ]
    body["status"]["conditions"] = [
        {"type": "Ready", "status": "True"},
        {"type": "PodScheduled", "status": "True"},
    ]
    body["metadata"]["finalizers"] = ["x.io/a"]
    apiserver.put(body)


@pytest.mark.parametrize(
    ("method", "patch", "check"),
    [
        # Strategic merge: lists with a merge key merge by it; $patch: delete removes one element.
        (
            "status",
            {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
            lambda p: (
                p["status"]["conditions"]
                == [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]
            ),
        ),
        (
            "status",
            {"status": {"conditions": [{"type": "PodScheduled", "$patch": "delete"}]}},
            lambda p: [c["type"] for c in p["status"]["conditions"]] == ["Ready"],
        ),
        (
            "main",
            {"spec": {"containers": [{"name": "b", "image": "b:2"}]}},
            lambda p: (
                [(c["name"], c["image"]) for c in p["spec"]["containers"]] == [("a", "a:1"), ("b", "b:2")]
            ),
        ),
        (
            "main",
            {"spec": {"containers": [{"name": "a", "image": "a:2"}]}},  # a's env survives: maps merge
            lambda p: (
                p["spec"]["containers"][0]
                == {"name": "a", "image": "a:2", "env": [{"name": "X", "value": "1"}]}
            ),
        ),
        (
            "main",
            {"metadata": {"finalizers": ["x.io/b"]}},  # a list of scalars with patchStrategy merge: a set
            lambda p: p["metadata"]["finalizers"] == ["x.io/a", "x.io/b"],
        ),
        (
            "main",
            {"metadata": {"labels": {"app": None, "new": "1"}}},  # null deletes a map key
            lambda p: p["metadata"]["labels"] == {"new": "1"},
        ),
        (
            "status",
            {"status": {"conditions": [{"$patch": "replace"}, {"type": "Only", "status": "True"}]}},
            lambda p: p["status"]["conditions"] == [{"type": "Only", "status": "True"}],
        ),
        # JSON patch (a list body), including a passing test op.
        (
            "main",
            [
                {"op": "test", "path": "/metadata/labels/app", "value": "web"},
                {"op": "add", "path": "/metadata/labels/x~1y", "value": "z"},
            ],
            lambda p: p["metadata"]["labels"] == {"app": "web", "x/y": "z"},
        ),
        (
            "status",
            [
                {"op": "replace", "path": "/status/phase", "value": "Failed"},
                {"op": "remove", "path": "/status/conditions/0"},
            ],
            lambda p: (
                p["status"]["phase"] == "Failed"
                and [c["type"] for c in p["status"]["conditions"]] == ["PodScheduled"]
            ),
        ),
    ],
)
def test_pod_patches_as_the_client_sends_them(
    apiserver: ApiServer, core: client.CoreV1Api, method: str, patch: Any, check: Callable[[Json], bool]
) -> None:
    _running_pod(apiserver)
    fn = core.patch_namespaced_pod_status if method == "status" else core.patch_namespaced_pod
    patched = data(fn("p", NS, patch, _preload_content=False))
    sent = apiserver.requests[-1].content_type
    assert sent == (
        "application/json-patch+json" if isinstance(patch, list) else "application/strategic-merge-patch+json"
    )
    assert check(patched), patched


def test_merge_patch_replaces_lists_and_a_failed_json_patch_test_is_422(
    apiserver: ApiServer, core: client.CoreV1Api
) -> None:
    _running_pod(apiserver)
    merged = data(
        core.patch_namespaced_pod_status(
            "p",
            NS,
            {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
            _content_type="application/merge-patch+json",
            _preload_content=False,
        )
    )
    assert merged["status"]["conditions"] == [{"type": "Ready", "status": "False"}]  # RFC 7386: lists replace
    status, body = error_of(
        lambda: core.patch_namespaced_pod("p", NS, [{"op": "test", "path": "/metadata/name", "value": "q"}])
    )
    assert (status, body["reason"]) == (422, "Invalid")
    status, body = error_of(
        lambda: core.patch_namespaced_pod("p", NS, [{"op": "remove", "path": "/metadata/nothere"}])
    )
    assert status == 422


def test_unknown_fields_of_built_in_kinds_are_dropped_with_a_warning(
    apiserver: ApiServer, core: client.CoreV1Api
) -> None:
    """fieldValidation=Warn (the default): the typed decode drops what the Go struct lacks."""
    apiserver.put(node("n1"))
    resp = core.patch_node_status(
        "n1",
        {
            "status": {
                "allocatible": {"cpu": "1"},
                "conditions": [{"type": "Ready", "status": "True", "colour": "green"}],
            }
        },
        _preload_content=False,
    )
    assert data(resp)["status"]["conditions"] == [{"type": "Ready", "status": "True"}]
    assert "allocatible" not in data(resp)["status"]
    assert sorted(resp.headers.getlist("Warning")) == [
        '299 - "unknown field \\"status.allocatible\\""',
        '299 - "unknown field \\"status.conditions[0].colour\\""',
    ]


def test_node_taints_are_replaced_by_a_strategic_patch(apiserver: ApiServer, core: client.CoreV1Api) -> None:
    """NodeSpec.taints has no patchStrategy tag in k8s.io/api: a strategic patch replaces the list."""
    body = node("n1")
    body["spec"] = {"taints": [{"key": "a", "effect": "NoSchedule"}]}
    apiserver.put(body)
    patched = core.patch_node("n1", {"spec": {"taints": [{"key": "b", "value": "1", "effect": "NoExecute"}]}})
    assert [(t.key, t.effect) for t in patched.spec.taints] == [("b", "NoExecute")]
    status, body = error_of(
        lambda: core.patch_node("n1", {"spec": {"taints": [{"key": "c", "effect": "Sometimes"}]}})
    )
    assert status == 422 and body["details"]["causes"][0]["field"] == "spec.taints[0].effect"


def test_node_status_patch_adds_and_removes_an_extended_resource(
    apiserver: ApiServer, core: client.CoreV1Api
) -> None:
    apiserver.put(node("n1"))
    added = data(
        core.patch_node_status(
            "n1",
            {
                "status": {
                    "capacity": {"qosd.io/reclaimed-cpu": "3"},
                    "allocatable": {"qosd.io/reclaimed-cpu": "3"},
                }
            },
            _preload_content=False,
        )
    )
    assert added["status"]["capacity"] == {"cpu": "8", "memory": "16Gi", "qosd.io/reclaimed-cpu": "3"}
    assert added["status"]["allocatable"] == {"qosd.io/reclaimed-cpu": "3"}
    removed = data(
        core.patch_node_status(
            "n1",
            {
                "status": {
                    "capacity": {"qosd.io/reclaimed-cpu": None},
                    "allocatable": {"qosd.io/reclaimed-cpu": None},
                }
            },
            _preload_content=False,
        )
    )
    assert (
        removed["status"]["capacity"] == {"cpu": "8", "memory": "16Gi"}
        and removed["status"]["allocatable"] == {}
    )
    json_removed = core.patch_node_status(
        "n1", [{"op": "add", "path": "/status/capacity/qosd.io~1reclaimed-memory", "value": "1024"}]
    )
    assert json_removed.status.capacity["qosd.io/reclaimed-memory"] == "1024"
    status, body = error_of(
        lambda: core.patch_node_status("n1", {"status": {"capacity": {"qosd.io/reclaimed-cpu": "2500m"}}})
    )
    assert (status, body["details"]["causes"]) == (
        422,
        [
            {
                "reason": "FieldValueInvalid",
                "message": 'Invalid value: "2500m": must be an integer',
                "field": "status.capacity.qosd.io/reclaimed-cpu",
            }
        ],
    )
    # A status patch never touches metadata or spec.
    core.patch_node_status("n1", {"metadata": {"labels": {"sneaky": "1"}}, "spec": {"unschedulable": True}})
    read = core.read_node("n1")
    assert "sneaky" not in read.metadata.labels and read.spec.unschedulable is None


# ------------------------------------------------------------------------------------------------
# Eviction and PodDisruptionBudgets
# ------------------------------------------------------------------------------------------------


def eviction(name: str, uid: str | None = None) -> Json:
    body: Json = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": NS}}
    if uid:
        body["deleteOptions"] = {"preconditions": {"uid": uid}}
    return body


@pytest.mark.parametrize(
    ("pods", "budget", "target", "code", "cause"),
    [
        # (pods as (name, ready), PDB spec or None, pod to evict, HTTP code, DisruptionBudget cause)
        ([("a", True)], None, "a", 201, None),
        (
            [("a", True), ("b", True)],
            {"minAvailable": 2},
            "a",
            429,
            "The disruption budget pdb needs 2 healthy pods and has 2 currently",
        ),
        ([("a", True), ("b", True), ("c", True)], {"minAvailable": 2}, "a", 201, None),
        # minAvailable 50% of 3 pods: ceil(1.5) = 2 desired, 3 healthy -> 1 disruption allowed
        ([("a", True), ("b", True), ("c", True)], {"minAvailable": "50%"}, "a", 201, None),
        # minAvailable 67% of 3: ceil(2.01) = 3 desired -> none allowed
        (
            [("a", True), ("b", True), ("c", True)],
            {"minAvailable": "67%"},
            "a",
            429,
            "The disruption budget pdb needs 3 healthy pods and has 3 currently",
        ),
        # maxUnavailable 0 -> desired = expected
        (
            [("a", True), ("b", True)],
            {"maxUnavailable": 0},
            "a",
            429,
            "The disruption budget pdb needs 2 healthy pods and has 2 currently",
        ),
        # maxUnavailable 34% of 4: ceil(1.36) = 2 unavailable allowed -> desired 2; one pod already unready
        ([("a", True), ("b", True), ("c", True), ("d", False)], {"maxUnavailable": "34%"}, "a", 201, None),
        # maxUnavailable 25% of 4 -> 1 unavailable allowed, and d is already unready
        (
            [("a", True), ("b", True), ("c", True), ("d", False)],
            {"maxUnavailable": "25%"},
            "a",
            429,
            "The disruption budget pdb needs 3 healthy pods and has 3 currently",
        ),
        # An unready pod may go when the budget is otherwise met (IfHealthyBudget) ...
        ([("a", True), ("b", True), ("u", False)], {"minAvailable": 2}, "u", 201, None),
        # ... but not when it is not, unless unhealthyPodEvictionPolicy is AlwaysAllow.
        (
            [("a", True), ("u", False)],
            {"minAvailable": 2},
            "u",
            429,
            "The disruption budget pdb needs 2 healthy pods and has 1 currently",
        ),
        (
            [("a", True), ("u", False)],
            {"minAvailable": 2, "unhealthyPodEvictionPolicy": "AlwaysAllow"},
            "u",
            201,
            None,
        ),
        # A pod without a Ready condition is not healthy (podutil.IsPodReady).
        (
            [("a", True), ("n", None)],
            {"minAvailable": 1},
            "a",
            429,
            "The disruption budget pdb needs 1 healthy pods and has 1 currently",
        ),
    ],
)
def test_eviction_honours_the_disruption_budget(
    apiserver: ApiServer,
    core: client.CoreV1Api,
    api: client.ApiClient,
    pods: list[tuple[str, bool | None]],
    budget: Json | None,
    target: str,
    code: int,
    cause: str | None,
) -> None:
    for name, ready in pods:
        apiserver.put(pod(name, ready=ready))
    if budget is not None:
        client.PolicyV1Api(api).create_namespaced_pod_disruption_budget(
            NS, {"metadata": {"name": "pdb"}, "spec": {"selector": {"matchLabels": {"app": "web"}}, **budget}}
        )
    if code == 201:
        resp = core.create_namespaced_pod_eviction(target, NS, eviction(target), _preload_content=False)
        assert (resp.status, data(resp)) == (
            201,
            {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201},
        )
        assert apiserver.get("v1", "Pod", target, NS) is None
        return
    status, body = error_of(lambda: core.create_namespaced_pod_eviction(target, NS, eviction(target)))
    assert (status, body["reason"], body["message"]) == (
        429,
        "TooManyRequests",
        "Cannot evict pod as it would violate the pod's disruption budget.",
    )
    assert body["details"]["causes"] == [{"reason": "DisruptionBudget", "message": cause}]
    assert apiserver.get("v1", "Pod", target, NS) is not None


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ("absent", (404, "NotFound", 'pods "p" not found')),
        ("wrong-uid", (409, "Conflict", None)),
        (
            "two-pdbs",
            (
                500,
                None,
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ),
        ),
        ("pending", (201, None, None)),  # not running: budgets do not apply
        ("terminating", (201, None, None)),
    ],
)
def test_eviction_edge_cases(
    apiserver: ApiServer, core: client.CoreV1Api, setup: str, expected: tuple[int, str | None, str | None]
) -> None:
    uid = None
    if setup != "absent":
        body = pod("p", phase="Pending" if setup == "pending" else "Running")
        if setup == "terminating":
            body["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
            body["metadata"]["finalizers"] = ["example.com/hold"]
        apiserver.put(body)
        for name in ("zero1", "zero2") if setup in ("two-pdbs", "pending", "terminating") else ():
            apiserver.put(
                {
                    "apiVersion": "policy/v1",
                    "kind": "PodDisruptionBudget",
                    "metadata": {"name": name, "namespace": NS},
                    "spec": {"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 0},
                }
            )
    if setup == "wrong-uid":
        uid = "00000000-0000-0000-0000-000000000000"
    code, reason, message = expected
    if code == 201:
        assert (
            data(core.create_namespaced_pod_eviction("p", NS, eviction("p"), _preload_content=False))[
                "status"
            ]
            == "Success"
        )
        return
    status, body = error_of(lambda: core.create_namespaced_pod_eviction("p", NS, eviction("p", uid)))
    assert (status, body.get("reason")) == (code, reason)
    if message:
        assert body["message"] == message
    if setup == "wrong-uid":
        actual = apiserver.get("v1", "Pod", "p", NS)
        assert actual is not None
        assert body["message"] == (
            f'Operation cannot be fulfilled on Pod "p": the UID in the precondition ({uid}) does not match the UID in '
            f"record ({actual['metadata']['uid']}). The object might have been deleted and then recreated"
        )


def test_an_evicted_pod_terminates_for_the_termination_delay(
    apiserver: ApiServer, core: client.CoreV1Api
) -> None:
    apiserver.pod_termination_delay = 0.2
    uid = apiserver.put(pod("p"))["metadata"]["uid"]

    def evict() -> None:
        core.create_namespaced_pod_eviction("p", NS, eviction("p", uid))

    events = watch_events(
        apiserver,
        core.list_namespaced_pod,
        NS,
        resource_version=apiserver.resource_version,
        count=3,
        during=evict,
    )
    assert [e["type"] for e in events] == ["MODIFIED", "MODIFIED", "DELETED"]
    condition = events[0]["object"]["status"]["conditions"][-1]
    assert (condition["type"], condition["reason"]) == ("DisruptionTarget", "EvictionByEvictionAPI")
    terminating = events[1]["object"]["metadata"]
    assert terminating["deletionTimestamp"] and terminating["deletionGracePeriodSeconds"] == 30
    assert terminating["generation"] == 2  # rest.BeforeDelete bumps the generation of a graceful delete


# ------------------------------------------------------------------------------------------------
# Custom resources
# ------------------------------------------------------------------------------------------------

WIDGETS: Json = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {
                                    "size": {"type": "integer", "minimum": 1},
                                    "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                                    "budget": {"x-kubernetes-int-or-string": True},
                                    "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 8},
                                    "tags": {"type": "array", "maxItems": 2, "items": {"type": "string"}},
                                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                    "note": {"type": "string", "nullable": True},
                                },
                            },
                            "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
                        },
                    }
                },
            }
        ],
    },
}


def widget(spec: Json, name: str = "w") -> Json:
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec}


@pytest.fixture
def widgets(apiserver: ApiServer, api: client.ApiClient) -> client.CustomObjectsApi:
    apiserver.install_crd(WIDGETS)
    return client.CustomObjectsApi(api)


@pytest.mark.parametrize(
    ("spec", "causes"),
    [
        ({}, [("FieldValueRequired", "spec.size", "Required value")]),
        (
            {"size": "3"},
            [
                (
                    "FieldValueTypeInvalid",
                    "spec.size",
                    'Invalid value: "3": spec.size in body must be of type integer: "string"',
                )
            ],
        ),
        (
            {"size": 0},
            [
                (
                    "FieldValueInvalid",
                    "spec.size",
                    "Invalid value: 0: spec.size in body should be greater than or equal to 1",
                )
            ],
        ),
        (
            {"size": 1, "color": "green"},
            [
                (
                    "FieldValueNotSupported",
                    "spec.color",
                    'Unsupported value: "green": supported values: "red", "blue"',
                )
            ],
        ),
        (
            {"size": 1, "budget": True},
            [
                (
                    "FieldValueTypeInvalid",
                    "spec.budget",
                    'Invalid value: true: spec.budget in body must be of type integer,string: "boolean"',
                )
            ],
        ),
        (
            {"size": 1, "name": "UP"},
            [
                (
                    "FieldValueInvalid",
                    "spec.name",
                    "Invalid value: \"UP\": spec.name in body should match '^[a-z]+$'",
                )
            ],
        ),
        (
            {"size": 1, "name": "abcdefghij"},
            [("FieldValueTooLong", "spec.name", "Too long: may not be more than 8 bytes")],
        ),
        (
            {"size": 1, "tags": ["a", "b", "c"]},
            [("FieldValueTooMany", "spec.tags", "Too many: 3: must have at most 2 items")],
        ),
    ],
)
def test_custom_resources_are_validated_against_the_crd_schema(
    widgets: client.CustomObjectsApi, spec: Json, causes: list[tuple[str, str, str]]
) -> None:
    status, body = error_of(
        lambda: widgets.create_namespaced_custom_object("example.com", "v1", NS, "widgets", widget(spec))
    )
    assert (status, body["reason"], body["details"]["kind"], body["details"]["group"]) == (
        422,
        "Invalid",
        "Widget",
        "example.com",
    )
    assert [(c["reason"], c["field"], c["message"]) for c in body["details"]["causes"]] == causes
    assert body["message"].startswith('Widget.example.com "w" is invalid: ')


def test_custom_resources_are_pruned_and_defaulted(widgets: client.CustomObjectsApi) -> None:
    created = widgets.create_namespaced_custom_object(
        "example.com",
        "v1",
        NS,
        "widgets",
        {
            **widget(
                {"size": 2, "unknown": 1, "free": {"anything": {"goes": 1}}, "note": None, "budget": "10%"}
            ),
            "extra": "top-level",
            "metadata": {"name": "w", "bogus": 1},
        },
    )
    assert created["spec"] == {
        "size": 2,
        "color": "red",
        "free": {"anything": {"goes": 1}},
        "note": None,
        "budget": "10%",
    }
    assert "extra" not in created and "bogus" not in created["metadata"]


def test_generation_moves_with_spec_only_and_status_is_a_subresource(
    widgets: client.CustomObjectsApi,
) -> None:
    args = ("example.com", "v1", NS, "widgets", "w")
    created = widgets.create_namespaced_custom_object(
        *args[:4], {**widget({"size": 1}), "status": {"ready": True}}
    )
    assert created["metadata"]["generation"] == 1 and "status" not in created  # create cannot set status
    labelled = widgets.patch_namespaced_custom_object(*args, {"metadata": {"labels": {"a": "b"}}})
    assert labelled["metadata"]["generation"] == 1  # metadata is not desired state
    ignored = widgets.patch_namespaced_custom_object(*args, {"status": {"ready": True}})
    assert (
        "status" not in ignored
        and ignored["metadata"]["resourceVersion"] == labelled["metadata"]["resourceVersion"]
    )
    status = widgets.patch_namespaced_custom_object_status(
        *args, {"status": {"ready": True}, "spec": {"size": 9}}
    )
    assert (
        status["status"] == {"ready": True}
        and status["spec"]["size"] == 1
        and status["metadata"]["generation"] == 1
    )
    resized = widgets.patch_namespaced_custom_object(*args, {"spec": {"size": 2}})
    assert resized["metadata"]["generation"] == 2 and resized["status"] == {"ready": True}
    # A custom resource PUT must carry a resourceVersion; a stale one is a conflict.
    without = {**resized, "metadata": {"name": "w"}}
    code, body = error_of(lambda: widgets.replace_namespaced_custom_object(*args, without))
    assert (code, body["details"]["causes"][0]["field"]) == (422, "metadata.resourceVersion")
    stale = {**resized, "metadata": {"name": "w", "resourceVersion": created["metadata"]["resourceVersion"]}}
    assert error_of(lambda: widgets.replace_namespaced_custom_object(*args, stale))[0] == 409


def test_custom_resources_refuse_strategic_merge_patches(widgets: client.CustomObjectsApi) -> None:
    widgets.create_namespaced_custom_object("example.com", "v1", NS, "widgets", widget({"size": 1}))
    status, body = error_of(
        lambda: widgets.patch_namespaced_custom_object(
            "example.com",
            "v1",
            NS,
            "widgets",
            "w",
            {"spec": {"size": 2}},
            _content_type="application/strategic-merge-patch+json",
        )
    )
    assert (status, body["reason"]) == (415, "UnsupportedMediaType")


def test_qosd_crds_are_served_cluster_scoped_with_list_and_watch(
    apiserver: ApiServer, api: client.ApiClient
) -> None:
    objects = client.CustomObjectsApi(api)
    body = {"apiVersion": "qosd.io/v1alpha1", "kind": "QoSNodeStatus", "metadata": {"name": "n1"}}

    def create() -> None:
        objects.create_cluster_custom_object("qosd.io", "v1alpha1", "qosnodestatuses", body)
        objects.patch_cluster_custom_object_status(
            "qosd.io",
            "v1alpha1",
            "qosnodestatuses",
            "n1",
            {"status": {"nodeName": "n1", "applied": {"generation": 3, "hash": "abc", "stray": 1}}},
        )

    events = watch_events(
        apiserver,
        objects.list_cluster_custom_object,
        "qosd.io",
        "v1alpha1",
        "qosnodestatuses",
        count=2,
        during=create,
    )
    assert summary(events) == [("ADDED", "n1"), ("MODIFIED", "n1")]
    assert events[1]["object"]["status"] == {"nodeName": "n1", "applied": {"generation": 3, "hash": "abc"}}
    status, body = error_of(
        lambda: objects.patch_cluster_custom_object_status(
            "qosd.io", "v1alpha1", "qosnodestatuses", "n1", {"status": {"lastAttempt": {"result": "Maybe"}}}
        )
    )
    assert status == 422 and body["details"]["causes"][0]["field"] == "status.lastAttempt.result"
    listed = objects.list_cluster_custom_object("qosd.io", "v1alpha1", "qosnodestatuses")
    assert listed["kind"] == "QoSNodeStatusList" and listed["items"][0]["kind"] == "QoSNodeStatus"
    objects.delete_cluster_custom_object("qosd.io", "v1alpha1", "qosnodestatuses", "n1")
    assert apiserver.get("qosd.io/v1alpha1", "QoSNodeStatus", "n1") is None


# ------------------------------------------------------------------------------------------------
# Events
# ------------------------------------------------------------------------------------------------


def test_events_core_v1_and_events_k8s_io_share_storage(
    apiserver: ApiServer, core: client.CoreV1Api, api: client.ApiClient
) -> None:
    involved = {"kind": "Pod", "namespace": NS, "name": "p", "uid": "u1", "apiVersion": "v1"}
    created = core.create_namespaced_event(
        NS,
        {
            "metadata": {"generateName": "p."},
            "involvedObject": involved,
            "reason": "Evicted",
            "message": "memory pressure",
            "type": "Warning",
            "source": {"component": "qosd"},
            "count": 1,
        },
    )
    assert created.metadata.name.startswith("p.") and len(created.metadata.name) == 7
    core.patch_namespaced_event(created.metadata.name, NS, {"count": 2})
    modern = client.EventsV1Api(api).create_namespaced_event(
        NS,
        {
            "metadata": {"name": "p.2"},
            "regarding": involved,
            "reason": "Evicted",
            "note": "again",
            "type": "Warning",
            "eventTime": "2030-01-01T00:00:00.000000Z",
            "action": "Evict",
            "reportingController": "qosd.io/node-agent",
            "reportingInstance": "qosd-n1",
        },
    )
    assert modern.regarding.name == "p"
    listed = core.list_event_for_all_namespaces(field_selector="involvedObject.name=p,reason=Evicted")
    assert sorted((e.message, e.count) for e in listed.items) == [("again", None), ("memory pressure", 2)]
    assert core.read_namespaced_event("p.2", NS).reporting_component == "qosd.io/node-agent"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (
            {
                "metadata": {"name": "e", "namespace": NS},
                "involvedObject": {"kind": "Pod", "namespace": "other", "name": "p"},
            },
            "involvedObject.namespace",
        ),
        (
            {
                "metadata": {"name": "e", "namespace": NS},
                "involvedObject": {"kind": "Node", "name": "n1"},
                "eventTime": "2030-01-01T00:00:00.000000Z",
                "reason": "R",
            },
            "reportingComponent",
        ),
    ],
)
def test_invalid_events_are_422(core: client.CoreV1Api, body: Json, field: str) -> None:
    status, response = error_of(lambda: core.create_namespaced_event(NS, body))
    assert status == 422 and field in [c["field"] for c in response["details"]["causes"]]


def test_events_about_cluster_scoped_objects_live_in_default(core: client.CoreV1Api) -> None:
    core.create_namespaced_event(
        NS,
        {
            "metadata": {"name": "policy.1"},
            "involvedObject": {"kind": "QoSPolicy", "name": "site", "apiVersion": "qosd.io/v1alpha1"},
            "reason": "ReloadFailed",
            "message": "spec.rules[0]: bad",
            "type": "Warning",
        },
    )
    assert (
        core.list_namespaced_event(NS, field_selector="involvedObject.kind=QoSPolicy").items[0].reason
        == "ReloadFailed"
    )


# ------------------------------------------------------------------------------------------------
# Fault injection, request log, shutdown
# ------------------------------------------------------------------------------------------------


def test_fail_next_injects_errors_on_matching_requests_only(
    apiserver: ApiServer, core: client.CoreV1Api
) -> None:
    apiserver.put(node("n1"))
    apiserver.fail_next(2, 503, method="PATCH", path=r"/nodes/n1/status$")
    core.read_node("n1")  # a GET does not match
    for _ in range(2):
        status, body = error_of(lambda: core.patch_node_status("n1", {"status": {}}))
        assert (status, body["reason"]) == (503, "ServiceUnavailable")
    core.patch_node_status("n1", {"status": {"capacity": {"example.com/x": "1"}}})
    log = apiserver.requests.matching("PATCH", r"/status$")
    assert [r.status for r in log] == [503, 503, 200]
    assert log[-1].json == json.loads(log[-1].body) == {"status": {"capacity": {"example.com/x": "1"}}}
    assert log[-1].content_type == "application/strategic-merge-patch+json" and log[-1].verb == "patch"


def test_stop_closes_watch_streams_and_joins_every_thread(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    server = ApiServer()
    server.start()
    core = client.CoreV1Api(server.api_client())
    core.list_node()  # leaves a keep-alive connection (and its server thread) open
    ended: list[str] = []

    def watcher() -> None:
        for _ in watch.Watch().stream(core.list_namespaced_pod, NS, deserialize=False):
            pass
        ended.append("clean")

    thread = threading.Thread(target=watcher)
    thread.start()
    wait_until(lambda: server.open_watches() == 1)
    server.stop()
    thread.join(5)
    assert ended == ["clean"]  # a server shutdown ends streams properly; only drop_watches breaks them
    assert set(threading.enumerate()) <= before | {threading.current_thread()}


def test_put_get_list_delete_emit_watch_events(apiserver: ApiServer, core: client.CoreV1Api) -> None:
    start = apiserver.resource_version
    stored = apiserver.put(pod("p", namespace="team-a"))  # the namespace is created on the way
    assert apiserver.get("v1", "Namespace", "team-a") is not None
    assert stored["metadata"]["uid"] and apiserver.get("v1", "Pod", "p", "team-a") == stored
    assert [p["metadata"]["name"] for p in apiserver.list("v1", "Pod")] == ["p"]
    apiserver.delete("v1", "Pod", "p", "team-a")
    events = watch_events(apiserver, core.list_pod_for_all_namespaces, resource_version=start, count=2)
    assert summary(events) == [("ADDED", "p"), ("DELETED", "p")]


def test_fail_next_tells_list_from_watch_and_sets_retry_after_as_asked(
    apiserver: ApiServer, tmp_path: Path
) -> None:
    from engine.kube.client import load_api_client  # urllib3 status retries off: every 429 is seen

    core = client.CoreV1Api(load_api_client(apiserver.kubeconfig(tmp_path)))
    apiserver.fail_next(1, 429, path=r"^/api/v1/namespaces/default/pods$", verb="watch", retry_after=5)
    apiserver.fail_next(1, 429, path=r"^/api/v1/nodes$", retry_after=0)
    core.list_namespaced_pod(NS)  # a list on the same path does not match the watch's failure
    try:
        core.list_namespaced_pod(NS, watch=True, timeout_seconds=1, _preload_content=False)
    except ApiException as exc:
        assert (exc.status, exc.headers["Retry-After"]) == (429, "5")
        assert json.loads(exc.body)["details"] == {"retryAfterSeconds": 5}
    else:
        pytest.fail("the watch was not refused")
    status, body = error_of(lambda: core.list_node())
    assert status == 429 and "details" not in body  # retry_after=0: no Retry-After at all
    log = [(r.verb, r.status) for r in apiserver.requests if r.path.endswith(("/pods", "/nodes"))]
    assert log == [("list", 200), ("watch", 429), ("list", 429)]


def test_a_stalled_write_happens_on_release_after_its_client_gave_up_or_never_on_drop(
    apiserver: ApiServer, core: client.CoreV1Api
) -> None:
    from urllib3.exceptions import ReadTimeoutError

    apiserver.put(node("n1"))
    path = r"/nodes/n1/status$"
    for drop, value in ((False, "1"), (True, "2")):
        stall = apiserver.stall("PATCH", path)
        body = {"status": {"capacity": {"example.com/x": value}}}
        with pytest.raises(ReadTimeoutError):
            core.patch_node_status("n1", body, _request_timeout=(2, 0.3))
        assert stall.hit.is_set() and stall.held == 1
        stall.release(drop=drop)
        if not drop:
            wait_until(lambda: apiserver.get("v1", "Node", "n1")["status"]["capacity"].get("example.com/x") == "1")
    time.sleep(0.2)  # a dropped request would have been applied by now
    assert apiserver.get("v1", "Node", "n1")["status"]["capacity"].get("example.com/x") == "1"
    assert [r.status for r in apiserver.requests.matching("PATCH", path)] == [200]


def test_a_stalled_watch_is_open_and_silent(apiserver: ApiServer, core: client.CoreV1Api) -> None:
    from urllib3.exceptions import ReadTimeoutError

    apiserver.bookmark_interval = 0.05
    stall = apiserver.stall(verb="watch")
    resp = core.list_namespaced_pod(
        NS, watch=True, allow_watch_bookmarks=True, _preload_content=False, _request_timeout=(2, 0.5)
    )
    assert resp.status == 200
    apiserver.put(pod("a"))
    with pytest.raises((ReadTimeoutError, ProtocolError)):
        resp.read()  # no event, no bookmark, no end
    assert stall.hit.is_set()
    resp.release_conn()


def test_a_revoked_token_is_401(apiserver: ApiServer) -> None:
    token = apiserver.authorize("short-lived", [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}])
    core = client.CoreV1Api(apiserver.api_client(token))
    core.list_node()
    apiserver.revoke(token)
    assert error_of(lambda: core.list_node())[0] == 401


def test_a_restart_with_reset_resource_versions_makes_an_old_watch_too_large(
    apiserver: ApiServer, core: client.CoreV1Api
) -> None:
    apiserver.too_large_wait = 0.1
    apiserver.put(pod("a"))
    for i in range(20):
        apiserver.put(pod("a", labels={"v": str(i)}))
    old = apiserver.resource_version
    apiserver.restart(reset_resource_versions=True)
    assert int(apiserver.resource_version) < int(old)
    listed = core.list_namespaced_pod(NS)
    assert int(listed.items[0].metadata.resource_version) <= int(apiserver.resource_version)
    resp = core.list_namespaced_pod(NS, watch=True, resource_version=old, _preload_content=False)
    event = json.loads(resp.read().decode().strip())
    assert event["type"] == "ERROR"
    status = event["object"]
    assert (status["code"], status["reason"]) == (504, "Timeout")
    assert status["message"].startswith(f"Timeout: Too large resource version: {old}, current: ")
    assert status["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"
    # A watch from a version the server reaches while it waits goes on normally.
    apiserver.too_large_wait = 5.0
    target = str(int(apiserver.resource_version) + 1)
    events = watch_events(
        apiserver, core.list_namespaced_pod, NS, resource_version=apiserver.resource_version, count=1,
        during=lambda: apiserver.put(pod("b")),
    )  # fmt: skip
    assert summary(events) == [("ADDED", "b")] and events[0]["object"]["metadata"]["resourceVersion"] == target
