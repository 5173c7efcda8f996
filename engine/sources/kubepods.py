"""Workloads from the API server: the pods bound to this node, kept current by a watch.

The pods come from a Reflector over ``/api/v1/pods?fieldSelector=spec.nodeName=<node>`` (what the
kubelet itself watches), so the view is the API's: a pod appears when it is scheduled here, before
its containers exist, and leaves when its object is deleted. Koordinator's koordlet polls the
kubelet's ``/pods`` instead; a watch costs nothing between changes and needs no kubelet port.

Each pod becomes a ``Workload`` with its cgroup paths resolved the kubelet's way
(engine.cgroups.paths): the pod cgroup from its UID and QoS class, each container's from the
container ID in ``status.containerStatuses``. A container without an ID yet (a pending pod, a
container being restarted) has no cgroup path; adapters skip it until the status names one.

Churn between ticks is the watch's: a pod added, changed or deleted since the last tick appears,
changes or disappears at the next ``workloads()``. A pod deleted during a tick is the adapters'
"vanished" (its cgroup is gone when they write). Objects are reused: a pod whose resourceVersion
did not change keeps the same Workload object, which the engine's per-generation caches key on.

A pod object the daemon cannot fully read (a container ID from an unknown runtime, a quantity that
does not parse) is never dropped: that would hide it from eviction and accounting. The readable
part is kept, the unreadable part left empty, and the problem is logged once per pod and kept in
``problems()``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from engine.cgroups.paths import Driver, container_path, pod_path
from engine.kube.apicall import parse_time
from engine.kube.objects import resource_list, str_map
from engine.kube.reflector import Reflector, resource_version_of
from engine.model.facts import Container, Workload

log = logging.getLogger("qosd")

QOS_CLASSES = ("Guaranteed", "Burstable", "BestEffort")
QOS_RESOURCES = ("cpu", "memory")  # the kubelet's isSupportedQoSComputeResource


@dataclass(frozen=True)
class PodProblem:
    """Something in a pod object qosd could not use; the pod is kept without that part."""

    uid: str
    pod: str  # namespace/name
    message: str


# ------------------------------------------------------------------------------------------ pods


def _resources(
    spec: Mapping[str, Any], what: str, problems: list[str]
) -> tuple[Mapping[str, float], Mapping[str, float]]:
    resources = spec.get("resources") or {}
    if not isinstance(resources, Mapping):
        problems.append(f"{what}.resources is not a map: {resources!r}")
        resources = {}
    return (
        resource_list(resources.get("requests"), f"{what}.resources.requests", problems),
        resource_list(resources.get("limits"), f"{what}.resources.limits", problems),
    )


def qos_from_resources(resources: Iterable[tuple[Mapping[str, float], Mapping[str, float]]]) -> str:
    """The kubelet's QoS class (pkg/apis/core/helper/qos ComputePodQOS) from (requests, limits) of
    every container, init containers included, counting only CPU and memory:

    - nothing requested or limited -> BestEffort;
    - every container limits both CPU and memory, and the summed requests equal the summed limits
      for each -> Guaranteed;
    - otherwise Burstable.

    A request left out defaults to its limit, as the API server's defaulting does before the
    kubelet ever sees the pod."""
    requests: dict[str, float] = {}
    limits: dict[str, float] = {}
    guaranteed = True
    for req, lim in resources:
        found: set[str] = set()
        for name in QOS_RESOURCES:
            limit = lim.get(name)
            request = req.get(name, limit)
            if request is not None and request > 0:
                requests[name] = requests.get(name, 0.0) + request
            if limit is not None and limit > 0:
                found.add(name)
                limits[name] = limits.get(name, 0.0) + limit
        if not found.issuperset(QOS_RESOURCES):
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and len(requests) == len(limits) and all(limits.get(n) == v for n, v in requests.items()):
        return "Guaranteed"
    return "Burstable"


def pod_qos(pod: Mapping[str, Any], problems: list[str] | None = None) -> str:
    """``status.qosClass`` (set by the API server at creation), else computed like the kubelet,
    from pod-level ``spec.resources`` when they name CPU or memory, else from the containers."""
    sink: list[str] = problems if problems is not None else []
    status = pod.get("status") or {}
    reported = status.get("qosClass") if isinstance(status, Mapping) else None
    if reported in QOS_CLASSES:
        return str(reported)
    if reported:
        sink.append(
            f"status.qosClass {reported!r} is not one of {', '.join(QOS_CLASSES)}; computed from resources"
        )
    spec = pod.get("spec") or {}
    pod_level = _resources(spec, "spec", sink)
    if any(n in pod_level[0] or n in pod_level[1] for n in QOS_RESOURCES):
        return qos_from_resources([pod_level])
    containers = [
        c
        for field in ("initContainers", "containers")
        for c in spec.get(field) or ()
        if isinstance(c, Mapping)
    ]
    return qos_from_resources(_resources(c, "", []) for c in containers)


def _container_ids(status: Mapping[str, Any], field: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for cs in status.get(field) or ():
        if isinstance(cs, Mapping) and cs.get("name"):
            out[str(cs["name"])] = str(cs.get("containerID") or "")
    return out


def workload_from_pod(pod: Mapping[str, Any], driver: Driver, problems: list[str] | None = None) -> Workload:
    """A pod object (the API's JSON) as a Workload whose cgroup paths follow ``driver``.

    What cannot be read is left empty and described in ``problems`` (when given) instead of
    failing: a container ID from an unknown runtime leaves that container without a cgroup path, an
    unparsable quantity leaves that one resource out, a UID that cannot name a cgroup leaves the
    pod's path empty."""
    sink: list[str] = problems if problems is not None else []
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    uid = str(meta.get("uid") or "")
    qos = pod_qos(pod, sink)
    cgroup = ""
    try:
        cgroup = pod_path(uid, qos, driver)
    except ValueError as exc:
        sink.append(f"no pod cgroup: {exc}")
    ids = {
        "initContainers": _container_ids(status, "initContainerStatuses"),
        "containers": _container_ids(status, "containerStatuses"),
    }
    containers: list[Container] = []
    for field in ("initContainers", "containers"):
        for spec_c in spec.get(field) or ():
            if not isinstance(spec_c, Mapping) or not spec_c.get("name"):
                continue
            name = str(spec_c["name"])
            requests, limits = _resources(spec_c, f"container {name}", sink)
            container_id = ids[field].get(name, "")
            path = ""
            if container_id and cgroup:
                try:
                    path = container_path(uid, qos, container_id, driver)
                except ValueError as exc:
                    sink.append(f"container {name}: no cgroup path: {exc}")
            # A restartable init container (a native sidecar, restartPolicy: Always) runs alongside
            # the app containers for the pod's life: it is accounted and managed like one of them.
            init = field == "initContainers" and spec_c.get("restartPolicy") != "Always"
            containers.append(Container(name, container_id, requests, limits, path, init))
    priority = spec.get("priority")
    grace = spec.get("terminationGracePeriodSeconds")
    return Workload(
        uid=uid,
        name=str(meta.get("name") or ""),
        namespace=str(meta.get("namespace") or ""),
        labels=str_map(meta.get("labels")),
        annotations=str_map(meta.get("annotations")),
        priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else None,
        priority_class_name=str(spec.get("priorityClassName") or ""),
        kube_qos=qos,
        phase=str(status.get("phase") or "Pending"),
        terminating=bool(meta.get("deletionTimestamp")),
        cgroup_path=cgroup,
        containers=tuple(containers),
        termination_grace_seconds=grace if isinstance(grace, int) and not isinstance(grace, bool) else None,
        start_time=parse_time(status.get("startTime")),
    )


# ------------------------------------------------------------------------------------------ source


def pod_reflector(api_client: client.ApiClient, node_name: str, **options: Any) -> Reflector:
    """A Reflector of the pods bound to ``node_name`` (``options``: Reflector keyword arguments)."""
    if not node_name:
        raise ValueError("the pod watch needs this node's name (NODE_NAME)")
    return Reflector(
        "pods",
        client.CoreV1Api(api_client).list_pod_for_all_namespaces,
        field_selector=f"spec.nodeName={node_name}",
        **options,
    )


def _sort_key(w: Workload) -> tuple[str, str, str]:
    return (w.namespace, w.name, w.uid)


class KubePodSource:
    """engine.sources.collector.WorkloadSource (and FreshnessSource) over a pod Reflector.

    ``workloads()`` costs one integer comparison while no pod changed; after a change it rebuilds
    only the pods whose resourceVersion moved and hands back a new tuple, sorted by
    namespace/name/uid so the engine's iteration order does not depend on event order."""

    def __init__(self, reflector: Reflector, driver: Driver) -> None:
        self.reflector = reflector
        self.driver = driver
        self._lock = threading.Lock()
        self._version = -1
        self._last: tuple[Workload, ...] = ()
        self._built: dict[str, tuple[str, str, Workload]] = {}  # key -> (uid, resourceVersion, workload)
        self._problems: dict[tuple[str, str], PodProblem] = {}

    def workloads(self) -> tuple[Workload, ...]:
        view = self.reflector.view()
        if view.version == self._version:
            return self._last
        with self._lock:
            if view.version == self._version:
                return self._last
            built: dict[str, tuple[str, str, Workload]] = {}
            seen_uids: set[str] = set()
            for key, pod in view.items.items():
                uid = str((pod.get("metadata") or {}).get("uid") or "")
                rv = resource_version_of(pod)
                seen_uids.add(uid)
                previous = self._built.get(key)
                if previous is not None and rv and previous[0] == uid and previous[1] == rv:
                    built[key] = previous
                    continue
                built[key] = (uid, rv, self._build(key, uid, pod))
            # Problems of pods that are gone are forgotten: a pod reported again later is a new pod.
            self._problems = {k: p for k, p in self._problems.items() if p.uid in seen_uids}
            self._built = built
            self._last = tuple(sorted((entry[2] for entry in built.values()), key=_sort_key))
            self._version = view.version
            return self._last

    def _build(self, key: str, uid: str, pod: Mapping[str, Any]) -> Workload:
        problems: list[str] = []
        workload = workload_from_pod(pod, self.driver, problems)
        for message in problems:
            ident = (uid, message)
            if ident in self._problems:
                continue
            self._problems[ident] = PodProblem(uid, key, message)
            log.warning(
                "pod partly unreadable; kept without the unreadable part",
                extra={"fields": {"pod": key, "uid": uid, "problem": message}},
            )
        return workload

    def problems(self) -> tuple[PodProblem, ...]:
        """The current problems of pods still on the node, each logged once when first seen."""
        with self._lock:
            return tuple(self._problems.values())

    def fresh_at(self) -> float | None:
        """engine.sources.collector.FreshnessSource: when the pod list was last known current."""
        return self.reflector.fresh_at()
