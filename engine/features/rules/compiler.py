"""Rule conditions compiled to Python functions, once per policy generation.

Each rule's ``when`` and ``clearWhen`` become generated Python source (one expression per rule),
compiled with ``compile()``: measured on the design's workload this is 15-24x faster than
durable-rules and several times faster than closures. Values in the source come from the validated
policy (numbers and strings, inserted with ``repr``), so the generated code is data-driven but not
injectable.

Generated signature: ``f(N, C, X, L) -> list[bool]`` with N the node facts (dict), C the class
facts (flat dict ``class.<name>.<path>``), X the rows of the rule's scope (NUMA nodes, pods or
containers: ``factview.Row``, measured and derived facts unmerged) and L whether they are latched
(fired and not cleared), which selects hysteresis thresholds. The loop over the rows is inside the
generated function, a comprehension, so a tick costs one Python call per rule rather than one per
rule and pod, and no per-pod dict is built; ratio facts are computed inline.
A missing fact makes a comparison false (``exists: false`` is the way to test absence).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.config.policy import Policy, Rule
from engine.evaluate.factview import RATIOS, Row
from engine.features.rules.conditions import AllOf, Compare, Condition, Not, comparisons
from engine.model.facts import window_key
from engine.model.intents import Observation

CondFn = Callable[[Mapping[str, Any], Mapping[str, Any], Sequence[Row], bool], list[bool]]
"""A compiled condition: one answer per item of ``X``, in order."""

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


def _item_src(key: str) -> str:
    """An item fact as the generated code reads it from the row (M measured, D derived), with the
    semantics of ``factview.read``: measured, else derived, else a ratio of two facts, else None."""

    def plain(k: str) -> str:
        return f"(M[{k!r}] if {k!r} in M else _get(D, {k!r}))"

    pair = RATIOS.get(key)
    if pair is None:
        return plain(key)
    num, den = pair
    return (
        f"(M[{key!r}] if {key!r} in M else D[{key!r}] if {key!r} in D else "
        f"(_n / _d if (_n := {plain(num)}) is not None and (_d := {plain(den)}) else None))"
    )


def _compare_src(c: Compare) -> str:
    var = source_var(c)
    get = _item_src(fact_key(c)) if var == "I" else f"{var}.get({fact_key(c)!r})"
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


Call = tuple[int, str, Sequence[Row], bool]
"""(rule index, "when" | "clear", the items' rows, latched): one answer per row, in order."""


def _always(
    node: Mapping[str, Any], classes: Mapping[str, Any], items: Sequence[Row], latched: bool
) -> list[bool]:
    """A rule without a condition holds for every item."""
    return [True] * len(items)


class PythonBackend:
    """The default evaluator: the generated functions, called in-process."""

    name = "python"

    def __init__(self, rules: tuple[CompiledRule, ...]):
        self.rules = rules
        self._fns = {
            "when": [r.when or _always for r in rules],
            "clear": [r.clear or _always for r in rules],
        }

    def evaluate_many(
        self, node: Mapping[str, Any], classes: Mapping[str, Any], calls: list[Call]
    ) -> list[bool]:
        out: list[bool] = []
        whens, clears = self._fns["when"], self._fns["clear"]
        for index, which, items, latched in calls:
            fn = (whens if which == "when" else clears)[index]
            try:
                out.extend(fn(node, classes, items, latched))
            except TypeError:
                out.extend([_guarded(fn, node, classes, item, latched) for item in items])
        return out

    def close(self) -> None:
        """Nothing to release in-process; the durable backend stops its worker here."""


def _guarded(
    fn: CondFn, node: Mapping[str, Any], classes: Mapping[str, Any], item: Row, latched: bool
) -> bool:
    try:
        return fn(node, classes, (item,), latched)[0]
    except TypeError:
        # A collector sent a value of the wrong type (text where a number belongs): the comparison
        # cannot hold, and one bad metric must not stop the tick.
        return False


def _function_src(name: str, cond: Condition) -> str:
    return f"def {name}(N, C, X, L):\n    return [{to_source(cond)} for M, D in X]\n"


def _run(source: str, filename: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"_get": dict.get}
    exec(compile(source, filename, "exec"), namespace)
    return namespace


def compile_condition(cond: Condition) -> CondFn:
    """One condition on its own (tests, tools); rules are compiled together by ``compile_rules``."""
    fn: CondFn = _run(_function_src("cond", cond), "<qosd condition>")["cond"]
    return fn


def compile_rules(policy: Policy) -> tuple[CompiledRule, ...]:
    """All rules of a generation, generated into one module and compiled in one go."""
    lines: list[str] = []
    for i, rule in enumerate(policy.rules):
        if rule.when is not None:
            lines.append(_function_src(f"when_{i}", rule.when))
        if rule.clear_when is not None:
            lines.append(_function_src(f"clear_{i}", rule.clear_when))
    source = "\n".join(lines)
    namespace = _run(source, f"<qosd rules {policy.short_hash}>")
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
