"""examples/deploy: what `kubectl apply -k` would send, rendered by the real kubectl, agrees with the code.

Every kustomization (the base at examples/deploy, each overlay under overlays/, and the base with
every combination of the components under components/) is rendered with `kubectl kustomize` (no
cluster needed) and checked: the base installs in audit mode on labelled nodes only, the enforce
component and overlays turn enforcement on and change nothing else, the DaemonSet's hygiene
(priority, resources, security context, tolerations, update strategy, read-only root with the
writable paths as volumes) holds in every render, and the arguments are flags `qosd run` has. That
the RBAC rules are sufficient is checked end to end in test_kube_daemon.py, with the emulator
enforcing them; the README's cluster commands run against the emulator in test_readme_cluster.py.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.config.crd import qosd_crds
from engine.config.pipeline import load_documents, validate
from engine.daemon.options import add_parser
from engine.model.units import parse_quantity
from engine.sources.kubelet import CPU_MANAGER_STATE
from tests.crdcheck import check_structural
from tests.realparts import kubectl_missing

DEPLOY = Path(__file__).resolve().parents[1] / "examples" / "deploy"
BASE = DEPLOY / "base"
KUBECTL = shutil.which("kubectl")
# tests/realparts.py: where kubectl is installed, a skip of these fails the run.
renders = pytest.mark.kubectl
COMPONENTS = sorted(p.parent.name for p in (DEPLOY / "components").glob("*/kustomization.yaml"))
OVERLAYS = sorted(p.parent.name for p in (DEPLOY / "overlays").glob("*/kustomization.yaml"))
ENABLED = {"qosd.io/enabled": "true"}
MODE = "QOSD_MODE"


def load(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


@functools.cache
def _render(directory: str) -> tuple[dict[str, Any], ...]:
    why = kubectl_missing()
    if why is not None or KUBECTL is None:
        pytest.skip(f"the real kubectl renders kustomize: {why}")
    done = subprocess.run([KUBECTL, "kustomize", directory], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"kubectl kustomize {directory} failed:\n{done.stderr}"
    return tuple(d for d in yaml.safe_load_all(done.stdout) if d)


def render(directory: Path) -> list[dict[str, Any]]:
    return list(_render(str(directory)))


def render_with(
    tmp: Path, components: tuple[str, ...], base: Path = BASE, **extra: Any
) -> list[dict[str, Any]]:
    """``base`` with these components, as a user's own overlay would add them. Kustomize takes
    only relative paths, and refuses an overlay inside its base's directory: hence tmp."""
    rel = functools.partial(os.path.relpath, start=tmp)
    (tmp / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [rel(base)],
                "components": [rel(DEPLOY / "components" / c) for c in components],
                **extra,
            }
        )
    )
    return render(tmp)


def daemonsets(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "DaemonSet"}


def container(ds: dict[str, Any]) -> dict[str, Any]:
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    return c


def mode(ds: dict[str, Any]) -> str:
    (value,) = (e["value"] for e in container(ds)["env"] if e["name"] == MODE)
    return str(value)


# What the downward API gives a pod, for expanding $(VAR) as the kubelet would.
DOWNWARD = {"spec.nodeName": "node-a", "metadata.namespace": "qosd-system", "status.podIP": "10.244.1.7"}


def expanded_args(c: dict[str, Any]) -> list[str]:
    """The arguments as the kubelet passes them: $(VAR) replaced by an env entry's value, literal
    or from the downward API ($$ is a literal $; an undefined variable stays as written, which qosd
    would then refuse)."""
    env = {
        e["name"]: e["value"] if "value" in e else DOWNWARD[e["valueFrom"]["fieldRef"]["fieldPath"]]
        for e in c.get("env", [])
    }

    def one(arg: str) -> str:
        return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]) if m[1] else "$", arg)

    return [one(a) for a in c["args"]]


def run_args(ds: dict[str, Any]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="qosd")
    add_parser(parser.add_subparsers())
    return parser.parse_args(expanded_args(container(ds)))


def without_mode(ds: dict[str, Any]) -> dict[str, Any]:
    """The DaemonSet with its QOSD_MODE entry taken out: what must not differ between modes."""
    out = yaml.safe_load(yaml.safe_dump(ds))
    c = container(out)
    c["env"] = [e for e in c["env"] if e["name"] != MODE]
    return out


