"""``qosd webhook`` in parts: the AdmissionReview answer (engine.webhook.review), what a policy is
checked against (engine.webhook.check), the HTTPS endpoints and the certificate reload
(engine.webhook.server, engine.webhook.tls). End to end through the API-server emulator:
tests/test_webhook_e2e.py."""

from __future__ import annotations

import http.client
import json
import os
import ssl
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.config.load import Document
from engine.sources.policies import policy_document
from engine.webhook.check import PolicyChecker, Verdict
from engine.webhook.review import BadReview, review
from engine.webhook.server import WebhookServer, serve
from engine.webhook.tls import ServingCert
from tests.conftest import policy_text
from tests.kubeapi.tls import CA
from tests.qosdcli import qosd, qosd_in_process
from tests.secret_volume import write_secret_volume

GOOD = """\
priority: 10
nodeSelector: {matchLabels: {pool: batch}}
mode: audit
"""
# A rule that evicts a class no layer defines: found only when the document is compiled with the
# bundled profiles it is merged with.
BAD_REFERENCE = """\
rules:
  - name: evict-ghosts
    when: {node.memory.usage_percent: {gte: 80}}
    then: {evict: {victims: {classes: [ghost]}, release: {lowerPercent: 70}}}
"""


def policy(spec: str, name: str) -> dict[str, Any]:
    """The QoSPolicy object as the API server sends it (with server metadata)."""
    obj: dict[str, Any] = yaml.safe_load(policy_text(spec, name=name))
    obj["metadata"].update({"uid": f"uid-{name}", "generation": 1, "resourceVersion": "7"})
    return obj


def admission_review(
    obj: Any, operation: str = "CREATE", kind: str = "QoSPolicy", group: str = "qosd.io", **extra: Any
) -> dict[str, Any]:
    request = {
        "uid": "0d6a4f5e-1111-2222-3333-444455556666",
        "kind": {"group": group, "version": "v1alpha1", "kind": kind},
        "resource": {"group": group, "version": "v1alpha1", "resource": "qospolicies"},
        "operation": operation,
        "userInfo": {"username": "alice"},
        "object": obj,
        "oldObject": None,
        "dryRun": False,
        **extra,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def never(obj: Mapping[str, Any]) -> Verdict:
    raise AssertionError("this request must be allowed without a check")


# ------------------------------------------------------------------------- the review


@pytest.mark.parametrize(
    "body",
    [
        admission_review(None, operation="DELETE"),
        admission_review(policy(GOOD, "p"), operation="CONNECT"),
        admission_review({"kind": "Pod"}, kind="Pod", group=""),
        admission_review(policy(GOOD, "p"), subResource="status", operation="UPDATE"),
    ],
    ids=["delete", "connect", "another-kind", "status-subresource"],
)
def test_what_is_not_a_policy_write_is_allowed_unchecked(body: dict[str, Any]) -> None:
    answer = review(body, never)
    assert answer == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": body["request"]["uid"], "allowed": True},
    }


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ([], "must be a JSON object"),
        (
            {**admission_review(policy(GOOD, "p")), "apiVersion": "admission.k8s.io/v1beta1"},
            "admission.k8s.io/v1beta1",
        ),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "request is missing"),
        (
            {
                **admission_review(policy(GOOD, "p")),
                "request": {**admission_review(policy(GOOD, "p"))["request"], "uid": ""},
            },
            "request.uid",
        ),
        (
            {
                **admission_review(policy(GOOD, "p")),
                "request": {**admission_review(policy(GOOD, "p"))["request"], "kind": "x"},
            },
            "request.kind",
        ),
        (admission_review(None), "request.object must be the QoSPolicy"),
    ],
    ids=["not-an-object", "v1beta1", "no-request", "no-uid", "kind-not-an-object", "create-without-object"],
)
def test_a_malformed_review_is_refused_with_what_is_wrong(body: Any, says: str) -> None:
    with pytest.raises(BadReview, match=None) as err:
        review(body, never)
    assert says in str(err.value)


