"""Resource types and the generic registry: create, read, update, patch and delete with the API server's
semantics (k8s.io/apiserver/pkg/registry/generic/registry.Store and each resource's strategy).

Why a strategy per resource: what a write may change differs by resource and subresource, and qosd's
correctness depends on exactly those rules: a main-resource write never changes ``status`` when the
resource has a status subresource, a ``/status`` write changes only ``status``, ``generation`` moves only
when the desired state (anything outside metadata and status) changes, a create resets a Pod's status,
an update carrying a stale resourceVersion is a 409, and a custom resource update must carry one.
"""

from __future__ import annotations

import json
import random
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.kubeapi import errors as E
from tests.kubeapi import validation as V
from tests.kubeapi.errors import ApiError, FieldError
from tests.kubeapi.patch import (
    JSON_PATCH,
    MERGE_PATCH,
    PATCH_STRATEGIES,
    STRATEGIC_MERGE_PATCH,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)
from tests.kubeapi.selectors import FieldGetter, FieldSelector, LabelSelector
from tests.kubeapi.store import ADDED, DELETED, MODIFIED, Store, TooOld, copy_json
from tests.kubeapi.typed import WARNINGS, field_validation, prune_typed

Json = dict[str, Any]
Scheduler = Callable[[float, Callable[[], None]], None]

# ObjectMeta's JSON fields: anything else under metadata is dropped on decode.
OBJECT_META_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)
# Set by the server only; a client's values are ignored on update.
_SERVER_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation")


def now() -> datetime:
    return datetime.now(UTC)


def rfc3339(t: datetime) -> str:
    """metav1.Time's wire format: UTC, whole seconds."""
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


# Typed fields of metav1.Time (whole seconds) and metav1.MicroTime (microseconds) in the served kinds.
_TIME_FIELDS = frozenset(
    {
        "creationTimestamp",
        "deletionTimestamp",
        "firstTimestamp",
        "lastTimestamp",
        "lastTransitionTime",
        "lastHeartbeatTime",
        "lastProbeTime",
        "startTime",
        "startedAt",
        "finishedAt",
    }
)
_MICRO_TIME_FIELDS = frozenset({"eventTime", "lastObservedTime", "acquireTime", "renewTime"})


def _parse_time(value: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value.replace("z", "Z"))
    except ValueError:
        raise E.bad_request(
            f'parsing time "{value}" as "2006-01-02T15:04:05Z07:00": cannot parse "{value}" as RFC 3339'
        ) from None
    if parsed.tzinfo is None:
        raise E.bad_request(f'parsing time "{value}" as "2006-01-02T15:04:05Z07:00": missing time zone')
    return parsed.astimezone(UTC)


def normalize_times(value: Any) -> None:
    """Rewrite every typed timestamp as the server would marshal it (a client may send any RFC 3339
    offset; the answer is always UTC with "Z")."""
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, str) and item and key in _TIME_FIELDS:
                value[key] = rfc3339(_parse_time(item))
            elif isinstance(item, str) and item and key in _MICRO_TIME_FIELDS:
                value[key] = _parse_time(item).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            else:
                normalize_times(item)
    elif isinstance(value, list):
        for item in value:
            normalize_times(item)


def _random_suffix() -> str:
    """names.SimpleNameGenerator: five characters from a vowel-free alphabet."""
    return "".join(random.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))


# --------------------------------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------------------------------


class Strategy:
    """Per-resource behaviour, named after the hooks of rest.RESTCreateStrategy/RESTUpdateStrategy."""

    generation = False  # metadata.generation maintained (1 on create, +1 on desired-state change)
    allow_unconditional_update = True  # a PUT without resourceVersion overwrites
    allow_create_on_update = False  # a PUT of a missing object creates it
    return_deleted_object = False  # DELETE answers with the object instead of a Status
    name_is_label = False  # names are DNS labels (namespaces) rather than DNS subdomains

    # Top-level struct fields without omitempty: the API server always writes them, even empty.
    always: tuple[str, ...] = ()

    def default(self, obj: Json) -> Json:
        """Defaulting (SetDefaults_*), which the API server applies to request bodies and to every object
        it reads from storage, so no client ever sees an undefaulted object; timestamps come back in
        metav1.Time / MicroTime form (UTC, "Z")."""
        for key in self.always:
            if not isinstance(obj.get(key), dict):
                obj[key] = {}
        normalize_times(obj)
        return obj

    # The generated client model of the served kind (None: no typed decoding, as for custom resources).
    model: str | None = None

    def decode(self, obj: Json) -> Json:
        """What decoding a request body does beyond JSON: dropping fields the type does not have (custom
        resources: structural pruning), then defaulting."""
        if self.model:
            obj = prune_typed(obj, self.model)
        return self.default(obj)

    def prepare_create(self, obj: Json) -> None:
        """Clear or default what a client may not set on create."""

    def prepare_update(self, new: Json, old: Json) -> None:
        """Carry over what a client may not change on update."""

    def validate(self, obj: Json, old: Json | None, api_version: str) -> list[FieldError]:
        return []

    def after_write(self, obj: Json, deleted: bool) -> None:
        """React to a committed write (the CRD strategy installs or removes the served resource)."""


