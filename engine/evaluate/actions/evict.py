"""evict: victims of one rule, ranked, with release accounting shared by every rule of the round."""

from __future__ import annotations

import math
from typing import Any

from engine.evaluate.context import ActionContext
from engine.evaluate.factview import EMPTY_ITEM, ItemFacts
from engine.model.facts import Workload
from engine.model.intents import EvictIntent
from engine.strategies.eviction import Candidate, choose


def candidate(ctx: ActionContext, w: Workload) -> Candidate:
    name = ctx.engine.classifier.classify(w).class_name
    return Candidate(w, ctx.views.pod(w), ctx.engine.policy.class_index.get(name) if name else None)


def evict(ctx: ActionContext) -> bool:
    rule = ctx.rule.rule
    params, t, matched = ctx.params, ctx.tick, ctx.matched
    audit = rule.mode == "audit"
    limit_values = [v for v in (params.get("maxPerRound"), rule.per_round) if v is not None]
    has_target = bool((params.get("release") or {}).keys() & {"lowerPercent", "amount"})
    limit = min(limit_values) if limit_values else (math.inf if has_target else 1)
    # Per matched NUMA node without a release target: one victim each (Katalyst's TopN=1),
    # all of them together within maxPerRound.
    per_group = limit if has_target or rule.scope != "numa" else 1
    left = limit
    picked: set[str] = set()
    if (params.get("victims") or {}).get("numaScoped"):
        ctx.skip(
            "note: victims.numaScoped needs pods' NUMA placement, which facts do not carry yet; "
            "every candidate was considered"
        )
    pending = {uid: rec.credit for uid, rec in t.evicting.items()}
    new = 0
    groups: list[tuple[str | None, Any, list[Candidate], bool]] = []
    if rule.scope in ("pod", "container"):
        seen: dict[str, Candidate] = {}
        for _, _, w, _ in matched:
            if w is not None and w.uid not in seen:
                seen[w.uid] = candidate(ctx, w)
        key, facts, _, latched = matched[0]
        groups.append((key, facts, list(seen.values()), latched))
    else:
        all_candidates = [candidate(ctx, w) for w in ctx.snap.workloads]
        for key, facts, _, latched in matched:
            groups.append((key, facts, all_candidates, latched))
    for key, facts, candidates, latched in groups:
        budget = min(left, per_group)
        if budget <= 0:
            break
        scope_facts: Any = (
            facts if isinstance(facts, ItemFacts) and facts is not EMPTY_ITEM else ctx.views.node
        )
        pool = [c for c in candidates if c.workload.uid not in picked]
        choices, release = choose(pool, params, scope_facts, pending, t.round, int(min(budget, 10**9)))
        left -= len(choices)
        picked.update(c.candidate.workload.uid for c in choices)
        for choice in choices:
            w = choice.candidate.workload
            inputs = {"orderBy": list(params.get("orderBy") or ()), "candidates": len(candidates)}
            t.intents.append(
                EvictIntent(
                    uid=w.uid,
                    namespace=w.namespace,
                    name=w.name,
                    class_name=choice.candidate.cls.name if choice.candidate.cls else None,
                    rank=choice.rank,
                    ranking=choice.ranking,
                    credit=choice.credit,
                    release=release,
                    grace_period_seconds=params.get("gracePeriodSeconds"),
                    provenance=ctx.provenance(key, facts, latched, inputs),
                )
            )
            if not audit:
                t.round.chosen[w.uid] = rule.name
            new += 1
    return new > 0
