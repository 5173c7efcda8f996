"""The durable-rules backend gives the same answers, and the same decisions, as the Python backend.

(a) table tests: every operator and combinator, missing and NaN facts, hysteresis, class and item
facts, one call at a time through both backends; (b) the differential test: hypothesis-generated
snapshot sequences near the bundled rules' thresholds, ``run_tick`` with both backends tick by tick,
identical intents, operations and state; (c) durable's limits and the worker's failure modes.
Everything that starts a worker is skipped, with the reason, when durable_rules cannot be imported.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import importlib
import importlib.util
import json
import math
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.config.pipeline import REFERENCE_NODE, build_policy, load_documents
from engine.config.policy import Policy
from engine.evaluate.engine import Engine
from engine.evaluate.factview import Row
from engine.evaluate.state import EngineState
from engine.features.rules import durable
from engine.features.rules.compiler import PythonBackend, compile_rules, fact_key, relaxed
from engine.features.rules.conditions import AllOf, AnyOf, Compare, Condition, Not, comparisons
from engine.features.rules.durable import INSTALL_HINT, DurableBackend, DurableBackendError, translate
from engine.model.factnames import FactSpec, registry
from engine.model.facts import Container, Cpu, Metrics, Snapshot, Topology, Workload
from engine.model.node import NodeInfo
from engine.plan.planner import Guards
from engine.resources import bundled_policy_files
from engine.tick import TickResult, run_tick

try:
    importlib.import_module("durable_rules_engine")
    HAVE_DURABLE, WHY_NOT = True, ""
except ImportError as exc:
    HAVE_DURABLE, WHY_NOT = False, f"{exc}"

NO_DURABLE = f"durable_rules cannot be imported ({WHY_NOT}): optional extra, pip install 'qosd[durable]' on Python < 3.13"


def needs_durable(test: Callable[..., None]) -> Callable[..., None]:
    """Skips without durable_rules; marked ``durable``, so the skip fails the run where it is
    importable (tests/realparts.py)."""
    return pytest.mark.durable(pytest.mark.skipif(not HAVE_DURABLE, reason=NO_DURABLE)(test))


GiB = float(1 << 30)
NAN, INF = math.nan, math.inf
REG = registry()
FLAG = FactSpec("pod.flag", "pod", ("flag",), "boolean", False)  # no boolean fact is registered yet


# ---------------------------------------------------------------- building conditions and policies


def fact(name: str, op: str, value: Any, hysteresis: float | None = None, window: float | None = None,
         agg: str | None = None) -> Compare:  # fmt: skip
    if name == "pod.flag":
        spec, class_name = FLAG, None
    else:
        ref = REG.resolve(name)
        assert ref is not None, name
        spec, class_name = ref.spec, ref.class_name
    return Compare(name, spec, op, value, window, agg or ("avg" if window else "last"), hysteresis,
                   class_name, ("case",))  # fmt: skip


def base_policy() -> Policy:
    return build_policy(load_documents([]), dataclasses.replace(REFERENCE_NODE, name="table"))


def policy_with(conditions: Sequence[tuple[Condition | None, Condition | None]]) -> Policy:
    """The default policy with its rules replaced by these (when, clearWhen) pairs."""
    base = base_policy()
    template = base.rules[0]
    rules = tuple(
        dataclasses.replace(template, name=f"case-{i}", index=i, when=w, clear_when=c, actions=())
        for i, (w, c) in enumerate(conditions)
    )
    return dataclasses.replace(base, rules=rules)


# ---------------------------------------------------------------- (a) table tests

MEM = "node.memory.usage_percent"  # N: memory.usage_percent
PSI = "node.psi.memory.some.avg10"  # N: psi.memory.some.avg10
WM = "numa.memory.below_watermark_count"  # I
QOS = "pod.kube_qos"  # I, string
SAT = "class.reclaimed_cores.cpu.satisfaction"  # C


def n(**values: Any) -> dict[str, Any]:
    """Node facts by short name."""
    names = {"mem": "memory.usage_percent", "psi": "psi.memory.some.avg10", "cpus": "cpus"}
    return {names[k]: v for k, v in values.items() if v is not None}


gt80, eq95, ne95 = fact(MEM, "gt", 80), fact(MEM, "eq", 95), fact(MEM, "ne", 95)
psi15 = fact(PSI, "gte", 15)
hot = fact(MEM, "gt", 80, hysteresis=5)
cold = fact(MEM, "lt", 20, hysteresis=5)

NO_FACTS: Row = ({}, {})  # an item without facts (node-scoped rules read none)

# (id, condition, node facts, class facts, item facts: a (measured, derived) row or measured only,
#  latched, expected)
CASES: list[tuple[str, Condition, dict[str, Any], dict[str, Any], Any, bool, bool]] = [
    ("eq-int", eq95, n(mem=95), {}, NO_FACTS, False, True),
    ("eq-float", eq95, n(mem=95.0), {}, NO_FACTS, False, True),
    ("eq-near", eq95, n(mem=94.99999999999999), {}, NO_FACTS, False, False),
    ("eq-missing", eq95, n(), {}, NO_FACTS, False, False),
    ("eq-nan", eq95, n(mem=NAN), {}, NO_FACTS, False, False),
    ("ne-same", ne95, n(mem=95), {}, NO_FACTS, False, False),
    ("ne-other", ne95, n(mem=96), {}, NO_FACTS, False, True),
    ("ne-missing", ne95, n(), {}, NO_FACTS, False, False),
    ("ne-nan", ne95, n(mem=NAN), {}, NO_FACTS, False, True),
    ("lt-below", fact(MEM, "lt", 80), n(mem=79.9), {}, NO_FACTS, False, True),
    ("lt-equal", fact(MEM, "lt", 80), n(mem=80), {}, NO_FACTS, False, False),
    ("lt-negative", fact(MEM, "lt", 80), n(mem=-5), {}, NO_FACTS, False, True),
    ("lt-minus-inf", fact(MEM, "lt", 80), n(mem=-INF), {}, NO_FACTS, False, True),
    ("lt-missing", fact(MEM, "lt", 80), n(), {}, NO_FACTS, False, False),
    ("lt-nan", fact(MEM, "lt", 80), n(mem=NAN), {}, NO_FACTS, False, False),
    ("lte-equal", fact(MEM, "lte", 80), n(mem=80), {}, NO_FACTS, False, True),
    ("lte-above", fact(MEM, "lte", 80), n(mem=80.0000001), {}, NO_FACTS, False, False),
    ("gt-equal", gt80, n(mem=80), {}, NO_FACTS, False, False),
    ("gt-next-float", gt80, n(mem=math.nextafter(80, INF)), {}, NO_FACTS, False, True),
    ("gt-inf", gt80, n(mem=INF), {}, NO_FACTS, False, True),
    ("gt-missing", gt80, n(), {}, NO_FACTS, False, False),
    ("gt-nan", gt80, n(mem=NAN), {}, NO_FACTS, False, False),
    ("gte-equal", fact(MEM, "gte", 80), n(mem=80), {}, NO_FACTS, False, True),
    ("gte-below", fact(MEM, "gte", 80), n(mem=79.999), {}, NO_FACTS, False, False),
    ("gt-tiny-threshold", fact(MEM, "gt", 0.00001), n(mem=0.00002), {}, NO_FACTS, False, True),
    ("gt-tiny-equal", fact(MEM, "gt", 0.00001), n(mem=1e-05), {}, NO_FACTS, False, False),
    ("gt-subnormal", fact(MEM, "gt", 1e-300), n(mem=5e-324), {}, NO_FACTS, False, False),
    ("lt-huge-threshold", fact(MEM, "lt", 1e20), n(mem=1e19), {}, NO_FACTS, False, True),
    ("lt-huge-value", fact(MEM, "lt", 1e20), n(mem=2e20), {}, NO_FACTS, False, False),
    ("eq-integer-fact", fact("node.cpus", "eq", 16), n(cpus=16), {}, NO_FACTS, False, True),
    ("exists-present", fact(MEM, "exists", True), n(mem=0), {}, NO_FACTS, False, True),
    ("exists-missing", fact(MEM, "exists", True), n(), {}, NO_FACTS, False, False),
    ("exists-nan", fact(MEM, "exists", True), n(mem=NAN), {}, NO_FACTS, False, True),
    ("absent-missing", fact(MEM, "exists", False), n(), {}, NO_FACTS, False, True),
    ("absent-present", fact(MEM, "exists", False), n(mem=0), {}, NO_FACTS, False, False),
    ("absent-nan", fact(MEM, "exists", False), n(mem=NAN), {}, NO_FACTS, False, False),
    ("in-member", fact(MEM, "in", [1, 2.5, 95]), n(mem=95.0), {}, NO_FACTS, False, True),
    ("in-int-member", fact(MEM, "in", [1, 2.5, 95]), n(mem=1), {}, NO_FACTS, False, True),
    ("in-other", fact(MEM, "in", [1, 2.5, 95]), n(mem=3), {}, NO_FACTS, False, False),
    ("in-missing", fact(MEM, "in", [1, 2.5, 95]), n(), {}, NO_FACTS, False, False),
    ("in-nan", fact(MEM, "in", [1, 2.5, 95]), n(mem=NAN), {}, NO_FACTS, False, False),
    ("in-empty", fact(MEM, "in", []), n(mem=3), {}, NO_FACTS, False, False),
    ("not-in-other", Not(fact(MEM, "in", [1, 95])), n(mem=3), {}, NO_FACTS, False, True),
    ("not-in-member", Not(fact(MEM, "in", [1, 95])), n(mem=95), {}, NO_FACTS, False, False),
    ("not-in-missing", Not(fact(MEM, "in", [1, 95])), n(), {}, NO_FACTS, False, True),
    ("not-in-nan", Not(fact(MEM, "in", [1, 95])), n(mem=NAN), {}, NO_FACTS, False, True),
    ("not-gt-missing", Not(gt80), n(), {}, NO_FACTS, False, True),
    ("not-gt-below", Not(gt80), n(mem=70), {}, NO_FACTS, False, True),
    ("not-gt-above", Not(gt80), n(mem=90), {}, NO_FACTS, False, False),
    ("not-gt-nan", Not(gt80), n(mem=NAN), {}, NO_FACTS, False, True),
    ("not-eq-missing", Not(eq95), n(), {}, NO_FACTS, False, True),
    ("not-eq-same", Not(eq95), n(mem=95), {}, NO_FACTS, False, False),
    ("not-ne-missing", Not(ne95), n(), {}, NO_FACTS, False, True),
    ("not-ne-same", Not(ne95), n(mem=95), {}, NO_FACTS, False, True),
    ("not-ne-other", Not(ne95), n(mem=96), {}, NO_FACTS, False, False),
    ("not-ne-nan", Not(ne95), n(mem=NAN), {}, NO_FACTS, False, False),
    ("not-exists", Not(fact(MEM, "exists", True)), n(), {}, NO_FACTS, False, True),
    ("not-not", Not(Not(gt80)), n(mem=90), {}, NO_FACTS, False, True),
    ("all-both", AllOf((fact(MEM, "gt", 50), fact(PSI, "lt", 10))), n(mem=60, psi=5), {}, NO_FACTS, False, True),
    ("all-one", AllOf((fact(MEM, "gt", 50), fact(PSI, "lt", 10))), n(mem=60, psi=15), {}, NO_FACTS, False, False),
    ("all-missing", AllOf((fact(MEM, "gt", 50), fact(PSI, "lt", 10))), n(psi=5), {}, NO_FACTS, False, False),
    ("any-first", AnyOf((fact(MEM, "gt", 90), psi15)), n(mem=95), {}, NO_FACTS, False, True),
    ("any-second", AnyOf((fact(MEM, "gt", 90), psi15)), n(psi=20), {}, NO_FACTS, False, True),
    ("any-both-branches", AnyOf((fact(MEM, "gt", 90), psi15)), n(mem=95, psi=20), {}, NO_FACTS, False, True),
    ("any-none", AnyOf((fact(MEM, "gt", 90), psi15)), n(), {}, NO_FACTS, False, False),
    ("not-any-none", Not(AnyOf((fact(MEM, "gt", 90), psi15))), n(), {}, NO_FACTS, False, True),
    ("not-any-both", Not(AnyOf((fact(MEM, "gt", 90), psi15))), n(mem=95, psi=20), {}, NO_FACTS, False, False),
    ("not-all-one", Not(AllOf((fact(MEM, "gt", 50), fact(PSI, "lt", 10)))), n(mem=60, psi=15), {}, NO_FACTS, False, True),
    ("not-all-both", Not(AllOf((fact(MEM, "gt", 50), fact(PSI, "lt", 10)))), n(mem=60, psi=5), {}, NO_FACTS, False, False),
    ("not-all-missing", Not(AllOf((fact(MEM, "gt", 50), fact(PSI, "lt", 10)))), n(), {}, NO_FACTS, False, True),
    ("all-empty", AllOf(()), n(), {}, NO_FACTS, False, True),
    ("any-empty", AnyOf(()), n(mem=1), {}, NO_FACTS, False, False),
    ("not-any-empty", Not(AnyOf(())), n(), {}, NO_FACTS, False, True),
    ("not-all-empty", Not(AllOf(())), n(), {}, NO_FACTS, False, False),
    ("all-with-empty-any", AllOf((AnyOf(()), gt80)), n(mem=90), {}, NO_FACTS, False, False),
    ("any-with-empty-all", AnyOf((AllOf(()), gt80)), n(), {}, NO_FACTS, False, True),
    ("nested", AllOf((AnyOf((gt80, Not(psi15))), Not(AnyOf((eq95, AllOf((ne95, fact(PSI, "lt", 1)))))))),
     n(mem=85, psi=0.5), {}, NO_FACTS, False, False),
    ("nested-true", AllOf((AnyOf((gt80, Not(psi15))), Not(AnyOf((eq95, AllOf((ne95, fact(PSI, "lt", 1)))))))),
     n(mem=85, psi=2), {}, NO_FACTS, False, True),
    ("hysteresis-latched-inside", hot, n(mem=76), {}, NO_FACTS, True, True),
    ("hysteresis-latched-edge", hot, n(mem=75), {}, NO_FACTS, True, False),
    ("hysteresis-latched-missing", hot, n(), {}, NO_FACTS, True, False),
    ("hysteresis-unlatched", hot, n(mem=76), {}, NO_FACTS, False, False),
    ("hysteresis-unlatched-above", hot, n(mem=81), {}, NO_FACTS, False, True),
    ("hysteresis-lt-latched", cold, n(mem=24), {}, NO_FACTS, True, True),
    ("hysteresis-lt-latched-edge", cold, n(mem=25), {}, NO_FACTS, True, False),
    ("hysteresis-lt-unlatched", cold, n(mem=24), {}, NO_FACTS, False, False),
    ("hysteresis-not-latched", Not(hot), n(mem=76), {}, NO_FACTS, True, False),
    ("hysteresis-mixed", AllOf((hot, psi15)), n(mem=77, psi=15), {}, NO_FACTS, True, True),
    ("several-ops-inside", AllOf((fact(WM, "gt", 6), fact(WM, "lt", 12))), {}, {}, ({"memory.below_watermark_count": 7}, {}), False, True),
    ("several-ops-edge", AllOf((fact(WM, "gt", 6), fact(WM, "lt", 12))), {}, {}, ({"memory.below_watermark_count": 12}, {}), False, False),
    ("several-ops-missing", AllOf((fact(WM, "gt", 6), fact(WM, "lt", 12))), {}, {}, NO_FACTS, False, False),
    ("str-eq", fact(QOS, "eq", "BestEffort"), {}, {}, {"kube_qos": "BestEffort"}, False, True),
    ("str-eq-prefix", fact(QOS, "eq", "BestEffort"), {}, {}, {"kube_qos": "Best"}, False, False),
    ("str-eq-longer", fact(QOS, "eq", "Best"), {}, {}, {"kube_qos": "BestEffort"}, False, False),
    ("str-eq-missing", fact(QOS, "eq", "BestEffort"), {}, {}, NO_FACTS, False, False),
    ("str-ne", fact(QOS, "ne", "BestEffort"), {}, {}, {"kube_qos": "Burstable"}, False, True),
    ("str-ne-missing", fact(QOS, "ne", "BestEffort"), {}, {}, NO_FACTS, False, False),
    ("str-in", fact(QOS, "in", ["Guaranteed", "Burstable"]), {}, {}, {"kube_qos": "Burstable"}, False, True),
    ("str-in-other", fact(QOS, "in", ["Guaranteed", "Burstable"]), {}, {}, {"kube_qos": "BestEffort"}, False, False),
    ("str-not-in-missing", Not(fact(QOS, "in", ["Guaranteed"])), {}, {}, NO_FACTS, False, True),
    ("str-numeric-looking", fact("pod.name", "eq", "95"), {}, {}, {"name": "95.0"}, False, False),
    ("str-numeric-same", fact("pod.name", "eq", "95"), {}, {}, {"name": "95"}, False, True),
    ("str-escapes", fact("pod.name", "eq", 'a"b\\c é ☃'), {}, {}, {"name": 'a"b\\c é ☃'}, False, True),
    ("str-escapes-other", fact("pod.name", "eq", 'a"b\\c'), {}, {}, {"name": 'a"b\\d'}, False, False),
    ("str-empty", fact("pod.namespace", "ne", ""), {}, {}, {"namespace": ""}, False, False),
    ("bool-eq-true", fact("pod.flag", "eq", True), {}, {}, {"flag": True}, False, True),
    ("bool-eq-false", fact("pod.flag", "eq", True), {}, {}, {"flag": False}, False, False),
    ("bool-eq-missing", fact("pod.flag", "eq", False), {}, {}, NO_FACTS, False, False),
    ("bool-ne", fact("pod.flag", "ne", True), {}, {}, {"flag": False}, False, True),
    ("bool-in", fact("pod.flag", "in", [False]), {}, {}, {"flag": False}, False, True),
    ("bool-not-eq-missing", Not(fact("pod.flag", "eq", True)), {}, {}, NO_FACTS, False, True),
    ("class-fact", fact(SAT, "lt", 0.2), {}, {"class.reclaimed_cores.cpu.satisfaction": 0.1}, NO_FACTS, False, True),
    ("class-fact-edge", fact(SAT, "lt", 0.2), {}, {"class.reclaimed_cores.cpu.satisfaction": 0.2}, NO_FACTS, False, False),
    ("class-fact-missing", fact(SAT, "lt", 0.2), {}, {}, NO_FACTS, False, False),
    ("class-pods-integer", fact("class.reclaimed_cores.pods", "gte", 3), {}, {"class.reclaimed_cores.pods": 3}, NO_FACTS, False, True),
    ("window-key", fact(PSI, "gte", 15, window=15.0, agg="min"), {"psi.memory.some.avg10@min:15s": 20.0}, {}, NO_FACTS, False, True),
    ("window-key-not-last", fact(PSI, "gte", 15, window=15.0, agg="min"), n(psi=20), {}, NO_FACTS, False, False),
    ("item-ratio", fact("pod.memory.usage_over_request", "gt", 1.05), {}, {}, ({"memory.usage_bytes": 110.0}, {"memory.request_bytes": 100.0}), False, True),
    ("item-ratio-no-request", fact("pod.memory.usage_over_request", "gt", 1.05), {}, {}, ({"memory.usage_bytes": 110.0}, {"memory.request_bytes": 0.0}), False, False),
    ("item-derived", fact("pod.priority", "lte", 5999), {}, {}, ({}, {"priority": 5500}), False, True),
    ("item-measured-wins", fact("pod.priority", "lte", 5999), {}, {}, ({"priority": 7000}, {"priority": 5500}), False, False),
]  # fmt: skip


class Pair:
    """Both backends over one policy; ``when(i, ...)`` evaluates rule i's when with both."""

    def __init__(self, policy: Policy, **kwargs: Any):
        self.policy = policy
        self.rules = compile_rules(policy)
        self.py = PythonBackend(self.rules)
        self.du = DurableBackend(policy, self.rules, **kwargs)

    def both(self, node: Any, classes: Any, calls: list[Any]) -> tuple[list[bool], list[bool]]:
        return self.py.evaluate_many(node, classes, calls), self.du.evaluate_many(node, classes, calls)


