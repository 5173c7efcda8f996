"""The ValidatingAdmissionPolicy qosd ships (examples/deploy/base/admission-policy.yaml): its CEL really
evaluated (cel-python, in the API-server emulator) against good and bad QoSPolicies created through
the official client, and the same verdict from ``qosd validate``'s checks on each, so the cheap
check in the API server and qosd never disagree. Also: the webhook components render with the real
``kubectl kustomize`` into objects that fit together."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from engine.webhook.check import PolicyChecker
from tests.conftest import policy_text
from tests.kubeapi import ApiServer
from tests.qosdcli import ROOT

DEPLOY = ROOT / "examples" / "deploy"
POLICY_FILE = DEPLOY / "base" / "admission-policy.yaml"
GROUP, VERSION, PLURAL = "qosd.io", "v1alpha1", "qospolicies"
DENIED = (
    "qospolicies.qosd.io \"{name}\" is forbidden: ValidatingAdmissionPolicy 'qospolicy-structure.qosd.io' "
    "with binding 'qospolicy-structure.qosd.io' denied request: "
)

GOOD: dict[str, str] = {
    "plain": "priority: 10\nnodeSelector: {matchLabels: {pool: batch}}\nmode: audit",
    "template-priority": "priority: '{{ node.numa_count * 10 }}'\nmode: audit",
    "node-names": "nodeNames: [node-a, node-b.example.com]\nmode: audit",
    "expressions": (
        "nodeSelector:\n  matchExpressions:\n"
        "    - {key: example.com/pool, operator: In, values: [batch, online]}\n"
        "    - {key: gpu, operator: DoesNotExist}\n"
        "    - {key: cpus, operator: Gt, values: ['16']}\n"
        "mode: audit"
    ),
}
BAD: dict[str, tuple[str, str]] = {
    "priority-word": ("priority: high", "spec.priority must be an integer"),
    "names-and-selector": (
        "nodeNames: [node-a]\nnodeSelector: {matchLabels: {pool: batch}}",
        "spec.nodeNames and spec.nodeSelector cannot be used together",
    ),
    "node-name-case": ("nodeNames: [Node_A]", "spec.nodeNames holds node names"),
    "label-key": ("nodeSelector: {matchLabels: {'pool type': batch}}", "spec.nodeSelector.matchLabels"),
    "template-in-selector": (
        "nodeSelector: {matchLabels: {pool: '{{ node.name }}'}}",
        "spec.nodeSelector.matchLabels",
    ),
    "in-without-values": (
        "nodeSelector: {matchExpressions: [{key: pool, operator: In}]}",
        "spec.nodeSelector.matchExpressions",
    ),
    "exists-with-values": (
        "nodeSelector: {matchExpressions: [{key: pool, operator: Exists, values: [batch]}]}",
        "spec.nodeSelector.matchExpressions",
    ),
    "gt-not-integer": (
        "nodeSelector: {matchExpressions: [{key: cpus, operator: Gt, values: [many]}]}",
        "spec.nodeSelector.matchExpressions",
    ),
}


def body(spec: str, name: str) -> dict[str, Any]:
    return dict(yaml.safe_load(policy_text(spec, name=name)))


@pytest.fixture(scope="module")
def api() -> Iterator[Any]:
    from engine.config.crd import qosd_crds

    server = ApiServer()
    server.start()
    try:
        for crd in qosd_crds():
            server.install_crd(crd)
        api_client = server.api_client()
        admission = client.AdmissionregistrationV1Api(api_client)
        policy, binding = yaml.safe_load_all(POLICY_FILE.read_text())
        admission.create_validating_admission_policy(policy)
        admission.create_validating_admission_policy_binding(binding)
        yield client.CustomObjectsApi(api_client)
    finally:
        server.stop()


@pytest.mark.parametrize("case", sorted(GOOD))
def test_a_good_policy_is_admitted(api: Any, case: str) -> None:
    name = f"good-{case}"
    created = api.create_cluster_custom_object(GROUP, VERSION, PLURAL, body(GOOD[case], name))
    assert created["metadata"]["name"] == name
    assert not PolicyChecker().check(created).errors, "qosd must accept what the CEL policy admits"


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_structurally_bad_policy_is_refused_by_the_api_server(api: Any, case: str) -> None:
    spec, says = BAD[case]
    name = f"bad-{case}"
    with pytest.raises(ApiException) as err:
        api.create_cluster_custom_object(GROUP, VERSION, PLURAL, body(spec, name))
    status = json.loads(err.value.body)
    assert (err.value.status, status["reason"]) == (422, "Invalid")
    assert status["message"].startswith(DENIED.format(name=name) + says), status["message"]
    verdict = PolicyChecker().check(body(spec, name))
    assert verdict.errors, f"qosd validate must refuse {case} too: the CEL policy is never stricter than qosd"


def test_an_update_is_checked_too(api: Any) -> None:
    api.create_cluster_custom_object(GROUP, VERSION, PLURAL, body(GOOD["plain"], "updated"))
    with pytest.raises(ApiException) as err:
        api.patch_cluster_custom_object(GROUP, VERSION, PLURAL, "updated", {"spec": {"priority": "high"}})
    assert "spec.priority must be an integer" in json.loads(err.value.body)["message"]


def test_a_policy_whose_cel_does_not_compile_is_refused() -> None:
    """The emulator compiles each expression when the policy is written, as the API server does:
    a typo in admission-policy.yaml fails here, not silently at admission time."""
    with ApiServer() as server:
        admission = client.AdmissionregistrationV1Api(server.api_client())
        policy = yaml.safe_load_all(POLICY_FILE.read_text()).__next__()
        policy["metadata"]["name"] = "broken.qosd.io"
        policy["spec"]["validations"] = [{"expression": "object.spec.priority >"}]
        with pytest.raises(ApiException) as err:
            admission.create_validating_admission_policy(policy)
        assert err.value.status == 422
        assert "compilation failed" in json.loads(err.value.body)["message"]


# ------------------------------------------------------------------------- the components

KUBECTL = shutil.which("kubectl")


def render(tmp_path: Path, *components: str, namespace: str = "qosd-system") -> list[dict[str, Any]]:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed on this machine: the components cannot be rendered")
    for name in components:
        shutil.copytree(DEPLOY / "components" / name, tmp_path / "components" / name)
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "namespace": namespace,
                "components": [f"components/{c}" for c in components],
            }
        )
    )
    out = subprocess.run(
        [KUBECTL, "kustomize", str(tmp_path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def one(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind]
    assert len(found) == 1, [o["kind"] for o in objs]
    return found[0]


def test_the_webhook_component_fits_together(tmp_path: Path) -> None:
    objs = render(tmp_path, "webhook", "webhook-cert-manager")
    deploy, pdb, svc = one(objs, "Deployment"), one(objs, "PodDisruptionBudget"), one(objs, "Service")
    config, cert = one(objs, "ValidatingWebhookConfiguration"), one(objs, "Certificate")
    spec = deploy["spec"]["template"]["spec"]
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    (container,) = spec["containers"]
    assert deploy["spec"]["replicas"] == 2
    assert spec["affinity"]["podAntiAffinity"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert spec["securityContext"]["runAsNonRoot"] is True
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["scheme"] == "HTTPS"
    # The PDB and the Service select the pods; the Service's targetPort is the container's port.
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert svc["spec"]["selector"].items() <= labels.items()
    assert svc["spec"]["ports"][0]["targetPort"] in {p["name"] for p in container["ports"]}
    # The configuration calls that Service, with the review version and limits the API requires.
    (hook,) = config["webhooks"]
    service = hook["clientConfig"]["service"]
    assert (service["name"], service["namespace"]) == (svc["metadata"]["name"], svc["metadata"]["namespace"])
    assert service["port"] == svc["spec"]["ports"][0]["port"]
    assert hook["admissionReviewVersions"] == ["v1"] and hook["sideEffects"] == "None"
    assert hook["failurePolicy"] == "Fail" and 1 <= hook["timeoutSeconds"] <= 30
    assert hook["rules"] == [
        {
            "apiGroups": ["qosd.io"],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["qospolicies"],
            "scope": "Cluster",
        }
    ]
    # The certificate is for the name the API server verifies, lands in the mounted Secret, and its
    # CA is injected into this configuration.
    assert f"{service['name']}.{service['namespace']}.svc" in cert["spec"]["dnsNames"]
    secrets = {v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
    assert cert["spec"]["secretName"] in secrets
    annotation = config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
    assert annotation == f"{cert['metadata']['namespace']}/{cert['metadata']['name']}"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    tls_volume = next(v["name"] for v in spec["volumes"] if v.get("secret"))
    assert f"--tls-cert-file={mounts[tls_volume]}/tls.crt" in container["args"]
    # It runs as the ServiceAccount the ClusterRoleBinding names.
    binding = one(objs, "ClusterRoleBinding")
    subject = binding["subjects"][0]
    assert (subject["name"], subject["namespace"]) == (
        spec["serviceAccountName"],
        deploy["metadata"]["namespace"],
    )


def test_the_webhook_component_follows_the_kustomization_namespace(tmp_path: Path) -> None:
    objs = render(tmp_path, "webhook", namespace="qos-elsewhere")
    service = one(objs, "ValidatingWebhookConfiguration")["webhooks"][0]["clientConfig"]["service"]
    assert service["namespace"] == one(objs, "Service")["metadata"]["namespace"] == "qos-elsewhere"
    assert one(objs, "ClusterRoleBinding")["subjects"][0]["namespace"] == "qos-elsewhere"
