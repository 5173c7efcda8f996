"""The soft candidates of one tick: Katalyst's eviction manager evicts exactly one of them.

Katalyst's plugins nominate pods two ways: *force* (a hard threshold's top pod, or a plugin's own
force list) and *soft* (rss overuse, suppression, rootfs overuse: every pod that qualifies). The
manager evicts every force pod (within the eviction burst) but, from all plugins' soft pods
together (minus those already forced), only one per round: the last after ``CandidateSort``, whose
keys are non-reclaimed before reclaimed, higher priority first, the nominating scope (force 1 <
memory 2 < cpu 3 < anything else) and name descending. qosd states that order the other way round,
first evicted first, as ``spec.eviction.softCandidates.orderBy`` (default ``class, priority,
-scope, name``), and this step, after every rule has run, keeps the first soft evict intent and
reports the others under ``skipped``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from engine.config.policy import QoSClass
from engine.evaluate.context import Skipped, Tick
from engine.features.eviction.round_spec import EvictionRound, SoftCandidates
from engine.model.intents import EvictIntent

if TYPE_CHECKING:
    from engine.evaluate.factview import FactViews
    from engine.model.facts import Snapshot


def soft_key(
    intent: EvictIntent,
    cls: QoSClass | None,
    priority: int | None,
    name: str,
    spec: SoftCandidates,
) -> tuple[Any, ...]:
    """The sort key of one soft candidate under ``spec`` (ascending: first evicted first)."""
    rank = {s: i for i, s in enumerate(spec.scope_order)}
    values: dict[str, Any] = {
        "class": cls.eviction_priority if cls is not None and cls.eviction_priority is not None else 0,
        "priority": priority or 0,
        "scope": rank.get(intent.scope or "", len(rank)),
        "name": name,
    }
    key: list[Any] = []
    for k in spec.order_by:
        v = values[k.lstrip("-")]
        if k.startswith("-"):
            v = (*(-ord(ch) for ch in v), 1) if isinstance(v, str) else -v
        key.append(v)
    return tuple(key)


def pick(
    soft: Sequence[EvictIntent],
    forced: frozenset[str],
    classes: Mapping[str, QoSClass],
    pods: Mapping[str, tuple[int | None, str]],
    spec: SoftCandidates,
) -> tuple[EvictIntent | None, list[EvictIntent]]:
    """The one soft intent to keep, and the ones to drop. ``forced``: uids a non-soft rule evicts
    this tick (they leave the pool); ``pods``: uid -> (priority, name)."""
    pool: dict[str, EvictIntent] = {}
    dropped: list[EvictIntent] = []
    for i in soft:
        if i.uid in forced or i.uid in pool:
            dropped.append(i)
        else:
            pool[i.uid] = i
    if not pool:
        return None, dropped

    def key(i: EvictIntent) -> tuple[Any, ...]:
        priority, name = pods.get(i.uid, (None, i.name))
        cls = classes.get(i.class_name) if i.class_name else None
        return (*soft_key(i, cls, priority, name, spec), i.uid)

    ordered = sorted(pool.values(), key=key)
    return ordered[0], dropped + ordered[1:]


class SoftRoundStep:
    """After the rules: keep one soft evict intent of the tick (``pick``), report the others."""

    def __init__(self, round_spec: EvictionRound, classes: Mapping[str, QoSClass], active: bool) -> None:
        self.spec = round_spec.soft
        self.classes = classes
        self.active = active  # some rule of the generation nominates soft candidates

    def before_rules(self, snap: Snapshot, views: FactViews, t: Tick) -> None:
        """Nothing: soft candidates exist only once the rules have run."""

    def after_rules(self, snap: Snapshot, views: FactViews, t: Tick) -> None:
        if not self.active:
            return
        soft = [i for i in t.intents if isinstance(i, EvictIntent) and i.soft]
        if not soft:
            return
        forced = frozenset(i.uid for i in t.intents if isinstance(i, EvictIntent) and not i.soft)
        by_uid = snap.by_uid
        pods = {i.uid: (by_uid[i.uid].priority, by_uid[i.uid].name) for i in soft if i.uid in by_uid}
        kept, dropped = pick(soft, forced, self.classes, pods, self.spec)
        if not dropped:
            return
        gone = {id(i) for i in dropped}
        t.intents[:] = [i for i in t.intents if id(i) not in gone]
        for i in dropped:
            if i.uid in forced:
                why = f"soft candidate {i.target} is evicted by a force rule this tick"
            elif kept is not None and i.uid == kept.uid:
                why = f"soft candidate {i.target} was also nominated by rule {kept.provenance.rule}"
            else:
                first = kept.target if kept is not None else "none"
                why = f"soft candidate {i.target} not chosen: one soft eviction per tick, {first} first"
            t.skipped.append(Skipped(i.provenance.rule, why))
