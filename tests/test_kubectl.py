"""The real kubectl against the API-server emulator (tests/kubectl.py), driven through the verbs an
install and its day-two operations use, on the repository's own ``examples/deploy``.

What each test pins is what a platform engineer would see on a cluster: ``kubectl apply -k`` creates
every object kustomize renders and a second apply reports each ``unchanged`` without writing; a changed
file is a three-way patch from the last-applied annotation (a field deleted from the file is deleted on
the server); a misspelled field is refused by the server's strict field validation, which kubectl asks
for because the OpenAPI v3 document says the server supports it; ``get`` prints the CRD's printer
columns; ``describe`` lists the policy's Events; ``explain`` walks the CRD schema; short names and the
``qosd`` category resolve through discovery. Expected values come from the rendered manifests and the
CRDs in the repository, not from copies in this file.
"""

from __future__ import annotations

import json
import re
import ssl
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kubectl import REPO, Kubectl, roll_out_daemonset

pytestmark = pytest.mark.kubectl

DEPLOY = "examples/deploy"
CANARY = REPO / "examples/deploy/canary-policy.yaml"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
WRITES = ("POST", "PUT", "PATCH", "DELETE")

Json = dict[str, Any]


def _docs(text: str) -> list[Json]:
    return [d for d in yaml.safe_load_all(text) if d]


def _crd(plural: str) -> Json:
    for doc in _docs((REPO / "examples/deploy/base/crds.yaml").read_text()):
        if doc["spec"]["names"]["plural"] == plural:
            return doc
    raise AssertionError(f"no CRD for {plural} in examples/deploy/base/crds.yaml")


@pytest.fixture(scope="module")
def rendered(kubectl: Kubectl) -> list[Json]:
    """What ``kubectl kustomize examples/deploy`` renders: the objects an apply must create."""
    return _docs(kubectl("kustomize", DEPLOY).stdout)


@pytest.fixture(scope="module")
def deployed(kubectl: Kubectl, rendered: list[Json]) -> str:
    """``kubectl apply -k examples/deploy`` once per module, on a cluster with two nodes; its stdout."""
    for name in ("node-a", "node-b"):
        kubectl.server.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    return kubectl("apply", "-k", DEPLOY).stdout


def _stored(kubectl: Kubectl, obj: Json) -> Json | None:
    meta = obj["metadata"]
    return kubectl.server.get(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))


def _writes(kubectl: Kubectl, since: int) -> list[str]:
    return [f"{r.method} {r.path}" for r in kubectl.server.requests[since:] if r.method in WRITES]


@pytest.fixture
def canary(kubectl: Kubectl, deployed: str) -> Iterator[Json]:
    """examples/deploy/canary-policy.yaml applied; deleted again afterwards."""
    kubectl("apply", "-f", str(CANARY))
    yield _docs(CANARY.read_text())[0]
    kubectl("delete", "-f", str(CANARY), "--ignore-not-found")


# ------------------------------------------------------------------------------------------- apply


def test_apply_k_creates_every_rendered_object_with_its_last_applied_configuration(
    kubectl: Kubectl, rendered: list[Json], deployed: str
) -> None:
    lines = deployed.splitlines()
    assert len(lines) == len(rendered), deployed
    assert all(line.endswith(" created") for line in lines), deployed
    for obj in rendered:
        stored = _stored(kubectl, obj)
        assert stored is not None, f"{obj['kind']} {obj['metadata']['name']} was not created"
        annotation = stored["metadata"]["annotations"][LAST_APPLIED]
        expected = json.loads(json.dumps(obj))
        expected["metadata"].setdefault("annotations", {})  # kubectl records an empty map
        if not kubectl.server.registry.for_kind(obj["apiVersion"], obj["kind"]).namespaced:
            # kustomize's `namespace:` also lands on cluster-scoped kinds it does not know
            # (ValidatingAdmissionPolicy); kubectl drops it from what it sends and records.
            expected["metadata"].pop("namespace", None)
        assert json.loads(annotation) == expected, f"{obj['kind']}/{obj['metadata']['name']}"


def test_reapply_reports_unchanged_and_writes_nothing(
    kubectl: Kubectl, rendered: list[Json], deployed: str
) -> None:
    before = len(kubectl.server.requests)
    out = kubectl("apply", "-k", DEPLOY).stdout.splitlines()
    assert len(out) == len(rendered)
    assert all(line.endswith(" unchanged") for line in out), out
    assert _writes(kubectl, before) == []


