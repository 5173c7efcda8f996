"""``spec.eviction``: how the evictions of one tick combine across rules, compiled once per
generation (the step that applies it is ``engine.features.eviction.soft_round``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DEFAULT_SOFT_ORDER = ("class", "priority", "-scope", "name")
DEFAULT_SCOPE_ORDER = ("force", "memory", "cpu")  # katalyst evictionScopePriority


@dataclass(frozen=True)
class SoftCandidates:
    """``spec.eviction.softCandidates``, compiled."""

    order_by: tuple[str, ...] = DEFAULT_SOFT_ORDER
    scope_order: tuple[str, ...] = DEFAULT_SCOPE_ORDER


@dataclass(frozen=True)
class EvictionRound:
    """``spec.eviction``: how one tick's evictions combine across rules."""

    soft: SoftCandidates = field(default_factory=SoftCandidates)


def compile_round(raw: Mapping[str, Any]) -> EvictionRound:
    """spec.eviction -> EvictionRound (the schema checks the keys; nothing else can go wrong)."""
    soft = raw.get("softCandidates") or {}
    return EvictionRound(
        SoftCandidates(
            order_by=tuple(soft.get("orderBy") or DEFAULT_SOFT_ORDER),
            scope_order=tuple(soft.get("scopeOrder") or DEFAULT_SCOPE_ORDER),
        )
    )