class PodStrategy(Strategy):
    generation = True
    model = "V1Pod"
    return_deleted_object = True
    always = ("spec", "status")

    def default(self, obj: Json) -> Json:
        """SetDefaults_Pod (the parts that matter here): a container's requests default to its limits,
        which decides the QoS class; the scheduler name and the grace period qosd's evictions use."""
        spec = obj.get("spec")
        if isinstance(spec, dict):
            spec.setdefault("restartPolicy", "Always")
            spec.setdefault("terminationGracePeriodSeconds", 30)
            spec.setdefault("dnsPolicy", "ClusterFirst")
            spec.setdefault("schedulerName", "default-scheduler")
            for key in ("containers", "initContainers"):
                for c in spec.get(key) or []:
                    resources = c.get("resources")
                    if isinstance(resources, dict) and resources.get("limits"):
                        requests = resources.setdefault("requests", {})
                        for name, value in resources["limits"].items():
                            requests.setdefault(name, value)
        return super().default(obj)

    def prepare_create(self, obj: Json) -> None:
        obj["status"] = {"phase": "Pending", "qosClass": pod_qos_class(obj)}

    def validate(self, obj: Json, old: Json | None, api_version: str) -> list[FieldError]:
        return V.validate_pod(obj) if old is None else V.validate_pod_update(obj, old)


def pod_qos_class(pod: Json) -> str:
    """qos.GetPodQOS over cpu and memory of all (init) containers."""
    spec = pod.get("spec") or {}
    requests: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    guaranteed = True
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        resources = c.get("resources") or {}
        for name, raw in (resources.get("requests") or {}).items():
            if name in ("cpu", "memory") and V.parse_quantity(raw) > 0:
                requests[name] = requests.get(name, 0) + V.parse_quantity(raw)
        found = set()
        for name, raw in (resources.get("limits") or {}).items():
            if name in ("cpu", "memory") and V.parse_quantity(raw) > 0:
                found.add(name)
                limits[name] = limits.get(name, 0) + V.parse_quantity(raw)
        if found != {"cpu", "memory"}:
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and all(limits.get(k) == v for k, v in requests.items()) and len(requests) == len(limits):
        return "Guaranteed"
    return "Burstable"


class NodeStrategy(Strategy):
    """Nodes keep their status on create (the kubelet registers with one)."""

    always = ("spec", "status")
    model = "V1Node"

    def validate(self, obj: Json, old: Json | None, api_version: str) -> list[FieldError]:
        return V.validate_taints((obj.get("spec") or {}).get("taints")) + V.validate_node_resources(obj)


class NamespaceStrategy(Strategy):
    model = "V1Namespace"
    name_is_label = True
    return_deleted_object = True
    always = ("spec", "status")

    def prepare_create(self, obj: Json) -> None:
        obj["status"] = {"phase": "Active"}
        obj.setdefault("spec", {})["finalizers"] = ["kubernetes"]


class EventStrategy(Strategy):
    allow_create_on_update = True

    def __init__(self, model: str = "CoreV1Event") -> None:
        self.model = model

    def validate(self, obj: Json, old: Json | None, api_version: str) -> list[FieldError]:
        return V.validate_event(obj, strict=api_version == "events.k8s.io/v1" and old is None)


class PdbStrategy(Strategy):
    model = "V1PodDisruptionBudget"
    generation = True
    always = ("spec", "status")

    def prepare_create(self, obj: Json) -> None:
        obj["status"] = {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}

    def validate(self, obj: Json, old: Json | None, api_version: str) -> list[FieldError]:
        return V.validate_pdb(obj)


class LeaseStrategy(Strategy):
    model = "V1Lease"
    always = ("spec",)

    def validate(self, obj: Json, old: Json | None, api_version: str) -> list[FieldError]:
        return V.validate_lease(obj)


# --------------------------------------------------------------------------------------------------
# Resource types
# --------------------------------------------------------------------------------------------------


def _path(*keys: str) -> FieldGetter:
    def get(obj: Json) -> str:
        node: Any = obj
        for key in keys:
            node = node.get(key) if isinstance(node, dict) else None
        if node is None:
            return ""
        if isinstance(node, bool):
            return "true" if node else "false"
        return str(node)

    return get


