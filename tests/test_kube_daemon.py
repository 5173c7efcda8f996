"""`qosd run` in Kubernetes mode, end to end: the daemon as `build_kube` wires it, running its loop.

Kubernetes API: the in-repo emulator (tests/kubeapi), reached over real HTTP by the official client;
no kube-apiserver can run here. The daemon authenticates as the DaemonSet's ServiceAccount and the
emulator enforces examples/deploy/base/rbac.yaml, so every test also checks that the shipped RBAC is
enough (a 403 fails the test). Cgroups: a temporary tree with the cgroup v2 file names (the pods
are the emulator's; there is no kubelet to create their cgroups on this machine's real hierarchy).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from engine.adapters.cgroup import CgroupAdapter
from engine.cgroups.mounts import CgroupLayout
from engine.cli import build_parser
from engine.daemon.loop import Daemon
from engine.daemon.wiring import build_kube
from engine.kube.client import GROUP, POLICY_PLURAL, VERSION
from tests.kubeapi import ApiServer

NODE = "node-a"
DEPLOY = Path(__file__).resolve().parents[1] / "examples" / "deploy"
BATCH_CPU = "example.com/batch-cpu"

BASE = """\
apiVersion: qosd.io/v1alpha1
kind: QoSPolicy
metadata: {name: test-base}
spec:
  classes:
    - name: be
      match: [{labels: {qos: be}}]
      cpu: {policy: reclaimed}
    - name: ls
      match: [{labels: {qos: ls}}]
      cpu: {policy: shared}
  reclaim:
    enabled: true
    degradeAfter: 3s
    cpu: {policy: request, reclaimThresholdPercent: 100, publishAs: example.com/batch-cpu}
  rules:
    - name: publish
      then: {publish: {resource: cpu}}
"""

EVICT = """\
    - name: evict-be
      when: {node.cpus: {gte: 1}}
      then:
        evict:
          victims: {classes: [be]}
          orderBy: [name]
          maxPerRound: 1
          cooldown: 1s
"""


def wait_for(what: str, check: Callable[[], Any], timeout: float = 20.0) -> Any:
    """Poll until ``check`` returns something truthy; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def rbac_rules() -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all((DEPLOY / "base" / "rbac.yaml").read_text()) if d]
    return [r for d in docs if d["kind"] in ("ClusterRole", "Role") for r in d["rules"]]


def node(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "status": {
            "capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"},
            "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}],
        },
    }


def pod(name: str, qos: str, cpu: str = "100m", on: str = NODE) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"qos": qos, "app": name}},
        "spec": {
            "nodeName": on,
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}
            ],
        },
        "status": {
            "phase": "Running",
            "qosClass": "Burstable",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [
                {"name": "c", "ready": True, "restartCount": 0, "image": "busybox", "imageID": "",
                 "containerID": f"containerd://{name}0123456789abcdef", "state": {"running": {}}}
            ],
        },
    }


class Running:
    """A kube-mode daemon running its loop in a thread, and the admin's view of the cluster."""

    def __init__(self, api: ApiServer, daemon: Daemon) -> None:
        self.api = api
        self.daemon = daemon
        self.admin = api.api_client()
        self.custom = client.CustomObjectsApi(self.admin)
        self.thread = threading.Thread(target=daemon.run, name="qosd-under-test", daemon=True)

    def generation(self) -> int:
        return self.daemon.reloader.generation

    def node_status(self) -> dict[str, Any]:
        return (self.api.get(f"{GROUP}/{VERSION}", "QoSNodeStatus", NODE) or {}).get("status") or {}

    def policy(self, name: str) -> dict[str, Any]:
        return self.api.get(f"{GROUP}/{VERSION}", "QoSPolicy", name) or {}

    def condition(self, name: str, type_: str) -> dict[str, Any]:
        conds = (self.policy(name).get("status") or {}).get("conditions") or []
        return next((c for c in conds if c["type"] == type_), {})

    def apply_policy(self, text: str) -> dict[str, Any]:
        """Create or replace, re-reading on 409 as client-go's RetryOnConflict does: the elected
        status writer may update the object's status between our read and our write."""
        body = yaml.safe_load(text)
        name = body["metadata"]["name"]
        for _ in range(10):
            current = self.policy(name)
            if not current:
                return dict(self.custom.create_cluster_custom_object(GROUP, VERSION, POLICY_PLURAL, body))
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            try:
                return dict(self.custom.replace_cluster_custom_object(GROUP, VERSION, POLICY_PLURAL, name, body))
            except client.ApiException as e:
                if e.status != 409:
                    raise
        pytest.fail(f"QoSPolicy {name} kept conflicting")

    def events(self, reason: str) -> list[dict[str, Any]]:
        return [e for e in self.api.list("v1", "Event") if e.get("reason") == reason]

    def forbidden(self) -> list[str]:
        return [f"{r.method} {r.path}" for r in self.api.requests.snapshot() if r.status == 403]

    def metric(self, name: str, **labels: str) -> float:
        return self.daemon.metrics.registry.get_sample_value(name, labels) or 0.0


