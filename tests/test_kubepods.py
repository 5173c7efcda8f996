"""The Kubernetes pod source (engine.sources.kubepods) and the own-node watch (engine.sources.kubenode).

``workload_from_pod`` is checked table-driven against the kubelet's conventions: QoS classes as in
the Kubernetes documentation "Pod Quality of Service Classes" (computed like
pkg/apis/core/helper/qos ComputePodQOS when status.qosClass is absent), pod cgroups named like the
kubelet's cgroup manager, container cgroups like each runtime (the table in
engine/cgroups/paths.py, koordinator.md §5.3).

The source and node-watch tests run against the API server. Kubernetes API: the in-repo emulator
(tests/kubeapi), reached over real HTTP by the official client; no kube-apiserver can run here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from engine.kube.client import Backoff
from engine.model.facts import Workload
from engine.sources.kubenode import NodeWatch
from engine.sources.kubepods import (
    KubePodSource,
    pod_qos,
    pod_reflector,
    qos_from_resources,
    workload_from_pod,
)
from tests.kubeapi import ApiServer

Json = dict[str, Any]
UID = "1a2b-3c4d"
GI = 1024.0**3
FAST = {"backoff": Backoff(base=0.001, cap=0.01)}


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not reached within {timeout}s"
        time.sleep(0.005)


def container(name: str, requests: Json | None = None, limits: Json | None = None, **extra: Any) -> Json:
    resources: Json = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "busybox", **({"resources": resources} if resources else {}), **extra}


def pod(
    *,
    uid: str = UID,
    name: str = "web-0",
    qos: str | None = "Burstable",
    containers: list[Json] | None = None,
    init: list[Json] | None = None,
    ids: dict[str, str] | None = None,
    init_ids: dict[str, str] | None = None,
    phase: str = "Running",
    node: str = "n1",
    **meta: Any,
) -> Json:
    status: Json = {"phase": phase}
    if qos is not None:
        status["qosClass"] = qos
    if ids is not None:
        status["containerStatuses"] = [{"name": n, "containerID": cid} for n, cid in ids.items()]
    if init_ids is not None:
        status["initContainerStatuses"] = [{"name": n, "containerID": cid} for n, cid in init_ids.items()]
    spec: Json = {"nodeName": node, "containers": containers or [container("app", {"cpu": "500m"})]}
    if init:
        spec["initContainers"] = init
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": uid, **meta},
        "spec": spec,
        "status": status,
    }


# ------------------------------------------------------------------------------------------------
# workload_from_pod
# ------------------------------------------------------------------------------------------------

GUARANTEED = [container("app", limits={"cpu": "2", "memory": "1Gi"})]
BURSTABLE = [container("app", {"cpu": "500m", "memory": "256Mi"})]
BEST_EFFORT = [container("app")]


@pytest.mark.parametrize(
    ("qos", "containers", "driver", "container_id", "pod_path", "container_dir"),
    [
        ("Guaranteed", GUARANTEED, "cgroupfs", "containerd://c1", f"kubepods/pod{UID}", "c1"),
        (
            "Guaranteed",
            GUARANTEED,
            "systemd",
            "containerd://c1",
            "kubepods.slice/kubepods-pod1a2b_3c4d.slice",
            "cri-containerd-c1.scope",
        ),
        ("Burstable", BURSTABLE, "cgroupfs", "cri-o://c2", f"kubepods/burstable/pod{UID}", "crio-c2"),
        (
            "Burstable",
            BURSTABLE,
            "systemd",
            "cri-o://c2",
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b_3c4d.slice",
            "crio-c2.scope",
        ),
        ("BestEffort", BEST_EFFORT, "cgroupfs", "docker://c3", f"kubepods/besteffort/pod{UID}", "c3"),
        (
            "BestEffort",
            BEST_EFFORT,
            "systemd",
            "docker://c3",
            "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1a2b_3c4d.slice",
            "docker-c3.scope",
        ),
    ],
)
def test_cgroup_paths_follow_qos_driver_and_runtime(
    qos: str, containers: list[Json], driver: Any, container_id: str, pod_path: str, container_dir: str
) -> None:
    problems: list[str] = []
    w = workload_from_pod(pod(qos=qos, containers=containers, ids={"app": container_id}), driver, problems)
    assert w.kube_qos == qos
    assert w.cgroup_path == pod_path
    (c,) = w.containers
    assert (c.id, c.cgroup_path, c.init) == (container_id, f"{pod_path}/{container_dir}", False)
    assert problems == []


def test_identity_metadata_and_resources_are_read() -> None:
    body = pod(
        containers=[
            container("app", {"cpu": "500m", "memory": "256Mi"}, {"cpu": "1", "memory": "1Gi"}),
            container("log", {"cpu": "100m"}),
        ],
        labels={"koordinator.sh/qosClass": "LS"},
        annotations={"katalyst.kubewharf.io/qos_level": "shared_cores"},
    )
    body["spec"].update(priority=9000, priorityClassName="koord-prod")
    w = workload_from_pod(body, "cgroupfs")
    assert (w.uid, w.namespace, w.name, w.key) == (UID, "default", "web-0", "default/web-0")
    assert dict(w.labels) == {"koordinator.sh/qosClass": "LS"}
    assert dict(w.annotations) == {"katalyst.kubewharf.io/qos_level": "shared_cores"}
    assert (w.priority, w.priority_class_name, w.phase, w.terminating) == (
        9000,
        "koord-prod",
        "Running",
        False,
    )
    app = w.containers[0]
    assert dict(app.requests) == {"cpu": 0.5, "memory": 256 * 1024.0**2}
    assert dict(app.limits) == {"cpu": 1.0, "memory": GI}
    assert w.request("cpu") == pytest.approx(0.6)
    assert w.limit("cpu") is None  # "log" has no limit: unbounded


def test_init_containers_and_native_sidecars() -> None:
    """Init containers run before the app containers (init=True, left out of the pod's request);
    a restartable init container (restartPolicy: Always, a native sidecar) runs alongside them and
    is managed like one."""
    body = pod(
        init=[container("setup", {"cpu": "2"}), container("proxy", {"cpu": "100m"}, restartPolicy="Always")],
        containers=[container("app", {"cpu": "500m"})],
        ids={"app": "containerd://a"},
        init_ids={"setup": "containerd://s", "proxy": "containerd://p"},
    )
    w = workload_from_pod(body, "cgroupfs")
    assert [(c.name, c.init, c.cgroup_path.rsplit("/", 1)[-1]) for c in w.containers] == [
        ("setup", True, "s"),
        ("proxy", False, "p"),
        ("app", False, "a"),
    ]
    assert w.request("cpu") == pytest.approx(0.6)


def test_a_pending_pod_without_container_ids_has_its_pod_path_only() -> None:
    w = workload_from_pod(pod(phase="Pending", ids=None), "systemd")
    assert w.phase == "Pending"
    assert w.cgroup_path.endswith("kubepods-burstable-pod1a2b_3c4d.slice")
    assert [(c.id, c.cgroup_path) for c in w.containers] == [("", "")]
    # A container still waiting (no containerID in its status yet) is the same.
    waiting = workload_from_pod(pod(ids={"app": ""}), "systemd")
    assert waiting.containers[0].cgroup_path == ""


def test_a_terminating_pod_is_flagged() -> None:
    w = workload_from_pod(
        pod(deletionTimestamp="2024-05-01T10:00:00Z", deletionGracePeriodSeconds=30), "cgroupfs"
    )
    assert w.terminating
    assert not workload_from_pod(pod(), "cgroupfs").terminating


def test_a_pod_without_status_defaults_to_pending_and_computes_its_class() -> None:
    body = pod(qos=None, containers=GUARANTEED)
    del body["status"]
    w = workload_from_pod(body, "cgroupfs")
    assert (w.phase, w.kube_qos, w.cgroup_path) == ("Pending", "Guaranteed", f"kubepods/pod{UID}")


@pytest.mark.parametrize(
    ("containers", "init", "expected"),
    [
        ([container("a")], [], "BestEffort"),
        (
            [container("a", limits={"cpu": "1", "memory": "1Gi"})],
            [],
            "Guaranteed",
        ),  # requests default to limits
        ([container("a", {"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})], [], "Guaranteed"),
        ([container("a", {"cpu": "500m", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})], [], "Burstable"),
        ([container("a", {"cpu": "1"})], [], "Burstable"),
        ([container("a", limits={"cpu": "1"})], [], "Burstable"),  # memory unlimited
        (
            [container("a", limits={"cpu": "1", "memory": "1Gi"}), container("b")],
            [],
            "Burstable",
        ),
        # Init containers count: one without limits makes the pod Burstable.
        ([container("a", limits={"cpu": "1", "memory": "1Gi"})], [container("i", {"cpu": "1"})], "Burstable"),
        ([container("a", {"cpu": "0", "memory": "0"})], [], "BestEffort"),  # zero quantities are not requests
        ([container("a", {"ephemeral-storage": "1Gi"})], [], "BestEffort"),  # only CPU and memory count
    ],
)
def test_the_class_is_computed_like_the_kubelet_when_status_has_none(
    containers: list[Json], init: list[Json], expected: str
) -> None:
    body = pod(qos=None, containers=containers, init=init)
    assert pod_qos(body) == expected
    assert workload_from_pod(body, "cgroupfs").kube_qos == expected


def test_pod_level_resources_decide_the_class_when_set() -> None:
    body = pod(qos=None, containers=[container("a"), container("b")])
    body["spec"]["resources"] = {"limits": {"cpu": "2", "memory": "2Gi"}}
    assert pod_qos(body) == "Guaranteed"
    assert qos_from_resources([]) == "BestEffort"


def test_status_qos_class_wins_over_resources() -> None:
    """The API server computed it at creation; resources are immutable, so it cannot go stale."""
    assert (
        workload_from_pod(pod(qos="Guaranteed", containers=BEST_EFFORT), "cgroupfs").kube_qos == "Guaranteed"
    )


@pytest.mark.parametrize(
    ("body", "check", "problem"),
    [
        (
            pod(containers=[container("app", {"cpu": "lots", "memory": "1Gi"})]),
            lambda w: dict(w.containers[0].requests) == {"memory": GI},
            "container app.resources.requests.cpu: 'lots' is not a quantity",
        ),
        (
            pod(ids={"app": "rkt://abc"}),
            lambda w: (
                (w.containers[0].id, w.containers[0].cgroup_path) == ("rkt://abc", "")
                and w.cgroup_path == f"kubepods/burstable/pod{UID}"
            ),
            "container app: no cgroup path: unknown container runtime 'rkt'",
        ),
        (
            pod(ids={"app": "no-scheme"}),
            lambda w: w.containers[0].cgroup_path == "",
            "is not <runtime>://<id>",
        ),
        (
            pod(uid=""),
            lambda w: w.cgroup_path == "" and w.name == "web-0",
            "no pod cgroup: pod UID '' cannot name a cgroup",
        ),
        (
            pod(qos="Platinum", containers=GUARANTEED),
            lambda w: w.kube_qos == "Guaranteed",
            "status.qosClass 'Platinum' is not one of",
        ),
    ],
)
def test_unreadable_parts_are_left_empty_and_reported_never_the_pod_dropped(
    body: Json, check: Callable[[Workload], bool], problem: str
) -> None:
    problems: list[str] = []
    w = workload_from_pod(body, "cgroupfs", problems)
    assert check(w)
    assert len(problems) == 1 and problem in problems[0], problems


# ------------------------------------------------------------------------------------------------
# KubePodSource against the emulator
# ------------------------------------------------------------------------------------------------


@pytest.fixture
def source(apiserver: ApiServer) -> Iterator[Callable[[], KubePodSource]]:
    made: list[KubePodSource] = []

    def _make() -> KubePodSource:
        src = KubePodSource(pod_reflector(apiserver.api_client(), "n1", **FAST), "cgroupfs")
        made.append(src)
        src.reflector.start()
        assert src.reflector.wait_synced(10)
        return src

    yield _make
    for src in made:
        src.reflector.stop()


def served(name: str, **kwargs: Any) -> Json:
    """A pod for server.put: its own uid unless given."""
    kwargs.setdefault("uid", f"uid-{name}")
    return pod(name=name, **kwargs)


def test_workloads_are_rebuilt_only_on_change_and_unchanged_pods_keep_their_object(
    apiserver: ApiServer, source: Callable[[], KubePodSource]
) -> None:
    for name in ("b", "a", "c"):
        apiserver.put(served(name, ids={"app": f"containerd://{name}"}))
    apiserver.put(served("other-node", node="n2"))
    src = source()
    first = src.workloads()
    assert [w.name for w in first] == ["a", "b", "c"]  # sorted, whatever the event order
    assert src.workloads() is first  # nothing changed: the same tuple

    apiserver.put(served("b", ids={"app": "containerd://b"}, labels={"v": "2"}))
    wait_until(lambda: src.workloads() is not first, what="b modified")
    second = src.workloads()
    by_name = {w.name: w for w in second}
    old = {w.name: w for w in first}
    assert by_name["a"] is old["a"] and by_name["c"] is old["c"]
    assert by_name["b"] is not old["b"] and dict(by_name["b"].labels) == {"v": "2"}

    apiserver.delete("v1", "Pod", "a", "default")
    apiserver.put(served("d"))
    wait_until(lambda: [w.name for w in src.workloads()] == ["b", "c", "d"], what="a gone, d in")
    assert src.workloads()[0] is by_name["b"]


def test_a_pod_gains_container_cgroups_when_its_status_names_them(
    apiserver: ApiServer, source: Callable[[], KubePodSource]
) -> None:
    apiserver.put(served("p", phase="Pending"))
    src = source()
    (w,) = src.workloads()
    assert (w.phase, w.containers[0].cgroup_path) == ("Pending", "")
    apiserver.put(served("p", ids={"app": "containerd://abc"}))
    wait_until(lambda: src.workloads()[0].phase == "Running", what="the pod started")
    assert src.workloads()[0].containers[0].cgroup_path == "kubepods/burstable/poduid-p/abc"


def test_problems_are_kept_once_per_pod_and_forgotten_with_the_pod(
    apiserver: ApiServer, source: Callable[[], KubePodSource], caplog: pytest.LogCaptureFixture
) -> None:
    apiserver.put(served("odd", ids={"app": "rkt://x"}))
    apiserver.put(served("fine"))
    src = source()
    assert {w.name for w in src.workloads()} == {"odd", "fine"}  # kept, not dropped
    (problem,) = src.problems()
    assert (problem.uid, problem.pod) == ("uid-odd", "default/odd")
    assert "unknown container runtime 'rkt'" in problem.message
    # The pod changes in a way that keeps the problem: still one entry, logged once.
    apiserver.put(served("odd", ids={"app": "rkt://x"}, labels={"touched": "yes"}))
    wait_until(lambda: any(dict(w.labels) == {"touched": "yes"} for w in src.workloads()))
    assert len(src.problems()) == 1
    logged = [r for r in caplog.records if "partly unreadable" in r.getMessage()]
    assert len(logged) == 1
    apiserver.delete("v1", "Pod", "odd", "default")
    wait_until(lambda: [w.name for w in src.workloads()] == ["fine"])
    assert src.problems() == ()


def test_fresh_at_is_the_reflectors(apiserver: ApiServer, source: Callable[[], KubePodSource]) -> None:
    src = source()
    before = time.monotonic()
    fresh = src.fresh_at()
    assert fresh is not None and fresh >= before  # a healthy watch is current now


def test_pod_reflector_watches_this_node_only(apiserver: ApiServer) -> None:
    with pytest.raises(ValueError, match="NODE_NAME"):
        pod_reflector(apiserver.api_client(), "")
    r = pod_reflector(apiserver.api_client(), "n7", **FAST)
    r.start()
    try:
        assert r.wait_synced(10)
        (lst,) = [q for q in apiserver.requests if q.verb == "list"]
        assert (lst.path, lst.query["fieldSelector"]) == ("/api/v1/pods", "spec.nodeName=n7")
    finally:
        r.stop()


# ------------------------------------------------------------------------------------------------
# NodeWatch against the emulator
# ------------------------------------------------------------------------------------------------


def node(name: str, labels: Json | None = None, allocatable: Json | None = None, **status: Any) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "status": {
            "capacity": {"cpu": "8", "memory": "16Gi"},
            "allocatable": allocatable or {"cpu": "7500m", "memory": "15Gi", "pods": "110"},
            **status,
        },
    }


@pytest.fixture
def node_watch(apiserver: ApiServer) -> Iterator[Callable[..., NodeWatch]]:
    made: list[NodeWatch] = []

    def _make(name: str = "n1", **kwargs: Any) -> NodeWatch:
        nw = NodeWatch(apiserver.api_client(), name, **FAST, **kwargs)
        made.append(nw)
        nw.start()
        return nw

    yield _make
    for nw in made:
        nw.stop()


def test_node_watch_reads_labels_allocatable_and_uid(
    apiserver: ApiServer, node_watch: Callable[..., NodeWatch]
) -> None:
    stored = apiserver.put(node("n1", {"qosd.io/colocation": "true"}))
    apiserver.put(node("n2", {"other": "node"}))
    nw = node_watch()
    assert nw.wait_synced(10)
    assert dict(nw.labels()) == {"qosd.io/colocation": "true"}
    assert dict(nw.allocatable()) == {"cpu": 7.5, "memory": 15 * GI, "pods": 110.0}
    assert nw.uid() == stored["metadata"]["uid"]
    node_obj = nw.node()
    assert node_obj is not None and node_obj["metadata"]["name"] == "n1"
    assert nw.labels() is nw.labels()  # derived once per version


def test_on_labels_fires_on_label_changes_only(
    apiserver: ApiServer, node_watch: Callable[..., NodeWatch]
) -> None:
    apiserver.put(node("n1", {"tier": "a"}))
    label_calls: list[dict[str, str]] = []
    changes = threading.Semaphore(0)
    holder: list[NodeWatch] = []

    def on_labels() -> None:
        label_calls.append(dict(holder[0].labels()))

    nw = NodeWatch(apiserver.api_client(), "n1", on_labels=on_labels, on_change=changes.release, **FAST)
    holder.append(nw)
    nw.start()
    try:
        assert nw.wait_synced(10)
        assert changes.acquire(timeout=10)
        assert label_calls == [{"tier": "a"}]  # the first time labels are known
        v = nw.version
        apiserver.put(node("n1", {"tier": "a"}, conditions=[{"type": "Ready", "status": "True"}]))
        assert changes.acquire(timeout=10)  # a status-only change
        assert nw.version > v and label_calls == [{"tier": "a"}]
        apiserver.put(node("n1", {"tier": "b"}))
        assert changes.acquire(timeout=10)
        assert label_calls == [{"tier": "a"}, {"tier": "b"}]
        assert dict(nw.labels()) == {"tier": "b"}
    finally:
        nw.stop()


def test_wait_synced_needs_the_node_itself(
    apiserver: ApiServer, node_watch: Callable[..., NodeWatch]
) -> None:
    apiserver.put(node("someone-else"))
    nw = node_watch("n9")
    assert nw.reflector.wait_synced(10)
    assert not nw.wait_synced(0.05)  # listed, but no such Node: not a usable view
    assert nw.node() is None and dict(nw.labels()) == {} and nw.uid() is None
    apiserver.put(node("n9", {"late": "yes"}))
    assert nw.wait_synced(10)
    assert dict(nw.labels()) == {"late": "yes"}


def test_unparsable_allocatable_entries_are_left_out(
    apiserver: ApiServer, node_watch: Callable[..., NodeWatch]
) -> None:
    apiserver.put(node("n1", allocatable={"cpu": "4", "example.com/widgets": "many"}))
    nw = node_watch()
    assert nw.wait_synced(10)
    assert dict(nw.allocatable()) == {"cpu": 4.0}
