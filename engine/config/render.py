"""Render Jinja2 values in rule documents against node facts, in a sandbox.

Templates let one document serve nodes of different shapes ("min: {{ [4, node.numa_count] | max }}").
They come from git repos and custom resources that many people can edit, so they run in an immutable
sandbox with StrictUndefined: no Python internals, no imports, no files, no statements. Memory is
bounded three ways, each checked *before* the value is built (a refusal after building 800 MB is no
refusal on a node daemon): every operation's result (MAX_WEIGHT, with the output predicted where it
depends on an argument, as tojson's indent or round's precision), the template's length, and all
that one document's templates build together (MAX_DOCUMENT_WEIGHT). A value that is exactly one
``{{ expression }}`` renders to a native value (a number stays a number); anything else renders to a
string.

Rendering happens once per policy generation and node, never per tick (cgroup knob expressions,
evaluated per tick, go through ``bounded_expression`` under the same limits).
"""

from __future__ import annotations

import inspect
import math
import operator
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sized
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from typing import Any

from jinja2 import StrictUndefined, TemplateError, TemplateSyntaxError, Undefined, UndefinedError
from jinja2 import nodes as jinja_nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from engine.config.errors import Problem, short
from engine.config.finite import finite_float, finite_int
from engine.config.load import Document, JsonPath

MAX_RANGE = 10_000
MAX_WEIGHT = 100_000  # items + characters of any one value a template builds
MAX_DOCUMENT_WEIGHT = 1_000_000  # of everything the templates of one document build, in all
MAX_POWER_BITS = 4_096
MAX_TEMPLATE_CHARS = 2_000  # rule templates are one-liners; this bounds how many operations one runs
MAX_ROUND_DIGITS = 32

_EXPR_ONLY = re.compile(r"^\s*\{\{(?P<expr>(?:(?!\{\{|\}\}).)*)\}\}\s*$", re.S)


def weight(value: Any, what: str = "template value") -> int:
    """Items plus characters in ``value`` counted per occurrence (a list repeating one long string
    counts it each time; an integer counts its decimal digits), stopping as soon as the total
    exceeds MAX_WEIGHT.

    This is how big the value becomes once flattened into text or JSON, so checking it *before*
    joining, stringifying or repeating keeps every template bounded without walking huge values.
    """
    total = 0
    stack: list[Any] = [value]
    while stack:
        v = stack.pop()
        total += 1
        if isinstance(v, str | range):
            total += len(v)
        elif isinstance(v, int):
            total += v.bit_length() // 3  # ~ decimal digits: [10**1000] * 90 is 90,000 characters
        elif isinstance(v, Mapping):
            if len(v) > MAX_WEIGHT:
                total += len(v)
            else:
                stack.extend(v.keys())
                stack.extend(v.values())
        elif isinstance(v, list | tuple | set | frozenset):
            if len(v) > MAX_WEIGHT:
                total += len(v)
            else:
                stack.extend(v)
        if total > MAX_WEIGHT:
            raise SecurityError(f"{what} would hold more than {MAX_WEIGHT} items or characters")
    return total


class _Budget:
    """What the templates of one document may still build, in weight units (see ``weight``).

    Each operation is bounded on its own, but a template can run many of them
    (``[s*50000, s*50000, ...]``) and a document can hold many templates; the budget bounds the sum,
    so no document can make a render allocate more than a few tens of MB, whatever its shape.
    """

    __slots__ = ("left",)

    def __init__(self) -> None:
        self.left = MAX_DOCUMENT_WEIGHT


_BUDGET: ContextVar[_Budget | None] = ContextVar("qosd_template_budget", default=None)


@contextmanager
def _budget_scope() -> Iterator[_Budget]:
    """The budget in force, or a fresh one for this render when none is (one value, one knob)."""
    budget = _BUDGET.get()
    if budget is not None:
        yield budget
        return
    budget = _Budget()
    token = _BUDGET.set(budget)
    try:
        yield budget
    finally:
        _BUDGET.reset(token)