@pytest.fixture
def cluster(apiserver: ApiServer) -> ApiServer:
    return populate(apiserver)


def populate(apiserver: ApiServer) -> ApiServer:
    """The cluster of these tests: the qosd-system namespace, node-a (qosd's) with an ls pod "web"
    (500m), node-b with a be pod "elsewhere"."""
    apiserver.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "qosd-system"}})
    apiserver.put(node(NODE))
    apiserver.put(node("node-b"))
    apiserver.put(pod("web", "ls", cpu="500m"))
    apiserver.put(pod("elsewhere", "be", on="node-b"))
    return apiserver


def daemon_args(
    tmp: Path, kubeconfig: Path, node_name: str, policy: str, extra: Sequence[str], tree: Path | None = None
) -> list[str]:
    """``qosd run`` arguments for a kube-mode daemon of ``node_name`` whose files live in ``tmp``
    (rules, state file; a cgroup v2 file-name tree unless ``tree`` is given)."""
    if tree is None:
        tree = tmp / "cgroup"
        tree.mkdir(parents=True, exist_ok=True)
        (tree / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    rules = tmp / "rules"
    rules.mkdir(parents=True, exist_ok=True)
    (rules / "base.yaml").write_text(policy)
    return [
        "run", "--kubeconfig", str(kubeconfig), "--node-name", node_name, "--no-builtin",
        "--rules", str(rules), "--cgroup-root", str(tree), "--resctrl-root", str(tmp / "resctrl"),
        "--cgroup-driver", "cgroupfs", "--interval", "100ms", "--sync-timeout", "10s",
        "--state-file", str(tmp / "state.json"), "--namespace", "qosd-system", *extra,
    ]  # fmt: skip


def start_daemon(cluster: ApiServer, tmp: Path, node_name: str, token: str, policy: str, extra: Sequence[str]) -> Running:
    """A kube-mode daemon as ``build_kube`` wires it, running its loop in a thread, once it loaded
    its first generation."""
    kubeconfig = cluster.kubeconfig(tmp / "kubeconfig", token)
    args = build_parser().parse_args([*daemon_args(tmp, kubeconfig, node_name, policy, extra), "--listen", ""])
    daemon = build_kube(args, adapter=CgroupAdapter(CgroupLayout.unified_tree(tmp / "cgroup")))
    running = Running(cluster, daemon)
    running.thread.start()
    wait_for("the first generation", lambda: running.generation() >= 1)
    return running


def stop_daemons(started: Sequence[Running]) -> None:
    for running in started:
        running.daemon.stop.set()
        running.thread.join(timeout=15)
        assert not running.thread.is_alive(), "the daemon did not stop"


@pytest.fixture
def run_qosd(cluster: ApiServer, tmp_path: Path) -> Iterator[Callable[..., Running]]:
    started: list[Running] = []

    def start(policy: str = BASE, *extra: str) -> Running:
        token = cluster.authorize("qosd-sa-token", rbac_rules())
        started.append(start_daemon(cluster, tmp_path, NODE, token, policy, extra))
        return started[-1]

    yield start
    stop_daemons(started)
    for running in started:
        assert running.forbidden() == [], "examples/deploy/base/rbac.yaml is missing a permission"


def test_creating_updating_and_deleting_a_policy_reloads_the_daemon_and_the_status_says_so(
    run_qosd: Callable[..., Running],
) -> None:
    q = run_qosd()
    wait_for("the node status of generation 1", lambda: q.node_status().get("applied", {}).get("generation") == 1)

    overlay = (
        "apiVersion: qosd.io/v1alpha1\nkind: QoSPolicy\nmetadata: {name: overlay}\nspec:\n  priority: 50\n"
        "  nodeSelector: {matchLabels: {kubernetes.io/hostname: node-a}}\n"
        "  reclaim:\n    cpu: {reclaimThresholdPercent: 90}\n"
    )
    q.apply_policy(overlay)
    wait_for("generation 2", lambda: q.generation() == 2)
    wait_for(
        "the node status to name the policy",
        lambda: q.node_status()["applied"]["policies"] == [{"name": "overlay", "generation": 1}],
    )
    wait_for("Valid=True", lambda: q.condition("overlay", "Valid").get("status") == "True")
    wait_for("Applied=True", lambda: q.condition("overlay", "Applied").get("status") == "True")
    assert q.policy("overlay")["status"]["observedGeneration"] == 1
    assert q.policy("overlay")["status"]["nodes"] == {"matched": 1, "applied": 1, "failed": 0, "recentErrors": []}

    q.apply_policy(overlay.replace("90", "80"))
    wait_for("generation 3", lambda: q.generation() == 3)
    wait_for("observedGeneration 2", lambda: q.policy("overlay").get("status", {}).get("observedGeneration") == 2)
    # Until this node reports generation 2 applied, the leader may say Applied=Unknown for it.
    wait_for(
        "Applied=True for generation 2",
        lambda: (q.condition("overlay", "Applied").get("observedGeneration"), q.condition("overlay", "Applied").get("status"))
        == (2, "True"),
    )

    q.custom.delete_cluster_custom_object(GROUP, VERSION, POLICY_PLURAL, "overlay")
    wait_for("generation 4", lambda: q.generation() == 4)
    wait_for("the node status without it", lambda: q.node_status()["applied"]["policies"] == [])
    assert q.metric("qosd_config_reloads_total", source="crd", result="success") == 3


def test_an_invalid_policy_keeps_the_last_good_generation_with_valid_false_and_events(
    run_qosd: Callable[..., Running],
) -> None:
    q = run_qosd()
    q.apply_policy(
        "apiVersion: qosd.io/v1alpha1\nkind: QoSPolicy\nmetadata: {name: bad}\nspec:\n  priority: 60\n"
        "  rules:\n    - name: typo\n      when: {node.memory.usage_pct: {gte: 90}}\n"
        "      then: {notify: {reason: HighMemory, message: node memory above 90%}}\n"
    )
    wait_for("the rejection", lambda: q.node_status().get("lastAttempt", {}).get("result") == "Rejected")
    assert q.generation() == 1
    problems = q.node_status()["lastAttempt"]["problems"]
    assert problems[0]["source"] == "QoSPolicy/bad"
    assert "node.memory.usage_pct" in problems[0]["message"]
    wait_for("Valid=False", lambda: q.condition("bad", "Valid").get("status") == "False")
    assert "node.memory.usage_pct" in q.condition("bad", "Valid")["message"]
    wait_for("an InvalidPolicy Event on the QoSPolicy", lambda: q.events("InvalidPolicy"))
    event = q.events("InvalidPolicy")[0]
    assert (event["involvedObject"]["kind"], event["involvedObject"]["name"]) == ("QoSPolicy", "bad")
    wait_for("a PolicyRejected Event on the Node", lambda: q.events("PolicyRejected"))
    assert q.daemon.ready()[0]  # still serving the last good generation

    q.apply_policy(
        "apiVersion: qosd.io/v1alpha1\nkind: QoSPolicy\nmetadata: {name: bad}\nspec:\n  priority: 60\n"
        "  rules:\n    - name: typo\n      when: {node.memory.usage_percent: {gte: 90}}\n"
        "      then: {notify: {reason: HighMemory, message: node memory above 90%}}\n"
    )
    wait_for("the fixed policy in effect", lambda: q.generation() == 2)
    wait_for("Valid=True", lambda: q.condition("bad", "Valid").get("status") == "True")


def test_an_eviction_blocked_by_a_pdb_is_retried_later_and_never_duplicated(
    cluster: ApiServer, run_qosd: Callable[..., Running]
) -> None:
    cluster.put(pod("batch", "be"))
    cluster.put(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "batch", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "batch"}}},
        }
    )
    q = run_qosd(BASE + EVICT)

    def evictions(status: int) -> int:
        return len([r for r in cluster.requests.matching("POST", r"/pods/batch/eviction$") if r.status == status])

    wait_for("two rounds refused by the PDB", lambda: evictions(429) >= 2)
    assert evictions(201) == 0
    # The server logs a 429 before the daemon has read it: wait for the daemon to count it.
    wait_for(
        "two deferred evictions counted",
        lambda: q.metric("qosd_actions_total", action="evictPod", result="deferred") >= 2,
    )

    budget = cluster.get("policy/v1", "PodDisruptionBudget", "batch", "default")
    assert budget is not None
    budget["spec"]["minAvailable"] = 0
    cluster.put(budget)
    wait_for("the eviction", lambda: evictions(201) == 1)
    wait_for("the pod to be gone", lambda: cluster.get("v1", "Pod", "batch", "default") is None)
    attempts = len(cluster.requests.matching("POST", r"/pods/batch/eviction$"))
    time.sleep(1.5)  # more rounds of a rule that still holds: nothing left to evict
    assert len(cluster.requests.matching("POST", r"/pods/batch/eviction$")) == attempts
    assert evictions(201) == 1
    wait_for("an Evicted Event on the pod", lambda: q.events("Evicted"))
    assert "qosd rule evict-be" in q.events("Evicted")[0]["message"]


