"""Seeded mutations of YAML/JSON inputs: structural (tree), value (interesting scalars), templates,
and byte-level (non-UTF-8, control characters, truncation, line edits).

Everything here is a pure function of a ``random.Random``: an input is identified by (seed, surface,
index) and can be regenerated anywhere, so a worker that hangs or dies never loses its reproducer.
"""

from __future__ import annotations

import copy
import json
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

# ---------------------------------------------------------------- interesting values

QUANTITIES: tuple[str, ...] = (
    "1e400",
    "1e9999999",
    "-1e400",
    "1e-400",
    "-0",
    "0",
    "NaN",
    "nan",
    "Infinity",
    "-Infinity",
    "inf",
    "9223372036854775808",
    "18446744073709551616",
    "-9223372036854775809",
    "1Ei",
    "8Ei",
    "1E",
    "999Ei",
    "0.0000001m",
    "1n",
    "1u",
    "0.5m",
    "1e3",
    "1e-3",
    "1.5Gi",
    "100Mi",
    "4Gi",
    "2",
    "-1",
    "-1Gi",
    "1Gi1",
    "Gi",
    "1 Gi",
    " 1Gi",
    "1gi",
    "1.",
    ".5",
    "0x10",
    "1_000",
    "1e",
    "e3",
    "1e+",
    "++1",
    "99999999999999999999999999999999999999Ei",
    "1" + "0" * 400,
    "0." + "0" * 400 + "1",
    "1%",
    "100%",
    "",
)
DURATIONS: tuple[str, ...] = (
    "1s",
    "0s",
    "-1s",
    "0",
    "1e400s",
    "1e9999999s",
    "99999999999999h",
    "9223372036854775808s",
    "1ms",
    "0.0000001ms",
    "1ns",
    "1us",
    "5m",
    "1h30m",
    "NaNs",
    "nans",
    "infs",
    "1y",
    "1d",
    "s",
    "1.5s",
    "-0s",
    "1e-400s",
    "10",
    "1 s",
    "1S",
)
NUMBERS: tuple[Any, ...] = (
    0,
    -1,
    1,
    2**31,
    2**63,
    2**64,
    -(2**63) - 1,
    10**400,
    1e308,
    -1e308,
    float("inf"),
    float("-inf"),
    float("nan"),
    -0.0,
    0.5,
    1e-320,
    101,
    100,
    1000000,
    True,
    False,
)
STRINGS: tuple[str, ...] = (
    "",
    " ",
    "é",
    "0-1é",
    "\u2028",
    "\ufeff",
    "a\x00b",
    "../x",
    "../../etc",
    "/abs/path",
    "/sys/fs/cgroup/cpu/x",
    "x/../../y",
    "*",
    "qosd*/*",
    "/srv/*",
    "a" * 10000,
    "0-1000000",
    "0-3,5-",
    "1-0",
    "max",
    "max 100000",
    "-1",
    "not-a-number",
    "true",
    "null",
    "~",
    "{}",
    "[]",
    "${HOME}",
    "$(id)",
    "%s%s%s",
    "\\x00",
    "\U0001f600",
    "\t",
    "\r",
    "key: value",
)
# Jinja2 payloads, including amplification (issue 14, defect 1) and sandbox probes.
TEMPLATES: tuple[str, ...] = (
    "{{ [[[[[[1]]]]]] | tojson(indent=10000000) | length }}",
    "{{ [[[[[[[[[[1]]]]]]]]]] | tojson(indent=1000000) | length }}",
    "{{ [[1,[2,[3]]]] | map('tojson', indent=100000000) | list | length }}",
    "{{ '%0999999999d' % 1 }}",
    "{{ '%.999999999f' % 1.0 }}",
    "{{ '%*d' % (999999999, 1) }}",
    "{{ 'a' * 999999999 }}",
    "{{ ('a' * 99999) * 99999 }}",
    "{{ [1] * 999999999 }}",
    "{{ range(999999999) | list | length }}",
    "{% for i in range(99999999) %}{% endfor %}1",
    "{{ 9 ** 9 ** 9 }}",
    "{{ 10 ** 400 }}",
    "{{ 1e308 * 10 }}",
    "{{ node.cpus }}",
    "{{ node.cpus * 1000000000000 }}",
    "{{ node.cpus - 100 }}",
    "{{ node.numa_count / 0 }}",
    "{{ [4, node.numa_count] | max }}",
    "{{ node.memory }}",
    "{{ node.labels }}",
    "{{ node.missing.attr }}",
    "{{ undefined_name }}",
    "{{ ''.__class__.__mro__ }}",
    "{{ cycler.__init__.__globals__ }}",
    "{{ lipsum(99999, false, 99999, 99999) | length }}",
    "{{ 'x' | center(999999999) }}",
    "{{ 'x' | indent(999999999) }}",
    "{{ 'x' | wordwrap(1) }}",
    "{{ {'a': 1} | dictsort }}",
    "{{ '1e400' | float }}",
    "{{ 'nan' | float }}",
    "{% raw %}{{ x }}{% endraw %}",
    "{{",
    "{% if %}",
    "{{ 1 }",
    "{# unterminated",
    "{% set x = [1] %}{% for a in x %}{% for b in x %}{{ a }}{% endfor %}{% endfor %}",
    "{{ (node.cpus | string) * 99999999 }}",
)
CONTROL_CHARS: tuple[str, ...] = (
    *(chr(c) for c in (*range(0, 9), 11, 12, *range(14, 32), 127)),
    "\u0085",
    "\u2028",
    "\u2029",
    "\ufeff",
    "\ufffe",
)
BAD_BYTES: tuple[bytes, ...] = (
    b"\x80",
    b"\xff",
    b"\xc3",
    b"\xe2\x82",
    b"\xed\xa0\x80",
    b"\xc0\xaf",
    b"\xfe\xff",
)