@pytest.fixture(scope="module")
def table() -> Iterator[Pair]:
    pair = Pair(policy_with([(case[1], None) for case in CASES]))
    yield pair
    pair.du.close()


@needs_durable
@pytest.mark.parametrize("index", range(len(CASES)), ids=[c[0] for c in CASES])
def test_operator_table(table: Pair, index: int) -> None:
    _, _, node, classes, item, latched, expected = CASES[index]
    row: Row = item if isinstance(item, tuple) else (item, {})
    py, du = table.both(node, classes, [(index, "when", [row], latched)])
    assert py == [expected], "the table's expectation disagrees with the Python backend"
    assert du == py


@needs_durable
def test_whole_table_as_one_batch(table: Pair) -> None:
    """All cases in one batch (one round trip), with when/clear mixed: answers stay in call order."""
    node: dict[str, Any] = {"memory.usage_percent": 85.0, "psi.memory.some.avg10": 2.0, "cpus": 16}
    classes = {"class.reclaimed_cores.cpu.satisfaction": 0.1, "class.reclaimed_cores.pods": 4}
    items = [
        NO_FACTS,
        ({"memory.below_watermark_count": 8}, {"kube_qos": "Burstable"}),
        ({"flag": True}, {}),
    ]
    calls = [
        (i, "when", [item], latched) for i in range(len(CASES)) for item in items for latched in (False, True)
    ]
    py, du = table.both(node, classes, calls)
    assert du == py
    assert 0 < sum(py) < len(py)