def test_diff_after_apply_is_empty_and_shows_a_change(
    kubectl: Kubectl, deployed: str, tmp_path: Path
) -> None:
    """``kubectl diff`` dry-runs a server-side apply of each object and compares it with the live
    one: right after an apply nothing may differ (no empty map the server would omit, no condition
    timestamp that moves on a no-op update), while a real edit shows up, exit code 1."""
    same = kubectl("diff", "-k", DEPLOY, check=False)
    assert (same.rc, same.stdout) == (0, ""), same.stdout[:3000] + same.stderr
    kubectl("apply", "-f", str(CANARY))
    try:
        edited = CANARY.read_text().replace("priority: 20", "priority: 25")
        path = tmp_path / "canary.yaml"
        path.write_text(edited)
        changed = kubectl("diff", "-f", str(path), check=False)
        assert changed.rc == 1, changed
        assert "-  priority: 20\n+  priority: 25" in changed.stdout, changed.stdout
    finally:
        kubectl("delete", "-f", str(CANARY))


def test_a_changed_file_is_a_three_way_patch_from_the_last_applied_annotation(
    kubectl: Kubectl, canary: Json, tmp_path: Path
) -> None:
    """Client-side apply: a field the file no longer has is removed on the server (it was in the
    last-applied annotation), a changed one is changed, and the server's own fields stay."""
    edited = json.loads(json.dumps(canary))
    edited["spec"]["priority"] = 21
    del edited["spec"]["reclaim"]
    path = tmp_path / "canary.yaml"
    path.write_text(yaml.safe_dump(edited))
    before = len(kubectl.server.requests)
    assert kubectl("apply", "-f", str(path)).stdout.strip() == "qospolicy.qosd.io/site-canary configured"
    stored = kubectl.server.get("qosd.io/v1alpha1", "QoSPolicy", "site-canary")
    assert stored is not None
    assert stored["spec"]["priority"] == 21
    assert "reclaim" not in stored["spec"]
    assert stored["metadata"]["generation"] == 2
    patches = [r for r in kubectl.server.requests[before:] if r.method == "PATCH"]
    assert [r.content_type for r in patches] == ["application/merge-patch+json"]  # a CR: JSON merge patch
    assert patches[0].json["spec"]["reclaim"] is None


def test_a_changed_daemonset_is_a_strategic_merge_patch(
    kubectl: Kubectl, rendered: list[Json], deployed: str, tmp_path: Path
) -> None:
    """Built-in kinds get a strategic merge patch whose list keys come from the OpenAPI v3 document
    (containers merge by name): changing one container's image leaves the rest of the pod template."""
    ds = next(o for o in rendered if o["kind"] == "DaemonSet")
    edited = json.loads(json.dumps(ds))
    edited["spec"]["template"]["spec"]["containers"][0]["image"] = "qosd:0.1.1"
    path = tmp_path / "ds.yaml"
    path.write_text(yaml.safe_dump(edited))
    before = len(kubectl.server.requests)
    try:
        out = kubectl("apply", "-f", str(path))
        assert out.stdout.strip() == f"daemonset.apps/{ds['metadata']['name']} configured", out
        assert "warning" not in out.stderr.lower(), out.stderr
        patch = next(r for r in kubectl.server.requests[before:] if r.method == "PATCH")
        assert patch.content_type == "application/strategic-merge-patch+json"
        containers = patch.json["spec"]["template"]["spec"]["containers"]
        assert containers == [
            {"image": "qosd:0.1.1", "name": ds["spec"]["template"]["spec"]["containers"][0]["name"]}
        ]
        stored = _stored(kubectl, ds)
        assert stored is not None
        live = stored["spec"]["template"]["spec"]["containers"][0]
        assert live["image"] == "qosd:0.1.1"
        assert live["args"] == ds["spec"]["template"]["spec"]["containers"][0]["args"]
        assert stored["metadata"]["generation"] == 2
    finally:
        kubectl("apply", "-k", DEPLOY)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda ds: ds["spec"]["selector"]["matchLabels"].update({"app.kubernetes.io/name": "other"}),
            "spec.template.metadata.labels: Invalid value: ",
        ),
        (
            lambda ds: ds["spec"]["template"]["spec"]["containers"][0]["resources"].update(
                {"requests": {"memory": "1Gi"}, "limits": {"memory": "160Mi"}}
            ),
            'resources.requests: Invalid value: "1Gi": must be less than or equal to memory limit of 160Mi',
        ),
        (lambda ds: ds["spec"]["template"]["spec"]["containers"][0].pop("image"), "image: Required value"),
    ],
    ids=["selector-mismatch", "request-over-limit", "no-image"],
)
def test_an_invalid_daemonset_is_refused_with_the_field(
    kubectl: Kubectl, rendered: list[Json], deployed: str, tmp_path: Path, edit: Any, message: str
) -> None:
    """The API server's workload validation: an apply of a broken DaemonSet is a 422 naming the
    field, and the DaemonSet on the server is not touched."""
    ds = json.loads(json.dumps(next(o for o in rendered if o["kind"] == "DaemonSet")))
    before = _stored(kubectl, ds)
    edit(ds)
    path = tmp_path / "ds.yaml"
    path.write_text(yaml.safe_dump(ds))
    out = kubectl("apply", "-f", str(path), check=False)
    assert out.rc == 1 and message in out.stderr, out.stderr
    assert 'The DaemonSet "qosd" is invalid: ' in out.stderr
    assert _stored(kubectl, ds) == before


