"""The Jinja2 sandbox that renders templated rule values (engine/config/render.py).

Templates come from git repositories and custom resources that many people can edit, so every
escape route must be refused with a message a platform engineer can act on, and every refusal
must happen *before* anything large is allocated. Refusal cases therefore run in a forked child
(tests/childproc.py) that reports its peak resident-set growth, with an address-space safety net
and a hang guard: a refusal that needed hundreds of MB, or never returns, fails the test instead of
taking the test run (or the machine) down with it. The child also arms tripwires on what an escape
would call (files, processes, sockets, imports) and checks the facts it was given are unchanged.
"""

from __future__ import annotations

import builtins
import copy
import io
import json
import os
import re
import socket
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import jinja2.sandbox
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from engine.config.errors import Problem
from engine.config.load import parse_documents
from engine.config.render import RenderError, render_document, render_value
from engine.model.node import NodeInfo
from tests.childproc import PEAK_GROWTH_LIMIT, MiB, needs_fork, run_in_child

NODE = NodeInfo(
    name="node-a",
    labels={"a": "b", "topology.kubernetes.io/zone": "z1"},
    capacity={"cpu": 16.0, "memory": float(64 << 30)},
    cpus=16,
    numa_count=2,
    sockets=2,
    memory=64 << 30,
    cpu_ids=frozenset(range(16)),
)
FACTS = (
    "node.capacity",
    "node.cpus",
    "node.labels",
    "node.memory",
    "node.name",
    "node.numa_count",
    "node.sockets",
)


def context() -> dict[str, Any]:
    return NODE.template_context()


# ------------------------------------------------------------------ guarded runner


class Tripwires:
    """In the child only: the calls a sandbox escape would make (files, processes, sockets, new
    imports) are replaced by a recorder that refuses. Templates never need any of them."""

    def __init__(self) -> None:
        self.fired: list[str] = []
        self._saved: list[tuple[Any, str, Any]] = []

    def _trap(self, owner: Any, name: str) -> None:
        original = getattr(owner, name)
        label = f"{getattr(owner, '__name__', owner)}.{name}"

        def tripped(*_args: Any, **_kwargs: Any) -> Any:
            self.fired.append(label)
            raise RuntimeError(f"tripwire: {label} called from a template")

        self._saved.append((owner, name, original))
        setattr(owner, name, tripped)

    def arm(self) -> None:
        for name in ("open",):
            self._trap(builtins, name)
        self._trap(io, "open")
        for name in (
            "open",
            "system",
            "popen",
            "remove",
            "unlink",
            "rename",
            "execv",
            "execve",
            "fork",
            "kill",
        ):
            self._trap(os, name)
        self._trap(subprocess, "Popen")
        self._trap(socket, "socket")
        known = set(sys.modules)
        real_import = builtins.__import__

        def guarded_import(
            name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0
        ) -> Any:
            # Jinja's generated code and Jinja itself import from jinja2; nothing else may be imported.
            full = f"{(globals or {}).get('__package__') or ''}.{name}" if level else name
            if full not in known and not full.startswith(("jinja2", "markupsafe")):
                self.fired.append(f"import {full}")
                raise RuntimeError(f"tripwire: import {full} from a template")
            return real_import(name, globals, locals, fromlist, level)

        self._saved.append((builtins, "__import__", real_import))
        builtins.__import__ = guarded_import

    def disarm(self) -> None:
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        self._saved.clear()


@dataclass(frozen=True)
class Outcome:
    """What rendering one template in a guarded child did."""

    kind: str  # ok | refused | crashed (render_value raised something else) | died | hung
    value: Any  # the value (ok), the message (refused), the exception (crashed)
    hint: str
    peak_growth: int  # bytes
    tripped: tuple[str, ...]  # escape tripwires that fired
    mutated: bool  # the context the template saw was changed

    def describe(self) -> str:
        return (
            f"{self.kind}: {str(self.value)[:200]} (peak RSS +{self.peak_growth / MiB:.1f} MiB, "
            f"tripwires {list(self.tripped)}, context mutated: {self.mutated})"
        )


def _render_in_child(text: str) -> tuple[str, Any, str, tuple[str, ...], bool]:
    ctx = context()
    before = copy.deepcopy(ctx)
    wires = Tripwires()
    wires.arm()
    try:
        value = render_value(text, ctx)
        outcome: tuple[str, Any, str] = ("ok", value, "")
    except RenderError as exc:
        outcome = ("refused", exc.message, exc.hint)
    except BaseException as exc:
        outcome = ("crashed", f"{type(exc).__name__}: {exc}"[:300], "")
    finally:
        wires.disarm()
    return (*outcome, tuple(wires.fired), ctx != before)


def render_guarded(text: str) -> Outcome:
    """Render ``text`` in a forked child (tests/childproc.py): outcome, peak memory, side effects."""
    result = run_in_child(_render_in_child, text)
    if result.kind != "returned":
        return Outcome(result.kind, result.value, "", result.peak_growth, (), False)
    kind, value, hint, tripped, mutated = result.value
    return Outcome(kind, value, hint, result.peak_growth, tripped, mutated)


Words = tuple[str | tuple[str, ...], ...]
# Any refusal says why in one of these words; which one depends on where it is caught (attribute
# access vs call), so tests accept either rather than pin the implementation.
REFUSED = ("unsafe", "not allowed")
# A refusal that only happened because memory ran out (render_value turns MemoryError into this
# message): the check that should have come first is missing.
OUT_OF_MEMORY = "more memory"


def assert_clean(text: str, out: Outcome) -> None:
    """No escape side effect, and no more memory than a refusal needs."""
    assert not out.tripped, f"{text!r}: escape tripwires fired: {out.describe()}"
    assert not out.mutated, f"{text!r} changed the facts it was given: {out.describe()}"
    assert out.peak_growth < PEAK_GROWTH_LIMIT, f"{text!r} used too much memory: {out.describe()}"
    if out.kind == "refused":
        assert OUT_OF_MEMORY not in out.value, f"{text!r} was refused only by running out of memory"


