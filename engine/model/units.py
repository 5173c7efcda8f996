"""Units, both ways: durations and Kubernetes quantities parsed the way platform engineers write them
in YAML, and numbers formatted the way they read them (GiB, cores, seconds, percent; never 1e+09).
Every command that prints an amount (eval, explain, simulate, test, demo) formats it here."""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from typing import Any


class UnitError(ValueError):
    """A duration, quantity or cpuset that is malformed or out of bounds. A ValueError, so every
    caller that already reports a ValueError with its location keeps doing so; the message names
    the value and what would be accepted."""


MAX_DURATION = 365 * 24 * 3600.0
"""The longest duration qosd accepts (8760h, one year). Every duration in a rule, trace or test is a
sustain time, a cooldown, a window or an interval; none means anything near a year, and a bound keeps
timer arithmetic and window buffers finite."""

MAX_QUANTITY = (2**63 - 1) / 1000
"""The largest quantity, in base units (cores, bytes, counts): Kubernetes caps a quantity at 2^63-1
and qosd, like the kubelet, converts CPU to milli-units, so the thousandths must fit in int64 too
(about 9.2e15: 9.2 million TB of memory, 9.2e15 cores)."""

MAX_CPU_ID = 65535
"""The highest CPU or NUMA node id a cpuset list may name. Kernels build with at most 8192 CPUs
(CONFIG_NR_CPUS); the bound keeps a list like ``0-99999999999`` from expanding into memory."""

_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
# A longer integer part is out of bounds anyway; fraction digits past these are below a
# yoctosecond. The caps keep Decimal and float conversion cheap.
_MAX_INT_DIGITS = 24
_MAX_FRACTION_DIGITS = 24

_QUANTITY = re.compile(r"^\+?([0-9]+)(?:\.([0-9]+))?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei|e[0-9]+)?$")
_SUFFIX = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def parse_duration(text: str) -> float:
    """Seconds in a Go-style duration ("1h30m", "500ms", "0"), at most MAX_DURATION; UnitError
    when malformed or longer."""
    if text == "0":
        return 0.0
    pos = 0
    total = 0.0
    for m in _DURATION_PART.finditer(text):
        if m.start() != pos:
            break
        number = m.group(1)
        whole, _, fraction = number.partition(".")
        if len(whole.lstrip("0")) > _MAX_INT_DIGITS:
            raise UnitError(_too_long(text))
        total += float(f"{whole}.{fraction[:_MAX_FRACTION_DIGITS] or '0'}") * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    if pos != len(text) or not text:
        raise UnitError(f"{_shown(text)} is not a duration; write e.g. 30s, 5m, 1h30m or 500ms")
    if not total <= MAX_DURATION:
        raise UnitError(_too_long(text))
    return total


def duration_seconds(value: str | int | float) -> float:
    """A duration written as a Go-style string or as a number of seconds (RuleTest suites and traces
    allow both), with the same bounds: finite, from 0 to MAX_DURATION."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise UnitError(f"{_shown(value)} is not a duration")
    if isinstance(value, str):
        return parse_duration(value)
    if not 0 <= value <= MAX_DURATION:  # NaN fails both comparisons
        raise UnitError(
            f"{_shown(value)} seconds is not a duration qosd accepts (from 0 to 31536000, one year)"
        )
    return float(value) + 0.0


def _too_long(text: str) -> str:
    return f"duration {_shown(text)} is longer than qosd accepts (at most 8760h, one year)"


def parse_quantity(value: str | int | float) -> float:
    """Base units of a Kubernetes quantity: "2Gi" -> 2147483648, "500m" -> 0.5, 3 -> 3.

    UnitError when malformed, negative, not finite or above MAX_QUANTITY. Negative zero reads as 0.
    """
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise UnitError(f"{_shown(value)} is not a quantity")
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise UnitError(f"{_shown(value)} is not a quantity: it is not a finite number")
        if value < 0:
            raise UnitError(f"quantity {_shown(value)} is negative; qosd quantities are amounts (>= 0)")
        if value > MAX_QUANTITY:
            raise UnitError(_too_large(value))
        return float(value) + 0.0  # -0.0 -> 0.0
    m = _QUANTITY.match(value.strip())
    if not m:
        raise UnitError(f"{_shown(value)} is not a quantity; write e.g. 4, 500m, 300Mi or 5Gi")
    whole, fraction, suffix = m.group(1).lstrip("0"), m.group(2) or "", m.group(3) or ""
    if not whole.strip("0") and not fraction.strip("0"):
        return 0.0
    if len(whole) > _MAX_INT_DIGITS:
        raise UnitError(_too_large(value))
    digits = Decimal(f"{whole or '0'}.{fraction or '0'}")  # exact, whatever its length
    if suffix.startswith("e"):
        exponent = suffix[1:].lstrip("0") or "0"
        # Judge the magnitude from the exponents before scaling: Decimal raises Overflow on
        # 10**9999999, and int() refuses an exponent of thousands of digits.
        if len(exponent) > 7 or digits.adjusted() + int(exponent) > 18:
            raise UnitError(_too_large(value))
        number = digits.scaleb(int(exponent))
    else:
        number = digits * _SUFFIX[suffix]
    if number > Decimal(MAX_QUANTITY):
        raise UnitError(_too_large(value))
    return float(number)


def _too_large(value: object) -> str:
    return (
        f"quantity {_shown(value)} is too large: qosd accepts at most 9.2e15 cores, bytes or counts "
        "(8Pi), so that its thousandths fit in 64 bits as Kubernetes' milli-values must"
    )


def format_cpuset(cpus: frozenset[int] | set[int] | list[int]) -> str:
    """The kernel's list format: {0,1,2,5} -> "0-2,5"."""
    ids = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)