def test_the_system_priority_classes_exist(kubectl: Kubectl, rendered: list[Json]) -> None:
    """qosd's DaemonSet names priorityClassName system-node-critical, which every cluster has."""
    names = kubectl("get", "priorityclasses", "-o", "name").stdout.split()
    assert {
        "priorityclass.scheduling.k8s.io/system-node-critical",
        "priorityclass.scheduling.k8s.io/system-cluster-critical",
    } <= set(names)
    for ds in (o for o in rendered if o["kind"] == "DaemonSet"):
        wanted = ds["spec"]["template"]["spec"].get("priorityClassName")
        if wanted:
            assert f"priorityclass.scheduling.k8s.io/{wanted}" in names


def test_unknown_fields_are_refused_by_strict_field_validation(kubectl: Kubectl, deployed: str) -> None:
    policy = "apiVersion: qosd.io/v1alpha1\nkind: QoSPolicy\nmetadata: {name: typo}\nspec: {priority: 3, prority: 4}\n"
    out = kubectl("apply", "-f", "-", input=policy, check=False)
    assert out.rc == 1
    assert 'strict decoding error: unknown field "spec.prority"' in out.stderr
    assert kubectl.server.get("qosd.io/v1alpha1", "QoSPolicy", "typo") is None
    cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: typo}\ndata: {a: b}\ndatta: {c: d}\n"
    out = kubectl("apply", "-f", "-", input=cm, check=False)
    assert out.rc == 1
    assert 'unknown field "datta"' in out.stderr
    assert kubectl.server.get("v1", "ConfigMap", "typo") is None
    # --validate=false: the server drops the field (fieldValidation=Ignore) and stores the rest
    kubectl("apply", "--validate=false", "-f", "-", input=policy)
    stored = kubectl.server.get("qosd.io/v1alpha1", "QoSPolicy", "typo")
    assert stored is not None and stored["spec"] == {"priority": 3}
    kubectl("delete", "qosp", "typo")


# ---------------------------------------------------------------------------------- discovery


def test_short_names_and_the_category_resolve_through_discovery(kubectl: Kubectl, canary: Json) -> None:
    out = kubectl("api-resources", "--api-group=qosd.io", "-o", "wide").stdout
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    for plural in ("qospolicies", "qosnodestatuses"):
        names = _crd(plural)["spec"]["names"]
        for short in names["shortNames"]:
            assert f" {short} " in rows[plural], out
        for category in names["categories"]:
            assert category in rows[plural].split()[-1].split(","), out
    listed = kubectl("get", "qosd", "-o", "name").stdout.split()
    assert "qospolicy.qosd.io/site-canary" in listed  # the category names both qosd kinds