def assert_refused(text: str, words: Words) -> tuple[str, str]:
    """The template is refused with a RenderError whose message has every word (or one of each tuple),
    before allocating anything large and without side effects."""
    out = render_guarded(text)
    assert out.kind == "refused", f"{text!r} was not refused cleanly: {out.describe()}"
    assert_clean(text, out)
    low = out.value.lower()
    for word in words:
        options = (word,) if isinstance(word, str) else word
        assert any(o.lower() in low for o in options), (
            f"{text!r}: message {out.value!r} mentions none of {options}"
        )
    return out.value, out.hint


# ------------------------------------------------------------------ refusals

PYTHON_INTERNALS: list[tuple[str, str, Words]] = [
    ("class-of-dict", "{{ node.__class__ }}", ("__class__", REFUSED)),
    ("class-of-str", "{{ ''.__class__ }}", ("__class__", REFUSED)),
    ("class-by-subscript", "{{ node['__class__'] }}", ("__class__", REFUSED)),
    ("globals-of-function", "{{ range.__globals__ }}", ("__globals__", REFUSED)),
    ("globals-item", "{{ range.__globals__['os'] }}", ("__globals__", REFUSED)),
    ("subclasses-of-type", "{{ dict.__subclasses__() }}", ("__subclasses__", REFUSED)),
    ("classic-chain", "{{ ''.__class__.__mro__[1].__subclasses__() }}", ("__class__", REFUSED)),
    ("mro-of-type", "{{ dict.__mro__ }}", ("__mro__", REFUSED)),
    ("mro-method", "{{ dict.mro() }}", ("mro", REFUSED)),
    ("init-of-dict", "{{ node.__init__ }}", ("__init__", REFUSED)),
    ("init-of-function", "{{ range.__init__ }}", ("__init__", REFUSED)),
    ("builtins-of-function", "{{ range.__builtins__ }}", ("__builtins__", REFUSED)),
    ("builtins-name", "{{ __builtins__ }}", ("__builtins__", "undefined")),
    ("dunder-import", "{{ __import__('os') }}", ("__import__", "undefined")),
    # str.format resolves "{0.attr}" itself, outside Jinja's attribute checks.
    ("format-class", "{{ '{0.__class__}'.format(node) }}", (("__class__", "format"), REFUSED)),
    ("format-mro", "{{ '{0.__class__.__mro__}'.format('') }}", (("__class__", "format"), REFUSED)),
    ("format-globals", "{{ '{0.__init__.__globals__}'.format(node) }}", (("__init__", "format"), REFUSED)),
    (
        "format-map",
        "{{ '{x.__init__.__globals__}'.format_map({'x': range}) }}",
        (("__init__", "format"), REFUSED),
    ),
    ("format-in-text", "a-{{ '{0.__class__}'.format(node) }}", (("__class__", "format"), REFUSED)),
    (
        "self-object",
        "{{ self }}",
        (("TemplateReference", "self"), ("not a plain value", "undefined", *REFUSED)),
    ),
    # 'self' itself is refused before its attributes are looked at
    ("self-class", "{{ self.__class__ }}", (("__class__", "'self'"), REFUSED)),
    ("self-context", "{{ self._TemplateReference__context }}", (("_TemplateReference__context", "'self'"), REFUSED)),
    ("lipsum", "{{ lipsum() }}", ("lipsum", "undefined")),
    ("lipsum-globals", "{{ lipsum.__globals__ }}", ("lipsum", "undefined")),
    ("cycler", "{{ cycler(1, 2).next() }}", ("cycler", "undefined")),
    ("joiner", "{{ joiner()() }}", ("joiner", "undefined")),
    ("namespace", "{{ namespace(a=1) }}", ("namespace", "undefined")),
]

STATEMENTS = [
    ("import", "{% import 'os' as os %}{{ os }}"),
    ("from-import", "{% from 'os' import path %}{{ path }}"),
    ("include-file", "{% include '/etc/passwd' %}"),
    ("extends-file", "{% extends '/etc/passwd' %}"),
    ("set", "{% set x = node.cpus %}{{ x }}"),
    ("for-loop", "{% for i in range(3) %}{{ i }}{% endfor %}"),
    ("macro", "{% macro m() %}x{% endmacro %}{{ m() }}"),
    ("raw-inside-expression", "{{ {% raw %} }}"),
    ("comment", "{{ node.cpus }}{# hidden #}"),
]

GROWTH = ("grows", "more than", "exceeds", "too large", "larger than")
RESOURCES: list[tuple[str, str, Words]] = [
    ("range-1e6", "{{ range(10**6) }}", ("range", "10000")),
    ("range-1e9-list", "{{ range(10**9)|list }}", ("range", "10000")),
    ("range-1e9-length", "{{ range(10**9)|length }}", ("range", "10000")),
    ("range-stepped", "{{ range(0, 10**12, 3)|list }}", ("range", "10000")),
    ("power-10-1e5", "{{ 10 ** 100000 }}", ("too large",)),
    ("power-tower", "{{ 2 ** (2 ** 30) }}", ("too large",)),
    ("power-of-fact", "{{ node.cpus ** (10 ** 6) }}", ("too large",)),
    ("power-then-power", "{{ (2 ** 4096) ** 4096 }}", ("too large",)),
    ("str-repeat", "{{ 'a' * 10**9 }}", ("str", GROWTH)),
    ("str-repeat-reversed", "{{ 10**9 * 'a' }}", ("str", GROWTH)),
    ("list-repeat", "{{ [0] * 10**9 }}", ("list", GROWTH)),
    ("str-repeat-in-text", "x-{{ 'a' * 10**9 }}", (GROWTH,)),
    ("concat-growth", "{{ 'a' * 60000 + 'a' * 60000 }}", (GROWTH,)),
    ("list-concat-growth", "{{ [0] * 60000 + [0] * 60000 }}", (GROWTH,)),
    # Padding filters: refused either by a width limit or by not being offered at all.
    ("center-width", "{{ 'a'|center(10**9) }}", ("center",)),
    ("center-width-kw", "{{ 'a'|center(width=10**9) }}", ("center",)),
    ("indent-width", "{{ 'a'|indent(10**9) }}", ("indent",)),
    ("wordwrap-width", "{{ 'a b'|wordwrap(10**9) }}", ("wordwrap",)),
    ("truncate-width", "{{ 'a'|truncate(10**9) }}", ("truncate",)),
]