def key(d: dict[str, Any]) -> tuple[str, str, str]:
    return d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]


@pytest.fixture(scope="module")
def base() -> list[dict[str, Any]]:
    return render(DEPLOY)


@pytest.fixture(scope="module")
def ds(base: list[dict[str, Any]]) -> dict[str, Any]:
    (only,) = daemonsets(base).values()
    return only


# ---------------------------------------------------------------- audit base, enforce overlays


@renders
def test_the_base_installs_qosd_in_audit_mode_on_labelled_nodes_only(ds: dict[str, Any]) -> None:
    assert mode(ds) == "audit"
    assert run_args(ds).enforcement == "audit"
    selector = ds["spec"]["template"]["spec"]["nodeSelector"]
    assert {k: selector[k] for k in ENABLED} == ENABLED
    assert "affinity" not in ds["spec"]["template"]["spec"] or ds["spec"]["template"]["spec"]["affinity"] is None


@renders
def test_overlays_enforce_turns_enforcement_on_and_changes_nothing_else(base: list[dict[str, Any]]) -> None:
    docs = render(DEPLOY / "overlays" / "enforce")
    (enforcing,) = daemonsets(docs).values()
    (audit,) = daemonsets(base).values()
    assert mode(enforcing) == "enforce" and run_args(enforcing).enforcement == "enforce"
    assert without_mode(enforcing) == without_mode(audit)
    assert [d for d in docs if d["kind"] != "DaemonSet"] == [d for d in base if d["kind"] != "DaemonSet"]