def test_discovery_is_aggregated_when_asked_and_legacy_otherwise(kubectl: Kubectl, deployed: str) -> None:
    """kubectl asks for apidiscovery.k8s.io/v2 first: one request each for /api and /apis and no
    per-group/version requests; a client that asks for plain JSON gets the legacy documents."""
    kubectl.forget_discovery()
    before = len(kubectl.server.requests)
    kubectl("get", "qosp")
    paths = [r.path for r in kubectl.server.requests[before:] if r.method == "GET"]
    assert "/api" in paths and "/apis" in paths
    assert not [p for p in paths if p.startswith("/apis/") and p.count("/") == 3], paths
    assert kubectl.server.serving_cert is not None
    context = ssl.create_default_context(cadata=kubectl.server.serving_cert.ca_pem.decode())
    for accept, kind in (
        ("application/json", "APIGroupList"),
        (
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
            "APIGroupDiscoveryList",
        ),
        (
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json",
            "APIGroupList",
        ),
    ):
        request = urllib.request.Request(
            f"{kubectl.server.url}/apis",
            headers={"Accept": accept, "Authorization": f"Bearer {kubectl.server.token}"},
        )
        with urllib.request.urlopen(request, context=context) as response:
            assert json.load(response)["kind"] == kind, accept


# ------------------------------------------------------------------------------------------- get


def _table(text: str) -> list[list[str]]:
    """kubectl's column output as rows of cells, cut at the header's column starts (tabwriter
    aligns every row to them; an empty cell is blank, a header may hold one space)."""
    lines = [line for line in text.splitlines() if line.strip()]
    starts = [m.start() for m in re.finditer(r"\S+(?: \S+)*", lines[0])]
    bounds = [*starts[1:], None]
    return [[line[a:b].strip() for a, b in zip(starts, bounds, strict=True)] for line in lines]


def _headers(plural: str, wide: bool) -> list[str]:
    columns = _crd(plural)["spec"]["versions"][0]["additionalPrinterColumns"]
    return ["NAME"] + [c["name"].upper() for c in columns if wide or not c.get("priority")]


def test_get_prints_each_crds_printer_columns(kubectl: Kubectl, canary: Json) -> None:
    stored = kubectl.server.get("qosd.io/v1alpha1", "QoSPolicy", "site-canary")
    assert stored is not None
    stored["status"] = {
        "conditions": [
            {
                "type": "Valid",
                "status": "True",
                "reason": "Compiled",
                "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
        "nodes": {"matched": 3, "applied": 2, "failed": 1},
    }
    kubectl.server.put(stored)
    kubectl.server.put(
        {
            "apiVersion": "qosd.io/v1alpha1",
            "kind": "QoSNodeStatus",
            "metadata": {"name": "node-a"},
            "status": {
                "nodeName": "node-a",
                "applied": {"generation": 4, "hash": "abc123"},
                "lastAttempt": {"result": "Applied"},
            },
        }
    )
    try:
        out = kubectl("get", "qosp,qosns").stdout
        blocks = [_table(b) for b in out.split("\n\n")]
        assert blocks[0][0] == _headers("qospolicies", wide=False)
        mode = stored["spec"].get("mode") or ""
        priority = str(canary["spec"]["priority"])
        assert blocks[0][1][:6] == ["qospolicy.qosd.io/site-canary", priority, mode, "True", "2", "1"]
        assert blocks[1][0] == _headers("qosnodestatuses", wide=False)
        assert blocks[1][1][:4] == ["qosnodestatus.qosd.io/node-a", "4", "abc123", "Applied"]
        wide = _table(kubectl("get", "qosp", "site-canary", "-o", "wide").stdout)
        assert wide[0] == _headers("qospolicies", wide=True)
        row = dict(zip(wide[0], wide[1], strict=False))
        assert row["MATCHED"] == "3" and row["REASON"] == "Compiled", wide
    finally:
        kubectl.server.delete("qosd.io/v1alpha1", "QoSNodeStatus", "node-a")


def test_get_watch_prints_every_event_with_the_printer_columns(kubectl: Kubectl, canary: Json) -> None:
    """``kubectl get -w``: the watch asks for Tables too, so a change is printed in the same columns
    as the list (not kubectl's NAME/AGE fallback for raw objects)."""

    def change_once_watching() -> None:
        deadline = time.monotonic() + 20
        while kubectl.server.open_watches() == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        stored = kubectl.server.get("qosd.io/v1alpha1", "QoSPolicy", "site-canary")
        assert stored is not None
        stored["spec"]["priority"] = 23
        kubectl.server.put(stored)

    changer = threading.Thread(target=change_once_watching)
    changer.start()
    try:
        out = kubectl("get", "qosp", "site-canary", "-w", "--request-timeout=3s").stdout
    finally:
        changer.join()
    rows = _table(out)
    assert rows[0] == _headers("qospolicies", wide=False)
    assert [row[:2] for row in rows[1:]] == [["site-canary", "20"], ["site-canary", "23"]], out


def test_get_o_yaml_is_the_stored_object(kubectl: Kubectl, canary: Json) -> None:
    shown = yaml.safe_load(kubectl("get", "qosp", "site-canary", "-o", "yaml").stdout)
    assert shown == kubectl.server.get("qosd.io/v1alpha1", "QoSPolicy", "site-canary")
    assert shown["spec"] == canary["spec"]


def test_builtin_kinds_print_the_api_servers_columns(kubectl: Kubectl, deployed: str) -> None:
    out = kubectl("get", "daemonsets,configmaps", "-n", "qosd-system").stdout
    daemonsets, configmaps = (_table(block) for block in out.split("\n\n"))
    assert daemonsets[0] == [
        "NAME",
        "DESIRED",
        "CURRENT",
        "READY",
        "UP-TO-DATE",
        "AVAILABLE",
        "NODE SELECTOR",
        "AGE",
    ]
    assert daemonsets[1][0] == "daemonset.apps/qosd"
    assert configmaps[0] == ["NAME", "DATA", "AGE"]
    assert configmaps[1][:2] == ["configmap/qosd-rules", "1"]
    nodes = _table(kubectl("get", "nodes").stdout)
    assert nodes[0] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]


# ---------------------------------------------------------------------------------- describe, events


def _event(name: str, involved: Json, reason: str, message: str, kind_type: str = "Warning") -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": "default"},
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "type": kind_type,
        "count": 1,
        "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": "2026-01-01T00:00:00Z",
        "source": {"component": "qosd"},
    }


