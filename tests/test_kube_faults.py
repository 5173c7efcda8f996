"""Kubernetes API faults, end to end: each fault injected in the API-server emulator (tests/kubeapi),
reached over real HTTP by the official client configured as qosd configures it
(``engine.kube.client.load_api_client``), and the outcome qosd must reach asserted: the objects it
ends up seeing, the requests the server logged, the status it eventually wrote, what readiness says.
Nothing here asserts how long anything took; backoffs are made short where a test would otherwise
wait out production values (the emulator's Retry-After of 1 s is waited out for real, twice).

The row of docs/kubernetes.md's "Faults" table each test proves is named in its docstring.
"""

from __future__ import annotations

import datetime
import email.utils
import json
import os
import random
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from engine.adapters.cgroup import CgroupAdapter
from engine.cgroups.mounts import CgroupUnavailable
from engine.config.crd import qosd_crds
from engine.kube.apicall import retry_after
from engine.kube.client import GROUP, MAX_RETRY_AFTER, POLICY_PLURAL, Backoff, TokenFile, load_api_client
from engine.kube.reflector import Reflector
from tests.conftest import policy_text
from tests.kubeapi import ApiServer
from tests.test_kube_daemon import (
    BASE,
    EVICT,
    NODE,
    Running,
    daemon_args,
    pod,
    populate,
    rbac_rules,
    start_daemon,
    stop_daemons,
    wait_for,
)

PODS = r"^/api/v1/pods$"
HOST_CGROUPS = Path("/sys/fs/cgroup")
# Classes without cgroup settings: the process started on the host's cgroupfs writes nothing there.
EVICT_ONLY = policy_text("classes:\n  - name: be\n    match: [{labels: {qos: be}}]\nrules:", "evict-only") + EVICT
ALL = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]
REPO = Path(__file__).resolve().parents[1]


class RecordingBackoff(Backoff):
    """A short backoff that records what the server asked for at each wait."""

    def __init__(self) -> None:
        super().__init__(base=0.001, cap=0.01)
        self.asked: list[float | None] = []

    def sleep(self, stop: threading.Event, retry_after: float | None = None) -> bool:
        self.asked.append(retry_after)
        return super().sleep(stop, retry_after)


def simple_pod(name: str, on: str = "n1", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {"nodeName": on, "containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Running"},
    }


def names(r: Reflector) -> set[str]:
    return {o["metadata"]["name"] for o in r.items().values()}


def statuses(server: ApiServer, verb: str, path: str = "/api/v1/pods") -> list[int]:
    return [q.status for q in server.requests if q.path == path and q.verb == verb]


@pytest.fixture
def reflect(apiserver: ApiServer, tmp_path: Path) -> Iterator[Callable[..., Reflector]]:
    """A started reflector of node n1's pods through a client configured as qosd's."""
    made: list[Reflector] = []

    def _make(kubeconfig: Path | None = None, **kwargs: Any) -> Reflector:
        api = load_api_client(kubeconfig or apiserver.kubeconfig(tmp_path / f"kc-{len(made)}"))
        kwargs.setdefault("backoff", Backoff(base=0.001, cap=0.01))
        r = Reflector("pods", client.CoreV1Api(api).list_pod_for_all_namespaces, field_selector="spec.nodeName=n1", **kwargs)
        made.append(r)
        r.start()
        return r

    yield _make
    for r in made:
        r.stop()


# ------------------------------------------------------------------------------ 429 and Retry-After


@pytest.mark.parametrize(
    ("failures", "asked", "low", "high"),
    [
        (0, None, 0.1, 0.2),  # no Retry-After: equal jitter over the backoff ceiling
        (0, 1.0, 1.0, 1.2),  # never before the server asked, spread over a fifth more
        (3, 1.0, 1.0, 1.6),  # the backoff already waits longer than asked
        (0, 10_000.0, MAX_RETRY_AFTER, 1.2 * MAX_RETRY_AFTER),  # an absurd Retry-After is capped
    ],
)
def test_backoff_never_waits_less_than_retry_after_and_spreads_the_herd(
    failures: int, asked: float | None, low: float, high: float
) -> None:
    delays = []
    for seed in range(50):
        b = Backoff(base=0.2, cap=30.0, failures=failures, rng=random.Random(seed))
        delays.append(b.next_delay(asked))
    assert all(low <= d <= high for d in delays), (min(delays), max(delays))
    assert len({round(d, 6) for d in delays}) > 40  # jittered: fifty daemons do not come back together


