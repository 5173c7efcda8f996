"""examples/deploy: the manifests of `kubectl apply -k examples/deploy` agree with the code.

No cluster (and no kubectl) can run here, so these checks stand in for what applying would catch
late: a stale CRD, a flag the binary does not have, a probe on the wrong port, a ConfigMap mount that
could never hot-reload, a rules file that does not validate. That the RBAC rules are sufficient is
checked end to end in test_kube_daemon.py, with the emulator enforcing them.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.config.crd import qosd_crds
from engine.config.pipeline import load_documents, validate
from engine.daemon.options import add_parser
from tests.crdcheck import check_structural

DEPLOY = Path(__file__).resolve().parents[1] / "examples" / "deploy"


def load(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def daemonset() -> dict[str, Any]:
    (ds,) = load("daemonset.yaml")
    return ds


def container() -> dict[str, Any]:
    (c,) = daemonset()["spec"]["template"]["spec"]["containers"]
    return c


def run_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="qosd")
    add_parser(parser.add_subparsers())
    return parser.parse_args(container()["args"])


def test_crds_are_what_qosd_crd_generates() -> None:
    """crds.yaml is `qosd crd` output; regenerate it with `qosd crd > examples/deploy/crds.yaml`."""
    assert load("crds.yaml") == qosd_crds()
    for crd in load("crds.yaml"):
        assert check_structural(crd) == []


def test_kustomization_lists_files_that_exist_and_keeps_the_configmap_name_stable() -> None:
    (k,) = load("kustomization.yaml")
    for resource in k["resources"]:
        assert (DEPLOY / resource).is_file(), resource
    (gen,) = k["configMapGenerator"]
    assert gen["name"] == "qosd-rules"
    for f in gen["files"]:
        assert (DEPLOY / f).is_file(), f
    # A hashed name would make every edit a new ConfigMap and a DaemonSet rollout, not a hot reload.
    assert k["generatorOptions"]["disableNameSuffixHash"] is True


def test_the_daemonset_arguments_are_flags_qosd_run_has() -> None:
    args = run_args()
    assert args.rules == [Path("/etc/qosd/rules")]
    assert args.listen == ":9464"
    assert not args.standalone and not args.dry_run


def test_node_name_and_namespace_come_from_the_downward_api() -> None:
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container()["env"]}
    assert env == {"NODE_NAME": "spec.nodeName", "POD_NAMESPACE": "metadata.namespace"}


def test_probes_ask_the_daemons_health_endpoints_on_its_listen_port() -> None:
    c = container()
    port = int(run_args().listen.rpartition(":")[2])
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert ports[c[probe]["httpGet"]["port"]] == port


def test_host_paths_cover_the_cgroup_and_resctrl_roots() -> None:
    spec = daemonset()["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m for m in container()["volumeMounts"]}
    args = run_args()
    for root in (args.cgroup_root, args.resctrl_root, args.state_file.parent):
        mount = next(m for path, m in mounts.items() if str(root).startswith(path))
        volume = volumes[mount["name"]]
        assert "hostPath" in volume, root
    assert spec["hostPID"] is True  # cgroup and resctrl task lists hold host PIDs


def test_rules_come_from_the_configmap_without_subpath() -> None:
    """A subPath mount of a ConfigMap is never updated by the kubelet: no hot reload."""
    rules = next(m for m in container()["volumeMounts"] if m["mountPath"] == "/etc/qosd/rules")
    assert "subPath" not in rules
    volume = next(v for v in daemonset()["spec"]["template"]["spec"]["volumes"] if v["name"] == rules["name"])
    assert volume["configMap"]["name"] == "qosd-rules"


@pytest.mark.parametrize("files", [["rules/site.yaml"], ["rules/site.yaml", "canary-policy.yaml"]])
def test_shipped_policies_validate(files: list[str]) -> None:
    docs = load_documents([DEPLOY / f for f in files])
    assert validate(docs) == []


def test_rbac_binds_the_daemonsets_service_account() -> None:
    docs = load("rbac.yaml")
    sa = next(d for d in docs if d["kind"] == "ServiceAccount")
    assert daemonset()["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"]
    for binding in (d for d in docs if d["kind"].endswith("Binding")):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "qosd-system"}
        ]
        assert any(
            d["kind"] == binding["roleRef"]["kind"] and d["metadata"]["name"] == binding["roleRef"]["name"]
            for d in docs
        )


def test_the_daemonset_bounds_its_audit_log() -> None:
    """The audit log is on the host path: the DaemonSet sets its rotation explicitly (issue 18)."""
    args = run_args()
    flags = container()["args"]
    assert any(a.startswith("--audit-log-max-bytes=") for a in flags)
    assert any(a.startswith("--audit-log-keep=") for a in flags)
    assert args.audit_log is not None and 0 < args.audit_log_max_bytes <= 256 * 2**20
    assert 1 <= args.audit_log_keep <= 10
