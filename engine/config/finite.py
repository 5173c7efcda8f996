"""Jinja's number filters for rule templates, where a value that is not a finite number does not convert.

Quantities in qosd are finite (``engine.model.units``); a template that reads a node label such as
"1e9999999" must get the filter's default, not an infinity that fails later for that node.
"""

from __future__ import annotations

import math
from typing import Any

from jinja2 import filters as jinja_filters


def finite_float(value: Any, default: float = 0.0) -> float:
    """Jinja's ``float``, where a value that is not a finite number ("inf", "nan", "1e9999" in a node
    label) is one that does not convert: the default, as for any other non-number. Quantities in
    qosd are finite, and an infinity would only fail later, in ``int`` or in a bound."""
    out = jinja_filters.do_float(value, default)
    return out if math.isfinite(out) else default


def finite_int(value: Any, default: int = 0, base: int = 10) -> int:
    """Jinja's ``int``, where an infinite or NaN value (or a string of one) gives the default
    instead of escaping as OverflowError / ValueError."""
    if isinstance(value, float) and not math.isfinite(value):
        return default
    try:
        return jinja_filters.do_int(value, default, base)
    except (OverflowError, ValueError):
        return default
