"""The built-in kinds an install applies (``kubectl apply -k examples/deploy`` and its components)
beyond the ones qosd itself reads and writes (tests/kubeapi/registry.py): ServiceAccount, ConfigMap,
Secret, Service, DaemonSet, Deployment, the RBAC kinds, NetworkPolicy, PriorityClass and the admission
configuration kinds.

Each is stored with the generic REST semantics of the registry, decoded through its generated client
model (unknown fields dropped with a warning, or refused under ``fieldValidation=Strict``), and
defaulted where ``kubectl get -o yaml`` shows it on a cluster (SetDefaults_DaemonSet,
SetDefaults_Deployment, SetDefaults_Service, SetDefaults_PodSpec / Container in k8s.io/kubernetes
pkg/apis/*/v1/defaults.go). Strategic merge patch list strategies are those of the Go struct tags in
k8s.io/api (``patchStrategy:"merge" patchMergeKey:...``); a list without one is replaced.

Not emulated: controllers. A DaemonSet or Deployment never gets pods or a moving status (its
``status`` stays the zero status the API server writes on create), a Service gets no endpoints, and no
cluster IP is allocated from a real range (the first free address of 10.96.0.0/12 is taken).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from tests.kubeapi.errors import FieldError
from tests.kubeapi.patch import _METADATA, _POD
from tests.kubeapi.registry import METADATA_FIELDS, ResourceType, Strategy

Json = dict[str, Any]

_TEMPLATE = {("spec", "template", *path): key for path, key in _POD.items() if path[0] == "spec"}
_CONDITIONS = {("status", "conditions"): "type"}


def default_pod_spec(spec: Any) -> None:
    """SetDefaults_PodSpec / SetDefaults_Container, the fields a cluster shows in a pod template."""
    if not isinstance(spec, dict):
        return
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            if not isinstance(c, dict):
                continue
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            image = str(c.get("image") or "")
            tag = image.rsplit("/", 1)[-1].partition(":")[2] if "@" not in image else "digest"
            c.setdefault("imagePullPolicy", "Always" if tag in ("", "latest") else "IfNotPresent")
            for port in c.get("ports") or []:
                if isinstance(port, dict):
                    port.setdefault("protocol", "TCP")
            c.setdefault("resources", {})


class BuiltinStrategy(Strategy):
    """A built-in kind with no validation beyond ObjectMeta (the registry's) and the given defaults."""

    def __init__(
        self,
        model: str,
        *,
        generation: bool = False,
        always: tuple[str, ...] = (),
        status: Json | None = None,
    ) -> None:
        self.model = model
        self.generation = generation
        self.always = always
        self.initial_status = status

    def prepare_create(self, obj: Json) -> None:
        if self.initial_status is not None:
            obj["status"] = dict(self.initial_status)

    def validate(self, obj: Json, old: Json | None, api_version: str) -> list[FieldError]:
        return []


class WorkloadStrategy(BuiltinStrategy):
    """DaemonSet and Deployment: pod template defaults plus the kind's own."""

    def __init__(self, model: str, defaults: Json, status: Json) -> None:
        super().__init__(model, generation=True, always=("spec", "status"), status=status)
        self.defaults = defaults

    def default(self, obj: Json) -> Json:
        spec = obj.get("spec")
        if isinstance(spec, dict):
            for key, value in self.defaults.items():
                if isinstance(value, dict):
                    current = spec.setdefault(key, {})
                    if isinstance(current, dict) and current.get("type", value["type"]) == value["type"]:
                        for k, v in value.items():
                            current.setdefault(k, dict(v) if isinstance(v, dict) else v)
                else:
                    spec.setdefault(key, value)
            template = spec.get("template")
            if isinstance(template, dict):
                default_pod_spec(template.get("spec"))
        return super().default(obj)


class ServiceStrategy(BuiltinStrategy):
    """SetDefaults_Service and a cluster IP from 10.96.0.0/12 (the default service range)."""

    def __init__(self, taken: set[str]) -> None:
        super().__init__("V1Service", always=("spec", "status"), status={"loadBalancer": {}})
        self.taken = taken

    def default(self, obj: Json) -> Json:
        spec = obj.get("spec")
        if isinstance(spec, dict):
            spec.setdefault("type", "ClusterIP")
            spec.setdefault("sessionAffinity", "None")
            spec.setdefault("internalTrafficPolicy", "Cluster")
            for port in spec.get("ports") or []:
                if isinstance(port, dict):
                    port.setdefault("protocol", "TCP")
                    port.setdefault("targetPort", port.get("port"))
        return super().default(obj)

    def prepare_create(self, obj: Json) -> None:
        super().prepare_create(obj)
        spec = obj.setdefault("spec", {})
        if spec.get("clusterIP") in (None, ""):
            for address in ipaddress.ip_network("10.96.0.0/12").hosts():
                if str(address) not in self.taken and not str(address).endswith(".1"):
                    spec["clusterIP"] = str(address)
                    break
        if spec.get("clusterIP") not in (None, "", "None"):
            self.taken.add(spec["clusterIP"])
            spec["clusterIPs"] = [spec["clusterIP"]]
            spec.setdefault("ipFamilies", ["IPv4"])
            spec.setdefault("ipFamilyPolicy", "SingleStack")

    def prepare_update(self, new: Json, old: Json) -> None:
        old_spec, spec = old.get("spec") or {}, new.setdefault("spec", {})
        for key in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
            if key in old_spec and spec.get(key) in (None, "", []):
                spec[key] = old_spec[key]


def _kind(
    group: str,
    plural: str,
    kind: str,
    namespaced: bool,
    strategy: Strategy,
    short: tuple[str, ...] = (),
    *,
    status: bool = False,
    patch: Mapping[tuple[str, ...], str] | None = None,
    categories: tuple[str, ...] = (),
    version: str = "v1",
) -> ResourceType:
    return ResourceType(
        group,
        version,
        plural,
        kind,
        namespaced,
        strategy,
        kind.lower(),
        short,
        frozenset({"status"} if status else set()),
        dict(METADATA_FIELDS),
        {**_METADATA, **(patch or {})},
        categories=categories,
    )


def install_kinds() -> list[ResourceType]:
    """The kinds of an install, each at its GA group/version."""
    daemonset_status = {
        "currentNumberScheduled": 0,
        "desiredNumberScheduled": 0,
        "numberMisscheduled": 0,
        "numberReady": 0,
    }
    rolling = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
    deployment_strategy = {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"},
    }
    rbac = "rbac.authorization.k8s.io"
    admission = "admissionregistration.k8s.io"
    return [
        _kind(
            "",
            "serviceaccounts",
            "ServiceAccount",
            True,
            BuiltinStrategy("V1ServiceAccount"),
            ("sa",),
            patch={("secrets",): "name"},
        ),
        _kind("", "configmaps", "ConfigMap", True, BuiltinStrategy("V1ConfigMap"), ("cm",)),
        _kind("", "secrets", "Secret", True, BuiltinStrategy("V1Secret")),
        _kind(
            "",
            "services",
            "Service",
            True,
            ServiceStrategy(set()),
            ("svc",),
            status=True,
            patch={("spec", "ports"): "port"},
            categories=("all",),
        ),
        _kind(
            "apps",
            "daemonsets",
            "DaemonSet",
            True,
            WorkloadStrategy(
                "V1DaemonSet", {"updateStrategy": rolling, "revisionHistoryLimit": 10}, daemonset_status
            ),
            ("ds",),
            status=True,
            patch={**_TEMPLATE, **_CONDITIONS},
            categories=("all",),
        ),
        _kind(
            "apps",
            "deployments",
            "Deployment",
            True,
            WorkloadStrategy(
                "V1Deployment",
                {
                    "replicas": 1,
                    "strategy": deployment_strategy,
                    "revisionHistoryLimit": 10,
                    "progressDeadlineSeconds": 600,
                },
                {},
            ),
            ("deploy",),
            status=True,
            patch={**_TEMPLATE, **_CONDITIONS},
            categories=("all",),
        ),
        _kind(rbac, "clusterroles", "ClusterRole", False, BuiltinStrategy("V1ClusterRole")),
        _kind(
            rbac, "clusterrolebindings", "ClusterRoleBinding", False, BuiltinStrategy("V1ClusterRoleBinding")
        ),
        _kind(rbac, "roles", "Role", True, BuiltinStrategy("V1Role")),
        _kind(rbac, "rolebindings", "RoleBinding", True, BuiltinStrategy("V1RoleBinding")),
        _kind(
            "networking.k8s.io",
            "networkpolicies",
            "NetworkPolicy",
            True,
            BuiltinStrategy("V1NetworkPolicy", generation=True),
            ("netpol",),
        ),
        _kind(
            "scheduling.k8s.io",
            "priorityclasses",
            "PriorityClass",
            False,
            BuiltinStrategy("V1PriorityClass"),
            ("pc",),
        ),
        _kind(
            admission,
            "validatingwebhookconfigurations",
            "ValidatingWebhookConfiguration",
            False,
            BuiltinStrategy("V1ValidatingWebhookConfiguration", generation=True),
            patch={("webhooks",): "name"},
        ),
        _kind(
            admission,
            "validatingadmissionpolicies",
            "ValidatingAdmissionPolicy",
            False,
            BuiltinStrategy("V1ValidatingAdmissionPolicy", generation=True, status={}),
            status=True,
        ),
        _kind(
            admission,
            "validatingadmissionpolicybindings",
            "ValidatingAdmissionPolicyBinding",
            False,
            BuiltinStrategy("V1ValidatingAdmissionPolicyBinding", generation=True),
        ),
    ]
