"""Render Jinja2 values in rule documents against node facts, in a sandbox.

Templates let one document serve nodes of different shapes ("min: {{ [4, node.numa_count] | max }}").
They come from git repos and custom resources that many people can edit, so they run in an immutable
sandbox with StrictUndefined: no Python internals, no imports, no files, no statements, and bounded
ranges, powers and string growth. A value that is exactly one ``{{ expression }}`` renders to a native
value (a number stays a number); anything else renders to a string.

Rendering happens once per policy generation and node, never per tick.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterator, Mapping, Sized
from functools import lru_cache
from typing import Any

from jinja2 import StrictUndefined, TemplateError, TemplateSyntaxError, Undefined, UndefinedError
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from engine.config.errors import Problem, short
from engine.config.load import Document, JsonPath

MAX_RANGE = 10_000
MAX_WEIGHT = 100_000
MAX_POWER_BITS = 4_096

_EXPR_ONLY = re.compile(r"^\s*\{\{(?P<expr>(?:(?!\{\{|\}\}).)*)\}\}\s*$", re.S)


def weight(value: Any, what: str = "template value") -> int:
    """Items plus characters in ``value`` counted per occurrence (a list repeating one long string
    counts it each time), stopping as soon as the total exceeds MAX_WEIGHT.

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
    return out


def _check_replace(text: Any, old: Any, new: Any, count: Any = -1) -> None:
    if isinstance(text, str) and isinstance(old, str) and isinstance(new, str):
        hits = text.count(old) if old else len(text) + 1
        if isinstance(count, int) and count >= 0:
            hits = min(hits, count)
        if len(text) + hits * max(len(new) - len(old), 0) > MAX_WEIGHT:
            raise SecurityError(f"replace would grow the text beyond {MAX_WEIGHT} characters")


# Filters that compute small values from bounded inputs. Padding and formatting filters (center,
# indent, wordwrap, format, batch, slice, ...) are left out: their size argument is the amplifier.
SAFE_FILTERS = (
    "abs", "capitalize", "count", "d", "default", "dictsort", "first", "float", "groupby", "int",
    "items", "join", "last", "length", "list", "lower", "map", "max", "min", "reject", "rejectattr",
    "replace", "reverse", "round", "select", "selectattr", "sort", "string", "sum", "title", "tojson",
    "trim", "unique", "upper",
)  # fmt: skip


def _guard_filter(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """Check the size of a filter's inputs (and output) so no filter can amplify a value."""

    pass_arg = getattr(fn, "jinja_pass_arg", None)
    skip = 1 if pass_arg is not None else 0  # the context, eval context or environment comes first

    def guarded(*args: Any, **kwargs: Any) -> Any:
        what = f"the {name!r} filter"
        head, values = args[:skip], tuple(_materialize(a, what) for a in args[skip:])
        for a in (*values, *kwargs.values()):
            weight(a, what)
        texts = [a for a in values if isinstance(a, str)]
        if name == "replace" and len(texts) >= 3:
            ints = [a for a in values if isinstance(a, int) and not isinstance(a, bool)]
            _check_replace(texts[0], texts[1], texts[2], kwargs.get("count", ints[0] if ints else -1))
        if name == "join" and values and isinstance(values[0], Sized):
            sep = values[1] if len(values) > 1 else kwargs.get("d", "")
            if weight(values[0], what) + len(str(sep)) * len(values[0]) > MAX_WEIGHT:
                raise SecurityError(f"{what} would build more than {MAX_WEIGHT} characters")
        if name == "sum" and not isinstance(kwargs.get("start", 0), int | float):
            raise SecurityError("sum only adds numbers in rule templates")
        out = fn(*head, *values, **kwargs)
        if isinstance(out, str | list | tuple | Mapping):
            weight(out, what)
        return out

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


class _QosdSandbox(ImmutableSandboxedEnvironment):
    """Sandbox with a size budget on every operation that can allocate, and an allow-list of calls."""

    intercepted_binops = frozenset({"*", "**", "%", "+"})

    def call_binop(self, context: Any, operator_name: str, left: Any, right: Any) -> Any:
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
            if isinstance(left, str):
                raise SecurityError(
                    "printf-style '%' formatting is not allowed in templates; use ~ or filters"
                )
            return operator.mod(left, right)
        sequences = isinstance(left, str | list | tuple) and isinstance(right, str | list | tuple)
        if sequences and weight(left) + weight(right) > MAX_WEIGHT:
            raise SecurityError(f"template value grows beyond {MAX_WEIGHT} items")
        return operator.add(left, right)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        """Only the template globals and a few read-only methods of strings, dicts and lists."""
        if __obj in (_bounded_range, dict):
            return __context.call(__obj, *args, **kwargs)
        owner = getattr(__obj, "__self__", None)
        name = getattr(__obj, "__name__", repr(__obj))
        allowed = _SAFE_METHODS.get(type(owner), frozenset())
        if owner is None or name not in allowed:
            raise SecurityError(f"calling {name!r} is not allowed in rule templates")
        if name == "replace":
            _check_replace(owner, *args[:3])
        return __context.call(__obj, *args, **kwargs)


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


@lru_cache(maxsize=4096)
def _compile(text: str) -> tuple[bool, Any]:
    """Compile once per distinct template string (bundled policies render on every reload)."""
    if "{%" in text or "{#" in text:
        raise RenderError(
            "statements ({% ... %}) and comments ({# ... #}) are not allowed in rule values",
            "write a single expression such as {{ [4, node.numa_count] | max }}",
        )
    m = _EXPR_ONLY.match(text)
    try:
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
    """Render one templated string; raises RenderError with a human message."""
    try:
        native, compiled = _compile(text)
        if native:
            result = compiled(**context)
            if isinstance(result, Undefined):
                result._fail_with_undefined_error()
            result = _materialize(result, "the template result")
            weight(result, "the template result")
            return _to_json(result)
        out: str = compiled.render(**context)
        if len(out) > MAX_WEIGHT:
            raise RenderError(f"template renders to {len(out)} characters, more than {MAX_WEIGHT}")
        return out
    except SecurityError as exc:
        raise RenderError(
            f"template refused by the sandbox: {exc}",
            "templates may only read node facts (node.name, node.labels, node.capacity, node.cpus, "
            "node.numa_count, node.sockets, node.memory) and compute small values from them",
        ) from None
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
    except RecursionError:
        raise RenderError("template recursion too deep") from None


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
    """A copy of ``doc.data`` with every templated string rendered; problems are located."""
    problems: list[Problem] = []

    def walk(value: Any, path: JsonPath) -> Any:
        if isinstance(value, dict):
            return {k: walk(v, (*path, k)) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, (*path, i)) for i, v in enumerate(value)]
        if is_template(value):
            try:
                return render_value(value, context)
            except RenderError as exc:
                problems.append(Problem(doc.locate(path), f"{exc.message} in {short(value)}", exc.hint))
                return None
        return value

    return walk(doc.data, ()), problems
