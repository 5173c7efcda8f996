"""Kubernetes label selectors: whether one matches a node, and whether two can match the same node.

The second question decides whether two documents of equal priority could both apply somewhere and
therefore must not disagree. It is answered conservatively: "maybe" unless provably disjoint.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from engine.config.errors import Location, Problem, short
from engine.config.load import JsonPath

Selector = Mapping[str, Any]

NODE_NAME_LABEL = "qosd.io/node-name"  # reserved: set to the node's name, matched by spec.nodeNames


def document_selector(spec: Any) -> Any:
    """A document spec's effective selector: its nodeSelector, or its nodeNames as a requirement on
    the reserved node-name label (so matching, overlap and validate's variants treat both alike)."""
    if not isinstance(spec, Mapping):
        return None
    names = spec.get("nodeNames")
    if isinstance(names, list) and names and "nodeSelector" not in spec:
        return {"matchExpressions": [{"key": NODE_NAME_LABEL, "operator": "In", "values": names}]}
    return spec.get("nodeSelector")


def _requirements(sel: Selector | None) -> list[tuple[str, str, tuple[str, ...]]]:
    if not sel:
        return []
    reqs: list[tuple[str, str, tuple[str, ...]]] = [
        (str(k), "In", (str(v),)) for k, v in (sel.get("matchLabels") or {}).items()
    ]
    for expr in sel.get("matchExpressions") or []:
        reqs.append((expr["key"], expr["operator"], tuple(str(v) for v in expr.get("values") or ())))
    return reqs


def _holds(op: str, values: tuple[str, ...], present: bool, value: str | None) -> bool:
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and values:
        try:
            lhs, rhs = int(str(value)), int(values[0])
        except ValueError:
            return False
        return lhs > rhs if op == "Gt" else lhs < rhs
    return False


def matches(sel: Selector | None, labels: Mapping[str, str]) -> bool:
    """An empty or absent selector matches every node, as in Kubernetes."""
    return all(_holds(op, vals, key in labels, labels.get(key)) for key, op, vals in _requirements(sel))


def may_overlap(a: Selector | None, b: Selector | None) -> bool:
    """False only when no label set satisfies both selectors.

    Per key, the candidate values are those named by either selector plus "absent" and "some other
    value"; for In/NotIn/Exists/DoesNotExist that finite set decides the question exactly. Gt/Lt are
    treated as satisfiable.
    """
    reqs = _requirements(a) + _requirements(b)
    by_key: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    for key, op, vals in reqs:
        by_key.setdefault(key, []).append((op, vals))
    for key_reqs in by_key.values():
        if any(op in ("Gt", "Lt") for op, _ in key_reqs):
            continue
        named = {v for _, vals in key_reqs for v in vals}
        candidates: list[tuple[bool, str | None]] = [(False, None), (True, "\x00other\x00")]
        candidates += [(True, v) for v in named]
        if not any(all(_holds(op, vals, p, v) for op, vals in key_reqs) for p, v in candidates):
            return False
    return True


# What a Kubernetes node can carry (k8s.io/apimachinery validation: IsQualifiedName, IsValidLabelValue,
# IsDNS1123Subdomain). A selector naming anything else never matches a node: refused, located, here
# and in the API server's CEL check (examples/deploy/base/admission-policy.yaml), which says the same.
_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]"
_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_LABEL_KEY = re.compile(rf"(({_SUBDOMAIN})/)?{_NAME}")
_LABEL_VALUE = re.compile(rf"({_NAME})?")
_NODE_NAME = re.compile(_SUBDOMAIN)
_INTEGER = re.compile(r"-?[0-9]+")
_KEY_HINT = (
    "a label key is [prefix/]name: the name up to 63 characters, alphanumeric at both ends, '-', '_' "
    "and '.' inside; the prefix a DNS subdomain"
)
_VALUE_HINT = (
    "a label value is empty or up to 63 characters, alphanumeric at both ends, '-', '_' and '.' inside"
)


def selector_problems(spec: Any, locate: Callable[[JsonPath], Location]) -> list[Problem]:
    """What is wrong with a schema-valid spec's nodeSelector and nodeNames as node selection:
    label keys and values no node can have, operators with the wrong number of values (as the
    Kubernetes API refuses them in a node selector), node names that are not object names."""
    if not isinstance(spec, Mapping):
        return []
    out: list[Problem] = []
    for i, name in enumerate(spec.get("nodeNames") or ()):
        if isinstance(name, str) and (len(name) > 253 or not _NODE_NAME.fullmatch(name)):
            out.append(
                Problem(
                    locate(("spec", "nodeNames", i)),
                    f"{short(name)} is not a node name",
                    "node names are lowercase DNS subdomains of at most 253 characters",
                )
            )
    sel = spec.get("nodeSelector")
    if not isinstance(sel, Mapping):
        return out
    base = ("spec", "nodeSelector")
    for key, value in (sel.get("matchLabels") or {}).items():
        if not _is_label_key(key):
            out.append(
                Problem(locate((*base, "matchLabels", key)), f"{short(key)} is not a label key", _KEY_HINT)
            )
        elif not _LABEL_VALUE.fullmatch(str(value)) and "{{" not in str(value):
            out.append(
                Problem(
                    locate((*base, "matchLabels", key)), f"{short(value)} is not a label value", _VALUE_HINT
                )
            )
    for i, expr in enumerate(sel.get("matchExpressions") or ()):
        at = (*base, "matchExpressions", i)
        out.extend(_expression_problems(expr, at, locate))
    return out


def _expression_problems(expr: Any, at: JsonPath, locate: Callable[[JsonPath], Location]) -> list[Problem]:
    if not isinstance(expr, Mapping):
        return []
    key, op, values = expr.get("key"), expr.get("operator"), list(expr.get("values") or ())
    if isinstance(key, str) and not _is_label_key(key):
        return [Problem(locate((*at, "key")), f"{short(key)} is not a label key", _KEY_HINT)]
    if op in ("In", "NotIn"):
        if not values:
            return [
                Problem(
                    locate(at), f"operator {op} needs at least one value", "list the label values to match"
                )
            ]
        bad = [v for v in values if not _LABEL_VALUE.fullmatch(str(v))]
        if bad:
            return [Problem(locate((*at, "values")), f"{short(bad[0])} is not a label value", _VALUE_HINT)]
    elif op in ("Exists", "DoesNotExist") and values:
        return [
            Problem(
                locate((*at, "values")),
                f"operator {op} takes no values",
                "drop `values`, or use In/NotIn to match label values",
            )
        ]
    elif op in ("Gt", "Lt") and (len(values) != 1 or not _INTEGER.fullmatch(str(values[0]))):
        return [
            Problem(
                locate((*at, "values")),
                f"operator {op} takes exactly one integer value, got {short(values)}",
                "Gt and Lt compare a label's value as an integer with the one value given",
            )
        ]
    return []


def _is_label_key(key: Any) -> bool:
    if not isinstance(key, str) or not _LABEL_KEY.fullmatch(key):
        return False
    prefix, _, _ = key.rpartition("/")
    return len(prefix) <= 253
