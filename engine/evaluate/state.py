"""Engine state: the little that evaluation remembers between ticks, explicit and serializable.

Everything else is recomputed from the snapshot. Keeping this small and JSON-serializable is what
lets a restarted daemon (even after kill -9) resume sustain timers and cooldowns, and never evict a
pod twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from engine.strategies.reclaim import ReportHistory

EMPTY_F: Mapping[str, float] = MappingProxyType({})


def item_key(rule: str, item: str | None) -> str:
    return f"{rule}|{item}" if item is not None else rule


@dataclass(frozen=True)
class Evicting:
    """A pod qosd asked to evict: counted as released until it is gone (or the record expires)."""

    since: float
    rule: str
    resource: str
    credit: float

    def to_dict(self) -> dict[str, Any]:
        return {"since": self.since, "rule": self.rule, "resource": self.resource, "credit": self.credit}


@dataclass(frozen=True)
class EngineState:
    held_since: Mapping[str, float] = field(
        default_factory=lambda: EMPTY_F
    )  # rule|item -> when its condition started holding
    latched: frozenset[str] = frozenset()  # rule|item that fired and has not cleared
    last_fired: Mapping[str, float] = field(
        default_factory=lambda: EMPTY_F
    )  # rule -> last firing (cooldown anchor)
    fired_at: Mapping[str, tuple[float, ...]] = field(default_factory=dict)  # rule -> recent firings
    evicting: Mapping[str, Evicting] = field(default_factory=dict)  # pod uid -> eviction under way
    reports: Mapping[str, ReportHistory] = field(default_factory=dict)  # published resource -> smoothing

    def to_dict(self) -> dict[str, Any]:
        return {
            "heldSince": dict(self.held_since),
            "latched": sorted(self.latched),
            "lastFired": dict(self.last_fired),
            "firedAt": {k: list(v) for k, v in self.fired_at.items()},
            "evicting": {k: v.to_dict() for k, v in self.evicting.items()},
            "reports": {k: v.to_dict() for k, v in self.reports.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EngineState:
        return cls(
            held_since=MappingProxyType({str(k): float(v) for k, v in (data.get("heldSince") or {}).items()}),
            latched=frozenset(str(x) for x in data.get("latched") or ()),
            last_fired=MappingProxyType({str(k): float(v) for k, v in (data.get("lastFired") or {}).items()}),
            fired_at={str(k): tuple(float(x) for x in v) for k, v in (data.get("firedAt") or {}).items()},
            evicting={
                str(k): Evicting(float(v["since"]), str(v["rule"]), str(v["resource"]), float(v["credit"]))
                for k, v in (data.get("evicting") or {}).items()
            },
            reports={str(k): ReportHistory.from_dict(v) for k, v in (data.get("reports") or {}).items()},
        )
