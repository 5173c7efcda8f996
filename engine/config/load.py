"""Read rule documents from YAML text, rejecting what PyYAML would silently accept, and keep every mark.

PyYAML's ``safe_load`` lets a duplicated key win silently, reads ``off`` as False, ``1e3`` as a string
and ``2024-01-01`` as a date. Rules are safety-relevant, so we compose the node graph ourselves (in C
when libyaml is available), construct plain JSON types, use YAML 1.2 core-schema booleans and floats,
and record the line and column of every key and value so later stages can point at them.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import IntEnum
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from engine.config.errors import Location, PolicyError, Problem, short

JsonPath = tuple[str | int, ...]

MAX_DEPTH = 64
MAX_NODES = 100_000
MAX_NUMBER_CHARS = 64
# ConfigMaps hold at most 1 MiB and custom resources about 1.5 MiB; a rule file 8 times larger is a
# pasted dump, and composing it would cost hundreds of MB before any other check ran.
MAX_FILE_BYTES = 8 << 20

# What YAML 1.1 (PyYAML, libyaml) accepts in a stream: tab, line breaks and printable characters.
_NOT_PRINTABLE = re.compile(r"[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_NESTING_HINT = (
    "rule documents need a handful of levels (spec.rules[].when.all[].not ...); nesting this deep "
    "is a generated or pasted mistake, or an alias that expands into itself"
)


class Layer(IntEnum):
    """Precedence of a document's origin: built-in defaults < files < custom resources."""

    BUILTIN = 0
    FILE = 1
    CR = 2
    # RuleTest inline overlays (engine/ruletest), located in the suite file: a suite's overrides
    # whatever its policy loads, as a test's own setting must, and a case's overrides its suite's.
    TEST = 3
    TEST_CASE = 4


def _core_schema_resolvers() -> dict[Any, list[tuple[str, re.Pattern[str]]]]:
    """YAML 1.2 core schema: only true/false are booleans, 1e3 is a float, no timestamps."""
    resolvers: dict[Any, list[tuple[str, re.Pattern[str]]]] = {}

    def add(tag: str, regexp: str, first: str) -> None:
        pattern = re.compile(regexp, re.X)
        for ch in first:
            resolvers.setdefault(ch, []).append((tag, pattern))

    add("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF")
    add("tag:yaml.org,2002:int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", "-+0123456789")
    add(
        "tag:yaml.org,2002:float",
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        "-+0123456789.",
    )
    add("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", "~nN")
    resolvers[""] = [("tag:yaml.org,2002:null", re.compile(r"^$"))]
    add("tag:yaml.org,2002:merge", r"^(?:<<)$", "<")
    return resolvers


class _ComposeLimit(Exception):
    """Raised by the composer at the node that breaks a limit, before the rest is composed."""

    def __init__(self, mark: Any, message: str, hint: str):
        super().__init__(message)
        self.line = mark.line + 1 if mark is not None else 1
        self.column = mark.column + 1 if mark is not None else 1
        self.message = message
        self.hint = hint


class _LimitedComposer(Composer):
    """PyYAML's composer recurses once per nesting level (a few Python frames each) and builds the
    whole node graph of a document before anything else looks at it. Both are bounded here, at the
    node that crosses the limit: ~500 nested flow mappings become a located "nests too deeply"
    instead of a RecursionError at 1:1, and a huge flat list stops at MAX_NODES instead of
    composing millions of nodes first. (Aliases are composed once and shared; the builder bounds
    their expansion.)"""

    _qosd_depth = 0
    _qosd_nodes = 0

    if TYPE_CHECKING:

        def peek_event(self) -> Any: ...  # from the parser it is mixed with

    def compose_document(self) -> Any:
        self._qosd_depth = 0
        self._qosd_nodes = 0
        return super().compose_document()

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._qosd_nodes += 1
        if self._qosd_depth >= MAX_DEPTH + 1:
            raise _ComposeLimit(
                self.peek_event().start_mark, f"document nests deeper than {MAX_DEPTH} levels", _NESTING_HINT
            )
        if self._qosd_nodes > MAX_NODES:
            raise _ComposeLimit(
                self.peek_event().start_mark,
                f"document has more than {MAX_NODES} values",
                "split it into several documents or files",
            )
        self._qosd_depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._qosd_depth -= 1