# ------------------------------------------------------------------------- the check


def test_a_bad_policy_is_denied_with_its_cr_name_json_path_and_hint() -> None:
    checker = PolicyChecker()
    answer = review(admission_review(policy(BAD_REFERENCE, "ghost-evict")), checker.check)
    response = answer["response"]
    assert response["allowed"] is False
    status = response["status"]
    assert (status["code"], status["reason"], status["status"]) == (422, "Invalid", "Failure")
    first = status["message"].splitlines()[0]
    assert first.startswith("QoSPolicy/ghost-evict $.spec.rules[0].then.evict.victims.classes[0]: error:"), (
        first
    )
    assert "ghost" in first
    assert "\n  hint: " in status["message"]
    assert status["message"].endswith("the QoSPolicy was not stored")


def test_a_problem_of_some_node_variants_names_them() -> None:
    """``BE`` is a class of the Koordinator profile only: evicting it is refused for the nodes that
    run the Katalyst profile, and the denial says which nodes those are."""
    verdict = PolicyChecker().check(policy(BAD_REFERENCE.replace("ghost", "BE"), "evict-be"))
    assert verdict.errors
    message = review(admission_review(policy(BAD_REFERENCE.replace("ghost", "BE"), "evict-be")), PolicyChecker().check)
    text = message["response"]["status"]["message"]
    assert "\n  on: profile katalyst" in text, text
    assert "koordinator" not in text.split("\n  on: ", 1)[1].splitlines()[0]


def test_the_same_problems_as_qosd_validate(tmp_path: Path) -> None:
    """The webhook says what `qosd validate` says about the policy as a file (its location aside)."""
    path = tmp_path / "ghost.yaml"
    path.write_text(policy_text(BAD_REFERENCE, name="ghost-evict"))
    cli = qosd_in_process("validate", str(path), "-o", "json")
    assert cli.returncode == 1, cli.stderr
    expected = {
        (p["path"], p["message"]) for p in json.loads(cli.stdout)["problems"] if p["severity"] == "error"
    }
    verdict = PolicyChecker().check(policy(BAD_REFERENCE, "ghost-evict"))
    assert {(p.location.path, p.message) for p in verdict.errors} == expected
    assert all(p.location.source == "QoSPolicy/ghost-evict" for p in verdict.errors)


def test_a_good_policy_is_allowed() -> None:
    answer = review(admission_review(policy(GOOD, "batch-audit")), PolicyChecker().check)
    assert answer["response"]["allowed"] is True
    assert "status" not in answer["response"]


def cluster_of(*objs: dict[str, Any]) -> Any:
    docs = [policy_document(o) for o in objs]

    def current() -> list[Document]:
        return docs

    return current


TENANT_CLASS = """\
priority: 5
classes:
  - name: tenant
    match: [{labels: {tenant: %s}}]
    cpu: {policy: shared, shares: %d}
"""
CLASS_A, CLASS_B = TENANT_CLASS % ("a", 512), TENANT_CLASS % ("b", 2048)


def test_a_policy_is_checked_with_the_other_qospolicies_of_the_cluster() -> None:
    """Alone it is valid; with the policy already stored it is an equal-priority conflict on every
    node, which would fail every node's reload."""
    alone = PolicyChecker().check(policy(CLASS_B, "tenant-b"))
    assert not alone.errors
    checker = PolicyChecker(cluster=cluster_of(policy(CLASS_A, "tenant-a")))
    verdict = checker.check(policy(CLASS_B, "tenant-b"))
    assert verdict.errors, "an equal-priority conflict with a stored policy must be refused"
    text = "\n".join(p.format() for p in verdict.errors)
    assert "QoSPolicy/tenant-a" in text and "QoSPolicy/tenant-b" in text
    # An update of the stored policy itself replaces it: no conflict with its own old version.
    assert not checker.check(policy(CLASS_A.replace("512", "256"), "tenant-a")).errors


