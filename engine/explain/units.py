"""Numbers in the units people read: bytes in GiB/MiB, cores, seconds; never 1e+09."""

from __future__ import annotations

import json
import math
from typing import Any

from engine.model.factnames import registry


def human_bytes(value: float) -> str:
    """GiB with one decimal from 1 GiB up, MiB or KiB below; exact bytes under 1 KiB."""
    sign = "-" if value < 0 else ""
    v = abs(float(value))
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if v >= size:
            return f"{sign}{v / size:.1f} {unit}"
    return f"{sign}{num(v)} B"


def num(value: Any) -> str:
    """A number as people write it: 82, 0.5, 9620726743.04 -> '9620726743.04', never 1e+09."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if float(value).is_integer():
        return str(int(value))
    text = f"{value:.12g}"
    if "e" in text:
        text = f"{value:.6f}".rstrip("0").rstrip(".")
    return text if text not in ("", "-0") else "0"


def cores(value: float) -> str:
    return f"{num(round(float(value), 3))} core{'s' if value != 1 else ''}"


def with_unit(value: Any, unit: str) -> str:
    """A value in the unit the fact registry gives it (bytes, cores, seconds; percent stays bare,
    since fact names already say ``_percent``)."""
    if value is None:
        return "(no value)"
    if not isinstance(value, int | float) or isinstance(value, bool):
        return json.dumps(value) if not isinstance(value, str) else value
    if unit == "bytes":
        return human_bytes(value)
    if unit == "cores":
        return cores(value)
    if unit in ("seconds",):
        return f"{num(value)}s"
    return num(value)


def fact_unit(fact: str) -> str:
    ref = registry().resolve(fact)
    return ref.spec.unit if ref is not None else ""


def key_unit(key: str) -> str:
    """Unit of an orderBy key or input name: memory.* are bytes, cpu.* and load are cores."""
    k = key.lstrip("-")
    if k.endswith(("over_request", "over_limit", "Percent", "percent", "ratio")):
        return ""
    if k.startswith("memory.") or k.endswith("bytes"):
        return "bytes"
    if k.startswith("cpu.") or k == "load" or k.endswith("cores"):
        return "cores"
    return ""


def resource_amount(value: float, resource: str) -> str:
    """An amount of an eviction's release resource, in its unit."""
    if resource in ("memory", "batch-memory"):
        return human_bytes(value)
    if resource == "cpu":
        return cores(value)
    if resource == "batch-cpu":
        return cores(value / 1000.0)  # batch-cpu requests are milli-cores
    return num(value)
