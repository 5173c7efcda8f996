"""Durations and Kubernetes quantities, parsed the way platform engineers write them in YAML."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}

_QUANTITY = re.compile(r"^\+?([0-9]+(?:\.[0-9]+)?)(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei|e[0-9]+)?$")
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


def parse_duration(text: str) -> float:
    """Seconds in a Go-style duration ("1h30m", "500ms", "0"); ValueError when malformed."""
    if text == "0":
        return 0.0
    pos = 0
    total = 0.0
    for m in _DURATION_PART.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    if pos != len(text) or not text:
        raise ValueError(f"{text!r} is not a duration; write e.g. 30s, 5m, 1h30m or 500ms")
    return total


def parse_quantity(value: str | int | float) -> float:
    """Base units of a Kubernetes quantity: "2Gi" -> 2147483648, "500m" -> 0.5, 3 -> 3."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a quantity")
    if isinstance(value, int | float):
        return float(value)
    m = _QUANTITY.match(value.strip())
    if not m:
        raise ValueError(f"{value!r} is not a quantity; write e.g. 4, 500m, 300Mi or 5Gi")
    try:
        number = Decimal(m.group(1))
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only decimals
        raise ValueError(f"{value!r} is not a quantity") from exc
    suffix = m.group(2) or ""
    factor = Decimal(10) ** int(suffix[1:]) if suffix.startswith("e") else _SUFFIX[suffix]
    return float(number * factor)


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


def parse_cpuset(text: str) -> frozenset[int]:
    """The kernel's list format: "0-2,5" -> {0,1,2,5}; ValueError on reversed or malformed ranges."""
    out: set[int] = set()
    text = text.strip()
    if not text:
        return frozenset()
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"{text!r} is not a cpuset list; write e.g. 0-3,8-11")
        a, b = int(lo), int(hi) if sep else int(lo)
        if b < a:
            raise ValueError(f"range {part!r} in cpuset {text!r} runs backwards")
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
