"""Memory QoS specs: a ``memoryQos`` block (a class's, or a setCgroup's), compiled once per
generation, and the memoryGuard action's spec (Katalyst's MemoryGuard defaults) with its checks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from engine.config.errors import Checker
from engine.config.load import JsonPath
from engine.features.memory_qos.strategy import (
    CRITICAL_WATERMARK_SCALE_FACTOR,
    MIN_CRITICAL_WATERMARK,
    MemoryQOSConfig,
)
from engine.model import pod_json
from engine.model.pod_json import bounded_int, json_object
from engine.model.units import parse_quantity

DEFAULT_RECLAIM_ROOT = "kubepods/besteffort"  # katalyst: reclaimed relative root cgroup path


# memoryQos fields written as given, per pod and container (koordlet makeCgroupResources).
STATIC_MEMORY_FILES: tuple[tuple[str, str], ...] = (
    ("wmarkRatio", "memory.wmark_ratio"),
    ("wmarkScalePermill", "memory.wmark_scale_factor"),
    ("wmarkMinAdj", "memory.wmark_min_adj"),
    ("priorityEnable", "memory.use_priority_oom"),
    ("priority", "memory.priority"),
    ("oomKillGroup", "memory.oom.group"),
)


# The range of each memoryQos field (the schema's, Koordinator's NodeSLO validation's): a pod
# annotation's overlay is held to them too, since nothing else checks it before the write.
FIELD_RANGES: Mapping[str, tuple[int, int]] = {
    "minLimitPercent": (0, 100),
    "lowLimitPercent": (0, 100),
    "throttlingPercent": (0, 100),
    "wmarkRatio": (0, 100),
    "wmarkScalePermill": (1, 1000),
    "wmarkMinAdj": (-25, 50),
    "priorityEnable": (0, 1),
    "priority": (0, 12),
    "oomKillGroup": (0, 1),
}

# What a pod whose annotation says policy "none" gets: no protection, no throttling, and each
# Anolis file at the kernel's default, so a pod that opts out is reset rather than left with what
# its class wrote before (Koordinator's NoneMemoryQOS has exactly these values).
OPTED_OUT: Mapping[str, int] = {
    "minLimitPercent": 0,
    "lowLimitPercent": 0,
    "throttlingPercent": 0,
    "wmarkRatio": 0,
    "wmarkScalePermill": 50,
    "wmarkMinAdj": 0,
    "priorityEnable": 0,
    "priority": 0,
    "oomKillGroup": 0,
}
POD_POLICIES = ("default", "auto", "none")


@dataclass(frozen=True)
class MemoryQos:
    """A ``memoryQos`` block, compiled: the percents, the files written as given, the resource, and
    the pod annotation whose JSON overlays the block per pod (``podAnnotation``)."""

    percents: MemoryQOSConfig
    files: tuple[tuple[str, str], ...] = ()
    resource: str = "memory"
    pod_annotation: str | None = None
    fields: tuple[tuple[str, int], ...] = ()  # the block's own fields, for a pod's overlay

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> MemoryQos:
        fields = {key: int(raw[key]) for key in FIELD_RANGES if raw.get(key) is not None}
        annotation = raw.get("podAnnotation")
        resource = str(raw.get("resource", "memory"))
        return cls._of(fields, resource, None if annotation is None else str(annotation))

    @classmethod
    def _of(cls, fields: Mapping[str, int], resource: str, annotation: str | None) -> MemoryQos:
        return cls(
            MemoryQOSConfig(
                fields.get("minLimitPercent"), fields.get("lowLimitPercent"), fields.get("throttlingPercent")
            ),
            tuple((file, str(fields[key])) for key, file in STATIC_MEMORY_FILES if key in fields),
            resource,
            annotation,
            tuple(sorted(fields.items())),
        )

    def for_pod(self, annotations: Mapping[str, str]) -> tuple[MemoryQos, str | None]:
        """This block for one pod: its ``podAnnotation`` overlaid (Koordinator's
        mergePodResourceQoSForMemoryQoS), and why the annotation was ignored (None when it was not).

        ``{"policy": "none"}`` opts the pod out (:data:`OPTED_OUT`); ``"auto"`` and ``"default"`` (or
        no policy) keep this block, and the annotation's fields overlay it field by field. In
        Koordinator "auto" means the class's built-in defaults, which are what the bundled profile
        ships, so the two agree unless an operator changed the rule's values. An annotation that
        does not parse, names an unknown policy or holds a value out of its field's range is ignored
        as a whole, as Koordinator ignores one that does not parse."""
        return pod_json.for_pod(self, self.pod_annotation, annotations, _overlay)


@lru_cache(maxsize=1024)
def _overlay(qos: MemoryQos, text: str) -> tuple[MemoryQos, str | None]:
    """Cached per (block, annotation text): a steady node parses each pod's annotation once."""
    doc, why = json_object(text)
    if doc is None:
        return qos, why
    policy = doc.get("policy") or "default"
    if policy not in POD_POLICIES:
        return qos, f"policy {str(policy)[:40]!r} is not one of {', '.join(POD_POLICIES)}"
    if policy == "none":
        return MemoryQos._of(OPTED_OUT, qos.resource, qos.pod_annotation), None
    merged = dict(qos.fields)
    for key, (lo, hi) in FIELD_RANGES.items():
        value, why = bounded_int(doc, key, lo, hi)
        if why:
            return qos, why
        if value is not None:
            merged[key] = value
    return MemoryQos._of(merged, qos.resource, qos.pod_annotation), None


