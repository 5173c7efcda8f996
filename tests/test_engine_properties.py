"""Property tests: generated condition code agrees with a reference interpreter; planner invariants."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.config.policy import QoSClass
from engine.evaluate.factview import item_facts, read
from engine.features.rules.compiler import compile_condition
from engine.features.rules.conditions import AllOf, AnyOf, Compare, Condition, Not
from engine.model.factnames import registry
from engine.model.intents import EvictIntent, Provenance
from engine.plan.planner import Guards, plan
from tests.builders import policy

NUMERIC = [
    "node.memory.usage_percent", "node.cpu.usage_cores", "numa.memory.free_bytes", "class.be.pods", "pod.priority",
    "pod.memory.rss_over_request", "pod.cpu.usage_over_request",
]
# Ratio facts a collector may send or the engine computes from numerator / denominator.
RATIO_PARTS = {
    "memory.rss_over_request": ("memory.rss_bytes", "memory.request_bytes"),
    "cpu.usage_over_request": ("cpu.usage_cores", "cpu.request_cores"),
}
TEXT = ["pod.class", "pod.kube_qos"]


def make_compare(fact: str, op: str, value: Any, window: float | None, hysteresis: float | None) -> Compare:
    ref = registry().resolve(fact)
    assert ref is not None
    agg = "avg" if window else "last"
    return Compare(fact, ref.spec, op, value, window, agg, hysteresis, ref.class_name, ())


numbers = st.one_of(st.integers(-5, 100), st.floats(-5, 100, allow_nan=False))


@st.composite
def compares(draw: st.DrawFn) -> Compare:
    if draw(st.booleans()):
        fact = draw(st.sampled_from(NUMERIC))
        op = draw(st.sampled_from(["eq", "ne", "lt", "lte", "gt", "gte", "in", "exists"]))
        if op == "in":
            value: Any = draw(st.lists(numbers, min_size=1, max_size=3))
        elif op == "exists":
            value = draw(st.booleans())
        else:
            value = draw(numbers)
        spec = registry().resolve(fact)
        window = draw(st.sampled_from([None, 60.0, 300.0])) if spec and spec.spec.series else None
        hyst = draw(st.sampled_from([None, 2.0])) if op in ("lt", "lte", "gt", "gte") else None
        return make_compare(fact, op, value, window, hyst)
    fact = draw(st.sampled_from(TEXT))
    op = draw(st.sampled_from(["eq", "ne", "in", "exists"]))
    words = st.sampled_from(["be", "ls", "Guaranteed", "BestEffort"])
    value = draw(st.lists(words, min_size=1, max_size=2)) if op == "in" else draw(st.booleans()) if op == "exists" else draw(words)
    return make_compare(fact, op, value, None, None)


conditions = st.recursive(
    compares(),
    lambda inner: st.one_of(
        st.lists(inner, min_size=1, max_size=3).map(lambda xs: AllOf(tuple(xs))),
        st.lists(inner, min_size=1, max_size=3).map(lambda xs: AnyOf(tuple(xs))),
        inner.map(Not),
    ),
    max_leaves=8,
)


def key_of(c: Compare) -> str:
    """Independent of the compiler: where a comparison's value lives."""
    path = ".".join(c.spec.path)
    if c.window is not None and c.agg != "last":
        path += f"@{c.agg}:{c.window:g}s"
    return f"class.{c.class_name}.{path}" if c.spec.scope == "class" else path


def reference(cond: Condition, n: dict[str, Any], c: dict[str, Any], i: dict[str, Any], latched: bool) -> bool:
    if isinstance(cond, AllOf):
        return all(reference(x, n, c, i, latched) for x in cond.items)
    if isinstance(cond, AnyOf):
        return any(reference(x, n, c, i, latched) for x in cond.items)
    if isinstance(cond, Not):
        return not reference(cond.item, n, c, i, latched)
    source = {"node": n, "class": c}.get(cond.spec.scope, i)
    key = key_of(cond)
    v = source.get(key)
    if v is None and source is i and key in RATIO_PARTS:
        num, den = (i.get(k) for k in RATIO_PARTS[key])
        v = num / den if num is not None and den else None
    if cond.op == "exists":
        return (v is not None) == cond.value
    if v is None:
        return False
    t = cond.value
    if cond.hysteresis is not None and latched:
        t = t - cond.hysteresis if cond.op in ("gt", "gte") else t + cond.hysteresis
    return {
        "eq": lambda: v == t, "ne": lambda: v != t, "lt": lambda: v < t, "lte": lambda: v <= t,
        "gt": lambda: v > t, "gte": lambda: v >= t, "in": lambda: v in t,
    }[cond.op]()