@needs_durable
def test_clear_when_and_rules_without_condition() -> None:
    pair = Pair(policy_with([(gt80, fact(MEM, "lt", 60)), (None, None), (None, gt80)]))
    try:
        calls = [(0, "when", [NO_FACTS], False), (0, "clear", [NO_FACTS], False), (1, "when", [NO_FACTS], False),
                 (2, "when", [NO_FACTS], True), (2, "clear", [NO_FACTS], False)]  # fmt: skip
        for mem in (50, 70, 90, None):
            py, du = pair.both(n(mem=mem), {}, calls)
            assert du == py
        assert pair.du.evaluate_many({}, {}, []) == []
    finally:
        pair.du.close()


@needs_durable
def test_wrongly_typed_values_never_reach_durable() -> None:
    """durable treats "95" > 80 as true. A value of the wrong kind is sent as "present, not comparable"
    (like NaN): the same answers as the Python backend for single comparisons and conjunctions."""
    wm_gt = fact(WM, "gt", 6)
    conditions: list[Condition] = [gt80, ne95, eq95, fact(MEM, "exists", True), AllOf((gt80, psi15)), fact(QOS, "eq", "BestEffort"),
                                   fact(QOS, "ne", "BestEffort"), fact("pod.flag", "eq", True), wm_gt, fact(MEM, "in", [95])]  # fmt: skip
    pair = Pair(policy_with([(c, None) for c in conditions]))
    try:
        calls = [
            (i, "when", [({"kube_qos": 3, "flag": "true", "memory.below_watermark_count": [7]}, {})], False)
            for i in range(len(conditions))
        ]
        for mem in ("95", "x", b"95", True, 10**400, [95]):
            py, du = pair.both(n(mem=mem, psi=20), {}, calls)
            assert du == py, mem
        assert pair.du.evaluate_many(n(mem="95"), {}, calls[:1]) == [False]  # durable alone: "95" > 80
        assert pair.both(n(mem=True), {}, [(0, "when", [NO_FACTS], False)]) == ([False], [False])
    finally:
        pair.du.close()


