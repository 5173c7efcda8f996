"""Fields of Kubernetes objects as the API returns them (plain JSON), read defensively.

The pod source and the node watch read the same shapes (labels, annotations, ResourceLists) from
objects qosd does not control: a webhook or an old client can put anything there, and one bad entry
must not hide the rest of the object.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from engine.model.units import parse_quantity


def str_map(raw: Any) -> Mapping[str, str]:
    """Labels or annotations; anything but a map reads as empty."""
    if not isinstance(raw, Mapping):
        return MappingProxyType({})
    return MappingProxyType({str(k): str(v) for k, v in raw.items()})


def resource_list(raw: Any, what: str, problems: list[str]) -> Mapping[str, float]:
    """A ResourceList in base units (cores, bytes, counts); an entry that does not parse is left out
    and described in ``problems`` under ``what``."""
    out: dict[str, float] = {}
    if raw is None:
        return MappingProxyType(out)
    if not isinstance(raw, Mapping):
        problems.append(f"{what} is not a map of quantities: {raw!r}")
        return MappingProxyType(out)
    for name, value in raw.items():
        try:
            if not isinstance(value, str | int | float):
                raise ValueError(f"{value!r} is not a quantity")
            out[str(name)] = parse_quantity(value)
        except ValueError as exc:
            problems.append(f"{what}.{name}: {exc}; left out")
    return MappingProxyType(out)