class _PyLoader(_LimitedComposer, yaml.SafeLoader):
    yaml_implicit_resolvers = _core_schema_resolvers()


def _loader_class() -> type[Any]:
    """libyaml's C parser for speed with PyYAML's Python composer for safety: libyaml's own composer
    recurses in C and crashes the process on pathologically nested input, while the Python one
    (bounded by _LimitedComposer) stops at the first node nested too deeply, with its position."""
    try:
        from yaml._yaml import CParser
    except ImportError:  # pragma: no cover - PyYAML built without libyaml
        return _PyLoader

    class HybridLoader(_LimitedComposer, CParser, SafeConstructor, Resolver):
        yaml_implicit_resolvers = _core_schema_resolvers()

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            _LimitedComposer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

    return HybridLoader


_Loader = _loader_class()


@dataclass
class Marks:
    """Line/column (1-based) of every value and mapping key, by JSON path."""

    values: dict[JsonPath, tuple[int, int]] = field(default_factory=dict)
    keys: dict[JsonPath, tuple[int, int]] = field(default_factory=dict)

    def find(self, path: JsonPath, prefer_key: bool = False) -> tuple[int, int]:
        """The closest recorded position for ``path``, walking up to its ancestors if needed."""
        p = tuple(path)
        while True:
            if prefer_key and p in self.keys:
                return self.keys[p]
            if p in self.values:
                return self.values[p]
            if not p:
                return (1, 1)
            p = p[:-1]


@dataclass
class Document:
    """One QoSPolicy document as read: plain JSON data plus where each part came from."""

    source: str
    index: int
    data: Any
    marks: Marks
    layer: Layer = Layer.FILE
    path: Path | None = None
    # Results of rendering + schema checking, by template context; see pipeline.prepare.
    prepared: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    templated: bool | None = field(default=None, compare=False, repr=False)

    @property
    def name(self) -> str:
        meta = self.data.get("metadata") if isinstance(self.data, dict) else None
        name = meta.get("name") if isinstance(meta, dict) else None
        return name if isinstance(name, str) else f"<document {self.index + 1}>"

    @property
    def is_cr(self) -> bool:
        return self.layer is Layer.CR

    def locate(self, path: JsonPath, prefer_key: bool = False) -> Location:
        """A Location for a JSON path; custom resources have no lines, so they carry the path."""
        jp = json_path(path)
        if self.is_cr:
            return Location(self.source, 0, 0, jp)
        line, col = self.marks.find(path, prefer_key)
        return Location(self.source, line, col, jp)

    def position(self, path: JsonPath, prefer_key: bool = False) -> Location:
        """Like ``locate`` but without the JSON path for file documents (provenance records many)."""
        if self.is_cr:
            return self.locate(path, prefer_key)
        line, col = self.marks.find(path, prefer_key)
        return Location(self.source, line, col, "")


def too_deep(value: Any, limit: int = MAX_DEPTH) -> JsonPath | None:
    """The path of a value nested more than ``limit`` levels inside ``value``, found without
    recursion (so it works on exactly the values that would make a recursive walk fail)."""
    stack: list[tuple[Any, JsonPath]] = [(value, ())]
    while stack:
        v, path = stack.pop()
        if len(path) > limit:
            return path
        if isinstance(v, dict):
            stack.extend((item, (*path, k)) for k, item in v.items())
        elif isinstance(v, list):
            stack.extend((item, (*path, i)) for i, item in enumerate(v))
    return None


def json_loads_bounded(text: str, **kwargs: Any) -> Any:
    """``json.loads`` for files qosd reads (audit logs, traces, eval output), refusing values nested
    deeper than MAX_DEPTH with a ``json.JSONDecodeError`` at the bracket that goes too deep, so
    neither the decoder (RecursionError at ~1000 levels) nor the recursive checks that run on the
    value afterwards can fail with a traceback instead of a located error."""
    try:
        value = json.loads(text, **kwargs)
    except RecursionError:
        value = None
    else:
        if too_deep(value) is None:
            return value
    raise json.JSONDecodeError(
        f"nests deeper than {MAX_DEPTH} levels", text, _json_bracket_at(text, MAX_DEPTH + 1)
    )


