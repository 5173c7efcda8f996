"""Matching an expected value against an actual one: equality up to float noise, quantities, operators
(``approx``/``tolerance``, bounds, ``contains``, ``matches``, ``oneOf``, ``absent``, ``cpuset``), dotted
paths.

Every comparison reads Kubernetes quantities on both sides ("20000", "2Gi", "500m", "-1"), as equality
always did. An actual value an operator cannot judge ("max" against ``gt: 0``, a mapping against
``lt``) is not a quiet non-match: ``incomparable`` says why, and the checker reports it at the
expectation, because a ``notIntents`` entry that silently never matches passes for the wrong reason."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.config.errors import short
from engine.model.units import human_bytes, parse_cpuset, parse_quantity

OPERATORS = frozenset(
    {"approx", "tolerance", "gt", "gte", "lt", "lte", "contains", "matches", "oneOf", "absent", "cpuset"}
)
NUMERIC_OPERATORS = ("approx", "gt", "gte", "lt", "lte")
CPUS_KEYS = frozenset({"count", "within"})
DEFAULT_TOLERANCE = "1%"
_PLAIN_NUMBER = re.compile(r"\s*[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?\s*")


def is_operator(value: Any) -> bool:
    """An expected mapping made only of operator keys is a matcher, not a nested entry."""
    return isinstance(value, Mapping) and bool(value) and all(k in OPERATORS for k in value)


def as_number(value: Any) -> float | None:
    """A number, or a Kubernetes quantity string ("12Gi", "500m"), as a float; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return parse_quantity(value)
        except ValueError:
            pass
        # Signed plain numbers too: cgroup files hold "-1" (cpu.cfs_quota_us), which no quantity is.
        if _PLAIN_NUMBER.fullmatch(value):
            number = float(value)
            return number if math.isfinite(number) else None
    return None


def cpus_of(value: Any) -> frozenset[int] | None:
    """The CPUs of a cpuset value (the kernel's list format "0-3,8", or a list of ids); None if not one."""
    if isinstance(value, str):
        try:
            return parse_cpuset(value)
        except ValueError:
            return None
    if isinstance(value, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        return frozenset(value)
    return None


def _cpus_hold(want: Any, cpus: frozenset[int]) -> bool:
    """``cpus: "0-3"`` is the same set however written; ``cpus: {count: 4, within: "0-7"}``."""
    if not isinstance(want, Mapping):
        expected = cpus_of(want)
        return expected is not None and expected == cpus
    if "count" in want and not value_matches(want["count"], len(cpus)):
        return False
    if "within" in want:
        outer = cpus_of(want["within"])
        return outer is not None and cpus <= outer
    return True


def incomparable(ops: Mapping[str, Any], actual: Any, found: bool) -> str:
    """Why operators cannot judge a present actual value ('' when they can)."""
    if not found or actual is None:
        return ""  # absence is an answer (``absent`` judges it); only a present value can be wrong
    shown = short(actual, 80)
    numeric = [op for op in NUMERIC_OPERATORS if op in ops]
    if numeric and as_number(actual) is None:
        return f"{shown} is not a number or a quantity, so {'/'.join(numeric)} cannot compare it"
    if "cpuset" in ops and cpus_of(actual) is None:
        return f"{shown} is not a cpuset such as 0-3,8, so cpuset cannot count it"
    if "matches" in ops and isinstance(actual, Mapping | list):
        return f"{shown} is not text, so matches cannot search it"
    return ""


def _close(a: float, b: float) -> bool:
    """Equal up to float noise: JSON round trips and sums of credits must not fail a test."""
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def tolerance_of(spec: Any, target: float) -> float | None:
    if isinstance(spec, str) and spec.strip().endswith("%"):
        try:
            return abs(target) * float(spec.strip()[:-1]) / 100.0
        except ValueError:
            return None
    return as_number(spec)


def scalar_equal(expected: Any, actual: Any) -> bool:
    if isinstance(expected, bool) or isinstance(actual, bool):
        return isinstance(expected, bool) and isinstance(actual, bool) and expected == actual
    if expected is None or actual is None:
        return expected is None and actual is None
    if isinstance(actual, int | float):
        number = as_number(expected)
        return number is not None and _close(number, float(actual))
    if expected == actual:
        return True
    if isinstance(actual, str) and isinstance(expected, int | float | str):
        # cgroup files and published quantities hold text: `value: 4000000` matches "4000000" as
        # written to the file, and `quantity: 4Gi` matches "4294967296".
        a, e = as_number(actual), as_number(expected)
        return a is not None and e is not None and _close(a, e)
    return False


def _operators_hold(ops: Mapping[str, Any], actual: Any, found: bool) -> bool:
    present = found and actual is not None
    if "absent" in ops and bool(ops["absent"]) == present:
        return False
    rest = {k: v for k, v in ops.items() if k != "absent"}
    if not rest:
        return True
    if not present:
        return False
    value = as_number(actual)
    for op, want in rest.items():
        if op == "approx":
            target = as_number(want)
            tol = tolerance_of(ops.get("tolerance", DEFAULT_TOLERANCE), target or 0.0)
            if value is None or target is None or tol is None or abs(value - target) > tol + 1e-9:
                return False
        elif op in ("gt", "gte", "lt", "lte"):
            bound = as_number(want)
            if value is None or bound is None:
                return False
            if not {"gt": value > bound, "gte": value >= bound, "lt": value < bound, "lte": value <= bound}[
                op
            ]:
                return False
        elif op == "contains":
            if isinstance(actual, str):
                if str(want) not in actual:
                    return False
            elif isinstance(actual, list):
                if not any(value_matches(want, item, True) for item in actual):
                    return False
            else:
                return False
        elif op == "matches":
            text = number_text(actual) if isinstance(actual, int | float) else actual
            if not isinstance(text, str) or re.search(str(want), text) is None:
                return False
        elif op == "cpuset":
            cpus = cpus_of(actual)
            if cpus is None or not _cpus_hold(want, cpus):
                return False
        elif op == "oneOf" and not any(value_matches(option, actual, found) for option in want):
            return False
    return True


def value_matches(expected: Any, actual: Any, found: bool = True) -> bool:
    """Does an actual value satisfy an expected one (scalar, operator mapping, nested mapping, list)?"""
    if is_operator(expected):
        return _operators_hold(expected, actual, found)
    if not found:
        return False
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and all(r.ok for r in field_results(expected, actual))
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(expected)
            and all(value_matches(e, a) for e, a in zip(expected, actual, strict=True))
        )
    return scalar_equal(expected, actual)


