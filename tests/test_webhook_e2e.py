"""The webhook end to end: the API-server emulator calls a real ``qosd webhook`` process over HTTPS,
as kube-apiserver does, through the ValidatingWebhookConfiguration qosd ships
(examples/deploy/components/webhook), and the official client sees what a cluster would answer.

The webhook runs with a token limited to the component's ClusterRole (403 on anything else), and
its serving certificate is made here at run time and checked by the emulator against the
configuration's caBundle for the Service's name, ``qosd-webhook.qosd-system.svc``."""

from __future__ import annotations

import copy
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from engine.config.crd import qosd_crds
from tests.conftest import policy_text
from tests.kubeapi import ApiServer
from tests.kubeapi.tls import CA
from tests.kubectl import Kubectl
from tests.qosdcli import ROOT
from tests.realparts import kubectl_missing
from tests.secret_volume import write_secret_volume
from tests.test_webhook import BAD_REFERENCE as BAD
from tests.test_webhook import GOOD

COMPONENT = ROOT / "examples" / "deploy" / "components" / "webhook"
HOOK = "qospolicy.qosd.io"
SERVICE = ("qosd-system", "qosd-webhook")
GROUP, VERSION, PLURAL = "qosd.io", "v1alpha1", "qospolicies"

def component(kind: str, name: str) -> dict[str, Any]:
    for path in sorted(COMPONENT.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == kind and doc["metadata"]["name"] == name:
                return dict(doc)
    raise AssertionError(f"{kind}/{name} is not in {COMPONENT}")


def body(spec: str, name: str) -> dict[str, Any]:
    return dict(yaml.safe_load(policy_text(spec, name=name)))


@dataclass
class Webhook:
    proc: subprocess.Popen[str]
    port: int
    log: list[str]


def start_webhook(server: ApiServer, tmp: Path, ca: CA) -> Webhook:
    rules = component("ClusterRole", "qosd-webhook")["rules"]
    token = server.authorize(
        "qosd-webhook-token", rules, user="system:serviceaccount:qosd-system:qosd-webhook"
    )
    kubeconfig = server.kubeconfig(tmp / "kubeconfig", token)
    cert, key, _ = ca.issue("qosd-webhook.qosd-system.svc")
    write_secret_volume(tmp / "tls", cert, key, "2026_11_26_10_00_00.1")
    env = {k: v for k, v in os.environ.items() if k not in ("QOSD_DEBUG", "KUBERNETES_SERVICE_HOST")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "engine.cli",
            "webhook",
            "--kubeconfig",
            str(kubeconfig),
            "--listen",
            "127.0.0.1:0",
            "--shutdown-delay",
            "0",
            "--log-level",
            "debug",
            "--tls-cert-file",
            str(tmp / "tls" / "tls.crt"),
            "--tls-private-key-file",
            str(tmp / "tls" / "tls.key"),
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    log: list[str] = []
    serving = threading.Event()
    port: list[int] = []

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            log.append(line.rstrip("\n"))
            try:
                msg = json.loads(line).get("msg", "")
            except ValueError:
                continue
            if msg.startswith("webhook serving https://"):
                port.append(int(msg.rsplit(":", 1)[1].split("/")[0]))
                serving.set()

    threading.Thread(target=read, daemon=True).start()
    if not serving.wait(120):
        proc.kill()
        raise AssertionError("qosd webhook did not start:\n" + "\n".join(log))
    return Webhook(proc, port[0], log)


def ready(hook: Webhook, ca: CA) -> bool:
    import http.client

    ctx = ssl.create_default_context(cadata=ca.pem.decode())
    ctx.check_hostname = False
    conn = http.client.HTTPSConnection("127.0.0.1", hook.port, context=ctx, timeout=30)
    conn.request("GET", "/readyz")
    return conn.getresponse().status == 200


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ApiServer, Webhook, CA]]:
    server = ApiServer(tls=True)  # HTTPS: the real kubectl sends its token only over TLS
    server.start()
    hook: Webhook | None = None
    try:
        for crd in qosd_crds():
            server.install_crd(crd)
        ca = CA.make()
        hook = start_webhook(server, tmp_path_factory.mktemp("webhook"), ca)
        for _ in range(600):  # the first list of QoSPolicies; bounded, not timed
            if ready(hook, ca) or hook.proc.poll() is not None:
                break
            threading.Event().wait(0.05)
        assert ready(hook, ca), "\n".join(hook.log)
        yield server, hook, ca
    finally:
        if hook is not None:
            hook.proc.terminate()  # SIGTERM, as the kubelet stops it: a clean exit
            assert hook.proc.wait(60) == 0, "\n".join(hook.log)
        server.stop()


