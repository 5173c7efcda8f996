"""Eviction: victim selection, ranking and release accounting, as pure functions.

The pieces follow the anchors: victims are filtered by class, protection, phase, priority and labels;
ranked by configurable keys (class order, priority, usage, usage over request, name; a leading '-'
sorts descending, and a pod without the metric ranks first, as the kubelet and Katalyst do); and
evicted until the release target is met, with pods already being evicted counted as released
(Koordinator's pending-release credit) and no pod evicted twice in one round.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.config.policy import QoSClass
from engine.evaluate.factview import ItemFacts
from engine.model.facts import Workload
from engine.model.intents import Release
from engine.model.units import parse_quantity

DEFAULT_ORDER = ("class", "priority", "-memory.usage")
DEFAULT_PHASES = ("Running", "Pending")


@dataclass(frozen=True)
class Candidate:
    workload: Workload
    facts: ItemFacts
    cls: QoSClass | None


def _annotation_int(w: Workload, key: str) -> int | None:
    raw = w.annotations.get(key)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _label_int(w: Workload, key: str) -> int | None:
    raw = w.labels.get(key)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


KeyFn = Callable[[Candidate], Any]

ORDER_KEYS: Mapping[str, KeyFn] = {
    # The class's evictionPriority: lower is evicted first (Katalyst's qos.pod ranking).
    "class": lambda c: c.cls.eviction_priority if c.cls and c.cls.eviction_priority is not None else 0,
    "priority": lambda c: c.workload.priority if c.workload.priority is not None else 0,
    # Koordinator: koordinator.sh/eviction-priority annotation, then the koordinator.sh/priority label.
    "evictionPriority": lambda c: _annotation_int(c.workload, "koordinator.sh/eviction-priority") or 0,
    "subPriority": lambda c: _label_int(c.workload, "koordinator.sh/priority"),
    "name": lambda c: c.workload.name,
    "memory.usage": lambda c: c.facts.get("memory.usage_bytes"),
    "memory.rss": lambda c: c.facts.get("memory.rss_bytes"),
    "memory.usage_over_request": lambda c: c.facts.get("memory.usage_over_request"),
    "memory.numa_usage": lambda c: c.facts.get("memory.usage_bytes"),
    "memory.request": lambda c: c.facts.get("memory.request_bytes"),
    "cpu.usage": lambda c: c.facts.get("cpu.usage_cores"),
    "cpu.usage_over_request": lambda c: c.facts.get("cpu.usage_over_request"),
    "cpu.request": lambda c: c.facts.get("cpu.request_cores"),
    "load": lambda c: c.facts.get("cpu.usage_cores"),
}


def _sortable(value: Any, descending: bool) -> tuple[Any, ...]:
    """Missing values sort first; strings reverse by negated code points (with an end marker)."""
    if value is None:
        return (0,)
    if isinstance(value, str):
        return (1, (*(-ord(ch) for ch in value), 1)) if descending else (1, value)
    return (1, -value if descending else value)


def rank(
    candidates: Sequence[Candidate], order_by: Sequence[str]
) -> list[tuple[Candidate, tuple[tuple[str, Any], ...]]]:
    """Candidates in eviction order, each with the ranking values that placed it (for explain)."""
    keys = [(k.lstrip("-"), k.startswith("-")) for k in order_by]
    scored = []
    for c in candidates:
        values = tuple((name, ORDER_KEYS[name](c)) for name, _ in keys)
        sort_key = tuple(_sortable(v, desc) for (_, v), (_, desc) in zip(values, keys, strict=True))
        scored.append((sort_key, c.workload.uid, c, values))
    scored.sort(key=lambda s: (s[0], s[1]))
    return [(c, values) for _, _, c, values in scored]


def eligible(c: Candidate, victims: Mapping[str, Any]) -> bool:
    """Victim filters; protected classes are never victims, whatever the rule says."""
    if c.cls is not None and c.cls.protected:
        return False
    classes = victims.get("classes")
    if classes and (c.cls is None or c.cls.name not in classes):
        return False
    if c.cls is not None and c.cls.name in (victims.get("excludeClasses") or ()):
        return False
    if c.workload.phase not in (victims.get("phases") or DEFAULT_PHASES):
        return False
    max_priority = victims.get("maxPriority")
    if max_priority is not None and (c.workload.priority or 0) > max_priority:
        return False
    for key, value in (victims.get("requireLabel") or {}).items():
        if c.workload.labels.get(key) != value:
            return False
    return True


RESOURCE_FACTS: Mapping[str, tuple[str, str, str]] = {
    # resource: (usage fact, request fact, scope capacity facts tried in order, comma-separated)
    "memory": ("memory.usage_bytes", "memory.request_bytes", "memory.capacity_bytes,memory.total_bytes"),
    "cpu": ("cpu.usage_cores", "cpu.request_cores", "cpu.capacity_cores,cpus"),
}


def credit(c: Candidate, resource: str, target: str) -> float:
    """What evicting this pod releases of ``resource``: its usage (default) or its request."""
    if resource in ("batch-cpu", "batch-memory"):
        return c.workload.request(f"kubernetes.io/{resource}")
    usage, request, _ = RESOURCE_FACTS[resource]
    value = c.facts.get(request if target == "request" else usage)
    return float(value) if isinstance(value, int | float) else 0.0


def release_target(release: Mapping[str, Any], scope_facts: Any) -> tuple[float, str, dict[str, Any]] | None:
    """How much to release, the formula in words, and its inputs; None when the rule sets no target.

    lowerPercent follows Koordinator's integer arithmetic: usage% = floor(used * 100 / capacity),
    release = capacity * (usage% - lower) / 100.
    """
    resource = str(release.get("resource", "memory"))
    if "amount" in release:
        amount = parse_quantity(release["amount"])
        return amount, f"amount {release['amount']}", {"amount": amount}
    lower = release.get("lowerPercent")
    if lower is None or resource not in RESOURCE_FACTS:
        return None
    usage_key, _, capacity_keys = RESOURCE_FACTS[resource]
    capacity = next((scope_facts.get(k) for k in capacity_keys.split(",") if scope_facts.get(k)), None)
    percent = scope_facts.get(f"{resource}.usage_percent")
    if percent is None and capacity:
        used = scope_facts.get(usage_key)
        percent = math.floor(used * 100 / capacity) if used is not None else None
    if not capacity or percent is None:
        return None
    percent = math.floor(percent)
    target = max(capacity * (percent - lower) / 100.0, 0.0)
    formula = f"{_plain(capacity)} * ({percent} - {_plain(lower)}) / 100"
    return target, formula, {"capacity": capacity, "usagePercent": percent, "lowerPercent": lower}


def _plain(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


@dataclass
class Round:
    """Evictions decided in one tick, shared by every rule: a pod is chosen at most once."""

    chosen: dict[str, str] = field(default_factory=dict)  # uid -> rule


@dataclass(frozen=True)
class Choice:
    candidate: Candidate
    rank: int
    ranking: tuple[tuple[str, Any], ...]
    credit: float


def choose(
    candidates: Sequence[Candidate],
    params: Mapping[str, Any],
    scope_facts: Any,
    pending: Mapping[str, float],
    rnd: Round,
    limit: int,
) -> tuple[list[Choice], Release | None]:
    """Victims for one firing of one rule, and the release arithmetic behind them.

    ``pending`` maps pods already being evicted (earlier rounds, or terminating) to their credit.
    ``limit`` caps new victims (maxPerRound / perRound). Without a release target the rule evicts up
    to ``limit`` pods, minus evictions of its candidates still under way (the kubelet waits for them).
    """
    victims = params.get("victims") or {}
    release_spec = params.get("release") or {}
    resource = str(release_spec.get("resource", "memory"))
    target_kind = str(release_spec.get("target", "usage"))
    pool = [c for c in candidates if eligible(c, victims)]
    already = [
        c for c in pool if c.workload.uid in pending or c.workload.uid in rnd.chosen or c.workload.terminating
    ]
    fresh = [c for c in pool if c not in already]
    pending_credit = sum(pending.get(c.workload.uid, credit(c, resource, target_kind)) for c in already)
    target = release_target(release_spec, scope_facts)
    ranked = rank(fresh, params.get("orderBy") or DEFAULT_ORDER)
    chosen: list[Choice] = []
    released = pending_credit
    budget = limit if target is not None else max(limit - len(already), 0)
    for i, (c, values) in enumerate(ranked):
        if len(chosen) >= budget or (target is not None and released >= target[0]):
            break
        amount = credit(c, resource, target_kind)
        chosen.append(Choice(c, i + 1, values, amount))
        released += amount
    release = None
    if target is not None:
        release = Release(resource, target[0], target[1], pending_credit, pending_credit, released)
    return chosen, release
