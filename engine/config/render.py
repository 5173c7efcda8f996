"""Render Jinja2 values in rule documents against node facts, in a sandbox.

Templates let one document serve nodes of different shapes ("min: {{ [4, node.numa_count] | max }}").
They come from git repos and custom resources that many people can edit, so they run in an immutable
sandbox with StrictUndefined: no Python internals, no imports, no files, no statements, and bounded
ranges, powers and string growth. A value that is exactly one ``{{ expression }}`` renders to a native
value (a number stays a number); anything else renders to a string.

Rendering happens once per policy generation and node, never per tick.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from jinja2 import StrictUndefined, TemplateError, TemplateSyntaxError, Undefined, UndefinedError
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from engine.config.errors import Problem, short
from engine.config.load import Document, JsonPath

MAX_RANGE = 10_000
MAX_STRING = 100_000
MAX_POWER_BITS = 4_096

_EXPR_ONLY = re.compile(r"^\s*\{\{(?P<expr>(?:(?!\{\{|\}\}).)*)\}\}\s*$", re.S)


class _QosdSandbox(ImmutableSandboxedEnvironment):
    """Sandbox with size limits on the operations that can allocate without bound."""

    intercepted_binops = frozenset({"*", "**", "%", "+"})

    def call_binop(self, context: Any, operator_name: str, left: Any, right: Any) -> Any:
        if operator_name == "**":
            too_big = isinstance(right, int) and isinstance(left, int) and abs(left) > 1
            if too_big and right * max(abs(left).bit_length(), 1) > MAX_POWER_BITS:
                raise SecurityError(f"{short(left)} ** {short(right)} is too large to compute in a template")
            return operator.pow(left, right)
        if operator_name == "*":
            for seq, count in ((left, right), (right, left)):
                repeated = isinstance(seq, str | list | tuple) and isinstance(count, int)
                if repeated and len(seq) * count > MAX_STRING:
                    raise SecurityError(
                        f"repeating a {type(seq).__name__} {count} times exceeds {MAX_STRING} items"
                    )
            return operator.mul(left, right)
        if operator_name == "%":
            if isinstance(left, str):
                raise SecurityError(
                    "printf-style '%' formatting is not allowed in templates; use ~ or filters"
                )
            return operator.mod(left, right)
        result = operator.add(left, right)
        if isinstance(result, str | list | tuple) and len(result) > MAX_STRING:
            raise SecurityError(f"template value grows beyond {MAX_STRING} items")
        return result


def _bounded_range(*args: int) -> range:
    r = range(*args)
    if len(r) > MAX_RANGE:
        raise SecurityError(
            f"range of {len(r)} items is larger than the {MAX_RANGE} qosd allows in templates"
        )
    return r


def _guard_width(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def guarded(value: Any, *args: Any, **kwargs: Any) -> Any:
        widths = [a for a in (*args, *kwargs.values()) if isinstance(a, int)]
        if any(w > MAX_STRING for w in widths):
            raise SecurityError(f"filter {name!r} with width {max(widths)} exceeds {MAX_STRING}")
        out = fn(value, *args, **kwargs)
        if isinstance(out, str) and len(out) > MAX_STRING:
            raise SecurityError(f"filter {name!r} produced more than {MAX_STRING} characters")
        return out

    return guarded


def _make_env() -> _QosdSandbox:
    env = _QosdSandbox(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=False)
    env.globals = {"range": _bounded_range, "dict": dict}
    for name in ("center", "indent", "wordwrap", "format", "replace", "truncate", "filesizeformat"):
        if name in env.filters:
            env.filters[name] = _guard_width(name, env.filters[name])
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
        raise RenderError(
            f"template syntax error: {exc.message}", "values use Jinja2 syntax: {{ expression }}"
        ) from None


def is_template(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value or "{#" in value)


def render_value(text: str, context: Mapping[str, Any]) -> Any:
    """Render one templated string; raises RenderError with a human message."""
    native, compiled = _compile(text)
    try:
        if native:
            result = compiled(**context)
            if isinstance(result, Undefined):
                result._fail_with_undefined_error()
            return _to_json(result)
        out: str = compiled.render(**context)
        if len(out) > MAX_STRING:
            raise RenderError(f"template renders to {len(out)} characters, more than {MAX_STRING}")
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
    except (ArithmeticError, TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
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
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
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
