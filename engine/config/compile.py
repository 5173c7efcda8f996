"""Semantic checks and compilation of a merged spec into an immutable Policy.

The schema checks shape; this checks meaning: references to classes, pools and enhancements exist,
enhancement rules (appliesTo/requires/conflictsWith) are coherent, static cpusets do not overlap and
fit the node, thresholds and their release targets make sense, and every fact is known and typed.
All problems are collected before raising, so one run reports everything.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import replace
from types import MappingProxyType
from typing import Any, overload

from engine.cgroups.declared import NO_FILES, compile_files
from engine.cgroups.files import VALUE_FORMATS, burst_problem, same_host_file, value_problem
from engine.cgroups.paths import cgroup_path_problem
from engine.config.errors import Location, PolicyError, Problem, short
from engine.config.load import JsonPath
from engine.config.matchers import check_matchers, compile_matcher
from engine.config.merge import NAMED_SECTIONS, Merged, Rendered
from engine.config.policy import (
    EFFECTS,
    Action,
    DocumentRef,
    Enhancement,
    OomPriority,
    Policy,
    QoSClass,
    Rule,
    ValueSource,
    freeze,
)
from engine.features.class_knobs import spec as set_cgroup_spec
from engine.features.class_knobs.knob_check import check_knob
from engine.features.class_knobs.knobs import compile_knob
from engine.features.class_knobs.spec import ClassCpu, ClassMemory, check_class_knobs
from engine.features.cpu_burst.spec import compile_cfs_quota_burst
from engine.features.eviction import spec as eviction_spec
from engine.features.eviction.pressure_spec import compile_pressure
from engine.features.eviction.round_spec import compile_round
from engine.features.memory_qos import spec as memory_guard_spec
from engine.features.memory_qos.spec import MemoryQos
from engine.features.pools.spec import check_pools, compile_pool
from engine.features.reclaim import spec as publish_spec
from engine.features.reclaim.spec import compile_reclaim
from engine.features.resctrl import spec as resctrl_spec
from engine.features.resctrl.spec import check_class_resctrl, class_resctrl
from engine.features.rules.conditions import (
    ORDER_OPS,
    Condition,
    comparisons,
    parse_condition,
    scope_of,
)
from engine.features.specs import action_specs
from engine.features.suppress import spec as suppress_spec
from engine.model.intents import STEP_NAMES
from engine.model.node import NodeInfo
from engine.model.units import parse_duration, parse_quantity

EFFECT_TYPES = {name: types for name, (_field, types) in EFFECTS.items()}


# The most firings a rule's perWindow may allow (one timestamp each is kept per rule).
MAX_RATE_COUNT = 10_000

_SINGULAR = {"classes": "class", "enhancements": "enhancement", "pools": "pool", "rules": "rule"}
_SECTION_OF = {what: section for section, what in _SINGULAR.items()}


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
        # What documents with schema errors had taken out (engine/config/withheld.py): not "undefined".
        self.withheld = tuple(r.withheld for r in merged.documents if r.withheld is not None)
        hidden_classes = {n for w in self.withheld for n in w.names.get("classes", ())} - set(self.classes)
        self.class_names = (*self.classes, *sorted(hidden_classes))
        self.action_specs = action_specs((self.spec.get("cgroup") or {}).get("weightFormula"))
        self.cgroup_files = NO_FILES  # spec.cgroup.files, compiled before the rules that write them

    def loc(self, path: JsonPath) -> Location:
        return self.merged.locate(path)  # the writing document's line:col and JSON path

    def add(self, path: JsonPath, message: str, hint: str = "", related: Iterable[Location] = ()) -> None:
        self.problems.append(Problem(self.loc(path), message, hint, tuple(related)))

    def hidden(self, key: JsonPath) -> bool:
        """Whether spec ``key`` was taken out of a document for its schema errors: a check about it
        would report what the schema error already says, or a consequence of it."""
        return any(w.hides(key) for w in self.withheld)

    def ref(self, path: JsonPath, name: Any, table: dict[str, Any], what: str) -> None:
        if isinstance(name, str) and name not in table:
            if self.hidden((_SECTION_OF[what], name)):
                return
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
        """A quantity, or None when absent or out of bounds (then a problem is recorded; the schema
        stage reports it first, see engine/config/unitcheck.py)."""
        if value is None:
            return None
        try:
            return parse_quantity(value)
        except ValueError as exc:
            self.add(path, str(exc))
            return None

    @overload
    def duration(self, path: JsonPath, value: Any, default: float) -> float: ...
    @overload
    def duration(self, path: JsonPath, value: Any, default: None = None) -> float | None: ...
    def duration(self, path: JsonPath, value: Any, default: float | None = None) -> float | None:
        """Seconds of a duration, ``default`` when absent or out of bounds (then a problem is recorded)."""
        if value is None:
            return default
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.add(path, str(exc))
            return default

    def knob(
        self, path: JsonPath, knob: Any, file: str | None, pods: bool, *, containers: bool = False
    ) -> None:
        check_knob(self, path, knob, file, pods, containers=containers)

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
    pools = [compile_pool(c, i, raw) for i, raw in enumerate(spec.get("pools", []))]
    check_pools(c, pools)
    reclaim = compile_reclaim(c, spec.get("reclaim") or {}, compile_matcher)
    pressure = compile_pressure(c, spec.get("pressure") or {})
    cfs_quota_burst = compile_cfs_quota_burst(c, spec.get("cfsQuotaBurst") or {})
    mode = str(spec.get("mode", "enforce"))
    c.cgroup_files = compile_files(c, spec.get("cgroup") or {})
    rules = [_compile_rule(c, i, raw, mode) for i, raw in enumerate(spec.get("rules", []))]
    memory_guard_spec.check_one_reclaim_root(
        c,
        (
            (a.path, a.spec)
            for r in rules
            if r is not None
            for a in r.actions
            if isinstance(a.spec, memory_guard_spec.MemoryGuardSpec)
        ),
    )
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
        eviction=compile_round(spec.get("eviction") or {}),
        weight_formula=(spec.get("cgroup") or {}).get("weightFormula"),
        cfs_quota_burst=cfs_quota_burst,
        cgroup_files=c.cgroup_files,
    )


# ---------------------------------------------------------------- classes


def _compile_class(c: _Checker, i: int, raw: dict[str, Any]) -> QoSClass | None:
    base: JsonPath = ("classes", i)
    cpu = raw.get("cpu") or {}
    resctrl = raw.get("resctrl") or {}
    oom = raw.get("oomPriority") or {}
    check_class_knobs(c, base, raw)
    check_class_resctrl(c, base, resctrl)
    check_matchers(c, base, raw)
    if "before" in raw:
        c.ref((*base, "before"), raw["before"], c.classes, "class")
    return QoSClass(
        name=raw["name"],
        index=i,
        matchers=tuple(compile_matcher(m) for m in raw.get("match") or []),
        cpu_policy=cpu.get("policy"),
        pool=cpu.get("pool"),
        requires=tuple(cpu.get("requires") or ()),
        protected=bool(raw.get("protected", False)),
        oom_priority=OomPriority(oom.get("default"), oom.get("min"), oom.get("max")),
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


# ---------------------------------------------------------------- rules


def _compile_rule(c: _Checker, i: int, raw: dict[str, Any], policy_mode: str) -> Rule | None:
    base: JsonPath = ("rules", i)
    before = len(c.problems)
    if raw.get("name") in STEP_NAMES:
        c.add(
            (*base, "name"),
            f"rule name {raw['name']!r} is taken: {STEP_NAMES[raw['name']]} signs its intents and "
            "skipped notes with it",
            "explain and simulate could not tell the rule and the step apart; rename the rule",
        )
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
    samples = raw.get("samples")
    if samples is not None and "for" in raw:
        c.add(
            (*base, "samples"),
            "a rule takes either for or samples, not both",
            "for needs the condition to hold without a break for a duration (one false tick starts "
            "it again); samples counts ticks that met it and only resets after `clear` samples in a "
            "row that did not",
        )
    if samples is not None and when is None:
        c.add((*base, "samples"), "samples needs a when: it counts the ticks that meet it")
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
        sustain=c.duration((*base, "for"), raw.get("for"), 0.0),
        cooldown=c.duration((*base, "cooldown"), raw.get("cooldown"), 0.0),
        per_round=limits.get("perRound"),
        per_window=(
            per_window["count"],
            c.duration((*base, "limits", "perWindow", "window"), per_window["window"], 0.0),
        )
        if per_window
        else None,
        actions=tuple(actions),
        scope=scope_of(when) if len(scopes) <= 1 else "node",
        origin=c.loc(base),
        samples=(int(samples["fire"]), int(samples["clear"])) if samples is not None else None,
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
    elif kind == "publish" and not c.hidden(("reclaim", str(params.get("resource")))):
        publish_spec.check(c, p, params)  # it reads spec.reclaim.<resource>


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
    declared = c.cgroup_files.formats
    if file not in VALUE_FORMATS and file not in declared:
        if c.hidden(("cgroup", "files", file)):
            return None  # declared by a document whose declaration has schema errors
        close = difflib.get_close_matches(file, [*VALUE_FORMATS, *declared], n=1, cutoff=0.6)
        c.add(
            path,
            f"cgroup file {file!r} is neither built in nor declared",
            (f"did you mean {close[0]!r}? " if close else "")
            + "declare a file qosd does not know under spec.cgroup.files, with its values",
        )
        return None
    if isinstance(knob, dict) and "sum" in knob:
        return None  # the sum of the containers' values, each checked where it is given
    if isinstance(knob, dict) and ("percent" in knob or "expr" in knob):
        fmt = VALUE_FORMATS.get(file) or declared.get(file)
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
    bad = value_problem(file, text, c.node, declared)
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
    for a, b, version, shared in same_host_file(files):
        c.add(
            path,
            f"{a} and {b} both set {' and '.join(shared)} on cgroup v{version}: "
            "one value would overwrite the other",
            f"set only one of {a} and {b} (qosd writes either name on both versions)",
        )
    weight = [f for f in ("cpu.shares", "cpu.weight") if f in files]
    if "cpu.idle" in files and literals.get("cpu.idle") != "0" and weight:
        c.add(
            path,
            f"cpu.idle (unless a literal 0) together with {weight[0]}: "
            "an idle group's weight is pinned by the kernel",
            f"drop {weight[0]} (an idle group runs only when nothing else wants the CPU anyway)",
        )


__all__ = ["ORDER_OPS", "check_and_compile", "document_problems"]
