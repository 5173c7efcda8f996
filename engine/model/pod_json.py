"""Pod annotations that hold a JSON overlay of a policy section (Koordinator's koordinator.sh/memoryQOS,
koordinator.sh/cpuBurst): the one reading of such a document, so every feature that takes one refuses
the same things with the same words. An annotation qosd cannot read is ignored as a whole, as
Koordinator ignores one that does not parse, and the reason goes into a ``skipped`` note."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def json_object(text: str) -> tuple[Mapping[str, Any] | None, str | None]:
    """The annotation's JSON object, or None and why it is not one."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"it is not JSON ({exc.msg})"
    except ValueError as exc:  # e.g. an integer too long to convert
        return None, f"it is not JSON ({exc})"
    if not isinstance(doc, dict):
        return None, "it is not a JSON object"
    return doc, None


def bounded_int(doc: Mapping[str, Any], key: str, lo: int, hi: int) -> tuple[int | None, str | None]:
    """``doc[key]`` as an integer in [lo, hi] (None when absent), or why it is not one."""
    value = doc.get(key)
    if value is None:
        return None, None
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        return None, f"{key} {str(value)[:40]} is not an integer in [{lo}, {hi}]"
    return value, None


def for_pod(
    section: T,
    key: str | None,
    annotations: Mapping[str, str],
    overlay: Callable[[T, str], tuple[T, str | None]],
) -> tuple[T, str | None]:
    """``section`` for one pod: ``overlay(section, text)`` when the pod carries the annotation ``key``
    names, else the section itself (and no reason to report)."""
    if key is None:
        return section, None
    text = annotations.get(key)
    if text is None:
        return section, None
    return overlay(section, text)
