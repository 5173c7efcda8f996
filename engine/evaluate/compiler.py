"""Rule conditions compiled to Python functions, once per policy generation.

Each rule's ``when`` and ``clearWhen`` become generated Python source (one expression per rule),
compiled with ``compile()``: measured on the design's workload this is 15-24x faster than
durable-rules and several times faster than closures. Values in the source come from the validated
policy (numbers and strings, inserted with ``repr``), so the generated code is data-driven but not
injectable.

Generated signature: ``f(N, C, I, L) -> bool`` with N the node facts (dict), C the class facts (flat
dict ``class.<name>.<path>``), I the item facts (NUMA node, pod or container: an ``ItemFacts``,
read by subscription) and L whether the rule is latched (fired and not cleared), which selects
hysteresis thresholds.
A missing fact makes a comparison false (``exists: false`` is the way to test absence).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.config.conditions import AllOf, Compare, Condition, Not, comparisons
from engine.config.policy import Policy, Rule
from engine.model.facts import window_key
from engine.model.intents import Observation

CondFn = Callable[[Mapping[str, Any], Mapping[str, Any], Any, bool], bool]

_PY_OPS = {"eq": "==", "ne": "!=", "lt": "<", "lte": "<=", "gt": ">", "gte": ">="}


def fact_key(c: Compare) -> str:
    """The flat key a comparison reads inside its scope's fact map."""
    path = ".".join(c.spec.path)
    if c.window is not None and c.agg != "last":
        path = window_key(path, c.agg, c.window)
    return f"class.{c.class_name}.{path}" if c.spec.scope == "class" else path


def source_var(c: Compare) -> str:
    return {"node": "N", "class": "C"}.get(c.spec.scope, "I")


def relaxed(c: Compare) -> float | None:
    """The hysteresis threshold that keeps a latched comparison met, if the comparison has one."""
    if c.hysteresis is None:
        return None
    value = float(c.value)
    return value - c.hysteresis if c.op in ("gt", "gte") else value + c.hysteresis


def _compare_src(c: Compare) -> str:
    var = source_var(c)
    get = f"I[{fact_key(c)!r}]" if var == "I" else f"{var}.get({fact_key(c)!r})"
    if c.op == "exists":
        return f"(({get} is not None) is {bool(c.value)!r})"
    if c.op == "in":
        values = tuple(c.value)
        return f"((_v := {get}) is not None and _v in {values!r})"
    op = _PY_OPS[c.op]
    threshold = repr(c.value)
    soft = relaxed(c)
    if soft is not None:
        threshold = f"({soft!r} if L else {threshold})"
    return f"((_v := {get}) is not None and _v {op} {threshold})"


def to_source(cond: Condition) -> str:
    if isinstance(cond, Compare):
        return _compare_src(cond)
    if isinstance(cond, Not):
        return f"(not {to_source(cond.item)})"
    joiner = " and " if isinstance(cond, AllOf) else " or "
    if not cond.items:
        return "True" if isinstance(cond, AllOf) else "False"
    return "(" + joiner.join(to_source(i) for i in cond.items) + ")"


@dataclass(frozen=True)
class CompiledRule:
    rule: Rule
    when: CondFn | None
    clear: CondFn | None
    source: str


Call = tuple[int, str, Sequence[Any], bool]
"""(rule index, "when" | "clear", the items' facts, latched): one answer per item, in order."""


class PythonBackend:
    """The default evaluator: the generated functions, called in-process."""

    name = "python"

    def __init__(self, rules: tuple[CompiledRule, ...]):
        self.rules = rules
        always: CondFn = lambda n, c, i, latched: True  # noqa: E731 - a rule without a condition holds
        self._fns = {
            "when": [r.when or always for r in rules],
            "clear": [r.clear or always for r in rules],
        }

    def evaluate_many(
        self, node: Mapping[str, Any], classes: Mapping[str, Any], calls: list[Call]
    ) -> list[bool]:
        out: list[bool] = []
        whens, clears = self._fns["when"], self._fns["clear"]
        for index, which, items, latched in calls:
            fn = (whens if which == "when" else clears)[index]
            try:
                out.extend([fn(node, classes, item, latched) for item in items])
            except TypeError:
                out.extend([_guarded(fn, node, classes, item, latched) for item in items])
        return out

    def close(self) -> None:
        """Nothing to release in-process; the durable backend stops its worker here."""


def _guarded(
    fn: CondFn, node: Mapping[str, Any], classes: Mapping[str, Any], item: Any, latched: bool
) -> bool:
    try:
        return fn(node, classes, item, latched)
    except TypeError:
        # A collector sent a value of the wrong type (text where a number belongs): the comparison
        # cannot hold, and one bad metric must not stop the tick.
        return False


def compile_rules(policy: Policy) -> tuple[CompiledRule, ...]:
    """All rules of a generation, generated into one module and compiled in one go."""
    lines: list[str] = []
    for i, rule in enumerate(policy.rules):
        if rule.when is not None:
            lines.append(f"def when_{i}(N, C, I, L):\n    return {to_source(rule.when)}\n")
        if rule.clear_when is not None:
            lines.append(f"def clear_{i}(N, C, I, L):\n    return {to_source(rule.clear_when)}\n")
    source = "\n".join(lines)
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<qosd rules {policy.short_hash}>", "exec"), namespace)
    return tuple(
        CompiledRule(
            rule,
            namespace.get(f"when_{i}"),
            namespace.get(f"clear_{i}"),
            source,
        )
        for i, rule in enumerate(policy.rules)
    )


# ---------------------------------------------------------------- observations for provenance


def observe(
    cond: Condition | None, node: Mapping[str, Any], classes: Mapping[str, Any], item: Any, latched: bool
) -> tuple[Observation, ...]:
    """Every comparison of ``cond`` with its observed value: only run for rules that fired."""
    out: list[Observation] = []
    for c in comparisons(cond):
        source = {"N": node, "C": classes}.get(source_var(c), item)
        observed = source.get(fact_key(c)) if source is not None else None
        threshold = c.value
        soft = relaxed(c)
        if soft is not None and latched:
            threshold = soft
        out.append(
            Observation(c.fact, c.op, threshold, observed, _holds(c.op, observed, threshold), c.window, c.agg)
        )
    return tuple(out)


_TESTS: dict[str, Callable[[Any, Any], bool]] = {
    "eq": lambda a, b: bool(a == b),
    "ne": lambda a, b: bool(a != b),
    "lt": lambda a, b: bool(a < b),
    "lte": lambda a, b: bool(a <= b),
    "gt": lambda a, b: bool(a > b),
    "gte": lambda a, b: bool(a >= b),
    "in": lambda a, b: a in tuple(b),
}


def _holds(op: str, observed: Any, threshold: Any) -> bool:
    """The same semantics as the generated code, for explanations."""
    if op == "exists":
        return (observed is not None) is bool(threshold)
    if observed is None:
        return False
    try:
        return _TESTS[op](observed, threshold)
    except TypeError:
        return False
