"""Semantic checks and compilation of a merged spec into an immutable Policy.

The schema checks shape; this checks meaning: references to classes, pools and enhancements exist,
enhancement rules (appliesTo/requires/conflictsWith) are coherent, static cpusets do not overlap and
fit the node, thresholds and their release targets make sense, and every fact is known and typed.
All problems are collected before raising, so one run reports everything.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import replace
from functools import cache
from types import MappingProxyType
from typing import Any, overload

from jinja2 import TemplateSyntaxError, meta
from jinja2.exceptions import SecurityError

from engine.cgroups.files import VALUE_FORMATS, burst_problem, value_problem
from engine.cgroups.paths import cgroup_path_problem
from engine.config.errors import Location, PolicyError, Problem, short
from engine.config.load import JsonPath, json_path
from engine.config.merge import NAMED_SECTIONS, Merged, Rendered
from engine.config.policy import (
    DEFAULT_MAX_INTERVAL,
    Action,
    DocumentRef,
    Enhancement,
    JsonKeyMatch,
    Matcher,
    OomPriority,
    Policy,
    Pool,
    Pressure,
    QoSClass,
    Reclaim,
    ReclaimHeadroom,
    ReclaimResource,
    ReclaimUpdate,
    Rule,
    StringMatch,
    ValueSource,
    freeze,
)
from engine.config.render import ENV, RenderError
from engine.features.class_knobs import spec as set_cgroup_spec
from engine.features.class_knobs.knobs import compile_knob
from engine.features.class_knobs.spec import ClassCpu, ClassMemory
from engine.features.eviction import spec as eviction_spec
from engine.features.memory_qos import spec as memory_guard_spec
from engine.features.memory_qos.spec import MemoryQos
from engine.features.reclaim import spec as publish_spec
from engine.features.resctrl import spec as resctrl_spec
from engine.features.resctrl.spec import class_resctrl
from engine.features.rules.conditions import (
    ORDER_OPS,
    WINDOW_HINT,
    Condition,
    comparisons,
    parse_condition,
    scope_of,
    window_problem,
)
from engine.features.specs import action_specs
from engine.features.suppress import spec as suppress_spec
from engine.model.factnames import registry
from engine.model.facts import Container, Workload
from engine.model.node import NodeInfo
from engine.model.units import parse_cpuset, parse_duration, parse_quantity

EXPR_VARIABLES = frozenset({"pod", "container", "node"})

EFFECT_TYPES: dict[str, tuple[str, ...]] = {
    "cpu.numaBinding": ("bool",),
    "cpu.numaExclusive": ("bool",),
    "cpu.numaShare": ("bool",),
    "cpu.alignBySocket": ("bool",),
    "cpu.distributeEvenlyAcrossNuma": ("bool",),
    "cpu.fullPCPUsPairing": ("bool",),
    "eviction.softEvictNotify": ("bool",),
    "cpu.pool": ("string",),
    "cpu.burstPolicy": ("string",),
    "cpu.numaIds": ("string",),
    "memory.qos": ("string",),
    "cpu.numaNumber": ("integer",),
    "oomPriority": ("integer", "number"),
    "cpu.burstPercent": ("number", "integer"),
    "cpu.burstThreshold": ("number", "integer"),
    "eviction.suppressionToleranceRate": ("number", "integer"),
    "eviction.rssOveruseThreshold": ("number", "integer"),
}


# Class knobs whose literal is written as given, by the file (in the v1 dialect; the adapter
# translates) that receives it. shares and weight are share counts and weights that qosd clamps.
CLASS_KNOB_FILES = {
    ("cpu", "cfsQuota"): "cpu.cfs_quota_us",
    ("cpu", "burst"): "cpu.cfs_burst_us",
    ("memory", "min"): "memory.min",
    ("memory", "low"): "memory.low",
    ("memory", "high"): "memory.high",
    ("memory", "limit"): "memory.limit_in_bytes",
}

# The most firings a rule's perWindow may allow (one timestamp each is kept per rule).
MAX_RATE_COUNT = 10_000

# The file each class knob that may be an expression writes (v1 dialect): shares and weight too.
CLASS_EXPR_FILES = {**CLASS_KNOB_FILES, ("cpu", "shares"): "cpu.shares", ("cpu", "weight"): "cpu.weight"}

_SINGULAR = {"classes": "class", "enhancements": "enhancement", "pools": "pool", "rules": "rule"}


def document_problems(rendered: Rendered) -> list[Problem]:
    """Checks that concern one document alone: duplicate entry names would silently overlay."""
    problems: list[Problem] = []
    spec = rendered.spec
    for section in NAMED_SECTIONS:
        seen: dict[str, int] = {}
        for i, item in enumerate(spec.get(section) or []):
            name = item.get("name") if isinstance(item, dict) else None
            if not isinstance(name, str):
                continue
            if name in seen:
                problems.append(
                    Problem(
                        rendered.locate(("spec", section, i, "name")),
                        f"{_SINGULAR[section]} {name!r} is defined twice in this document",
                        "entries with the same name merge across documents; "
                        "within one document give each a unique name",
                        related=(rendered.locate(("spec", section, seen[name], "name")),),
                    )
                )
            else:
                seen[name] = i
    return problems


class _Checker:
    def __init__(self, merged: Merged, node: NodeInfo):
        self.merged = merged
        self.spec = merged.spec
        self.node = node
        self.problems: list[Problem] = []
        self.classes = {c["name"]: c for c in self.spec.get("classes", [])}
        self.enhancements = {e["name"]: e for e in self.spec.get("enhancements", [])}
        self.pools = {p["name"]: p for p in self.spec.get("pools", [])}
        self.class_names = tuple(self.classes)
        self.action_specs = action_specs((self.spec.get("cgroup") or {}).get("weightFormula"))

    def loc(self, path: JsonPath) -> Location:
        loc = self.merged.locate(path)
        if loc.line:
            return Location(loc.source, loc.line, loc.column, json_path(("spec", *path)))
        return loc

    def add(self, path: JsonPath, message: str, hint: str = "", related: Iterable[Location] = ()) -> None:
        self.problems.append(Problem(self.loc(path), message, hint, tuple(related)))

    def ref(self, path: JsonPath, name: Any, table: dict[str, Any], what: str) -> None:
        if isinstance(name, str) and name not in table:
            import difflib

            close = difflib.get_close_matches(name, list(table), n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}? " if close else ""
            hint += (
                f"defined {what}es: {', '.join(table) or 'none'}"
                if what == "class"
                else (f"defined {what}s: {', '.join(table) or 'none'}")
            )
            self.add(path, f"{what} {name!r} is not defined", hint)

    def cgroup_path(self, path: JsonPath, what: str, value: Any) -> None:
        _check_cgroup_path(self, path, what, value)

    def quantity(self, path: JsonPath, value: Any) -> float | None:
        return _quantity(self, path, value)

    def knob(self, path: JsonPath, knob: Any, file: str | None, pods: bool) -> None:
        _check_knob(self, path, knob, file, pods)

    def cgroup_value(self, path: JsonPath, file: str, knob: Any) -> str | None:
        return _check_cgroup_value(self, path, file, knob)

    def cgroup_combination(self, path: JsonPath, literals: dict[str, str], files: set[str]) -> None:
        _check_cgroup_combination(self, path, literals, files)


def check_and_compile(merged: Merged, node: NodeInfo) -> Policy:
    """Compile a merged spec for ``node``; raise PolicyError listing every semantic problem."""
    c = _Checker(merged, node)
    spec = merged.spec
    if "defaultClass" in spec:
        c.ref(("defaultClass",), spec["defaultClass"], c.classes, "class")
    classes = [_compile_class(c, i, raw) for i, raw in enumerate(spec.get("classes", []))]
    enhancements = [_compile_enhancement(c, i, raw) for i, raw in enumerate(spec.get("enhancements", []))]
    _check_enhancement_graph(c)
    pools = [_compile_pool(c, i, raw) for i, raw in enumerate(spec.get("pools", []))]
    _check_pools(c, pools)
    reclaim = _compile_reclaim(c, spec.get("reclaim") or {})
    pressure = _compile_pressure(c, spec.get("pressure") or {})
    mode = str(spec.get("mode", "enforce"))
    rules = [_compile_rule(c, i, raw, mode) for i, raw in enumerate(spec.get("rules", []))]
    if c.problems:
        raise PolicyError(c.problems)
    frozen_spec = freeze(spec)
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return Policy(
        hash=digest,
        node=node.name,
        mode=mode,
        default_class=spec.get("defaultClass"),
        classes=tuple(x for x in classes if x is not None),
        enhancements=tuple(x for x in enhancements if x is not None),
        pools=tuple(x for x in pools if x is not None),
        reclaim=reclaim,
        rules=tuple(x for x in rules if x is not None),
        documents=tuple(
            DocumentRef(r.doc.name, r.doc.source, r.doc.layer.name.lower(), r.priority)
            for r in merged.documents
        ),
        spec=frozen_spec,
        origin_tree=MappingProxyType(dict(merged.origins)),
        pressure=pressure,
        weight_formula=(spec.get("cgroup") or {}).get("weightFormula"),
    )


# ---------------------------------------------------------------- classes


def _string_match(raw: Any) -> StringMatch:
    if isinstance(raw, str):
        return StringMatch(any_of=frozenset([raw]))
    if isinstance(raw, list):
        return StringMatch(any_of=frozenset(raw))
    return StringMatch(
        any_of=frozenset(raw["in"]) if "in" in raw else None,
        none_of=frozenset(raw["notIn"]) if "notIn" in raw else None,
        exists=raw.get("exists"),
    )


def _matcher(raw: dict[str, Any]) -> Matcher:
    qos = raw.get("kubeQoS")
    prio = raw.get("priority") or {}
    return Matcher(
        annotations=tuple((k, _string_match(v)) for k, v in (raw.get("annotations") or {}).items()),
        labels=tuple((k, _string_match(v)) for k, v in (raw.get("labels") or {}).items()),
        json_annotations=tuple(
            JsonKeyMatch(
                j["annotation"],
                j["key"],
                _string_match(j["value"]) if "value" in j else StringMatch(exists=True),
            )
            for j in raw.get("jsonAnnotations") or []
        ),
        kube_qos=frozenset([qos] if isinstance(qos, str) else qos) if qos else None,
        priority_class=_string_match(raw["priorityClassName"]) if "priorityClassName" in raw else None,
        priority_min=prio.get("gte"),
        priority_max=prio.get("lte"),
        namespaces=_string_match(raw["namespaces"]) if "namespaces" in raw else None,
        cgroup_path=raw.get("cgroupPath"),
    )


def _check_knob(c: _Checker, path: JsonPath, knob: Any, file: str | None, pods: bool) -> None:
    """An expression knob must parse, read only pod/container/node, and (``_try_expression``) not be
    one that can only fail or only yield a value ``file`` refuses."""
    if isinstance(knob, dict) and "expr" in knob:
        try:
            ast = ENV.parse("{{ " + knob["expr"] + " }}")
        except TemplateSyntaxError as exc:
            c.add((*path, "expr"), f"expression {short(knob['expr'])} does not parse: {exc.message}")
            return
        names = meta.find_undeclared_variables(ast)
        unknown = names - EXPR_VARIABLES
        if unknown:
            c.add(
                (*path, "expr"),
                f"expression {short(knob['expr'])} uses unknown name(s) {', '.join(sorted(unknown))}",
                "cgroup expressions may read pod, container and node",
            )
            return
        _try_expression(c, (*path, "expr"), knob, file, pods, constant=not names)


# Errors of an expression that no pod can avoid: the template limits (SecurityError) and numbers
# too large for any file. Others (a ZeroDivisionError, a missing label, None for a pod without a
# limit) depend on the pod, so the synthetic pods below cannot prove them wrong.
_HOPELESS = (SecurityError, OverflowError, MemoryError, RecursionError)

# Typical node fact values by unit: non-zero, so that a division by a fact does not fail here only.
_TYPICAL = {
    "percent": 50.0,
    "bytes": float(8 << 30),
    "cores": 4.0,
    "count": 2.0,
    "microseconds": 1000.0,
    "tasks": 100.0,
    "seconds": 60.0,
}


@cache
def _sample_node() -> tuple[tuple[str, Any], ...]:
    """Every node fact of the facts schema (keyed as the tick's flattened ``node``) at a typical value."""
    out: list[tuple[str, Any]] = []
    for spec in registry().specs.values():
        if spec.scope != "node":
            continue
        if spec.kind == "string":
            value: Any = spec.enum[0] if spec.enum else ""
        elif spec.kind == "boolean":
            value = False
        else:
            value = _TYPICAL.get(spec.unit, 1.0)
            value = int(value) if spec.kind == "integer" else value
        out.append((".".join(spec.path), value))
    return tuple(out)


# A pod of each Kubernetes QoS shape, with non-zero requests: (what it is, requests, limits).
_SAMPLE_SHAPES: tuple[tuple[str, dict[str, float], bool], ...] = (
    (
        "a pod requesting 1 CPU and 1Gi with limits of 2 CPUs and 2Gi",
        {"cpu": 1.0, "memory": 1.0 * (1 << 30)},
        True,
    ),
    ("a pod requesting 0.5 CPU and 512Mi without limits", {"cpu": 0.5, "memory": 0.5 * (1 << 30)}, False),
    ("a pod without requests or limits", {}, False),
)


def _sample_pods() -> tuple[tuple[str, Workload], ...]:
    return tuple(
        (
            what,
            Workload(
                uid=f"validate-{i}",
                name=f"sample-{i}",
                namespace="default",
                priority=0,
                containers=(
                    Container("app", requests=req, limits={k: 2 * v for k, v in req.items()} if lim else {}),
                ),
            ),
        )
        for i, (what, req, lim) in enumerate(_SAMPLE_SHAPES)
    )


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _try_expression(
    c: _Checker, path: JsonPath, knob: dict[str, Any], file: str | None, pods: bool, *, constant: bool
) -> None:
    """Evaluate an expression knob once per sample (a pod of each shape when it targets pods, else no
    pod) on a node with typical facts, as the tick would. Refused: a failure of the template limits
    or a number too large for any file (``_HOPELESS``) for any sample, any failure of an expression
    that reads neither pod nor node (``constant``), or, for every sample that
    yields a value, a value that is not a number and that ``file`` refuses (a string, a list). A
    number out of the file's range is refused only when the expression reads neither pod nor node
    (``constant``): otherwise real requests and facts may bring it in range, and the tick skips it
    when they do not. Without this, the tick would skip the write with an error every tick."""
    formula = (c.spec.get("cgroup") or {}).get("weightFormula")
    fn = compile_knob(file or "", knob, weight_formula=formula)
    node = dict(_sample_node())
    samples: tuple[tuple[str, Workload | None], ...] = (
        _sample_pods() if pods else (("a cgroup target without a pod", None),)
    )
    refused: list[str] = []
    yielded = 0
    for what, w in samples:
        try:
            text = fn(w, node)
        except RenderError as exc:
            if constant:
                c.add(
                    path,
                    f"expression {short(knob['expr'])} fails: {exc.__cause__}",
                    "it reads neither pod nor node, so it would fail the same way at every tick",
                )
                return
            if isinstance(exc.__cause__, _HOPELESS):
                c.add(
                    path,
                    f"expression {short(knob['expr'])} fails for {what} on a typical node: {exc.__cause__}",
                    "every tick would skip this value; keep the expression's numbers and strings small",
                )
                return
            continue
        if text is None or not file:
            continue
        yielded += 1
        bad = value_problem(file, text.strip(), c.node)
        if bad and (constant or not _is_number(text.strip())):
            refused.append(bad)
    if refused and len(refused) == yielded:
        c.add(
            path,
            f"expression {short(knob['expr'])} yields a value {file} refuses: {refused[0]}",
            "an expression must yield a number (bytes for memory files, cores for CPU files) "
            "or a text the file takes; it was evaluated on typical pods and node facts",
        )


def _compile_class(c: _Checker, i: int, raw: dict[str, Any]) -> QoSClass | None:
    base: JsonPath = ("classes", i)
    cpu = raw.get("cpu") or {}
    if "pool" in cpu:
        c.ref((*base, "cpu", "pool"), cpu["pool"], c.pools, "pool")
    for j, req in enumerate(cpu.get("requires") or []):
        c.ref((*base, "cpu", "requires", j), req, c.enhancements, "enhancement")
        enh = c.enhancements.get(req)
        if enh and enh.get("appliesTo") and raw["name"] not in enh["appliesTo"]:
            c.add(
                (*base, "cpu", "requires", j),
                f"class {raw['name']!r} requires enhancement {req!r}, which does not apply to it "
                f"(appliesTo: {', '.join(enh['appliesTo'])})",
                f"add {raw['name']!r} to the appliesTo of {req!r}, or drop the requirement",
            )
    if "shares" in cpu and "weight" in cpu:
        c.add((*base, "cpu"), "set either cpu.shares or cpu.weight, not both", "qosd converts between them")
    for key in ("shares", "weight"):
        if cpu.get(key) == "max":
            c.add((*base, "cpu", key), f'cpu.{key} cannot be "max"', "give a number, percent or expression")
    for section in ("cpu", "memory"):
        for key, knob in (raw.get(section) or {}).items():
            _check_knob(c, (*base, section, key), knob, CLASS_EXPR_FILES.get((section, key)), True)
            if (section, key) in CLASS_KNOB_FILES:
                _check_cgroup_value(c, (*base, section, key), CLASS_KNOB_FILES[section, key], knob)
    resctrl = raw.get("resctrl") or {}
    l3 = resctrl.get("l3Percent")
    if isinstance(l3, list) and len(l3) == 2 and l3[0] >= l3[1]:
        c.add(
            (*base, "resctrl", "l3Percent"),
            f"l3Percent [{l3[0]}, {l3[1]}] is empty: the start must be below the end",
            "e.g. [0, 30] gives the class the lowest 30% of the L3 ways",
        )
    oom = raw.get("oomPriority") or {}
    lo, hi, default = oom.get("min"), oom.get("max"), oom.get("default")
    if lo is not None and hi is not None and lo >= hi:
        c.add((*base, "oomPriority"), f"oomPriority range [{lo}, {hi}) is empty")
    elif default is not None and ((lo is not None and default < lo) or (hi is not None and default >= hi)):
        c.add((*base, "oomPriority", "default"), f"oomPriority default {default} is outside [{lo}, {hi})")
    if "before" in raw:
        c.ref((*base, "before"), raw["before"], c.classes, "class")
    return QoSClass(
        name=raw["name"],
        index=i,
        matchers=tuple(_matcher(m) for m in raw.get("match") or []),
        cpu_policy=cpu.get("policy"),
        pool=cpu.get("pool"),
        requires=tuple(cpu.get("requires") or ()),
        protected=bool(raw.get("protected", False)),
        oom_priority=OomPriority(default, lo, hi),
        eviction_priority=raw.get("evictionPriority"),
        cpu=ClassCpu.of(freeze(cpu)),
        memory=ClassMemory.of(freeze(raw.get("memory") or {})),
        resctrl=class_resctrl(freeze(resctrl)),
        origin=c.loc(base),
        memory_qos=MemoryQos.of(raw["memoryQos"]) if raw.get("memoryQos") else None,
    )


# ---------------------------------------------------------------- enhancements


def _sources(raw: Any) -> list[dict[str, Any]]:
    if raw is None:
        return []
    return list(raw) if isinstance(raw, list) else [raw]


def _compile_enhancement(c: _Checker, i: int, raw: dict[str, Any]) -> Enhancement | None:
    base: JsonPath = ("enhancements", i)
    name = raw["name"]
    sources: list[ValueSource] = []
    raw_sources = _sources(raw.get("from"))
    for j, src in enumerate(raw_sources):
        spath = (*base, "from", j) if isinstance(raw.get("from"), list) else (*base, "from")
        kinds = [k for k in ("label", "annotation", "jsonAnnotation") if k in src]
        if len(kinds) != 1:
            c.add(
                spath,
                "a value source names exactly one of label, annotation, jsonAnnotation "
                f"(got {kinds or 'none'})",
            )
            continue
        kind = kinds[0]
        if kind == "jsonAnnotation" and "key" not in src:
            c.add(spath, "jsonAnnotation needs the key inside the JSON object", "add e.g. key: numa_binding")
            continue
        if kind != "jsonAnnotation" and "key" in src:
            c.add((*spath, "key"), "key only applies to jsonAnnotation sources")
            continue
        sources.append(ValueSource(kind, src[kind], src.get("key"), tuple(src.get("aliases") or ())))
    for j, target in enumerate(raw.get("appliesTo") or []):
        c.ref((*base, "appliesTo", j), target, c.classes, "class")
    for field_name in ("requires", "conflictsWith"):
        for j, target in enumerate(raw.get(field_name) or []):
            c.ref((*base, field_name, j), target, c.enhancements, "enhancement")
            if target == name:
                c.add((*base, field_name, j), f"enhancement {name!r} lists itself in {field_name}")
    both = set(raw.get("requires") or ()) & set(raw.get("conflictsWith") or ())
    if both:
        c.add(
            (*base, "conflictsWith"),
            f"enhancement {name!r} both requires and conflicts with {', '.join(sorted(both))}",
            "no workload could ever satisfy it",
        )
    vtype = str(raw.get("type", "bool"))
    if "equals" in raw and vtype != "bool":
        c.add((*base, "equals"), f"equals only applies to bool enhancements; {name!r} is {vtype}")
    if "values" in raw and vtype != "string":
        c.add((*base, "values"), f"values only applies to string enhancements; {name!r} is {vtype}")
    rng = raw.get("range")
    if rng is not None:
        if vtype not in ("number", "integer"):
            c.add(
                (*base, "range"), f"range only applies to number or integer enhancements; {name!r} is {vtype}"
            )
        elif rng[0] > rng[1]:
            c.add((*base, "range"), f"range [{rng[0]}, {rng[1]}] is empty")
    effect = raw.get("effect") or {}
    target = effect.get("set")
    if target is not None:
        allowed = EFFECT_TYPES.get(target, ())
        if "value" in effect:
            if not _value_has_type(effect["value"], allowed):
                c.add(
                    (*base, "effect", "value"),
                    f"{target} takes {_a(allowed)}, not {short(effect['value'])}",
                )
        elif vtype not in allowed:
            c.add(
                (*base, "effect", "set"),
                f"{target} takes {_a(allowed)}, but enhancement {name!r} yields {_a((vtype,))}",
                f"set type: {allowed[0]} on the enhancement, or give effect.value",
            )
    return Enhancement(
        name=name,
        sources=tuple(sources),
        value_type=vtype,
        equals=str(raw.get("equals", "true")),
        values=tuple(raw.get("values") or ()),
        range=(float(rng[0]), float(rng[1])) if rng else None,
        on_invalid=str(raw.get("onInvalid", "ignore")),
        default=raw.get("default"),
        applies_to=frozenset(raw.get("appliesTo") or ()),
        requires=tuple(raw.get("requires") or ()),
        conflicts_with=tuple(raw.get("conflictsWith") or ()),
        effect=target,
        effect_value=freeze(effect.get("value")),
        origin=c.loc(base),
    )


def _a(kinds: tuple[str, ...]) -> str:
    text = " or ".join(kinds)
    return ("an " if text[:1] in "aeiou" else "a ") + text


def _value_has_type(value: Any, allowed: tuple[str, ...]) -> bool:
    checks: dict[str, Callable[[Any], bool]] = {
        "bool": lambda v: isinstance(v, bool),
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    }
    return any(checks[t](value) for t in allowed)


def _check_enhancement_graph(c: _Checker) -> None:
    """requires must be satisfiable where the enhancement applies, and must not meet a conflict."""
    index = {name: i for i, name in enumerate(c.enhancements)}
    for name, enh in c.enhancements.items():
        base: JsonPath = ("enhancements", index[name])
        applies = set(enh.get("appliesTo") or ())
        for j, req in enumerate(enh.get("requires") or []):
            other = c.enhancements.get(req)
            if other is None:
                continue
            other_applies = set(other.get("appliesTo") or ())
            if applies and other_applies and not applies <= other_applies:
                missing = ", ".join(sorted(applies - other_applies))
                c.add(
                    (*base, "requires", j),
                    f"enhancement {name!r} applies to {missing} but requires {req!r}, "
                    "which does not apply there",
                    f"narrow appliesTo of {name!r} or widen appliesTo of {req!r}",
                )
            if name in (other.get("conflictsWith") or ()):
                c.add(
                    (*base, "requires", j),
                    f"enhancement {name!r} requires {req!r}, but {req!r} conflicts with {name!r}",
                    "no workload could carry both",
                )


# ---------------------------------------------------------------- pools


def _compile_pool(c: _Checker, i: int, raw: dict[str, Any]) -> Pool | None:
    base: JsonPath = ("pools", i)
    name = raw["name"]
    cpus = raw.get("cpus")
    size = raw.get("size")
    kind = raw.get("kind")
    if cpus is None and size is None:
        c.add(
            base,
            f"pool {name!r} has neither cpus (static) nor size (dynamic)",
            "add cpus: {count: 2} or size: {fromRequests: 1.0}",
        )
    if cpus is not None and size is not None:
        c.add((*base, "size"), f"pool {name!r} has both static cpus and a dynamic size", "keep one of them")
    static: frozenset[int] | None = None
    count: int | None = None
    if cpus is not None:
        if "list" in cpus:
            try:
                static = parse_cpuset(cpus["list"])
            except ValueError as exc:
                c.add((*base, "cpus", "list"), str(exc))
            else:
                outside = sorted(static - c.node.cpu_ids) if c.node.cpu_ids else []
                if outside:
                    c.add(
                        (*base, "cpus", "list"),
                        f"pool {name!r} names CPUs {short(outside)} that node {c.node.name!r} does not have "
                        f"({c.node.cpus} CPUs)",
                        "use a nodeSelector to target nodes that have them, or a count",
                    )
        else:
            count = cpus.get("count")
            if count is not None and count > c.node.cpus:
                c.add(
                    (*base, "cpus", "count"),
                    f"pool {name!r} wants {count} CPUs but node {c.node.name!r} has {c.node.cpus}",
                )
    size = size or {}
    modes = [k for k in ("fromRequests", "remainder", "perContainer") if size.get(k) not in (None, False)]
    if raw.get("size") is not None and len(modes) != 1:
        c.add(
            (*base, "size"),
            "a dynamic pool is sized by exactly one of fromRequests, remainder, perContainer "
            f"(got {modes or 'none'})",
        )
    lo, hi = size.get("min"), size.get("max")
    if lo is not None and hi is not None and lo > hi:
        c.add((*base, "size"), f"pool {name!r} has min {lo} above max {hi}")
    numa = raw.get("numa") or {}
    if raw.get("template") and static is not None:
        c.add((*base, "template"), "a template pool cannot have a static cpu list", "use a count or a size")
    return Pool(
        name=name,
        kind=kind,
        static_cpus=static,
        static_count=count,
        from_requests=size.get("fromRequests"),
        remainder=bool(size.get("remainder", False)),
        per_container=bool(size.get("perContainer", False)),
        min=lo,
        max=hi,
        template=bool(raw.get("template", False)),
        placement=numa.get("placement"),
        per_numa=bool(numa.get("perNuma", False)),
        ht_policy=(raw.get("ht") or {}).get("policy"),
        order=str(raw.get("order", "lowFirst")),
        origin=c.loc(base),
    )


def _check_pools(c: _Checker, pools: list[Pool | None]) -> None:
    index = {p.name: i for i, p in enumerate(pools) if p is not None}
    claimed: dict[int, str] = {}
    static_total = 0
    over = False
    for p in pools:
        if p is None:
            continue
        if p.static_cpus:
            for cpu in sorted(p.static_cpus):
                if cpu in claimed:
                    other = claimed[cpu]
                    c.add(
                        ("pools", index[p.name], "cpus", "list"),
                        f"static pools {other!r} and {p.name!r} both claim CPU {cpu}",
                        "static cpusets must not overlap; shrink one of them",
                        related=(c.loc(("pools", index[other], "cpus", "list")),),
                    )
                    break
                claimed[cpu] = p.name
        static_total += len(p.static_cpus or ()) + (p.static_count or 0)
        if static_total > c.node.cpus and not over:
            over = True
            c.add(
                ("pools", index[p.name], "cpus"),
                f"static pools take {static_total} CPUs up to {p.name!r} "
                f"but node {c.node.name!r} has {c.node.cpus}",
                "reduce the static pools or target larger nodes with a nodeSelector",
            )
    remainders = [p.name for p in pools if p is not None and p.remainder]
    if len(remainders) > 1:
        c.add(
            ("pools", index[remainders[1]], "size", "remainder"),
            f"only one pool can take the remainder; {', '.join(remainders)} all do",
        )


# ---------------------------------------------------------------- reclaim


def _quantity(c: _Checker, path: JsonPath, value: Any) -> float | None:
    """A quantity, or None when absent or out of bounds (then a problem is recorded; the schema
    stage reports it first, see engine/config/unitcheck.py)."""
    if value is None:
        return None
    try:
        return parse_quantity(value)
    except ValueError as exc:
        c.add(path, str(exc))
        return None


@overload
def _duration(c: _Checker, path: JsonPath, value: Any, default: float) -> float: ...
@overload
def _duration(c: _Checker, path: JsonPath, value: Any, default: None = None) -> float | None: ...
def _duration(c: _Checker, path: JsonPath, value: Any, default: float | None = None) -> float | None:
    """Seconds of a duration, ``default`` when absent or out of bounds (then a problem is recorded)."""
    if value is None:
        return default
    try:
        return parse_duration(str(value))
    except ValueError as exc:
        c.add(path, str(exc))
        return default


# Katalyst's per-resource defaults of the headroom policy: reservedResourceForAllocate, the buffer
# on a container's usage (estimation_canonical.go) and the estimate of a container with no metric.
HEADROOM_DEFAULTS = {"cpu": (4.0, 1.25, 4.0), "memory": (float(5 << 30), 1.1, float(8 << 30))}
UTIL_FIELDS = {
    "cpu": ("targetUtilization", "maxUtilization", "maxOversoldRate", "maxHeadroomCapacityRate"),
    "memory": (
        "freeBasedRatio",
        "staticBasedCapacity",
        "cacheBasedRatio",
        "cpuMemRatioLower",
        "cpuMemRatioUpper",
    ),
}


def _compile_headroom(c: _Checker, res: str, base: JsonPath, raw: dict[str, Any]) -> ReclaimHeadroom:
    """The headroom policy's parameters with Katalyst's defaults; util fields of the other resource
    are an error, since they would be silently ignored."""
    path: JsonPath = (*base, "headroom")
    reserved, factor, fallback = HEADROOM_DEFAULTS[res]
    util = raw.get("utilBased") or {}
    other = "memory" if res == "cpu" else "cpu"
    for key in util:
        if key in UTIL_FIELDS[other]:
            c.add(
                (*path, "utilBased", key),
                f"utilBased.{key} applies to reclaim.{other}, not reclaim.{res}",
                f"reclaim.{res}.headroom.utilBased takes: enabled, {', '.join(UTIL_FIELDS[res])}",
            )
    if res == "cpu" and "systemFactor" in raw:
        c.add((*path, "systemFactor"), "systemFactor applies to reclaim.memory only (system containers' rss)")
    d = ReclaimHeadroom(reserved, factor, fallback)
    q = {k: _quantity(c, (*path, k), raw.get(k)) for k in ("reservedForAllocate", "fallback")}
    static = _quantity(c, (*path, "utilBased", "staticBasedCapacity"), util.get("staticBasedCapacity"))
    lower = float(util.get("cpuMemRatioLower", d.cpu_mem_ratio_lower))
    upper = float(util.get("cpuMemRatioUpper", d.cpu_mem_ratio_upper))
    if lower > upper:
        c.add(
            (*path, "utilBased", "cpuMemRatioLower"),
            f"cpuMemRatioLower {short(lower)} is above cpuMemRatioUpper {short(upper)}",
        )
    return ReclaimHeadroom(
        reserved_for_allocate=q["reservedForAllocate"] if q["reservedForAllocate"] is not None else reserved,
        usage_factor=float(raw.get("usageFactor", factor)),
        fallback=q["fallback"] if q["fallback"] is not None else fallback,
        system_factor=float(raw.get("systemFactor", d.system_factor)),
        util_based=bool(util.get("enabled", d.util_based)),
        target_utilization=float(util.get("targetUtilization", d.target_utilization)),
        max_utilization=float(util.get("maxUtilization", d.max_utilization)),
        max_oversold_rate=float(util.get("maxOversoldRate", d.max_oversold_rate)),
        max_headroom_capacity_rate=float(util.get("maxHeadroomCapacityRate", d.max_headroom_capacity_rate)),
        free_based_ratio=float(util.get("freeBasedRatio", d.free_based_ratio)),
        static_based_capacity=static if static is not None else d.static_based_capacity,
        cache_based_ratio=float(util.get("cacheBasedRatio", d.cache_based_ratio)),
        cpu_mem_ratio_lower=lower,
        cpu_mem_ratio_upper=upper,
    )


def _compile_reclaim(c: _Checker, raw: dict[str, Any]) -> Reclaim:
    resources: dict[str, ReclaimResource | None] = {}
    for res in ("cpu", "memory"):
        r = raw.get(res)
        if not isinstance(r, dict):
            resources[res] = None
            continue
        base: JsonPath = ("reclaim", res)
        q = {
            k: _quantity(c, (*base, k), r.get(k))
            for k in ("min", "max", "reservedForReport", "minReport", "minIgnored")
        }
        sm = r.get("smoothing") or {}
        steps = {k: _quantity(c, (*base, "smoothing", k), sm.get(k)) for k in ("minStep", "maxStep")}
        if q["min"] is not None and q["max"] is not None and q["min"] > q["max"]:
            c.add((*base, "min"), f"reclaim {res} min {short(r['min'])} is above max {short(r['max'])}")
        if (
            steps["minStep"] is not None
            and steps["maxStep"] is not None
            and steps["minStep"] > steps["maxStep"]
        ):
            c.add(
                (*base, "smoothing", "minStep"),
                f"smoothing minStep {short(sm['minStep'])} is above maxStep {short(sm['maxStep'])}",
            )
        window = None
        if "window" in sm:
            window = _duration(c, (*base, "smoothing", "window"), sm["window"])
            # The smoothing keeps every raw value of the window, in memory and in the state file.
            too_long = window_problem(window, sm["window"], "the report") if window is not None else None
            if too_long:
                c.add((*base, "smoothing", "window"), too_long, WINDOW_HINT)
        policy = str(r.get("policy", "usage"))
        for j, name in enumerate(r.get("requestAsUsage") or ()):
            c.ref((*base, "requestAsUsage", j), name, c.classes, "class")
        if policy == "headroom" and "reclaimThresholdPercent" in r:
            c.add(
                (*base, "reclaimThresholdPercent"),
                f"reclaim {res} policy headroom takes no reclaimThresholdPercent",
                "the headroom policy keeps headroom.reservedForAllocate back instead of a percent margin",
            )
        if "headroom" in r and policy != "headroom":
            c.add(
                (*base, "headroom"),
                f"reclaim {res} has headroom parameters but policy {policy!r}",
                "set policy: headroom, or remove the headroom section",
            )
        headroom = _compile_headroom(c, res, base, r.get("headroom") or {}) if policy == "headroom" else None
        resources[res] = ReclaimResource(
            policy=policy,
            threshold_percent=r.get("reclaimThresholdPercent"),
            max_percent=r.get("maxPercent"),
            min=q["min"],
            max=q["max"],
            reserved_for_report=q["reservedForReport"],
            min_report=q["minReport"],
            min_ignored=q["minIgnored"],
            publish_as=r.get("publishAs"),
            smoothing_window=window,
            smoothing_agg=str(sm.get("aggregate", "avg")),
            min_step=steps["minStep"],
            max_step=steps["maxStep"],
            request_as_usage=frozenset(r.get("requestAsUsage") or ()),
            headroom=headroom,
        )
    return Reclaim(
        enabled=bool(raw.get("enabled", True)),
        cpu=resources["cpu"],
        memory=resources["memory"],
        degrade_after=_duration(c, ("reclaim", "degradeAfter"), raw.get("degradeAfter")),
        report_interval=_duration(c, ("reclaim", "reportInterval"), raw.get("reportInterval")),
        update=_compile_update(c, raw["update"]) if "update" in raw else None,
    )


def _compile_update(c: _Checker, raw: dict[str, Any]) -> ReclaimUpdate:
    """spec.reclaim.update; maxInterval defaults to Koordinator's updateTimeThresholdSeconds."""
    interval = _duration(
        c, ("reclaim", "update", "maxInterval"), raw.get("maxInterval"), DEFAULT_MAX_INTERVAL
    )
    return ReclaimUpdate(diff_threshold=float(raw["diffThreshold"]), max_interval=interval)


# ---------------------------------------------------------------- pressure


def _compile_pressure(c: _Checker, raw: dict[str, Any]) -> Pressure:
    """spec.pressure -> Pressure, Katalyst's defaults for what is left out."""
    d = Pressure()
    numa = raw.get("numaWatermark") or {}
    system = raw.get("systemMemory") or {}
    psi = system.get("psi") or {}
    times = int(numa.get("timesThreshold", d.numa_times))
    wait = int(numa.get("fastEvictionWaitCycle", d.numa_fast_wait))
    if wait > times:
        c.add(
            ("pressure", "numaWatermark", "fastEvictionWaitCycle"),
            f"fastEvictionWaitCycle {wait} is above timesThreshold {times}",
            "below the min watermark the count jumps to timesThreshold - fastEvictionWaitCycle, "
            "which must not be negative (Katalyst: 12 and 1)",
        )
    classes = psi.get("podClasses")
    for j, name in enumerate(classes or []):
        c.ref(("pressure", "systemMemory", "psi", "podClasses", j), name, c.classes, "class")
    minimum = _quantity(
        c, ("pressure", "systemMemory", "freeThresholdMinimum"), system.get("freeThresholdMinimum")
    )
    return Pressure(
        numa_interval=_duration(
            c, ("pressure", "numaWatermark", "interval"), numa.get("interval"), d.numa_interval
        ),
        numa_reclaimed_times=int(numa.get("reclaimedTimesThreshold", d.numa_reclaimed_times)),
        numa_times=times,
        numa_fast_wait=wait,
        watermark_scale_factor=float(raw.get("watermarkScaleFactor", d.watermark_scale_factor)),
        system_free_minimum=minimum if minimum is not None else d.system_free_minimum,
        psi_enabled=bool(psi.get("enabled", d.psi_enabled)),
        psi_some=int(psi.get("someThreshold", d.psi_some)),
        psi_full=int(psi.get("fullThreshold", d.psi_full)),
        psi_duration=_duration(
            c, ("pressure", "systemMemory", "psi", "duration"), psi.get("duration"), d.psi_duration
        ),
        psi_min_pods=int(psi.get("minPods", d.psi_min_pods)),
        psi_min_pod_pressure=int(psi.get("minPodPressure", d.psi_min_pod_pressure)),
        psi_pod_classes=tuple(classes) if classes is not None else None,
        psi_reset_when_below=bool(psi.get("resetWhenBelow", d.psi_reset_when_below)),
    )


# ---------------------------------------------------------------- rules


def _compile_rule(c: _Checker, i: int, raw: dict[str, Any], policy_mode: str) -> Rule | None:
    base: JsonPath = ("rules", i)
    before = len(c.problems)
    when = (
        parse_condition(raw.get("when"), (*base, "when"), c.loc, c.class_names, c.problems)
        if "when" in raw
        else None
    )
    clear = (
        parse_condition(raw.get("clearWhen"), (*base, "clearWhen"), c.loc, c.class_names, c.problems)
        if "clearWhen" in raw
        else None
    )
    scopes = {cmp.spec.scope for cmp in comparisons(when) + comparisons(clear)} & {"numa", "pod", "container"}
    if len(scopes) > 1:
        c.add(
            (*base, "when"),
            f"rule {raw['name']!r} mixes per-{' and per-'.join(sorted(scopes))} facts",
            "a rule iterates over at most one of numa, pod or container; split it into two rules",
        )
    if clear is not None and when is None:
        c.add((*base, "clearWhen"), "clearWhen needs a when: it says when a fired rule stops")
    actions_raw = raw.get("then")
    action_list = actions_raw if isinstance(actions_raw, list) else [actions_raw]
    actions: list[Action] = []
    for j, act in enumerate(action_list):
        apath = (*base, "then", j) if isinstance(actions_raw, list) else (*base, "then")
        if not isinstance(act, dict) or len(act) != 1:
            continue
        kind, params = next(iter(act.items()))
        _check_action(c, apath, kind, params or {}, when)
        actions.append(Action(kind, freeze(params or {}), (*apath, kind)))

    limits = raw.get("limits") or {}
    per_window = limits.get("perWindow")
    if per_window and isinstance(per_window.get("count"), int) and per_window["count"] > MAX_RATE_COUNT:
        # The engine remembers each firing inside the window (at most ``count`` of them).
        c.add(
            (*base, "limits", "perWindow", "count"),
            f"perWindow count {per_window['count']} is above {MAX_RATE_COUNT}: qosd keeps the time of every "
            "firing the count allows",
            f"a rule fires at most once per tick; at most {MAX_RATE_COUNT} firings per window, "
            "or drop perWindow to leave the rule unlimited",
        )
    if len(c.problems) != before:
        return None
    actions = [_compile_action(c, a) for a in actions]
    return Rule(
        name=raw["name"],
        index=i,
        mode=str(raw.get("mode", policy_mode)),
        description=str(raw.get("description", "")),
        when=when,
        clear_when=clear,
        sustain=_duration(c, (*base, "for"), raw.get("for"), 0.0),
        cooldown=_duration(c, (*base, "cooldown"), raw.get("cooldown"), 0.0),
        per_round=limits.get("perRound"),
        per_window=(
            per_window["count"],
            _duration(c, (*base, "limits", "perWindow", "window"), per_window["window"], 0.0),
        )
        if per_window
        else None,
        actions=tuple(actions),
        scope=scope_of(when) if len(scopes) <= 1 else "node",
        origin=c.loc(base),
    )


def _compile_action(c: _Checker, action: Action) -> Action:
    """The action with its typed spec, compiled by the feature that owns its kind (checked first)."""
    compile_spec = c.action_specs.get(action.kind)
    return replace(action, spec=compile_spec(action.params)) if compile_spec is not None else action


def _check_action(
    c: _Checker, path: JsonPath, kind: str, params: dict[str, Any], when: Condition | None
) -> None:
    p = (*path, kind)
    if kind == "evict":
        eviction_spec.check(c, p, params, when)
    elif kind == "suppress":
        suppress_spec.check(c, p, params)
    elif kind == "setCgroup":
        set_cgroup_spec.check(c, p, params)
    elif kind == "memoryGuard":
        memory_guard_spec.check(c, p, params)
    elif kind == "setResctrl":
        resctrl_spec.check(c, p, params)
    elif kind == "publish":
        publish_spec.check(c, p, params)

def _check_cgroup_path(c: _Checker, path: JsonPath, what: str, value: Any) -> None:
    """A cgroup an action writes to, named relative to the cgroup root: refused here rather than
    at every write (cgroups/paths.cgroup_path_problem says what a usable path looks like)."""
    bad = cgroup_path_problem(str(value))
    if bad:
        c.add(path, f"{what} {short(value)}: {bad}")


def _check_cgroup_value(c: _Checker, path: JsonPath, file: str, knob: Any) -> str | None:
    """A literal setCgroup value must be what its file accepts (cgroups/files.VALUE_FORMATS),
    so that it cannot fail every tick at write time. The text checked is the text written: the knob
    compiled as the tick compiles it. Percents and expressions depend on the pod and are computed at
    tick time. Returns the text when it is valid."""
    if isinstance(knob, dict) and ("percent" in knob or "expr" in knob):
        fmt = VALUE_FORMATS.get(file)
        if "percent" in knob and fmt is not None and not fmt.amount:
            c.add(
                (*path, "percent"),
                f"{file} does not hold an amount of CPU or memory, so a percent cannot size it",
                f"give {file} {fmt.describe}",
            )
        return None
    formula = (c.spec.get("cgroup") or {}).get("weightFormula")
    text = compile_knob(file, knob, weight_formula=formula)(None, {})
    if text is None:
        return None
    text = text.strip()
    bad = value_problem(file, text, c.node)
    if bad:
        hint = (
            "the kernel refuses a cpuset outside the node's (and the parent's); "
            "use a nodeSelector to target nodes that have them"
            if "does not have" in bad
            else "the kernel would refuse it on every write; cgroup files take plain ASCII values"
        )
        c.add(path, bad, hint)
        return None
    return text


def _check_cgroup_combination(c: _Checker, path: JsonPath, literals: dict[str, str], files: set[str]) -> None:
    """Values of one setCgroup that the kernel refuses together (sched/core.c): a literal CFS burst
    above a literal quota, or burst + quota above max_cfs_runtime; and any weight next to a cpu.idle
    that may be 1, which pins the weight (every later weight write is EINVAL)."""
    bad = burst_problem(literals)
    if bad:
        c.add(path, bad, "the kernel refuses a burst above the quota; lower the burst or raise the quota")
    weight = [f for f in ("cpu.shares", "cpu.weight") if f in files]
    if "cpu.idle" in files and literals.get("cpu.idle") != "0" and weight:
        c.add(
            path,
            f"cpu.idle (unless a literal 0) together with {weight[0]}: "
            "an idle group's weight is pinned by the kernel",
            f"drop {weight[0]} (an idle group runs only when nothing else wants the CPU anyway)",
        )


__all__ = ["ORDER_OPS", "check_and_compile", "document_problems"]
