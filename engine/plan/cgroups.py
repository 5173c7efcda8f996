"""Ordering cgroup writes so the kernel never sees a child looser than its parent.

Limits, protections and cpusets nest: a child's memory limit or CPU quota above its parent's, or a
child cpuset outside its parent's, is refused (EINVAL) or silently clamped, and a child's memory.min
or memory.low above its parent's is not honoured. So writes go in two passes, as Koordinator's
leveled updates (resourceexecutor LeveledUpdateBatch) do: top-down, each cgroup gets the *looser* of
its current and desired values (the larger limit or protection, -1/max as unlimited, the union of
cpusets); then bottom-up, each gets its desired value. A raise is thus written parent first, a
lowering children first, and at no point is a parent tighter than a child. Files whose current value
already equals the desired one are not written at all (a steady state writes nothing).

Within one cgroup, cpu.idle and the weight files are ordered too. While a group is idle the kernel
refuses cpu.shares/cpu.weight writes (EINVAL) and pins the weight to its minimum, and clearing idle
resets the weight to the default (sched_group_set_idle; seen on this project's 6.x hosts: shares
read 3 while idle, a write fails, idle=0 brings back 1024). So a group turning idle gets its
shares/weight first and cpu.idle=1 last, and a group leaving idle gets cpu.idle=0 first and its
shares/weight after. Katalyst never meets the case (it sets cpu.idle on the reclaim root only and
leaves that group's weight alone); koordlet's cpu.idle (BE schedIdle) sits beside a weight it does
not write either.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from engine.cgroups.files import burst_problem
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
# Memory protections nest the other way round from what one might guess: a child's memory.min /
# memory.low is effective only up to its parent's, so a parent below its children takes protection
# away from them. Koordinator merges them like limits (the larger value first, top-down), so a
# decrease goes children first and parent last, an increase parent first.
PROTECTIONS = frozenset({"memory.min", "memory.low"})
CPUSETS = frozenset({"cpuset.cpus", "cpuset.mems"})
MERGED = LIMITS | PROTECTIONS | CPUSETS


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
    if file in LIMITS or file in PROTECTIONS:
        try:
            return current if _limit(current) >= _limit(desired) else desired
        except ValueError:
            return desired
    return desired


def _within_cgroup(d: Desired) -> int:
    """Rank of a write among the writes to one cgroup: cpu.idle=0 before and cpu.idle=1 after the
    weight files (see the module docstring); everything else keeps its name order."""
    if d.file == "cpu.idle":
        return 1 if d.value.strip() == "1" else -1
    return 0


def order_writes(desired: Sequence[Desired], observed: Mapping[str, Mapping[str, str]]) -> list[Desired]:
    """Minimal, ordered writes: top-down loosening, then bottom-up tightening."""
    changes = [d for d in desired if (observed.get(d.path) or {}).get(d.file) != d.value]
    depth = {d: d.path.strip("/").count("/") for d in changes}
    first: list[Desired] = []
    done: set[Desired] = set()
    for d in sorted(changes, key=lambda d: (depth[d], d.path, _within_cgroup(d), d.file)):
        current = (observed.get(d.path) or {}).get(d.file)
        if d.file in MERGED:
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


QUOTAS = ("cpu.cfs_quota_us", "cpu.max")
BURSTS = ("cpu.cfs_burst_us", "cpu.max.burst")


def cfs_refusals(
    changes: Sequence[Desired], observed: Mapping[str, Mapping[str, str]]
) -> dict[tuple[str, str], str]:
    """The quota and burst changes of a cgroup that the kernel would refuse together (sched/core.c: a
    CFS burst above the quota), each with why. A burst computed by an expression, or a quota and a
    burst from two rules, can only be judged here: every quota either planned or held now is
    checked against every burst planned or held now, and all of the cgroup's changes to those files
    are held, so the kernel never sees half of a pair it refuses."""
    by_path: dict[str, list[Desired]] = {}
    for d in changes:
        if d.file in QUOTAS or d.file in BURSTS:
            by_path.setdefault(d.path, []).append(d)
    out: dict[tuple[str, str], str] = {}
    for path, planned in by_path.items():
        current = observed.get(path) or {}
        quotas = [d.value for d in planned if d.file in QUOTAS] or [
            current[f] for f in QUOTAS if f in current
        ]
        bursts = [d.value for d in planned if d.file in BURSTS] or [
            current[f] for f in BURSTS if f in current
        ]
        bad = next(
            (
                problem
                for q in quotas
                for b in bursts
                if (
                    problem := burst_problem(
                        {"cpu.cfs_quota_us": (q.split() or [""])[0], "cpu.cfs_burst_us": b}
                    )
                )
            ),
            None,
        )
        if bad is not None:
            out.update(((d.path, d.file), bad) for d in planned)
    return out
