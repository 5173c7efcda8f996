"""Conditions as data -> a typed condition tree, checked against the fact registry.

A condition is ``{all: [...]}``, ``{any: [...]}``, ``{not: {...}}`` or ``{<fact>: {<op>: value, ...}}``;
a mapping with several of them means all of them.
Parsing resolves every fact name once per generation, so evaluators (the Python compiler and the
durable-rules backend) never see an unknown fact or a string where a number belongs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from engine.config.errors import Location, Problem, short
from engine.config.load import JsonPath
from engine.model.factnames import ITERATED_SCOPES, FactSpec, registry
from engine.model.units import parse_duration

Op = Literal["eq", "ne", "lt", "lte", "gt", "gte", "in", "exists"]
ORDER_OPS = ("lt", "lte", "gt", "gte")
OPS: tuple[str, ...] = ("eq", "ne", "lt", "lte", "gt", "gte", "in", "exists")
MODIFIERS = ("window", "agg", "hysteresis")

# The longest aggregation window a condition (or a report smoothing window) may ask for. The collector
# keeps window / interval x 1.5 samples of 16 bytes per fact and per item (engine/sources/collector.py),
# so the window, not the data, sets what a policy makes the daemon hold: at the default 1 s tick a
# 15 min window is 21.6 KB per pod and fact (at the 10 ms floor of --interval, 2.2 MB), where a
# one-year window was 757 MB. The anchors stay well inside it: Koordinator and Katalyst aggregate
# over seconds to ~15 min, and the kubelet's eviction pressure transition period is 5 min.
MAX_WINDOW_SECONDS = 900.0


def window_problem(seconds: float, written: Any, holder: str = "each pod (or node, container)") -> str | None:
    """Why a window of ``seconds``, ``written`` so in the file, is refused, or None (MAX_WINDOW_SECONDS)."""
    if seconds > MAX_WINDOW_SECONDS:
        return (
            f"window {short(written)} is longer than the {MAX_WINDOW_SECONDS / 60:g} min qosd keeps "
            f"history for: {holder} would hold a sample per tick for the whole window"
        )
    return None


WINDOW_HINT = (
    f"use a window of at most {MAX_WINDOW_SECONDS / 60:g}m "
    "(Koordinator and Katalyst use seconds to ~15 min); "
    "for a slower signal, raise the threshold's `for:` instead, which costs one timestamp"
)


@dataclass(frozen=True)
class Compare:
    """One test of one fact; ``path`` is the JSON path of the comparison inside the spec."""

    fact: str
    spec: FactSpec
    op: str
    value: Any
    window: float | None
    agg: str
    hysteresis: float | None
    class_name: str | None
    path: JsonPath


@dataclass(frozen=True)
class AllOf:
    items: tuple[Condition, ...]


@dataclass(frozen=True)
class AnyOf:
    items: tuple[Condition, ...]


@dataclass(frozen=True)
class Not:
    item: Condition


Condition = Compare | AllOf | AnyOf | Not


def comparisons(cond: Condition | None) -> list[Compare]:
    """Every comparison in a condition tree, in document order."""
    if cond is None:
        return []
    if isinstance(cond, Compare):
        return [cond]
    if isinstance(cond, Not):
        return comparisons(cond.item)
    return [c for item in cond.items for c in comparisons(item)]


def scope_of(cond: Condition | None) -> str:
    """The per-item scope a rule iterates over (numa, pod or container), or node."""
    scopes = {c.spec.scope for c in comparisons(cond)} & ITERATED_SCOPES
    return next(iter(scopes)) if len(scopes) == 1 else "node"


def parse_condition(
    raw: Any,
    path: JsonPath,
    locate: Callable[[JsonPath], Location],
    class_names: tuple[str, ...],
    problems: list[Problem],
) -> Condition | None:
    """Parse a schema-valid condition; append located problems for everything semantically wrong.

    A mapping with several keys (facts, ``all``, ``any``, ``not``) means all of them, in the order
    written: ``{a: {gt: 1}, b: {lt: 2}}`` is ``{all: [{a: {gt: 1}}, {b: {lt: 2}}]}``, the reading every
    other mapping of the language has, so nobody has to wrap two facts in ``all``."""
    if not isinstance(raw, dict) or not raw:
        return None
    if len(raw) > 1:
        parts = [parse_condition({k: v}, path, locate, class_names, problems) for k, v in raw.items()]
        return AllOf(tuple(p for p in parts if p is not None))
    key, value = next(iter(raw.items()))
    sub = (*path, key)
    if key in ("all", "any"):
        items = [
            parse_condition(v, (*sub, i), locate, class_names, problems) for i, v in enumerate(value or [])
        ]
        kept = tuple(i for i in items if i is not None)
        return (AllOf if key == "all" else AnyOf)(kept)
    if key == "not":
        inner = parse_condition(value, sub, locate, class_names, problems)
        return Not(inner) if inner is not None else None
    return _parse_fact(key, value, sub, locate, class_names, problems)


def _unknown_fact(name: str, where: Location, class_names: tuple[str, ...]) -> Problem:
    close = registry().suggest(name, class_names)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    return Problem(
        where,
        f"unknown fact {name!r}",
        hint + "fact names are defined in schemas/facts.schema.json; "
        "list them with `qosd schema facts --names`",
    )


def unknown_fact_problems(
    document: Any, locate: Callable[[JsonPath], Location], within: Sequence[JsonPath] | None = None
) -> list[Problem]:
    """Unknown fact names in the conditions of one document of any shape. With ``within``, only
    names at or below those paths: the values the schema refused and engine/config/withheld.py took
    out, which the compiler (it needs a valid shape) checks everything else of, so a fact typo in a
    refused condition is reported with its schema error instead of after it is fixed."""
    spec = document.get("spec") if isinstance(document, dict) else None
    rules = spec.get("rules") if isinstance(spec, dict) else None
    classes = spec.get("classes") if isinstance(spec, dict) else None
    names = tuple(
        c["name"]
        for c in (classes if isinstance(classes, list) else ())
        if isinstance(c, dict) and isinstance(c.get("name"), str)
    )
    inside = None if within is None else set(within)
    problems: list[Problem] = []
    stack: list[tuple[Any, JsonPath]] = [
        (rule[key], ("spec", "rules", i, key))
        for i, rule in enumerate(rules if isinstance(rules, list) else ())
        if isinstance(rule, dict)
        for key in ("when", "clearWhen")
        if key in rule
    ]
    while stack:
        cond, path = stack.pop()
        if not isinstance(cond, dict):
            continue
        for key, value in cond.items():
            if key in ("all", "any") and isinstance(value, list):
                stack.extend((v, (*path, key, j)) for j, v in enumerate(value))
            elif key == "not":
                stack.append((value, (*path, key)))
            elif isinstance(key, str) and registry().resolve(key) is None:
                where = (*path, key)
                if inside is None or any(where[:k] in inside for k in range(len(where) + 1)):
                    problems.append(_unknown_fact(key, locate(where), names))
    return problems


def _parse_fact(
    name: str,
    ops: Any,
    path: JsonPath,
    locate: Callable[[JsonPath], Location],
    class_names: tuple[str, ...],
    problems: list[Problem],
) -> Condition | None:
    reg = registry()
    ref = reg.resolve(name)
    if ref is None:
        problems.append(_unknown_fact(name, locate(path), class_names))
        return None
    if ref.class_name is not None and ref.class_name not in class_names:
        problems.append(
            Problem(
                locate(path),
                f"fact {name!r} refers to class {ref.class_name!r}, which no document defines",
                f"classes defined: {', '.join(class_names) or 'none'}",
            )
        )
        return None
    if not isinstance(ops, dict):
        return None
    spec = ref.spec
    window: float | None = None
    if "window" in ops:
        if not spec.series:
            problems.append(
                Problem(
                    locate((*path, "window")), f"fact {name!r} has no windowed aggregates", "drop window/agg"
                )
            )
        else:
            try:
                window = parse_duration(str(ops["window"]))
            except ValueError as exc:
                problems.append(Problem(locate((*path, "window")), str(exc)))
            else:
                too_long = window_problem(window, ops["window"])
                if too_long:
                    problems.append(Problem(locate((*path, "window")), too_long, WINDOW_HINT))
    agg = str(ops.get("agg", "avg" if window else "last"))
    if agg != "last" and window is None and "agg" in ops:
        problems.append(
            Problem(
                locate((*path, "agg")),
                f"agg {agg!r} needs a window",
                f"add e.g. window: 5m next to agg: {agg}",
            )
        )
    hysteresis = ops.get("hysteresis")
    order_ops = [o for o in ORDER_OPS if o in ops]
    if hysteresis is not None and len(order_ops) != 1:
        problems.append(
            Problem(
                locate((*path, "hysteresis")),
                "hysteresis needs exactly one of lt, lte, gt, gte in the same comparison",
                "hysteresis widens one threshold: it stays met until the value is back past "
                "threshold -/+ margin",
            )
        )
    tests: list[Condition] = []
    for op in OPS:
        if op not in ops:
            continue
        value = ops[op]
        if _check_operand(name, spec, op, value, (*path, op), locate, problems):
            tests.append(
                Compare(
                    name,
                    spec,
                    op,
                    value,
                    window,
                    agg,
                    float(hysteresis) if op in ORDER_OPS and hysteresis is not None else None,
                    ref.class_name,
                    (*path, op),
                )
            )
    if not tests:
        if not any(op in ops for op in OPS):
            problems.append(
                Problem(
                    locate(path), f"condition on {name!r} has no operator", f"use one of {', '.join(OPS)}"
                )
            )
        return None
    return tests[0] if len(tests) == 1 else AllOf(tuple(tests))


def _check_operand(
    name: str,
    spec: FactSpec,
    op: str,
    value: Any,
    path: JsonPath,
    locate: Callable[[JsonPath], Location],
    problems: list[Problem],
) -> bool:
    if op == "exists":
        return True
    values = value if op == "in" else [value]
    if spec.numeric:
        if op in ORDER_OPS:
            return True  # the schema already requires a number
        for v in values:
            if isinstance(v, bool) or not isinstance(v, int | float):
                problems.append(
                    Problem(
                        locate(path),
                        f"{name!r} is a number but {op} compares it with {short(v)}",
                        "write the value as a number without quotes" if isinstance(v, str) else "",
                    )
                )
                return False
        return True
    if op in ORDER_OPS:
        problems.append(
            Problem(
                locate(path),
                f"{name!r} is a {spec.kind}; {op} only applies to numeric facts",
                "use eq, ne or in for text facts",
            )
        )
        return False
    want = bool if spec.kind == "boolean" else str
    for v in values:
        if not isinstance(v, want):
            problems.append(
                Problem(locate(path), f"{name!r} is a {spec.kind} but {op} compares it with {short(v)}")
            )
            return False
        if spec.enum and str(v) not in spec.enum:
            problems.append(
                Problem(
                    locate(path),
                    f"{short(v)} is never a value of {name!r}",
                    f"values: {', '.join(spec.enum)}",
                )
            )
            return False
    return True