def _api_exception(status: int, headers: dict[str, str], body: dict[str, Any] | None = None) -> ApiException:
    exc = ApiException(status=status, reason="TooManyRequests")
    exc.headers = headers
    exc.body = json.dumps(body) if body is not None else None
    return exc


def test_retry_after_is_read_from_the_header_an_http_date_or_the_status_details() -> None:
    assert retry_after(_api_exception(429, {"Retry-After": "7"})) == 7.0
    soon = email.utils.format_datetime(datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=120), usegmt=True)
    assert 100 < (retry_after(_api_exception(429, {"Retry-After": soon})) or 0) <= 120
    assert retry_after(_api_exception(429, {}, {"details": {"retryAfterSeconds": 3}})) == 3.0
    assert retry_after(_api_exception(500, {})) is None
    assert retry_after(OSError("reset")) is None


def test_429_with_retry_after_on_list_and_watch_is_waited_out_by_qosd_not_hidden_in_urllib3(
    apiserver: ApiServer, reflect: Callable[..., Reflector]
) -> None:
    """Faults table: 429 on list and watch. urllib3's default retries would sleep the Retry-After
    out themselves (blocking, unjittered, and after three a MaxRetryError that reads like an
    unreachable server); qosd's client sees each 429 and its backoff waits at least what was asked."""
    apiserver.put(simple_pod("a"))
    apiserver.fail_next(1, 429, path=PODS, verb="list", retry_after=1)
    apiserver.fail_next(1, 429, path=PODS, verb="watch", retry_after=1)
    backoff = RecordingBackoff()
    r = reflect(backoff=backoff)
    assert r.wait_synced(20)
    wait_for("the watch after its 429", lambda: statuses(apiserver, "watch")[-1:] == [200])
    apiserver.put(simple_pod("b"))
    wait_for("b through the watch", lambda: names(r) == {"a", "b"})
    assert statuses(apiserver, "list") == [429, 200]
    assert statuses(apiserver, "watch")[:2] == [429, 200]
    assert backoff.asked == [1.0, 1.0]
    assert r.stats.errors == 2 and "HTTP 429" in r.stats.last_error


def test_504_on_list_is_retried_and_is_not_taken_for_a_resource_version_problem(
    apiserver: ApiServer, reflect: Callable[..., Reflector]
) -> None:
    """Faults table: 504 on list."""
    apiserver.put(simple_pod("a"))
    apiserver.fail_next(2, 504, path=PODS, verb="list")
    r = reflect()
    assert r.wait_synced(20)
    assert names(r) == {"a"}
    assert statuses(apiserver, "list") == [504, 504, 200]
    s = r.stats
    assert (s.errors, s.lists, s.relists_reset) == (2, 1, 0)
    assert r.problem() is None


# ------------------------------------------------------------------------------ 403 and 401


def test_403_on_list_then_on_watch_is_retried_and_says_which_verb_on_which_resource(
    apiserver: ApiServer, reflect: Callable[..., Reflector], tmp_path: Path
) -> None:
    """Faults table: 403 on list/watch (RBAC missing)."""
    apiserver.put(simple_pod("a"))
    token = apiserver.authorize("limited", [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}])
    r = reflect(apiserver.kubeconfig(tmp_path / "limited", token))
    wait_for("two refused lists", lambda: r.stats.errors >= 2)
    why = r.problem() or ""
    assert why.startswith("pods list: HTTP 403 Forbidden")
    assert 'cannot list resource "pods"' in why and "no objects yet" in why
    assert "ClusterRole" in why  # where to look
    assert not r.synced

    apiserver.authorize(token, [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}])
    assert r.wait_synced(20)
    wait_for("a refused watch", lambda: "watch" in (r.problem() or ""))
    why = r.problem() or ""
    assert why.startswith("pods watch: HTTP 403 Forbidden") and 'cannot watch resource "pods"' in why
    assert "acting on the last objects seen" in why

    apiserver.authorize(token, [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}])
    apiserver.put(simple_pod("b"))
    wait_for("b once the watch is allowed", lambda: names(r) == {"a", "b"})
    wait_for("no problem left", lambda: r.problem() is None)