MUTATIONS: list[tuple[str, str, Words]] = [
    ("labels-update", "{{ node.labels.update({'a': 'x'}) }}", ("update", REFUSED)),
    ("labels-pop", "{{ node.labels.pop('a') }}", ("pop", REFUSED)),
    ("labels-popitem", "{{ node.labels.popitem() }}", ("popitem", REFUSED)),
    ("labels-clear", "{{ node.labels.clear() }}", ("clear", REFUSED)),
    ("labels-setdefault", "{{ node.labels.setdefault('x', 'y') }}", ("setdefault", REFUSED)),
    ("labels-setitem", "{{ node.labels.__setitem__('a', 'x') }}", ("__setitem__", REFUSED)),
    ("capacity-update", "{{ node.capacity.update({'cpu': 1}) }}", ("update", REFUSED)),
    ("node-update", "{{ node.update({'cpus': 1}) }}", ("update", REFUSED)),
    ("list-append", "{{ [1].append(2) }}", ("append", REFUSED)),
]


@needs_fork
@pytest.mark.parametrize(("text", "words"), [pytest.param(t, w, id=i) for i, t, w in PYTHON_INTERNALS])
def test_python_internals_are_refused(text: str, words: Words) -> None:
    assert_refused(text, words)


@needs_fork
@pytest.mark.parametrize("text", [pytest.param(t, id=i) for i, t in STATEMENTS])
def test_statements_are_refused_outright(text: str) -> None:
    _message, hint = assert_refused(text, ("statements", "not allowed"))
    assert "{{" in hint, "the hint should show the expression syntax to use instead"


@needs_fork
@pytest.mark.parametrize(("text", "words"), [pytest.param(t, w, id=i) for i, t, w in RESOURCES])
def test_resource_blowups_are_refused_before_allocating(text: str, words: Words) -> None:
    _message, hint = assert_refused(text, words)
    assert hint, "a refusal should say what templates may do instead"


@needs_fork
@pytest.mark.parametrize(("text", "words"), [pytest.param(t, w, id=i) for i, t, w in MUTATIONS])
def test_mutating_context_objects_is_refused(text: str, words: Words) -> None:
    assert_refused(text, words)


@pytest.mark.parametrize("text", [t for _i, t, _w in MUTATIONS])
def test_refused_mutations_leave_the_context_unchanged(text: str) -> None:
    ctx = context()
    before = copy.deepcopy(ctx)
    with pytest.raises(RenderError):
        render_value(text, ctx)
    assert ctx == before


def _items(template: str, n: int) -> str:
    """``[t, t, ..., t]``: n separately built copies (each one is within every per-value limit)."""
    return "[" + ", ".join([template] * n) + "]"