@pytest.fixture
def policy_events(kubectl: Kubectl, canary: Json) -> Iterator[Json]:
    stored = kubectl.server.get("qosd.io/v1alpha1", "QoSPolicy", "site-canary")
    assert stored is not None
    ref = {
        "apiVersion": "qosd.io/v1alpha1",
        "kind": "QoSPolicy",
        "name": "site-canary",
        "uid": stored["metadata"]["uid"],
    }
    kubectl.server.put(_event("site-canary.1", ref, "PolicyInvalid", "spec.reclaim.cpu: bad value"))
    kubectl.server.put(
        _event(
            "pod.1",
            {"apiVersion": "v1", "kind": "Pod", "name": "web", "namespace": "default"},
            "Evicted",
            "memory pressure",
        )
    )
    yield stored
    for name in ("site-canary.1", "pod.1"):
        kubectl.server.delete("v1", "Event", name, "default")


def test_describe_shows_the_policy_and_its_events(kubectl: Kubectl, policy_events: Json) -> None:
    out = kubectl("describe", "qosp", "site-canary").stdout
    assert "Name:         site-canary" in out
    assert re.search(r"Priority:\s+20\n", out), out
    events = out.split("Events:")[1]
    assert "PolicyInvalid" in events and "spec.reclaim.cpu: bad value" in events
    assert "Evicted" not in events
    lists = [r for r in kubectl.server.requests if r.path == "/api/v1/events" and r.verb == "list"]
    assert f"involvedObject.uid={policy_events['metadata']['uid']}" in lists[-1].query["fieldSelector"]


def test_get_events_by_field_selector(kubectl: Kubectl, policy_events: Json) -> None:
    out = _table(kubectl("get", "events", "-A", "--field-selector", "involvedObject.kind=QoSPolicy").stdout)
    assert out[0] == ["NAMESPACE", "LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert [row[3:] for row in out[1:]] == [
        ["PolicyInvalid", "qospolicy/site-canary", "spec.reclaim.cpu: bad value"]
    ]
    bad = kubectl("get", "events", "--field-selector", "involvedObject.colour=red", check=False)
    assert bad.rc == 1 and "involvedObject.colour" in bad.stderr


# ----------------------------------------------------------------------------- explain, label, delete


