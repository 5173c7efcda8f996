"""cgroup knob values: a number, "max", a percent of the pod's request/limit or node allocatable, or an
expression, turned into the string a cgroup file takes.

Percent knobs are in the unit of the file's resource: memory files take bytes, CPU quota and burst
take microseconds per 100 ms period, cpu.shares takes 1024 per core (the kubelet's MilliCPUToShares,
with its minimum of 2). Expressions are compiled once per policy generation in the template sandbox
and see ``pod`` (requests, limits, name, namespace, labels, annotations, priority) and ``node``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from engine.config.render import ENV, RenderError, weight
from engine.model.facts import Workload

PERIOD_US = 100_000

KnobFn = Callable[[Workload | None, Mapping[str, Any]], str | None]


def resource_of(file: str) -> str:
    return "memory" if file.startswith("memory.") else "cpu"


def _render_number(file: str, value: float) -> str:
    """A value in the resource's base unit (bytes or cores) as the file's text."""
    if file.startswith("memory."):
        return str(int(value))
    if file == "cpu.shares":
        return str(max(int(value * 1024), 2))
    if file in ("cpu.cfs_quota_us", "cpu.cfs_burst_us", "cpu.max.burst"):
        return str(math.ceil(value * PERIOD_US))
    if file == "cpu.max":
        return f"{math.ceil(value * PERIOD_US)} {PERIOD_US}"
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _literal(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def compile_knob(file: str, knob: Any) -> KnobFn:
    """A function (pod, node facts) -> file text, or None when the knob cannot apply to that pod."""
    if isinstance(knob, bool):
        text = "1" if knob else "0"
        return lambda _w, _n: text
    if isinstance(knob, int | float):
        literal = _literal(float(knob))
        return lambda _w, _n: literal
    if isinstance(knob, str):
        return lambda _w, _n: knob
    if "percent" in knob:
        percent, of = float(knob["percent"]), str(knob["of"])
        resource = resource_of(file)

        def percent_of(w: Workload | None, node: Mapping[str, Any]) -> str | None:
            if of == "allocatable":
                base = node.get(f"{resource}.allocatable_{'bytes' if resource == 'memory' else 'cores'}")
            elif w is None:
                return None
            else:
                base = w.request(resource) if of == "request" else w.limit(resource)
            if not base:
                return None
            return _render_number(file, float(base) * percent / 100.0)

        return percent_of
    expression = ENV.compile_expression(str(knob["expr"]), undefined_to_none=False)

    def evaluate(w: Workload | None, node: Mapping[str, Any]) -> str | None:
        context = {"node": dict(node), "pod": _pod_context(w) if w is not None else {}}
        try:
            value = expression(**context)
            weight(value)
        except Exception as exc:  # a bad expression must not stop the tick
            raise RenderError(f"expression {knob['expr']!r} failed: {exc}") from None
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None if value is None else str(value)
        return _render_number(file, float(value))

    return evaluate


def _pod_context(w: Workload) -> dict[str, Any]:
    return {
        "name": w.name,
        "namespace": w.namespace,
        "labels": dict(w.labels),
        "annotations": dict(w.annotations),
        "priority": w.priority,
        "requests": {"cpu": w.request("cpu"), "memory": w.request("memory")},
        "limits": {"cpu": w.limit("cpu"), "memory": w.limit("memory")},
    }