@renders
def test_the_canary_overlay_enforces_on_nodes_labelled_for_it_and_audits_on_the_others(
    base: list[dict[str, Any]],
) -> None:
    docs = render(DEPLOY / "overlays" / "canary-enforce")
    sets = daemonsets(docs)
    assert set(sets) == {"qosd", "qosd-enforce"}
    audit, enforcing = sets["qosd"], sets["qosd-enforce"]
    assert (mode(audit), mode(enforcing)) == ("audit", "enforce")
    # Disjoint node sets: the audit DaemonSet refuses exactly the nodes the enforcing one requires.
    enforce_selector = enforcing["spec"]["template"]["spec"]["nodeSelector"]
    assert enforce_selector == {**audit["spec"]["template"]["spec"]["nodeSelector"], "qosd.io/enforce": "true"}
    terms = audit["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "qosd.io/enforce", "operator": "NotIn", "values": ["true"]}]}]
    assert "affinity" not in enforcing["spec"]["template"]["spec"]
    # Disjoint pod selectors, each matching its own template only.
    sel = {n: d["spec"]["selector"]["matchLabels"] for n, d in sets.items()}
    assert sel["qosd"] != sel["qosd-enforce"]
    for name, d in sets.items():
        labels = d["spec"]["template"]["metadata"]["labels"]
        assert all(labels.get(k) == v for k, v in sel[name].items())
        other = sel["qosd-enforce" if name == "qosd" else "qosd"]
        assert not all(labels.get(k) == v for k, v in other.items())
    # Otherwise the copy is the base's DaemonSet: same image, flags, mounts and hygiene.
    (base_ds,) = daemonsets(base).values()
    assert container(without_mode(enforcing)) == container(without_mode(base_ds))
    assert [d for d in docs if d["kind"] != "DaemonSet"] == [d for d in base if d["kind"] != "DaemonSet"]


COMBINATIONS = [c for n in range(len(COMPONENTS) + 1) for c in itertools.combinations(COMPONENTS, n)]


@renders
@pytest.mark.parametrize("components", COMBINATIONS, ids=lambda c: "+".join(c) or "none")
def test_every_component_combination_renders_over_the_base_and_keeps_it(
    components: tuple[str, ...], base: list[dict[str, Any]], tmp_path: Path
) -> None:
    docs = render_with(tmp_path, components)
    assert {key(d) for d in base} <= {key(d) for d in docs}, "a component removed an object of the base"
    (qosd,) = (d for d in daemonsets(docs).values() if d["metadata"]["name"] == "qosd")
    assert mode(qosd) == ("enforce" if "enforce" in components else "audit")
    for d in daemonsets(docs).values():
        check_hygiene(d)


@renders
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_an_image_set_in_a_users_overlay_reaches_every_container(overlay: str, tmp_path: Path) -> None:
    """README: an `images:` entry named qosd in an overlay of your own sets the image of everything
    it renders, the canary's second DaemonSet and the components' workloads included."""
    image = {"name": "qosd", "newName": "registry.example/qosd", "newTag": "9.9.9"}
    docs = render_with(tmp_path, COMPONENTS, DEPLOY / "overlays" / overlay, images=[image])
    images = [
        c["image"]
        for d in docs
        if d["kind"] in ("DaemonSet", "Deployment")
        for c in d["spec"]["template"]["spec"]["containers"]
    ]
    assert len(images) >= (2 if overlay == "canary-enforce" else 1)
    assert set(images) == {"registry.example/qosd:9.9.9"}


@renders
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_keeps_the_daemonset_hygiene(overlay: str) -> None:
    sets = daemonsets(render(DEPLOY / "overlays" / overlay))
    assert sets
    for d in sets.values():
        check_hygiene(d)


def test_components_and_overlays_are_found() -> None:
    """The parametrized tests above must not pass by finding nothing."""
    assert "enforce" in COMPONENTS
    assert {"enforce", "canary-enforce"} <= set(OVERLAYS)


# ---------------------------------------------------------------- DaemonSet hygiene


def mounts_of(d: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["mountPath"]: m for m in container(d)["volumeMounts"]}


def mount_for(d: dict[str, Any], path: Path) -> dict[str, Any]:
    """The volume mount a path of the container lies under (the deepest one)."""
    found = [m for p, m in mounts_of(d).items() if str(path) == p or str(path).startswith(p.rstrip("/") + "/")]
    assert found, f"{path} is on the container's read-only root filesystem"
    return max(found, key=lambda m: len(m["mountPath"]))


def check_hygiene(d: dict[str, Any]) -> None:
    spec = d["spec"]["template"]["spec"]
    c = container(d)
    assert spec["priorityClassName"] == "system-node-critical"
    strategy = d["spec"]["updateStrategy"]
    assert strategy["type"] == "RollingUpdate" and strategy["rollingUpdate"]["maxUnavailable"]
    # Explicit tolerations: no wildcard that would put qosd on control-plane or any tainted node.
    assert spec["tolerations"] and all(t.get("key") for t in spec["tolerations"])
    assert not any("control-plane" in t["key"] or "master" in t["key"] for t in spec["tolerations"])
    # Resources: both requests and limits, limits at least the requests.
    res = c["resources"]
    for r in ("cpu", "memory"):
        assert parse_quantity(str(res["requests"][r])) <= parse_quantity(str(res["limits"][r])), r
    # The memory limit leaves room over the measured 48 MB RSS (bench/RESULTS.md) plus the client.
    assert parse_quantity(str(res["limits"]["memory"])) >= 2 * 80 * 2**20
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    # Every path qosd writes is a writable volume; everything else of the host is read-only.
    args = run_args(d)
    for written in (args.cgroup_root, args.resctrl_root, args.state_file, args.audit_log, Path("/tmp/x")):
        assert not mount_for(d, written).get("readOnly"), written
    kubelet = mount_for(d, CPU_MANAGER_STATE)
    assert kubelet["readOnly"] is True and kubelet["mountPath"] == str(CPU_MANAGER_STATE.parent)
    assert mount_for(d, Path("/etc/qosd/rules/site.yaml"))["readOnly"] is True


@renders
def test_the_daemonset_is_hygienic(ds: dict[str, Any]) -> None:
    check_hygiene(ds)


@renders
def test_the_daemonset_arguments_are_flags_qosd_run_has(ds: dict[str, Any]) -> None:
    args = run_args(ds)
    assert args.rules == [Path("/etc/qosd/rules")]
    assert args.listen == DOWNWARD["status.podIP"] + ":9464"  # the pod's IP only (docs/monitoring.md)
    assert not args.standalone and not args.dry_run


@renders
def test_node_name_and_namespace_come_from_the_downward_api(ds: dict[str, Any]) -> None:
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container(ds)["env"] if "valueFrom" in e}
    assert env == {"NODE_NAME": "spec.nodeName", "POD_NAMESPACE": "metadata.namespace", "POD_IP": "status.podIP"}


@renders
def test_probes_ask_the_daemons_health_endpoints_on_its_listen_port(ds: dict[str, Any]) -> None:
    c = container(ds)
    port = int(run_args(ds).listen.rpartition(":")[2])
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert ports[c[probe]["httpGet"]["port"]] == port