NEST_DEPTHS = (8, 50, 200, 500, 1200)


def interesting_value(rng: random.Random) -> Any:
    pool = rng.choice((QUANTITIES, QUANTITIES, DURATIONS, NUMBERS, STRINGS, TEMPLATES, TEMPLATES))
    return rng.choice(pool)


def random_value(rng: random.Random, keys: Sequence[str]) -> Any:
    """A value of any YAML type (scalars, small containers) for type changes and key insertions."""
    kind = rng.randrange(8)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice((True, False))
    if kind == 2:
        return rng.choice(NUMBERS)
    if kind == 3:
        return rng.choice(STRINGS)
    if kind == 4:
        return [interesting_value(rng) for _ in range(rng.randrange(4))]
    if kind == 5:
        return {rng.choice(keys) if keys else "k": interesting_value(rng) for _ in range(rng.randrange(1, 4))}
    return interesting_value(rng)


# ---------------------------------------------------------------- the input


@dataclass
class Mutated:
    """One generated input: its bytes, what was done to the seed, and where a byte-level fault was
    put (line, 1-based) when it is the only mutation: a rejection must then not be located at 1:1."""

    data: bytes
    seed_name: str
    steps: list[str] = field(default_factory=list)
    fault_line: int | None = None

    def describe(self) -> str:
        return f"{self.seed_name}: " + "; ".join(self.steps)


SENTINEL = "QOSD_FUZZ_NEST_SENTINEL"

# ---------------------------------------------------------------- tree mutations

Path_ = tuple[Any, ...]


def _paths(tree: Any, limit: int = 20000) -> list[Path_]:
    """Every path to a value in ``tree`` (the root excluded), breadth first, bounded."""
    out: list[Path_] = []
    queue: list[tuple[Path_, Any]] = [((), tree)]
    while queue and len(out) < limit:
        path, node = queue.pop(0)
        items: list[tuple[Any, Any]] = []
        if isinstance(node, dict):
            items = list(node.items())
        elif isinstance(node, list):
            items = list(enumerate(node))
        for k, v in items:
            out.append((*path, k))
            queue.append(((*path, k), v))
    return out


def _get(tree: Any, path: Path_) -> Any:
    for k in path:
        tree = tree[k]
    return tree


def _set(tree: Any, path: Path_, value: Any) -> None:
    _get(tree, path[:-1])[path[-1]] = value


def _delete(tree: Any, path: Path_) -> None:
    parent = _get(tree, path[:-1])
    del parent[path[-1]]


def _scalar_paths(tree: Any, paths: list[Path_]) -> list[Path_]:
    return [p for p in paths if not isinstance(_get(tree, p), (dict, list))]