def test_node_extended_resources_appear_update_and_disappear_with_degradation(
    cluster: ApiServer, run_qosd: Callable[..., Running]
) -> None:
    def published() -> tuple[str | None, str | None]:
        status = (cluster.get("v1", "Node", NODE) or {}).get("status") or {}
        return (status.get("capacity") or {}).get(BATCH_CPU), (status.get("allocatable") or {}).get(BATCH_CPU)

    def computed() -> float | None:
        history = q.daemon.state.reports.get(BATCH_CPU)
        return None if history is None else history.reported

    gated = BASE.replace("    degradeAfter: 3s\n", "    degradeAfter: 3s\n    update: {diffThreshold: 0.1, maxInterval: 5m}\n")
    q = run_qosd(gated)
    first = wait_for("batch-cpu on the node", lambda: published()[0])
    assert (first, published()[1]) == ("1500", "1500")  # 2 cores - web's 500m
    writes = len(cluster.requests.matching("PATCH", rf"/nodes/{NODE}/status$"))

    # 100m more requested by a high-priority pod: 1400 is -6.7%, within diffThreshold, so held.
    cluster.put(pod("small", "ls", cpu="100m"))
    wait_for("the engine to compute 1.4 cores", lambda: computed() == pytest.approx(1.4))
    time.sleep(0.5)  # several more rounds that hold
    assert published() == ("1500", "1500")
    assert len(cluster.requests.matching("PATCH", rf"/nodes/{NODE}/status$")) == writes

    # 300m more: 1100 is -26.7%, so the Node moves, carrying the held 100m with it.
    cluster.put(pod("big", "ls", cpu="300m"))
    wait_for("batch-cpu to move", lambda: published()[0] not in (None, first))
    assert published() == ("1100", "1100")

    # The pod watch loses the API server: after degradeAfter (3s) the view is stale and the
    # reclaimed resource is withdrawn, while node status writes still get through.
    cluster.fail_next(10_000, 500, path=r"^/api/v1/pods$")
    cluster.drop_watches()
    wait_for("batch-cpu to be withdrawn", lambda: published() == (None, None), timeout=30)
    assert q.daemon.reloader.engine is not None


