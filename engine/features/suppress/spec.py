"""The suppress action's typed spec (Koordinator's CPUSuppress defaults filled in) and its checks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.config.errors import Checker
from engine.config.load import JsonPath

DEFAULT_CGROUP = "kubepods/besteffort"  # the kubelet's BestEffort directory: where BE pods live


@dataclass(frozen=True)
class SuppressSpec:
    """``then: {suppress: ...}``, compiled once per generation."""

    target: str  # the class being suppressed
    cgroup: str = DEFAULT_CGROUP
    policy: str = "cpuset"  # or "cfsQuota"
    threshold_percent: int = 65
    min_percent: int | None = None
    min_cpus: int = 2
    step_percent: float = 10.0
    min_quota: int = 2000
    dead_band_percent: float = 1.0
    borrow_from: tuple[str, ...] = ()
    exclude_classes: tuple[str, ...] = ()


def compile_spec(raw: Mapping[str, Any]) -> SuppressSpec:
    min_percent = raw.get("minPercent")
    return SuppressSpec(
        target=str(raw["class"]),
        cgroup=str(raw.get("cgroup", DEFAULT_CGROUP)),
        policy=str(raw.get("policy", "cpuset")),
        threshold_percent=int(raw.get("thresholdPercent", 65)),
        min_percent=int(min_percent) if min_percent is not None else None,
        min_cpus=int(raw.get("minCpus", 2)),
        step_percent=float(raw.get("stepPercent", 10)),
        min_quota=int(raw.get("minQuota", 2000)),
        dead_band_percent=float(raw.get("deadBandPercent", 1)),
        borrow_from=tuple(str(c) for c in raw.get("borrowFrom") or ()),
        exclude_classes=tuple(str(c) for c in raw.get("excludeClasses") or ()),
    )


def check(c: Checker, p: JsonPath, params: Mapping[str, Any]) -> None:
    """Class references (the suppressed class, borrowFrom, excludeClasses) and the cgroup path."""
    c.ref((*p, "class"), params.get("class"), c.classes, "class")
    if "cgroup" in params:
        c.cgroup_path((*p, "cgroup"), "suppress cgroup", params["cgroup"])
    for field_name in ("borrowFrom", "excludeClasses"):
        for j, name in enumerate(params.get(field_name) or []):
            c.ref((*p, field_name, j), name, c.classes, "class")
            if name == params.get("class"):
                c.add(
                    (*p, field_name, j),
                    f"class {name!r} is the class being suppressed",
                    f"list other classes in {field_name}",
                )
