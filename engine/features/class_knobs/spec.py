"""Class knob specs: a class's ``cpu`` and ``memory`` sections, and the setCgroup action with its checks.

A knob (``Knob``) is kept as written (a literal, ``{shares: N}``, ``{percent: P, of: ...}`` or
``{expr: ...}``): the class-knob step compiles it per cgroup version, the setCgroup spec here once per
generation with the policy's cpu.weight formula. ``target`` names one of a class (its pods' cgroups),
a pool, or a cgroup path. With a class target, ``containers`` gives each app container's own cgroup a
value computed from that container (``container.*``, its own ``current``), and a pod value
``{sum: containers}`` is the sum of its containers' values of the same file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from engine.cgroups.weight import WeightFormula, shares_problem, weight_problem
from engine.config.errors import Checker
from engine.config.load import JsonPath
from engine.features.class_knobs.knobs import KnobFn, compile_knob, knob_reads
from engine.features.memory_qos.spec import MemoryQos

Knob = Any  # a frozen knob as written; compile_knob turns it into a function of (pod, node facts)

KATALYST_DEFAULT_BURST_PERCENT = 100.0  # katalyst qrm cpu util defaultCPUBurstPercent


@dataclass(frozen=True)
class ClassCpu:
    """A class's ``cpu`` section. ``idle`` is None when the class does not declare it."""

    policy: str | None = None
    pool: str | None = None
    requires: tuple[str, ...] = ()
    idle: bool | None = None
    shares: Knob = None
    weight: Knob = None
    cfs_quota: Knob = None
    burst: Knob = None
    burst_policy: str | None = None
    burst_percent: float = KATALYST_DEFAULT_BURST_PERCENT
    burst_main_only: bool = False  # burstContainers: main
    main_container_annotation: str | None = None

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> ClassCpu:
        return cls(
            policy=raw.get("policy"),
            pool=raw.get("pool"),
            requires=tuple(raw.get("requires") or ()),
            idle=raw.get("idle"),
            shares=raw.get("shares"),
            weight=raw.get("weight"),
            cfs_quota=raw.get("cfsQuota"),
            burst=raw.get("burst"),
            burst_policy=raw.get("burstPolicy"),
            burst_percent=float(raw.get("burstPercent", KATALYST_DEFAULT_BURST_PERCENT)),
            burst_main_only=raw.get("burstContainers") == "main",
            main_container_annotation=raw.get("mainContainerAnnotation"),
        )


@dataclass(frozen=True)
class ClassMemory:
    """A class's ``memory`` section: per-pod memory.min/low/high and the limit, as knobs."""

    min: Knob = None
    low: Knob = None
    high: Knob = None
    limit: Knob = None

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> ClassMemory:
        return cls(raw.get("min"), raw.get("low"), raw.get("high"), raw.get("limit"))


@dataclass(frozen=True)
class SetCgroupSpec:
    """``then: {setCgroup: ...}``, compiled once per generation."""

    target: Mapping[str, str]  # as written (one key), shown in provenance
    class_name: str | None = None
    pool: str | None = None
    path: str | None = None
    values: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))  # knobs as written
    knobs: tuple[tuple[str, KnobFn], ...] = field(default=(), compare=False)  # compiled ``values``
    memory_qos: MemoryQos | None = None
    # ``containers``: each app container's own cgroup (class targets only), compiled
    container_knobs: tuple[tuple[str, KnobFn], ...] = field(default=(), compare=False)
    sums: tuple[str, ...] = ()  # pod files whose value is the sum of the containers' ({sum: containers})
    reads_current: frozenset[str] = frozenset()  # "pod:<file>" / "container:<file>" knobs reading current


def is_sum(knob: Any) -> bool:
    """``{sum: containers}``: a pod's value defined as the sum of its containers' values."""
    return isinstance(knob, Mapping) and "sum" in knob