def _spend(value: Any, what: str) -> Any:
    """Count a value an operation just built against the budget; returns it unchanged."""
    amount = weight(value, what)
    budget = _BUDGET.get()
    if budget is not None:
        budget.left -= amount
        if budget.left < 0:
            raise SecurityError(
                f"the templates of this document would build more than {MAX_DOCUMENT_WEIGHT} "
                "items or characters in all"
            )
    return value


def _materialize(value: Any, what: str) -> Any:
    """Lazy results of map/select become lists, counted as they are produced."""
    if not isinstance(value, Iterator):
        return value
    out: list[Any] = []
    total = 0
    for item in value:
        total += weight(item, what)
        if total > MAX_WEIGHT:
            raise SecurityError(f"{what} would hold more than {MAX_WEIGHT} items or characters")
        out.append(item)
    return _spend(out, what)


def _check_replace(text: Any, old: Any, new: Any, count: Any = -1) -> None:
    if isinstance(text, str) and isinstance(old, str) and isinstance(new, str):
        hits = text.count(old) if old else len(text) + 1
        if isinstance(count, int) and count >= 0:
            hits = min(hits, count)
        if len(text) + hits * max(len(new) - len(old), 0) > MAX_WEIGHT:
            raise SecurityError(f"replace would grow the text beyond {MAX_WEIGHT} characters")


def _json_text_length(value: Any, indent: Any) -> int:
    """An upper bound of ``len(value|tojson(indent))``, computed without building it.

    With an indent, every item of a container at depth d is preceded by a newline and d+1 indents,
    so ``[[[[[[1]]]]]]|tojson(indent=10000000)`` is ~200 MB of spaces from a 16-character value:
    the size depends on indent x depth, not on the value's weight.
    """
    if indent is not None and (isinstance(indent, bool) or not isinstance(indent, int | str)):
        raise SecurityError("tojson's indent must be a number of spaces or a string")
    unit = len(indent) if isinstance(indent, str) else max(indent or 0, 0)
    newline = 0 if indent is None else 1
    total = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, str):
            plain = v.isascii() and v.isprintable()
            total += (
                len(v) + v.count('"') + v.count("\\") + 5 * sum(map(v.count, "<>&'"))
                if plain
                else 12 * len(v)
            ) + 2
        elif isinstance(v, bool) or v is None:
            total += 5
        elif isinstance(v, int):
            total += v.bit_length() // 3 + 2
        elif isinstance(v, float):
            total += 24
        elif isinstance(v, Mapping | list | tuple):
            items: Iterable[Any] = v.items() if isinstance(v, Mapping) else v
            # brackets, then per item: separator, newline, indent (and ": " after a key)
            total += 2 + newline + depth * unit + len(v) * (4 + newline + (depth + 1) * unit)
            for item in items:
                if isinstance(v, Mapping):
                    k, item = item
                    stack.append((k if isinstance(k, str) else str(k), depth + 1))
                stack.append((item, depth + 1))
        else:
            total += 1  # json.dumps refuses it (TypeError) without building anything large
        if total > MAX_WEIGHT:
            raise SecurityError(
                f"tojson would write more than {MAX_WEIGHT} characters (indent {short(indent, 20)} "
                "at every nesting level)"
            )
    return total


def _pre_join(a: Mapping[str, Any]) -> None:
    value, sep = a.get("value"), a.get("d", "")
    if isinstance(value, Sized) and weight(value) + len(str(sep)) * len(value) > MAX_WEIGHT:
        raise SecurityError(f"the 'join' filter would build more than {MAX_WEIGHT} characters")


def _pre_replace(a: Mapping[str, Any]) -> None:
    _check_replace(a.get("s"), a.get("old"), a.get("new"), a.get("count", -1))


def _pre_tojson(a: Mapping[str, Any]) -> None:
    _json_text_length(a.get("value"), a.get("indent"))