METADATA_FIELDS: dict[str, FieldGetter] = {
    "metadata.name": _path("metadata", "name"),
    "metadata.namespace": _path("metadata", "namespace"),
}


def _pod_ip(obj: Json) -> str:
    return _path("status", "podIP")(obj)


POD_FIELDS: dict[str, FieldGetter] = {
    **METADATA_FIELDS,
    "spec.nodeName": _path("spec", "nodeName"),
    "spec.restartPolicy": _path("spec", "restartPolicy"),
    "spec.schedulerName": _path("spec", "schedulerName"),
    "spec.serviceAccountName": _path("spec", "serviceAccountName"),
    "spec.hostNetwork": lambda o: "true" if (o.get("spec") or {}).get("hostNetwork") else "false",
    "status.phase": _path("status", "phase"),
    "status.podIP": _pod_ip,
    "status.nominatedNodeName": _path("status", "nominatedNodeName"),
}
NODE_FIELDS: dict[str, FieldGetter] = {
    **METADATA_FIELDS,
    "spec.unschedulable": lambda o: "true" if (o.get("spec") or {}).get("unschedulable") else "false",
}
NAMESPACE_FIELDS: dict[str, FieldGetter] = {**METADATA_FIELDS, "status.phase": _path("status", "phase")}
EVENT_FIELDS: dict[str, FieldGetter] = {
    **METADATA_FIELDS,
    **{
        f"involvedObject.{k}": _path("involvedObject", k)
        for k in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
    },
    "reason": _path("reason"),
    "reportingComponent": _path("reportingComponent"),
    "source": _path("source", "component"),
    "type": _path("type"),
}
EVENTS_V1_FIELDS: dict[str, FieldGetter] = {
    **METADATA_FIELDS,
    **{
        f"regarding.{k}": _path("regarding", k)
        for k in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
    },
    "reason": _path("reason"),
    "reportingController": _path("reportingController"),
    "type": _path("type"),
}


def identity(obj: Json) -> Json:
    return obj


