"""The slice of the API server's validation that qosd's writes can trip over.

Why these rules and not all of pkg/apis/core/validation: each one is a mistake a node agent can make
against a real cluster and that a permissive fake would hide, e.g. publishing ``2500m`` of an extended
resource (extended resources must be whole numbers), an Event whose namespace does not match the
object it is about, a taint with an unknown effect, or changing a pod's spec in place. Messages and
field paths are those of pkg/apis/core/validation and k8s.io/apimachinery validation.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

from tests.kubeapi.errors import ApiError, FieldError, forbidden, invalid, required

Json = dict[str, Any]

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_RE = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")
_DNS1123_LABEL_RE = re.compile(_DNS1123_LABEL)
_QUALIFIED_NAME_RE = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE_RE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")

SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
QUALIFIED_NAME_MESSAGE = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


def dns_subdomain_errors(value: str) -> list[str]:
    out = []
    if len(value) > 253:
        out.append("must be no more than 253 characters")
    if not _DNS1123_SUBDOMAIN_RE.fullmatch(value):
        out.append(SUBDOMAIN_MESSAGE)
    return out


def dns_label_errors(value: str) -> list[str]:
    out = []
    if len(value) > 63:
        out.append("must be no more than 63 characters")
    if not _DNS1123_LABEL_RE.fullmatch(value):
        out.append(LABEL_MESSAGE)
    return out


def qualified_name_errors(value: str) -> list[str]:
    """validation.IsQualifiedName: an optional DNS-subdomain prefix, a slash, and a 63-character name."""
    prefix, _, name = value.rpartition("/")
    out: list[str] = []
    if "/" in value and (not prefix or dns_subdomain_errors(prefix)):
        out.append("prefix part " + SUBDOMAIN_MESSAGE)
    if not name:
        out.append("name part must be non-empty")
    elif len(name) > 63:
        out.append("name part must be no more than 63 characters")
    elif not _QUALIFIED_NAME_RE.fullmatch(name):
        out.append(QUALIFIED_NAME_MESSAGE)
    return out


def validate_object_meta(obj: Json, *, namespaced: bool, name_is_label: bool = False) -> list[FieldError]:
    """ValidateObjectMeta: name (or generateName), namespace presence by scope, label syntax."""
    meta = obj.get("metadata") or {}
    errors: list[FieldError] = []
    name = meta.get("name") or ""
    if not name:
        errors.append(required("metadata.name", "name or generateName is required"))
    else:
        for msg in dns_label_errors(name) if name_is_label else dns_subdomain_errors(name):
            errors.append(invalid("metadata.name", name, msg))
    namespace = meta.get("namespace") or ""
    if namespaced and not namespace:
        errors.append(required("metadata.namespace", ""))
    if not namespaced and namespace:
        errors.append(forbidden("metadata.namespace", "not allowed on this type"))
    for key, value in (meta.get("labels") or {}).items():
        for msg in qualified_name_errors(key):
            errors.append(invalid("metadata.labels", key, msg))
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE_RE.fullmatch(value):
            errors.append(
                invalid(
                    "metadata.labels",
                    value,
                    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
                    "or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
                    "'my_value',  or '12345', regex used for validation is "
                    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
                )
            )
    for key in meta.get("annotations") or {}:
        for msg in qualified_name_errors(key):
            errors.append(invalid("metadata.annotations", key, msg))
    return errors


# --------------------------------------------------------------------------------------------------
# Quantities and node resources
# --------------------------------------------------------------------------------------------------

_QUANTITY_RE = re.compile(
    r"([+-]?(?:\d+(?:\.\d*)?|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?"
)
QUANTITY_FORMAT_MESSAGE = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
_SUFFIX = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}


def parse_quantity(value: Any) -> Decimal:
    """resource.ParseQuantity; a malformed quantity cannot even be decoded, so it is a 400."""
    if isinstance(value, bool):
        raise ApiError(400, "BadRequest", QUANTITY_FORMAT_MESSAGE)
    if isinstance(value, int | float):
        return Decimal(str(value))
    m = _QUANTITY_RE.fullmatch(value) if isinstance(value, str) else None
    if not m:
        raise ApiError(400, "BadRequest", QUANTITY_FORMAT_MESSAGE)
    try:
        number = Decimal(m.group(1))
    except InvalidOperation:
        raise ApiError(400, "BadRequest", QUANTITY_FORMAT_MESSAGE) from None
    suffix = m.group(2) or ""
    if suffix[:1] in ("e", "E"):
        return number * (Decimal(10) ** int(suffix[1:]))
    return number * _SUFFIX[suffix]


def is_extended_resource(name: str) -> bool:
    """helper.IsExtendedResourceName: domain-qualified, not in *kubernetes.io/, not requests.*."""
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    return not qualified_name_errors("requests." + name)


_STANDARD_NODE_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage", "storage", "pods"})


def validate_node_resources(node: Json) -> list[FieldError]:
    """ValidateNodeResources: each capacity/allocatable quantity valid and non-negative; extended
    resources (and pods) must be whole numbers; an unprefixed name must be a standard resource."""
    errors: list[FieldError] = []
    status = node.get("status") or {}
    for section in ("capacity", "allocatable"):
        for name, raw in (status.get(section) or {}).items():
            path = f"status.{section}.{name}"
            if "/" not in name and name not in _STANDARD_NODE_RESOURCES and not name.startswith("hugepages-"):
                errors.append(invalid(path, name, "must be a standard resource type or fully qualified"))
            elif "/" in name:
                for msg in qualified_name_errors(name):
                    errors.append(invalid(path, name, msg))
            quantity = parse_quantity(raw)
            if quantity < 0:
                errors.append(invalid(path, raw, "must be greater than or equal to 0"))
            if (is_extended_resource(name) or name == "pods") and quantity != quantity.to_integral_value():
                errors.append(invalid(path, raw, "must be an integer"))
    return errors


_TAINT_EFFECTS = ("NoExecute", "NoSchedule", "PreferNoSchedule")


def validate_taints(taints: Any) -> list[FieldError]:
    """validateNodeTaints: qualified key, label-syntax value, known effect, unique (key, effect)."""
    errors: list[FieldError] = []
    seen: set[tuple[str, str]] = set()
    for i, taint in enumerate(taints or []):
        path = f"spec.taints[{i}]"
        key = taint.get("key") or ""
        if not key:
            errors.append(required(f"{path}.key", ""))
        for msg in qualified_name_errors(key) if key else []:
            errors.append(invalid(f"{path}.key", key, msg))
        effect = taint.get("effect") or ""
        if not effect:
            errors.append(required(f"{path}.effect", ""))
        elif effect not in _TAINT_EFFECTS:
            supported = ", ".join(f'"{e}"' for e in _TAINT_EFFECTS)
            errors.append(
                FieldError("NotSupported", f"{path}.effect", f"supported values: {supported}", effect)
            )
        if (key, effect) in seen:
            errors.append(
                FieldError(
                    "Duplicate",
                    path,
                    "taints must be unique by key and effect pair",
                    {"key": key, "effect": effect},
                )
            )
        seen.add((key, effect))
    return errors


# --------------------------------------------------------------------------------------------------
# Pods
# --------------------------------------------------------------------------------------------------

POD_UPDATE_MESSAGE = (
    "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,"
    "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)


def validate_pod(pod: Json) -> list[FieldError]:
    spec = pod.get("spec") or {}
    errors: list[FieldError] = []
    containers = spec.get("containers")
    if not containers:
        errors.append(required("spec.containers", ""))
    names: set[str] = set()
    for i, c in enumerate(containers or []):
        name = c.get("name") or ""
        if not name:
            errors.append(required(f"spec.containers[{i}].name", ""))
        elif name in names:
            errors.append(FieldError("Duplicate", f"spec.containers[{i}].name", "", name))
        names.add(name)
        if not c.get("image"):
            errors.append(required(f"spec.containers[{i}].image", ""))
    return errors


def _mutable_pod_spec_removed(spec: Json) -> Json:
    out = dict(spec)
    for key in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds"):
        out.pop(key, None)
    for key in ("containers", "initContainers"):
        if isinstance(out.get(key), list):
            out[key] = [{k: v for k, v in c.items() if k != "image"} for c in out[key]]
    return out


def validate_pod_update(new: Json, old: Json) -> list[FieldError]:
    """ValidatePodUpdate: a pod's spec is immutable apart from images, the active deadline, added
    tolerations and the grace period; in particular spec.nodeName never changes after binding."""
    errors = validate_pod(new)
    new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
    if _mutable_pod_spec_removed(new_spec) != _mutable_pod_spec_removed(old_spec):
        errors.append(forbidden("spec", POD_UPDATE_MESSAGE))
    old_tolerations = old_spec.get("tolerations") or []
    new_tolerations = new_spec.get("tolerations") or []
    if any(t not in new_tolerations for t in old_tolerations):
        errors.append(
            forbidden(
                "spec.tolerations", "existing toleration can not be modified except its tolerationSeconds"
            )
        )
    return errors


# --------------------------------------------------------------------------------------------------
# Events (pkg/apis/core/validation/events.go)
# --------------------------------------------------------------------------------------------------

_LIMIT_128 = 128
_NOTE_LIMIT = 1024


def validate_event(event: Json, *, strict: bool) -> list[FieldError]:
    """ValidateEventCreate. ``strict`` is true for events.k8s.io/v1 writes (the new Event API), false for
    core/v1, which only runs the legacy checks. Paths use the core/v1 field names, as the server does
    after converting (reportingComponent is named reportingController in strict mode)."""
    errors: list[FieldError] = []
    namespace = (event.get("metadata") or {}).get("namespace") or ""
    involved = event.get("involvedObject") or {}
    involved_ns = involved.get("namespace") or ""
    controller_field = "reportingController" if strict else "reportingComponent"
    if not event.get("eventTime"):
        if not involved_ns:
            if namespace not in ("", "default"):
                errors.append(
                    invalid("involvedObject.namespace", involved_ns, "does not match event.namespace")
                )
        elif namespace != involved_ns:
            errors.append(invalid("involvedObject.namespace", involved_ns, "does not match event.namespace"))
    else:
        if not involved_ns and namespace not in ("default", "kube-system"):
            errors.append(invalid("involvedObject.namespace", involved_ns, "does not match event.namespace"))
        controller = event.get("reportingComponent") or ""
        if not controller:
            errors.append(required(controller_field, ""))
        else:
            for msg in qualified_name_errors(controller):
                errors.append(invalid(controller_field, controller, msg))
        for key in ("reportingInstance", "action", "reason"):
            value = event.get(key) or ""
            if not value:
                errors.append(required(key, ""))
            if len(value) > _LIMIT_128:
                errors.append(invalid(key, "", f"can have at most {_LIMIT_128} characters"))
        if len(event.get("message") or "") > _NOTE_LIMIT:
            errors.append(invalid("message", "", f"can have at most {_NOTE_LIMIT} characters"))
    for msg in dns_subdomain_errors(namespace) if namespace else []:
        errors.append(invalid("namespace", namespace, msg))
    if strict:
        if not event.get("eventTime"):
            errors.append(required("eventTime", ""))
        if event.get("type") not in ("Normal", "Warning"):
            errors.append(invalid("type", "", f"has invalid value: {event.get('type') or ''}"))
        for key in ("firstTimestamp", "lastTimestamp"):
            if event.get(key):
                errors.append(invalid(key, "", "needs to be unset"))
        if event.get("count"):
            errors.append(invalid("count", "", "needs to be unset"))
        source = event.get("source") or {}
        if source.get("component") or source.get("host"):
            errors.append(invalid("source", "", "needs to be unset"))
    return errors


# --------------------------------------------------------------------------------------------------
# PodDisruptionBudgets and Leases
# --------------------------------------------------------------------------------------------------


def int_or_percent_errors(path: str, value: Any) -> list[FieldError]:
    if value is None:
        return []
    if isinstance(value, int) and not isinstance(value, bool):
        return [] if value >= 0 else [invalid(path, value, "must be greater than or equal to 0")]
    if isinstance(value, str):
        m = re.fullmatch(r"(\d+)%", value)
        if not m:
            return [
                invalid(
                    path,
                    value,
                    "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
                )
            ]
        if int(m.group(1)) > 100:
            return [invalid(path, value, "must not be greater than 100%")]
        return []
    return [invalid(path, value, "must be an integer or percentage")]


def validate_pdb(pdb: Json) -> list[FieldError]:
    spec = pdb.get("spec") or {}
    errors: list[FieldError] = []
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        errors.append(invalid("spec", spec, "minAvailable and maxUnavailable cannot be both set"))
    errors += int_or_percent_errors("spec.minAvailable", spec.get("minAvailable"))
    errors += int_or_percent_errors("spec.maxUnavailable", spec.get("maxUnavailable"))
    policy = spec.get("unhealthyPodEvictionPolicy")
    if policy is not None and policy not in ("IfHealthyBudget", "AlwaysAllow"):
        errors.append(
            FieldError(
                "NotSupported",
                "spec.unhealthyPodEvictionPolicy",
                'supported values: "AlwaysAllow", "IfHealthyBudget"',
                policy,
            )
        )
    return errors


def validate_lease(lease: Json) -> list[FieldError]:
    spec = lease.get("spec") or {}
    errors: list[FieldError] = []
    for key in ("leaseDurationSeconds", "leaseTransitions"):
        value = spec.get(key)
        if value is None:
            continue
        if key == "leaseDurationSeconds" and value <= 0:
            errors.append(invalid(f"spec.{key}", value, "must be greater than 0"))
        if key == "leaseTransitions" and value < 0:
            errors.append(invalid(f"spec.{key}", value, "must be greater than or equal to 0"))
    return errors
