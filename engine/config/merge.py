"""Layer documents into one effective spec for a node, remembering where every field came from.

Order: built-in defaults < files < custom resources; within a layer, documents that name the node
(spec.nodeNames) after all others, then lower spec.priority first, then at equal priority documents
without a nodeSelector before those with one, then name (Katalyst KCC's tiers: node names over label
selector over global). Named entries (classes, enhancements, pools, rules) merge by name with
field-level overlay: mappings merge key by key, lists and scalars replace, and ``unset`` removes
inherited fields. ``enabled: false`` takes an inherited entry out of the effective policy but keeps
its fields, so a later ``enabled: true`` switches it back on as it was. Two documents of one layer
with equal priority and tier that can apply to the same node must not set the same field to
different values: no order between them would be honest, so that is an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from engine.config.errors import Location, PolicyError, Problem, short
from engine.config.load import Document, JsonPath, Layer, json_path
from engine.config.schema_check import did_you_mean
from engine.config.selector import document_selector, may_overlap
from engine.config.unset import DEFINITIONS as SECTION_DEFINITIONS
from engine.config.unset import UNSET, policy_schema, unset_paths
from engine.config.withheld import Split, Withheld

NAMED_SECTIONS = ("classes", "enhancements", "pools", "rules")
SINGLE_SECTIONS = ("reclaim", "pressure", "eviction", "cgroup", "cfsQuotaBurst")
SPEC_SCALARS = ("mode", "defaultClass")
DOC_ONLY = ("priority", "nodeSelector", "nodeNames")
KNOWN_SPEC_KEYS = frozenset({*NAMED_SECTIONS, *SINGLE_SECTIONS, *SPEC_SCALARS, *DOC_ONLY})

Origins = dict[JsonPath, Location]


@dataclass
class Rendered:
    """A document after templating and schema validation, ready to merge."""

    doc: Document
    data: dict[str, Any]
    incomplete: bool = False  # some entry lacks a required field that another document must supply
    # A document the schema refused parts of: ``data`` is what is left (``split``), merged and checked
    # only so that its other problems are found in the same run; ``withheld`` keeps the checks quiet
    # about what was taken out. Such a document never becomes a policy (its schema errors stand).
    withheld: Withheld | None = None
    split: Split | None = field(default=None, compare=False, repr=False)
    # _origins_of results by document path: a Rendered is cached with its document across reloads
    # (pipeline.prepare), so an unchanged document (the built-in layer) is located once, not per merge.
    origins: dict[JsonPath, tuple[tuple[JsonPath, Location], ...]] = field(
        default_factory=dict, compare=False, repr=False
    )

    @property
    def spec(self) -> dict[str, Any]:
        spec = self.data.get("spec")
        return spec if isinstance(spec, dict) else {}

    @property
    def priority(self) -> int:
        p = self.spec.get("priority", 0)
        return p if isinstance(p, int) else 0

    @property
    def tier(self) -> tuple[int, int, int]:
        """(node-named, priority, label-selected): what orders documents of one layer."""
        spec = self.spec
        return (int(bool(spec.get("nodeNames"))), self.priority, int(bool(spec.get("nodeSelector"))))

    @property
    def sort_key(self) -> tuple[int, tuple[int, int, int], str]:
        return (int(self.doc.layer), self.tier, self.doc.name)

    def locate(self, path: JsonPath, prefer_key: bool = False) -> Location:
        """Where ``path`` of ``data`` is in the document (items after one taken out moved up)."""
        return self.doc.locate(path if self.split is None else self.split.original(path), prefer_key)


@dataclass
class _Entry:
    data: dict[str, Any]
    origins: Origins  # relative path inside the entry -> where it was defined
    docs: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Unanchored:
    """A patch with nothing to patch on this node: an entry that lacks a field every complete entry
    has (a rule without ``then``) and that no document applying here defines. It is left out of the
    node's policy; ``qosd validate`` refuses it only if it patches nothing on every node variant."""

    section: str
    name: str
    location: Location  # where the patch names the entry
    missing: tuple[str, ...]
    documents: tuple[str, ...]  # names of the documents that patch it
    hint: str = ""  # a defined entry of a close name

    def describe(self) -> str:
        what = {"classes": "class", "enhancements": "enhancement", "pools": "pool", "rules": "rule"}
        return f"{what[self.section]} {self.name!r}"


