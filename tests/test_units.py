"""Durations, Kubernetes quantities and cpuset lists (engine/model/units.py)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.model.units import (
    MAX_DURATION,
    UnitError,
    ceil_div,
    duration_seconds,
    format_cpuset,
    parse_cpuset,
    parse_duration,
    parse_quantity,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("500ms", 0.5),
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("1h", 3600.0),
        ("2m30s", 150.0),
        ("1m500ms", 60.5),
        ("0s", 0.0),
        ("0.5s", 0.5),
        ("1h1m1s1ms", 3661.001),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "5 m", "m5", "-1s", "1d", "1.s", ".5s", "5mm", "1h 30m", " 5m", "5m ", "ms"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2Gi", 2 * 2**30),
        ("500m", 0.5),
        ("4", 4.0),
        ("1.5", 1.5),
        ("300Mi", 300 * 2**20),
        ("5G", 5e9),
        ("1e3", 1000.0),
        ("100k", 1e5),
        ("1Ki", 1024.0),
        ("1Ti", 2.0**40),
        ("2M", 2e6),
        ("+3", 3.0),
        (" 4 ", 4.0),
        ("0", 0.0),
        (3, 3.0),
        (0.5, 0.5),
        (0, 0.0),
    ],
)
def test_parse_quantity(value: str | int | float, expected: float) -> None:
    result = parse_quantity(value)
    assert isinstance(result, float)
    assert result == pytest.approx(expected)


@pytest.mark.parametrize("value", ["abc", "1Xi", True, False, "-1", "", "1.5.5", "Gi", "1 Gi", "1gi", "1e", "0x10"])
def test_parse_quantity_rejects(value: object) -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        parse_quantity(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "cpus", "canonical"),
    [
        ("", frozenset(), ""),
        ("0", frozenset({0}), "0"),
        ("0-3", frozenset({0, 1, 2, 3}), "0-3"),
        ("0-2,5", frozenset({0, 1, 2, 5}), "0-2,5"),
        ("0-3,8-11", frozenset({0, 1, 2, 3, 8, 9, 10, 11}), "0-3,8-11"),
        ("5,0-2", frozenset({0, 1, 2, 5}), "0-2,5"),
        ("1,2,3", frozenset({1, 2, 3}), "1-3"),
        ("0-1,1-2", frozenset({0, 1, 2}), "0-2"),
        ("3-3", frozenset({3}), "3"),
        (" 0-1 , 4 ", frozenset({0, 1, 4}), "0-1,4"),
        ("0,2,4", frozenset({0, 2, 4}), "0,2,4"),
        ("510-511", frozenset({510, 511}), "510-511"),
    ],
)
def test_parse_and_format_cpuset(text: str, cpus: frozenset[int], canonical: str) -> None:
    assert parse_cpuset(text) == cpus
    assert format_cpuset(cpus) == canonical
    assert parse_cpuset(canonical) == cpus


@pytest.mark.parametrize(
    ("cpus", "text"),
    [
        ([], ""),
        ([3, 1, 2], "1-3"),
        ([1, 1, 2], "1-2"),
        ({7}, "7"),
        ([0, 2, 3, 4, 9], "0,2-4,9"),
    ],
)
def test_format_cpuset_accepts_any_collection(cpus: list[int] | set[int], text: str) -> None:
    assert format_cpuset(cpus) == text


@pytest.mark.parametrize("text", ["3-1", "a", "1,,2", "1-", "-1", "1-2-3", ",1", "1,", "0x1", "1.5", "1 2"])
def test_parse_cpuset_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_cpuset(text)


@settings(max_examples=300, deadline=None)
@given(st.frozensets(st.integers(min_value=0, max_value=511), max_size=128))
def test_cpuset_round_trip(cpus: frozenset[int]) -> None:
    text = format_cpuset(cpus)
    assert parse_cpuset(text) == cpus
    # The kernel list format is canonical: ranges ascending, never adjacent, never a one-CPU range.
    assert format_cpuset(parse_cpuset(text)) == text
    bounds = [tuple(int(x) for x in part.split("-")) for part in text.split(",") if part]
    for left, right in itertools.pairwise(bounds):
        assert left[-1] + 1 < right[0]
    assert all(len(b) == 1 or b[0] < b[1] for b in bounds)


# ---------------------------------------------------------------- bounds (issue 14, defect 2)

EIGHT_PI = 8 * 2**50


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("8Pi", float(EIGHT_PI)),  # the largest binary-suffixed amount under the bound
        ("9223372036854775", 9223372036854775.0),  # MAX_QUANTITY, rounded down to an integer
        ("0e9999999", 0.0),  # zero times any power of ten is zero: no Overflow
        ("0.0000000000000000000000001e30", 1e5),  # fraction digits are not truncated before scaling
        (-0.0, 0.0),
        (9.2e15, 9.2e15),
    ],
)
def test_parse_quantity_at_the_bounds(value: str | float, expected: float) -> None:
    result = parse_quantity(value)
    assert result == expected
    assert str(result) != "-0.0"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("1e9999999", "too large"),  # decimal.Overflow before the fix
        ("1e400", "too large"),  # float infinity before the fix
        ("1e16", "too large"),
        ("9Pi", "too large"),
        ("8Ei", "too large"),
        ("1" + "0" * 400, "too large"),
        ("1" * 10_000 + "e1", "too large"),
        ("1e" + "9" * 5000, "too large"),  # an exponent int() would refuse
        ("0." + "0" * 30 + "1e48", "too large"),  # 1e17: judged from both exponents
        (float("inf"), "not a finite number"),
        (float("-inf"), "not a finite number"),
        (float("nan"), "not a finite number"),
        (1e300, "too large"),
        (10**30, "too large"),
        (-1, "negative"),
        (-0.5, "negative"),
        (None, "not a quantity"),
        ([1], "not a quantity"),
    ],
)
def test_parse_quantity_out_of_bounds(value: object, reason: str) -> None:
    with pytest.raises(UnitError, match=reason):
        parse_quantity(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("8761h", "longer than"),
        ("525601m", "longer than"),
        ("99999999999h", "longer than"),
        ("9" * 400 + "h", "longer than"),  # float('9'*400) is inf before the fix
        ("1" + "0" * 30 + "ms", "longer than"),
        ("8760h1ms", "longer than"),
    ],
)
def test_parse_duration_out_of_bounds(text: str, reason: str) -> None:
    with pytest.raises(UnitError, match=reason):
        parse_duration(text)


def test_parse_duration_at_the_bound() -> None:
    assert parse_duration("8760h") == MAX_DURATION == parse_duration("525600m")
    assert parse_duration("1." + "0" * 100 + "1s") == 1.0


@pytest.mark.parametrize(
    ("value", "seconds"), [(0, 0.0), (30, 30.0), (0.5, 0.5), ("1m", 60.0), (MAX_DURATION, MAX_DURATION), (-0.0, 0.0)]
)
def test_duration_seconds(value: str | float, seconds: float) -> None:
    assert duration_seconds(value) == seconds


@pytest.mark.parametrize("value", [-1, MAX_DURATION + 1, float("inf"), float("nan"), 1e300, True, None, "1d"])
def test_duration_seconds_rejects(value: object) -> None:
    with pytest.raises(UnitError):
        duration_seconds(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text",
    [
        "0-1é",  # defect 3's value: not ASCII
        "\u0660-\u0661",  # Arabic-Indic digits: str.isdigit() is true, the kernel reads only 0-9
        "0-99999999999",  # would expand into memory
        "65536",
        "0-1\x00",
    ],
)
def test_parse_cpuset_rejects_what_the_kernel_cannot_read(text: str) -> None:
    with pytest.raises(UnitError):
        parse_cpuset(text)


def test_unit_error_is_a_value_error() -> None:
    """Callers that report a ValueError with its location (conditions, RuleTest, the kube objects)
    keep doing so for the new bounds."""
    assert issubclass(UnitError, ValueError)


@pytest.mark.parametrize(
    ("a", "b", "want"),
    [(0, 1000, 0), (1, 1000, 1), (999, 1000, 1), (1000, 1000, 1), (1001, 1000, 2), (2500, 1000, 3), (-1, 1000, 0)],
)
def test_ceil_div_rounds_whole_units_up(a: int, b: int, want: int) -> None:
    """Quantity.Value() of a milli quantity: a partial core counts as a whole one."""
    assert ceil_div(a, b) == want