_CPU_ID = re.compile(r"[0-9]{1,9}")


def parse_cpuset(text: str) -> frozenset[int]:
    """The kernel's list format: "0-2,5" -> {0,1,2,5}; UnitError on reversed or malformed ranges,
    non-ASCII digits (the kernel reads only 0-9) and ids above MAX_CPU_ID."""
    out: set[int] = set()
    text = text.strip()
    if not text:
        return frozenset()
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not _CPU_ID.fullmatch(lo) or (sep and not _CPU_ID.fullmatch(hi)):
            raise UnitError(f"{_shown(text)} is not a cpuset list; write e.g. 0-3,8-11")
        a, b = int(lo), int(hi) if sep else int(lo)
        if b < a:
            raise UnitError(f"range {_shown(part)} in cpuset {_shown(text)} runs backwards")
        if b > MAX_CPU_ID:
            raise UnitError(
                f"cpuset {_shown(text)} names id {b}, above the highest qosd accepts ({MAX_CPU_ID})"
            )
        out.update(range(a, b + 1))
    return frozenset(out)


def int_or_none(value: Any) -> int | None:
    """An integer from file text (surrounding whitespace allowed) or a number; None when absent or
    not an integer. Cgroup and proc files are read raw, and a garbled one must not stop a tick."""
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def ceil_div(a: int, b: int) -> int:
    """``a / b`` rounded up, in integers (Kubernetes' Quantity.Value() of a milli quantity: whole
    units, rounded up), so no float rounding enters a CPU count."""
    return -(-a // b)


# ---------------------------------------------------------------- formatting for people

COUNT_KEYS = frozenset({"candidates", "containers", "pods", "count", "victims", "samples", "ticks"})
"""Input and ranking keys that count things: they take no unit, whatever the resource beside them."""


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


def human_bytes(value: float) -> str:
    """GiB with one decimal from 1 GiB up, MiB or KiB below; exact bytes under 1 KiB."""
    sign = "-" if value < 0 else ""
    v = abs(float(value))
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if v >= size:
            return f"{sign}{v / size:.1f} {unit}"
    return f"{sign}{num(v)} B"


def cores(value: float) -> str:
    return f"{num(round(float(value), 3))} core{'s' if value != 1 else ''}"


def percent(value: float) -> str:
    return f"{num(round(float(value), 1))}%"


def with_unit(value: Any, unit: str) -> str:
    """A value in its unit: ``bytes``, ``cores``, ``millicores``, ``seconds`` or ``percent``; any
    other unit (a count, a ratio) is the bare number."""
    if value is None:
        return "(no value)"
    if not isinstance(value, int | float) or isinstance(value, bool):
        return json.dumps(value) if not isinstance(value, str) else value
    if unit == "bytes":
        return human_bytes(value)
    if unit == "cores":
        return cores(value)
    if unit == "millicores":
        return cores(value / 1000.0)
    if unit == "seconds":
        return f"{num(value)}s"
    if unit == "percent":
        return percent(value)
    return num(value)


def key_unit(key: str, default: str = "") -> str:
    """Unit of an orderBy key, provenance input or ranking key by its name: counts have none,
    memory.* and *bytes are bytes, cpu.*, load and *cores are cores, *Percent is percent; any other
    key takes ``default`` (the unit of the resource it belongs to)."""
    k = key.lstrip("-")
    last = k.rsplit(".", 1)[-1]
    if last in COUNT_KEYS or last.endswith("Count"):
        return ""
    if k.endswith(("Percent", "percent")):
        return "percent"
    if k.endswith(("over_request", "over_limit", "ratio", "Ratio")):
        return ""
    if k.startswith("memory.") or k.lower().endswith("bytes"):
        return "bytes"
    if k.startswith("cpu.") or k == "load" or k.lower().endswith("cores"):
        return "cores"
    return default


def fact_unit(fact: str) -> str:
    """The unit the facts schema gives a fact (``node.memory.usage_bytes``: bytes)."""
    from engine.model.factnames import registry

    ref = registry().resolve(fact)
    return ref.spec.unit if ref is not None else ""


def resource_unit(resource: str) -> str:
    """The unit of a resource name: memory (and Kubernetes' batch-memory, Katalyst's
    reclaimed_memory) in bytes, cpu in cores, the milli-CPU extended resources in millicores."""
    r = resource.rsplit("/", 1)[-1]
    if r in ("memory", "batch-memory") or r.endswith("memory"):
        return "bytes"
    if r == "cpu":
        return "cores"
    if r == "batch-cpu" or r.endswith("millicpu"):
        return "millicores"
    return ""


def resource_amount(value: float, resource: str) -> str:
    """An amount of a resource (an eviction's release, a request), in its unit."""
    return with_unit(value, resource_unit(resource))