# ---------------------------------------------------------------- translation, without a worker


def test_numbers_are_written_for_durables_parser() -> None:
    number = durable._number
    assert number(1e-05) == "1.0e-05"
    assert number(1e20) == "1.0e+20"
    assert number(5e-324) == "5.0e-324"
    assert number(1.5e-07) == "1.5e-07"
    assert number(68719476.0) == "68719476.0"
    assert number(-0.5) == "-0.5"
    assert number(INF) == "1.7976931348623157e+308"
    assert number(-INF) == "-1.7976931348623157e+308"
    for x in (1e-05, 1e20, 5e-324, 0.1, 1 / 3, 123456789.125):
        assert float(number(x)) == x


def test_bundled_policy_translates_to_one_rule_per_condition() -> None:
    policy = base_policy()
    plan = translate(policy, compile_rules(policy))
    definition = json.loads(plan.definition_json)
    conditions = sum((r.when is not None) + (r.clear_when is not None) for r in policy.rules)
    assert plan.routes == conditions
    assert set(definition) == {f"r{i}" for i in range(conditions)} | {"none"}
    assert definition["none"] == {"pri": 1, "all": [{"m": {"$ex": {"qosd": 1}}}]}
    # `not` is pushed down: absent or the opposite comparison, never durable's sequence-level $not.
    # (The bundled rules no longer negate anything, so a rule of its own shows it.)
    assert "$not" not in plan.definition_json
    negated = policy_with([(Not(fact(PSI, "gte", 15, window=45.0, agg="min")), None)])
    pushed = translate(negated, compile_rules(negated)).definition_json
    assert "$not" not in pushed
    assert '{"$or":[{"$nex":{"a0":1}},{"$lt":{"a0":15.0}}]}' in pushed


def test_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    policy = base_policy()
    with pytest.raises(DurableBackendError) as err:
        DurableBackend(policy, compile_rules(policy))
    assert (
        str(err.value)
        == INSTALL_HINT
        == "durable-rules is not installed: pip install 'qosd[durable]' (Python < 3.13)"
    )
    with pytest.raises(DurableBackendError, match="not installed"):
        Engine(policy, backend="durable")


def test_installed_but_not_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """What Python 3.13 users see: the package builds, the import fails (undefined PyEval_CallObject)."""
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name: object() if name == "durable_rules_engine" else real(name),
    )
    monkeypatch.setattr(
        durable,
        "_WORKER_COMMAND",
        "import sys; sys.modules['durable_rules_engine'] = None; " + durable._WORKER_COMMAND,
    )
    policy = base_policy()
    with pytest.raises(DurableBackendError, match=r"installed but cannot be imported .*Python < 3.13"):
        DurableBackend(policy, compile_rules(policy))


