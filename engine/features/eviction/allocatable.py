"""Koordinator's MemoryAllocatableEvict / CPUAllocatableEvict: batch requests over batch allocatable.

Koordinator sums the batch-resource requests of every pod at or below the priority threshold
(``AllocatableEvictPriorityThreshold``) and compares the sum with the Node's allocatable of that
resource. Above ``thresholdPercent`` it releases requests down to ``lowerPercent``:
``release = int((requested / allocatable - lower / 100) x allocatable)``; a Node that does not
publish the resource (missing or zero) releases every request. Victims are the opted-in pods of the
band that have a usage metric, by ``koordinator.sh/eviction-priority``, priority, the
``koordinator.sh/priority`` label, then the larger request first; each is credited with its request.

The sum is over all pods of the band, opted in or not, as in the anchor: the eviction label decides
who may be evicted, not whose requests count.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from engine.features.eviction.allocatable_spec import RequestOverAllocatable
from engine.features.eviction.strategy import ORDER_KEYS, Candidate, TriggerResult
from engine.model.facts import Workload


def requested(workloads: Iterable[Workload], resource: str, max_priority: int) -> float:
    """Σ requests of ``resource`` over the pods whose priority is known and at most ``max_priority``."""
    return sum(
        w.request(resource) for w in workloads if w.priority is not None and w.priority <= max_priority
    )


def release_amount(used: float, allocatable: float | None, threshold: int, lower: int) -> float | None:
    """How much request to release, or None when the sum is within the threshold."""
    if allocatable is None or allocatable <= 0:
        return used if used > 0 else None
    ratio = used / allocatable
    if ratio <= threshold / 100:
        return None
    return float(math.floor((ratio - lower / 100) * allocatable))


def trigger(
    cfg: RequestOverAllocatable,
    workloads: Sequence[Workload],
    pool: Sequence[Candidate],
    allocatable: float | None,
    max_priority: int,
) -> TriggerResult:
    """The trigger's decision: met, the victims allowed (those with a usage metric of the resource's
    kind, as the anchor skips pods without one), their order and the release target."""
    name = cfg.extended
    used = requested(workloads, name, max_priority)
    amount = release_amount(used, allocatable, cfg.threshold_percent, cfg.lower_percent)
    inputs = {
        "resource": name,
        "requested": used,
        "allocatable": allocatable,
        "thresholdPercent": cfg.threshold_percent,
        "lowerPercent": cfg.lower_percent,
    }
    if amount is None:
        return TriggerResult(False, inputs)
    metric = "cpu.usage_cores" if cfg.resource == "batch-cpu" else "memory.usage_bytes"
    measured = [c for c in pool if c.facts.get(metric) is not None]
    ordered = sorted(measured, key=lambda c: _rank(c, name))
    if allocatable is None or allocatable <= 0:
        formula = f"{name} is not allocatable on the node: release every request ({_plain(used)})"
    else:
        formula = (
            f"floor(({_plain(used)} / {_plain(allocatable)} - {cfg.lower_percent} / 100) "
            f"x {_plain(allocatable)})"
        )
    return TriggerResult(
        True,
        inputs,
        allowed={c.workload.uid: {"request": c.workload.request(name)} for c in measured},
        order=tuple(c.workload.uid for c in ordered),
        target=(amount, formula, dict(inputs)),
    )


def _rank(c: Candidate, resource: str) -> tuple[int, int, int, float, str, str]:
    """Koordinator's getPodEvictInfoAndSortByPriority order: eviction priority, priority, the
    priority label (defaulting to the priority), then the larger request; name and uid break ties
    (the anchor's sort is unstable)."""
    priority = int(ORDER_KEYS["priority"](c))
    label = ORDER_KEYS["subPriority"](c)
    return (
        int(ORDER_KEYS["evictionPriority"](c)),
        priority,
        priority if label is None else int(label),
        -c.workload.request(resource),
        c.workload.name,
        c.workload.uid,
    )


def _plain(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"