def json_brackets(text: str) -> Iterator[tuple[int, str, int]]:
    """(index, bracket, level) of each bracket of JSON text outside strings; an opening bracket's
    level is the one it opens (the root is 1), a closing one's the level it closes."""
    depth, in_string, escaped = 0, False, False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            yield i, ch, depth
        elif ch in "]}":
            yield i, ch, depth
            depth -= 1


def _json_bracket_at(text: str, level: int) -> int:
    """Index of the first bracket that opens nesting ``level`` in JSON text (0 if none)."""
    return next((i for i, ch, depth in json_brackets(text) if ch in "[{" and depth >= level), 0)


def nesting_problem(doc: Document) -> Problem | None:
    """A located problem if ``doc`` nests deeper than MAX_DEPTH.

    Files are bounded when they are read; custom resources arrive as JSON from the API server,
    which allows far deeper objects. Rendering, the schema check, merging and compiling all walk a
    document recursively (several Python frames per level), so a document is refused before any of
    them runs: what is accepted at MAX_DEPTH stays far below the interpreter's recursion limit.
    """
    path = too_deep(doc.data)
    if path is None:
        return None
    return Problem(doc.locate(path), f"document nests deeper than {MAX_DEPTH} levels", _NESTING_HINT)


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@lru_cache(maxsize=8192)
def _segment(p: str | int) -> str:
    if isinstance(p, int):
        return f"[{p}]"
    return f".{p}" if _IDENTIFIER.fullmatch(p) else "[" + repr(p) + "]"


def json_path(path: JsonPath) -> str:
    """$.spec.rules[0].when['node.memory.usage_percent'] style, as jsonschema prints paths."""
    return "$" + "".join(_segment(p) for p in path)