def test_worker_that_dies_or_hangs_while_starting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    policy = base_policy()
    monkeypatch.setattr(durable, "_WORKER_COMMAND", "import os; os._exit(3)")
    with pytest.raises(DurableBackendError, match="died while starting"):
        DurableBackend(policy, compile_rules(policy))
    # A worker that sleeps through its start: the backend gives up at its deadline and kills it. The
    # worker is caught as it is spawned; had the backend waited it out, it would have exited 0 by itself.
    spawned: list[subprocess.Popen[bytes]] = []
    real_popen = subprocess.Popen

    def spy(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        spawned.append(real_popen(*args, **kwargs))
        return spawned[-1]

    monkeypatch.setattr(durable.subprocess, "Popen", spy)
    monkeypatch.setattr(durable, "_WORKER_COMMAND", "import time; time.sleep(60)")
    with pytest.raises(DurableBackendError, match=r"did not start within 1s .* it was killed"):
        DurableBackend(policy, compile_rules(policy), start_timeout=1.0)
    (worker,) = spawned
    assert worker.poll() is not None, "the backend returned but left the hung worker running"
    assert worker.returncode < 0, f"the worker was not killed but exited with {worker.returncode}"


def test_conditions_beyond_durables_limits_are_refused_up_front() -> None:
    """An alpha node with > 511 children makes create_ruleset spin forever: refuse before starting."""
    policy = policy_with([(fact(MEM, "in", list(range(150))), None)])
    with pytest.raises(DurableBackendError, match=r"rule 'case-0' when .* too large for durable-rules"):
        translate(policy, compile_rules(policy))
    wide = AllOf(tuple(AnyOf((fact(MEM, "gt", i), fact(PSI, "lt", i))) for i in range(16)))  # 2**16 terms
    policy = policy_with([(wide, None)])
    with pytest.raises(DurableBackendError, match="too large"):
        translate(policy, compile_rules(policy))


# ---------------------------------------------------------------- big and deep policies


def random_node(rng: random.Random, thresholds: list[float]) -> dict[str, Any]:
    def value() -> Any:
        t = rng.choice(thresholds)
        return rng.choice([None, t, t - 0.5, t + 0.5, t - 5, t + 5, math.nextafter(t, INF), int(t)])

    return {k: v for k in ("memory.usage_percent", "psi.memory.some.avg10") if (v := value()) is not None}


@needs_durable
def test_deep_condition_is_split_into_dnf_terms() -> None:
    """More than 15 all/any nodes do not fit one durable rule (error 113): one rule per DNF term."""
    deep = AnyOf(tuple(AllOf((fact(MEM, "gt", 3 * i), fact(PSI, "lt", 2 * i))) for i in range(20)))
    negated = Not(AnyOf(tuple(AllOf((fact(MEM, "gte", 5 * i), Not(fact(PSI, "eq", i)))) for i in range(6))))
    pair = Pair(policy_with([(deep, None), (negated, None)]))
    try:
        assert len(pair.du.plan.definition) > 20  # split into terms
        rng = random.Random(7)
        calls = [(0, "when", [NO_FACTS], False), (1, "when", [NO_FACTS], False)]
        answers = []
        for _ in range(300):
            py, du = pair.both(random_node(rng, [0, 3, 10, 30, 57, 25]), {}, calls)
            assert du == py
            answers.extend(py)
        assert 0 < sum(answers) < len(answers)
    finally:
        pair.du.close()


@needs_durable
def test_more_routes_than_one_alpha_node_can_hold() -> None:
    """600 rules, 2 conditions each: 1200 routes, grouped so no alpha node gets near 511 children."""
    conditions = [(fact(MEM, "gt", i / 10), Not(fact(PSI, "gte", i / 5))) for i in range(600)]
    pair = Pair(policy_with(conditions))
    try:
        rng = random.Random(3)
        calls = [(i, w, [NO_FACTS], False) for i in range(600) for w in ("when", "clear")]
        for _ in range(5):
            node = {"memory.usage_percent": rng.uniform(0, 60), "psi.memory.some.avg10": rng.uniform(0, 120)}
            py, du = pair.both(node, {}, calls)
            assert du == py
    finally:
        pair.du.close()


@needs_durable
def test_synthetic_policy_all_operators(tmp_path: Path) -> None:
    """bench.synthetic's seeded policy (nested all/any/not, in, exists, hysteresis, text facts, every
    scope): random facts near each threshold, every rule's when and clearWhen, latched and not."""
    from bench.synthetic import synthetic_policy

    path = tmp_path / "synthetic.yaml"
    path.write_text(synthetic_policy(150, 5))
    policy = build_policy(load_documents([path], builtin=False), REFERENCE_NODE)
    pair = Pair(policy)
    try:
        reads: dict[str, list[Compare]] = {}
        for r in policy.rules:
            for c in comparisons(r.when) + comparisons(r.clear_when):
                reads.setdefault(fact_key(c), []).append(c)
        rng = random.Random(11)

        def draw(cs: list[Compare]) -> Any:
            c = rng.choice(cs)
            if rng.random() < 0.15:
                return None
            if c.spec.kind == "string":
                pool = [
                    v
                    for x in cs
                    if x.op in ("eq", "ne", "in")
                    for v in (x.value if x.op == "in" else [x.value])
                ]
                return rng.choice([*pool, "other"])
            if not isinstance(c.value, int | float) or isinstance(c.value, bool):
                return rng.uniform(0, 100)
            soft = relaxed(c)
            t = soft if soft is not None and rng.random() < 0.5 else float(c.value)
            v = rng.choice(
                [t, t - 1, t + 1, t * 0.9, t * 1.1, math.nextafter(t, -INF), rng.uniform(0, 2 * t + 1)]
            )
            return int(v) if c.spec.kind == "integer" else v

        answers: list[bool] = []
        for _ in range(40):
            facts = {k: draw(cs) for k, cs in reads.items()}
            node = {k: v for k, v in facts.items() if v is not None}
            classes = {k: v for k, v in node.items() if k.startswith("class.")}
            items = [({k: draw(cs) for k, cs in reads.items()}, {}) for _ in range(3)]
            calls = [
                (i, which, [item], latched)
                for i, r in enumerate(policy.rules)
                for which, cond in (("when", r.when), ("clear", r.clear_when))
                if cond is not None
                for item in items
                for latched in (False, True)
            ]
            py, du = pair.both(node, classes, calls)
            assert du == py
            answers.extend(py)
        assert 0.02 < sum(answers) / len(answers) < 0.98
    finally:
        pair.du.close()


# ---------------------------------------------------------------- the worker's failure modes


@needs_durable
def test_killed_worker_is_reported_then_replaced() -> None:
    pair = Pair(policy_with([(gt80, None)]))
    try:
        call = [(0, "when", [NO_FACTS], False)]
        assert pair.du.evaluate_many(n(mem=90), {}, call) == [True]
        pid = pair.du.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(
            DurableBackendError,
            match=rf"worker \(pid {pid}\) was killed by SIGKILL .* new one starts on the next tick",
        ):
            pair.du.evaluate_many(n(mem=90), {}, call)
        assert pair.du.evaluate_many(n(mem=90), {}, call) == [True]
        assert pair.du.restarts == 1 and pair.du.pid != pid
    finally:
        pair.du.close()


@needs_durable
def test_hung_worker_times_out_instead_of_hanging() -> None:
    pair = Pair(policy_with([(gt80, None)]), timeout=1.0)
    try:
        call = [(0, "when", [NO_FACTS], False)]
        pid = pair.du.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        # A stopped worker never answers: only the 1 s deadline can end this call (no wall-clock
        # bound here; the process check below shows the worker was killed, not waited for).
        with pytest.raises(DurableBackendError, match=r"did not answer within 1s .* it was killed"):
            pair.du.evaluate_many(n(mem=90), {}, call * 5000)  # larger than a pipe buffer
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        assert pair.du.evaluate_many(n(mem=70), {}, call) == [False]
    finally:
        pair.du.close()


def python_json_number(x: float) -> str:
    return json.dumps(x)  # what durable's own Python layer writes: 1e-05, 1e+20


@needs_durable
def test_errors_inside_durable_surface_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """durable's Python layer swallows errors; here every failure in the worker reaches the caller,
    including the segfault that an event number like 1e+20 (json.dumps's form) causes."""
    tiny = fact(MEM, "gt", 0.00001)
    policy = policy_with([(tiny, None)])
    with monkeypatch.context() as m:  # json.dumps floats, as durable.engine.Ruleset writes them
        m.setattr(durable, "_number", python_json_number)
        with pytest.raises(DurableBackendError, match=r"rejected the generated ruleset: .*error code: 204"):
            DurableBackend(policy, compile_rules(policy))
    pair = Pair(policy)
    try:
        call = [(0, "when", [NO_FACTS], False)]
        with monkeypatch.context() as m:
            m.setattr(durable, "_number", python_json_number)
            # measured: the batch is accepted, then start_action_for_state segfaults in the worker
            with pytest.raises(
                DurableBackendError,
                match=r"was killed by SIGSEGV while evaluating 1 conditions|durable-rules failed on 1 conditions",
            ):
                pair.du.evaluate_many(n(mem=1e20), {}, call)
        assert pair.du.evaluate_many(n(mem=1e20), {}, call) == [True]
        assert pair.du.restarts == 1
    finally:
        pair.du.close()


@needs_durable
def test_close_stops_the_worker_and_is_idempotent() -> None:
    pair = Pair(policy_with([(gt80, None)]))
    pid = pair.du.pid
    assert pid is not None
    pair.du.close()
    pair.du.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(DurableBackendError, match="was closed"):
        pair.du.evaluate_many(n(mem=90), {}, [(0, "when", [NO_FACTS], False)])


@needs_durable
def test_unclosed_backend_does_not_leak_its_worker() -> None:
    pair = Pair(policy_with([(gt80, None)]))
    pid = pair.du.pid
    assert pid is not None
    del pair
    gc.collect()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


# ---------------------------------------------------------------- (b) the differential test

PROFILE = "qosd.io/profile"
SNAPSHOTS_PER_POLICY = 1000
KEEP = object()

# (annotations, labels, kube QoS): every class of both bundled profiles, and pods no class claims
WORKLOAD_KINDS: list[tuple[dict[str, str], dict[str, str], str]] = [
    ({"katalyst.kubewharf.io/qos_level": "reclaimed_cores"}, {}, "BestEffort"),
    ({"katalyst.kubewharf.io/qos_level": "shared_cores"}, {}, "Burstable"),
    ({"katalyst.kubewharf.io/qos_level": "dedicated_cores",
      "katalyst.kubewharf.io/memory_enhancement": '{"numa_binding": "true"}'}, {}, "Guaranteed"),
    ({"katalyst.kubewharf.io/qos_level": "system_cores"}, {}, "Burstable"),
    ({}, {"koordinator.sh/qosClass": "BE"}, "BestEffort"),
    ({}, {"koordinator.sh/qosClass": "LS"}, "Burstable"),
    ({}, {"koordinator.sh/qosClass": "LSR"}, "Guaranteed"),
    ({}, {"koordinator.sh/qosClass": "LSE"}, "Guaranteed"),
    ({}, {"koordinator.sh/qosClass": "SYSTEM"}, "Burstable"),
    ({}, {"koordinator.sh/eviction-enabled": "true"}, "Burstable"),
    ({}, {}, "BestEffort"),
]  # fmt: skip


def enable_all_overlay(tmp: Path, profile_file: Path) -> Path:
    """An overlay switching on every rule the bundled file ships disabled (more facts, scopes, actions)."""
    doc = yaml.safe_load(profile_file.read_text())
    names = [r["name"] for r in doc["spec"].get("rules", []) if r.get("enabled") is False]
    overlay = {
        "apiVersion": "qosd.io/v1alpha1",
        "kind": "QoSPolicy",
        "metadata": {"name": f"enable-all-{doc['metadata']['name']}"},
        "spec": {"priority": 10, "nodeSelector": doc["spec"]["nodeSelector"],
                 "rules": [{"name": name, "enabled": True} for name in names]},
    }  # fmt: skip
    path = tmp / f"{doc['metadata']['name']}-enable-all.yaml"
    path.write_text(yaml.safe_dump(overlay))
    return path


VARIANTS = [
    "default", "koordinator", "default+disabled-rules-on", "koordinator+disabled-rules-on", "default+language",
]
# The issue-17 language primitives as a platform team writes them: sample-count triggers with
# clearWhen, a `when` mapping of two facts, knobs that read `current`, per-container values.
LANGUAGE_OVERLAYS = [
    Path(__file__).resolve().parents[3] / "rules" / "examples" / name
    for name in ("stepped-cpu-throttle.yaml", "count-based-eviction.yaml")
] + [Path(__file__).resolve().parents[2] / "data" / "language-differential.yaml"]
COUNTED = {"diff-counted-node", "diff-counted-pods"}  # they must fire, so the counts are exercised
BATCH_KIND: tuple[dict[str, str], dict[str, str], str] = ({}, {"example.com/workload": "batch"}, "Burstable")


def variant_labels(variant: str) -> dict[str, str]:
    if variant.endswith("+language"):
        return {"node.example.com/pool": "batch-heavy"}
    return {PROFILE: "koordinator"} if variant.startswith("koordinator") else {}


def variant_policy(variant: str, tmp: Path) -> Policy:
    koord = variant.startswith("koordinator")
    node = dataclasses.replace(REFERENCE_NODE, name="diff-node", labels=variant_labels(variant))
    paths = []
    if variant.endswith("disabled-rules-on"):
        (profile_file,) = [f for f in bundled_policy_files() if ("koordinator" in f.name) == koord]
        paths.append(enable_all_overlay(tmp, profile_file))
    if variant.endswith("+language"):
        paths.extend(LANGUAGE_OVERLAYS)
    return build_policy(load_documents(paths), node)


class Checked:
    """The durable backend, with every batch also answered by Python and compared call by call."""

    name = "durable"

    def __init__(self, du: DurableBackend, py: PythonBackend, policy: Policy):
        self.du, self.py, self.policy = du, py, policy
        self.calls = 0
        self.outcomes: dict[tuple[str, str], set[bool]] = {}

    def evaluate_many(self, node: Any, classes: Any, calls: list[Any]) -> list[bool]:
        answers = self.du.evaluate_many(node, classes, calls)
        expected = self.py.evaluate_many(node, classes, calls)
        flat = [(index, which, item, latched) for index, which, items, latched in calls for item in items]
        self.calls += len(flat)
        for (index, which, _, _), answer in zip(flat, answers, strict=True):
            self.outcomes.setdefault((self.policy.rules[index].name, which), set()).add(answer)
        if answers != expected:
            diffs = [
                f"{self.policy.rules[c[0]].name} {c[1]} latched={c[3]} durable={a} python={e} item={ {**c[2][1], **c[2][0]} }"
                for c, a, e in zip(flat, answers, expected, strict=True)
                if a != e
            ]
            raise AssertionError(
                "backends disagree:\n" + "\n".join(diffs) + f"\nnode={node}\nclasses={classes}"
            )
        return answers

    def close(self) -> None:
        self.du.close()


@dataclasses.dataclass
class Variant:
    name: str
    node: NodeInfo
    python: Engine
    durable: Engine
    checked: Checked
    keys: dict[str, list[tuple[str, str, tuple[Any, ...]]]]  # scope -> (key, kind, values near thresholds)
    conditional: set[str] = dataclasses.field(default_factory=set)
    snapshots: int = 0
    ticks_with_intents: int = 0
    fired: set[str] = dataclasses.field(default_factory=set)


def near(thresholds: set[float]) -> list[float]:
    out = {0.0}
    for t in thresholds:
        out |= {t, t - 1, t + 1, t - 0.5, t + 0.5, math.nextafter(t, INF), math.nextafter(t, -INF), t * 2}
    return sorted(out)


def fact_plan(policy: Policy) -> dict[str, list[tuple[str, str, tuple[Any, ...]]]]:
    """Per scope, every key the policy's conditions read, with values around their thresholds."""
    found: dict[tuple[str, str], tuple[str, set[float]]] = {}
    words: dict[tuple[str, str], set[str]] = {}  # text facts (e.g. pressure levels): their values
    for r in policy.rules:
        for c in comparisons(r.when) + comparisons(r.clear_when):
            scope = c.spec.scope
            key = fact_key(c)
            if scope == "class":
                key = f"{c.class_name}\0{key.split('.', 2)[2]}"
            _, ts = found.setdefault((scope, key), (c.spec.kind, set()))
            if isinstance(c.value, int | float) and not isinstance(c.value, bool):
                ts.add(float(c.value))
                if (soft := relaxed(c)) is not None:
                    ts.add(soft)
            elif isinstance(c.value, str):
                words.setdefault((scope, key), set()).update({c.value, *c.spec.enum})
    plan: dict[str, list[tuple[str, str, tuple[Any, ...]]]] = {}
    for (where, key), (kind, ts) in sorted(found.items()):
        values: list[Any] = sorted(words[where, key]) if (where, key) in words else near(ts)
        plan.setdefault(where, []).append((key, kind, tuple(values)))
    return plan


@pytest.fixture(scope="module", params=VARIANTS)
def variant(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Variant]:
    if not HAVE_DURABLE:
        pytest.skip(NO_DURABLE)
    policy = variant_policy(request.param, tmp_path_factory.mktemp("policy"))
    python = Engine(policy)
    durable_engine = Engine(policy, backend="durable")
    assert isinstance(durable_engine.backend, DurableBackend)
    checked = Checked(durable_engine.backend, PythonBackend(durable_engine.rules), policy)
    durable_engine.rule_step.backend = checked
    node = dataclasses.replace(REFERENCE_NODE, name="diff-node", labels=variant_labels(request.param))
    conditional = {r.name for r in policy.rules if r.when is not None}
    yield Variant(request.param, node, python, durable_engine, checked, fact_plan(policy), conditional)
    checked.close()


CPUS = tuple(Cpu(i, i % 8, i // 8, i // 8) for i in range(16))
TOPOLOGY = Topology(CPUS, {0: 32 * GiB, 1: 32 * GiB})


@functools.cache
def value_strategy(kind: str, values: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    """A fact's next value: kept, removed, or one near the thresholds. Cached per (kind, values): a
    strategy built once is validated once (hypothesis checks a new strategy object on its first draw)."""
    if kind == "string":
        return st.one_of(st.just(KEEP), st.none(), st.sampled_from(values))
    lo, hi = values[0], values[-1]
    numbers = st.one_of(st.sampled_from(values), st.floats(min(lo, 0.0), hi + 1, allow_nan=False))
    if kind == "integer":
        numbers = numbers.map(lambda v: int(v))
    else:
        numbers = st.one_of(numbers, numbers.map(lambda v: int(v)))  # ints reach the backends too
    return st.one_of(st.just(KEEP), st.just(KEEP), st.none(), numbers)


# Built once: a strategy object is validated on its first draw, and these are drawn thousands of times.
MEMORY_SIZES = st.sampled_from([1.0, 2.0, 4.0, 8.0])
LIMIT_KINDS = st.sampled_from([0, 1, 2])  # none, memory only, cpu and memory
BATCH_PRIORITIES = st.sampled_from([None, 0, 3500])
PRIORITIES = st.sampled_from([None, 0, 3500, 5500, 7500, 9500])
NAMESPACES = st.sampled_from(["default", "batch"])
PHASES = st.sampled_from(["Running", "Running", "Running", "Pending", "Succeeded"])
KINDS = {False: st.sampled_from(WORKLOAD_KINDS), True: st.sampled_from([*WORKLOAD_KINDS, BATCH_KIND])}
DT = st.sampled_from([1.0, 5.0, 5.0, 15.0, 30.0, 46.0, 120.0])
POD_USAGE = st.one_of(st.just(KEEP), st.just(KEEP), st.none(), st.floats(0, 20 * GiB))
POD_CORES = st.one_of(st.just(KEEP), st.none(), st.floats(0, 8))
NODE_USAGE = st.one_of(
    st.just(KEEP),
    st.none(),
    st.sampled_from([0.5, 0.68, 0.695, 0.7, 0.705, 0.8, 0.95]).map(lambda f: f * 64 * GiB),
)


@st.composite
def workloads(draw: st.DrawFn, language: bool) -> tuple[Workload, ...]:
    """0-10 pods of every class kind (one composite draw: hypothesis's per-draw bookkeeping on the
    test's own ``data.draw`` costs more than the draw itself)."""
    count = draw(st.integers(0, 10), label="pods")
    out = []
    for i in range(count):
        annotations, labels, qos = draw(KINDS[language])
        mem = draw(MEMORY_SIZES) * GiB
        limits = ({}, {"memory": 2 * mem}, {"cpu": 4.0, "memory": mem})[draw(LIMIT_KINDS)]
        if labels is BATCH_KIND[1]:  # two containers with their own cgroups: per-container values
            pod = f"kubepods/burstable/poduid-{i}"
            out.append(
                Workload(
                    uid=f"uid-{i}",
                    name=f"pod-{i}",
                    namespace="batch",
                    labels=MappingProxyType(labels),
                    priority=draw(BATCH_PRIORITIES),
                    kube_qos=qos,
                    cgroup_path=pod,
                    containers=(
                        Container("main", requests={"cpu": 1.0, "memory": mem}, limits=limits,
                                  cgroup_path=f"{pod}/main"),
                        Container("side", requests={"cpu": 0.2}, limits={"cpu": 1.0}, cgroup_path=f"{pod}/side"),
                    ),
                )
            )
            continue
        out.append(
            Workload(
                uid=f"uid-{i}",
                name=f"pod-{i}",
                namespace=draw(NAMESPACES),
                labels=MappingProxyType(labels),
                annotations=MappingProxyType(annotations),
                priority=draw(PRIORITIES),
                kube_qos=qos,
                phase=draw(PHASES),
                containers=(Container("main", requests={"cpu": 1.0, "memory": mem}, limits=limits),),
            )
        )
    return tuple(out)


def step(previous: dict[Any, Any], key: Any, value: Any) -> None:
    if value is KEEP:
        return
    if value is None:
        previous.pop(key, None)
    else:
        previous[key] = value


def decisions(result: TickResult) -> list[tuple[str, str, str]]:
    return [(i.kind, i.target, i.provenance.rule) for i in result.evaluation.intents]


def run_sequence(v: Variant, data: st.DataObject) -> None:
    node_info = v.node
    pods = data.draw(workloads(v.name.endswith("+language")))
    plan = v.keys
    node: dict[Any, Any] = {}
    numa: dict[int, dict[Any, Any]] = {0: {}, 1: {}}
    pod_metrics: dict[str, dict[Any, Any]] = {w.uid: {} for w in pods}
    classes: dict[str, dict[str, Any]] = {}
    # Every fact a tick may change: (its dict, its key, the strategy of its next value). One draw of
    # all of them per tick: the same values as a draw per fact, without the per-draw bookkeeping.
    slots: list[tuple[dict[Any, Any], Any, st.SearchStrategy[Any]]] = [(node, "memory.usage_bytes", NODE_USAGE)]
    slots += [(node, key, value_strategy(kind, values)) for key, kind, values in plan.get("node", [])]
    for nid in numa:
        slots += [(numa[nid], key, value_strategy(kind, values)) for key, kind, values in plan.get("numa", [])]
    for w in pods:
        metrics = pod_metrics[w.uid]
        slots += [(metrics, "memory.usage_bytes", POD_USAGE), (metrics, "memory.rss_bytes", POD_USAGE),
                  (metrics, "cpu.usage_cores", POD_CORES)]  # fmt: skip
        slots += [(metrics, key, value_strategy(kind, values)) for key, kind, values in plan.get("pod", [])]
    for key, kind, values in plan.get("class", []):
        name, path = key.split("\0")
        slots.append((classes.setdefault(name, {}), path, value_strategy(kind, values)))
    tick = st.tuples(DT, st.tuples(*(strategy for _, _, strategy in slots)))
    now = 1_700_000_000.0
    states = [EngineState(), EngineState()]
    for _ in range(data.draw(st.integers(4, 6), label="ticks")):
        dt, values = data.draw(tick, label="tick")
        now += dt
        for (facts, key, _), value in zip(slots, values, strict=True):
            step(facts, key, value)
        snap = Snapshot(
            now,
            node_info,
            TOPOLOGY,
            pods,
            Metrics(
                MappingProxyType(dict(node)),
                {k: MappingProxyType(dict(m)) for k, m in numa.items()},
                {k: MappingProxyType(dict(m)) for k, m in pod_metrics.items()},
                {},
                {k: MappingProxyType(dict(m)) for k, m in classes.items()},
            ),
            {"cpu": 15.0, "memory": 60 * GiB},
        )
        a = run_tick(v.python, snap, states[0], Guards())
        b = run_tick(v.durable, snap, states[1], Guards())
        v.snapshots += 1
        assert decisions(b) == decisions(a), f"tick {v.snapshots}: intents differ"
        assert [o.to_dict() for o in b.plan.operations] == [o.to_dict() for o in a.plan.operations]
        assert json.dumps(b.to_dict(), sort_keys=True, default=str) == json.dumps(
            a.to_dict(), sort_keys=True, default=str
        )
        assert b.state.to_dict() == a.state.to_dict()
        states = [a.state, b.state]
        v.fired.update(a.evaluation.fired)
        v.ticks_with_intents += any(i.provenance.rule in v.conditional for i in a.evaluation.intents)


@pytest.mark.durable
def test_differential_bundled_policies(variant: Variant) -> None:
    """>= 1,000 hypothesis-generated snapshots per bundled policy: the same decisions, tick by tick."""

    @settings(max_examples=SNAPSHOTS_PER_POLICY // 4 + 1, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
    @given(st.data())
    def sequences(data: st.DataObject) -> None:
        run_sequence(variant, data)

    t0 = time.perf_counter()
    sequences()
    elapsed = time.perf_counter() - t0
    assert variant.snapshots >= SNAPSHOTS_PER_POLICY
    conditional = {r.name for r in variant.python.policy.rules if r.when is not None}
    assert conditional & variant.fired, "no conditional rule ever fired"
    one_sided = sorted(
        k for k, seen in variant.checked.outcomes.items() if k[0] in conditional and seen != {True, False}
    )
    assert not one_sided, f"the generator never made these conditions both true and false: {one_sided}"
    if variant.name.endswith("+language"):
        assert variant.fired >= COUNTED, f"sample-count rules that never fired: {COUNTED - variant.fired}"
    print(
        f"\n{variant.name}: {variant.snapshots} snapshots, {variant.checked.calls} condition calls, "
        f"{variant.ticks_with_intents} ticks with intents of conditional rules, fired {sorted(variant.fired)}, "
        f"{elapsed:.1f}s"
    )