@dataclass(frozen=True)
class MemoryGuardSpec:
    """``then: {memoryGuard: ...}``, compiled once per generation."""

    cgroup: str = DEFAULT_RECLAIM_ROOT
    min_critical_watermark: int = MIN_CRITICAL_WATERMARK  # bytes
    critical_watermark_scale_factor: float = CRITICAL_WATERMARK_SCALE_FACTOR


def compile_spec(raw: Mapping[str, Any]) -> MemoryGuardSpec:
    return MemoryGuardSpec(
        cgroup=str(raw.get("cgroup", DEFAULT_RECLAIM_ROOT)),
        min_critical_watermark=int(parse_quantity(raw.get("minCriticalWatermark", MIN_CRITICAL_WATERMARK))),
        critical_watermark_scale_factor=float(
            raw.get("criticalWatermarkScaleFactor", CRITICAL_WATERMARK_SCALE_FACTOR)
        ),
    )


def check(c: Checker, p: JsonPath, params: Mapping[str, Any]) -> None:
    """The watermark is a quantity; the cgroup a usable path under the cgroup root."""
    c.quantity((*p, "minCriticalWatermark"), params.get("minCriticalWatermark"))
    if "cgroup" in params:
        c.cgroup_path((*p, "cgroup"), "memoryGuard cgroup", params["cgroup"])


def check_one_reclaim_root(c: Checker, guards: Iterable[tuple[JsonPath, MemoryGuardSpec]]) -> None:
    """Every memoryGuard of a policy names the same cgroup: the node collector reads one reclaim
    root's memory.numa_stat into numa.memory.reclaimed_usage_bytes (one fact per NUMA node, as
    Katalyst has one reclaim root), so a second root would be capped from the first one's usage."""
    first: tuple[JsonPath, MemoryGuardSpec] | None = None
    for path, spec in guards:
        if first is None:
            first = (path, spec)
        elif spec.cgroup != first[1].cgroup:
            c.add(
                (*path, "cgroup"),
                f"memoryGuard cgroup {spec.cgroup!r} differs from {first[1].cgroup!r} of an earlier "
                "memoryGuard; qosd collects the reclaimed usage of one reclaim root per node",
                hint="give every memoryGuard the same cgroup, or keep one memoryGuard rule",
                related=[c.loc((*first[0], "cgroup"))],
            )