def test_the_daemon_recovers_from_a_watch_disconnect_and_from_410(
    cluster: ApiServer, run_qosd: Callable[..., Running]
) -> None:
    # No bookmarks: the QoSPolicy watch's resourceVersion then stays at its last QoSPolicy event,
    # so a change to another resource followed by a compaction makes its next watch a certain 410.
    cluster.bookmark_interval = 3600.0
    q = run_qosd()
    overlay = (
        "apiVersion: qosd.io/v1alpha1\nkind: QoSPolicy\nmetadata: {name: overlay}\nspec:\n  priority: 50\n"
        "  reclaim:\n    cpu: {reclaimThresholdPercent: 90}\n"
    )
    wait_for("watches open", lambda: cluster.open_watches() >= 3)
    cluster.drop_watches()
    q.apply_policy(overlay)
    wait_for("the reload after a disconnect", lambda: q.generation() == 2)

    cluster.put(pod("late", "be"))
    cluster.compact()
    cluster.drop_watches()
    q.apply_policy(overlay.replace("90", "70"))
    wait_for("the reload after 410 and a relist", lambda: q.generation() == 3)
    pods = q.daemon.source.collector.source  # the pod source
    wait_for("the new pod in the workloads", lambda: any(w.name == "late" for w in pods.workloads()))
    # What an operator sees on /metrics: both recoveries, per watched resource.
    assert q.metric("qosd_kube_watch_restarts_total", resource="qospolicies") >= 1
    assert q.metric("qosd_kube_watch_expired_total", resource="qospolicies") >= 1
    assert q.metric("qosd_kube_watch_lists_total", resource="qospolicies") >= 2  # the first and the relist
    assert q.metric("qosd_kube_watch_synced", resource="pods") == 1
    assert q.metric("qosd_kube_watch_objects", resource="pods") == 2  # web and late; "elsewhere" is on node-b



