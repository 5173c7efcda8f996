"""Koordinator's CFS quota burst limiter and decisions, with the anchor's numbers
(koordinator-sh/koordinator a7a1b76, pkg/koordlet/qosmanager/plugins/cpuburst/cpu_burst_test.go)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.features.cpu_burst import limiter
from engine.features.cpu_burst.limiter import Bucket
from engine.features.cpu_burst.strategy import (
    base_quota,
    by_node,
    ceil_quota,
    container_operation,
    node_state,
    share_pool_ratio,
    target_quota,
)


@pytest.mark.parametrize(
    ("period", "max_percent", "fill", "usage", "allowed", "tokens"),
    [
        (100, 150, 1.0, 150, True, 4500),  # consume-enough-token-with-full-init
        (100, 150, 0.01, 200, False, -950),  # consume-not-enough-token-with-part-init
        (10, 150, 0.01, 200, False, -500),  # consume-not-enough-token-to-bottom-with-part-init
        (100, 150, 0.1, 40, True, 1100),  # accumulate-token-with-part-init
        (100, 150, 0.9, 40, True, 5000),  # accumulate-token-to-ceil-with-part-init
        (100, 150, 0.5, 80, True, 2500),  # between 60% and 100%: neither spends nor saves
    ],
)
def test_bucket_step_matches_test_burstLimiter_Allow(
    period: int, max_percent: int, fill: float, usage: int, allowed: bool, tokens: int
) -> None:
    size = limiter.capacity(period, max_percent)
    bucket = Bucket(size, int(size * fill), 990.0)
    got_allowed, after = limiter.step(bucket, 1000.0, usage)
    assert (got_allowed, after.tokens, after.at) == (allowed, tokens, 1000.0)


def test_elapsed_seconds_are_truncated_like_go() -> None:
    """int64(timePastSec): 1.9 s count as 1."""
    _, after = limiter.step(Bucket(5000, 100, 998.1), 1000.0, 150)
    assert after.tokens == 50


def test_a_changed_configuration_starts_a_new_bucket() -> None:
    """Test_burstLimiter_UpdateIfChanged: 600 s at 300% -> 300 s at 200% is capacity 30000, and a
    new bucket starts a quarter full (the mean of Koordinator's random start in [0, 0.5))."""
    old = limiter.new_bucket(600, 300, 0.0)
    assert old.capacity == 120000 and old.tokens == 30000
    assert limiter.current(old, 300, 200, 5.0) == Bucket(30000, 7500, 5.0)
    assert limiter.current(old, 600, 300, 5.0) is old


def test_expiry_after_two_periods() -> None:
    """TestCPUBurst_Recycle: expire after 2 x period (600 s for 300)."""
    assert limiter.expired(Bucket(1, 1, 0.0), 300, 610.0)
    assert not limiter.expired(Bucket(1, 1, 20.0), 300, 610.0)


@given(
    st.integers(0, 3600),
    st.integers(100, 1000),
    st.integers(-(10**6), 10**6),
    st.floats(0, 10**5),
    st.integers(0, 1000),
)
def test_tokens_stay_within_the_capacity(
    period: int, max_percent: int, tokens: int, elapsed: float, usage: int
) -> None:
    size = limiter.capacity(period, max_percent)
    start = Bucket(size, max(min(tokens, size), -size), 0.0)
    allowed, after = limiter.step(start, elapsed, usage)
    assert -size <= after.tokens <= size
    assert allowed == (after.tokens > 0)


@pytest.mark.parametrize(
    ("ratio", "state"),
    [
        (None, "unknown"),
        (0.3, "idle"),
        (0.449, "idle"),
        (0.45, "cooling"),
        (0.499, "cooling"),
        (0.5, "overload"),
    ],
)
def test_node_state_bands(ratio: float | None, state: str) -> None:
    assert node_state(ratio, 50) == state


def test_share_pool_ratio_matches_getNodeStateForBurst() -> None:
    """16 CPUs - 8 (LSR request) = 8 shared; usage 10 - 7 (LSR usage) = 3: 3/8; none left: 1.0."""
    assert share_pool_ratio(16, 8.0, 10.0, 7.0) == 3 / 8
    assert share_pool_ratio(8, 8.0, 10.0, 0.0) == 1.0


@pytest.mark.parametrize(
    ("allowed", "throttled", "state", "operation"),
    [
        (False, 0.5, "idle", "scaleDown"),  # the limiter forbids
        (True, 0.5, "idle", "scaleUp"),
        (True, 0.0, "idle", "remain"),
        (True, None, "idle", "remain"),  # no throttle metric
        (True, 0.5, "cooling", "remain"),
        (True, 0.5, "unknown", "remain"),
        (True, 0.5, "overload", "scaleDown"),
        (True, 0.0, "overload", "scaleDown"),
        (False, 0.0, "cooling", "scaleDown"),
    ],
)
def test_operations(allowed: bool, throttled: float | None, state: str, operation: str) -> None:
    assert by_node(state, container_operation(allowed, throttled)) == operation  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("current", "operation", "expected"),
    [
        (200000, "scaleUp", 240000),
        (580000, "scaleUp", 600000),  # capped at 300% of the base
        (400000, "scaleDown", 320000),
        (202000, "scaleDown", 200000),  # never below the base
        (400000, "reset", 200000),
        (400000, "remain", 400000),
        (-1, "remain", 200000),  # an unlimited container comes back to its limit's quota
    ],
)
def test_target_quota(current: int, operation: str, expected: int) -> None:
    base = base_quota(2.0)
    assert base == 200000
    assert target_quota(current, base, ceil_quota(base, 300), operation) == expected  # type: ignore[arg-type]


def test_base_quota_is_the_kubelets() -> None:
    assert base_quota(0.005) == 1000  # the kernel's minimum
    assert base_quota(0.0) == -1  # no limit: nothing to burst over
    assert ceil_quota(200000, 90) == 200000  # a ceiling under 100% is the base
