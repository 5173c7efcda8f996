"""What a rule saw and where it is written, in words: the comparisons of its conditions (in the fact's
unit) and ``rule NAME (file:line:col, policy HASH)``. Every decision kind's sentence ends with these."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engine.model.intents import step_description
from engine.model.units import fact_unit, num, with_unit

OP_WORDS = {
    "eq": "=",
    "ne": "!=",
    "lt": "<",
    "lte": "<=",
    "gt": ">",
    "gte": ">=",
    "in": "in",
    "exists": "exists",
}


def observation_text(o: Mapping[str, Any]) -> str:
    """``node.psi.memory.some.avg10 (min over 15s) = 18% >= 15%``; one that did not hold reads
    ``... = 9%, not >= 15%``."""
    fact = str(o.get("fact"))
    unit = fact_unit(fact)
    window = o.get("window")
    label = fact if window is None else f"{fact} ({o.get('agg', 'last')} over {num(window)}s)"
    op = str(o.get("op"))
    if op == "exists":
        wanted = "present" if o.get("threshold") else "absent"
        got = "present" if o.get("observed") is not None else "absent"
        return f"{label} is {got} (wanted {wanted})"
    threshold = o.get("threshold")
    shown = (
        "[" + ", ".join(with_unit(t, unit) for t in threshold) + "]"
        if isinstance(threshold, list)
        else with_unit(threshold, unit)
    )
    relation = f"{OP_WORDS.get(op, op)} {shown}"
    observed = with_unit(o.get("observed"), unit)
    if op == "eq" and o.get("met"):
        return f"{label} = {observed}"  # not "= eviction = eviction"
    return f"{label} = {observed} {relation}" if o.get("met") else f"{label} = {observed}, not {relation}"


def conditions_text(conditions: Sequence[Mapping[str, Any]]) -> str:
    """What the rule saw: the comparisons that held, then (for any/not) those that did not."""
    if not conditions:
        return "has no condition (it acts every tick)"
    met = [observation_text(o) for o in conditions if o.get("met")]
    unmet = [observation_text(o) for o in conditions if not o.get("met")]
    text = "saw " + " and ".join(met) if met else "fired with none of its comparisons met"
    if unmet:
        text += " (its any/not branches allow what did not hold: " + "; ".join(unmet) + ")"
    return text


def scope_of(conditions: Sequence[Mapping[str, Any]]) -> str:
    for o in conditions:
        prefix = str(o.get("fact", "")).split(".", 1)[0]
        if prefix in ("numa", "pod", "container"):
            return prefix
    return "node"


def short_hash(h: Any) -> str:
    return str(h)[:12]


def rule_ref(p: Mapping[str, Any]) -> str:
    """``rule be-memory-evict (builtin:rules/profiles/koordinator.yaml:284:7, policy 4465e1203873)``."""
    policy = p.get("policy") or {}
    where = f"{p.get('source')}, policy {short_hash(policy.get('hash'))}"
    if policy.get("generation"):
        where += f" generation {policy.get('generation')}"
    step = step_description(str(p.get("rule")))
    text = f"{step if step is not None else 'rule ' + str(p.get('rule'))} ({where})"
    item = p.get("item")
    items = [str(i) for i in p.get("items") or ()]
    if len(items) > 1:
        scope = scope_of(p.get("conditions") or ())
        listed = ", ".join(items)
        plural = {"numa": f" on NUMA nodes {listed}", "pod": f" for pods {listed}"}
        text += plural.get(scope, f" for {listed}")
    elif item is not None:
        scope = scope_of(p.get("conditions") or ())
        text += {"numa": f" on NUMA node {item}", "pod": f" for pod {item}"}.get(scope, f" for {item}")
    counted = (p.get("inputs") or {}).get("samples")
    if isinstance(counted, Mapping):
        # A sample-count rule fires on its count, not on this tick's comparisons alone.
        text += (
            f", after {counted.get('met')} of {counted.get('fire')} samples met"
            f" ({counted.get('towardClear')} of {counted.get('clear')} in a row toward clearing)"
        )
    return text


def because(p: Mapping[str, Any]) -> str:
    """``because rule R (where) saw ...``; a step's decision is ``because the CPU pool step of
    spec.pools (where) for shop/web keeps it so on every tick`` (steps have no conditions)."""
    if step_description(str(p.get("rule"))) is not None and not p.get("conditions"):
        return f"because {rule_ref(p)} keeps it so on every tick"
    return f"because {rule_ref(p)} {conditions_text(p.get('conditions') or ())}"