OWN_GRACE_EVICT = EVICT.replace("          cooldown: 1s\n", "          cooldown: 1s\n          gracePeriodSeconds: -1\n")


def test_a_rule_asking_for_the_pods_own_grace_period_sends_the_pods_terminationgraceperiodseconds(
    cluster: ApiServer, run_qosd: Callable[..., Running]
) -> None:
    """gracePeriodSeconds -1 (the pod's own) must not reach DeleteOptions as -1: the body the API
    server received carries the pod's terminationGracePeriodSeconds (45 here)."""
    batch = pod("batch", "be")
    batch["spec"]["terminationGracePeriodSeconds"] = 45
    cluster.put(batch)
    q = run_qosd(BASE + OWN_GRACE_EVICT)
    wait_for("the eviction", lambda: cluster.requests.matching("POST", r"/pods/batch/eviction$"))
    sent = cluster.requests.matching("POST", r"/pods/batch/eviction$")
    assert [r.json["deleteOptions"]["gracePeriodSeconds"] for r in sent] == [45] * len(sent)
    assert sent[0].status == 201
    wait_for("the metric", lambda: q.metric("qosd_actions_total", action="evictPod", result="applied") == 1)


def test_audit_mode_decides_and_sends_events_but_evicts_publishes_and_writes_nothing(
    cluster: ApiServer, run_qosd: Callable[..., Running], tmp_path: Path
) -> None:
    """`--mode audit`, the kustomize base's first install: the same policy that evicts and
    publishes in enforce mode (the tests above) here only decides, counts and sends Events."""
    cluster.put(pod("batch", "be"))
    tree = tmp_path / "cgroup"
    before = sorted((p.relative_to(tree), p.read_bytes()) for p in tree.rglob("*") if p.is_file()) if tree.exists() else []
    q = run_qosd(BASE + EVICT, "--mode", "audit")
    wait_for("a WouldEvict Event on the Node", lambda: q.events("WouldEvict"))
    (event,) = q.events("WouldEvict")
    assert (event["involvedObject"]["kind"], event["involvedObject"]["name"]) == ("Node", NODE)
    assert "would evict pod default/batch (rule evict-be)" in event["message"]
    # The pod stays, so the rule decides it again after its cooldown (1s); the same decision is
    # sent once per AUDIT_EVENT_SECONDS, not every round, or it would use up the Node's Event budget.
    wait_for(
        "the decision made again and its Event held back",
        lambda: q.metric("qosd_actions_total", action="emitEvent", result="skipped") >= 2,
    )
    assert [e.get("count", 1) for e in q.events("WouldEvict")] == [1]

    assert cluster.requests.matching("POST", r"/eviction$") == []
    assert cluster.requests.matching("DELETE", r"/pods/") == []
    assert cluster.requests.matching("PATCH", rf"^/api/v1/nodes/{NODE}") == []  # no status, taint or label
    status = (cluster.get("v1", "Node", NODE) or {}).get("status") or {}
    assert BATCH_CPU not in (status.get("capacity") or {})
    assert cluster.get("v1", "Pod", "batch", "default") is not None
    after = sorted((p.relative_to(tree), p.read_bytes()) for p in tree.rglob("*") if p.is_file())
    assert [f for f, _ in after if str(f) != "cgroup.controllers"] == [f for f, _ in before if str(f) != "cgroup.controllers"]
    # What was decided is counted: the rules fired, and their intents were held by the audit guard.
    assert q.metric("qosd_rule_matches_total", rule="evict-be", mode="enforce") >= 1
    assert q.metric("qosd_held_total", rule="evict-be") >= 1
    assert q.metric("qosd_held_total", rule="publish") >= 1
    assert q.metric("qosd_actions_total", action="emitEvent", result="applied") == 1
    for action in ("evictPod", "publishNodeResource", "writeCgroup"):
        assert all(
            q.metric("qosd_actions_total", action=action, result=r) == 0
            for r in ("applied", "failed", "deferred", "vanished", "unchanged", "skipped")
        ), action
    # And the node's status says what runs, as in enforce mode.
    wait_for("the node status", lambda: q.node_status().get("applied", {}).get("generation") == 1)


