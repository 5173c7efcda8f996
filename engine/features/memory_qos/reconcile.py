"""Koordinator's CgroupReconcile for memory QoS, as intents: a pod's and its containers'
memory.min/low/high from their requests and limits, and the kube-QoS directories' sums.

The class-knob step calls these once per pod and once per tick (engine/features/class_knobs/step.py):
it knows each pod's class and a rule's ask; this module knows what memory QoS writes where. On
cgroup v2 a child's protection is bounded by its parent's, so the kubepods root and its burstable
and besteffort children get the sums of their pods' terms (``kube_qos_dir_intents``), which needs
every pod's configuration at once: hence the per-pod ``QosInput`` collected by the caller.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from engine.evaluate.context import Skipped
from engine.features.memory_qos.spec import MemoryQos
from engine.features.memory_qos.strategy import (
    PodMemoryInput,
    container_memory_qos,
    kube_qos_memory_qos,
    pod_memory_qos,
)
from engine.model.facts import Container, Snapshot, Workload
from engine.model.intents import CgroupIntent, Provenance

# Pod cgroups as the kubelet names them (cgroupfs: pod<uid>; systemd: kubepods[-<qos>]-pod<uid>.slice).
_POD_DIR = re.compile(r"^(pod[\w-]+|kubepods(-[a-z]+)?-pod[\w]+\.slice)$")
_QOS_DIR = {"Burstable": "burstable", "BestEffort": "besteffort"}

# One pod's part of the kube-QoS sums: its input, its QoS directory, the kubepods root, who asked.
QosInput = tuple[PodMemoryInput, str, str, str]


@dataclass(frozen=True)
class MemoryQosAsk:
    """One ``setCgroup`` with ``memoryQos`` of a rule that matched this tick."""

    rule: str
    class_name: str
    qos: MemoryQos
    provenance: Provenance


def kube_qos_dirs(w: Workload) -> tuple[str, str] | None:
    """(the pod's kube-QoS directory, the kubepods root) from its cgroup path, or None when the path
    is not one the kubelet made (standalone cgroups, tests): sums go only where pods are known to
    nest. Guaranteed pods sit directly under the root, which is also their QoS directory."""
    parent, _, base = w.cgroup_path.strip("/").rpartition("/")
    if not parent or not _POD_DIR.match(base):
        return None
    if w.kube_qos == "Guaranteed":
        return parent, parent
    root, _, qos = parent.rpartition("/")
    want = _QOS_DIR.get(w.kube_qos)
    if not root or want is None or not (qos == want or qos.endswith(f"-{want}.slice")):
        return None
    return parent, root


def v1_memory_note(who: str, files: tuple[str, ...], rule: str) -> Skipped:
    """The note for memory protection files a cgroup v1 node does not get (one per class or rule)."""
    return Skipped(
        rule,
        f"{who}: {', '.join(files)} not written on this cgroup v1 node: memory.min, memory.low and "
        "memory.high exist only on cgroup v2 (and Alibaba Cloud Linux v1 kernels, which qosd cannot "
        "tell apart)",
    )


def allocatable_memory(snap: Snapshot, node: Mapping[str, Any]) -> int:
    """Node allocatable memory, which Koordinator's memory.high falls back to without a limit."""
    value = snap.allocatable.get("memory") or node.get("memory.allocatable_bytes") or snap.node.memory
    return int(value or 0)


# A class's own memory QoS: its memoryQos (None when it declares none), who it is in notes ("class
# <name>"), the provenance rule name, and the provenance of its intents given their inputs.
ClassQos = tuple[MemoryQos | None, str, str, Callable[..., Provenance]]


def pod_memory_qos_intents(
    w: Workload,
    own: ClassQos,
    ask: MemoryQosAsk | None,
    version: int | None,
    alloc: int,
    containers: list[Container],
    intents: list[CgroupIntent],
    notes: list[Skipped],
) -> QosInput | None:
    """Append the pod's and its containers' memory QoS intents (or a note why not); return its part
    of the kube-QoS sums, None when it has none. A rule's ``ask`` replaces the class's memoryQos
    and stamps the intents with the rule's provenance."""
    class_qos, class_who, class_rule, class_provenance = own
    qos = ask.qos if ask is not None else class_qos
    if qos is None:
        return None
    who = f"rule {ask.rule}" if ask is not None else class_who
    rule = ask.rule if ask is not None else class_rule
    configured = qos
    qos, ignored = configured.for_pod(w.annotations)
    if ignored:
        notes.append(Skipped(rule, f"{who}: annotation {qos.pod_annotation} of {w.key} ignored: {ignored}"))
    # The pod's own overlay, in the provenance of what it changed.
    overlay = (
        {"podAnnotation": w.annotations.get(configured.pod_annotation or "")} if qos is not configured else {}
    )

    def provenance(**extra: Any) -> Provenance:
        if ask is None:
            return class_provenance(**extra)
        base = ask.provenance
        return replace(base, item=w.key, inputs=MappingProxyType({**base.inputs, **extra}))

    if version == 1:
        notes.append(v1_memory_note(who, ("memoryQos",), rule))
        return None
    res = qos.resource
    try:
        request = int(w.request(res))
        pod = pod_memory_qos(request, qos.percents)
        per_ctr = [
            (
                ctr,
                container_memory_qos(
                    _bytes(ctr.requests.get(res)), _bytes(ctr.limits.get(res)), alloc, qos.percents
                ),
            )
            for ctr in containers
        ]
    except (ValueError, TypeError) as exc:
        notes.append(Skipped(rule, f"{who}: memory QoS of {w.key} not computed: {exc}"))
        return None
    if w.cgroup_path:
        p = provenance(memoryQos=list(pod.steps), request=request, resource=res, **overlay)
        for file, value in (*pod.files().items(), *qos.files):
            intents.append(CgroupIntent(w.cgroup_path, file, value, w.key, p))
    for ctr, prot in per_ctr:
        p = provenance(memoryQos=list(prot.steps), container=ctr.name, resource=res, **overlay)
        for file, value in (*prot.files().items(), *qos.files):
            intents.append(CgroupIntent(ctr.cgroup_path, file, value, w.key, p))
    dirs = kube_qos_dirs(w)
    if dirs is None or w.kube_qos not in ("Guaranteed", "Burstable", "BestEffort"):
        return None
    return PodMemoryInput(w.kube_qos, request, qos.percents), dirs[0], dirs[1], who


def kube_qos_dir_intents(inputs: list[QosInput], version: int | None, base: Provenance) -> list[CgroupIntent]:
    """memory.min/low of the kube-QoS directories: the sums of their pods' terms. ``base`` is the
    provenance each directory's intents share (item and inputs are filled in per directory)."""
    dirs: dict[str, str] = {}
    root = ""
    sources: list[str] = []
    for pod, qos_dir, pod_root, who in inputs:
        dirs.setdefault(pod.kube_qos, qos_dir)
        root = root or pod_root
        if who not in sources:
            sources.append(who)
    dirs["Guaranteed"] = root
    sums = kube_qos_memory_qos(p for p, *_ in inputs)
    counts = {q: sum(1 for p, *_ in inputs if p.kube_qos == q) for q in dirs}
    out: list[CgroupIntent] = []
    for qos, prot in sums.items():
        path = dirs.get(qos)
        if not path:
            continue
        inputs_ = {
            "kubeQoS": qos,
            "pods": len(inputs) if qos == "Guaranteed" else counts.get(qos, 0),
            "sources": sources,
            "memoryQos": list(prot.steps),
            "cgroupVersion": version if version else "unknown",
        }
        prov = replace(base, item=path, inputs=MappingProxyType(inputs_))
        for file, value in prot.files().items():
            out.append(CgroupIntent(path, file, value, None, prov))
    return out


def _bytes(value: float | None) -> int | None:
    return None if value is None else int(value)