@dataclass(frozen=True)
class Merged:
    """The effective spec for one node and the location that defined each part of it."""

    spec: dict[str, Any]
    origins: Mapping[JsonPath, Location]
    documents: tuple[Rendered, ...]
    unanchored: tuple[Unanchored, ...] = ()

    def locate(self, path: JsonPath) -> Location:
        """Where the value at ``path`` (relative to the merged ``spec``) was written: the file position
        and the JSON path *in that document* (``$.spec.rules[0]`` of the overlay that wrote it, not the
        merged policy's ``$.spec.rules[3]``), so the path and the line:col point into one document.
        A path with no origin of its own (a default, a key the schema reported missing) is located at
        its nearest written ancestor, with the rest of the path appended."""
        p = tuple(path)
        while p:
            loc = self.origins.get(p)
            if loc is not None:
                return _below(loc, tuple(path)[len(p) :])
            p = p[:-1]
        loc = self.origins.get(())
        if loc is not None:
            return _below(loc, tuple(path))
        return Location("<merged policy>", 0, 0, json_path(("spec", *path)))


def _below(loc: Location, rest: JsonPath) -> Location:
    if not rest or not loc.path:
        return loc
    return Location(loc.source, loc.line, loc.column, loc.path + json_path(rest)[1:])


def _origins_of(r: Rendered, base: JsonPath, value: Any) -> tuple[tuple[JsonPath, Location], ...]:
    """Every node below ``value`` (the document's value at ``base``) with its location, relative to
    base. Memoized on ``r``: its data never changes once rendered (merge copies what it keeps)."""
    cached = r.origins.get(base)
    if cached is not None:
        return cached
    out: list[tuple[JsonPath, Location]] = []
    stack: list[tuple[JsonPath, Any]] = [((), value)]
    while stack:
        rel, v = stack.pop()
        # Containers are located at their key ("when:"), scalars at the value itself.
        out.append((rel, r.locate((*base, *rel), prefer_key=isinstance(v, dict | list))))
        if isinstance(v, dict):
            stack.extend(((*rel, k), sub) for k, sub in v.items())
        elif isinstance(v, list):
            stack.extend(((*rel, i), sub) for i, sub in enumerate(v))
    cached = r.origins[base] = tuple(out)
    return cached


def _copy(value: Any) -> Any:
    """A deep copy of rendered JSON data (dicts, lists, scalars), several times faster than
    copy.deepcopy, which a reload spent most of its merge in."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


UNION_KEYS = frozenset({"when", "clearWhen", "from", "cpus", "target"})
KNOB_PARENTS = frozenset({"cpu", "memory", "values", "containers"})


def atomic(path: JsonPath, current: Any, value: Any) -> bool:
    """Whether a mapping at ``path`` (relative to an entry) is one alternative of a union.

    Such values (a condition, a value source, a static cpuset, a cgroup target, a knob such as
    {percent, of} vs {expr}) replace as a whole: merging two alternatives key by key would produce a
    value that is neither. An action under ``then`` merges only with an action of the same kind, so
    an overlay can tune one eviction parameter.
    """
    key = path[-1] if path else None
    if key in UNION_KEYS:
        return True
    if key == "then":
        return not (isinstance(current, dict) and isinstance(value, dict) and set(current) == set(value))
    return len(path) >= 2 and path[-2] in KNOB_PARENTS and isinstance(value, dict)


# Reclaim policies sharing parameters: Koordinator's three formulas take the same margin.
_RECLAIM_FAMILY = {"usage": "margin", "request": "margin", "maxUsageRequest": "margin"}


def switches_formula(base: JsonPath, path: JsonPath, current: dict[str, Any], value: dict[str, Any]) -> bool:
    """An overlay that moves ``spec.reclaim.<resource>`` to a policy of another family replaces the
    whole section: Koordinator's formulas (usage, request, maxUsageRequest) share
    reclaimThresholdPercent and requestAsUsage, while headroom and free have parameters of their
    own, and one family's would be refused, or silently meaningless, under another."""
    if base[-1:] != ("reclaim",) or len(path) != 1 or "policy" not in value:
        return False
    old, new = str(current.get("policy", "usage")), str(value["policy"])
    return _RECLAIM_FAMILY.get(old, old) != _RECLAIM_FAMILY.get(new, new)


def _overlay(entry: _Entry, over: dict[str, Any], r: Rendered, base: JsonPath, rel: JsonPath = ()) -> None:
    """Field-level overlay of ``over`` onto ``entry.data`` at ``rel``; lists, scalars and unions replace.
    At the entry's top, its ``unset`` paths are removed first (engine/config/unset.py)."""
    if not rel and UNSET in over:
        for parts in unset_paths(entry.data, [str(p) for p in over[UNSET] or ()]):
            for old in [p for p in entry.origins if p[: len(parts)] == parts]:
                del entry.origins[old]
        over = {k: v for k, v in over.items() if k != UNSET}
    target: Any = entry.data
    for k in rel:
        target = target[k]
    for key, value in over.items():
        path = (*rel, key)
        current = target.get(key)
        if (
            isinstance(value, dict)
            and isinstance(current, dict)
            and not atomic(path, current, value)
            and not switches_formula(base, path, current, value)
        ):
            entry.origins[path] = _origins_of(r, (*base, *path), value)[0][1]  # the mapping's own key
            _overlay(entry, value, r, base, path)
            continue
        for old in [p for p in entry.origins if p[: len(path)] == path]:
            del entry.origins[old]
        target[key] = _copy(value)
        for sub, loc in _origins_of(r, (*base, *path), value):
            entry.origins[(*path, *sub)] = loc


