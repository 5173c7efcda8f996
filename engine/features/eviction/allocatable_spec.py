"""The typed spec of ``evict.trigger.requestOverAllocatable`` and its semantic check (Koordinator's
isAllocatableThresholdConfigValid). Apart from the math in ``allocatable.py`` so that ``spec.py`` can
hold it in the Trigger union without importing the strategies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

# apiext.PriorityMidValueMax: koord-prod pods (above it) are never victims of these features.
PRIORITY_MID_MAX = 7999


@dataclass(frozen=True)
class RequestOverAllocatable:
    """``evict.trigger.requestOverAllocatable``: ``resource`` is batch-memory or batch-cpu (the
    kubernetes.io/ extended resource, bytes or millicores)."""

    resource: str
    threshold_percent: int
    lower_percent: int
    kind: ClassVar[str] = "requestOverAllocatable"

    @property
    def extended(self) -> str:
        return f"kubernetes.io/{self.resource}"


def config_error(threshold: object, lower: object, max_priority: object) -> str | None:
    """Why a requestOverAllocatable config is one Koordinator skips (isAllocatableThresholdConfigValid),
    or None. The schema has already checked the types."""
    if not isinstance(threshold, int) or not isinstance(lower, int):
        return None
    if lower >= threshold:
        return f"lowerPercent {lower} must be below thresholdPercent {threshold}"
    if max_priority is None:
        return "trigger requestOverAllocatable needs victims.maxPriority (AllocatableEvictPriorityThreshold)"
    if isinstance(max_priority, int) and max_priority > PRIORITY_MID_MAX:
        return (
            f"victims.maxPriority {max_priority} is above {PRIORITY_MID_MAX} (the top of koord-mid): "
            "koord-prod pods must not be evicted for batch allocatable"
        )
    return None