MERGE = "application/merge-patch+json"  # the content type of the admin's patches below


def test_node_reserved_comes_from_the_watched_node_object_annotation_and_allocatable(
    cluster: ApiServer, run_qosd: Callable[..., Running]
) -> None:
    """spec.reclaim.reservationAnnotation: the daemon reads the Node's annotations and allocatable
    from its node watch, and nodeReserved is the larger of kubelet's (capacity - allocatable) and
    the annotation's. The request policy on this 2-core node: 2 - nodeReserved - web's 500m."""

    def published() -> str | None:
        status = (cluster.get("v1", "Node", NODE) or {}).get("status") or {}
        return (status.get("allocatable") or {}).get(BATCH_CPU)

    policy = BASE.replace("    degradeAfter: 3s\n", "    degradeAfter: 3s\n    reservationAnnotation: example.com/reservation\n")
    q = run_qosd(policy)
    core = client.CoreV1Api(q.admin)
    assert wait_for("batch-cpu on the node", published) == "1500"

    core.patch_node(NODE, {"metadata": {"annotations": {"example.com/reservation": '{"resources": {"cpu": "2"}}'}}}, _content_type=MERGE)
    wait_for("the annotation's 2 cores to count", lambda: published() == "0")
    reserved = '{"resources": {"cpu": "2"}, "reservedCPUs": "0"}'  # the listed CPU wins: 1 core
    core.patch_node(NODE, {"metadata": {"annotations": {"example.com/reservation": reserved}}}, _content_type=MERGE)
    wait_for("reservedCPUs 0 (one CPU) to count", lambda: published() == "500")

    # kubelet reserves 1500m (allocatable 500m of 2 cores), above the annotation's 1 CPU: 2 - 1.5 - 0.5
    core.patch_node_status(NODE, {"status": {"allocatable": {"cpu": "500m"}}}, _content_type=MERGE)
    wait_for("kubelet's 1500m reservation to win", lambda: published() == "0")
    core.patch_node(NODE, {"metadata": {"annotations": {"example.com/reservation": None}}}, _content_type=MERGE)
    core.patch_node_status(NODE, {"status": {"allocatable": {"cpu": "1800m"}}}, _content_type=MERGE)
    wait_for("kubelet's 200m alone", lambda: published() == "1300")
    node = q.daemon.source.collector.node_object  # what every tick's snapshot takes
    assert node is not None and "example.com/reservation" not in node.annotations()
    assert node.allocatable()["cpu"] == 1.8