REPEAT = ("repeating",)
NOT_CALLABLE = ("not allowed",)
NO_FILTER = ("no filter named",)
# Amplifiers: a bounded value repeated, joined, padded, formatted or indented into gigabytes. Every
# row names the check that must refuse it. Most would build 300 MB - 2.5 GB without their check; the
# runner fails a row that is refused only after a MemoryError, or whose peak resident set grew by
# PEAK_GROWTH_LIMIT or more, so removing a check fails its rows.
UNBOUNDED: list[tuple[str, str, Words]] = [
    ("str-format-spec-width", "{{ '{:>1000000000}'.format(1) }}", ("format", *NOT_CALLABLE)),
    ("str-format-nested-width", "{{ '{0:{1}}'.format(1, 10**9) }}", ("format", *NOT_CALLABLE)),
    ("format-filter-spec-width", "{{ '%1000000000d'|format(1) }}", NO_FILTER),
    *[
        (f"str-{m}", f"{{{{ 'a'.{m}(10**9) }}}}", (m, *NOT_CALLABLE))
        for m in ("ljust", "rjust", "center", "zfill")
    ],
    ("str-expandtabs", "{{ 'a\tb'.expandtabs(10**9) }}", ("expandtabs", *NOT_CALLABLE)),
    # printf-style formatting: a 16-character template, a 1 GB string.
    ("printf-width", "{{ '%0999999999d' % 1 }}", ("printf",)),
    ("printf-width-in-text", "x-{{ '%0999999999d' % 1 }}", ("printf",)),
    ("printf-star-width", "{{ '%*d' % (999999999, 1) }}", ("printf",)),
    ("printf-precision", "{{ '%.999999999f' % 1.5 }}", ("printf",)),
    # tojson: the output grows with indent x depth, not with the value (issue 14: 826 MB at 6 levels).
    ("tojson-indent-6-levels", "{{ [[[[[[1]]]]]] | tojson(indent=10000000) | length }}", ("tojson",)),
    (
        "tojson-indent-10-levels",
        "{{ [[[[[[[[[[1]]]]]]]]]] | tojson(indent=10000000) | length }}",
        ("tojson",),
    ),
    (
        "tojson-indent-through-map",
        "{{ [[[[[1]]]]]|map('tojson', indent=10000000)|list|length }}",
        ("tojson",),
    ),
    (
        "tojson-indent-map-first",
        "{{ [[[[[[1]]]]]]|map('tojson', indent=100000000)|first|length }}",
        ("tojson",),
    ),
    ("tojson-string-indent", "{{ [[[[[[1]]]]]]|tojson(indent=' ' * 49999)|length }}", ("tojson",)),
    ("tojson-indent-in-text", "x-{{ [[[[[[1]]]]]]|tojson(indent=10000000) }}", ("tojson",)),
    ("tojson-indent-of-facts", "{{ node|tojson(indent=10000000)|length }}", ("tojson",)),
    # round(x, -n) computes 10**n: minutes of CPU and ~400 MB for n = 10**9.
    ("round-precision", "{{ 5|round(-1000000000) }}", ("round",)),
    ("round-floor-precision", "{{ 1.5|round(1000000000, 'floor') }}", ("round",)),
    ("round-through-map", "{{ [5]|map('round', -1000000000)|list }}", ("round",)),
    ("join-filter-amplification", "{{ (['a' * 100000] * 100000)|join }}", REPEAT),
    ("join-filter-amplification-smaller", "{{ (['a' * 50000] * 50000)|join }}", REPEAT),
    ("str-join-amplification", "{{ 'x'.join(['a' * 100000] * 100000) }}", REPEAT),
    ("string-filter-amplification", "{{ (['a' * 100000] * 100000)|string }}", REPEAT),
    # An integer is as long as its digits once it becomes text (404 MB and 25 s unchecked).
    ("string-of-big-ints", "{{ ([('9' * 4000)|int] * 49999)|string|length }}", REPEAT),
    ("big-ints-in-text", "x-{{ [('9' * 4000)|int] * 49999 }}", REPEAT),
    ("nested-list-repeat-native", "{{ [[0] * 100000] * 100000 }}", REPEAT),
    ("nested-list-repeat-text", "pool-{{ [[0] * 100000] * 100000 }}", REPEAT),
    ("triple-nested-repeat", "{{ [[[0] * 1000] * 1000] * 1000 }}", REPEAT),
    ("batch-fill", "{{ [1]|batch(10**9, 0)|list }}", NO_FILTER),
    ("slice-count", "{{ [1]|slice(10**8)|list }}", NO_FILTER),
    ("sum-of-lists", "{{ ([[0] * 100000] * 100000)|sum(start=[]) }}", REPEAT),
    ("replace-amplification", "{{ ('a' * 100000)|replace('a', 'a' * 100000) }}", REPEAT),
    ("replace-amplification-smaller", "{{ ('a' * 50000)|replace('a', 'a' * 50000) }}", ("replace",)),
    ("replace-through-map", "{{ ['a' * 50000]|map('replace', 'a', 'a' * 50000)|list }}", ("replace",)),
    ("str-replace-amplification", "{{ ('a' * 50000).replace('a', 'a' * 50000) }}", ("replace",)),
    ("join-separator-amplification", "{{ range(10000)|map('string')|join('x' * 50000) }}", ("join",)),
    ("join-separator-range", "{{ range(10000)|join('x' * 40000) }}", ("join",)),
    ("join-separator-string", "{{ ('x' * 40000)|join('x' * 40000) }}", ("join",)),
    ("join-separator-in-text", "x-{{ range(10000)|join('x' * 40000) }}", ("join",)),
    ("int-product-growth", "{{ 10**1000 * 10**1000 * 10**1000 * 10**1000 * 10**1000 }}", ("too large",)),
    ("int-from-text-product", "{{ ('9' * 4000)|int * ('9' * 4000)|int }}", ("too large",)),
    # Many operations in one template, each within its own limit: the document's budget stops them
    # (~120 MB of split strings unchecked), as it stops ~ chains and long texts.
    ("many-splits", "{{ " + _items("('ab '*25000).split()", 75) + "|length }}", ("in all",)),
    ("many-strings", "{{ " + _items("'x' * 49999", 150) + "|length }}", ("in all",)),
    ("tilde-chain", "{{ (" + " ~ ".join(["('x' * 49999)"] * 3) + ")|length }}", ("~",)),
    ("text-pieces", "x" + "{{ 'x' * 49999 }}" * 100, ("renders to more than",)),
    ("template-too-long", "{{ " + "1 + " * 1000 + "1 }}", ("characters long",)),
]


@needs_fork
@pytest.mark.parametrize(("text", "words"), [pytest.param(t, w, id=i) for i, t, w in UNBOUNDED])
def test_amplification_is_refused_before_allocating(text: str, words: Words) -> None:
    assert_refused(text, words)


def _render_many(text: str, copies: int) -> tuple[list[str], int]:
    """In the child: a document holding ``copies`` values, each the same template; the problems
    render_document reports, and how many values rendered."""
    yaml_text = POLICY_HEAD + "  x:\n" + "".join(f"    - {json.dumps(text)}\n" for _ in range(copies))
    (doc,) = parse_documents(yaml_text, "many.yaml")
    data, problems = render_document(doc, context())
    return [p.format() for p in problems], sum(v is not None for v in data["spec"]["x"])


@needs_fork
def test_a_document_of_many_templates_is_bounded_as_a_whole() -> None:
    """Each value is a 25,000-item list, under every per-value limit; 200 of them are 300 MB. The
    document's budget refuses the one that overruns it, once, and leaves the rest unrendered."""
    out = run_in_child(_render_many, "{{ ('ab ' * 25000).split() }}", 200)
    assert out.kind == "returned", out.describe()
    assert out.peak_growth < PEAK_GROWTH_LIMIT, out.describe()
    problems, rendered = out.value
    assert len(problems) == 1, problems
    assert "in all" in problems[0] and problems[0].startswith("many.yaml:")
    assert 0 < rendered < 200
    line = int(problems[0].split(":")[1])
    assert line == 5 + rendered + 1, "the problem names the value that overran the budget"


