"""A ``when`` mapping with several keys means all of them (issue 16, rule-language friction): parsed
from the raw form, compiled, and checked against an interpreter of the raw form, by hypothesis."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.config.errors import Location, PolicyError, Problem
from engine.config.load import JsonPath, json_path
from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState
from engine.features.rules.compiler import compile_condition, to_source
from engine.features.rules.conditions import AllOf, parse_condition
from engine.plan.planner import Guards
from engine.tick import run_tick
from tests.builders import pod, policy, snapshot

NODE = ["node.memory.usage_percent", "node.cpu.usage_percent", "node.psi.memory.some.avg10"]
POD = ["pod.priority", "pod.memory.usage_bytes"]
ORDER = ["lt", "lte", "gt", "gte", "eq", "ne"]


def locate(path: JsonPath) -> Location:
    return Location("test.yaml", 1, 1, json_path(path))


def parse(raw: Any) -> Any:
    problems: list[Problem] = []
    cond = parse_condition(raw, ("when",), locate, (), problems)
    assert not problems, [p.message for p in problems]
    return cond


numbers = st.integers(0, 100)


@st.composite
def comparison(draw: st.DrawFn, fact: str) -> dict[str, Any]:
    """One fact's operators: one or two order/equality ops, or in, or exists."""
    kind = draw(st.sampled_from(["order", "order2", "in", "exists"]))
    if kind == "in":
        return {"in": draw(st.lists(numbers, min_size=1, max_size=3))}
    if kind == "exists":
        return {"exists": draw(st.booleans())}
    ops = draw(st.lists(st.sampled_from(ORDER), min_size=1, max_size=2 if kind == "order2" else 1, unique=True))
    return {op: draw(numbers) for op in ops}


@st.composite
def mapping(draw: st.DrawFn, inner: st.SearchStrategy[dict[str, Any]]) -> dict[str, Any]:
    """A mapping of several keys: facts beside all/any/not, in any order."""
    keys = draw(
        st.lists(st.sampled_from([*NODE, *POD, "all", "any", "not"]), min_size=2, max_size=4, unique=True)
    )
    out: dict[str, Any] = {}
    for k in keys:
        if k in ("all", "any"):
            out[k] = draw(st.lists(inner, min_size=1, max_size=2))
        elif k == "not":
            out[k] = draw(inner)
        else:
            out[k] = draw(comparison(k))
    return out


leaves = st.sampled_from([*NODE, *POD]).flatmap(lambda f: comparison(f).map(lambda ops: {f: ops}))
conditions = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, min_size=1, max_size=3).map(lambda xs: {"all": xs}),
        st.lists(inner, min_size=1, max_size=3).map(lambda xs: {"any": xs}),
        inner.map(lambda x: {"not": x}),
        mapping(inner),
    ),
    max_leaves=8,
)


def reference(raw: dict[str, Any], node: dict[str, Any], item: dict[str, Any]) -> bool:
    """The language's meaning, from the raw form: every key of a mapping must hold."""
    results = []
    for key, value in raw.items():
        if key == "all":
            results.append(all(reference(x, node, item) for x in value))
        elif key == "any":
            results.append(any(reference(x, node, item) for x in value))
        elif key == "not":
            results.append(not reference(value, node, item))
        else:
            source = node if key.startswith("node.") else item
            v = source.get(key.split(".", 1)[1])
            for op, t in value.items():
                if op == "exists":
                    results.append((v is not None) == t)
                elif v is None:
                    results.append(False)
                elif op == "in":
                    results.append(v in t)
                else:
                    results.append(
                        {"lt": v < t, "lte": v <= t, "gt": v > t, "gte": v >= t, "eq": v == t, "ne": v != t}[op]
                    )
    return all(results)


@settings(max_examples=400, deadline=None)
@given(raw=conditions, data=st.data())
def test_mappings_of_several_keys_mean_all(raw: dict[str, Any], data: st.DataObject) -> None:
    fn = compile_condition(parse(raw))
    node = {f.split(".", 1)[1]: data.draw(numbers) for f in NODE if data.draw(st.booleans())}
    rows = []
    for _ in range(data.draw(st.integers(1, 3))):
        measured = {f.split(".", 1)[1]: data.draw(numbers) for f in POD if data.draw(st.booleans())}
        rows.append((measured, {}))
    assert fn(node, {}, rows, False) == [reference(raw, node, m) for m, _ in rows]


def test_two_facts_in_one_mapping_are_one_all() -> None:
    raw = {"node.memory.usage_percent": {"gte": 70}, "node.cpu.usage_percent": {"gte": 80}}
    wrapped = {"all": [{"node.memory.usage_percent": {"gte": 70}}, {"node.cpu.usage_percent": {"gte": 80}}]}
    assert to_source(parse(raw)) == to_source(parse(wrapped))  # the same generated code
    assert isinstance(parse(raw), AllOf)
    assert [c.path for c in parse(raw).items] == [("when", "node.memory.usage_percent", "gte"),
                                                  ("when", "node.cpu.usage_percent", "gte")]


RULE = """\
classes:
  - {name: be, match: [{labels: {tier: be}}]}
rules:
  - name: both
    when: {node.memory.usage_percent: {gte: 70}, node.cpu.usage_percent: {gte: 80}}
    then: {evict: {victims: {classes: [be]}, release: {lowerPercent: 60}}}
"""


@pytest.mark.parametrize(
    ("memory", "cpu", "fires"), [(75.0, 85.0, True), (75.0, 50.0, False), (50.0, 85.0, False)]
)
def test_a_rule_with_two_facts_fires_only_when_both_hold(memory: float, cpu: float, fires: bool) -> None:
    engine = Engine(policy(RULE))
    snap = snapshot(
        node={"memory.usage_percent": memory, "cpu.usage_percent": cpu, "memory.usage_bytes": memory / 100 * 64 * 2**30},
        pods=[pod("b1", labels={"tier": "be"})],
        pod_metrics={"b1": {"memory.usage_bytes": 4 * 2**30}},
    )
    result = run_tick(engine, snap, EngineState(), Guards())
    assert ("both" in result.evaluation.fired) is fires


def test_an_unknown_fact_beside_others_is_located_at_its_key() -> None:
    with pytest.raises(PolicyError) as exc:
        policy(RULE.replace("node.cpu.usage_percent: {gte: 80}", "node.cpu.usage_pct: {gte: 80}"))
    [problem] = [p for p in exc.value.problems if "unknown fact" in p.message]
    assert problem.location.path == "$.spec.rules[0].when['node.cpu.usage_pct']"