def _token_kubeconfig(server: ApiServer, path: Path, token_file: Path) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server.url}}],
                "users": [{"name": "sa", "user": {"tokenFile": token_file.name}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "sa"}}],
                "current-context": "c",
            }
        )
    )
    return path


def test_a_rotated_token_file_is_re_read_after_the_server_refuses_the_old_token(
    apiserver: ApiServer, reflect: Callable[..., Reflector], tmp_path: Path
) -> None:
    """Faults table: 401 and a rotated service-account token. The kubelet rotates the projected
    token; the API server stops taking the old one. The official client would keep sending the token
    it read at start (kubeconfig tokenFile) or re-read it only each minute (in-cluster)."""
    token_file = tmp_path / "token"
    token_file.write_text(apiserver.authorize("token-one", ALL))
    apiserver.authorize("token-two", ALL)
    apiserver.put(simple_pod("a"))
    r = reflect(_token_kubeconfig(apiserver, tmp_path / "kubeconfig", token_file))
    assert r.wait_synced(20)
    wait_for("the watch open", lambda: apiserver.open_watches() >= 1)

    token_file.write_text("token-two\n")  # the kubelet's rotation
    apiserver.revoke("token-one")
    apiserver.drop_watches()
    apiserver.put(simple_pod("b"))
    wait_for("b, seen with the new token", lambda: names(r) == {"a", "b"})
    assert 401 in statuses(apiserver, "watch")
    assert statuses(apiserver, "watch")[-1] == 200


