"""Koordinator's burst limiter: a token bucket per container over its CPU usage.

Why a bucket: a container whose quota was raised may keep using the extra CPU for good. The bucket
lets it burst for a while (``periodSeconds`` at full burst) and then stops the burst until it has
run below its limit again. Units are percent-seconds of the container's CPU limit:

* capacity = period x (maxPercent - 100);
* each round, over the seconds since the last one (truncated to whole seconds, as Go's int64 of a
  float does): usage at or above 100% of the limit spends (usage% - 100) per second, usage under 60%
  saves (100 - usage%) per second, anything between does neither;
* tokens stay within [-capacity, capacity]; the burst is allowed while tokens > 0;
* a bucket unused for two periods is dropped; a changed capacity starts a new bucket.

Koordinator starts a new bucket at a random fill in [0, 0.5) of its capacity, so that containers
started together do not stop bursting together. The tick is a pure function here, so a new bucket
starts at the mean of that draw, a quarter of its capacity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CONSUME_AT_PERCENT = 100  # koord: cpuThresholdPercentForLimiterConsumeTokens
SAVE_BELOW_PERCENT = 60  # koord: cpuThresholdPercentForLimiterSavingTokens
INITIAL_FILL = 0.25  # the mean of Koordinator's random initial fill, rand[0, 0.5)


@dataclass(frozen=True)
class Bucket:
    """One container's bucket: its capacity, its tokens and when it was last stepped."""

    capacity: int
    tokens: int
    at: float

    def to_dict(self) -> dict[str, Any]:
        return {"capacity": self.capacity, "tokens": self.tokens, "at": self.at}

    @classmethod
    def from_dict(cls, data: Any) -> Bucket:
        return cls(int(data["capacity"]), int(data["tokens"]), float(data["at"]))


def capacity(period_seconds: int, max_percent: float) -> int:
    """period x (maxPercent - 100): the percent-seconds a container may burst from a full bucket."""
    return int(period_seconds * (int(max_percent) - 100))


def new_bucket(period_seconds: int, max_percent: float, now: float) -> Bucket:
    size = capacity(period_seconds, max_percent)
    return Bucket(size, int(size * INITIAL_FILL), now)


def step(bucket: Bucket, now: float, usage_percent: int) -> tuple[bool, Bucket]:
    """One round of Koordinator's burstLimiter.Allow: (burst allowed, the bucket after it)."""
    elapsed = int(max(now - bucket.at, 0.0))
    tokens = bucket.tokens
    if usage_percent >= CONSUME_AT_PERCENT:
        tokens -= (usage_percent - 100) * elapsed
    elif usage_percent < SAVE_BELOW_PERCENT:
        tokens += (100 - usage_percent) * elapsed
    tokens = max(min(tokens, bucket.capacity), -bucket.capacity)
    return tokens > 0, Bucket(bucket.capacity, tokens, now)


def current(bucket: Bucket | None, period_seconds: int, max_percent: float, now: float) -> Bucket:
    """The bucket to step this round: the container's own, or a new one when it has none or the
    configuration changed its capacity (Koordinator's UpdateIfChanged)."""
    if bucket is None or bucket.capacity != capacity(period_seconds, max_percent):
        return new_bucket(period_seconds, max_percent, now)
    return bucket


def expired(bucket: Bucket, period_seconds: int, now: float) -> bool:
    """Unused for two periods (Koordinator's Expire): the container is gone or no longer bursts."""
    return now - bucket.at > 2 * period_seconds
