"""Label and field selectors, parsed and matched as k8s.io/apimachinery/pkg/{labels,fields} do.

Why a real parser and not a regex per test: qosd's pod source lists with ``fieldSelector=spec.nodeName=X``
and its policy watcher may use label selectors; the emulator must accept every form the real server
accepts (``=``, ``==``, ``!=``, ``in``, ``notin``, ``key``, ``!key``, ``<``, ``>``) and reject what it
rejects, with a 400, or a test would pass against a server that does not exist.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tests.kubeapi.errors import ApiError, bad_request

Json = dict[str, Any]
FieldGetter = Callable[[Json], str]

_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_KEY_RE = re.compile(_KEY)
_VALUE_RE = re.compile(_VALUE)


@dataclass(frozen=True)
class Requirement:
    """One label requirement; ``op`` is a selection.Operator name (in, notin, exists, !, =, !=, gt, lt)."""

    key: str
    op: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key, "")
        if self.op in ("=", "in"):
            return present and value in self.values
        if self.op in ("!=", "notin"):
            # labels.Requirement.Matches: an absent key satisfies != and notin.
            return not present or value not in self.values
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("gt", "lt"):
            if not present:
                return False
            try:
                have = int(value)
            except ValueError:
                return False
            want = int(self.values[0])
            return have > want if self.op == "gt" else have < want
        raise AssertionError(self.op)


@dataclass(frozen=True)
class LabelSelector:
    """A conjunction of requirements; the empty selector matches everything, ``nothing`` matches nothing."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self.nothing:
            return False
        have = labels or {}
        return all(r.matches(have) for r in self.requirements)


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside parentheses (``a in (x,y),b`` is two requirements)."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def _check_key(key: str, raw: str) -> None:
    name = key.rsplit("/", 1)[-1]
    if not _KEY_RE.fullmatch(key) or len(name) > 63:
        raise bad_request(f"unable to parse requirement: invalid label key {key!r} in {raw!r}")


def _check_value(value: str, raw: str) -> None:
    if len(value) > 63 or not _VALUE_RE.fullmatch(value):
        raise bad_request(f"unable to parse requirement: invalid label value {value!r} in {raw!r}")


_SET_RE = re.compile(r"\s*(?P<key>\S+?)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)\s*")
_CMP_RE = re.compile(r"\s*(?P<key>[^\s=!<>]+)\s*(?P<op>==|=|!=|<|>)\s*(?P<value>[^\s=!<>]*)\s*")
_EXISTS_RE = re.compile(r"\s*(?P<not>!)?\s*(?P<key>[^\s=!<>(),]+)\s*")


def parse_label_selector(text: str | None) -> LabelSelector:
    """labels.Parse: the ``labelSelector`` query parameter. Raises a 400 ApiError when malformed."""
    if text is None or not text.strip():
        return LabelSelector()
    requirements: list[Requirement] = []
    for raw in _split_top_level(text):
        if not raw.strip():
            raise bad_request(f"unable to parse requirement: found '', expected: identifier in {text!r}")
        if m := _SET_RE.fullmatch(raw):
            key = m["key"]
            values = tuple(v.strip() for v in m["values"].split(",")) if m["values"].strip() else ()
            _check_key(key, raw)
            for value in values:
                _check_value(value, raw)
            if m["op"] == "in" and not values:
                raise bad_request(
                    f"unable to parse requirement: for 'in' operator, values set can't be empty in {raw!r}"
                )
            requirements.append(Requirement(key, m["op"], values))
        elif m := _CMP_RE.fullmatch(raw):
            key, op, value = m["key"], m["op"], m["value"]
            _check_key(key, raw)
            if op in ("<", ">"):
                if not re.fullmatch(r"-?\d+", value):
                    raise bad_request(
                        f"unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an integer in {raw!r}"
                    )
                requirements.append(Requirement(key, "gt" if op == ">" else "lt", (value,)))
            else:
                _check_value(value, raw)
                requirements.append(Requirement(key, "!=" if op == "!=" else "=", (value,)))
        elif m := _EXISTS_RE.fullmatch(raw):
            _check_key(m["key"], raw)
            requirements.append(Requirement(m["key"], "!" if m["not"] else "exists"))
        else:
            raise bad_request(f"unable to parse requirement: {raw.strip()!r} in {text!r}")
    return LabelSelector(tuple(requirements))


