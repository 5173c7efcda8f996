"""Semantic lints: policies that load, compile and run, but work against themselves.

Each lint is a contradiction between two parts of one merged policy that no single check sees, found
on each kind of node ``qosd validate`` builds (the node variants of engine.config.pipeline):

- ``admit-evict``: a rule evicts pods of a reclaimed class (cpu.policy reclaimed: Katalyst's
  reclaimed_cores, Koordinator's BE) when node memory (or CPU) usage reaches T%, while
  spec.reclaim publishes enough of the node for reclaimed pods to push usage above T%. The scheduler
  admits pods onto what was published, the rule evicts them, the freed amount is published again:
  the admit/evict loop the issue measured at 1,300 evictions a day (Koordinator keeps its default
  memory reclaim threshold, 65%, under its eviction threshold, 70%, for this reason).
- ``admit-suppress``: the suppress action holds a class to thresholdPercent of the node's CPU, while
  reclaim publishes batch CPU up to a higher percent: pods are admitted onto CPU they are then denied
  (Koordinator: cpuReclaimThresholdPercent 60 under cpuSuppressThresholdPercent 65).
- ``flapping-clear``: a rule's clearWhen holds for readings its ``when`` also holds for; the rule
  fires, clears on the next tick while the condition still holds, and fires again, every other tick.

A lint is a ``Problem`` with severity ``warning``; ``qosd validate --strict`` makes it an error.
The fill level is computed on the node the variant is built for (the reference node without
``--node``) with nothing else using it: the most a scheduler can place on what is published.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from engine.config.errors import PolicyError, Problem, Variant
from engine.config.load import Document
from engine.config.merge import Merged
from engine.config.pipeline import build_policy, join_variants, node_variants
from engine.config.policy import Policy, Rule
from engine.features.eviction.spec import EvictSpec
from engine.features.reclaim.spec import PublishSpec, ReclaimResource
from engine.features.rules.conditions import AllOf, AnyOf, Compare, Condition
from engine.features.suppress.spec import SuppressSpec
from engine.model.node import NodeInfo

GIB = float(1 << 30)
USAGE_FACTS = {"memory": "node.memory.usage_percent", "cpu": "node.cpu.usage_percent"}
_UPPER = ("gt", "gte")
_LOWER = ("lt", "lte")


def lint(docs: list[Document], node: NodeInfo | None = None) -> list[Problem]:
    """Warnings for every node variant of ``docs`` (which must already validate without errors)."""
    found: list[Problem] = []
    checked: set[Variant] = set()
    for v in node_variants(docs, node):
        checked.add(v.variant)
        try:
            policy = build_policy(v.docs, v.node)
        except PolicyError:
            continue  # validate reports it
        found.extend(replace(p, variants=(v.variant,)) for p in lint_policy(policy, v.node))
    return join_variants(found, checked)


def lint_policy(policy: Policy, node: NodeInfo) -> list[Problem]:
    """Every lint on one compiled policy."""
    where = Merged(dict(policy.spec), policy.origin_tree, ())
    return [
        *_admit_evict(policy, node, where),
        *_admit_suppress(policy, node, where),
        *_flapping_clear(policy, where),
    ]


def fill_percent(res: ReclaimResource, resource: str, node: NodeInfo) -> float | None:
    """Percent of the node's ``resource`` in use when reclaimed pods use all that is published on an
    otherwise idle node (None: the policy's formula does not say). usage/request/maxUsageRequest
    publish capacity x reclaimThresholdPercent minus what others use (strategy.reclaimable), headroom
    publishes capacity - reservedForAllocate (headroom.memory_headroom, cpu likewise), minus
    reservedForReport; maxPercent and max cap both."""
    capacity = node.capacity.get(resource)
    if not capacity:
        return None
    if res.policy == "headroom" and res.headroom is not None:
        published = capacity - res.headroom.reserved_for_allocate - (res.reserved_for_report or 0.0)
    elif res.policy in ("usage", "request", "maxUsageRequest"):
        threshold = res.threshold_percent if res.threshold_percent is not None else 100.0
        published = capacity * threshold / 100.0
    else:
        return None
    if res.max_percent is not None:
        published = min(published, capacity * res.max_percent / 100.0)
    if res.max is not None:
        published = min(published, res.max)
    return max(0.0, min(100.0, 100.0 * published / capacity))


def _published(policy: Policy, resource: str) -> ReclaimResource | None:
    """The reclaim section of ``resource`` if an enforcing rule publishes it."""
    res = policy.reclaim.cpu if resource == "cpu" else policy.reclaim.memory
    if not policy.reclaim.enabled or res is None or not res.publish_as:
        return None
    publishing = any(
        isinstance(a.spec, PublishSpec) and a.spec.resource == resource
        for r in _enforcing(policy)
        for a in r.actions
    )
    return res if publishing else None


def _enforcing(policy: Policy) -> Iterator[Rule]:
    return (r for r in policy.rules if r.mode != "audit")


def _admit_evict(policy: Policy, node: NodeInfo, where: Merged) -> Iterator[Problem]:
    for resource, fact in USAGE_FACTS.items():
        res = _published(policy, resource)
        fill = fill_percent(res, resource, node) if res is not None else None
        if res is None or fill is None:
            continue
        reclaimed = {c.name for c in policy.classes if c.cpu_policy == "reclaimed"}
        for rule in _enforcing(policy):
            if not any(_evicts_from(a.spec, reclaimed) for a in rule.actions):
                continue
            for cmp in _triggers(rule.when):
                if cmp.fact != fact or cmp.op not in _UPPER or not isinstance(cmp.value, int | float):
                    continue
                if fill < cmp.value or (fill == cmp.value and cmp.op == "gt"):
                    continue
                yield Problem(
                    where.locate(cmp.path),
                    f"rule {rule.name!r} evicts at {fact} {_OPS[cmp.op]} {cmp.value:g}, but spec.reclaim."
                    f"{resource} publishes enough for reclaimed pods to fill the node to {fill:.0f}% "
                    f"({_amount(resource, node, fill)}): pods admitted onto what is published are "
                    "evicted, and what they free is published again (an admit/evict loop)",
                    f"keep the published {resource} under the eviction threshold: "
                    + _remedy(res, resource, float(cmp.value), node),
                    related=(where.locate(("reclaim", resource)),),
                    severity="warning",
                )


def _evicts_from(spec: object, reclaimed: set[str]) -> bool:
    """Whether an action evicts pods of a reclaimed class (cpu.policy reclaimed), the pods that are
    admitted onto published resources; victims without classes are any class."""
    if not isinstance(spec, EvictSpec):
        return False
    classes = set(spec.victims.classes) - set(spec.victims.exclude_classes)
    return bool(reclaimed & classes) if spec.victims.classes else bool(reclaimed - classes)


def _admit_suppress(policy: Policy, node: NodeInfo, where: Merged) -> Iterator[Problem]:
    res = _published(policy, "cpu")
    fill = fill_percent(res, "cpu", node) if res is not None else None
    if res is None or fill is None:
        return
    for rule in _enforcing(policy):
        for a in rule.actions:
            if not isinstance(a.spec, SuppressSpec) or fill <= a.spec.threshold_percent:
                continue
            yield Problem(
                where.locate((*a.path, "thresholdPercent")),
                f"rule {rule.name!r} holds class {a.spec.target!r} to {a.spec.threshold_percent}% of the "
                f"node's CPU, but spec.reclaim.cpu publishes batch CPU up to {fill:.0f}% "
                f"({_amount('cpu', node, fill)}): pods are admitted onto CPU that suppress then takes away",
                "keep the published CPU under the suppress threshold: "
                + _remedy(res, "cpu", float(a.spec.threshold_percent), node),
                related=(where.locate(("reclaim", "cpu")),),
                severity="warning",
            )


def _flapping_clear(policy: Policy, where: Merged) -> Iterator[Problem]:
    for rule in _enforcing(policy):
        if rule.when is None or rule.clear_when is None:
            continue
        fire = {(c.fact, c.window, c.agg): c for c in _triggers(rule.when)}
        for clear in _triggers(rule.clear_when):
            cmp = fire.get((clear.fact, clear.window, clear.agg))
            if cmp is None or not _overlap(cmp, clear):
                continue
            yield Problem(
                where.locate(clear.path),
                f"rule {rule.name!r}: clearWhen {clear.fact} {_OPS[clear.op]} {_num(clear.value)} holds "
                f"for readings where its when ({clear.fact} {_OPS[cmp.op]} {_num(cmp.value)}) holds too: "
                "the rule fires, clears on the next tick with the condition still met, and fires again",
                "give clearWhen a range that excludes the firing one (e.g. when gte 80, clearWhen lt 75)",
                related=(where.locate(cmp.path),),
                severity="warning",
            )


def _triggers(cond: Condition | None) -> list[Compare]:
    """Comparisons that can make ``cond`` hold on their own or together (not those under ``not``)."""
    if isinstance(cond, Compare):
        return [cond]
    if isinstance(cond, AllOf | AnyOf):
        return [c for item in cond.items for c in _triggers(item)]
    return []


def _overlap(fire: Compare, clear: Compare) -> bool:
    """Whether a reading exists that satisfies both comparisons (one bound each way, numbers)."""
    if not all(isinstance(c.value, int | float) and not isinstance(c.value, bool) for c in (fire, clear)):
        return False
    up, down = (fire, clear) if fire.op in _UPPER else (clear, fire)
    if up.op not in _UPPER or down.op not in _LOWER:
        return (fire.op in _UPPER and clear.op in _UPPER) or (fire.op in _LOWER and clear.op in _LOWER)
    if up.op == "gte" and down.op == "lte":
        return bool(up.value <= down.value)
    return bool(up.value < down.value)


_OPS = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}


def _num(value: Any) -> str:
    return f"{value:g}" if isinstance(value, int | float) else str(value)


def _amount(resource: str, node: NodeInfo, percent: float) -> str:
    total = node.capacity.get(resource, 0.0)
    if resource == "memory":
        return f"{total * percent / 100 / GIB:.1f} GiB of {total / GIB:.1f} GiB on node {node.name}"
    return f"{total * percent / 100:.3g} of {total:g} cores on node {node.name}"


def _remedy(res: ReclaimResource, resource: str, threshold: float, node: NodeInfo) -> str:
    if res.policy == "headroom":
        keep = 100.0 - threshold
        total = node.capacity.get(resource, 0.0)
        share = total * keep / 100
        amount = f"{share / GIB:.1f} GiB" if resource == "memory" else f"{share:.3g} cores"
        return (
            f"raise reclaim.{resource}.headroom.reservedForAllocate to more than {keep:g}% of the node "
            f"({amount} on node {node.name}), or raise the threshold"
        )
    return (
        f"set reclaim.{resource}.reclaimThresholdPercent below {threshold:g} "
        f"(e.g. {max(threshold - 5, 1):g}), or raise the threshold"
    )
