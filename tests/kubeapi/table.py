"""Server-side printing: a list or an object as a meta.k8s.io/v1 Table.

kubectl asks for ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io`` on ``kubectl get`` and
prints the columns the server chose (https://kubernetes.io/docs/reference/using-api/api-concepts/
#receiving-resources-as-tables). A custom resource's columns are its CRD version's
``additionalPrinterColumns`` (name, type, format, priority and a JSONPath evaluated on the object; a
path that finds nothing is an empty cell, printed ``<none>``), after the implicit ``Name``; a CRD that
declares none gets ``Age``. Built-in kinds get the columns of kube-apiserver's printers
(pkg/printers/internalversion) for the kinds an install touches; any other kind the default
``Name``/``Created At`` (an RFC 3339 timestamp). Ages (a CRD's ``date`` columns, ``Age`` and ``Last
Seen`` of built-in kinds) are rendered by the server as ``HumanDuration`` does; kubectl prints cells
as they come. ``includeObject`` (None, Metadata: the default, Object) decides what each row
carries.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from tests.kubeapi import errors as E
from tests.kubeapi.registry import ResourceType

Json = dict[str, Any]

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def wants_table(accept: str) -> bool:
    """Whether the client's first acceptable media type is a meta.k8s.io/v1 Table."""
    for entry in accept.split(","):
        base, *params = [p.strip() for p in entry.split(";")]
        values = dict(p.partition("=")[::2] for p in params)
        if base == "application/json" and values.get("as") == "Table":
            if values.get("g") == "meta.k8s.io" and values.get("v") == "v1":
                return True
            continue  # v1beta1 tables: not served
        if base in ("application/json", "*/*", "application/*"):
            return False
    return False


# --------------------------------------------------------------------------------------------------
# JSONPath (the subset printer columns use: .a.b, ['a'], [n], [*], [?(@.k=="v")], [?(@.k!="v")])
# --------------------------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""\.(?P<field>[A-Za-z0-9_\-]+)"""
    r"""|\[(?P<quote>['"])(?P<key>.*?)(?P=quote)\]"""
    r"""|\[(?P<index>-?\d+)\]"""
    r"""|\[(?P<star>\*)\]"""
    r"""|\[\?\(@(?P<fpath>(?:\.[A-Za-z0-9_\-]+)+)\s*(?P<op>==|!=)\s*(?P<fq>['"])(?P<fval>.*?)(?P=fq)\)\]"""
)


def jsonpath(obj: Any, path: str) -> list[Any]:
    """Every value ``path`` finds in ``obj`` (k8s.io/client-go/util/jsonpath semantics for the subset
    above); raises ValueError on a path outside it."""
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    values = [obj]
    pos = 0
    while pos < len(path):
        m = _TOKEN.match(path, pos)
        if m is None:
            raise ValueError(f"unsupported JSONPath {path!r} at {path[pos:]!r}")
        pos = m.end()
        out: list[Any] = []
        for value in values:
            if m.group("field") is not None or m.group("key") is not None:
                key = m.group("field") if m.group("field") is not None else m.group("key")
                if isinstance(value, dict) and key in value:
                    out.append(value[key])
            elif m.group("index") is not None:
                i = int(m.group("index"))
                if isinstance(value, list) and -len(value) <= i < len(value):
                    out.append(value[i])
            elif m.group("star"):
                if isinstance(value, list):
                    out.extend(value)
                elif isinstance(value, dict):
                    out.extend(value.values())
            else:
                items = value if isinstance(value, list) else []
                want, negate = m.group("fval"), m.group("op") == "!="
                for item in items:
                    found = jsonpath(item, m.group("fpath"))
                    matched = bool(found) and str(_scalar(found[0])) == want
                    if matched != negate and (found or negate):
                        out.append(item)
        values = out
    return values


def _scalar(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


# --------------------------------------------------------------------------------------------------
# Cells
# --------------------------------------------------------------------------------------------------


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def _since(stamp: Any) -> str:
    """translateTimestampSince: "<unknown>" for an unset time."""
    if not isinstance(stamp, str) or not stamp:
        return "<unknown>"
    try:
        then = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    return human_duration((datetime.now(UTC) - then).total_seconds())


def _age(obj: Json) -> str:
    return _since((obj.get("metadata") or {}).get("creationTimestamp"))


def _get(obj: Any, *keys: str) -> Any:
    for key in keys:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _none(value: Any) -> Any:
    return "<none>" if value in (None, "", [], {}) else value


def _node_status(node: Json) -> str:
    conditions = {c.get("type"): c.get("status") for c in _get(node, "status", "conditions") or []}
    ready = conditions.get("Ready")
    status = "Ready" if ready == "True" else "NotReady" if ready == "False" else "Unknown"
    if _get(node, "spec", "unschedulable"):
        status += ",SchedulingDisabled"
    return status


def _node_roles(node: Json) -> str:
    roles = sorted(
        k.removeprefix("node-role.kubernetes.io/")
        for k in (_get(node, "metadata", "labels") or {})
        if k.startswith("node-role.kubernetes.io/")
    )
    return ",".join(r for r in roles if r) or "<none>"


def _pod_ready(pod: Json) -> str:
    containers = _get(pod, "spec", "containers") or []
    statuses = _get(pod, "status", "containerStatuses") or []
    return f"{sum(1 for s in statuses if s.get('ready'))}/{len(containers)}"


def _selector(labels: Any) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted((labels or {}).items())) or "<none>"