QUANTITY = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$",
    "x-kubernetes-int-or-string": True,
}
# noderesourcetopologies.topology.node.k8s.io v1alpha1, the CRD of
# k8stopologyawareschedwg/noderesourcetopology-api that Koordinator serves (koordlet creates one per
# node, the slo-controller writes batch resources into its zones).
NRT_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "noderesourcetopologies.topology.node.k8s.io"},
    "spec": {
        "group": "topology.node.k8s.io",
        "scope": "Cluster",
        "names": {
            "kind": "NodeResourceTopology",
            "listKind": "NodeResourceTopologyList",
            "plural": "noderesourcetopologies",
            "singular": "noderesourcetopology",
            "shortNames": ["node-res-topo"],
        },
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "required": ["topologyPolicies", "zones"],
                        "properties": {
                            "apiVersion": {"type": "string"},
                            "kind": {"type": "string"},
                            "metadata": {"type": "object"},
                            "topologyPolicies": {"type": "array", "items": {"type": "string"}},
                            "zones": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["name", "type"],
                                    "properties": {
                                        "name": {"type": "string"},
                                        "type": {"type": "string"},
                                        "parent": {"type": "string"},
                                        "resources": {
                                            "type": "array",
                                            "items": {
                                                "type": "object",
                                                "required": ["name", "capacity", "allocatable", "available"],
                                                "properties": {
                                                    "name": {"type": "string"},
                                                    "capacity": QUANTITY,
                                                    "allocatable": QUANTITY,
                                                    "available": QUANTITY,
                                                },
                                            },
                                        },
                                    },
                                },
                            },
                        },
                    }
                },
            }
        ],
    },
}

ZONES = BASE.replace("    degradeAfter: 3s\n", "    degradeAfter: 3s\n    zones: {namePrefix: node-}\n")


def nrt(zone_names: list[str]) -> dict[str, Any]:
    """What koordlet reports for this node: one zone per NUMA node with its cpu and memory; the
    zone "node-9" (no such NUMA node here) also holds a batch-cpu value from before."""

    def zone(name: str) -> dict[str, Any]:
        return {
            "name": name,
            "type": "Node",
            "resources": [
                {"name": "cpu", "capacity": "1", "allocatable": "1", "available": "1"},
                {"name": "memory", "capacity": "1Gi", "allocatable": "1Gi", "available": "1Gi"},
            ],
        }

    stale = zone("node-9")
    stale["resources"].append({"name": BATCH_CPU, "capacity": "700", "allocatable": "700", "available": "700"})
    return {
        "apiVersion": "topology.node.k8s.io/v1alpha1",
        "kind": "NodeResourceTopology",
        "metadata": {"name": NODE},
        "topologyPolicies": ["None"],
        "zones": [*(zone(n) for n in zone_names), stale],
    }


def zone_batch_cpu(cluster: ApiServer) -> dict[str, dict[str, Any]]:
    obj = cluster.get("topology.node.k8s.io/v1alpha1", "NodeResourceTopology", NODE) or {}
    return {
        z["name"]: {k: r[k] for k in ("capacity", "allocatable", "available")}
        for z in obj.get("zones") or []
        for r in z.get("resources") or []
        if r["name"] == BATCH_CPU
    }


def test_numa_zone_values_reach_the_nodes_noderesourcetopology(
    cluster: ApiServer, run_qosd: Callable[..., Running]
) -> None:
    """spec.reclaim.zones: each NUMA node's value goes into the zone of the same name of this
    node's NodeResourceTopology through the official client's CustomObjectsApi (get, then update
    with the resourceVersion), as Koordinator's slo-controller does; a zone qosd does not compute
    (node-9) is reset to 0. The zones are this machine's NUMA nodes (the collector reads sysfs):
    each lends its CPUs less its even share of web's 500m request (request policy, no margin).
    tests/test_nrt_adapter.py covers a missing object, conflicts and the re-check interval."""
    from engine.sources.sysfs import TopologySource

    topology = TopologySource(Path("/sys"), Path("/proc")).topology
    n = len(topology.numa_ids)
    want = {f"node-{i}": str(len(topology.cpus_of_numa(i)) * 1000 - -(-500 // n)) for i in topology.numa_ids}
    cluster.install_crd(NRT_CRD)
    cluster.put(nrt(list(want)))
    run_qosd(ZONES)

    wait_for("node-9 reset", lambda: zone_batch_cpu(cluster).get("node-9", {}).get("allocatable") == "0")
    assert zone_batch_cpu(cluster) == {
        **{z: {"capacity": v, "allocatable": v, "available": v} for z, v in want.items()},
        "node-9": {"capacity": "0", "allocatable": "0", "available": "0"},
    }
    writes = cluster.requests.matching("PUT", r"/noderesourcetopologies/node-a$")
    assert writes and all(r.status == 200 for r in writes)
    time.sleep(0.5)  # more rounds: the zones hold their values, so nothing more is written
    assert len(cluster.requests.matching("PUT", r"/noderesourcetopologies/node-a$")) == len(writes)
