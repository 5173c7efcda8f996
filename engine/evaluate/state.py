"""Engine state: the little that evaluation remembers between ticks, explicit and serializable.

Everything else is recomputed from the snapshot. Keeping this small and JSON-serializable is what
lets a restarted daemon (even after kill -9) resume sustain timers and cooldowns, and never evict a
pod twice.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from types import MappingProxyType
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from engine.config.load import json_path
from engine.config.schema_check import plain_error
from engine.features.cpu_burst.limiter import Bucket
from engine.features.eviction.pool_load import NO_POOL_LOAD, PoolLoadState
from engine.features.reclaim.report import ReportHistory
from engine.features.reclaim.strategy import NOTHING_PUBLISHED, Published
from engine.resources import data_dir

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
class NumaCounter:
    """Katalyst's watermark counter of one NUMA node: its count, the decision of its last round, and
    when that round ran (the counter steps once per ``spec.pressure.numaWatermark.interval``)."""

    count: int
    action: str
    at: float

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "action": self.action, "at": self.at}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NumaCounter:
        return cls(int(data.get("count", 0)), str(data.get("action", "noop")), float(data.get("at", 0.0)))


@dataclass(frozen=True)
class PressureState:
    """What the engine-computed pressure triggers remember between ticks.

    ``numa``: NUMA id -> watermark counter. ``psi_since``: when the workload memory PSI gate (and the
    pod average) started holding, Katalyst's "since". ``system_met_at``: the last tick at which system
    memory pressure was met (the MemoryPressure condition's transition period counts from it).
    ``tolerance``: rule -> pod key -> since when that reclaimed pod is squeezed beyond its
    suppression tolerance (Katalyst's per-pod timers). ``pool_load``: the shared pools' load rings
    (Katalyst's cpu-pressure-load-plugin)."""

    numa: Mapping[str, NumaCounter] = field(default_factory=dict)
    psi_since: float | None = None
    system_met_at: float | None = None
    tolerance: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    pool_load: PoolLoadState = NO_POOL_LOAD

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.numa:
            out["numa"] = {k: v.to_dict() for k, v in self.numa.items()}
        if self.psi_since is not None:
            out["psiSince"] = self.psi_since
        if self.system_met_at is not None:
            out["systemMetAt"] = self.system_met_at
        if self.tolerance:
            out["tolerance"] = {rule: dict(pods) for rule, pods in self.tolerance.items() if pods}
        if self.pool_load.at is not None:
            out["poolLoad"] = self.pool_load.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PressureState:
        psi, met = data.get("psiSince"), data.get("systemMetAt")
        return cls(
            numa={str(k): NumaCounter.from_dict(v) for k, v in (data.get("numa") or {}).items()},
            psi_since=float(psi) if psi is not None else None,
            system_met_at=float(met) if met is not None else None,
            tolerance={
                str(rule): {str(pod): float(t) for pod, t in (pods or {}).items()}
                for rule, pods in (data.get("tolerance") or {}).items()
            },
            pool_load=PoolLoadState.from_dict(data.get("poolLoad") or {}),
        )


NO_PRESSURE = PressureState()


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
    pressure: PressureState = NO_PRESSURE  # counters and timers of the engine-computed triggers
    published: Published = NOTHING_PUBLISHED  # what the node update gate last let through
    burst: Mapping[str, Bucket] = field(default_factory=dict)  # container -> CFS quota burst bucket
    # "<cgroup path>/<file>" -> the text last computed by a knob that reads `current`
    # (engine/features/class_knobs/current.py says why read-back wins over it)
    knob_values: Mapping[str, str] = field(default_factory=dict)
    samples: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # rule|item -> (met, toward clear)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "heldSince": dict(self.held_since),
            "latched": sorted(self.latched),
            "lastFired": dict(self.last_fired),
            "firedAt": {k: list(v) for k, v in self.fired_at.items()},
            "evicting": {k: v.to_dict() for k, v in self.evicting.items()},
            "reports": {k: v.to_dict() for k, v in self.reports.items()},
        }
        pressure = self.pressure.to_dict()
        if pressure:
            out["pressure"] = pressure
        if self.published.at is not None:
            out["published"] = self.published.to_dict()
        if self.burst:
            out["burst"] = {k: v.to_dict() for k, v in self.burst.items()}
        if self.knob_values:
            out["knobValues"] = dict(self.knob_values)
        if self.samples:
            out["samples"] = {k: list(v) for k, v in self.samples.items()}
        return out

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
            pressure=PressureState.from_dict(data.get("pressure") or {}),
            published=Published.from_dict(data.get("published") or {}),
            burst={str(k): Bucket.from_dict(v) for k, v in (data.get("burst") or {}).items()},
            knob_values={str(k): str(v) for k, v in (data.get("knobValues") or {}).items()},
            samples={str(k): (int(v[0]), int(v[1])) for k, v in (data.get("samples") or {}).items()},
        )


# ---------------------------------------------------------------- reading a state someone else wrote


class CorruptState(ValueError):
    """Bytes that are not an engine state qosd wrote (schemas/state.schema.json); says where and why:
    ``line``/``column`` (1-based) where the JSON itself is broken, else ``path`` (the JSON path of the
    offending value) when the schema refused it, so ``qosd eval --state`` can point at it."""

    def __init__(self, message: str, path: tuple[str | int, ...] = (), line: int = 0, column: int = 0):
        super().__init__(message)
        self.path, self.line, self.column = path, line, column


MAX_STATE_BYTES = 16 << 20  # a real state is kilobytes; more is not one qosd wrote
MAX_REASON = 200  # characters of an offending value quoted in a reason


@cache
def _validators() -> tuple[Draft202012Validator, Draft202012Validator]:
    """(the state file document, its bare ``state`` object as ``qosd eval --state`` takes it)."""
    with (data_dir("schemas") / "state.schema.json").open(encoding="utf-8") as fh:
        schema: dict[str, Any] = json.load(fh)
    bare = {"$schema": schema["$schema"], "$defs": schema["$defs"], "$ref": "#/$defs/state"}
    return Draft202012Validator(schema), Draft202012Validator(bare)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number a state holds")


def _short(text: str) -> str:
    return text if len(text) <= MAX_REASON else text[:MAX_REASON] + "..."


def _byte_position(data: bytes | str, index: int) -> tuple[int, int]:
    """1-based line and column (in characters) of ``data[index]``."""
    raw = data.encode() if isinstance(data, str) else data
    before = raw[:index].decode("utf-8", errors="replace")
    return before.count("\n") + 1, len(before) - (before.rfind("\n") + 1) + 1


def state_from_json(data: bytes | str) -> EngineState:
    """The engine state in a state file's bytes (the document ``qosd run`` writes, or its bare
    ``state`` object). Anything else, whatever its shape (null, a list, a truncated file, binary
    garbage, nesting deep enough to exhaust the stack, NaN or 1e999), raises :class:`CorruptState`
    and nothing else: the daemon must be able to start whatever a crash or an operator left there."""
    return state_from_document(decode_state_json(data))


def decode_state_json(data: bytes | str) -> Any:
    """The JSON value in a state file's bytes, with the limits and located faults of ``state_from_json``
    (CorruptState and nothing else), not yet checked against the schema."""
    if len(data) > MAX_STATE_BYTES:
        raise CorruptState(f"{len(data)} bytes, more than the {MAX_STATE_BYTES} a state file can hold")
    try:
        return json.loads(data, parse_float=_finite, parse_constant=_no_constant)
    except RecursionError:
        raise CorruptState("not JSON qosd wrote: nested too deeply to read") from None
    except json.JSONDecodeError as exc:
        raise CorruptState(f"not JSON: {_short(exc.msg)}", line=exc.lineno, column=exc.colno) from None
    except UnicodeDecodeError as exc:
        line, column = _byte_position(data, exc.start)
        raise CorruptState(f"not JSON: {_short(str(exc))}", line=line, column=column) from None
    except ValueError as exc:  # huge integers, 1e999
        raise CorruptState(f"not JSON: {_short(str(exc))}") from None


def state_from_document(doc: Any) -> EngineState:
    """The engine state in decoded JSON, checked against schemas/state.schema.json first."""
    document, bare = _validators()
    wrapped = isinstance(doc, dict) and ("state" in doc or "kind" in doc)
    try:
        error = best_match((document if wrapped else bare).iter_errors(doc))
    except RecursionError:
        raise CorruptState("nested too deeply to check") from None
    if error is not None:
        where, message, hint = plain_error(error)
        raise CorruptState(
            f"{json_path(where)}: {_short(message)}" + (f" ({_short(hint)})" if hint else ""), path=where
        )
    state = doc["state"] if wrapped else doc
    try:
        return EngineState.from_dict(state)
    except (ValueError, TypeError, KeyError, OverflowError) as exc:  # the schema should make this unreachable
        raise CorruptState(f"$.state: {type(exc).__name__}: {_short(str(exc))}") from None
