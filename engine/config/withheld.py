"""What of a document the schema refused, and the rest of it, still checked for meaning.

The semantic checks (engine/config/compile.py and the features' checks) need a valid shape, so a
document with one schema error used to hide every other problem of the same file until that error
was fixed: an unknown setCgroup file, an orderBy key, a class reference. Instead, the values the
schema refuses are taken out (``split``), down to the smallest part whose removal leaves the rest
valid, and what remains goes through the same merge and checks as a valid document. The document
still fails (its schema errors are reported), but in one run with all of its independent problems.

Taking values out must not produce problems of its own, so:

- a named entry (class, rule, ...) that loses a field complete entries need is taken out whole,
  and references to it are not reported as undefined (``Withheld.hides``);
- the fields next to a value taken out, and the mappings above it, are not blamed for what their
  check can no longer see (``Withheld.covers``: "clearWhen needs a when" after a refused ``when``);
- a document whose placement (apiVersion, kind, priority, nodeSelector, nodeNames) is refused is
  withheld whole: merged in the wrong place, every check would be about another policy.

Fact names are the one check that needs no shape: they are checked inside the values taken out too
(engine/features/rules/conditions.unknown_fact_problems with ``within``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.config.errors import Location
from engine.config.load import Document, JsonPath, json_path

NAMED = ("classes", "enhancements", "pools", "rules")
Refusals = Callable[[Any], Iterable[JsonPath]]
MAX_ROUNDS = 16  # rounds of taking out (each one validates what is left); real files need 2 to 4


@dataclass(frozen=True)
class Split:
    """A document's data without the values taken out, and how its paths map back."""

    data: Any  # None: nothing of the document can be checked
    taken: tuple[JsonPath, ...]  # document paths taken out
    kept: Mapping[JsonPath, tuple[int, ...]] = field(default_factory=dict)  # list -> indices kept

    def original(self, path: JsonPath) -> JsonPath:
        """The document path of ``path`` in ``data`` (list items after one taken out moved up)."""
        if not self.kept:
            return tuple(path)
        out: list[str | int] = []
        for part in path:
            kept = self.kept.get(tuple(out))
            if kept is not None and isinstance(part, int) and part < len(kept):
                part = kept[part]
            out.append(part)
        return tuple(out)


def split(
    data: Any,
    refusals: Refusals,
    required: Callable[[str], tuple[str, ...]] | None = None,
    taken: Iterable[JsonPath] = (),
) -> Split:
    """``data`` without every value ``refusals`` names (in the data left), repeated until it names
    none: taking a value out can leave its parent invalid (an action without its only field), and
    then the parent goes too. With ``required`` (section -> fields a complete entry needs), a named
    entry that lost one of them goes whole."""
    gone: set[JsonPath] = set(taken)
    for _ in range(MAX_ROUNDS):
        if any(_placement(p) for p in gone):
            return Split(None, tuple(sorted(gone, key=_order)))
        kept: dict[JsonPath, tuple[int, ...]] = {}
        view = _without(data, (), gone, kept)
        result = Split(view, tuple(sorted(gone, key=_order)), kept)
        new = {result.original(p) for p in refusals(view)}
        if required is not None:
            new.update(_lost_required(data, view, result.original, required))
        new = {p for p in new if not within(p, gone)}
        if not new:
            return result
        gone |= new
    # Each round takes out one level more; a shape still wrong after this many is no shape to check.
    return Split(None, tuple(sorted(gone, key=_order)))


def within(path: JsonPath, paths: set[JsonPath] | frozenset[JsonPath]) -> bool:
    """Whether ``path`` is one of ``paths`` or below one (a set lookup per level, not per path)."""
    return any(path[:k] in paths for k in range(len(path) + 1))


def _placement(path: JsonPath) -> bool:
    """Whether taking ``path`` out leaves the document without a place or a kind: the document
    itself, apiVersion or kind (it may not be a QoSPolicy at all), spec, or where spec applies."""
    if not path or path[0] in ("apiVersion", "kind"):
        return True
    return path[0] == "spec" and (len(path) == 1 or path[1] in ("priority", "nodeSelector", "nodeNames"))


def _order(path: JsonPath) -> tuple[tuple[int, str], ...]:
    return tuple((0, f"{p:09d}") if isinstance(p, int) else (1, p) for p in path)


def _without(value: Any, path: JsonPath, gone: set[JsonPath], kept: dict[JsonPath, tuple[int, ...]]) -> Any:
    if isinstance(value, dict):
        return {k: _without(v, (*path, k), gone, kept) for k, v in value.items() if (*path, k) not in gone}
    if isinstance(value, list):
        indices = tuple(i for i in range(len(value)) if (*path, i) not in gone)
        if len(indices) != len(value):
            kept[path] = indices
        return [_without(value[i], (*path, i), gone, kept) for i in indices]
    return value


def _lost_required(
    original: Any, view: Any, back: Callable[[JsonPath], JsonPath], required: Callable[[str], tuple[str, ...]]
) -> list[JsonPath]:
    """Named entries of ``view`` that had a field complete entries need in ``original`` and lost
    it: such an entry would merge as a patch of some other document's entry."""
    out: list[JsonPath] = []
    spec = view.get("spec") if isinstance(view, dict) else None
    for section in NAMED:
        items = spec.get(section) if isinstance(spec, dict) else None
        for i, item in enumerate(items if isinstance(items, list) else ()):
            where = back(("spec", section, i))
            before = _at(original, where)
            lost = isinstance(item, dict) and isinstance(before, dict)
            if lost and any(f in before and f not in item for f in required(section)):
                out.append(where)
    return out


