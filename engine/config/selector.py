"""Kubernetes label selectors: whether one matches a node, and whether two can match the same node.

The second question decides whether two documents of equal priority could both apply somewhere and
therefore must not disagree. It is answered conservatively: "maybe" unless provably disjoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