def test_a_policy_already_invalid_does_not_block_an_unrelated_one() -> None:
    broken = policy(BAD_REFERENCE, "older-broken")
    checker = PolicyChecker(cluster=cluster_of(broken))
    verdict = checker.check(policy(GOOD, "batch-audit"))
    assert not verdict.errors
    assert [w.location.source for w in verdict.warnings] == ["QoSPolicy/older-broken"]
    assert "invalid already" in verdict.warnings[0].message
    # ... and the broken one cannot hide a new problem of the submission.
    assert checker.check(policy(BAD_REFERENCE, "ghost-evict")).errors


def test_the_rule_files_are_a_layer_of_the_check(tmp_path: Path) -> None:
    """A policy that evicts a class the site's rule file (the daemon's ConfigMap) defines is valid
    there, and refused where no layer defines the class."""
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "site.yaml").write_text(policy_text(CLASS_A, name="site"))
    uses = BAD_REFERENCE.replace("ghost", "tenant")
    assert not PolicyChecker([rules]).check(policy(uses, "evict-tenant")).errors
    assert PolicyChecker().check(policy(uses, "evict-tenant")).errors


def test_lints_are_warnings_and_the_policy_is_admitted() -> None:
    loop = """\
nodeSelector: {matchExpressions: [{key: qosd.io/profile, operator: NotIn, values: [koordinator]}]}
reclaim:
  memory: {policy: usage, reclaimThresholdPercent: 95, publishAs: example.com/reclaimed-memory}
rules:
  - name: be-memory-evict
    when: {node.memory.usage_percent: {gte: 70}}
    then: {evict: {victims: {classes: [reclaimed_cores]}, release: {lowerPercent: 68}}}
"""
    answer = review(admission_review(policy(loop, "loop")), PolicyChecker().check)
    response = answer["response"]
    assert response["allowed"] is True, response
    assert response["warnings"], "the admit/evict lint must reach kubectl as a warning"
    assert all("\n" not in w and len(w) <= 256 for w in response["warnings"])
    assert response["warnings"][0].startswith("QoSPolicy/loop $.spec.rules[0].when['node.memory.usage_percent'].gte: ")


# ------------------------------------------------------------------------- HTTPS


@pytest.fixture
def secret(tmp_path: Path) -> tuple[CA, Path]:
    ca = CA.make()
    cert, key, _ = ca.issue("qosd-webhook.qosd-system.svc", "127.0.0.1")
    write_secret_volume(tmp_path / "tls", cert, key, "2026_11_26_10_00_00.1")
    return ca, tmp_path / "tls"