def _allocate(megabytes: int) -> int:
    block = bytearray(megabytes * MiB)
    for i in range(0, len(block), 4096):
        block[i] = 1
    return len(block)


@needs_fork
def test_the_runner_sees_a_real_allocation() -> None:
    """The peak-memory check can fail: 150 MB allocated in the child is reported as such."""
    out = run_in_child(_allocate, 150)
    assert out.kind == "returned", out.describe()
    assert out.peak_growth >= PEAK_GROWTH_LIMIT


# A small grammar of expressions over node facts, filters, methods and operators. Literals that
# constant-fold to inf (1e999, 'inf'|float) are left out: test_non_finite_numbers_are_render_errors
# covers them.
ATOMS = st.sampled_from(
    [
        "0", "1", "2", "16", "-1", "0.5", "10", "4096", "100000", "1000000000",
        "'a'", "'ab'", "''", "'9'", "'-'", "'{0}'", "'%s'", "'a b'",
        "node", "node.cpus", "node.name", "node.labels", "node.labels['a']", "node.memory", "node.capacity",
        "node.numa_count", "nope", "self", "range", "dict", "none", "true", "[]", "{}", "[1, 2]", "{'a': 1}",
        "range(3)", "range(10000)", "dict(a=1)", "lipsum", "loop",
    ]
)  # fmt: skip
BINOPS = ["+", "-", "*", "/", "//", "%", "**", "~", "and", "or", "==", "<", "in"]
FILTERS = [
    "length", "list", "join", "join(',')", "sort", "unique", "max", "min", "sum", "first", "last", "string",
    "int", "float", "upper", "lower", "replace('a', 'bb')", "reverse", "tojson", "default(1)", "abs", "round",
    "dictsort", "items", "count", "trim", "title", "center(10)", "format(1)", "batch(2)", "map('string')",
]  # fmt: skip
METHODS = [
    ".upper()", ".split()", ".split('a')", ".replace('a', 'bb')", ".items()", ".keys()", ".get('a')",
    ".startswith('a')", ".ljust(5)", ".format(1)", ".__class__", ".count('a')", ".index(1)", ".pop()",
]  # fmt: skip

expressions = st.recursive(
    ATOMS,
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(BINOPS), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(inner, st.sampled_from(FILTERS)).map(lambda t: f"({t[0]})|{t[1]}"),
        st.tuples(inner, st.sampled_from(METHODS)).map(lambda t: f"({t[0]}){t[1]}"),
        st.lists(inner, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.tuples(inner, inner).map(lambda t: f"({t[0]})[{t[1]}]"),
        inner.map(lambda x: f"(not {x})"),
        inner.map(lambda x: f"(-{x})"),
        st.tuples(inner, inner, inner).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})"),
    ),
    max_leaves=8,
)
templates = st.one_of(
    expressions.map(lambda e: "{{ " + e + " }}"),
    expressions.map(lambda e: "x-{{ " + e + " }}"),
    st.tuples(expressions, expressions).map(lambda t: "{{ " + t[0] + " }}/{{ " + t[1] + " }}"),
)


@needs_fork
@settings(max_examples=150, deadline=None)
@given(text=templates)
@example(text="{{ (not (not (self)|list)) }}")
@example(text="{{ ([])|first }}")  # found by the property test in session 8
@example(text="{{ ([])|last }}")
@example(text="{{ (not ([])|max) }}")  # Jinja's own error for max of nothing  # iterating Jinja's TemplateReference raised KeyError
def test_any_expression_renders_or_is_refused(text: str) -> None:
    """Whatever the expression, render_value returns a JSON value or raises RenderError: no other
    exception, no hang, no allocation beyond a refusal's needs, no escape side effect. A refusal
    must be one the sandbox or the expression itself explains (see ``unexplained_refusal``)."""
    out = render_guarded(text)
    assert out.kind in ("ok", "refused"), f"{text!r}: {out.describe()}"
    assert_clean(text, out)
    if out.kind == "ok":
        json.dumps(out.value)
    else:
        reason = unexplained_refusal(out.value)
        assert reason is None, f"{text!r} was refused with {out.value!r}: {reason}"


# What the sandbox refuses to touch: private and dunder names, Python internals of functions and
# generators, methods that mutate, and str.format (it resolves attributes outside the sandbox).
UNSAFE_NAMES = frozenset(
    {"mro", "format", "format_map"}
    | jinja2.sandbox.UNSAFE_FUNCTION_ATTRIBUTES
    | jinja2.sandbox.UNSAFE_METHOD_ATTRIBUTES
    | jinja2.sandbox.UNSAFE_GENERATOR_ATTRIBUTES
    | jinja2.sandbox.UNSAFE_COROUTINE_ATTRIBUTES
    | jinja2.sandbox.UNSAFE_ASYNC_GENERATOR_ATTRIBUTES
    | {name for _kind, names in jinja2.sandbox._mutable_spec for name in names}
)
BUILTIN_TYPES = {t.__name__: t for t in (int, float, bool, str, list, dict, tuple, range)} | {"None": type(None)}
LIMITS = re.compile(
    r"more than|too large|exceeds|grows beyond|larger than|must be between|only adds numbers|printf-style|"
    r"cannot be rendered into a rule value|indent must be"
)
# Errors an expression causes by itself (1/0, 'a' + 1, [1].index(5)), not by touching anything.
EXPRESSION_ERRORS = (
    "TypeError",
    "ZeroDivisionError",
    "ValueError",
    "OverflowError",
    "AttributeError",
    "IndexError",
)