def _new_entry(value: dict[str, Any], r: Rendered, base: JsonPath) -> _Entry:
    """A first definition; its ``unset`` has nothing below it to remove."""
    data = {k: _copy(v) for k, v in value.items() if k != UNSET}
    origins = {p: loc for p, loc in _origins_of(r, base, value) if p[:1] != (UNSET,)}
    return _Entry(data, origins, [r.doc.name])


def merge(rendered: list[Rendered]) -> Merged:
    """Merge documents already filtered for one node. Conflicts are reported by ``conflicts``."""
    ordered = sorted(rendered, key=lambda r: r.sort_key)
    scalars = _Entry({}, {})
    singles: dict[str, _Entry] = {}
    named: dict[str, dict[str, _Entry]] = {s: {} for s in NAMED_SECTIONS}
    unknown = [
        Problem(
            r.locate(("spec", key), prefer_key=True),
            f"unknown spec section {key!r}",
            did_you_mean(key, KNOWN_SPEC_KEYS) or f"spec sections: {', '.join(sorted(KNOWN_SPEC_KEYS))}",
        )
        for r in ordered
        for key in r.spec
        if key not in KNOWN_SPEC_KEYS
    ]
    if unknown:
        # The schema refuses these first on every path (files, RuleTest overlays, custom resources);
        # a section merge does not know would otherwise vanish from the policy without a word.
        raise PolicyError(unknown)
    for r in ordered:
        spec = r.spec
        base: JsonPath = ("spec",)
        for key in SPEC_SCALARS:
            if key in spec:
                _overlay(scalars, {key: spec[key]}, r, base)
        for section in SINGLE_SECTIONS:
            if isinstance(spec.get(section), dict):
                entry = singles.setdefault(section, _Entry({}, {}))
                entry.origins.setdefault((), r.locate((*base, section)))
                _overlay(entry, spec[section], r, (*base, section))
                entry.docs.append(r.doc.name)
        for section in NAMED_SECTIONS:
            items = spec.get(section)
            if not isinstance(items, list):
                continue
            table = named[section]
            for i, item in enumerate(items):
                if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                    continue
                name = item["name"]
                ipath = (*base, section, i)
                if name in table:
                    _overlay(table[name], item, r, ipath)
                    table[name].docs.append(r.doc.name)
                else:
                    table[name] = _new_entry(item, r, ipath)
                    _place_class(section, table, name, item)
    return _assemble(scalars, singles, named, tuple(ordered))


def _place_class(section: str, table: dict[str, _Entry], name: str, item: dict[str, Any]) -> None:
    """Classes match first-wins, so a new class may ask to go ``before`` an inherited one."""
    before = item.get("before")
    if section != "classes" or not isinstance(before, str) or before not in table:
        return
    entry = table.pop(name)
    rebuilt: dict[str, _Entry] = {}
    for k, v in table.items():
        if k == before:
            rebuilt[name] = entry
        rebuilt[k] = v
    table.clear()
    table.update(rebuilt)


def _assemble(
    scalars: _Entry,
    singles: dict[str, _Entry],
    named: dict[str, dict[str, _Entry]],
    docs: tuple[Rendered, ...],
) -> Merged:
    spec: dict[str, Any] = {}
    origins: Origins = {}
    for key, value in scalars.data.items():
        spec[key] = value
        for rel, loc in scalars.origins.items():
            if rel[:1] == (key,):
                origins[rel] = loc
    for section, entry in singles.items():
        spec[section] = entry.data
        for rel, loc in entry.origins.items():
            origins[(section, *rel)] = loc
    unanchored: list[Unanchored] = []
    for section in NAMED_SECTIONS:
        table = named[section]
        live = []
        for e in table.values():
            if e.data.get("enabled", True) is False:
                continue
            missing = tuple(f for f in entry_required(section) if f not in e.data)
            if missing:
                at = e.origins.get(("name",)) or e.origins.get(()) or Location("<merged policy>")
                where = Location(at.source, at.line, at.column)  # a position; its path is the document's
                name = str(e.data.get("name"))
                defined = [str(x.data.get("name")) for x in table.values() if x is not e]
                unanchored.append(
                    Unanchored(section, name, where, missing, tuple(e.docs), did_you_mean(name, defined))
                )
                continue
            live.append(e)
        if not live:
            continue
        spec[section] = []
        for i, entry in enumerate(live):
            spec[section].append({k: v for k, v in entry.data.items() if k != "enabled"})
            for rel, loc in entry.origins.items():
                if rel[:1] != ("enabled",):
                    origins[(section, i, *rel)] = loc
    return Merged(spec, origins, docs, tuple(unanchored))