def test_in_cluster_the_projected_token_is_re_read_each_minute_and_after_a_401(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The in-cluster path of load_api_client installs the same TokenFile on the service-account
    token (here in a temporary directory; /var/run/secrets/kubernetes.io/serviceaccount in a pod)."""
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    token = tmp_path / "token"
    token.write_text("first")
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    api = load_api_client(serviceaccount_token=token)
    cfg = api.configuration
    assert cfg.host == "https://10.96.0.1:443"
    assert cfg.get_api_key_with_prefix("BearerToken") == "Bearer first"
    hook = cfg.refresh_api_key_hook
    tokens = hook.__self__
    assert isinstance(tokens, TokenFile)
    token.write_text("second")
    assert cfg.get_api_key_with_prefix("BearerToken") == "Bearer first"  # within the minute
    tokens.invalidate()  # what a 401 does
    assert cfg.get_api_key_with_prefix("BearerToken") == "Bearer second"
    now = [0.0]
    periodic = TokenFile(token, period=60.0, clock=lambda: now[0])
    periodic._refresh(cfg)
    token.write_text("third")
    now[0] = 59.0
    periodic._refresh(cfg)
    assert cfg.api_key["BearerToken"] == "Bearer second"
    now[0] = 60.0
    periodic._refresh(cfg)
    assert cfg.api_key["BearerToken"] == "Bearer third"
    token.unlink()  # mid-swap of the ..data symlink: keep the last token
    now[0] = 200.0
    periodic._refresh(cfg)
    assert cfg.api_key["BearerToken"] == "Bearer third"


# ------------------------------------------------------------------------------ watches that go wrong


def test_a_watch_that_stays_open_and_sends_nothing_is_detected_and_relisted(
    apiserver: ApiServer, reflect: Callable[..., Reflector]
) -> None:
    """Faults table: a silent watch (no event, no bookmark: a half-open connection through a proxy,
    a wedged watch cache). The server sends bookmarks every 0.1 s here, so a healthy watch is never
    quiet for the 2 s idle bound."""
    apiserver.bookmark_interval = 0.1
    apiserver.put(simple_pod("a"))
    silent = apiserver.stall(path=PODS, verb="watch")
    r = reflect(idle_timeout=2.0)
    assert r.wait_synced(20)
    assert silent.hit.wait(20)
    apiserver.put(simple_pod("quiet"))  # never delivered on the silent stream
    wait_for("the pod through the relist", lambda: names(r) == {"a", "quiet"})
    s = r.stats
    assert s.idle_timeouts >= 1 and s.lists >= 2  # detected, then relisted (not resumed)
    apiserver.put(simple_pod("after"))
    wait_for("the next watch working", lambda: "after" in names(r))


def test_an_api_server_restart_that_resets_resource_versions_relists(
    apiserver: ApiServer, reflect: Callable[..., Reflector]
) -> None:
    """Faults table: an API-server restart that resets resourceVersions (etcd restored or rebuilt).
    The reflector's resourceVersion is now one the server has not reached: the watch cache answers
    "Too large resource version" and the reflector relists instead of asking again forever."""
    apiserver.too_large_wait = 0.2
    apiserver.put(simple_pod("a"))
    for i in range(40):  # move the revision well past what a rebuilt store will count to
        apiserver.put(simple_pod("a", v=str(i)))
    r = reflect()
    assert r.wait_synced(20)
    wait_for("the watch open", lambda: apiserver.open_watches() >= 1)
    before = int(r.resource_version)

    apiserver.restart(reset_resource_versions=True)
    assert int(apiserver.resource_version) < before
    apiserver.put(simple_pod("b"))
    apiserver.put(simple_pod("a", v="after-restart"))
    wait_for(
        "the store to match the restarted server",
        lambda: names(r) == {"a", "b"} and r.items()["default/a"]["metadata"]["labels"] == {"v": "after-restart"},
    )
    served = {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in apiserver.list("v1", "Pod")}
    assert {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in r.items().values()} == served
    assert r.stats.relists_reset >= 1 and r.stats.lists >= 2
    apiserver.put(simple_pod("c"))
    wait_for("c through the new watch", lambda: "c" in names(r))


# ------------------------------------------------------------------------------ the daemon


@pytest.fixture
def cluster(apiserver: ApiServer) -> ApiServer:
    return populate(apiserver)


@pytest.fixture
def start(cluster: ApiServer, tmp_path: Path) -> Iterator[Callable[..., Running]]:
    """Start kube-mode daemons (each its own node, directory and client) running their loops."""
    started: list[Running] = []

    def _start(
        policy: str = BASE, *extra: str, node_name: str = NODE, rules: list[dict[str, Any]] | None = None
    ) -> Running:
        token = cluster.authorize(f"sa-{node_name}", rules if rules is not None else rbac_rules())
        started.append(start_daemon(cluster, tmp_path / node_name, node_name, token, policy, extra))
        return started[-1]

    yield _start
    stop_daemons(started)


def _policy_cr(name: str, threshold: int) -> str:
    return (
        f"apiVersion: qosd.io/v1alpha1\nkind: QoSPolicy\nmetadata: {{name: {name}}}\nspec:\n  priority: 50\n"
        f"  reclaim:\n    cpu: {{reclaimThresholdPercent: {threshold}}}\n"
    )


def test_readiness_says_which_watch_rbac_refuses_and_recovers_when_granted(
    cluster: ApiServer, start: Callable[..., Running]
) -> None:
    """Faults table: 403 on watch, as the daemon reports it on /readyz."""
    rules = [r for r in rbac_rules() if "qospolicies" not in r.get("resources", [])]
    rules.append({"apiGroups": [GROUP], "resources": ["qospolicies"], "verbs": ["get", "list"]})
    q = start(rules=rules)
    wait_for("not ready because of the watch", lambda: "403" in q.daemon.ready()[1])
    ok, why = q.daemon.ready()
    assert not ok
    assert "qospolicies watch: HTTP 403 Forbidden" in why and 'cannot watch resource "qospolicies"' in why
    cluster.authorize(f"sa-{NODE}", rbac_rules())
    wait_for("ready once RBAC allows the watch", lambda: q.daemon.ready()[0])


def test_status_writes_survive_5xx_409_and_timeouts_and_end_up_written(
    cluster: ApiServer, start: Callable[..., Running], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Faults table: node status publish, node condition, QoSNodeStatus and QoSPolicy status writes
    answered with 500, 409, 503 and 504 or left hanging past the client's timeout: each is retried,
    no tick fails, and every status ends up written."""
    import engine.adapters.kube
    import engine.kube.status

    short = (2.0, 0.5)  # a hung write times out after half a second instead of 30
    monkeypatch.setattr(engine.adapters.kube, "REQUEST_TIMEOUT", short)
    monkeypatch.setattr(engine.kube.status, "REQUEST_TIMEOUT", short)
    monkeypatch.setattr(engine.kube.status, "STATUS_RETRY", (0.05, 0.5))
    node_status = rf"^/api/v1/nodes/{NODE}/status$"
    for code in (500, 409, 503):
        cluster.fail_next(1, code, method="PATCH", path=node_status, retry_after=0)
    hung_node = cluster.stall("PATCH", node_status)
    cluster.fail_next(1, 500, method="POST", path=r"/qosnodestatuses$")
    for code in (409, 504):
        cluster.fail_next(1, code, method="PATCH", path=rf"/qosnodestatuses/{NODE}/status$")
    hung_own = cluster.stall("PATCH", rf"/qosnodestatuses/{NODE}/status$")
    policy_status = r"/qospolicies/overlay/status$"
    for code in (500, 409):
        cluster.fail_next(1, code, method="PATCH", path=policy_status)
    hung_policy = cluster.stall("PATCH", policy_status)

    flagged = BASE + "    - name: flag\n      then: {condition: {type: QosdTest, reason: Flagged, message: test}}\n"
    q = start(flagged)
    q.apply_policy(_policy_cr("overlay", 100))  # the same threshold: 2 cores - web's 500m

    def node_obj() -> dict[str, Any]:
        return cluster.get("v1", "Node", NODE) or {}

    wait_for("batch-cpu published", lambda: node_obj()["status"].get("capacity", {}).get("example.com/batch-cpu") == "1500")
    wait_for(
        "the condition set",
        lambda: any(c["type"] == "QosdTest" and c["status"] == "True" for c in node_obj()["status"]["conditions"]),
    )
    wait_for(
        "QoSNodeStatus naming the policy",
        lambda: q.node_status().get("applied", {}).get("policies") == [{"name": "overlay", "generation": 1}],
    )
    assert q.node_status()["applied"]["generation"] == q.generation()
    wait_for("Valid=True on the policy", lambda: q.condition("overlay", "Valid").get("status") == "True")
    assert hung_node.hit.is_set() and hung_own.hit.is_set() and hung_policy.hit.is_set()
    for stall in (hung_node, hung_own, hung_policy):
        stall.release(drop=True)
    failed = [r.status for r in cluster.requests.matching("PATCH", node_status) if r.status >= 400]
    assert sorted(failed) == [409, 500, 503]
    assert q.metric("qosd_actions_total", action="publishNodeResource", result="failed") + q.metric(
        "qosd_actions_total", action="setNodeCondition", result="failed"
    ) >= 4
    assert q.metric("qosd_ticks_total", result="error") == 0
    assert q.daemon.last_error is None


def test_a_deleted_crd_is_reported_and_the_daemon_recovers_when_it_comes_back(
    cluster: ApiServer, start: Callable[..., Running]
) -> None:
    """Faults table: a deleted CRD. Deleting a CRD deletes its QoSPolicies (the API server's
    finalizer; watchers see them DELETED), then lists and watches answer 404. The daemon keeps
    running its last good generation built from what the cluster holds, readiness names the
    missing resource, and it picks the policies up again once the CRD is back."""
    q = start()
    q.apply_policy(_policy_cr("overlay", 90))
    wait_for("generation 2", lambda: q.generation() == 2)
    admin = client.ApiextensionsV1Api(q.admin)
    admin.delete_custom_resource_definition(f"{POLICY_PLURAL}.{GROUP}")
    wait_for("readiness to name the missing resource", lambda: "404" in q.daemon.ready()[1])
    why = q.daemon.ready()[1]
    assert why.startswith("qospolicies ") and "CustomResourceDefinition" in why
    ticks = q.daemon.ticks
    wait_for("ticks go on", lambda: q.daemon.ticks > ticks + 3)
    assert q.daemon.reloader.engine is not None and q.metric("qosd_ticks_total", result="error") == 0
    generation = q.generation()

    for crd in qosd_crds():
        if crd["spec"]["names"]["plural"] == POLICY_PLURAL:
            cluster.install_crd(crd)
    q.apply_policy(_policy_cr("overlay", 80))
    wait_for("the policy again, in a new generation", lambda: q.generation() > generation)
    wait_for("ready again", lambda: q.daemon.ready()[0])
    assert q.daemon.reloader.engine is not None
    assert [p["name"] for p in q.node_status()["applied"]["policies"]] in ([], ["overlay"])
    wait_for("the node status naming it", lambda: [p["name"] for p in q.node_status()["applied"]["policies"]] == ["overlay"])


def _lease(cluster: ApiServer) -> dict[str, Any]:
    return cluster.get("coordination.k8s.io/v1", "Lease", "qosd-policy-status", "qosd-system") or {}


def test_leader_lease_loss_and_failover_between_two_daemons(
    cluster: ApiServer, start: Callable[..., Running], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Faults table: leader-lease loss and failover. A leader whose Lease is taken stops writing
    QoSPolicy status; when the holder stops renewing, one of the two daemons takes over, and a
    policy changed meanwhile gets its status written by the new leader."""
    import engine.kube.status

    monkeypatch.setattr(engine.kube.status, "LEASE_TIMING", (3, 2, 1))
    a = start()
    b = start(node_name="node-b")
    wait_for("a leader", lambda: _lease(cluster).get("spec", {}).get("holderIdentity") in (NODE, "node-b"))
    daemons = {NODE: a, "node-b": b}
    leader_name = _lease(cluster)["spec"]["holderIdentity"]
    leader = daemons[leader_name]
    other = daemons["node-b" if leader_name == NODE else NODE]
    controller = next(s for s in leader.daemon.services if isinstance(s, engine.kube.status.PolicyStatusController))
    wait_for("the leader leading", controller.leading.is_set)

    # Someone else takes the Lease (a third replica, a manual edit): the leader must step down.
    lease = _lease(cluster)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    lease["spec"].update(holderIdentity="intruder", renewTime=now, acquireTime=now, leaseDurationSeconds=3)
    cluster.put(lease)
    wait_for("the old leader to step down", lambda: not controller.leading.is_set())
    # The intruder never renews: after its lease duration one of the daemons takes over.
    wait_for("a daemon leading again", lambda: _lease(cluster)["spec"]["holderIdentity"] in daemons, timeout=30)
    new_name = _lease(cluster)["spec"]["holderIdentity"]

    # The new leader writes status; then it stops (a node drained), and the other takes over.
    other.apply_policy(_policy_cr("overlay", 90))
    wait_for("Valid=True from the new leader", lambda: other.condition("overlay", "Valid").get("status") == "True")
    stopping = daemons[new_name]
    stopping.daemon.stop.set()
    stopping.thread.join(timeout=15)
    survivor_name = "node-b" if new_name == NODE else NODE
    wait_for("the survivor leading", lambda: _lease(cluster)["spec"]["holderIdentity"] == survivor_name, timeout=30)
    survivor = daemons[survivor_name]
    survivor.apply_policy(_policy_cr("overlay", 70))
    wait_for(
        "observedGeneration 2 from the survivor",
        lambda: survivor.policy("overlay").get("status", {}).get("observedGeneration") == 2,
    )


# ------------------------------------------------------------------------------ kill -9


def _ticks(port: int) -> float:
    """qosd_ticks_total{result="ok"} from the process's /metrics (-1 while it is not serving yet)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
            text = resp.read().decode()
    except OSError:
        return -1.0
    for line in text.splitlines():
        if line.startswith('qosd_ticks_total{result="ok"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _terminating(cluster: ApiServer, name: str) -> bool:
    return bool(((cluster.get("v1", "Pod", name, "default") or {}).get("metadata") or {}).get("deletionTimestamp"))


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.realcgroup
def test_kill_9_between_the_write_ahead_record_and_the_eviction_call_never_evicts_twice(
    cluster: ApiServer, tmp_path: Path
) -> None:
    """Faults table: kill -9 in Kubernetes mode between the write-ahead eviction record and the API
    call. A real ``qosd run`` process asks for an eviction; the emulator holds the request; the test
    kills the process with SIGKILL while it waits and starts it again while the request is still in
    flight (the pod still Running). The restarted daemon finds the eviction in its state file and
    asks for no second one, tick after tick, before and after the first request goes through."""
    try:  # a separate process cannot be handed a fake tree: it needs a mounted cgroupfs
        CgroupAdapter.detect(HOST_CGROUPS)
    except CgroupUnavailable as exc:
        pytest.skip(f"qosd run needs a mounted cgroup filesystem: {exc}")
    cluster.pod_termination_delay = 120.0  # the evicted pod stays listed (terminating) throughout
    cluster.put(pod("batch", "be"))
    uid = cluster.get("v1", "Pod", "batch", "default")["metadata"]["uid"]  # type: ignore[index]
    token = cluster.authorize("sa-kill", rbac_rules())
    kubeconfig = cluster.kubeconfig(tmp_path / "kubeconfig", token)
    held = cluster.stall("POST", r"/pods/batch/eviction$")
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    env["PYTHONPATH"] = str(REPO)

    def run(port: int) -> subprocess.Popen[bytes]:
        extra = ("--listen", f"127.0.0.1:{port}", "--no-policy-status")
        args = daemon_args(tmp_path, kubeconfig, NODE, EVICT_ONLY, extra, tree=HOST_CGROUPS)
        return subprocess.Popen(
            [sys.executable, "-m", "engine.cli", *args], env=env, cwd=tmp_path,
            stdout=subprocess.DEVNULL, stderr=open(tmp_path / f"qosd-{port}.log", "wb"),
        )  # fmt: skip

    first = run(_free_port())
    try:
        assert held.hit.wait(60), "the daemon never asked for the eviction (see qosd-*.log)"
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
    state = json.loads((tmp_path / "state.json").read_text())
    assert uid in state["state"]["evicting"]  # written before the call

    # The request is still in flight at the server while the daemon restarts: the pod still looks
    # Running to the new process, which would evict it again without the record.
    port = _free_port()
    second = run(port)
    try:
        wait_for("ten ticks of the restarted daemon", lambda: _ticks(port) >= 10, timeout=60)
        assert cluster.requests.matching("POST", r"/pods/batch/eviction$") == []
        held.release()  # the first request goes through now
        wait_for("the pod terminating", lambda: _terminating(cluster, "batch"))
        ticks = _ticks(port)
        wait_for("more ticks", lambda: _ticks(port) >= ticks + 5, timeout=60)
        assert second.poll() is None
    finally:
        second.send_signal(signal.SIGTERM)
        try:
            second.wait(15)
        except subprocess.TimeoutExpired:
            second.kill()
    evictions = cluster.requests.matching("POST", r"/pods/batch/eviction$")
    assert [r.status for r in evictions] == [201]
    assert cluster.get("v1", "Pod", "batch", "default") is not None  # still terminating: no second try
