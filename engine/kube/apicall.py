"""Small helpers around one call to the API server: reading a raw response, describing a failure
for an engineer, deciding whether it is worth another try, and metav1.Time in and out."""

from __future__ import annotations

import contextlib
import datetime
import email.utils
import json
import time
from typing import Any

import urllib3
from kubernetes.client.rest import ApiException

from engine.config.load import json_brackets

SMP = "application/strategic-merge-patch+json"
"""What the official client sends for a dict body anyway (its REST layer turns the generated
default, JSON Patch, into a strategic merge patch when the body is not a list); named explicitly so
the patch semantics qosd relies on (lists merged by key, a null deleting a map key) do not depend
on that fallback."""


# Kubernetes' own objects are a dozen levels deep, but a custom resource holds whatever etcd holds
# (the API server decodes up to 10,000 levels), and json.loads raises RecursionError at about
# 1,000. qosd keeps no object deeper than this: a deeper value is cut to an empty container, so
# the object still reads as too deep to every check after it (rule documents allow 64 levels) and
# is refused there by name, while nothing recursive (equality, copies) can run out of stack.
MAX_OBJECT_DEPTH = 100


def read_json(resp: Any) -> Any:
    """The JSON body of a ``_preload_content=False`` response, its connection given back to the pool.
    A list body wraps its items in two levels (the list, ``items``); one more level is kept so that
    :func:`cut_deep` at MAX_OBJECT_DEPTH still sees, and reports, an object cut while decoding."""
    try:
        data = resp.data
        return json_loads_capped(data, MAX_OBJECT_DEPTH + 3) if data else None
    finally:
        resp.release_conn()


def json_loads_capped(data: bytes | str, limit: int) -> Any:
    """``json.loads`` that never raises RecursionError: a text too deep for the decoder is decoded
    with every value below level ``limit`` (the root is level 1) cut to an empty container."""
    try:
        return json.loads(data)
    except RecursionError:
        text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
        return json.loads(_cut_text(text, limit))


def _cut_text(text: str, limit: int) -> str:
    """JSON text with each bracketed value that opens level ``limit + 1`` replaced by [] or {}."""
    pieces: list[str] = []
    cut_at, last = -1, 0
    for i, ch, depth in json_brackets(text):
        if depth != limit + 1:
            continue
        if ch in "[{":
            if cut_at < 0:
                cut_at = i
        elif cut_at >= 0:
            pieces.append(text[last:cut_at])
            pieces.append("[]" if text[cut_at] == "[" else "{}")
            last, cut_at = i + 1, -1
    pieces.append(text[last:])
    return "".join(pieces)


def cut_deep(value: Any, limit: int = MAX_OBJECT_DEPTH) -> tuple[str | int, ...] | None:
    """Cut, in place, every non-empty container below level ``limit`` of ``value`` (the root is
    level 1) to an empty one; the JSON path of the first cut, or None when nothing was that deep.
    Iterative, so it works on exactly the values a recursive walk could not."""
    if not isinstance(value, dict | list):
        return None
    first: tuple[str | int, ...] | None = None
    stack: list[tuple[Any, int, tuple[str | int, ...]]] = [(value, 1, ())]
    while stack:
        node, depth, path = stack.pop()
        children = list(node.items()) if isinstance(node, dict) else list(enumerate(node))
        for key, child in children:
            if not isinstance(child, dict | list):
                continue
            if depth < limit:
                stack.append((child, depth + 1, (*path, key)))
            elif child:
                node[key] = type(child)()
                first = first or (*path, key)
    return first


def consume(resp: Any) -> None:
    """Read and discard a ``_preload_content=False`` response so its connection can be reused."""
    try:
        resp.data  # noqa: B018 - reading is the point
    finally:
        resp.release_conn()


def describe_error(exc: BaseException) -> str:
    """One line for a failed API call, for a log line, an Event or an operation result: the HTTP
    status and reason, the server's message, and any causes it gave ("DisruptionBudget: The
    disruption budget web needs 2 healthy pods and has 2 currently")."""
    if isinstance(exc, ApiException):
        reason, message, causes = exc.reason or "", "", []
        with contextlib.suppress(ValueError, AttributeError, TypeError):
            body = json.loads(exc.body or "{}")
            reason = str(body.get("reason") or reason)
            message = str(body.get("message") or "")
            for cause in (body.get("details") or {}).get("causes") or []:
                text = str(cause.get("message") or "")
                kind = str(cause.get("type") or cause.get("reason") or "")
                causes.append(f"{kind}: {text}" if kind else text)
        out = f"HTTP {exc.status} {reason}".rstrip()
        if message:
            out += f": {message}"
        if causes:
            out += f" ({'; '.join(causes)})"
        if exc.status in (401, 403):
            out += " — check qosd's ServiceAccount token and ClusterRole (examples/deploy/base/rbac.yaml)"
        return out
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError):
        return f"API server unreachable or too slow ({type(exc).__name__}: {exc})"
    return f"{type(exc).__name__}: {exc}"


def retryable(exc: BaseException) -> bool:
    """Server-side trouble, throttling, a token the server no longer takes (the next try reads the
    rotated token file: engine.kube.client.TokenFile) or no answer at all: worth another try. Any
    other 4xx will fail the same way again."""
    if isinstance(exc, ApiException):
        return exc.status is None or exc.status >= 500 or exc.status in (401, 429)
    return isinstance(exc, urllib3.exceptions.HTTPError | OSError)


def retry_after(exc: BaseException) -> float | None:
    """The seconds the server asked the client to wait (``Retry-After``: delta-seconds or an
    HTTP-date; else the Status's ``details.retryAfterSeconds``), None when it did not say."""
    if not isinstance(exc, ApiException):
        return None
    header: Any = None
    with contextlib.suppress(AttributeError, TypeError):
        header = (exc.headers or {}).get("Retry-After")
    if header:
        text = str(header).strip()
        try:
            return max(0.0, float(text))
        except ValueError:
            with contextlib.suppress(TypeError, ValueError, IndexError):
                when = email.utils.parsedate_to_datetime(text)
                return max(0.0, when.timestamp() - time.time())
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        seconds = (json.loads(exc.body or "{}").get("details") or {}).get("retryAfterSeconds")
        if seconds:
            return max(0.0, float(seconds))
    return None


def causes_of(exc: BaseException) -> list[str]:
    """The ``reason`` of each cause in an ApiException's Status (``DisruptionBudget``,
    ``ResourceVersionTooLarge``)."""
    if not isinstance(exc, ApiException):
        return []
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        body = json.loads(exc.body or "{}")
        return [
            str(c.get("reason") or c.get("type") or "")
            for c in (body.get("details") or {}).get("causes") or []
            if isinstance(c, dict)
        ]
    return []


def rfc3339(t: float) -> str:
    """metav1.Time: UTC, second precision, 'Z'."""
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: object) -> float | None:
    """Seconds since the epoch of a metav1.Time ("2024-05-01T10:00:00Z"), None when absent or
    unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return parsed.timestamp()