def unexplained_refusal(message: str) -> str | None:
    """None when ``message`` is a refusal with a known, correct reason; otherwise what is wrong.

    A refusal for the right reason names: an undefined name that is not in the context; an
    attribute the object really lacks; an unsafe attribute or a call outside the allow-list; a size
    limit; a plain Python error of the expression; a filter qosd does not offer. Anything else
    (an unexpected exception, an out-of-memory, an unknown shape) is a finding, not a refusal.
    """
    if m := re.fullmatch(r"template error: '([^']*)' is undefined", message):
        return f"{m[1]!r} is in the context" if m[1] in context() else None
    if m := re.fullmatch(r"template error: '([^']*)' has no attribute '([^']*)'", message):
        kind = BUILTIN_TYPES.get(m[1].removesuffix(" object"))
        return f"{m[1]} does have {m[2]!r}" if kind is not None and hasattr(kind, m[2]) else None
    if re.fullmatch(r"template error: (.+) has no element .*", message, re.S):
        return None
    if m := re.fullmatch(
        r"template refused by the sandbox: access to attribute '([^']*)' of '\w+' object is unsafe\.", message
    ):
        name = m[1]
        return (
            None if name.startswith("_") or name in UNSAFE_NAMES else f"{name!r} is not an unsafe attribute"
        )
    if re.fullmatch(
        r"template refused by the sandbox: calling '[^']*' is not allowed in rule templates", message
    ):
        return None
    if message.startswith("template refused by the sandbox: "):
        return None if LIMITS.search(message) else "a sandbox refusal that names no rule"
    if m := re.match(r"template failed: (\w+): ", message):
        return None if m[1] in EXPRESSION_ERRORS else f"{m[1]} is not an error of the expression"
    if re.match(r"template (syntax error|error): No filter named '\w+'", message):
        return None
    if message.startswith(
        (
            "template produced ",
            "template converts a number",
            "template error: argument must be",
            "template refers to 'self'",
        )
    ):
        return None
    # Jinja's own error for a filter that needs an item of an empty sequence (max, min, first, last,
    # random): "No aggregated item, sequence was empty." / "No first item, sequence was empty."
    if re.fullmatch(r"template error: No \w+ item, sequence was empty\.", message):
        return None
    return "not a known refusal"


@pytest.mark.parametrize(
    "text",
    [
        "{{ [1][5] or 2 }}",
        "{{ 0 if (0)[0] else 1 }}",
        "{{ 'a' if 'x'.nope else 'b' }}",
        "{{ (1).nope and 1 }}",
        "x-{{ 0 if (0)[0] else 1 }}",
        "{{ 4 if (1).__class__ else 2 }}",
    ],
)
def test_errors_while_constant_folding_are_render_errors(text: str) -> None:
    try:
        render_value(text, context())
    except RenderError:
        return
    pytest.fail(f"{text!r} rendered")


# ------------------------------------------------------------------ undefined names


@pytest.mark.parametrize(
    ("text", "missing"),
    [
        pytest.param("{{ node.nope }}", "nope", id="missing-fact"),
        pytest.param("{{ nope }}", "nope", id="missing-name"),
        pytest.param("{{ node.labels.nope }}", "nope", id="missing-label-attr"),
        pytest.param("{{ node.labels['no-such-label'] }}", "no-such-label", id="missing-label-item"),
        pytest.param("pool-{{ nope }}", "nope", id="missing-name-in-text"),
        pytest.param("{{ [4, node.nope] | max }}", "nope", id="missing-inside-filter"),
        pytest.param("{{ node.nope + 1 }}", "nope", id="missing-in-arithmetic"),
    ],
)
def test_undefined_names_are_errors_that_list_available_facts(text: str, missing: str) -> None:
    with pytest.raises(RenderError) as info:
        render_value(text, context())
    err = info.value
    assert missing in err.message
    assert "undefined" in err.message or "no attribute" in err.message
    assert err.hint.startswith("available facts:")
    for fact in FACTS:
        assert fact in err.hint


def test_undefined_hint_without_facts() -> None:
    with pytest.raises(RenderError) as info:
        render_value("{{ node_x }}", {})
    assert "node_x" in info.value.message
    assert "no facts" in info.value.hint


# ------------------------------------------------------------------ values that must render