@pytest.fixture
def api(env: tuple[ApiServer, Webhook, CA]) -> Iterator[Any]:
    """The shipped configuration with the test CA as caBundle, the Service routed to the webhook."""
    server, hook, ca = env
    server.admission.route(*SERVICE, ("127.0.0.1", hook.port))
    config = copy.deepcopy(component("ValidatingWebhookConfiguration", "qosd-webhook"))
    config["webhooks"][0]["clientConfig"]["caBundle"] = ca.bundle
    api_client = server.api_client()
    admission = client.AdmissionregistrationV1Api(api_client)
    admission.create_validating_webhook_configuration(config)
    try:
        yield client.CustomObjectsApi(api_client)
    finally:
        admission.delete_validating_webhook_configuration("qosd-webhook")
        for obj in server.list(f"{GROUP}/{VERSION}", "QoSPolicy"):
            server.delete(f"{GROUP}/{VERSION}", "QoSPolicy", obj["metadata"]["name"])
        server.admission.reviews.clear()


def create(api: Any, spec: str, name: str, **kwargs: Any) -> Any:
    return api.create_cluster_custom_object(GROUP, VERSION, PLURAL, body(spec, name), **kwargs)


def refusal(exc: ApiException) -> dict[str, Any]:
    status: dict[str, Any] = json.loads(exc.body)
    return status


def test_a_bad_policy_is_refused_with_qosds_located_message(env: Any, api: Any) -> None:
    server = env[0]
    with pytest.raises(ApiException) as err:
        create(api, BAD, "ghost-evict")
    status = refusal(err.value)
    assert err.value.status == 422 and status["reason"] == "Invalid"
    prefix = f'admission webhook "{HOOK}" denied the request: '
    assert status["message"].startswith(
        prefix + "QoSPolicy/ghost-evict $.spec.rules[0].then.evict.victims.classes[0]: error:"
    )
    assert "hint:" in status["message"]
    assert server.get(f"{GROUP}/{VERSION}", "QoSPolicy", "ghost-evict") is None


def test_the_review_is_the_one_kube_apiserver_sends(env: Any, api: Any) -> None:
    server = env[0]
    created = create(api, GOOD, "batch-audit")
    assert created["metadata"]["name"] == "batch-audit"
    patched = api.patch_cluster_custom_object(
        GROUP, VERSION, PLURAL, "batch-audit", {"spec": {"priority": 11}}
    )
    assert patched["spec"]["priority"] == 11
    create_review, update_review = server.admission.reviews
    for review in (create_review, update_review):
        assert review["apiVersion"] == "admission.k8s.io/v1" and review["kind"] == "AdmissionReview"
        request = review["request"]
        assert request["kind"] == {"group": GROUP, "version": VERSION, "kind": "QoSPolicy"}
        assert request["resource"] == {"group": GROUP, "version": VERSION, "resource": PLURAL}
        assert request["userInfo"]["username"] == "kubernetes-admin"
        assert request["dryRun"] is False and request["uid"]
    assert create_review["request"]["operation"] == "CREATE" and create_review["request"]["oldObject"] is None
    assert update_review["request"]["operation"] == "UPDATE"
    assert update_review["request"]["oldObject"]["spec"]["priority"] == 10
    assert update_review["request"]["object"]["spec"]["priority"] == 11


def test_a_policy_that_conflicts_with_a_stored_one_is_refused(env: Any, api: Any) -> None:
    """The webhook checks a policy with the QoSPolicies already in the cluster (its own watch):
    two equal-priority policies that define one class differently fail every node's reload."""
    from tests.test_webhook import CLASS_A, CLASS_B

    create(api, CLASS_A, "tenant-a")
    for _ in range(400):  # until the webhook's watch has seen tenant-a (a dry run stores nothing)
        try:
            create(api, CLASS_B, "tenant-b", dry_run="All")
        except ApiException:
            break
        threading.Event().wait(0.05)
    with pytest.raises(ApiException) as err:
        create(api, CLASS_B, "tenant-b")
    message = refusal(err.value)["message"]
    assert message.startswith(f'admission webhook "{HOOK}" denied the request: ')
    assert "QoSPolicy/tenant-a" in message and "QoSPolicy/tenant-b" in message


def test_an_update_that_breaks_a_policy_is_refused_and_the_stored_one_kept(env: Any, api: Any) -> None:
    server = env[0]
    create(api, GOOD, "batch-audit")
    broken = yaml.safe_load(policy_text(BAD, name="batch-audit"))["spec"]
    with pytest.raises(ApiException) as err:
        api.patch_cluster_custom_object(GROUP, VERSION, PLURAL, "batch-audit", {"spec": broken})
    assert refusal(err.value)["message"].startswith(
        f'admission webhook "{HOOK}" denied the request: QoSPolicy/batch-audit '
    )
    assert server.get(f"{GROUP}/{VERSION}", "QoSPolicy", "batch-audit")["spec"]["priority"] == 10


def test_a_dry_run_is_checked_too(env: Any, api: Any) -> None:
    with pytest.raises(ApiException) as err:
        create(api, BAD, "ghost-evict", dry_run="All")
    assert err.value.status == 422
    assert env[0].admission.reviews[-1]["request"]["dryRun"] is True