def test_explain_walks_the_crd_schema(kubectl: Kubectl, deployed: str) -> None:
    spec = _crd("qospolicies")["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    out = kubectl("explain", "qosp.spec").stdout
    assert "KIND:       QoSPolicy" in out and "GROUP:      qosd.io" in out and "FIELD: spec <Object>" in out
    fields = out.split("FIELDS:")[1]
    for name in spec["properties"]:
        assert f"\n  {name}\t<" in fields, name
    nested = kubectl("explain", "qosp.spec.reclaim").stdout
    assert "FIELD: reclaim <Object>" in nested
    missing = kubectl("explain", "qosp.spec.nosuchfield", check=False)
    assert missing.rc == 1 and 'field "nosuchfield" does not exist' in missing.stderr
    builtin = kubectl("explain", "daemonset.spec.template.spec.containers").stdout
    assert "FIELD: containers <[]Container>" in builtin and "image\t<string>" in builtin


def test_label_node_then_select_by_it(kubectl: Kubectl, deployed: str) -> None:
    assert kubectl("label", "node", "node-a", "qosd.io/canary=true").stdout.strip() == "node/node-a labeled"
    node = kubectl.server.get("v1", "Node", "node-a")
    assert node is not None and node["metadata"]["labels"]["qosd.io/canary"] == "true"
    selected = kubectl(
        "get", "nodes", "-l", "qosd.io/canary=true", "-o", "jsonpath={.items[*].metadata.name}"
    )
    assert selected.stdout == "node-a"
    # the README's canary line, through a shell: each canary node's QoSNodeStatus by the node's name
    kubectl.server.put(
        {"apiVersion": "qosd.io/v1alpha1", "kind": "QoSNodeStatus", "metadata": {"name": "node-a"}}
    )
    try:
        shown = kubectl.shell(
            "kubectl get qosns $(kubectl get nodes -l qosd.io/canary=true -o jsonpath='{.items[*].metadata.name}') -o name"
        )
        assert shown.stdout.split() == ["qosnodestatus.qosd.io/node-a"]
    finally:
        kubectl.server.delete("qosd.io/v1alpha1", "QoSNodeStatus", "node-a")
    kubectl("label", "node", "node-a", "qosd.io/canary-")
    node = kubectl.server.get("v1", "Node", "node-a")
    assert node is not None and "qosd.io/canary" not in (node["metadata"].get("labels") or {})


def test_delete_removes_the_policy(kubectl: Kubectl, deployed: str) -> None:
    kubectl("apply", "-f", str(CANARY))
    out = kubectl("delete", "-f", str(CANARY))
    assert out.stdout.strip() == 'qospolicy.qosd.io "site-canary" deleted'
    assert kubectl.server.get("qosd.io/v1alpha1", "QoSPolicy", "site-canary") is None
    gone = kubectl("get", "qosp", "site-canary", check=False)
    assert gone.rc == 1 and 'qospolicies.qosd.io "site-canary" not found' in gone.stderr


def test_rollout_status_follows_the_daemonset_status(
    kubectl: Kubectl, rendered: list[Json], deployed: str
) -> None:
    """No controller runs here: until something writes the DaemonSet's status, ``rollout status``
    waits (and times out); once the status says every selected node runs the new pod, it returns."""
    ds = next(o for o in rendered if o["kind"] == "DaemonSet")
    name, namespace = ds["metadata"]["name"], ds["metadata"]["namespace"]
    waiting = kubectl("-n", namespace, "rollout", "status", f"ds/{name}", "--timeout=1s", check=False)
    assert waiting.rc == 1 and "timed out waiting for the condition" in waiting.stderr, waiting
    done = roll_out_daemonset(kubectl.server, namespace, name)
    out = kubectl("-n", namespace, "rollout", "status", f"ds/{name}", "--timeout=10s").stdout
    assert out.strip() == f'daemon set "{name}" successfully rolled out'
    assert done["status"]["desiredNumberScheduled"] == len(
        [n for n in kubectl.server.list("v1", "Node") if _selected(n, ds)]
    )


def _selected(node: Json, ds: Json) -> bool:
    wanted = ds["spec"]["template"]["spec"].get("nodeSelector") or {}
    return all((node["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())


def test_every_kustomization_renders(kubectl: Kubectl) -> None:
    """``kubectl kustomize`` (kubectl's built-in kustomize) renders every kustomization under
    examples/ into named objects; components render through the overlays that use them."""
    dirs = sorted(p.parent for p in (REPO / "examples").rglob("kustomization.yaml"))
    assert dirs, "no kustomization under examples/"
    for directory in dirs:
        if yaml.safe_load((directory / "kustomization.yaml").read_text()).get("kind") == "Component":
            continue
        objects = _docs(kubectl("kustomize", str(directory.relative_to(REPO))).stdout)
        assert objects, directory
        for obj in objects:
            assert obj.get("apiVersion") and obj.get("kind") and obj["metadata"].get("name"), (directory, obj)
