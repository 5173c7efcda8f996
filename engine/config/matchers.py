"""Class matchers compiled from their YAML: string matches on labels, annotations and JSON
annotation keys, kube QoS, priority, namespaces, cgroup paths and bounds on requested resources.
The tests they compile to run in ``engine.evaluate.classify``."""

from __future__ import annotations

from typing import Any

from engine.config.errors import Checker
from engine.config.load import JsonPath
from engine.config.policy import JsonKeyMatch, Matcher, ResourceMatch, StringMatch
from engine.model.units import parse_quantity


def string_match(raw: Any) -> StringMatch:
    if isinstance(raw, str):
        return StringMatch(any_of=frozenset([raw]))
    if isinstance(raw, list):
        return StringMatch(any_of=frozenset(raw))
    return StringMatch(
        any_of=frozenset(raw["in"]) if "in" in raw else None,
        none_of=frozenset(raw["notIn"]) if "notIn" in raw else None,
        exists=raw.get("exists"),
    )


def compile_matcher(raw: dict[str, Any]) -> Matcher:
    qos = raw.get("kubeQoS")
    prio = raw.get("priority") or {}
    return Matcher(
        annotations=tuple((k, string_match(v)) for k, v in (raw.get("annotations") or {}).items()),
        labels=tuple((k, string_match(v)) for k, v in (raw.get("labels") or {}).items()),
        json_annotations=tuple(
            JsonKeyMatch(
                j["annotation"],
                j["key"],
                string_match(j["value"]) if "value" in j else StringMatch(exists=True),
            )
            for j in raw.get("jsonAnnotations") or []
        ),
        kube_qos=frozenset([qos] if isinstance(qos, str) else qos) if qos else None,
        priority_class=string_match(raw["priorityClassName"]) if "priorityClassName" in raw else None,
        priority_min=prio.get("gte"),
        priority_max=prio.get("lte"),
        namespaces=string_match(raw["namespaces"]) if "namespaces" in raw else None,
        cgroup_path=raw.get("cgroupPath"),
        requests=tuple(_resource_match(k, v) for k, v in (raw.get("requests") or {}).items()),
    )


def _resource_match(resource: str, raw: dict[str, Any]) -> ResourceMatch:
    bounds = {op: parse_quantity(raw[op]) for op in ("gt", "gte", "lt", "lte") if op in raw}
    return ResourceMatch(resource, exists=raw.get("exists"), **bounds)


def check_matchers(c: Checker, base: JsonPath, raw: dict[str, Any]) -> None:
    """A requests matcher no pod can meet would leave its class silently empty."""
    for j, m in enumerate(raw.get("match") or []):
        for resource, bounds in (m.get("requests") or {}).items():
            why = _resource_match(resource, bounds).empty()
            if why:
                c.add((*base, "match", j, "requests", resource), f"requests of {resource!r}: {why}")
