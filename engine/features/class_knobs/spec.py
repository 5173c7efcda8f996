"""The setCgroup action's typed spec and its checks.

The knobs are compiled here, once per generation, with the policy's cpu.weight formula; the tick
calls them. ``target`` names one of a class (its pods' cgroups), a pool, or a cgroup path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from engine.config.errors import Checker
from engine.config.load import JsonPath
from engine.features.class_knobs.knobs import KnobFn, WeightFormula, compile_knob
from engine.features.memory_qos.spec import MemoryQos


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


def compile_spec(raw: Mapping[str, Any], weight_formula: WeightFormula | None = None) -> SetCgroupSpec:
    target = raw["target"]
    values = raw.get("values")
    qos = raw.get("memoryQos")
    return SetCgroupSpec(
        target=MappingProxyType({str(k): str(v) for k, v in target.items()}),
        class_name=str(target["class"]) if "class" in target else None,
        pool=str(target["pool"]) if "pool" in target else None,
        path=str(target["path"]) if "path" in target else None,
        values=MappingProxyType(dict(values or {})),
        knobs=tuple(
            (file, compile_knob(file, knob, weight_formula=weight_formula))
            for file, knob in (values or {}).items()
        ),
        memory_qos=MemoryQos.of(qos) if qos is not None else None,
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
    literals: dict[str, str] = {}
    for key, knob in (params.get("values") or {}).items():
        c.knob((*p, "values", key), knob, key, "class" in target)
        text = c.cgroup_value((*p, "values", key), key, knob)
        if text is not None:
            literals[key] = text
    c.cgroup_combination((*p, "values"), literals, set(params.get("values") or ()))
    if "values" not in params and "memoryQos" not in params:
        c.add(p, "setCgroup needs values, memoryQos or both", "e.g. values: {cpu.shares: 2}")
    if "memoryQos" in params and "class" not in target:
        c.add(
            (*p, "memoryQos"),
            "memoryQos needs target.class: it is sized from each pod's requests and limits",
            "set target: {class: <name>}, or write literal values under `values`",
        )