@settings(max_examples=400, deadline=None)
@given(cond=conditions, data=st.data(), latched=st.booleans())
def test_generated_code_matches_the_reference(cond: Condition, data: st.DataObject, latched: bool) -> None:
    """The generated function answers for a batch of items, in order, as the reference does for each."""
    fn = compile_condition(cond)
    keys = [
        "memory.usage_percent", "cpu.usage_cores", "cpu.usage_cores@avg:60s", "cpu.usage_cores@avg:300s",
        "memory.usage_percent@avg:60s", "memory.usage_percent@avg:300s",
    ]
    n: dict[str, Any] = {k: data.draw(numbers) for k in keys if data.draw(st.booleans())}
    c = {"class.be.pods": data.draw(numbers)} if data.draw(st.booleans()) else {}
    item_keys = [
        "memory.free_bytes", "priority", "memory.free_bytes@avg:60s", "memory.free_bytes@avg:300s",
        "memory.rss_over_request", "memory.rss_bytes", "memory.request_bytes", "cpu.usage_cores",
        "cpu.request_cores",
    ]
    rows: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for _ in range(data.draw(st.integers(0, 3))):
        # Each fact measured, derived, both (the measured value wins) or absent.
        measured: dict[str, Any] = {}
        derived: dict[str, Any] = {}
        words = st.sampled_from(["be", "ls", "Guaranteed", "BestEffort"])
        for k in [*item_keys, "class", "kube_qos"]:
            values = words if k in ("class", "kube_qos") else numbers
            where = data.draw(st.sampled_from(["measured", "derived", "both", "absent"]))
            if where in ("measured", "both"):
                measured[k] = data.draw(values)
            if where in ("derived", "both"):
                derived[k] = data.draw(values)
        rows.append((measured, derived))
    expected = [reference(cond, n, c, {**d, **m}, latched) for m, d in rows]
    assert fn(n, c, rows, latched) == expected
    # The merged view strategies read gives the same facts.
    for m, d in rows:
        merged = item_facts(m, d)
        for k in item_keys:
            assert merged[k] == read((m, d), k)


POLICY = policy(
    """
classes:
  - {name: sys, protected: true, match: [{labels: {tier: sys}}]}
  - {name: be, match: [{labels: {tier: be}}]}
"""
)


@st.composite
def evict_intents(draw: st.DrawFn) -> EvictIntent:
    uid = draw(st.sampled_from(["a", "b", "c", "d", "e", "f"]))
    cls = draw(st.sampled_from(["sys", "be", None]))
    mode = draw(st.sampled_from(["enforce", "enforce", "audit"]))
    prov = Provenance(draw(st.sampled_from(["r1", "r2"])), "h", 0, "x.yaml:1:1", mode)
    return EvictIntent(uid, "ns", uid, cls, 1, (), 1.0, None, None, prov)


@settings(max_examples=300, deadline=None)
@given(intents=st.lists(evict_intents(), max_size=12), burst=st.integers(0, 5), dry=st.booleans())
def test_planner_invariants(intents: list[EvictIntent], burst: int, dry: bool) -> None:
    result = plan(tuple(intents), POLICY, Guards(dry_run=dry, eviction_burst=burst))
    ops = [op for op in result.operations if op.kind == "evictPod"]
    assert len(ops) <= burst
    assert len({op.uid for op in ops}) == len(ops)  # never the same pod twice
    if dry:
        assert ops == []
    protected = {n for n, c in POLICY.class_index.items() if isinstance(c, QoSClass) and c.protected}
    for op in ops:
        sources = [i for i in intents if i.uid == op.uid and not i.provenance.audit]
        assert any(i.class_name not in protected for i in sources)
    audited = [i for i in intents if i.provenance.audit]
    assert all(any(h.intent is a for h in result.held) for a in audited)
    assert len(result.operations) + len(result.held) == len(intents)