@pytest.mark.parametrize(
    ("text", "expected", "kind"),
    [
        pytest.param("{{ [4, node.numa_count] | max }}", 4, int, id="max-int"),
        pytest.param("{{ [1, node.numa_count] | max }}", 2, int, id="max-fact"),
        pytest.param("{{ node.cpus * 0.5 }}", 8.0, float, id="float"),
        pytest.param("{{ node.labels['a'] == 'b' }}", True, bool, id="bool-true"),
        pytest.param("{{ node.labels['a'] == 'c' }}", False, bool, id="bool-false"),
        pytest.param("{{ [1,2] }}", [1, 2], list, id="list"),
        pytest.param("{{ (1, 2) }}", [1, 2], list, id="tuple-becomes-list"),
        pytest.param("{{ {'a': node.sockets} }}", {"a": 2}, dict, id="dict"),
        pytest.param("{{ node.cpus }}", 16, int, id="int-fact"),
        pytest.param("{{ node.memory // 2**30 }}", 64, int, id="int-division"),
        pytest.param("{{ node.name }}", "node-a", str, id="str-fact"),
        pytest.param("  {{ 3 }}  ", 3, int, id="whitespace-around-expression"),
        pytest.param("{{ none }}", None, type(None), id="none"),
        pytest.param("{{ node.labels.get('a') }}", "b", str, id="dict-get-is-allowed"),
        pytest.param("{{ node.labels.get('zz', 'dflt') }}", "dflt", str, id="dict-get-default"),
        pytest.param("{{ nope | default(7) }}", 7, int, id="default-filter"),
        pytest.param("{{ range(3) | list }}", [0, 1, 2], list, id="small-range"),
        pytest.param("{{ range(10000) | list | length }}", 10000, int, id="range-at-limit"),
        pytest.param("{{ 2 ** 10 }}", 1024, int, id="small-power"),
        # Jinja's ** is left-associative: (2 ** 2) ** 30, which is small and allowed.
        pytest.param("{{ 2 ** 2 ** 30 }}", 4**30, int, id="power-left-associative"),
        pytest.param("{{ 'ab' * 3 }}", "ababab", str, id="small-repeat"),
        pytest.param("{{ node.name ~ '-' ~ node.cpus }}", "node-a-16", str, id="tilde-concat"),
        pytest.param("{{ [1, 2]|join(',') }}", "1,2", str, id="join"),
        pytest.param("{{ node.name|upper }}", "NODE-A", str, id="upper"),
        pytest.param("{{ (node.memory / 2**30)|round|int }}", 64, int, id="round-int"),
        pytest.param("{{ [3, 1, 2]|sort }}", [1, 2, 3], list, id="sort"),
        pytest.param("{{ [3, 1, 2]|sum }}", 6, int, id="sum"),
        pytest.param("{{ node.labels|length }}", 2, int, id="length"),
        pytest.param("{{ 'a,b'.split(',') }}", ["a", "b"], list, id="str-split"),
        pytest.param("{{ node.name.startswith('node') }}", True, bool, id="str-startswith"),
        pytest.param("{{ 'a-b'|replace('-', '_') }}", "a_b", str, id="replace-filter"),
        pytest.param("{{ dict(a=node.cpus) }}", {"a": 16}, dict, id="dict-global"),
    ],
)
def test_native_values(text: str, expected: Any, kind: type) -> None:
    value = render_value(text, context())
    assert value == expected
    assert type(value) is kind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("pool-{{ node.name }}", "pool-node-a", id="prefix"),
        pytest.param("{{ node.cpus }}-{{ node.sockets }}", "16-2", id="two-expressions"),
        pytest.param("{{ 1 }}{{ 2 }}", "12", id="adjacent-expressions"),
        pytest.param("numa{{ node.numa_count }}", "numa2", id="number-in-text"),
        pytest.param("plain text", "plain text", id="no-template"),
    ],
)
def test_mixed_text_renders_to_string(text: str, expected: str) -> None:
    assert render_value(text, context()) == expected


CONTEXT_FILTERS = ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("{{ [1, 2]|map('string')|list }}", ["1", "2"], id="map-filter", marks=CONTEXT_FILTERS),
        pytest.param("{{ [1, 2, 3]|select('odd')|list }}", [1, 3], id="select-filter", marks=CONTEXT_FILTERS),
        pytest.param("{{ [1, 2, 3]|reject('odd')|list }}", [2], id="reject-filter", marks=CONTEXT_FILTERS),
        pytest.param(
            "{{ [{'a': 1}, {'a': 2}]|map(attribute='a')|max }}", 2, id="map-attribute", marks=CONTEXT_FILTERS
        ),
        pytest.param(
            "{{ [{'a': 1}, {'a': 2}]|selectattr('a', 'gt', 1)|list }}",
            [{"a": 2}],
            id="selectattr",
            marks=CONTEXT_FILTERS,
        ),
        pytest.param("{{ [3, 1]|sort|first }}", 1, id="sort-first"),
        pytest.param("{{ ['b', 'a', 'b']|unique|list }}", ["b", "a"], id="unique"),
        pytest.param("{{ node.labels|dictsort|first }}", ["a", "b"], id="dictsort"),
        pytest.param(
            "x-{{ self }}",
            None,
            id="self-in-text",
        ),
    ],
)
def test_filters_and_names(text: str, expected: Any) -> None:
    """``expected`` None: the template must be refused, like every name that is not a node fact."""
    if expected is None:
        with pytest.raises(RenderError):
            render_value(text, context())
    else:
        assert render_value(text, context()) == expected


NON_FINITE_CONSTANT = ()


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("{{ 1e999 }}", id="literal-inf", marks=NON_FINITE_CONSTANT),
        pytest.param("{{ -1e999 }}", id="literal-minus-inf", marks=NON_FINITE_CONSTANT),
        pytest.param("{{ [1e999] }}", id="inf-in-list", marks=NON_FINITE_CONSTANT),
        pytest.param("{{ node.cpus * 1e999 }}", id="inf-times-fact", marks=NON_FINITE_CONSTANT),
        # 'inf'|float and 'nan'|float give float's default: test_float_and_int_treat_non_finite_...
        pytest.param(
            "{{ ('1e308'|float) * 10 }}",
            id="overflow-to-inf",
        ),
        pytest.param("{{ 10.0 ** 400 }}", id="float-power-overflow"),
    ],
)
def test_non_finite_numbers_are_render_errors(text: str) -> None:
    """render_value raises RenderError and nothing else; a rule value is never inf or nan."""
    try:
        value = render_value(text, context())
    except RenderError as exc:
        assert exc.message
        return
    pytest.fail(f"{text!r} rendered to {value!r}")


def test_render_error_carries_message_and_hint() -> None:
    with pytest.raises(RenderError) as info:
        render_value("{{ node.__class__ }}", context())
    err = info.value
    assert str(err) == err.message
    assert err.message and err.hint


@pytest.mark.parametrize(
    ("text", "words"),
    [
        pytest.param("{{ 1/0 }}", ("ZeroDivisionError",), id="zero-division"),
        pytest.param("{{ node.cpus + 'x' }}", ("TypeError",), id="type-error"),
        pytest.param("{{ x.y }", ("syntax error",), id="syntax-error"),
        pytest.param("{{ }}", ("syntax error",), id="empty-expression"),
        pytest.param("{{ range }}", ("function", "not a plain value"), id="callable-result"),
    ],
)
def test_runtime_errors_become_render_errors(text: str, words: tuple[str, ...]) -> None:
    with pytest.raises(RenderError) as info:
        render_value(text, context())
    for word in words:
        assert word in info.value.message


