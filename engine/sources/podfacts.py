"""The per-pod fact maps of a snapshot, looked up in the tick's cgroup sample when asked.

At 500 workloads a daemon tick built 500 fact maps (a copy of the pod's last memory facts plus its
CPU rate) that, on most ticks, no part of the engine read: the bundled policy looks at pods' usage
for its reclaim report every 30 s and when a trigger ranks victims. ``PodFacts`` keeps the uid ->
cgroup mapping (made once per workload list) and the tick's :class:`~engine.sources.cgroupfs.CgroupSample`,
so a pod's map is built the first time someone looks at it. It reads as the plain dict it replaces:
a pod is in it when its cgroup has a fact this tick."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any


class PodFacts(Mapping[str, Mapping[str, Any]]):
    """uid -> the facts of the pod's cgroup this tick (see the module docstring)."""

    __slots__ = ("_cgroups", "_paths")

    def __init__(self, paths: Mapping[str, str], cgroups: Mapping[str, Mapping[str, Any]]) -> None:
        self._paths = paths  # uid -> cgroup path, for the workloads that have one
        self._cgroups = cgroups

    def __getitem__(self, uid: str) -> Mapping[str, Any]:
        return self._cgroups[self._paths[uid]]

    def get(self, uid: str, default: Any = None) -> Any:
        path = self._paths.get(uid)
        return default if path is None else self._cgroups.get(path, default)

    def __contains__(self, uid: object) -> bool:
        path = self._paths.get(uid) if isinstance(uid, str) else None
        return path is not None and path in self._cgroups

    def __iter__(self) -> Iterator[str]:
        cgroups = self._cgroups
        return (uid for uid, path in self._paths.items() if path in cgroups)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"PodFacts({dict(self.items())!r})"
