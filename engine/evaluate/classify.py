"""Which class a workload belongs to, and which enhancements it carries, with the anchors' validity rules.

Matchers and value sources are compiled once per policy generation. Results are cached per workload
object: sources hand the same Workload object to consecutive ticks while the pod is unchanged, so in a
steady state classification costs one dict lookup per pod.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from types import MappingProxyType
from typing import Any

from engine.config.policy import (
    Effects,
    Enhancement,
    JsonKeyMatch,
    Matcher,
    Policy,
    QoSClass,
    ResourceMatch,
    StringMatch,
)
from engine.features.class_knobs.knobs import align_oom_priority
from engine.model.facts import Workload

Test = Callable[[Workload, "_JsonCache"], bool]


@dataclass(frozen=True)
class Classified:
    """A workload's class, its enhancement values by name, what they set (typed) and any errors.

    Errors (a dedicated pod without numa_binding, two conflicting enhancements, an out-of-range value
    with onInvalid: reject) are reported on the workload; they never stop the tick.
    """

    class_name: str | None
    enhancements: Mapping[str, Any]
    effects: Effects
    errors: tuple[str, ...] = ()


class _JsonCache:
    """Parsed JSON annotations of one workload (parsed at most once per classification)."""

    __slots__ = ("parsed", "workload")

    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self.parsed: dict[str, Mapping[str, Any]] = {}

    def get(self, annotation: str, key: str) -> str | None:
        obj = self.parsed.get(annotation)
        if obj is None:
            raw = self.workload.annotations.get(annotation)
            try:
                loaded = json.loads(raw) if raw else {}
            except (ValueError, TypeError):
                loaded = {}  # Katalyst treats an unparsable enhancement group as empty
            obj = loaded if isinstance(loaded, dict) else {}
            self.parsed[annotation] = obj
        value = obj.get(key)
        return None if value is None else str(value)


def _compile_matcher(m: Matcher) -> Test:
    tests: list[Test] = []

    def on_map(attr: str, key: str, sm: StringMatch) -> Test:
        return lambda w, _j: sm.test(getattr(w, attr).get(key))

    for key, sm in m.annotations:
        tests.append(on_map("annotations", key, sm))
    for key, sm in m.labels:
        tests.append(on_map("labels", key, sm))
    for ja in m.json_annotations:

        def json_test(w: Workload, j: _JsonCache, ja: JsonKeyMatch = ja) -> bool:
            return ja.value.test(j.get(ja.annotation, ja.key))

        tests.append(json_test)
    if m.kube_qos is not None:
        qos = m.kube_qos
        tests.append(lambda w, _j: w.kube_qos in qos)
    if m.priority_class is not None:
        pc = m.priority_class
        tests.append(lambda w, _j: pc.test(w.priority_class_name or None))
    if m.priority_min is not None or m.priority_max is not None:
        lo = -math.inf if m.priority_min is None else m.priority_min
        hi = math.inf if m.priority_max is None else m.priority_max
        tests.append(lambda w, _j: w.priority is not None and lo <= w.priority <= hi)
    if m.namespaces is not None:
        ns = m.namespaces
        tests.append(lambda w, _j: ns.test(w.namespace or None))
    if m.cgroup_path is not None:
        pattern = m.cgroup_path
        tests.append(lambda w, _j: fnmatchcase(w.cgroup_path, pattern))
    for rm in m.requests:

        def request_test(w: Workload, _j: _JsonCache, rm: ResourceMatch = rm) -> bool:
            return rm.test(w.request(rm.resource))

        tests.append(request_test)
    return lambda w, j: all(t(w, j) for t in tests)


class Classifier:
    """Compiled class matchers and enhancement readers of one policy generation."""

    def __init__(self, policy: Policy):
        self.policy = policy
        self._classes: list[tuple[QoSClass, list[Test]]] = [
            (c, [_compile_matcher(m) for m in c.matchers]) for c in policy.classes
        ]
        self._cache: dict[int, tuple[Workload, Classified]] = {}

    def classify(self, w: Workload) -> Classified:
        hit = self._cache.get(id(w))
        if hit is not None and hit[0] is w:
            return hit[1]
        result = self._classify(w)
        if len(self._cache) > 50_000:
            self._cache.clear()
        self._cache[id(w)] = (w, result)
        return result

    def _classify(self, w: Workload) -> Classified:
        js = _JsonCache(w)
        chosen: QoSClass | None = None
        for cls, tests in self._classes:
            if tests and any(t(w, js) for t in tests):
                chosen = cls
                break
        if chosen is None and self.policy.default_class is not None:
            chosen = self.policy.class_index.get(self.policy.default_class)
        name = chosen.name if chosen else None
        errors: list[str] = []
        values: dict[str, Any] = {}
        for enh in self.policy.enhancements:
            if enh.applies_to and name not in enh.applies_to:
                continue
            value, error = _read(enh, w, js, chosen)
            if error:
                errors.append(error)
            if value is not None and value is not False:
                values[enh.name] = value
        index = self.policy.enhancement_index
        for enh_name in values:
            for req in index[enh_name].requires:
                if req not in values:
                    errors.append(f"enhancement {enh_name} requires {req}, which the workload does not set")
            for other in index[enh_name].conflicts_with:
                if other in values:
                    errors.append(f"enhancements {enh_name} and {other} cannot be combined")
        if chosen is not None:
            errors.extend(
                f"class {chosen.name} requires enhancement {req}, which the workload does not set"
                for req in chosen.requires
                if req not in values
            )
        effects: dict[str, Any] = {}
        for enh_name, value in values.items():
            enh = index[enh_name]
            if enh.effect:
                effects[enh.effect] = value if enh.effect_value is None else enh.effect_value
        return Classified(name, MappingProxyType(values), Effects.of(effects), tuple(errors))


def _raw(enh: Enhancement, w: Workload, js: _JsonCache) -> str | None:
    for src in enh.sources:
        for key in (src.json_key if src.kind == "jsonAnnotation" else src.key, *src.aliases):
            if key is None:
                continue
            if src.kind == "jsonAnnotation":
                value = js.get(src.key, key)
            elif src.kind == "label":
                value = w.labels.get(key)
            else:
                value = w.annotations.get(key)
            if value is not None:
                return value
    return None


def _read(enh: Enhancement, w: Workload, js: _JsonCache, cls: QoSClass | None) -> tuple[Any, str]:
    """The parsed value of one enhancement (None when absent or ignored) and an error, if any."""
    raw = _raw(enh, w, js)
    if raw is None:
        return enh.default, ""
    if enh.value_type == "bool":
        return raw == enh.equals, ""
    if enh.value_type == "string":
        if enh.values and raw not in enh.values:
            return _invalid(enh, raw, f"one of {', '.join(enh.values)}")
        return raw, ""
    try:
        number: float = float(raw)
        if not math.isfinite(number):
            raise ValueError(raw)
    except ValueError:
        return _invalid(enh, raw, f"a {enh.value_type}")
    if enh.value_type == "integer" and number != int(number):
        return _invalid(enh, raw, "an integer")
    lo, hi = enh.range if enh.range else (-math.inf, math.inf)
    if enh.effect == "oomPriority" and cls is not None and number == int(number):
        # Katalyst's AlignOOMPriority: into the class's band [min, max), except 300 (never kill),
        # which passes through. Before the enhancement's own range, so that 500 on shared_cores
        # becomes 99 as in Katalyst, not 300 via a clamp to [-300, 300].
        aligned = align_oom_priority(int(number), cls.oom_priority)
        if aligned is not None:
            number = float(aligned)
    if not lo <= number <= hi:
        if enh.on_invalid == "clamp":
            number = min(max(number, lo), hi)
        else:
            return _invalid(enh, raw, f"within [{lo:g}, {hi:g}]")
    return (int(number) if enh.value_type == "integer" else number), ""


def _invalid(enh: Enhancement, raw: str, want: str) -> tuple[Any, str]:
    if enh.on_invalid == "reject":
        return None, f"enhancement {enh.name}={raw!r} is not {want}"
    return None, ""  # ignore (and clamp, for values that cannot be clamped): the anchors skip them


def match_any(matchers: tuple[Matcher, ...]) -> Callable[[Workload], bool]:
    """One test for "any of these class matchers fits the workload", compiled once (for matchers
    outside classes: spec.reclaim.priorityOverrides)."""
    tests = [_compile_matcher(m) for m in matchers]

    def test(w: Workload) -> bool:
        js = _JsonCache(w)
        return any(t(w, js) for t in tests)

    return test
