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
from dataclasses import replace
from typing import Any

from tests.kubeapi import errors as E
from tests.kubeapi import validation as V
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


def validate_workload(obj: Json, rolling_path: tuple[str, ...]) -> list[FieldError]:
    """ValidateDaemonSetSpec / ValidateDeploymentSpec, the parts a manifest gets wrong: a selector
    that matches the template's labels, a valid pod template (containers with names and images,
    restartPolicy Always), requests no larger than limits (ValidateResourceRequirements), and a
    rolling update that can make progress (maxUnavailable and maxSurge not both 0)."""
    spec = obj.get("spec") or {}
    template = spec.get("template") or {}
    errors = [replace(e, field=f"spec.template.{e.field}") for e in V.validate_pod(template)]
    selector = spec.get("selector")
    labels = (template.get("metadata") or {}).get("labels") or {}
    if not isinstance(selector, dict) or not (
        selector.get("matchLabels") or selector.get("matchExpressions")
    ):
        errors.append(E.required("spec.selector", ""))
    elif any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        errors.append(
            E.invalid("spec.template.metadata.labels", labels, "`selector` does not match template `labels`")
        )
    pod_spec = template.get("spec") or {}
    if pod_spec.get("restartPolicy", "Always") != "Always":
        errors.append(
            FieldError(
                "NotSupported",
                "spec.template.spec.restartPolicy",
                'supported values: "Always"',
                pod_spec["restartPolicy"],
            )
        )
    for key in ("initContainers", "containers"):
        for i, c in enumerate(pod_spec.get(key) or []):
            resources = (c.get("resources") if isinstance(c, dict) else None) or {}
            limits = resources.get("limits") or {}
            for name, request in (resources.get("requests") or {}).items():
                if name in limits and V.parse_quantity(request) > V.parse_quantity(limits[name]):
                    errors.append(
                        E.invalid(
                            f"spec.template.spec.{key}[{i}].resources.requests",
                            request,
                            f"must be less than or equal to {name} limit of {limits[name]}",
                        )
                    )
    rolling = spec
    for key in rolling_path:
        rolling = rolling.get(key) or {} if isinstance(rolling, dict) else {}
    if isinstance(rolling, dict) and rolling:
        path = "spec." + ".".join(rolling_path)
        for key in ("maxUnavailable", "maxSurge"):
            errors += V.int_or_percent_errors(f"{path}.{key}", rolling.get(key))
        if rolling.get("maxUnavailable") in (0, "0%") and rolling.get("maxSurge") in (0, "0%", None):
            errors.append(
                E.invalid(
                    f"{path}.maxUnavailable", rolling["maxUnavailable"], "may not be 0 when `maxSurge` is 0"
                )
            )
    return errors


class WorkloadStrategy(BuiltinStrategy):
    """DaemonSet and Deployment: pod template defaults plus the kind's own."""

    def __init__(self, model: str, defaults: Json, status: Json, rolling_path: tuple[str, ...]) -> None:
        super().__init__(model, generation=True, always=("spec", "status"), status=status)
        self.defaults = defaults
        self.rolling_path = rolling_path

    def validate(self, obj: Json, old: Json | None, api_version: str) -> list[FieldError]:
        return validate_workload(obj, self.rolling_path)

    def default(self, obj: Json) -> Json:
        spec = obj.get("spec")
        if isinstance(spec, dict):
            for key, value in self.defaults.items():
                if isinstance(value, dict):
                    current = spec.setdefault(key, {})
                    if isinstance(current, dict) and current.get("type", value["type"]) == value["type"]:
                        for k, v in value.items():
                            if isinstance(v, dict) and isinstance(current.get(k), dict):
                                for inner, default in v.items():  # rollingUpdate.maxSurge and the like
                                    current[k].setdefault(inner, default)
                            else:
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
                "V1DaemonSet",
                {"updateStrategy": rolling, "revisionHistoryLimit": 10},
                daemonset_status,
                ("updateStrategy", "rollingUpdate"),
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
                ("strategy", "rollingUpdate"),
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


def bootstrap_objects() -> list[Json]:
    """What kube-apiserver creates at start-up besides the namespaces: the two system
    PriorityClasses (pkg/apis/scheduling SystemPriorityClasses), which a DaemonSet such as qosd's
    names in priorityClassName."""
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
            "description": description,
            "preemptionPolicy": "PreemptLowerPriority",
        }
        for name, value, description in (
            (
                "system-node-critical",
                2000001000,
                "Used for system critical pods that must not be moved from their current node.",
            ),
            (
                "system-cluster-critical",
                2000000000,
                "Used for system critical pods that must run in the cluster, but can be moved to another node "
                "if necessary.",
            ),
        )
    ]