def _at(data: Any, path: JsonPath) -> Any:
    for part in path:
        if isinstance(data, dict) and isinstance(part, str):
            data = data.get(part)
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            data = data[part]
        else:
            return None
    return data


_LAST = re.compile(r"""(\.[A-Za-z_][A-Za-z0-9_]*|\[\d+\]|\['(?:[^'\\]|\\.)*'\]|\["(?:[^"\\]|\\.)*"\])$""")


def _parent(path: str) -> str | None:
    found = _LAST.search(path)
    return path[: found.start()] if found else None


@dataclass(frozen=True)
class Withheld:
    """What the semantic checks of a merged policy must not report, because a value of this
    document was taken out (``split``): located problems next to or above it, and references to
    what it defined."""

    source: str
    lines: tuple[int, int] | None  # the document's first and last line; None for a custom resource
    whole: bool
    # Spec keys taken out: (section, entry name) for a named entry taken whole, (section,) for a
    # whole section, the path below spec otherwise (("cgroup", "files", "x"), ("reclaim", "cpu")).
    keys: frozenset[JsonPath]
    prefixes: frozenset[JsonPath]  # every non-empty prefix of a key: what has something below it taken
    names: Mapping[str, frozenset[str]]  # section -> names of entries taken out whole
    above: frozenset[str]  # JSON paths of what a taken value sat in
    beside: frozenset[str]  # JSON paths of mappings a value was taken out of, next to their fields
    inside: frozenset[str]  # JSON paths of the values taken out

    def hides(self, key: JsonPath) -> bool:
        """Whether a check about spec ``key`` (``("classes", "be")``, ``("cgroup", "files", "x")``)
        cannot be trusted: it, something above it or something below it was taken out."""
        if self.whole:
            return True
        key = tuple(key)
        return key in self.prefixes or within(key, self.keys)

    def covers(self, loc: Location) -> bool:
        """Whether a problem located at ``loc`` is about a value taken out (or about what it was in)."""
        if loc.source != self.source:
            return False
        if self.lines is not None and not (self.lines[0] <= loc.line <= self.lines[1]):
            return False
        if self.whole:
            return True
        path: str | None = loc.path
        if path in self.above or _parent(loc.path) in self.beside:
            return True
        while path is not None:  # at or below a value taken out
            if path in self.inside:
                return True
            path = _parent(path)
        return False


def _logical(value: Any, rest: JsonPath) -> JsonPath:
    """``rest`` with list indices replaced by the names of the items (``("files", "cpu.x")``), which
    is how a check elsewhere refers to them."""
    out: list[str | int] = []
    for part in rest:
        item = None
        if isinstance(value, list) and isinstance(part, int) and part < len(value):
            item = value[part]
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            out.append(item["name"])
        else:
            out.append(part)
        value = item if item is not None else (value.get(part) if isinstance(value, dict) else None)
    return tuple(out)


def _names(items: Any) -> set[str]:
    entries = items if isinstance(items, list) else ()
    return {i["name"] for i in entries if isinstance(i, dict) and isinstance(i.get("name"), str)}


def withheld(doc: Document, original: Any, parts: Split) -> Withheld | None:
    """The record of what ``parts`` took out of ``doc`` (None when nothing was)."""
    if not parts.taken and parts.data is not None:
        return None
    spec = original.get("spec") if isinstance(original, dict) else None
    spec = spec if isinstance(spec, dict) else {}
    whole = parts.data is None
    keys: set[JsonPath] = set()
    names: dict[str, set[str]] = {s: set() for s in NAMED}
    above: set[str] = set()
    beside: set[str] = set()
    for path in parts.taken:
        if path[:1] != ("spec",) or len(path) < 2:
            continue
        section, rest = str(path[1]), path[2:]
        if section in NAMED and len(rest) >= 1:
            entry = _at(spec, (section, rest[0]))
            if len(rest) == 1 and isinstance(entry, dict) and isinstance(entry.get("name"), str):
                keys.add((section, entry["name"]))
                names[section].add(entry["name"])
        else:
            keys.add((section, *_logical(spec.get(section), rest)))
            if section in NAMED:  # the whole section
                names[section].update(_names(spec.get(section)))
        # Inside an entry (or a section), the fields beside a value taken out and what held it.
        floor = 3 if section in NAMED else 2
        above.update(json_path(path[:k]) for k in range(floor, len(path)))
        if len(path) > floor:
            beside.add(json_path(path[:-1]))
    if whole:
        for section in NAMED:
            names[section].update(_names(spec.get(section)))
    lines = [line for line, _ in doc.marks.values.values()]
    return Withheld(
        source=doc.source,
        lines=(min(lines), max(lines)) if lines and not doc.is_cr else None,
        whole=whole,
        keys=frozenset(keys),
        prefixes=frozenset(k[:i] for k in keys for i in range(1, len(k) + 1)),
        names={s: frozenset(n) for s, n in names.items()},
        above=frozenset(above),
        beside=frozenset(beside),
        inside=frozenset(json_path(p) for p in parts.taken),
    )