# ------------------------------------------------------------------ render_document locations

POLICY_HEAD = "apiVersion: qosd.io/v1alpha1\nkind: QoSPolicy\nmetadata: {name: t}\nspec:\n"

LOCATED = [
    pytest.param(
        POLICY_HEAD
        + '  pools:\n    - name: reclaim\n      size: {remainder: true, min: "{{ node.nope }}"}\n',
        '"{{ node.nope }}"',
        "$.spec.pools[0].size.min",
        "nope",
        id="flow-mapping",
    ),
    pytest.param(
        POLICY_HEAD + "  pools:\n    - name: a\n      size:\n        min: '{{ 1/0 }}'\n",
        "'{{ 1/0 }}'",
        "$.spec.pools[0].size.min",
        "ZeroDivisionError",
        id="block-mapping",
    ),
    pytest.param(
        POLICY_HEAD + "  rules:\n    - name: r\n      then:\n        - notify: {message: ok}\n"
        '        - evict: {maxPerRound: "{{ 10 ** 100000 }}"}\n',
        '"{{ 10 ** 100000 }}"',
        "$.spec.rules[0].then[1].evict.maxPerRound",
        "too large",
        id="list-item",
    ),
    pytest.param(
        POLICY_HEAD
        + "  classes:\n    - name: x\n      match: [{labels: {a: \"{% include '/etc/passwd' %}\"}}]\n",
        "\"{% include '/etc/passwd' %}\"",
        "$.spec.classes[0].match[0].labels.a",
        "statements",
        id="statement-in-flow-list",
    ),
    pytest.param(
        POLICY_HEAD + "  reclaim:\n    cpu:\n      publishAs: >-\n        x-{{ node.__class__ }}\n",
        ">-",
        "$.spec.reclaim.cpu.publishAs",
        "__class__",
        id="folded-block-scalar",
    ),
]


def _position_of(text: str, needle: str) -> tuple[int, int]:
    for lineno, line in enumerate(text.splitlines(), start=1):
        col = line.find(needle)
        if col >= 0:
            return lineno, col + 1
    raise AssertionError(f"{needle!r} not in the test YAML")


@pytest.mark.parametrize(("yaml_text", "needle", "json_path", "word"), LOCATED)
def test_render_document_locates_failing_template(
    yaml_text: str, needle: str, json_path: str, word: str
) -> None:
    (doc,) = parse_documents(yaml_text, "x.yaml")
    data, problems = render_document(doc, context())
    assert len(problems) == 1
    (problem,) = problems
    assert isinstance(problem, Problem)
    assert (problem.location.source, problem.location.line, problem.location.column) == (
        "x.yaml",
        *_position_of(yaml_text, needle),
    )
    assert problem.location.path == json_path
    assert word in problem.message
    assert data["metadata"] == {"name": "t"}


def test_render_document_reports_every_failure_and_renders_the_rest() -> None:
    text = (
        POLICY_HEAD
        + "  pools:\n"
        + '    - {name: a, size: {remainder: true, min: "{{ [4, node.numa_count] | max }}"}}\n'
        + '    - {name: b, size: {fromRequests: 1.0, min: "{{ nope }}"}}\n'
        + '    - {name: c, cpus: {list: "0-{{ node.cpus - 1 }}"}}\n'
        + '    - {name: d, size: {fromRequests: 1.0, max: "{{ node.__class__ }}"}}\n'
    )
    (doc,) = parse_documents(text, "x.yaml")
    original = copy.deepcopy(doc.data)
    data, problems = render_document(doc, context())
    assert doc.data == original, "render_document must not modify the parsed document"
    pools = data["spec"]["pools"]
    assert pools[0]["size"]["min"] == 4
    assert pools[2]["cpus"]["list"] == "0-15"
    assert pools[1]["size"]["min"] is None
    assert pools[3]["size"]["max"] is None
    where = sorted((p.location.line, p.location.path) for p in problems)
    assert where == [(7, "$.spec.pools[1].size.min"), (9, "$.spec.pools[3].size.max")]
    by_path = {p.location.path: p for p in problems}
    assert "nope" in by_path["$.spec.pools[1].size.min"].message
    assert "{{ nope }}" in by_path["$.spec.pools[1].size.min"].message
    assert by_path["$.spec.pools[1].size.min"].hint.startswith("available facts:")
    assert "__class__" in by_path["$.spec.pools[3].size.max"].message


def test_render_document_without_templates_is_identity() -> None:
    (doc,) = parse_documents(
        POLICY_HEAD + "  mode: audit\n  pools: [{name: a, cpus: {count: 2}}]\n", "x.yaml"
    )
    data, problems = render_document(doc, context())
    assert problems == []
    assert data == doc.data


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{{ '1e9999999'|float(-1) }}", -1),  # a node label that overflows: the default
        ("{{ 'inf'|float }}", 0.0),
        ("{{ '-inf'|float(3) }}", 3),
        ("{{ 'nan'|float(2) }}", 2),
        ("{{ (1e308 * 10)|int(7) }}", 7),  # arithmetic overflow to infinity
        ("{{ '1e999'|int(5) }}", 5),
        ("{{ 'nan'|int(4) }}", 4),
        ("{{ '2.5'|float }}", 2.5),  # finite values convert as in Jinja
        ("{{ '42'|int }}", 42),
        ("{{ 3.9|int }}", 3),
        ("{{ 'abc'|int(9) }}", 9),
    ],
)
def test_float_and_int_treat_non_finite_numbers_as_unconvertible(text: str, expected: float) -> None:
    """A template that converts a node label with ``float``/``int`` gets the default for a value that is
    not a finite number, as for any other non-number, instead of an infinity that fails later
    (``OverflowError`` in ``int``), which made the built-in policy fail for that node."""
    assert render_value(text, context()) == expected