class _Builder:
    """Turns a composed YAML node graph into JSON data, collecting located problems."""

    def __init__(self, loader: Any, source: str):
        self.loader = loader
        self.source = source
        self.marks = Marks()
        self.problems: list[Problem] = []
        self.count = 0

    def _loc(self, node: yaml.Node, path: JsonPath) -> Location:
        return Location(self.source, node.start_mark.line + 1, node.start_mark.column + 1, json_path(path))

    def build(self, node: yaml.Node, path: JsonPath, depth: int = 0) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            raise _TooBig(
                self._loc(node, path),
                f"document expands to more than {MAX_NODES} values",
                "split the document, or check for aliases (*name) that expand into many copies",
            )
        if depth > MAX_DEPTH:
            raise _TooBig(
                self._loc(node, path), f"document nests deeper than {MAX_DEPTH} levels", _NESTING_HINT
            )
        self.marks.values[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node, path)
        if isinstance(node, yaml.SequenceNode | yaml.MappingNode) and node.tag not in _COLLECTION_TAGS:
            self.problems.append(
                Problem(
                    self._loc(node, path),
                    f"YAML tag {node.tag} is not allowed here",
                    "rule documents hold plain strings, numbers, booleans, lists and mappings; drop the tag",
                )
            )
            return None
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, (*path, i), depth + 1) for i, item in enumerate(node.value)]
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path, depth)
        self.problems.append(Problem(self._loc(node, path), f"unsupported YAML node {node.tag}"))
        return None

    def _scalar(self, node: yaml.ScalarNode, path: JsonPath) -> Any:
        tag = node.tag
        if tag not in _SCALAR_TAGS:
            self.problems.append(
                Problem(
                    self._loc(node, path),
                    f"YAML tag {tag} is not allowed here",
                    "rule documents hold plain strings, numbers, booleans, lists and mappings; drop the tag",
                )
            )
            return None
        try:
            value = _construct_scalar(tag, node.value)
        except ValueError:
            too_long = len(node.value) > MAX_NUMBER_CHARS
            self.problems.append(
                Problem(
                    self._loc(node, path),
                    f"number {short(node.value, 24)} is too large ({len(node.value)} characters)"
                    if too_long
                    else f"{node.value!r} is not a valid {tag.rsplit(':', 1)[-1]}",
                    "qosd numbers fit in 64 bits; check for a pasted value" if too_long else "drop the tag",
                )
            )
            return None
        if isinstance(value, float) and not math.isfinite(value):
            self.problems.append(
                Problem(
                    self._loc(node, path),
                    f"{node.value!r} is not a finite number",
                    "thresholds and sizes must be ordinary numbers; .inf and .nan are not allowed",
                )
            )
            return None
        return value

    def _mapping(self, node: yaml.MappingNode, path: JsonPath, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        seen: dict[str, yaml.Node] = {}
        for key_node, value_node in self._flatten(node, path):
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag in ("tag:yaml.org,2002:null",):
                self.problems.append(
                    Problem(
                        self._loc(key_node, path),
                        "mapping keys must be plain strings",
                        "complex or empty keys are not allowed in rule documents",
                    )
                )
                continue
            key = str(key_node.value)
            kpath = (*path, key)
            if key in seen:
                first = seen[key]
                self.problems.append(
                    Problem(
                        self._loc(key_node, kpath),
                        f"duplicate key {key!r}",
                        f"it is already defined at line {first.start_mark.line + 1}; YAML would silently "
                        "keep only the last one, so qosd refuses the file. Keep one of them.",
                        related=(self._loc(first, kpath),),
                    )
                )
                continue
            seen[key] = key_node
            self.marks.keys[kpath] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            out[key] = self.build(value_node, kpath, depth + 1)
        return out

    def _flatten(self, node: yaml.MappingNode, path: JsonPath) -> Iterator[tuple[yaml.Node, yaml.Node]]:
        """Expand YAML merge keys (``<<: *anchor``); explicit keys win over merged ones."""
        merged: list[tuple[yaml.Node, yaml.Node]] = []
        own: list[tuple[yaml.Node, yaml.Node]] = []
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                for src in sources:
                    if not isinstance(src, yaml.MappingNode):
                        self.problems.append(
                            Problem(self._loc(src, path), "a merge key (<<) must refer to a mapping")
                        )
                        continue
                    merged.extend(src.value)
            else:
                own.append((key_node, value_node))
        own_keys = {k.value for k, _ in own if isinstance(k, yaml.ScalarNode)}
        seen_merged: set[str] = set()
        for k, v in merged:
            if isinstance(k, yaml.ScalarNode) and k.value not in own_keys and k.value not in seen_merged:
                seen_merged.add(k.value)
                yield k, v
        yield from own


def _construct_scalar(tag: str, text: str) -> Any:
    """YAML 1.2 core-schema values; unlike PyYAML's 1.1 rules, 017 is seventeen, not octal."""
    if tag == "tag:yaml.org,2002:str":
        return text
    if tag == "tag:yaml.org,2002:null":
        return None
    if tag == "tag:yaml.org,2002:bool":
        return text.lower() == "true"
    if tag == "tag:yaml.org,2002:int":
        if len(text) > MAX_NUMBER_CHARS:
            raise ValueError(text)
        if text.startswith(("0x", "0o")):
            return int(text[2:], 16 if text[1] == "x" else 8)
        return int(text, 10)
    if len(text) > MAX_NUMBER_CHARS:
        raise ValueError(text)
    lowered = text.lower()
    if lowered.endswith(".inf"):
        return -math.inf if lowered.startswith("-") else math.inf
    if lowered == ".nan":
        return math.nan
    return float(text)


class _TooBig(Exception):
    def __init__(self, location: Location, message: str, hint: str):
        super().__init__(message)
        self.location = location
        self.message = message
        self.hint = hint


_COLLECTION_TAGS = frozenset({"tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"})
_SCALAR_TAGS = frozenset(
    {
        "tag:yaml.org,2002:str",
        "tag:yaml.org,2002:int",
        "tag:yaml.org,2002:float",
        "tag:yaml.org,2002:bool",
        "tag:yaml.org,2002:null",
    }
)


def parse_documents(
    text: str, source: str, layer: Layer = Layer.FILE, path: Path | None = None
) -> list[Document]:
    """Parse every document of a YAML stream; raise PolicyError with all problems found.

    Empty documents (a stray ``---``) are skipped, as kubectl does.
    """
    bad = _NOT_PRINTABLE.search(text)
    if bad is not None:
        raise PolicyError([_unprintable(text, bad.start(), source)])
    docs: list[Document] = []
    problems: list[Problem] = []
    index = 0
    loader = _Loader(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            builder = _Builder(loader, source)
            try:
                data = builder.build(node, ())
            except _TooBig as exc:
                problems.append(Problem(exc.location, exc.message, exc.hint))
                index += 1
                continue
            problems.extend(builder.problems)
            if data is not None:
                docs.append(Document(source, index, data, builder.marks, layer, path))
            index += 1
    except _ComposeLimit as exc:
        problems.append(Problem(Location(source, exc.line, exc.column), exc.message, exc.hint))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        what = exc.problem or "invalid YAML"
        context = f" ({exc.context})" if exc.context else ""
        problems.append(
            Problem(
                Location(source, line, col),
                f"YAML syntax error: {what}{context}",
                "check indentation and quoting near this position",
            )
        )
    except yaml.YAMLError as exc:
        problems.append(Problem(Location(source, 1, 1), f"YAML error: {exc}"))
    except (RecursionError, MemoryError) as exc:  # pragma: no cover - the limits above come first
        problems.append(
            Problem(
                Location(source, 1, 1),
                "YAML nests too deeply to read"
                if isinstance(exc, RecursionError)
                else "YAML too large to read",
                _NESTING_HINT,
            )
        )
    finally:
        loader.dispose()
    if problems:
        raise PolicyError(problems)
    return docs


def _line_column(text: str, index: int) -> tuple[int, int]:
    """1-based line and column of ``text[index]``, as an editor counts them (lines end at \\n)."""
    line_start = text.rfind("\n", 0, index) + 1
    return text.count("\n", 0, index) + 1, index - line_start + 1


def _unprintable(text: str, index: int, source: str) -> Problem:
    char = text[index]
    line, col = _line_column(text, index)
    what = "control character" if ord(char) < 0x20 or 0x7F <= ord(char) < 0xA0 else "character"
    return Problem(
        Location(source, line, col),
        f"{what} U+{ord(char):04X} is not allowed in YAML",
        "delete it (it usually comes from a paste out of a terminal or a binary file); inside a "
        f'double-quoted string write it as an escape, e.g. "\\x{ord(char):02x}"'
        if ord(char) < 0x100
        else f'delete it; inside a double-quoted string write it as an escape, e.g. "\\u{ord(char):04x}"',
    )


def decode_utf8(raw: bytes, source: str) -> str:
    """``raw`` as UTF-8 text; an undecodable byte is a PolicyError at its line and column (counted
    in characters, as an editor shows them), naming the bytes, because the usual cause is one
    Latin-1 character pasted into an otherwise fine file."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        start = exc.start
        line_start = raw.rfind(b"\n", 0, start) + 1
        line = raw.count(b"\n", 0, start) + 1
        column = len(raw[line_start:start].decode("utf-8", errors="replace")) + 1
        bad = " ".join(f"0x{b:02x}" for b in raw[start : max(exc.end, start + 1)][:4])
        raise PolicyError(
            [
                Problem(
                    Location(source, line, column),
                    f"file is not UTF-8: byte {bad} cannot be decoded ({exc.reason})",
                    "save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`); qosd reads its input files "
                    "as UTF-8 only",
                )
            ]
        ) from None


def clear_caches() -> None:
    """Forget parsed files (benchmarks measure the full pipeline with this)."""
    _FILE_CACHE.clear()


def read_file(path: Path, layer: Layer = Layer.FILE, display: str | None = None) -> list[Document]:
    """Read one YAML file. Undecodable or unreadable files are located errors, not tracebacks."""
    source = display or str(path)
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise PolicyError(
            [Problem(Location(source, 0, 0), f"cannot read file: {exc.strerror or exc}")]
        ) from None
    if len(raw) > MAX_FILE_BYTES:
        raise PolicyError(
            [
                Problem(
                    Location(source, 0, 0),
                    f"file is larger than {MAX_FILE_BYTES >> 20} MiB, more than qosd reads as rules",
                    "a ConfigMap holds at most 1 MiB: check that the right file is mounted, or split it",
                )
            ]
        )
    text = decode_utf8(raw, source)
    key = (source, int(layer), hashlib.sha256(raw).hexdigest())
    cached = _FILE_CACHE.get(key)
    if cached is not None:
        _FILE_CACHE.move_to_end(key)
        return list(cached)
    docs = parse_documents(text, source, layer, path)
    _FILE_CACHE[key] = tuple(docs)
    if len(_FILE_CACHE) > _FILE_CACHE_SIZE:
        _FILE_CACHE.popitem(last=False)
    return docs


# Parsed documents by (display name, layer, content hash): a reload re-parses only files whose bytes
# changed, and the documents' prepared results (render + schema check) are reused with them.
_FILE_CACHE: OrderedDict[tuple[str, int, str], tuple[Document, ...]] = OrderedDict()
_FILE_CACHE_SIZE = 256


YAML_SUFFIXES = (".yaml", ".yml")


def skipped_entry(name: str) -> bool:
    """Whether a directory entry below a rules directory is never read, nor anything under it.

    Hidden entries: a ConfigMap volume holds every key three times, as the visible symlink
    ``rules.yaml -> ..data/rules.yaml``, under ``..data/`` and under ``..2026_11_22_10_00_00.123/``;
    reading the hidden copies would load each document two or three times (duplicate rule names).
    Editor leftovers: vim's ``.rules.yaml.swp``, backups ``rules.yaml~``, emacs autosaves
    ``#rules.yaml#`` and lock links ``.#rules.yaml``; a half-edited copy must not become policy.
    """
    return name.startswith(".") or name.endswith("~") or (name.startswith("#") and name.endswith("#"))


def is_rule_file_name(name: str) -> bool:
    """The one decision of which names below a rules directory are rule files: ``*.yaml`` and
    ``*.yml`` that ``skipped_entry`` does not exclude. The loader (``yaml_files_under``) and the file
    watcher (engine.sources.rulefiles) both use it, so the watcher reacts to exactly what is read."""
    return name.endswith(YAML_SUFFIXES) and not skipped_entry(name)


def yaml_files_under(directory: Path) -> list[Path]:
    """Every rule file (``is_rule_file_name``) below ``directory``, sorted.

    Skipped directories are not entered at all (a ConfigMap's ``..data`` and timestamped copies).
    Symlinked directories are followed, because a ConfigMap item with a nested ``path`` appears as
    ``team -> ..data/team``; a directory reached twice (a link loop or two links to one place) is
    read once. Dangling symlinks are skipped (kubelet may create a link before its target, #93686).
    """
    found: list[Path] = []
    seen: set[tuple[int, int]] = set()
    for root, dirs, names in os.walk(directory, followlinks=True):
        try:
            st = os.stat(root)
        except OSError:
            dirs[:] = []
            continue
        if (st.st_dev, st.st_ino) in seen:
            dirs[:] = []
            continue
        seen.add((st.st_dev, st.st_ino))
        dirs[:] = [d for d in dirs if not skipped_entry(d)]
        for name in names:
            if is_rule_file_name(name):
                f = Path(root, name)
                if f.is_file():
                    found.append(f)
    return sorted(found)


def expand_paths(paths: list[Path]) -> tuple[list[Path], list[Problem]]:
    """Files named directly (whatever their name: naming one is explicit), plus every rule file
    below named directories (``yaml_files_under``: sorted, hidden and editor files skipped)."""
    files: list[Path] = []
    problems: list[Problem] = []
    for p in paths:
        if p.is_dir():
            files.extend(yaml_files_under(p))
        elif p.is_file():
            files.append(p)
        else:
            problems.append(Problem(Location(str(p), 0, 0), "no such file or directory"))
    return files, problems