def _pre_round(a: Mapping[str, Any]) -> None:
    # round(x, -10**9) computes 10**(10**9): minutes of CPU and ~400 MB for one value.
    precision = a.get("precision", 0)
    if isinstance(precision, int) and abs(precision) > MAX_ROUND_DIGITS:
        raise SecurityError(f"round's precision must be between -{MAX_ROUND_DIGITS} and {MAX_ROUND_DIGITS}")


def _pre_sum(a: Mapping[str, Any]) -> None:
    if not isinstance(a.get("start", 0), int | float):
        raise SecurityError("sum only adds numbers in rule templates")


# Checks that run on a filter's bound arguments *before* it runs, for the filters whose output can
# be much larger than their inputs. Every other filter's output is at most a small multiple of its
# inputs, which are bounded; all outputs are counted against the budget afterwards.
_PRECHECKS: dict[str, Callable[[Mapping[str, Any]], None]] = {
    "join": _pre_join,
    "replace": _pre_replace,
    "tojson": _pre_tojson,
    "round": _pre_round,
    "sum": _pre_sum,
}

# Filters that compute small values from bounded inputs. Padding and formatting filters (center,
# indent, wordwrap, format, truncate, batch, slice, filesizeformat, urlize, xmlattr, pprint, ...) are
# left out: their size argument is the amplifier and rule values do not need them.
SAFE_FILTERS = (
    "abs", "capitalize", "count", "d", "default", "dictsort", "first", "float", "groupby", "int",
    "items", "join", "last", "length", "list", "lower", "map", "max", "min", "reject", "rejectattr",
    "replace", "reverse", "round", "select", "selectattr", "sort", "string", "sum", "title", "tojson",
    "trim", "unique", "upper",
)  # fmt: skip


