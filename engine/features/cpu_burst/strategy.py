"""Koordinator's CFS quota burst decisions, as pure functions (koordinator.md 3.5).

Per round, the node's state comes from the shared CPUs: their usage ratio against
``sharePoolThresholdPercent`` says overload (at or above it), cooling (at or above 90% of it) or
idle; no node usage is unknown. Per container with a CPU limit, the operation is: scale down when
its limiter forbids bursting, scale up when it was throttled, otherwise remain; the node then
overrides it (overload: up or remain become down; cooling or unknown: up becomes remain). The
target is the current quota x1.2 (up) or x0.8 (down), within [base, base x maxPercent / 100], base
being the quota of its CPU limit.
"""

from __future__ import annotations

from typing import Literal

from engine.features.class_knobs.knobs import cores_to_milli, milli_cpu_to_quota

Operation = Literal["scaleUp", "scaleDown", "remain", "reset"]
NodeState = Literal["overload", "cooling", "idle", "unknown"]

INCREASE_STEP = 1.2  # koord: cfsIncreaseStep
DECREASE_STEP = 0.8  # koord: cfsDecreaseStep
COOLING_RATIO = 0.9  # koord: sharePoolCoolingThresholdRatio


def share_pool_ratio(cpus: int, dedicated_requests: float, node_usage: float, excluded_usage: float) -> float:
    """(node usage - usage of dedicated and reclaimed pods) / (CPUs - dedicated pods' requests); 1.0
    when no shared CPU is left. System usage stays in, to be conservative (as Koordinator)."""
    total = cpus - dedicated_requests
    if total <= 0:
        return 1.0
    return (node_usage - excluded_usage) / total


def node_state(ratio: float | None, threshold_percent: float) -> NodeState:
    if ratio is None:
        return "unknown"
    threshold = threshold_percent / 100
    if ratio >= threshold:
        return "overload"
    if ratio >= threshold * COOLING_RATIO:
        return "cooling"
    return "idle"


def container_operation(allowed: bool, throttled: float | None) -> Operation:
    """What the container itself asks for (genOperationByContainer)."""
    if not allowed:
        return "scaleDown"
    if throttled is None:
        return "remain"
    return "scaleUp" if throttled > 0 else "remain"


def by_node(state: NodeState, operation: Operation) -> Operation:
    """The node's override (changeOperationByNode)."""
    if state == "overload" and operation in ("scaleUp", "remain"):
        return "scaleDown"
    if state in ("cooling", "unknown") and operation == "scaleUp":
        return "remain"
    return operation


def base_quota(limit_cores: float) -> int:
    """The quota of a CPU limit (GetContainerBaseCFSQuota: the kubelet's MilliCPUToQuota); -1 for
    none, which has nothing to burst over."""
    return milli_cpu_to_quota(cores_to_milli(limit_cores))


def ceil_quota(base: int, max_percent: float) -> int:
    return int(base * max_percent / 100) if max_percent > 100 else base


def target_quota(current: int, base: int, ceiling: int, operation: Operation) -> int:
    if operation == "scaleUp":
        target = int(current * INCREASE_STEP)
    elif operation == "scaleDown":
        target = int(current * DECREASE_STEP)
    elif operation == "reset":
        target = base
    else:
        target = current
    return max(base, min(target, ceiling))