@renders
def test_host_paths_cover_the_cgroup_and_resctrl_roots(ds: dict[str, Any]) -> None:
    spec = ds["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    args = run_args(ds)
    for root in (args.cgroup_root, args.resctrl_root, args.state_file.parent):
        assert "hostPath" in volumes[mount_for(ds, root)["name"]], root
    assert spec["hostPID"] is True  # cgroup and resctrl task lists hold host PIDs


@renders
def test_rules_come_from_the_configmap_without_subpath(ds: dict[str, Any], base: list[dict[str, Any]]) -> None:
    """A subPath mount of a ConfigMap is never updated by the kubelet: no hot reload. And a
    hashed ConfigMap name would make every edit a new ConfigMap and a rollout, not a hot reload."""
    rules = mounts_of(ds)["/etc/qosd/rules"]
    assert "subPath" not in rules
    volume = next(v for v in ds["spec"]["template"]["spec"]["volumes"] if v["name"] == rules["name"])
    assert volume["configMap"]["name"] == "qosd-rules"
    (cm,) = (d for d in base if d["kind"] == "ConfigMap")
    assert cm["metadata"]["name"] == "qosd-rules"
    assert set(cm["data"]) == {"site.yaml"}


@renders
def test_the_daemonset_bounds_its_audit_log(ds: dict[str, Any]) -> None:
    """The audit log is on the host path: the DaemonSet sets its rotation explicitly (issue 18)."""
    args = run_args(ds)
    flags = container(ds)["args"]
    assert any(a.startswith("--audit-log-max-bytes=") for a in flags)
    assert any(a.startswith("--audit-log-keep=") for a in flags)
    assert args.audit_log is not None and 0 < args.audit_log_max_bytes <= 256 * 2**20
    assert 1 <= args.audit_log_keep <= 10


def test_kubelet_style_expansion_of_the_mode_argument() -> None:
    c = {"args": ["--mode=$(QOSD_MODE)", "$$(QOSD_MODE)", "$(UNSET)"], "env": [{"name": MODE, "value": "audit"}]}
    assert expanded_args(c) == ["--mode=audit", "$(QOSD_MODE)", "$(UNSET)"]


# ---------------------------------------------------------------- files of the base


def test_crds_are_what_qosd_crd_generates() -> None:
    """crds.yaml is `qosd crd` output; regenerate it with `qosd crd > examples/deploy/base/crds.yaml`."""
    assert load(BASE / "crds.yaml") == qosd_crds()
    for crd in load(BASE / "crds.yaml"):
        assert check_structural(crd) == []


def walk(directory: Path) -> Iterator[Path]:
    """Every kustomization reachable from examples/deploy, with the files it names."""
    (k,) = load(directory / "kustomization.yaml")
    yield directory / "kustomization.yaml"
    for entry in (*k.get("resources", ()), *k.get("components", ())):
        target = (directory / entry).resolve()
        if target.is_dir():
            yield from walk(target)
        else:
            yield target
    for gen in k.get("configMapGenerator", ()):
        yield from (directory / f for f in gen["files"])


def test_kustomizations_name_files_that_exist() -> None:
    roots = [DEPLOY, *(DEPLOY / "overlays" / o for o in OVERLAYS), *(DEPLOY / "components" / c for c in COMPONENTS)]
    for root in roots:
        for path in walk(root):
            assert path.is_file(), f"{root}: {path} does not exist"


@pytest.mark.parametrize("files", [["base/rules/site.yaml"], ["base/rules/site.yaml", "canary-policy.yaml"]])
def test_shipped_policies_validate(files: list[str]) -> None:
    docs = load_documents([DEPLOY / f for f in files])
    assert validate(docs) == []


@renders
def test_rbac_binds_the_daemonsets_service_account(ds: dict[str, Any]) -> None:
    docs = load(BASE / "rbac.yaml")
    sa = next(d for d in docs if d["kind"] == "ServiceAccount")
    assert ds["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"]
    for binding in (d for d in docs if d["kind"].endswith("Binding")):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "qosd-system"}
        ]
        assert any(
            d["kind"] == binding["roleRef"]["kind"] and d["metadata"]["name"] == binding["roleRef"]["name"]
            for d in docs
        )
