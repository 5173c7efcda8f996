"""``kubectl apply --server-side`` against the emulator (tests/kubeapi/apply.py), on examples/deploy.

Server-side apply is what GitOps controllers and ``kubectl apply --server-side`` use: the server
merges each manager's applied configuration, removes what a manager stopped applying, and refuses to
silently overwrite a field another manager set (409 unless ``--force-conflicts``). Its own module,
so its emulator starts from a cluster no client-side apply has touched.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.kubectl import Kubectl

pytestmark = pytest.mark.kubectl

Json = dict[str, Any]
DEPLOY = "examples/deploy"
POLICY = """\
apiVersion: qosd.io/v1alpha1
kind: QoSPolicy
metadata:
  name: ssa
  labels: {team: platform}
spec:
  priority: 30
{extra}"""
RECLAIM = "  reclaim:\n    cpu:\n      headroom:\n        reservedForAllocate: 4\n"


def _managers(obj: Json) -> dict[tuple[str, str], Json]:
    return {(e["manager"], e["operation"]): e["fieldsV1"] for e in obj["metadata"].get("managedFields") or []}


@pytest.fixture(scope="module")
def applied(kubectl: Kubectl) -> list[Json]:
    """``kubectl apply --server-side -k examples/deploy`` once; the rendered objects."""
    out = kubectl("apply", "--server-side", "-k", DEPLOY).stdout.splitlines()
    rendered = [d for d in yaml.safe_load_all(kubectl("kustomize", DEPLOY).stdout) if d]
    assert len(out) == len(rendered) and all(line.endswith(" serverside-applied") for line in out), out
    return rendered


def _stored(kubectl: Kubectl, obj: Json) -> Json:
    meta = obj["metadata"]
    found = kubectl.server.get(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
    assert found is not None, f"{obj['kind']}/{meta['name']} missing"
    return found


def test_server_side_apply_creates_every_object_owned_by_kubectl(
    kubectl: Kubectl, applied: list[Json]
) -> None:
    for obj in applied:
        stored = _stored(kubectl, obj)
        assert ("kubectl", "Apply") in _managers(stored), obj["metadata"]["name"]
    cm = next(o for o in applied if o["kind"] == "ConfigMap")
    fields = _managers(_stored(kubectl, cm))[("kubectl", "Apply")]
    assert fields == {
        "f:data": {f"f:{key}": {} for key in cm["data"]},
        "f:metadata": {"f:labels": {f"f:{key}": {} for key in cm["metadata"]["labels"]}},
    }
    ds = next(o for o in applied if o["kind"] == "DaemonSet")
    containers = _managers(_stored(kubectl, ds))[("kubectl", "Apply")]["f:spec"]["f:template"]["f:spec"][
        "f:containers"
    ]
    names = [c["name"] for c in ds["spec"]["template"]["spec"]["containers"]]
    assert sorted(containers) == sorted(f'k:{{"name":"{n}"}}' for n in names)  # an associative list, by name


def test_reapplying_writes_nothing(kubectl: Kubectl, applied: list[Json]) -> None:
    """A no-op apply changes no resourceVersion, even of a CRD whose conditions were set long ago
    (a condition's lastTransitionTime moves only with its status), and ``kubectl diff`` (a dry-run
    apply) finds nothing: no empty map the server would omit, no moved timestamp."""
    for obj in applied:
        if obj["kind"] == "CustomResourceDefinition":
            crd = _stored(kubectl, obj)
            for condition in crd["status"]["conditions"]:
                condition["lastTransitionTime"] = "2020-01-01T00:00:00Z"
            kubectl.server.put(crd)
    versions = {o["metadata"]["name"]: _stored(kubectl, o)["metadata"]["resourceVersion"] for o in applied}
    diff = kubectl("diff", "-k", DEPLOY, check=False)
    assert (diff.rc, diff.stdout) == (0, ""), diff.stdout[:3000] + diff.stderr
    out = kubectl("apply", "--server-side", "-k", DEPLOY).stdout
    assert all(line.endswith(" serverside-applied") for line in out.splitlines())
    assert {
        o["metadata"]["name"]: _stored(kubectl, o)["metadata"]["resourceVersion"] for o in applied
    } == versions


@pytest.fixture
def policy(kubectl: Kubectl, applied: list[Json]) -> Iterator[None]:
    kubectl("apply", "--server-side", "-f", "-", input=POLICY.replace("{extra}", RECLAIM))
    yield
    kubectl("delete", "qosp", "ssa", "--ignore-not-found")


def test_a_field_the_manager_stops_applying_is_removed_unless_another_manager_owns_it(
    kubectl: Kubectl, policy: None
) -> None:
    kubectl("annotate", "qosp", "ssa", "owner=ops")  # an Update by kubectl-annotate
    kubectl("apply", "--server-side", "-f", "-", input=POLICY.replace("{extra}", ""))
    stored = kubectl.server.get("qosd.io/v1alpha1", "QoSPolicy", "ssa")
    assert stored is not None
    assert stored["spec"] == {"priority": 30}  # reclaim was only kubectl's: gone
    assert stored["metadata"]["annotations"] == {"owner": "ops"}  # never kubectl's: kept
    assert stored["metadata"]["generation"] == 2
    managers = _managers(stored)
    assert managers[("kubectl-annotate", "Update")] == {"f:metadata": {"f:annotations": {"f:owner": {}}}}
    assert "f:reclaim" not in managers[("kubectl", "Apply")]["f:spec"]


def test_a_field_another_manager_set_is_a_conflict_until_forced(kubectl: Kubectl, policy: None) -> None:
    kubectl("label", "qosp", "ssa", "team=storage", "--overwrite")
    changed = POLICY.replace("{extra}", RECLAIM).replace("team: platform", "team: web")
    refused = kubectl("apply", "--server-side", "-f", "-", input=changed, check=False)
    assert refused.rc == 1
    assert 'Apply failed with 1 conflict: conflict with "kubectl-label"' in refused.stderr
    assert ".metadata.labels.team" in refused.stderr
    stored = kubectl.server.get("qosd.io/v1alpha1", "QoSPolicy", "ssa")
    assert stored is not None and stored["metadata"]["labels"] == {"team": "storage"}
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=changed)
    stored = kubectl.server.get("qosd.io/v1alpha1", "QoSPolicy", "ssa")
    assert stored is not None and stored["metadata"]["labels"] == {"team": "web"}
    assert ("kubectl-label", "Update") not in _managers(stored)  # its only field was taken over


def test_two_managers_share_an_associative_list_item_by_item(kubectl: Kubectl, applied: list[Json]) -> None:
    """A second manager adds an env var to the qosd container: the container list and its env list
    merge by key, so kubectl's fields stay, and when the second manager drops its env var again only
    that entry goes."""
    ds = next(o for o in applied if o["kind"] == "DaemonSet")
    container = ds["spec"]["template"]["spec"]["containers"][0]["name"]
    sidecar = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": ds["metadata"]["name"], "namespace": ds["metadata"]["namespace"]},
        "spec": {
            "template": {
                "spec": {"containers": [{"name": container, "env": [{"name": "EXTRA", "value": "1"}]}]}
            }
        },
    }
    kubectl("apply", "--server-side", "--field-manager=tuner", "-f", "-", input=yaml.safe_dump(sidecar))
    live = _stored(kubectl, ds)["spec"]["template"]["spec"]["containers"][0]
    wanted = ds["spec"]["template"]["spec"]["containers"][0]
    assert [e["name"] for e in live["env"]] == [e["name"] for e in wanted["env"]] + ["EXTRA"]
    assert live["args"] == wanted["args"] and live["image"] == wanted["image"]
    assert live["imagePullPolicy"] == "IfNotPresent"  # the partial configuration's defaults did not leak in
    sidecar["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "OTHER", "value": "2"}]
    kubectl("apply", "--server-side", "--field-manager=tuner", "-f", "-", input=yaml.safe_dump(sidecar))
    live = _stored(kubectl, ds)["spec"]["template"]["spec"]["containers"][0]
    assert [e["name"] for e in live["env"]] == [e["name"] for e in wanted["env"]] + ["OTHER"]
    del sidecar["spec"]["template"]["spec"]["containers"][0]["env"]
    kubectl("apply", "--server-side", "--field-manager=tuner", "-f", "-", input=yaml.safe_dump(sidecar))
    live = _stored(kubectl, ds)["spec"]["template"]["spec"]["containers"][0]
    assert live["env"] == wanted["env"]