def compile_spec(raw: Mapping[str, Any], weight_formula: WeightFormula | None = None) -> SetCgroupSpec:
    target = raw["target"]
    values = dict(raw.get("values") or {})
    per_container = dict(raw.get("containers") or {})
    qos = raw.get("memoryQos")
    return SetCgroupSpec(
        target=MappingProxyType({str(k): str(v) for k, v in target.items()}),
        class_name=str(target["class"]) if "class" in target else None,
        pool=str(target["pool"]) if "pool" in target else None,
        path=str(target["path"]) if "path" in target else None,
        values=MappingProxyType(values),
        knobs=tuple(
            (file, compile_knob(file, knob, weight_formula=weight_formula))
            for file, knob in values.items()
            if not is_sum(knob)
        ),
        memory_qos=MemoryQos.of(qos) if qos is not None else None,
        container_knobs=tuple(
            (file, compile_knob(file, knob, weight_formula=weight_formula))
            for file, knob in per_container.items()
        ),
        sums=tuple(file for file, knob in values.items() if is_sum(knob)),
        reads_current=frozenset(
            [f"pod:{f}" for f, k in values.items() if knob_reads(k, "current")]
            + [f"container:{f}" for f, k in per_container.items() if knob_reads(k, "current")]
        ),
    )


def check(c: Checker, p: JsonPath, params: Mapping[str, Any]) -> None:
    """References, the cgroup path, each knob (expressions, literal values the file accepts, values
    the kernel refuses together), and what needs a class target."""
    target = params.get("target") or {}
    if "class" in target:
        c.ref((*p, "target", "class"), target["class"], c.classes, "class")
    if "pool" in target:
        c.ref((*p, "target", "pool"), target["pool"], c.pools, "pool")
    if "path" in target:
        c.cgroup_path((*p, "target", "path"), "setCgroup target", target["path"])
    per_container = params.get("containers") or {}
    if "containers" in params and "class" not in target:
        c.add(
            (*p, "containers"),
            "containers needs target.class: it sets each app container's cgroup of the class's pods",
            "set target: {class: <name>}",
        )
    literals: dict[str, str] = {}
    for key, knob in (params.get("values") or {}).items():
        if is_sum(knob):
            if key not in per_container:
                c.add(
                    (*p, "values", key),
                    f"{key}: {{sum: containers}} needs a value of {key} under containers to sum",
                    f"add containers: {{{key}: ...}} beside values",
                )
            continue
        if knob_reads(knob, "container"):
            c.add(
                (*p, "values", key, "expr"),
                f"{key}: the expression reads container, but values are for the pod's own cgroup",
                "move it under containers (each container's cgroup), and give the pod "
                "{sum: containers} if it should hold the sum",
            )
            continue
        c.knob((*p, "values", key), knob, key, "class" in target)
        text = c.cgroup_value((*p, "values", key), key, knob)
        if text is not None:
            literals[key] = text
    c.cgroup_combination((*p, "values"), literals, set(params.get("values") or ()))
    container_literals: dict[str, str] = {}
    for key, knob in per_container.items():
        c.knob((*p, "containers", key), knob, key, True, containers=True)
        text = c.cgroup_value((*p, "containers", key), key, knob)
        if text is not None:
            container_literals[key] = text
    c.cgroup_combination((*p, "containers"), container_literals, set(per_container))
    if not {"values", "memoryQos", "containers"} & set(params):
        c.add(p, "setCgroup needs values, containers, memoryQos or a mix", "e.g. values: {cpu.shares: 2}")
    if "memoryQos" in params and "class" not in target:
        c.add(
            (*p, "memoryQos"),
            "memoryQos needs target.class: it is sized from each pod's requests and limits",
            "set target: {class: <name>}, or write literal values under `values`",
        )


# Class knobs whose literal is written as given, by the file (in the v1 dialect; the adapter
# translates) that receives it. shares and weight are share counts and weights (checked below).
CLASS_KNOB_FILES = {
    ("cpu", "cfsQuota"): "cpu.cfs_quota_us",
    ("cpu", "burst"): "cpu.cfs_burst_us",
    ("memory", "min"): "memory.min",
    ("memory", "low"): "memory.low",
    ("memory", "high"): "memory.high",
    ("memory", "limit"): "memory.limit_in_bytes",
}

# Class knobs written to the pod and to each app container: an expression reading ``container`` is
# evaluated per container, and the pod cgroup gets the sum of its containers' values.
PER_CONTAINER_KNOBS = frozenset({("cpu", "cfsQuota"), ("cpu", "burst")})