@dataclass(frozen=True)
class ResourceType:
    """One served resource at one group/version. ``storage`` names the bucket it is kept in: two
    versions of one resource (core/v1 and events.k8s.io/v1 Events, a CRD's versions) share it and
    convert with ``to_storage``/``from_storage``."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    strategy: Strategy
    singular: str = ""
    short_names: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()
    field_labels: Mapping[str, FieldGetter] = field(default_factory=lambda: dict(METADATA_FIELDS))
    # Strategic merge patch list strategies; None: the resource refuses strategic merge patches (CRs).
    patch_strategies: Mapping[tuple[str, ...], str] | None = None
    builtin: bool = True
    storage: str = ""
    to_storage: Callable[[Json], Json] = identity
    from_storage: Callable[[Json], Json] = identity
    # Discovery's categories (``kubectl get all``, a CRD's spec.names.categories).
    categories: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def bucket(self) -> str:
        return self.storage or E.qualified(self.group, self.plural)

    @property
    def status_subresource(self) -> bool:
        return "status" in self.subresources

    def present(self, stored: Json) -> Json:
        """The stored object as this group/version serves it."""
        obj = self.from_storage(stored)
        out = {"apiVersion": self.api_version, "kind": self.kind}
        out.update({k: v for k, v in obj.items() if k not in ("apiVersion", "kind")})
        return out

    def patch_types(self) -> tuple[str, ...]:
        if self.patch_strategies is None:
            return (JSON_PATCH, MERGE_PATCH, "application/apply-patch+yaml")
        return (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, "application/apply-patch+yaml")


def _core_event_to_v1(obj: Json) -> Json:
    """core/v1 Event (the storage form) -> events.k8s.io/v1 Event (pkg/apis/events/v1 conversion)."""
    renames = {
        "involvedObject": "regarding",
        "message": "note",
        "source": "deprecatedSource",
        "firstTimestamp": "deprecatedFirstTimestamp",
        "lastTimestamp": "deprecatedLastTimestamp",
        "count": "deprecatedCount",
        "reportingComponent": "reportingController",
    }
    return {renames.get(k, k): v for k, v in obj.items()}


def _v1_event_to_core(obj: Json) -> Json:
    renames = {
        "regarding": "involvedObject",
        "note": "message",
        "deprecatedSource": "source",
        "deprecatedFirstTimestamp": "firstTimestamp",
        "deprecatedLastTimestamp": "lastTimestamp",
        "deprecatedCount": "count",
        "reportingController": "reportingComponent",
    }
    out = {renames.get(k, k): v for k, v in obj.items()}
    out["apiVersion"] = "v1"
    out["kind"] = "Event"
    return out


def builtin_types() -> list[ResourceType]:
    """The built-in resources qosd touches, as the API server serves them."""
    return [
        ResourceType(
            "",
            "v1",
            "pods",
            "Pod",
            True,
            PodStrategy(),
            "pod",
            ("po",),
            frozenset({"status", "eviction"}),
            POD_FIELDS,
            PATCH_STRATEGIES["Pod"],
        ),
        ResourceType(
            "",
            "v1",
            "nodes",
            "Node",
            False,
            NodeStrategy(),
            "node",
            ("no",),
            frozenset({"status"}),
            NODE_FIELDS,
            PATCH_STRATEGIES["Node"],
        ),
        ResourceType(
            "",
            "v1",
            "namespaces",
            "Namespace",
            False,
            NamespaceStrategy(),
            "namespace",
            ("ns",),
            frozenset({"status"}),
            NAMESPACE_FIELDS,
            PATCH_STRATEGIES["Namespace"],
        ),
        ResourceType(
            "",
            "v1",
            "events",
            "Event",
            True,
            EventStrategy(),
            "event",
            ("ev",),
            frozenset(),
            EVENT_FIELDS,
            PATCH_STRATEGIES["Event"],
        ),
        ResourceType(
            "events.k8s.io",
            "v1",
            "events",
            "Event",
            True,
            EventStrategy("EventsV1Event"),
            "event",
            ("ev",),
            frozenset(),
            EVENTS_V1_FIELDS,
            PATCH_STRATEGIES["Event"],
            storage="events",
            to_storage=_v1_event_to_core,
            from_storage=_core_event_to_v1,
        ),
        ResourceType(
            "policy",
            "v1",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            True,
            PdbStrategy(),
            "poddisruptionbudget",
            ("pdb",),
            frozenset({"status"}),
            dict(METADATA_FIELDS),
            PATCH_STRATEGIES["PodDisruptionBudget"],
        ),
        ResourceType(
            "coordination.k8s.io",
            "v1",
            "leases",
            "Lease",
            True,
            LeaseStrategy(),
            "lease",
            (),
            frozenset(),
            dict(METADATA_FIELDS),
            PATCH_STRATEGIES["Lease"],
        ),
    ]


# --------------------------------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeleteOptions:
    grace_period_seconds: int | None = None
    uid: str | None = None
    resource_version: str | None = None
    dry_run: bool = False

    @classmethod
    def parse(cls, body: Json | None, query: Mapping[str, str]) -> DeleteOptions:
        body = body or {}
        pre = body.get("preconditions") or {}
        grace = body.get("gracePeriodSeconds")
        if grace is None and "gracePeriodSeconds" in query:
            try:
                grace = int(query["gracePeriodSeconds"])
            except ValueError:
                raise E.bad_request(f"invalid gracePeriodSeconds {query['gracePeriodSeconds']!r}") from None
        dry = body.get("dryRun") or ([query["dryRun"]] if "dryRun" in query else [])
        return cls(grace, pre.get("uid"), pre.get("resourceVersion"), "All" in dry)


@dataclass
class ListResult:
    items: list[Json]
    resource_version: int
    continue_token: str = ""
    remaining: int | None = None


# --------------------------------------------------------------------------------------------------
# The registry
# --------------------------------------------------------------------------------------------------


class Registry:
    """Every served resource type and the generic REST semantics over the store."""

    def __init__(self, store: Store, schedule: Scheduler) -> None:
        self.store = store
        self.schedule = schedule
        self.pod_termination_delay = 0.0
        # Validating admission (tests/kubeapi/admission.py): called with (operation, rt, namespace, name,
        # object, old object, dry_run, subresource) after validation, before the write; raises to refuse.
        self.admit: Callable[..., None] | None = None
        # Called with (type, old, new) on each main-resource update before it is validated: the
        # managed-fields bookkeeping of non-apply writes (tests/kubeapi/apply.py).
        self.on_update: Callable[[ResourceType, Json, Json], None] | None = None
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        self._lock = threading.RLock()
        for rt in builtin_types():
            self.register(rt)

    # ----------------------------------------------------------------------------------- types

    def register(self, rt: ResourceType) -> None:
        with self._lock:
            self._types[(rt.group, rt.version, rt.plural)] = rt

    def unregister(self, group: str, plural: str) -> None:
        with self._lock:
            for key in [k for k in self._types if k[0] == group and k[2] == plural]:
                del self._types[key]

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        with self._lock:
            return self._types.get((group, version, plural))

    def types(self) -> list[ResourceType]:
        with self._lock:
            return list(self._types.values())

    def for_kind(self, api_version: str, kind: str) -> ResourceType:
        with self._lock:
            for rt in self._types.values():
                if rt.api_version == api_version and rt.kind == kind:
                    return rt
        raise KeyError(f"the emulator does not serve {kind} in {api_version}; install its CRD first")

    def storage_type(self, bucket: str) -> ResourceType:
        """The ResourceType whose form is the storage form of ``bucket``."""
        with self._lock:
            for rt in self._types.values():
                if rt.bucket == bucket and rt.to_storage is identity:
                    return rt
        raise KeyError(bucket)

    # ----------------------------------------------------------------------------------- reads

    def get(self, rt: ResourceType, namespace: str, name: str) -> Json:
        stored = self.store.get(rt.bucket, namespace, name)
        if stored is None:
            raise E.not_found(rt.group, rt.plural, name)
        return rt.present(stored)

    def list(
        self,
        rt: ResourceType,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        *,
        limit: int = 0,
        continue_token: str = "",
        resource_version: str = "",
        match: str = "",
    ) -> ListResult:
        """List with the documented resourceVersion semantics: unset/"0"/NotOlderThan -> current state;
        Exact -> the state at that version (410 if compacted); ``continue`` -> the snapshot of the first
        page (410 if compacted since)."""
        with self.store.lock:
            start_after = ""
            at: int | None = None
            if continue_token:
                at, start_after = _decode_continue(continue_token)
            elif match == "Exact":
                at = _parse_rv(resource_version)
            elif resource_version not in ("", "0"):
                wanted = _parse_rv(resource_version)
                if wanted > self.store.resource_version:
                    raise ApiError(
                        504,
                        "Timeout",
                        f"Too large resource version: {wanted}, current: {self.store.resource_version}",
                        {
                            "causes": [
                                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
                            ],
                            "retryAfterSeconds": 1,
                        },
                    )
            if at is not None:
                try:
                    stored = self.store.items_at(rt.bucket, at)
                except TooOld as err:
                    if continue_token:
                        raise E.expired(
                            "The provided continue parameter is too old to display a consistent list result. "
                            "You can start a new list without the continue parameter."
                        ) from err
                    raise E.expired(f"too old resource version: {at} ({self.store.floor})") from err
                rv = at
            else:
                stored = self.store.items(rt.bucket)
                rv = self.store.resource_version
        items = []
        for obj in stored:
            meta = obj.get("metadata") or {}
            if namespace is not None and meta.get("namespace") != namespace:
                continue
            if start_after and _sort_key(obj) <= start_after:
                continue
            served = rt.present(obj)
            if labels.matches(meta.get("labels")) and fields.matches(served, rt.field_labels):
                items.append(served)
        if limit and len(items) > limit:
            rest = len(items) - limit
            items = items[:limit]
            return ListResult(items, rv, _encode_continue(rv, _sort_key(items[-1])), rest)
        return ListResult(items, rv)

    # ----------------------------------------------------------------------------------- writes

    def create(self, rt: ResourceType, namespace: str, body: Any, *, dry_run: bool = False) -> Json:
        obj = self._decode(rt, body, namespace)
        meta = obj["metadata"]
        with self.store.lock:
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + _random_suffix()
            if meta.get("resourceVersion"):
                # etcd3 store.Create returns a plain error, which the handler reports as a 500.
                raise ApiError(
                    500,
                    "InternalError",
                    "Internal error occurred: resourceVersion should not be set on objects to be created",
                    {"causes": [{"message": "resourceVersion should not be set on objects to be created"}]},
                )
            for key in ("uid", "generation", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
                meta.pop(key, None)
            rt.strategy.prepare_create(obj)
            errors = V.validate_object_meta(
                obj, namespaced=rt.namespaced, name_is_label=rt.strategy.name_is_label
            )
            errors += rt.strategy.validate(rt.to_storage(obj), None, rt.api_version)
            if errors:
                raise E.invalid_object(rt.group, rt.kind, meta.get("name") or "", errors)
            if rt.namespaced:
                self._require_namespace(namespace)
            if self.store.get(rt.bucket, namespace, meta["name"]) is not None:
                raise E.already_exists(rt.group, rt.plural, meta["name"])
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = rfc3339(now())
            if rt.strategy.generation:
                meta["generation"] = 1
            if self.admit is not None:
                self.admit("CREATE", rt, namespace, meta["name"], obj, None, dry_run, "")
            if dry_run:
                meta["resourceVersion"] = ""
                return obj
            stored = self.store.write(rt.bucket, ADDED, rt.to_storage(obj))
            rt.strategy.after_write(stored, deleted=False)
            return rt.present(stored)

    def update(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Any,
        *,
        subresource: str = "",
        dry_run: bool = False,
    ) -> tuple[Json, bool]:
        """PUT. Returns (object, created)."""
        with self.store.lock:
            current = self.store.get(rt.bucket, namespace, name)
            if current is None:
                if rt.strategy.allow_create_on_update and not subresource:
                    return self.create(rt, namespace, body, dry_run=dry_run), True
                raise E.not_found(rt.group, rt.plural, name)
            old = rt.present(current)
            new = self._decode(rt, body, namespace)
            return self._commit_update(rt, old, new, name, subresource, dry_run), False

    def patch(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        content_type: str,
        patch: Any,
        *,
        subresource: str = "",
        dry_run: bool = False,
    ) -> Json:
        if content_type not in rt.patch_types() or content_type == "application/apply-patch+yaml":
            accepted = ", ".join(t for t in rt.patch_types() if t != "application/apply-patch+yaml")
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types include: {accepted}",
            )
        with self.store.lock:
            current = self.store.get(rt.bucket, namespace, name)
            if current is None:
                raise E.not_found(rt.group, rt.plural, name)
            old = rt.present(current)
            if content_type == MERGE_PATCH:
                if not isinstance(patch, dict):
                    raise E.bad_request(
                        "json: cannot unmarshal array into Go value of type map[string]interface {}"
                    )
                patched = merge_patch(old, patch)
            elif content_type == JSON_PATCH:
                patched = json_patch(old, patch)
            else:
                patched = strategic_merge_patch(old, patch, rt.patch_strategies or {})
            if not isinstance(patched, dict):
                raise E.bad_request("the patch did not produce an object")
            new = self._decode(rt, patched, namespace)
            new_uid = (new.get("metadata") or {}).get("uid")
            old_uid = old["metadata"].get("uid")
            if new_uid and new_uid != old_uid:
                raise E.conflict(
                    rt.group,
                    rt.plural,
                    name,
                    f"Precondition failed: UID in precondition: {new_uid}, UID in object meta: {old_uid}",
                )
            return self._commit_update(rt, old, new, name, subresource, dry_run)

    def _commit_update(
        self, rt: ResourceType, old: Json, new: Json, name: str, subresource: str, dry_run: bool
    ) -> Json:
        meta = new["metadata"]
        if meta.get("name") and meta["name"] != name:
            raise E.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
            )
        meta["name"] = name
        given_rv = meta.get("resourceVersion") or ""
        if given_rv:
            if given_rv != old["metadata"].get("resourceVersion"):
                raise E.stale(rt.group, rt.plural, name)
        elif not rt.strategy.allow_unconditional_update:
            raise E.invalid_object(
                rt.group,
                rt.kind,
                name,
                [E.invalid("metadata.resourceVersion", 0, "must be specified for an update")],
            )
        if subresource == "status":
            # ResetObjectMetaForStatus + the status strategies: only .status changes.
            merged = copy_json(old)
            if "status" in new:
                merged["status"] = new["status"]
            else:
                merged.pop("status", None)
            new = merged
        else:
            for key in _SERVER_META:
                if key in old["metadata"]:
                    meta[key] = old["metadata"][key]
                else:
                    meta.pop(key, None)
            if rt.status_subresource:
                if "status" in old:
                    new["status"] = copy_json(old["status"])
                else:
                    new.pop("status", None)
            rt.strategy.prepare_update(new, old)
            if self.on_update is not None:
                self.on_update(rt, old, new)
            if rt.strategy.generation and _desired_state(new, rt) != _desired_state(old, rt):
                meta["generation"] = int(old["metadata"].get("generation") or 0) + 1
        new["metadata"]["resourceVersion"] = old["metadata"].get("resourceVersion")
        errors = V.validate_object_meta(
            new, namespaced=rt.namespaced, name_is_label=rt.strategy.name_is_label
        )
        errors += rt.strategy.validate(rt.to_storage(new), rt.to_storage(old), rt.api_version)
        if errors:
            raise E.invalid_object(rt.group, rt.kind, name, errors)
        if self.admit is not None:
            namespace = new["metadata"].get("namespace") or ""
            self.admit("UPDATE", rt, namespace, name, new, old, dry_run, subresource)
        if new == old or dry_run:
            return new  # no-op: etcd is not written, resourceVersion does not move, no watch event
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            stored = self.store.write(rt.bucket, DELETED, rt.to_storage(new))
            rt.strategy.after_write(stored, deleted=True)
            return rt.present(stored)
        stored = self.store.write(rt.bucket, MODIFIED, rt.to_storage(new))
        rt.strategy.after_write(stored, deleted=False)
        return rt.present(stored)

    def delete(
        self, rt: ResourceType, namespace: str, name: str, options: DeleteOptions
    ) -> tuple[Json, bool]:
        """DELETE. Returns (object or Status, deleted now). Pods terminate gracefully when the server has
        a pod_termination_delay; objects with finalizers only get a deletionTimestamp."""
        with self.store.lock:
            current = self.store.get(rt.bucket, namespace, name)
            if current is None:
                raise E.not_found(rt.group, rt.plural, name)
            obj = rt.present(current)
            meta = obj["metadata"]
            if options.uid and options.uid != meta.get("uid"):
                raise E.conflict(
                    rt.group,
                    rt.plural,
                    name,
                    f"Precondition failed: UID in precondition: {options.uid}, UID in object meta: {meta.get('uid')}",
                )
            if options.resource_version and options.resource_version != meta.get("resourceVersion"):
                raise E.conflict(
                    rt.group,
                    rt.plural,
                    name,
                    f"Precondition failed: ResourceVersion in precondition: {options.resource_version}, "
                    f"ResourceVersion in object meta: {meta.get('resourceVersion')}",
                )
            if options.dry_run:
                return obj, False
            grace = self._grace_period(rt, obj, options)
            if grace > 0 or meta.get("finalizers"):
                if meta.get("deletionTimestamp"):
                    return obj, False
                meta["deletionTimestamp"] = rfc3339(now() + timedelta(seconds=grace))
                meta["deletionGracePeriodSeconds"] = grace
                if int(meta.get("generation") or 0) > 0:
                    # rest.BeforeDelete (graceful) and markAsDeleting (finalizers) both bump it.
                    meta["generation"] = int(meta["generation"]) + 1
                stored = self.store.write(rt.bucket, MODIFIED, rt.to_storage(obj))
                if grace > 0 and not meta.get("finalizers"):
                    uid = meta.get("uid")
                    self.schedule(
                        self.pod_termination_delay, lambda: self._finish_termination(rt, namespace, name, uid)
                    )
                return rt.present(stored), False
            if rt.kind == "Namespace" and not rt.group:
                self._delete_namespace_contents(name)
            stored = self.store.write(rt.bucket, DELETED, current)
            rt.strategy.after_write(stored, deleted=True)
            if rt.strategy.return_deleted_object:
                return rt.present(stored), True
            details = {"name": name, "kind": rt.plural, "uid": meta.get("uid")}
            if rt.group:
                details["group"] = rt.group
            return {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": details,
            }, True

    def _grace_period(self, rt: ResourceType, obj: Json, options: DeleteOptions) -> int:
        """Pods only (podStrategy.CheckGracefulDelete): unbound or finished pods go at once; the server's
        pod_termination_delay 0 stands for a kubelet that confirms instantly."""
        if rt.kind != "Pod" or rt.group or self.pod_termination_delay <= 0:
            return 0
        spec = obj.get("spec") or {}
        if not spec.get("nodeName") or (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return 0
        grace = options.grace_period_seconds
        if grace is None:
            grace = spec.get("terminationGracePeriodSeconds", 30)
        return max(int(grace), 0)

    def _finish_termination(self, rt: ResourceType, namespace: str, name: str, uid: str | None) -> None:
        """The kubelet's final delete of a terminated pod (grace 0, UID precondition)."""
        with self.store.lock:
            current = self.store.get(rt.bucket, namespace, name)
            if current is None or (current.get("metadata") or {}).get("uid") != uid:
                return
            if (current.get("metadata") or {}).get("finalizers"):
                return
            stored = self.store.write(rt.bucket, DELETED, current)
            rt.strategy.after_write(stored, deleted=True)

    def _delete_namespace_contents(self, namespace: str) -> None:
        """The namespace controller, collapsed: everything in the namespace goes with it."""
        seen: set[str] = set()
        for rt in self.types():
            if not rt.namespaced or rt.bucket in seen:
                continue
            seen.add(rt.bucket)
            for obj in self.store.items(rt.bucket, namespace):
                self.store.write(rt.bucket, DELETED, obj)

    def _require_namespace(self, namespace: str) -> None:
        """NamespaceLifecycle admission: no creates into a namespace that does not exist."""
        if self.store.get("namespaces", "", namespace) is None:
            raise E.not_found("", "namespaces", namespace)

    # ----------------------------------------------------------------------------------- direct access

    def put(self, obj: Json) -> Json:
        """Test set-up: create or replace without admission, strategies or validation (defaulting still
        applies, as on every read from storage); server-managed metadata is filled in where absent (a
        given uid, creationTimestamp or generation is kept)."""
        api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
        rt = self.for_kind(api_version, kind)
        new = rt.to_storage(rt.strategy.default(copy_json(obj)))
        meta = new.setdefault("metadata", {})
        if not meta.get("name"):
            raise ValueError(f"{kind} without metadata.name")
        namespace = meta.get("namespace") or ""
        if rt.namespaced and not namespace:
            namespace = meta["namespace"] = "default"
        with self.store.lock:
            if rt.namespaced and self.store.get("namespaces", "", namespace) is None:
                self.store.write("namespaces", ADDED, _namespace(namespace))
            current = self.store.get(rt.bucket, namespace, meta["name"])
            meta.pop("resourceVersion", None)
            if current is None:
                meta.setdefault("uid", str(uuid.uuid4()))
                meta.setdefault("creationTimestamp", rfc3339(now()))
                if rt.strategy.generation:
                    meta.setdefault("generation", 1)
                stored = self.store.write(rt.bucket, ADDED, new)
            else:
                old_meta = current["metadata"]
                meta.setdefault("uid", old_meta.get("uid"))
                meta.setdefault("creationTimestamp", old_meta.get("creationTimestamp"))
                if rt.strategy.generation and "generation" not in meta:
                    changed = _desired_state(new, rt) != _desired_state(current, rt)
                    meta["generation"] = int(old_meta.get("generation") or 1) + (1 if changed else 0)
                if meta.get("uid") != old_meta.get("uid"):
                    # A new object under an old name: what a watcher sees when a pod is recreated.
                    self.store.write(rt.bucket, DELETED, current)
                    stored = self.store.write(rt.bucket, ADDED, new)
                else:
                    stored = self.store.write(rt.bucket, MODIFIED, new)
            rt.strategy.after_write(stored, deleted=False)
            return rt.present(stored)

    def remove(self, rt: ResourceType, namespace: str, name: str) -> None:
        """Test set-up: delete at once (no grace, no finalizers); absent objects are ignored."""
        with self.store.lock:
            current = self.store.get(rt.bucket, namespace, name)
            if current is not None:
                stored = self.store.write(rt.bucket, DELETED, current)
                rt.strategy.after_write(stored, deleted=True)

    # ----------------------------------------------------------------------------------- helpers

    def _decode(self, rt: ResourceType, body: Any, namespace: str) -> Json:
        """What the decoder does with a request body: apiVersion/kind default to the endpoint's and must
        match it, metadata keeps only ObjectMeta fields, the namespace comes from the URL."""
        if not isinstance(body, dict):
            raise E.bad_request(f"Object 'Kind' is missing in '{json.dumps(body)[:200]}'")
        obj = copy_json(body)
        if obj.get("apiVersion") and obj["apiVersion"] != rt.api_version:
            raise E.bad_request(
                f"the API version in the data ({obj['apiVersion']}) does not match the expected API version ({rt.api_version})"
            )
        if obj.get("kind") and obj["kind"] != rt.kind:
            raise E.bad_request(
                f"the kind in the data ({obj['kind']}) does not match the expected kind ({rt.kind})"
            )
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        meta = obj.get("metadata")
        if meta is None:
            meta = {}
        if not isinstance(meta, dict):
            raise E.bad_request("metadata must be an object")
        # Every ObjectMeta field is omitempty: an empty map or list is not there once decoded.
        obj["metadata"] = {k: v for k, v in meta.items() if v is not None and v != {} and v != []}
        if rt.namespaced:
            given = obj["metadata"].get("namespace")
            if given and given != namespace:
                raise E.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            obj["metadata"]["namespace"] = namespace
        else:
            # rest.EnsureObjectNamespaceMatchesRequestNamespace clears it on a cluster-scoped kind
            # (kustomize's `namespace:` sets it on kinds it does not know are cluster-scoped).
            obj["metadata"].pop("namespace", None)
        mark = len(WARNINGS.get() or [])
        obj = rt.strategy.decode(obj)
        field_validation(mark)
        return obj


def _desired_state(obj: Json, rt: ResourceType) -> Json:
    """Everything a generation bump looks at: not metadata, and not status when it is a subresource."""
    skip = {"metadata", "status"} if rt.status_subresource else {"metadata"}
    return {k: v for k, v in obj.items() if k not in skip and k not in ("apiVersion", "kind")}


def _namespace(name: str) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "uid": str(uuid.uuid4()),
            "creationTimestamp": rfc3339(now()),
            "labels": {"kubernetes.io/metadata.name": name},
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def default_namespaces() -> Iterable[Json]:
    """The namespaces every cluster starts with."""
    return [_namespace(n) for n in ("default", "kube-system", "kube-public", "kube-node-lease")]


def _sort_key(obj: Json) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def _parse_rv(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise E.bad_request(f"invalid resource version: {value!r}") from None


def _encode_continue(rv: int, start_after: str) -> str:
    import base64

    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start_after}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _decode_continue(token: str) -> tuple[int, str]:
    import base64

    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(data["rv"]), str(data["start"])
    except Exception:
        raise E.bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
        ) from None