def _ports(service: Json) -> str:
    parts = []
    for p in _get(service, "spec", "ports") or []:
        node_port = f":{p['nodePort']}" if p.get("nodePort") else ""
        parts.append(f"{p.get('port')}{node_port}/{p.get('protocol', 'TCP')}")
    return ",".join(parts) or "<none>"


# (column name, type, priority, description, cell) per built-in kind.
Column = tuple[str, str, int, str, Any]
_NAME: Column = (
    "Name",
    "string",
    0,
    "Name must be unique within a namespace.",
    lambda o: _get(o, "metadata", "name"),
)


def _count(name: str, description: str, status_field: str) -> Column:
    """A counter from the object's status (0 when unset), as the printers show replica counts."""
    return (name, "string", 0, description, lambda o: str(_get(o, "status", status_field) or 0))


_AGE: Column = ("Age", "string", 0, "Time since the object was created.", _age)
_BINDING: list[Column] = [
    _NAME,
    (
        "Role",
        "string",
        0,
        "The role bound.",
        lambda o: f"{_get(o, 'roleRef', 'kind')}/{_get(o, 'roleRef', 'name')}",
    ),
    _AGE,
]
_BUILTIN: dict[tuple[str, str], list[Column]] = {
    ("", "Namespace"): [
        _NAME,
        ("Status", "string", 0, "The phase of the namespace.", lambda o: _get(o, "status", "phase")),
        _AGE,
    ],
    ("", "Node"): [
        _NAME,
        ("Status", "string", 0, "The status of the node.", _node_status),
        ("Roles", "string", 0, "The roles of the node.", _node_roles),
        _AGE,
        (
            "Version",
            "string",
            0,
            "Kubelet version.",
            lambda o: _get(o, "status", "nodeInfo", "kubeletVersion") or "",
        ),
    ],
    ("", "Pod"): [
        _NAME,
        ("Ready", "string", 0, "The aggregate readiness state of this pod.", _pod_ready),
        (
            "Status",
            "string",
            0,
            "The aggregate status of the containers in this pod.",
            lambda o: _get(o, "status", "reason") or _get(o, "status", "phase") or "Unknown",
        ),
        (
            "Restarts",
            "string",
            0,
            "The number of times the containers restarted.",
            lambda o: str(
                sum(int(s.get("restartCount") or 0) for s in _get(o, "status", "containerStatuses") or [])
            ),
        ),
        _AGE,
        ("Node", "string", 1, "The node the pod is bound to.", lambda o: _none(_get(o, "spec", "nodeName"))),
    ],
    ("", "Event"): [
        (
            "Last Seen",
            "string",
            0,
            "Time since the event was last seen.",
            lambda o: _since(
                o.get("lastTimestamp") or o.get("eventTime") or _get(o, "metadata", "creationTimestamp")
            ),
        ),
        ("Type", "string", 0, "Type of this event (Normal, Warning).", lambda o: o.get("type") or ""),
        ("Reason", "string", 0, "Why the event was generated.", lambda o: o.get("reason") or ""),
        (
            "Object",
            "string",
            0,
            "The object this event is about.",
            lambda o: (
                f"{str(_get(o, 'involvedObject', 'kind') or '').lower()}/{_get(o, 'involvedObject', 'name') or ''}"
            ),
        ),
        (
            "Message",
            "string",
            0,
            "A human-readable description of the event.",
            lambda o: (o.get("message") or "").strip(),
        ),
        ("Count", "string", 1, "How many times this event was seen.", lambda o: str(o.get("count") or 1)),
        ("Name", "string", 1, "Name of the event.", lambda o: _get(o, "metadata", "name")),
    ],
    ("", "ConfigMap"): [
        _NAME,
        (
            "Data",
            "string",
            0,
            "Number of entries.",
            lambda o: str(len(o.get("data") or {}) + len(o.get("binaryData") or {})),
        ),
        _AGE,
    ],
    ("", "Secret"): [
        _NAME,
        ("Type", "string", 0, "The secret's type.", lambda o: o.get("type") or "Opaque"),
        ("Data", "string", 0, "Number of entries.", lambda o: str(len(o.get("data") or {}))),
        _AGE,
    ],
    ("", "ServiceAccount"): [
        _NAME,
        ("Secrets", "string", 0, "Number of secrets.", lambda o: str(len(o.get("secrets") or []))),
        _AGE,
    ],
    ("", "Service"): [
        _NAME,
        ("Type", "string", 0, "The service's type.", lambda o: _get(o, "spec", "type")),
        ("Cluster-IP", "string", 0, "The cluster IP.", lambda o: _none(_get(o, "spec", "clusterIP"))),
        (
            "External-IP",
            "string",
            0,
            "External IPs.",
            lambda o: ",".join(_get(o, "spec", "externalIPs") or []) or "<none>",
        ),
        ("Port(s)", "string", 0, "The ports.", _ports),
        _AGE,
    ],
    ("apps", "DaemonSet"): [
        _NAME,
        _count("Desired", "Nodes that should run the daemon pod.", "desiredNumberScheduled"),
        _count("Current", "Nodes running the daemon pod.", "currentNumberScheduled"),
        _count("Ready", "Nodes whose daemon pod is ready.", "numberReady"),
        _count("Up-to-date", "Nodes running the updated pod.", "updatedNumberScheduled"),
        _count("Available", "Nodes whose pod is available.", "numberAvailable"),
        (
            "Node Selector",
            "string",
            0,
            "The pod template's node selector.",
            lambda o: _selector(_get(o, "spec", "template", "spec", "nodeSelector")),
        ),
        _AGE,
    ],
    ("apps", "Deployment"): [
        _NAME,
        (
            "Ready",
            "string",
            0,
            "Ready replicas / desired.",
            lambda o: f"{_get(o, 'status', 'readyReplicas') or 0}/{_get(o, 'spec', 'replicas') or 0}",
        ),
        _count("Up-to-date", "Updated replicas.", "updatedReplicas"),
        _count("Available", "Available replicas.", "availableReplicas"),
        _AGE,
    ],
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): _BINDING,
    ("rbac.authorization.k8s.io", "RoleBinding"): _BINDING,
    ("coordination.k8s.io", "Lease"): [
        _NAME,
        ("Holder", "string", 0, "The holder.", lambda o: _get(o, "spec", "holderIdentity") or ""),
        _AGE,
    ],
    ("policy", "PodDisruptionBudget"): [
        _NAME,
        (
            "Min Available",
            "string",
            0,
            "minAvailable.",
            lambda o: str(_none(_get(o, "spec", "minAvailable"))).replace("<none>", "N/A"),
        ),
        (
            "Max Unavailable",
            "string",
            0,
            "maxUnavailable.",
            lambda o: str(_none(_get(o, "spec", "maxUnavailable"))).replace("<none>", "N/A"),
        ),
        (
            "Allowed Disruptions",
            "integer",
            0,
            "disruptionsAllowed.",
            lambda o: _get(o, "status", "disruptionsAllowed") or 0,
        ),
        _AGE,
    ],
}
# rest.NewDefaultTableConvertor (and the RBAC roles, CRDs): Name and the creation time.
_DEFAULT: list[Column] = [
    _NAME,
    (
        "Created At",
        "date",
        0,
        "CreationTimestamp is a timestamp representing the server time when this object was created.",
        lambda o: _get(o, "metadata", "creationTimestamp"),
    ),
]
_CRD_AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def _crd_columns(rt: ResourceType) -> list[Column]:
    """Name plus the version's additionalPrinterColumns (apiextensions-apiserver tableconvertor)."""
    declared = list(getattr(rt.strategy, "columns", ()) or ()) or [_CRD_AGE]
    columns = [_NAME]
    for col in declared:
        path = col.get("jsonPath", "")
        kind = col.get("type", "string")

        def cell(obj: Json, path: str = path, kind: str = kind) -> Any:
            found = jsonpath(obj, path)
            if not found:
                return None
            if len(found) > 1:
                return ",".join(str(_scalar(v)) for v in found)
            value = found[0]
            if kind == "date":
                return _since(value)  # the server renders a date column as an age
            if kind == "integer" and isinstance(value, bool | str):
                return str(value)
            return value if kind in ("integer", "number", "boolean") else str(_scalar(value))

        columns.append(
            (col.get("name", ""), kind, int(col.get("priority") or 0), col.get("description", ""), cell)
        )
    return columns


def columns_for(rt: ResourceType) -> list[Column]:
    if not rt.builtin:
        return _crd_columns(rt)
    return _BUILTIN.get((rt.group, rt.kind), _DEFAULT)


def _row_object(obj: Json, include: str) -> Json | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata") or {},
    }


def to_table(rt: ResourceType, items: list[Json], list_meta: Json, include_object: str) -> Json:
    """``items`` (each as the API serves it, apiVersion/kind set) as a Table."""
    include = include_object or "Metadata"
    if include not in ("None", "Metadata", "Object"):
        raise E.bad_request(f"includeObject: unsupported value {include_object!r} (None, Metadata or Object)")
    columns = columns_for(rt)
    rows = []
    for obj in items:
        row: Json = {"cells": [fn(obj) for _, _, _, _, fn in columns]}
        carried = _row_object(obj, include)
        if carried is not None:
            row["object"] = carried
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": [
            {
                "name": name,
                "type": kind,
                "format": "name" if name == "Name" else "",
                "description": desc,
                "priority": prio,
            }
            for name, kind, prio, desc, _ in columns
        ],
        "rows": rows,
    }