# The file each class knob that may be an expression writes (v1 dialect): shares and weight too.
CLASS_EXPR_FILES = {**CLASS_KNOB_FILES, ("cpu", "shares"): "cpu.shares", ("cpu", "weight"): "cpu.weight"}


def check_class_knobs(c: Checker, base: JsonPath, raw: Mapping[str, Any]) -> None:
    """A class's cpu, memory and oomPriority sections: references (pool, required enhancements),
    one of shares/weight, each knob (expressions and the literal values the file accepts) and a
    non-empty OOM priority range holding its default."""
    cpu = raw.get("cpu") or {}
    if "pool" in cpu:
        c.ref((*base, "cpu", "pool"), cpu["pool"], c.pools, "pool")
    for j, req in enumerate(cpu.get("requires") or []):
        c.ref((*base, "cpu", "requires", j), req, c.enhancements, "enhancement")
        enh = c.enhancements.get(req)
        if enh and enh.get("appliesTo") and raw["name"] not in enh["appliesTo"]:
            c.add(
                (*base, "cpu", "requires", j),
                f"class {raw['name']!r} requires enhancement {req!r}, which does not apply to it "
                f"(appliesTo: {', '.join(enh['appliesTo'])})",
                f"add {raw['name']!r} to the appliesTo of {req!r}, or drop the requirement",
            )
    if "shares" in cpu and "weight" in cpu:
        c.add((*base, "cpu"), "set either cpu.shares or cpu.weight, not both", "qosd converts between them")
    if "mainContainerAnnotation" in cpu and cpu.get("burstContainers") != "main":
        c.add(
            (*base, "cpu", "mainContainerAnnotation"),
            "cpu.mainContainerAnnotation names the main container for cpu.burstContainers: main, "
            "which this class does not set, so it would do nothing",
            "add burstContainers: main, or drop mainContainerAnnotation",
        )
    for key in ("shares", "weight"):
        if cpu.get(key) == "max":
            c.add((*base, "cpu", key), f'cpu.{key} cannot be "max"', "give a number, percent or expression")
        _check_share_literal(c, (*base, "cpu", key), key, cpu.get(key))
    for section in ("cpu", "memory"):
        for key, knob in (raw.get(section) or {}).items():
            both = (section, key) in PER_CONTAINER_KNOBS
            if knob_reads(knob, "container") and not both:
                c.add(
                    (*base, section, key, "expr"),
                    f"{section}.{key} is written to the pod's cgroup only, so it cannot read container",
                    "only cpu.cfsQuota and cpu.burst apply to each container (the pod gets their sum); "
                    "use pod.* here",
                )
                continue
            c.knob((*base, section, key), knob, CLASS_EXPR_FILES.get((section, key)), True, containers=both)
            if (section, key) in CLASS_KNOB_FILES:
                c.cgroup_value((*base, section, key), CLASS_KNOB_FILES[section, key], knob)
    oom = raw.get("oomPriority") or {}
    lo, hi, default = oom.get("min"), oom.get("max"), oom.get("default")
    if lo is not None and hi is not None and lo >= hi:
        c.add((*base, "oomPriority"), f"oomPriority range [{lo}, {hi}) is empty")
    elif default is not None and ((lo is not None and default < lo) or (hi is not None and default >= hi)):
        c.add((*base, "oomPriority", "default"), f"oomPriority default {default} is outside [{lo}, {hi})")


def _check_share_literal(c: Checker, path: JsonPath, key: str, value: Any) -> None:
    """A literal share count or weight must be one the kernel accepts: it is converted to the other
    file on the other cgroup version, and Koordinator refuses to convert shares 0 or weight 10001
    rather than writing the nearest bound (engine/cgroups/weight.py)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return
    if not float(value).is_integer():
        c.add(path, f"cpu.{key} {value:g} is not a whole number", f"cgroup files take integer {key}")
        return
    bad = (shares_problem if key == "shares" else weight_problem)(int(value))
    if bad:
        hint = (
            "cpu.shares takes 2 to 262144 (1024 per core); cpu.weight takes 1 to 10000 (100 is the "
            "cgroup v2 default); qosd refuses, rather than clamps, a value outside them"
        )
        c.add(path, bad, hint)
