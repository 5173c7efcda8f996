"""A pod's CPU burst by policy (Katalyst's cpu burst manager) and the burstContainers choice.

Per app container, from its CFS quota as observed (whoever set it), else the kubelet's quota for its
CPU limit: ``closed`` writes 0, ``static`` quota x percent / 100, ``default`` and ``dynamic`` leave
the file alone. ``burstContainers: main`` narrows every burst of a class (this policy and the
``burst`` knob) to the pod's main container.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import cast, get_args

from engine.features.class_knobs.knobs import (
    KatalystBurstPolicy,
    cores_to_milli,
    katalyst_burst_us,
    milli_cpu_to_quota,
)
from engine.model.facts import Container, Snapshot
from engine.model.intents import CgroupIntent, Provenance
from engine.model.units import int_or_none


def bursts(ctr: Container | None, main: str | None) -> bool:
    """Whether ``ctr`` gets a burst: the pod (None), and every container unless only ``main`` does."""
    return ctr is None or main is None or ctr.name == main


def observed_quotas(
    containers: Iterable[Container], snap: Snapshot, version: int | None
) -> tuple[str | None, ...]:
    """Each app container's current CFS quota as observed: the burst is over the quota the cgroup
    holds, whoever set it."""
    out: list[str | None] = []
    for ctr in containers:
        files = snap.cgroups.get(ctr.cgroup_path) or {}
        text = files.get("cpu.cfs_quota_us") if version != 2 else None
        if text is None and "cpu.max" in files:
            head = files["cpu.max"].split()
            text = "-1" if not head or head[0] == "max" else head[0]
        out.append(text)
    return tuple(out)


def policy_burst(
    pod: str,
    containers: Sequence[Container],
    quotas: tuple[str | None, ...],
    policy: str,
    percent: float,
    file: str,
    prov: Provenance,
    main: str | None,
) -> list[CgroupIntent]:
    """The burst intents of pod ``pod`` under ``policy`` (only container ``main`` when given);
    ``quotas`` are the containers' observed quotas, in order (empty: none observed)."""
    if policy not in get_args(KatalystBurstPolicy):
        return []  # an enhancement's value list admits only Katalyst's four policies
    out: list[CgroupIntent] = []
    for i, ctr in enumerate(containers):
        if not bursts(ctr, main):
            continue
        quota = int_or_none(quotas[i] if i < len(quotas) else None)
        if quota is None:
            limit = ctr.limits.get("cpu")
            quota = milli_cpu_to_quota(cores_to_milli(limit)) if limit else -1
        value = katalyst_burst_us(quota, float(percent), cast(KatalystBurstPolicy, policy))
        if value is None:
            continue
        inputs = {"burstPolicy": policy, "container": ctr.name, "quotaUs": quota}
        if policy == "static":
            inputs["burstPercent"] = float(percent)
        p = replace(prov, inputs=MappingProxyType({**prov.inputs, **inputs}))
        out.append(CgroupIntent(ctr.cgroup_path, file, str(value), pod, p))
    return out
