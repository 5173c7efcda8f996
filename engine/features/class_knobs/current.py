"""A knob's ``current`` value: what its cgroup file holds now, for stepped controllers.

A knob that reads ``current`` (an expression naming it, or a ``deadBandPercent`` /
``maxGrowthPercent`` beside a percent or expression) is relative to the file's present value:
``current * 0.9`` each tick throttles by 10 %. Where that value comes from, in order:

1. **The cgroup read back** (``Snapshot.cgroups``): what the kernel enforces. It wins because it is
   the truth the controller acts on: a write that failed, a kubelet that reset the quota on a pod
   update, or another agent's write is seen at the next tick, and the controller steps from the
   real value instead of ratcheting a number the kernel never held. The anchors' own stepped
   controllers read the cgroup the same way. The daemon reads back every file its plans manage.
2. **The value qosd last computed for that file** (``EngineState.knob_values``), when the snapshot
   does not carry the file: a facts snapshot for ``qosd eval``, the steps of a ``qosd test`` case, a
   trace, or a daemon tick before its first read-back of a file it starts managing. It is part of
   the engine state, so it survives a restart exactly as the state file does (written before the
   tick's operations), and it is the same in every mode that runs the one tick.
3. **None** (unknown; also an unlimited file: ``max``/``-1``). A controller writes what to do
   then, e.g. ``(current or container.limits.cpu) * 0.9``.

Only knobs that read ``current`` record their value, and an entry is kept only while its cgroup is
still a pod's or container's, or observed, so the state stays as small as the set of controlled
cgroups.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache

from engine.cgroups.files import host_files
from engine.features.class_knobs.knobs import current_value
from engine.model.facts import Snapshot


def knob_key(path: str, file: str) -> str:
    """The state's key of one cgroup file: its path below the cgroup root ("<cgroup>/<file>")."""
    return f"{path}/{file}"


@cache
def _names(file: str) -> tuple[str, ...]:
    """Where ``file``'s value may be read back: its own name, then the other cgroup version's (the
    collector reads the node's names; a knob may be written in either dialect). The period beside a
    v1 quota is not a value of its own."""
    names = (file, *host_files(file, 1), *host_files(file, 2))
    return tuple(n for n in dict.fromkeys(names) if n != "cpu.cfs_period_us")


def read_current(snap: Snapshot, last: Mapping[str, str], path: str, file: str) -> float | None:
    """``file``'s current value in its knob's unit: read back (under either cgroup version's name),
    else the last computed, else None."""
    observed = snap.cgroups.get(path)
    if observed:
        for name in _names(file):
            text = observed.get(name)
            if text is not None:
                return current_value(name, text)
    text = last.get(knob_key(path, file))
    return current_value(file, text) if text is not None else None


def carry_over(
    last: Mapping[str, str], written: Mapping[str, str], snap: Snapshot
) -> Mapping[str, str]:
    """The next state's values: this tick's, plus the previous ones whose cgroup still exists (a pod's
    or a container's in the snapshot, or one it observed)."""
    if not last:
        return dict(written)
    if len(written) >= len(last) and all(k in written for k in last):
        return dict(written)  # every controlled file wrote this tick (the steady state): nothing to prune
    live = set(snap.cgroups)
    for w in snap.workloads:
        live.add(w.cgroup_path)
        live.update(c.cgroup_path for c in w.containers)
    out = {k: v for k, v in last.items() if k.rsplit("/", 1)[0] in live}
    out.update(written)
    return out