def tree_mutation(
    rng: random.Random, tree: Any, keys: Sequence[str], amplify: bool = True
) -> tuple[str, int | None]:
    """Mutate ``tree`` in place; returns a description and, for deep nesting, its depth."""
    paths = _paths(tree)
    if not paths:
        return "empty tree: unchanged", None
    op = rng.choice(
        (
            "enable",
            "like",
            "like",
            "delete",
            "swap",
            "type",
            "value",
            "value",
            "value",
            "template",
            "nest",
            "splice",
            "insert",
            "dup_item",
            "empty",
            "amplify",
        )
    )
    if op == "amplify" and not amplify:
        op = "dup_item"
    path = rng.choice(paths)
    where = "/".join(str(k) for k in path)
    if op == "enable":  # reach what the seeds ship switched off (disabled rules, features)
        flags = [p for p in paths if isinstance(_get(tree, p), bool)]
        if flags:
            path = rng.choice(flags)
            _set(tree, path, not _get(tree, path))
            return f"flip {'/'.join(str(k) for k in path)}", None
        op = "value"
    if op == "like":  # a value of the same kind: a quantity where a quantity is, a duration...
        liked = [(p, _kind(_get(tree, p))) for p in paths]
        liked = [(p, k) for p, k in liked if k]
        if liked:
            path, kind = rng.choice(liked)
            value = rng.choice(DURATIONS if kind == "duration" else QUANTITIES)
            _set(tree, path, value)
            return f"like {'/'.join(str(k) for k in path)} = {_short(value)}", None
        op = "value"
    if op == "delete":
        _delete(tree, path)
        return f"delete {where}", None
    if op == "swap":
        other = rng.choice(paths)
        if other[: len(path)] == path or path[: len(other)] == other:
            return f"swap {where} with itself: unchanged", None
        a, b = copy.deepcopy(_get(tree, path)), copy.deepcopy(_get(tree, other))
        _set(tree, path, b)
        _set(tree, other, a)
        return f"swap {where} <-> {'/'.join(str(k) for k in other)}", None
    if op == "type":
        value = random_value(rng, keys)
        _set(tree, path, value)
        return f"type {where} = {_short(value)}", None
    if op in ("value", "template"):
        scalars = _scalar_paths(tree, paths) or paths
        path = rng.choice(scalars)
        value = rng.choice(TEMPLATES) if op == "template" else interesting_value(rng)
        if op == "template" and isinstance(_get(tree, path), str) and rng.random() < 0.3:
            value = str(_get(tree, path)) + value  # a template inside an existing string
        _set(tree, path, value)
        return f"{op} {'/'.join(str(k) for k in path)} = {_short(value)}", None
    if op == "nest":
        depth = rng.choice(NEST_DEPTHS)
        _set(tree, path, SENTINEL)
        return f"nest {where} depth {depth}", depth
    if op == "splice":
        donor = copy.deepcopy(_get(tree, rng.choice(paths)))
        _set(tree, path, donor)
        return f"splice {where} = {_short(donor)}", None
    if op == "insert":
        dicts = [p for p in paths if isinstance(_get(tree, p), dict)]
        target = rng.choice(dicts) if dicts else ()
        key = rng.choice(keys) if keys and rng.random() < 0.8 else rng.choice(STRINGS)
        value = random_value(rng, keys)
        node = _get(tree, target)
        if isinstance(node, dict):
            node[key] = value
        return f"insert {'/'.join(str(k) for k in target)}/{key} = {_short(value)}", None
    lists = [p for p in paths if isinstance(_get(tree, p), list) and _get(tree, p)]
    if not lists:
        return f"{op}: no list, unchanged", None
    path = rng.choice(lists)
    where = "/".join(str(k) for k in path)
    items: list[Any] = _get(tree, path)
    if op == "dup_item":
        i = rng.randrange(len(items))
        items.insert(i, copy.deepcopy(items[i]))
        return f"duplicate item {where}/{i}", None
    if op == "empty":
        items.clear()
        return f"empty list {where}", None
    n = rng.choice((100, 300))  # beyond a node's pod limit (kubelet maxPods 110, at most 250)
    items.extend(copy.deepcopy(items[0]) for _ in range(n))
    return f"amplify list {where} x{n}", None