def test_status_writes_and_deletes_never_wait_on_the_webhook(env: Any, api: Any) -> None:
    """The daemons write QoSPolicy status: that must work while the webhook is down."""
    server = env[0]
    create(api, GOOD, "batch-audit")
    server.admission.route(*SERVICE, closed_port())
    obj = api.get_cluster_custom_object(GROUP, VERSION, PLURAL, "batch-audit")
    obj["status"] = {"observedGeneration": 1}
    api.replace_cluster_custom_object_status(GROUP, VERSION, PLURAL, "batch-audit", obj)
    api.delete_cluster_custom_object(GROUP, VERSION, PLURAL, "batch-audit")


def closed_port() -> tuple[str, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now: connection refused
    return ("127.0.0.1", port)


def set_failure_policy(server: ApiServer, policy: str, timeout: int | None = None) -> None:
    """A strategic merge patch of the webhook of that name (webhooks merge by name)."""
    admission = client.AdmissionregistrationV1Api(server.api_client())
    patch = {
        "webhooks": [
            {"name": HOOK, "failurePolicy": policy, **({"timeoutSeconds": timeout} if timeout else {})}
        ]
    }
    admission.patch_validating_webhook_configuration("qosd-webhook", patch)


def test_webhook_down_fails_closed_with_the_shipped_failure_policy(env: Any, api: Any) -> None:
    server = env[0]
    server.admission.route(*SERVICE, closed_port())
    with pytest.raises(ApiException) as err:
        create(api, GOOD, "batch-audit")
    status = refusal(err.value)
    assert err.value.status == 500 and status["reason"] == "InternalError"
    assert status["message"].startswith(
        f'Internal error occurred: failed calling webhook "{HOOK}": failed to call webhook: '
    )
    assert "connection refused" in status["message"]


def test_webhook_down_with_ignore_admits(env: Any, api: Any) -> None:
    server = env[0]
    set_failure_policy(server, "Ignore")
    server.admission.route(*SERVICE, closed_port())
    created = create(api, BAD, "ghost-evict")  # unchecked: what Ignore would let through
    assert created["metadata"]["name"] == "ghost-evict"
    assert "connection refused" in server.admission.ignored[-1]


def test_a_webhook_that_does_not_answer_in_time_is_a_call_failure(env: Any, api: Any) -> None:
    server = env[0]
    set_failure_policy(server, "Fail", timeout=1)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)  # accepts the TCP connection, never speaks TLS
    try:
        server.admission.route(*SERVICE, silent.getsockname())
        with pytest.raises(ApiException) as err:
            create(api, GOOD, "batch-audit")
    finally:
        silent.close()
    assert err.value.status == 500
    assert "context deadline exceeded" in refusal(err.value)["message"]


def test_a_certificate_not_signed_by_the_ca_bundle_is_refused(env: Any, api: Any) -> None:
    server = env[0]
    admission = client.AdmissionregistrationV1Api(server.api_client())
    admission.patch_validating_webhook_configuration(
        "qosd-webhook", {"webhooks": [{"name": HOOK, "clientConfig": {"caBundle": CA.make().bundle}}]}
    )
    with pytest.raises(ApiException) as err:
        create(api, GOOD, "batch-audit")
    assert err.value.status == 500
    assert "tls: failed to verify certificate" in refusal(err.value)["message"]


@pytest.mark.kubectl
def test_kubectl_apply_of_a_bad_policy_is_refused_with_qosds_message(env: Any, api: Any, tmp_path: Path) -> None:
    """The issue's "done when": `kubectl apply -f bad.yaml` refused with qosd's located message,
    a good one created, and an apply that would break it (a three-way PATCH, an UPDATE) refused."""
    why = kubectl_missing()
    if why is not None:
        pytest.skip(f"the real kubectl is needed: {why}")
    server = env[0]
    kubectl = Kubectl(server, tmp_path, str(shutil.which("kubectl")))
    bad = tmp_path / "bad.yaml"
    bad.write_text(policy_text(BAD, name="ghost-evict"))
    out = kubectl("apply", "-f", str(bad), check=False)
    assert out.rc == 1, out
    denied = f'admission webhook "{HOOK}" denied the request: '
    assert denied + "QoSPolicy/ghost-evict $.spec.rules[0].then.evict.victims.classes[0]: error:" in out.stderr
    assert "  hint: " in out.stderr
    assert server.get(f"{GROUP}/{VERSION}", "QoSPolicy", "ghost-evict") is None

    good = tmp_path / "good.yaml"
    good.write_text(policy_text(GOOD, name="batch-audit"))
    assert kubectl("apply", "-f", str(good)).stdout.strip() == "qospolicy.qosd.io/batch-audit created"
    good.write_text(policy_text(GOOD + BAD, name="batch-audit"))
    out = kubectl("apply", "-f", str(good), check=False)
    assert out.rc == 1 and denied + "QoSPolicy/batch-audit $.spec.rules[0]" in out.stderr, out
    assert server.get(f"{GROUP}/{VERSION}", "QoSPolicy", "batch-audit")["spec"].get("rules") is None
