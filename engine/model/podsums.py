"""A pod's measured facts filled in from its containers when the pod-level value is absent.

Katalyst reads a pod's memory as the sum of its containers' metrics (the RSS overuse plugin adds up
``mem.rss.container`` of every container), while qosd reads the pod cgroup. A source that reports
only container values (a facts snapshot or trace written from per-container metrics, or a pod whose
own cgroup could not be read) would otherwise leave the pod without the fact, and a rule that needs
it would silently skip the pod. A sum is made only when every app container reports the value: a
partial sum would understate the pod.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol


class _Container(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def init(self) -> bool: ...


class _Pod(Protocol):
    """What a sum needs of a workload (engine.model.facts.Workload, which imports this module)."""

    @property
    def uid(self) -> str: ...
    @property
    def containers(self) -> Sequence[_Container]: ...

SUMMED_FROM_CONTAINERS = (
    "memory.rss_bytes",
    "memory.usage_bytes",
    "memory.cache_bytes",
    "memory.shmem_bytes",
    "memory.inactive_file_bytes",
    "memory.working_set_bytes",
    "cpu.usage_cores",
    "cpu.load_1min",
)


def fill_from_containers(
    workloads: Iterable[_Pod],
    pods: Mapping[str, Mapping[str, Any]],
    containers: Mapping[str, Mapping[str, Any]],
) -> dict[str, dict[str, Any]]:
    """The pods whose facts gain a value summed from their containers, keyed by uid, each with its
    whole fact map (the pod's own values kept; only absent keys are filled). Pods with nothing to
    add are left out, so a caller replaces only those."""
    out: dict[str, dict[str, Any]] = {}
    if not containers:
        return out
    for w in workloads:
        apps = [c for c in w.containers if not c.init]
        if not apps:
            continue
        own = pods.get(w.uid) or {}
        rows = [containers.get(f"{w.uid}/{c.name}") for c in apps]
        if any(r is None for r in rows):
            continue
        added: dict[str, Any] = {}
        for key in SUMMED_FROM_CONTAINERS:
            if key in own:
                continue
            values = [r.get(key) for r in rows if r is not None]
            if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
                added[key] = sum(values)
        if added:
            out[w.uid] = {**own, **added}
    return out