DURATION_LIKE = re.compile(r"^[0-9.]+(ms|us|ns|s|m|h)$")
QUANTITY_LIKE = re.compile(r"^-?[0-9.]+([eE][-+]?[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


def _kind(value: Any) -> str | None:
    """'duration' or 'quantity' for a scalar that looks like one (numbers are quantities)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return "quantity"
    if isinstance(value, str):
        if DURATION_LIKE.match(value):
            return "duration"
        if QUANTITY_LIKE.match(value):
            return "quantity"
    return None


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def nest_text(depth: int, rng: random.Random) -> str:
    if rng.random() < 0.5:
        return "[" * depth + "1" + "]" * depth
    return "{a: " * depth + "1" + "}" * depth


# ---------------------------------------------------------------- text / byte mutations


def byte_mutation(rng: random.Random, data: bytes) -> tuple[bytes, str, int | None]:
    """A byte-level edit; returns the new bytes, a description and the line of an inserted bad
    character (non-UTF-8 byte or control character), whose error must point there."""
    if not data:
        return b"\xff", "non-UTF-8 into empty input", 1
    op = rng.choice(
        ("badbyte", "control", "truncate", "del_line", "dup_line", "swap_lines", "flip", "indent")
    )
    pos = rng.randrange(len(data) + 1)
    line = data.count(b"\n", 0, pos) + 1
    if op == "badbyte":
        bad = rng.choice(BAD_BYTES)
        return data[:pos] + bad + data[pos:], f"insert {bad!r} at byte {pos} (line {line})", line
    if op == "control":
        ch = rng.choice(CONTROL_CHARS)
        # Keep the insertion on a character boundary so the file stays UTF-8.
        text = data.decode("utf-8", errors="surrogateescape")
        cpos = rng.randrange(len(text) + 1)
        cline = text.count("\n", 0, cpos) + 1
        new = text[:cpos] + ch + text[cpos:]
        return new.encode("utf-8", errors="surrogateescape"), f"insert U+{ord(ch):04X} at line {cline}", cline
    if op == "truncate":
        return data[:pos], f"truncate at byte {pos}", None
    if op == "flip":
        if pos >= len(data):
            pos = len(data) - 1
        b = data[pos] ^ (1 << rng.randrange(8))
        return data[:pos] + bytes([b]) + data[pos + 1 :], f"flip byte {pos} (line {line})", None
    lines = data.split(b"\n")
    i = rng.randrange(len(lines))
    if op == "del_line":
        del lines[i]
        return b"\n".join(lines), f"delete line {i + 1}", None
    if op == "dup_line":
        lines.insert(i, lines[i])
        return b"\n".join(lines), f"duplicate line {i + 1}", None
    if op == "swap_lines":
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
        return b"\n".join(lines), f"swap lines {i + 1} and {j + 1}", None
    delta = rng.choice((-4, -2, -1, 1, 2, 4))
    lines[i] = b" " * delta + lines[i] if delta > 0 else lines[i][-delta:]
    return b"\n".join(lines), f"indent line {i + 1} by {delta}", None


# ---------------------------------------------------------------- one input from one seed

Dump = Callable[[Any], str]


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """libyaml's dumper (generation must not be the bottleneck) that quotes strings a YAML 1.2
    reader would take for numbers: "1e400" stays the string the mutation meant; numbers come from
    NUMBERS."""


NUMBER_LIKE = re.compile(r"^[-+]?(\.?[0-9]|\.(inf|nan)$|(inf|nan|infinity)$)", re.I)


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = '"' if NUMBER_LIKE.match(value) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def dump_yaml(docs: list[Any]) -> str:
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=200)


def dump_json(docs: list[Any]) -> str:
    return json.dumps(docs[0] if len(docs) == 1 else docs)


def mutate(
    rng: random.Random,
    seed_name: str,
    seed_text: str,
    seed_docs: list[Any],
    keys: Sequence[str],
    *,
    json_output: bool = False,
    amplify: bool = True,
) -> Mutated:
    """1-3 stacked mutations of a seed: tree edits (re-serialized) and/or byte edits of the text."""
    n = rng.choice((1, 1, 1, 2, 2, 3))
    steps: list[str] = []
    byte_ops = sum(1 for _ in range(n) if rng.random() < 0.3)
    tree_ops = n - byte_ops
    fault_line: int | None = None
    if tree_ops:
        docs = copy.deepcopy(seed_docs)
        depths: list[int] = []
        for _ in range(tree_ops):
            if not docs:
                break
            di = rng.randrange(len(docs))
            if isinstance(docs[di], (dict, list)):
                desc, depth = tree_mutation(rng, docs[di], keys, amplify)
            else:
                docs[di], desc, depth = random_value(rng, keys), "replace document", None
            steps.append(desc)
            if depth is not None:
                depths.append(depth)
        try:
            text = dump_json(docs) if json_output else dump_yaml(docs)
        except (ValueError, OverflowError, RecursionError) as exc:
            text = seed_text
            steps.append(f"(could not serialize: {type(exc).__name__}; seed kept)")
        for depth in depths:
            marker = json.dumps(SENTINEL) if json_output else SENTINEL
            at = text.find(marker)
            if at < 0:
                continue
            if n == 1:
                fault_line = text.count("\n", 0, at) + 1
            text = text.replace(marker, nest_text(depth, rng), 1)
        data = text.encode("utf-8", errors="surrogateescape")
    else:
        data = seed_text.encode("utf-8")
    for _ in range(byte_ops):
        data, desc, line = byte_mutation(rng, data)
        steps.append(desc)
        if n == 1:
            fault_line = line
    return Mutated(data, seed_name, steps, fault_line)


def collect_keys(trees: Sequence[Any]) -> list[str]:
    """Every mapping key in the seeds: insertions use real field names most of the time."""
    out: set[str] = set()
    stack = list(trees)
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            out.update(str(k) for k in node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return sorted(out)
