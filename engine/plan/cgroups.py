"""Ordering cgroup writes so the kernel never sees a child looser than its parent.

Limits and cpusets nest: a child's memory limit or CPU quota above its parent's, or a child cpuset
outside its parent's, is refused (EINVAL) or silently clamped. So writes go in two passes, as
Koordinator's leveled updates do: top-down, each cgroup gets the *looser* of its current and desired
values (the larger limit, the union of cpusets); then bottom-up, each gets its desired value. Files
whose current value already equals the desired one are not written at all (a steady state writes
nothing).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from engine.model.units import format_cpuset, parse_cpuset

UNLIMITED = ("max", "-1")
LIMITS = frozenset(
    {
        "memory.max",
        "memory.limit_in_bytes",
        "memory.high",
        "cpu.cfs_quota_us",
        "cpu.max",
        "cpu.max.burst",
        "cpu.cfs_burst_us",
    }
)
CPUSETS = frozenset({"cpuset.cpus", "cpuset.mems"})


@dataclass(frozen=True)
class Desired:
    path: str
    file: str
    value: str


def _limit(value: str) -> float:
    head = value.split()[0] if value.strip() else "max"
    return float("inf") if head in UNLIMITED else float(head)


def looser(file: str, current: str | None, desired: str) -> str:
    """The value that admits both current and desired children during the transition."""
    if current is None:
        return desired
    if file in CPUSETS:
        try:
            return format_cpuset(parse_cpuset(current) | parse_cpuset(desired))
        except ValueError:
            return desired
    if file in LIMITS:
        try:
            return current if _limit(current) >= _limit(desired) else desired
        except ValueError:
            return desired
    return desired


def order_writes(desired: Sequence[Desired], observed: Mapping[str, Mapping[str, str]]) -> list[Desired]:
    """Minimal, ordered writes: top-down loosening, then bottom-up tightening."""
    changes = [d for d in desired if (observed.get(d.path) or {}).get(d.file) != d.value]
    depth = {d: d.path.strip("/").count("/") for d in changes}
    first: list[Desired] = []
    done: set[Desired] = set()
    for d in sorted(changes, key=lambda d: (depth[d], d.path, d.file)):
        current = (observed.get(d.path) or {}).get(d.file)
        if d.file in LIMITS | CPUSETS:
            step = looser(d.file, current, d.value)
            if step != current:
                first.append(Desired(d.path, d.file, step))
            if step == d.value:
                done.add(d)  # raising: finished top-down
        else:
            first.append(d)
            done.add(d)
    second = [d for d in sorted(changes, key=lambda d: (-depth[d], d.path, d.file)) if d not in done]
    return first + second