@cache
def entry_required(section: str) -> tuple[str, ...]:
    """Fields besides ``name`` the schema requires of a complete entry of ``section``: an entry
    without one of them can only patch an entry some other document defines."""
    definition = policy_schema()["$defs"][SECTION_DEFINITIONS[section]]
    return tuple(f for f in definition.get("required", ()) if f != "name")


# ---------------------------------------------------------------- equal-priority conflicts


def _flatten(r: Rendered) -> dict[tuple[str, ...], tuple[Any, JsonPath]]:
    """Leaves of a document's spec keyed by logical path (named entries keyed by name)."""
    out: dict[tuple[str, ...], tuple[Any, JsonPath]] = {}

    def walk(value: Any, logical: tuple[str, ...], path: JsonPath) -> None:
        if isinstance(value, dict) and not atomic(
            logical[2:] if logical[0] in NAMED_SECTIONS else logical[1:], None, value
        ):
            for k, v in value.items():
                walk(v, (*logical, k), (*path, k))
        else:
            out[logical] = (value, path)

    spec = r.spec
    for key in (*SPEC_SCALARS, *SINGLE_SECTIONS):
        if key in spec:
            walk(spec[key], (key,), ("spec", key))
    for section in NAMED_SECTIONS:
        for i, item in enumerate(spec.get(section) or []):
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                walk(item, (section, f"name={item['name']}"), ("spec", section, i))
    return out


def conflicts(rendered: list[Rendered], check_selectors: bool) -> list[Problem]:
    """Equal-priority documents of one layer that could meet on a node and disagree on a field.

    ``check_selectors`` is True when the documents were not already filtered for one node.
    """
    problems: list[Problem] = []
    groups: dict[tuple[Layer, tuple[int, int, int]], list[Rendered]] = {}
    for r in rendered:
        groups.setdefault((r.doc.layer, r.tier), []).append(r)
    for group in groups.values():
        if len(group) < 2:
            continue
        flat = [_flatten(r) for r in group]
        for i in range(len(group)):
            for j in range(i + 1, len(group)):
                a, b = group[i], group[j]
                if a.doc is b.doc:
                    continue
                if check_selectors and not may_overlap(
                    document_selector(a.spec), document_selector(b.spec)
                ):
                    continue
                problems.extend(_pair_conflicts(a, flat[i], b, flat[j]))
    return problems


def _pair_conflicts(
    a: Rendered,
    fa: dict[tuple[str, ...], tuple[Any, JsonPath]],
    b: Rendered,
    fb: dict[tuple[str, ...], tuple[Any, JsonPath]],
) -> list[Problem]:
    out: list[Problem] = []
    for key, (va, pa) in fa.items():
        if key not in fb or key[-1] == "name":
            continue
        vb, pb = fb[key]
        if va != vb:
            field_name = ".".join(k.replace("name=", "") if k.startswith("name=") else k for k in key)
            out.append(
                Problem(
                    b.locate(pb),
                    f"documents {a.doc.name!r} and {b.doc.name!r} have the same priority "
                    f"({b.priority}) and set {field_name} to {short(va)} and {short(vb)}",
                    "give one of them a higher spec.priority, or make their nodeSelectors disjoint, "
                    "so qosd knows which one wins",
                    related=(a.locate(pa),),
                )
            )
    # An entry disabled by one document and defined by the other is also a disagreement.
    for x, fx, y, fy in ((a, fa, b, fb), (b, fb, a, fa)):
        for key, (value, path) in fx.items():
            if key[-1] != "enabled" or value is not False:
                continue
            prefix = key[:-1]
            defined = next(
                (
                    p
                    for k, (_, p) in fy.items()
                    if k[: len(prefix)] == prefix and k[-1] not in ("name", "enabled")
                ),
                None,
            )
            if defined is not None:
                out.append(
                    Problem(
                        x.locate(path),
                        f"document {x.doc.name!r} disables {'.'.join(prefix).replace('name=', '')} that "
                        f"document {y.doc.name!r} defines at the same priority ({x.priority})",
                        "give one of them a higher spec.priority",
                        related=(y.locate(defined),),
                    )
                )
    return out