def resolve(actual: Any, key: str) -> tuple[bool, Any]:
    """``actual[key]``, where ``key`` may be a dotted path (``release.target``). A literal key wins:
    ranking keys and fact names contain dots themselves (``memory.usage``)."""
    if not isinstance(actual, Mapping):
        return False, None
    if key in actual:
        return True, actual[key]
    for i, ch in enumerate(key):
        if ch == "." and key[:i] in actual:
            found, value = resolve(actual[key[:i]], key[i + 1 :])
            if found:
                return True, value
    return False, None


@dataclass(frozen=True)
class FieldResult:
    """One expected leaf field against the actual value (for the field-by-field diff)."""

    field: str
    expected: str
    actual: str
    ok: bool
    problem: str = ""  # why the expected operators cannot judge the actual value at all
    keys: tuple[str, ...] = ()  # the expected keys leading to this field (to locate it in the suite)

    def to_dict(self) -> dict[str, Any]:
        return {
            "field": self.field,
            "expected": self.expected,
            "actual": self.actual,
            "ok": self.ok,
            "problem": self.problem or None,
        }


def field_results(
    expected: Mapping[str, Any], actual: Any, prefix: str = "", keys: tuple[str, ...] = ()
) -> list[FieldResult]:
    """Every leaf of an expected mapping compared with the actual entry."""
    out: list[FieldResult] = []
    for key, want in expected.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        found, value = resolve(actual, str(key))
        if isinstance(want, Mapping) and not is_operator(want) and found and isinstance(value, Mapping):
            out.extend(field_results(want, value, name, (*keys, str(key))))
            continue
        problem = incomparable(want, value, found) if is_operator(want) else ""
        out.append(
            FieldResult(
                name,
                flow(want),
                display(value) if found else "(missing)",
                not problem and value_matches(want, value, found),
                problem,
                (*keys, str(key)),
            )
        )
    return out


def flow(value: Any) -> str:
    """A compact YAML-flow rendering of an expected value, as the suite author wrote it."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    if isinstance(value, str):
        return (
            value
            if value
            and re.fullmatch(r"[A-Za-z0-9_./@%:+-][A-Za-z0-9_./@%:+ -]*", value)
            and value.strip() == value
            else json.dumps(value)
        )
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return number_text(value)


def number_text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def display(value: Any) -> str:
    """An actual value; large byte-like numbers also in GiB so 12884901888 reads as 12.0 GiB."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        text = number_text(value)
        return f"{text} ({human_bytes(value)})" if abs(value) >= 1 << 20 else text
    if isinstance(value, Mapping | list):
        return short(value, 80)
    return flow(value)