def selector_from_object(selector: Json | None, *, null_matches_nothing: bool = True) -> LabelSelector:
    """metav1.LabelSelectorAsSelector: matchLabels plus matchExpressions.

    A null selector matches nothing (``labels.Nothing()``); ``{}`` matches everything, which is what
    policy/v1 PodDisruptionBudget documents for an empty spec.selector."""
    if selector is None:
        return LabelSelector(nothing=null_matches_nothing)
    requirements = [Requirement(k, "=", (v,)) for k, v in sorted((selector.get("matchLabels") or {}).items())]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for expr in selector.get("matchExpressions") or []:
        op = ops.get(expr.get("operator", ""))
        if op is None:
            raise bad_request(f"{expr.get('operator')!r} is not a valid label selector operator")
        requirements.append(Requirement(expr["key"], op, tuple(expr.get("values") or ())))
    return LabelSelector(tuple(requirements))


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    negate: bool
    value: str


@dataclass(frozen=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = ()

    def matches(self, obj: Json, getters: Mapping[str, FieldGetter]) -> bool:
        for r in self.requirements:
            have = getters[r.field](obj)
            if (have == r.value) == r.negate:
                return False
        return True

    def value_of(self, field: str) -> str | None:
        """The value an ``=`` term pins ``field`` to (RBAC uses metadata.name as the resource name)."""
        for r in self.requirements:
            if r.field == field and not r.negate:
                return r.value
        return None


def _split_unescaped(text: str, sep: str) -> list[str]:
    """fields.splitTerms: split on ``sep`` not preceded by a backslash escape."""
    out: list[str] = []
    current: list[str] = []
    escaped = False
    for char in text:
        if escaped:
            current.append("\\" + char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == sep:
            out.append("".join(current))
            current = []
        else:
            current.append(char)
    if escaped:
        current.append("\\")
    out.append("".join(current))
    return out


def _unescape(value: str) -> str:
    """fields.UnescapeValue: ``\\\\``, ``\\,`` and ``\\=`` are the only valid escapes."""
    out: list[str] = []
    chars = iter(value)
    for char in chars:
        if char != "\\":
            out.append(char)
            continue
        nxt = next(chars, "")
        if nxt not in ("\\", ",", "="):
            raise bad_request(f"invalid field selector: invalid escape sequence in {value!r}")
        out.append(nxt)
    return "".join(out)


def parse_field_selector(text: str | None, supported: Mapping[str, FieldGetter]) -> FieldSelector:
    """fields.ParseSelector + ConvertFieldLabel: an unknown field is a 400 "field label not supported"."""
    if text is None or not text.strip():
        return FieldSelector()
    requirements: list[FieldRequirement] = []
    for term in _split_unescaped(text, ","):
        if not term:
            continue
        for op in ("!=", "==", "="):
            idx = _find_unescaped(term, op)
            if idx >= 0:
                field, value = term[:idx], term[idx + len(op) :]
                break
        else:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{term}'")
        field = field.strip()
        if field not in supported:
            raise ApiError(400, "BadRequest", f"field label not supported: {field}")
        requirements.append(FieldRequirement(field, op == "!=", _unescape(value)))
    return FieldSelector(tuple(requirements))


def _find_unescaped(term: str, op: str) -> int:
    i = 0
    while i < len(term):
        if term[i] == "\\":
            i += 2
            continue
        if term.startswith(op, i):
            return i
        i += 1
    return -1