@pytest.fixture
def https(secret: tuple[CA, Path]) -> Iterator[tuple[WebhookServer, CA, Path]]:
    ca, tls = secret
    cert = ServingCert(tls / "tls.crt", tls / "tls.key")
    server = serve("127.0.0.1:0", cert, PolicyChecker().check, lambda: (True, "test"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, ca, tls
    finally:
        server.shutdown()
        server.server_close()


def connect(server: WebhookServer, ca: CA) -> http.client.HTTPSConnection:
    ctx = ssl.create_default_context(cadata=ca.pem.decode())
    host, port = server.server_address[:2]
    return http.client.HTTPSConnection(str(host), int(port), context=ctx, timeout=30)


def post(
    conn: http.client.HTTPSConnection, body: bytes, ctype: str = "application/json"
) -> tuple[int, bytes]:
    conn.request("POST", "/validate?timeout=10s", body, {"Content-Type": ctype})
    reply = conn.getresponse()
    return reply.status, reply.read()


def test_validate_over_https(https: tuple[WebhookServer, CA, Path]) -> None:
    server, ca, _ = https
    conn = connect(server, ca)
    status, raw = post(conn, json.dumps(admission_review(policy(BAD_REFERENCE, "ghost-evict"))).encode())
    assert status == 200
    answer = json.loads(raw)
    assert answer["response"]["allowed"] is False
    assert answer["response"]["uid"] == "0d6a4f5e-1111-2222-3333-444455556666"


@pytest.mark.parametrize(
    ("body", "ctype", "says"),
    [
        (b"{not json", "application/json", "bad AdmissionReview: the body is not JSON"),
        (b"{}", "text/plain", "Content-Type must be application/json"),
        (
            b'{"apiVersion": "v1", "kind": "Status"}',
            "application/json",
            "expected apiVersion admission.k8s.io/v1",
        ),
    ],
    ids=["not-json", "content-type", "not-a-review"],
)
def test_a_malformed_request_is_a_400_with_the_reason(
    https: tuple[WebhookServer, CA, Path], body: bytes, ctype: str, says: str
) -> None:
    server, ca, _ = https
    status, raw = post(connect(server, ca), body, ctype)
    assert status == 400
    assert says in raw.decode()


def test_health_endpoints(https: tuple[WebhookServer, CA, Path]) -> None:
    server, ca, _ = https
    conn = connect(server, ca)
    for path, code in (("/healthz", 200), ("/readyz", 200), ("/validate", 405), ("/nope", 404)):
        conn.request("GET", path)
        reply = conn.getresponse()
        reply.read()
        assert reply.status == code, path


def serial_of(server: WebhookServer, ca: CA) -> int:
    conn = connect(server, ca)
    conn.request("GET", "/healthz")
    conn.getresponse().read()
    der = conn.sock.getpeercert(binary_form=True)
    conn.close()
    from cryptography import x509

    return x509.load_der_x509_certificate(der).serial_number


def test_a_renewed_certificate_is_served_without_closing_the_listener(
    https: tuple[WebhookServer, CA, Path],
) -> None:
    """The kubelet's Secret update: a new timestamped directory and a ``..data`` symlink swap."""
    server, ca, tls = https
    first = serial_of(server, ca)
    kept = connect(server, ca)  # a keep-alive connection opened before the renewal
    kept.request("GET", "/healthz")
    kept.getresponse().read()
    cert, key, serial = ca.issue("qosd-webhook.qosd-system.svc", "127.0.0.1")
    write_secret_volume(tls, cert, key, "2026_11_26_11_00_00.2")
    assert serial != first
    assert serial_of(server, ca) == serial
    assert server.cert.reloads == 1
    kept.request("GET", "/healthz")  # the old connection still answers, on its old session
    assert kept.getresponse().status == 200


def test_a_half_written_pair_keeps_the_previous_certificate(https: tuple[WebhookServer, CA, Path]) -> None:
    server, ca, tls = https
    first = serial_of(server, ca)
    cert, _, _ = ca.issue("qosd-webhook.qosd-system.svc", "127.0.0.1")
    _, other_key, _ = ca.issue("someone-else")
    write_secret_volume(tls, cert, other_key, "2026_11_26_11_00_00.3")  # key does not match
    assert serial_of(server, ca) == first
    assert server.cert.reloads == 0


def test_the_command_refuses_a_missing_certificate_as_a_usage_error(tmp_path: Path) -> None:
    run = qosd(
        "webhook",
        "--standalone",
        "--listen",
        "127.0.0.1:0",
        "--tls-cert-file",
        str(tmp_path / "tls.crt"),
        "--tls-private-key-file",
        str(tmp_path / "tls.key"),
    )
    assert run.returncode == 2
    assert "cannot load the serving certificate" in run.stderr and "tls.crt" in run.stderr


def test_the_command_outside_a_cluster_needs_a_kubeconfig_or_standalone(secret: tuple[CA, Path]) -> None:
    _, tls = secret
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    run = qosd(
        "webhook",
        "--listen",
        "127.0.0.1:0",
        "--tls-cert-file",
        str(tls / "tls.crt"),
        "--tls-private-key-file",
        str(tls / "tls.key"),
        env=env,
    )
    assert run.returncode == 2
    assert "--kubeconfig" in run.stderr and "--standalone" in run.stderr