def _guard_filter(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """Check the size of a filter's inputs, predict its output where it can amplify, and count its
    output. Filters reached through ``map('name', ...)`` come through here too (Jinja looks them
    up in the same table)."""

    pass_arg = getattr(fn, "jinja_pass_arg", None)
    skip = 1 if pass_arg is not None else 0  # the context, eval context or environment comes first
    signature = inspect.signature(fn)
    precheck = _PRECHECKS.get(name)

    def guarded(*args: Any, **kwargs: Any) -> Any:
        what = f"the {name!r} filter"
        head, values = args[:skip], tuple(_materialize(a, what) for a in args[skip:])
        for a in (*values, *kwargs.values()):
            weight(a, what)
        if precheck is not None:
            try:
                bound = signature.bind(*head, *values, **kwargs)
            except TypeError:
                pass  # the call below raises the same TypeError, building nothing
            else:
                precheck(bound.arguments)
        out = fn(*head, *values, **kwargs)
        if isinstance(out, str) and type(out) is not str:
            out = str.__str__(out)  # tojson's Markup: a plain str, with plain str methods
        if isinstance(out, Iterator):
            return out  # lazy (map, select, items): counted by whatever consumes it
        return _spend(out, what)

    if pass_arg is not None:
        guarded.jinja_pass_arg = pass_arg  # type: ignore[attr-defined]
    guarded.__name__ = name
    return guarded


_STR_METHODS = (
    "lower upper strip lstrip rstrip startswith endswith split rsplit splitlines replace title "
    "capitalize count find rfind isdigit isalpha isalnum removeprefix removesuffix"
)
_SAFE_METHODS: dict[type, frozenset[str]] = {
    str: frozenset(_STR_METHODS.split()),
    dict: frozenset({"get", "keys", "values", "items"}),
    list: frozenset({"count", "index"}),
    tuple: frozenset({"count", "index"}),
}


class _CodeGenerator(CodeGenerator):
    """``a ~ b`` compiles to a join that checks the size of its parts before turning them into text
    (Jinja's own ``str_join`` is not an intercepted operation, so the sandbox never sees it)."""

    def visit_Concat(self, node: jinja_nodes.Concat, frame: Frame) -> None:
        self.write("environment.join_parts((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


def _join_output(pieces: Iterable[str]) -> str:
    """The text of a rendered template, stopped as soon as it is too long (the pieces are
    produced one by one, so ``{{ s }}{{ s }}...`` never exists in full)."""
    out: list[str] = []
    total = 0
    for piece in pieces:
        total += len(piece)
        if total > MAX_WEIGHT:
            raise SecurityError(f"the template renders to more than {MAX_WEIGHT} characters")
        out.append(piece)
    return str(_spend("".join(out), "the rendered text"))


class _QosdSandbox(ImmutableSandboxedEnvironment):
    """Sandbox with a size budget on every operation that can allocate, and an allow-list of calls."""

    intercepted_binops = frozenset({"*", "**", "%", "+"})
    code_generator_class = _CodeGenerator
    concat = staticmethod(_join_output)

    def call_binop(self, context: Any, operator_name: str, left: Any, right: Any) -> Any:
        return _spend(self._binop(operator_name, left, right), f"the result of {operator_name!r}")

    @staticmethod
    def _binop(operator_name: str, left: Any, right: Any) -> Any:
        if operator_name == "**":
            too_big = isinstance(right, int) and isinstance(left, int) and abs(left) > 1
            if too_big and right * max(abs(left).bit_length(), 1) > MAX_POWER_BITS:
                raise SecurityError(f"{short(left)} ** {short(right)} is too large to compute in a template")
            return operator.pow(left, right)
        if operator_name == "*":
            big = isinstance(left, int) and isinstance(right, int)
            if big and left.bit_length() + right.bit_length() > MAX_POWER_BITS:
                raise SecurityError(f"{short(left)} * {short(right)} is too large to compute in a template")
            for seq, count in ((left, right), (right, left)):
                repeats = isinstance(seq, str | list | tuple) and isinstance(count, int) and count > 1
                if repeats and weight(seq, "the repeated value") * count > MAX_WEIGHT:
                    raise SecurityError(
                        f"repeating a {type(seq).__name__} {count} times exceeds {MAX_WEIGHT} items"
                    )
            return operator.mul(left, right)
        if operator_name == "%":
            # '%0999999999d' % 1 is a 1 GB string from 16 characters; ~ and filters cover formatting.
            if isinstance(left, str):
                raise SecurityError(
                    "printf-style '%' formatting is not allowed in templates; use ~ or filters"
                )
            return operator.mod(left, right)
        sequences = isinstance(left, str | list | tuple) and isinstance(right, str | list | tuple)
        if sequences and weight(left) + weight(right) > MAX_WEIGHT:
            raise SecurityError(f"template value grows beyond {MAX_WEIGHT} items")
        return operator.add(left, right)

    def getitem(self, obj: Any, argument: Any) -> Any:
        value = super().getitem(obj, argument)
        return _spend(value, "the slice") if isinstance(argument, slice) else value

    def join_parts(self, parts: Iterable[Any]) -> str:
        """``a ~ b ~ c`` (see _CodeGenerator): sizes first, text after."""
        parts = tuple(parts)
        total = 0
        for part in parts:
            total += weight(part, "the joined text")
            if total > MAX_WEIGHT:
                raise SecurityError(f"the joined text (~) would hold more than {MAX_WEIGHT} characters")
        return str(_spend("".join(map(str, parts)), "the joined text (~)"))

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        """Only the template globals and a few read-only methods of strings, dicts and lists."""
        if isinstance(__obj, Undefined):  # says why: missing, or an unsafe attribute (__subclasses__)
            __obj._fail_with_undefined_error()
        if __obj is dict:
            args = tuple(_materialize(a, "dict()") for a in args)
            for a in (*args, *kwargs.values()):
                weight(a, "dict()")
        elif __obj is not _bounded_range:
            owner = getattr(__obj, "__self__", None)
            name = getattr(__obj, "__name__", repr(__obj))
            allowed = _SAFE_METHODS.get(type(owner), frozenset())
            if owner is None or name not in allowed:
                raise SecurityError(f"calling {name!r} is not allowed in rule templates")
            if name == "replace":
                _check_replace(owner, *args[:3])
        return _spend(__context.call(__obj, *args, **kwargs), "the call's result")


def _bounded_range(*args: int) -> range:
    r = range(*args)
    if len(r) > MAX_RANGE:
        raise SecurityError(
            f"range of {len(r)} items is larger than the {MAX_RANGE} qosd allows in templates"
        )
    return r


def _finalize(value: Any) -> Any:
    """Every {{ ... }} in a text template is size-checked and must be a plain value."""
    if isinstance(value, Undefined):
        value._fail_with_undefined_error()
    if not isinstance(value, str | int | float | bool | list | tuple | dict | range) and value is not None:
        raise SecurityError(f"a {type(value).__name__} cannot be rendered into a rule value")
    weight(value, "the rendered value")
    return value


def _make_env() -> _QosdSandbox:
    # optimized=False: Jinja's constant folding evaluates parts of an expression while compiling,
    # outside the sandbox's runtime checks, and can emit code naming `inf`/`nan`.
    env = _QosdSandbox(
        undefined=StrictUndefined,
        autoescape=False,
        keep_trailing_newline=False,
        finalize=_finalize,
        optimized=False,
    )
    env.globals = {"range": _bounded_range, "dict": dict}
    env.filters.update(float=finite_float, int=finite_int)
    env.filters = {name: _guard_filter(name, env.filters[name]) for name in SAFE_FILTERS}
    env.tests = {k: v for k, v in env.tests.items() if k not in ("callable",)}
    return env


ENV = _make_env()


class RenderError(Exception):
    """A template failed; ``message`` is written for the person who wrote the template."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.message = message
        self.hint = hint


_SANDBOX_HINT = (
    "templates may only read node facts (node.name, node.labels, node.capacity, node.cpus, "
    "node.numa_count, node.sockets, node.memory) and compute small values from them"
)


@lru_cache(maxsize=4096)
def _compile(text: str) -> tuple[bool, Any]:
    """Compile once per distinct template string (bundled policies render on every reload)."""
    if len(text) > MAX_TEMPLATE_CHARS:
        raise RenderError(
            f"template is {len(text)} characters long, more than the {MAX_TEMPLATE_CHARS} qosd allows",
            "a rule value needs one short expression; compute big tables outside qosd",
        )
    if "{%" in text or "{#" in text:
        raise RenderError(
            "statements ({% ... %}) and comments ({# ... #}) are not allowed in rule values",
            "write a single expression such as {{ [4, node.numa_count] | max }}",
        )
    m = _EXPR_ONLY.match(text)
    try:
        if any(n.name == "self" for n in ENV.parse(text).find_all(jinja_nodes.Name)):
            # Jinja's template reference: not a fact, and iterating it fails inside Jinja
            raise RenderError(
                "template refers to 'self' (Jinja's reference to the template itself): "
                "not allowed in rule values",
                "rule values read facts: node.*, and pod.* in knob expressions",
            )
        if m:
            return True, ENV.compile_expression(m.group("expr"), undefined_to_none=False)
        return False, ENV.from_string(text)
    except TemplateSyntaxError as exc:
        hint = "values use Jinja2 syntax: {{ expression }}"
        if "No filter named" in str(exc.message):
            hint = f"filters available in rule templates: {', '.join(SAFE_FILTERS)}"
        raise RenderError(f"template syntax error: {exc.message}", hint) from None


def is_template(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value or "{#" in value)


def render_value(text: str, context: Mapping[str, Any]) -> Any:
    """Render one templated string; raises RenderError with a human message, and nothing else.

    Sizes are checked before anything large is built, so a refusal costs no memory; a MemoryError
    or RecursionError that still happens (a machine short of memory) is a RenderError too, because
    one value in one rule file must never take the process down.
    """
    try:
        with _budget_scope():
            native, compiled = _compile(text)
            if native:
                result = compiled(**context)
                if isinstance(result, Undefined):
                    result._fail_with_undefined_error()
                result = _materialize(result, "the template result")
                weight(result, "the template result")
                return _to_json(result)
            out: str = compiled.render(**context)
            return out
    except SecurityError as exc:
        raise RenderError(f"template refused by the sandbox: {exc}", _SANDBOX_HINT) from None
    except TemplateError as exc:
        raise RenderError(f"template error: {exc.message or exc}", _hint_for(exc, context)) from None
    except RenderError:
        raise
    except ValueError as exc:
        if "max_str_digits" in str(exc):
            raise RenderError("template converts a number of more than 4300 digits") from None
        raise RenderError(f"template failed: ValueError: {exc}") from None
    except (ArithmeticError, TypeError, KeyError, IndexError, AttributeError, NameError) as exc:
        raise RenderError(f"template failed: {type(exc).__name__}: {exc}") from None
    except (RecursionError, SyntaxError):  # Python's parser on the code Jinja generates
        raise RenderError(
            "template nests too deeply", "write the expression flat, in fewer brackets"
        ) from None
    except MemoryError:
        raise RenderError(
            "template needs more memory than qosd can give it",
            "a rule value must stay small; " + _SANDBOX_HINT,
        ) from None
    except Exception as exc:  # a case the checks above do not know: still a located error
        raise RenderError(
            f"template failed unexpectedly: {type(exc).__name__}: {short(str(exc), 200)}",
            "this is a qosd bug; please report the template",
        ) from None


def bounded_expression(text: str) -> Callable[..., Any]:
    """A bare expression (no ``{{ }}``) evaluated later, many times (a cgroup knob's ``expr``, once
    per workload and tick), under the limits of rule templates: its length, every operation's
    size, and a budget per evaluation. Syntax errors raise TemplateSyntaxError now; limits raise
    SecurityError when called."""
    compiled = ENV.compile_expression(text, undefined_to_none=False)

    def evaluate(**context: Any) -> Any:
        if len(text) > MAX_TEMPLATE_CHARS:
            raise SecurityError(f"expression is longer than {MAX_TEMPLATE_CHARS} characters")
        with _budget_scope():
            return _materialize(compiled(**context), "the expression's result")

    return evaluate


def _hint_for(exc: TemplateError, context: Mapping[str, Any]) -> str:
    if isinstance(exc, UndefinedError):
        names = ", ".join(f"node.{k}" for k in sorted(context.get("node", {})))
        return f"available facts: {names}" if names else "no facts are available in this context"
    return ""


def _to_json(value: Any) -> Any:
    """Native template results must be plain JSON values: numbers, strings, booleans, lists, maps."""
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        raise RenderError(f"template produced {short(value, 24)}, which does not fit in 64 bits")
    if isinstance(value, float) and not math.isfinite(value):
        raise RenderError(f"template produced {value}, not a finite number")
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple | range):
        return [_to_json(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _to_json(v) for k, v in value.items()}
    raise RenderError(
        f"template produced a {type(value).__name__}, not a plain value",
        "an expression must evaluate to a number, string, boolean, list or mapping",
    )


def render_document(doc: Document, context: Mapping[str, Any]) -> tuple[Any, list[Problem]]:
    """A copy of ``doc.data`` with every templated string rendered; problems are located.

    All templates of the document share one budget (MAX_DOCUMENT_WEIGHT); once it is spent, the
    template that overran it is reported and the later ones are left unrendered (None) without
    repeating the same problem for each.
    """
    problems: list[Problem] = []
    budget = _Budget()

    def walk(value: Any, path: JsonPath) -> Any:
        if isinstance(value, dict):
            return {k: walk(v, (*path, k)) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, (*path, i)) for i, v in enumerate(value)]
        if is_template(value):
            if budget.left < 0:
                return None
            try:
                return render_value(value, context)
            except RenderError as exc:
                problems.append(Problem(doc.locate(path), f"{exc.message} in {short(value)}", exc.hint))
                return None
        return value

    token = _BUDGET.set(budget)
    try:
        return walk(doc.data, ()), problems
    finally:
        _BUDGET.reset(token)
