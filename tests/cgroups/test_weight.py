"""cpu.shares <-> cpu.weight, checked against the anchors' own numbers.

Each table names the upstream test whose cases it re-expresses; the numbers are theirs, the tests are
ours. Out-of-range input is refused (OutOfRange), as Koordinator refuses it, never clamped.
Koordinator's koordlet and the kubelet (KEP-2254) use the linear formula
``1 + ((shares - 2) * 9999) / 262142``; runc >= 1.3.2 and crun >= 1.23 the quadratic one.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.cgroups.weight import (
    WEIGHT_FORMULAS,
    OutOfRange,
    WeightFormula,
    clamp_shares,
    shares_to_weight,
    weight_to_shares,
)


@pytest.mark.parametrize(
    ("shares", "linear", "quadratic"),
    [
        (2, 1, 1),
        (100, 4, 17),
        (102, 4, 17),  # 100m after MilliCPUToShares
        (512, 20, 59),
        (1024, 39, 100),
        (2048, 79, 174),
        (8192, 313, 532),
        (262144, 10000, 10000),
    ],
)
def test_shares_to_weight_both_formulas(shares: int, linear: int, quadratic: int) -> None:
    """The shares -> weight table of reference/ecosystem.md §5.2 (formulas of runc#4772, crun#1721):
    the old formula puts one core at 39, the new one at the v2 default of 100."""
    assert shares_to_weight(shares, "linear") == linear
    assert shares_to_weight(shares, "quadratic") == quadratic


@pytest.mark.parametrize(
    ("shares", "weight"),
    [(1000, 39), (1024, 39), (2, 1), (262144, 10000), (2000, 77), (50000, 1908)],
)
def test_linear_formula_koordinator(shares: int, weight: int) -> None:
    """koordinator pkg/koordlet/util/system/cgroup2_test.go TestConvertCPUSharesToWeight."""
    assert shares_to_weight(shares, "linear") == weight


@pytest.mark.parametrize(
    ("shares", "weight"),
    [(2, 1), (3, 2), (1024, 100), (262143, 10000), (262144, 10000)],
)
def test_quadratic_formula_runc(shares: int, weight: int) -> None:
    """opencontainers/cgroups utils_test.go TestConvertCPUSharesToCgroupV2Value (the runc#4772
    change): min, just above min, default, just below max, max. Its out-of-range sides (0 -> "unset",
    1, 262145) are refused here, below."""
    assert shares_to_weight(shares, "quadratic") == weight


@pytest.mark.parametrize(
    ("weight", "shares"),
    [(1, 2), (10000, 262144), (2, 28), (100, 2597)],
)
def test_linear_inverse_koordinator(weight: int, shares: int) -> None:
    """koordinator cgroup2_test.go TestConvertCPUWeightToShares: 1 -> 2 and 10000 -> 262144. 2 and
    100 pin the kubelet's integer formula."""
    assert weight_to_shares(weight, "linear") == shares


@pytest.mark.parametrize("formula", WEIGHT_FORMULAS)
@pytest.mark.parametrize("shares", [0, 1, -1, 262145, 10**12])
def test_out_of_range_shares_are_refused_not_clamped(shares: int, formula: WeightFormula) -> None:
    """TestConvertCPUSharesToWeight "0" wants an error; qosd used to write weight 1 for it."""
    with pytest.raises(OutOfRange, match=rf"cpu\.shares {shares} is outside the kernel's range \[2, 262144\]"):
        shares_to_weight(shares, formula)


@pytest.mark.parametrize("formula", WEIGHT_FORMULAS)
@pytest.mark.parametrize("weight", [0, 10001, -1])
def test_out_of_range_weights_are_refused_not_clamped(weight: int, formula: WeightFormula) -> None:
    """TestConvertCPUWeightToShares 0, 10001 and -1 want an error; qosd used to write 2 and 262144."""
    with pytest.raises(OutOfRange, match=rf"cpu\.weight {weight} is outside the kernel's range \[1, 10000\]"):
        weight_to_shares(weight, formula)


def test_linear_inverse_is_not_exact() -> None:
    """Documented loss: both directions truncate, so weight 2 does not survive the round trip."""
    assert shares_to_weight(weight_to_shares(2, "linear"), "linear") == 1


@pytest.mark.parametrize(("weight", "shares"), [(1, 2), (2, 5), (99, 1011), (100, 1024), (9999, 262114)])
def test_quadratic_inverse_fixed_points(weight: int, shares: int) -> None:
    """The inverse hits runc's fixed points exactly (1 -> 2, 100 -> 1024) and returns the largest share
    count of a weight step: 3, 4 and 5 shares all give weight 2; 1001..1011 give 99, so 1000 shares
    -> 99 -> 1011."""
    assert weight_to_shares(weight, "quadratic") == shares
    assert shares_to_weight(shares, "quadratic") == weight
    assert shares_to_weight(shares + 1, "quadratic") == weight + 1


def test_quadratic_inverse_top() -> None:
    assert weight_to_shares(10000, "quadratic") == 262144


def test_quadratic_inverse_is_a_right_inverse_everywhere() -> None:
    """Every weight the kernel accepts survives weight -> shares -> weight."""
    assert all(shares_to_weight(weight_to_shares(w, "quadratic"), "quadratic") == w for w in range(1, 10001))


def test_unknown_formula_is_refused() -> None:
    with pytest.raises(ValueError, match=r"unknown cpu\.weight formula"):
        shares_to_weight(1024, "systemd")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"unknown cpu\.weight formula"):
        weight_to_shares(100, "systemd")  # type: ignore[arg-type]


@given(st.integers(2, 262_144), st.integers(2, 262_144), st.sampled_from(WEIGHT_FORMULAS))
def test_weight_formulas_monotonic_and_bounded(a: int, b: int, formula: WeightFormula) -> None:
    """Both formulas keep share order (a pod with more shares never gets less weight) and stay in
    the range the kernel accepts for cpu.weight."""
    low, high = sorted((a, b))
    w_low, w_high = shares_to_weight(low, formula), shares_to_weight(high, formula)
    assert 1 <= w_low <= w_high <= 10000


@given(st.integers(1, 10_000), st.integers(1, 10_000), st.sampled_from(WEIGHT_FORMULAS))
def test_inverse_formulas_monotonic_and_bounded(a: int, b: int, formula: WeightFormula) -> None:
    low, high = sorted((a, b))
    assert 2 <= weight_to_shares(low, formula) <= weight_to_shares(high, formula) <= 262144


@pytest.mark.parametrize(
    ("shares", "stored"), [(-5, 2), (0, 2), (1, 2), (2, 2), (1024, 1024), (262144, 262144), (262145, 262144)]
)
def test_shares_clamp_to_the_kernel_range(shares: int, stored: int) -> None:
    """kernel sched_group_set_shares: a cpu.shares write outside [2, 262144] is stored clamped."""
    assert clamp_shares(shares) == stored


def test_no_formula_named_means_the_runtimes_current_one() -> None:
    """A policy without spec.cgroup.weightFormula gets runc >= 1.3.2's quadratic (1024 -> 100)."""
    assert shares_to_weight(1024) == shares_to_weight(1024, "quadratic") == 100
    assert weight_to_shares(100) == weight_to_shares(100, "quadratic") == 1024
