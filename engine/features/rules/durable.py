"""The durable-rules evaluator: the same rule conditions, evaluated by durable-rules in a worker process.

qosd's default evaluator compiles conditions to Python (``compiler.py``). This backend exists so that
the conditions can also be run through durable-rules, the engine named in the design card, and so that
differential tests can prove both give the same decisions. Everything below was measured on
durable_rules 2.0.28 (the last release, 2020) with CPython 3.11.

Why a worker process
    durable-rules cannot replace or delete a ruleset without leaking ~4 MB per reload, its C core keeps
    process-global handle tables, never releases the GIL, and can crash or spin inside C. So each
    ``DurableBackend`` (one per policy generation) starts its own worker process, registers the
    generation's ruleset there once, and ``close()`` stops it. A reload therefore frees everything, and a
    crash or hang in C costs one tick: every read and write has a deadline, a worker that misses it is
    killed, ``evaluate_many`` raises ``DurableBackendError``, and the next call starts a new worker.
    The worker is a plain ``python -c`` subprocess talking over two pipes (length-prefixed frames), not
    multiprocessing: "spawn" re-runs the caller's ``__main__`` in the child, which breaks any script
    that builds an Engine at top level, and "fork" would copy the daemon's threads and locks.
    The worker drives the C extension (``durable_rules_engine``) directly instead of ``durable.engine.Host``:
    Host starts two self-re-arming timer threads that run actions concurrently with the caller, its
    Python actions swallow exceptions into ``state["exception"]``, and its ``json.dumps`` writes floats
    such as 1e-05 that the C parser rejects (see below). Here the "action" is a loop in the worker that
    records which rule consumed which event; any failure is reported to the parent and ends the worker.

How conditions become rulesets (data, not decorators)
    Every (rule, when|clearWhen) gets a route number R (two when a comparison has hysteresis: one per
    latched state, each with its own threshold). A route becomes one durable rule, or several (below),
    ``{"pri": 0, "all": [{"m": {"$and": [{"$ex": {"g<G>": 1}}, {"$ex": {"r<R>": 1}}, <condition>]}}]}``,
    plus one catch-all ``{"pri": 1, "all": [{"m": {"$ex": {"qosd": 1}}}]}``. ``not`` is pushed down to
    the comparisons (De Morgan), because durable's ``$not`` is a sequence-level "no such event" test,
    not a boolean operator. A comparison reads attribute ``a<N>`` (one per distinct fact the policy reads):
    ``x > t`` is ``{"$gt": {"a3": t}}``, which durable already treats as false when ``a3`` is absent;
    its negation is ``{"$or": [{"$nex": {"a3": 1}}, {"$lte": {"a3": t}}]}``; ``in`` is an ``$or`` of
    equalities; ``exists`` is ``$ex``/``$nex``. Hysteresis: the latched route uses ``relaxed(c)``.
    The language's other forms need nothing here: a ``when`` mapping of several keys is parsed into
    an ``all`` (conditions.py), and a ``samples`` rule asks the same ``when`` and ``clearWhen`` routes
    (its ``clearWhen`` also for items with a count, rules/step.py); the counting is the engine's.

How facts are encoded
    Each item of each call of ``evaluate_many`` becomes one *event* ``{"id": n, "qosd": 1, "g<G>": 1,
    "r<R>": 1, "a<N>": value, ...}`` holding only the facts that route's condition reads (``fact_key``),
    so one tick is one batch of events and one round trip. Values are normalized by the fact's declared kind:
    numbers (and booleans read as numbers, as Python does) as floats, strings as strings, booleans as
    booleans. A missing fact (None) is left out, which makes every comparison on it false, as in Python.
    A value that is present but not comparable, NaN or a value of the wrong kind (text where a number
    belongs), is left out too and sets ``n<N>`` instead: ``exists`` sees it, ``ne`` holds, every other
    comparison is false, as for NaN in Python. durable itself compares across types ("95" > 80 and
    true == "true" are true), so nothing of the wrong kind is ever sent. (The Python backend answers
    False for an item whose evaluation raised TypeError; for a comparison under ``not`` or inside
    ``any`` that depends on evaluation order and can differ from this per-comparison rule. Collectors
    send well-typed facts, so this only concerns broken input.) Numbers are written so durable's JSON
    parser reads them exactly: an exponent without a fraction (``1e-05``, ``1e+20``, as json.dumps
    writes them) is error 204 in a ruleset or a single event, and in a *batch* it is accepted and then
    crashes ``start_action_for_state`` with SIGSEGV (measured), so those become ``1.0e-05``. ±inf
    becomes ±1.7976931348623157e308 (the parser has no infinity); integers above 2**53 lose precision.

Quirks handled
    * Events, not facts: an event is consumed by exactly one rule (the lowest ``pri`` that matches), so
      every call yields exactly one action: its condition rule (true) or the catch-all (false). Facts
      would fire every matching rule, fire twice when both branches of an ``$or`` match, persist between
      ticks (a re-assert of an identical fact raises MessageObservedException) and need retracting.
      The worker checks that every event got exactly one answer and fails loudly otherwise.
    * The catch-all matches every event, so a batch never raises MessageNotHandledException (which would
      defer all of the batch's actions to Host's background timer thread).
    * Rulesets are registered once per worker; ``create_ruleset`` gets a fresh JSON string (the Python
      layer's ``set_rulesets`` deletes ``run`` from the caller's dict), and never changes afterwards.
    * Limits of the C core, checked before the worker starts so a policy fails with a message, not a
      hang: an alpha node holds at most 511 hashed children and ``create_ruleset`` *spins forever* on
      the 512th (measured; the probe loop never finds a free slot), and at most 127 ``$nex`` children;
      a rule holds at most 15 ``$and``/``$or`` nodes (error 113). Routes are grouped (``g<G>``, at most
      100 routes per group) so the root never fills up. A condition that is too deep for one rule is
      split into its disjunctive normal form, one durable rule per term (an event still fires only
      one of them); one that is too large even then is refused.
    * Python >= 3.13: durable_rules 2.0.28 builds but fails to import (``PyEval_CallObject``); the error
      says so. The optional extra ``qosd[durable]`` is only installed for Python < 3.13.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import math
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.config.policy import Policy
from engine.evaluate.factview import read
from engine.features.rules.compiler import Call, CompiledRule, fact_key, relaxed, source_var
from engine.features.rules.conditions import AllOf, Compare, Condition, Not, comparisons

INSTALL_HINT = "durable-rules is not installed: pip install 'qosd[durable]' (Python < 3.13)"
FALLBACK_HINT = "switch this node to the default evaluator (evaluator: python, or --backend python)"

DEFAULT_TIMEOUT = 10.0  # seconds one tick's batch may take in the worker, IPC included
DEFAULT_START_TIMEOUT = 60.0  # seconds to spawn the worker, import durable_rules and register the ruleset

_MAX_TEXT = repr(sys.float_info.max)  # 1.7976931348623157e+308 stands for infinity
_MAX_BOOL_NODES = 15  # $and/$or per durable rule: MAX_SEQUENCE_EXPRESSIONS 32, two entries per node
_MAX_FANOUT = 100  # children per alpha node: 511 hashed (more hangs create_ruleset), 127 $nex
_ROUTES_PER_GROUP = 100
_MAX_TERMS = 64  # durable rules per route when a condition is split into DNF terms
_MAX_ATTRS = 200  # attributes per event: MAX_OBJECT_PROPERTIES 255, minus routing
_CATCH_ALL = "none"

_DR_OPS = {"ne": "$neq", "lt": "$lt", "lte": "$lte", "gt": "$gt", "gte": "$gte"}
_NEGATED = {"eq": "ne", "ne": "eq", "lt": "gte", "lte": "gt", "gt": "lte", "gte": "lt"}
_ASSERT_CODES = {
    1: "an event matched no rule, not even the catch-all (MessageNotHandled)",
    2: "an event id was seen twice (MessageObserved)",
    3: "durable deferred the batch to a queue (ERR_EVENT_DEFERRED)",
}


class DurableBackendError(RuntimeError):
    """The durable-rules backend cannot evaluate: not installed, policy beyond its limits, or the
    worker failed. The message says what happened and what to do."""


# ---------------------------------------------------------------- JSON for durable's parser


def _number(x: float) -> str:
    """A float as durable's JSON parser reads it exactly: it needs a fraction before any exponent
    ("1e-05" is a parse error, "1.0e-05" is fine) and has no infinity. NaN never gets here."""
    text = repr(x)
    if "e" not in text and "n" not in text:  # the common case: plain decimal
        return text
    if x == math.inf:
        return _MAX_TEXT
    if x == -math.inf:
        return "-" + _MAX_TEXT
    mantissa, _, exponent = text.partition("e")
    return text if "." in mantissa else f"{mantissa}.0e{exponent}"


def _dumps(value: Any) -> str:
    """JSON text of a ruleset: like json.dumps, with floats written by ``_number``."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{_dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_dumps(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} into a durable-rules ruleset")


# ---------------------------------------------------------------- conditions -> durable expressions

Expr = bool | dict[str, Any]  # True/False are folded constants; dicts are durable expressions


def _ex(name: str) -> Expr:
    return {"$ex": {name: 1}}


def _nex(name: str) -> Expr:
    return {"$nex": {name: 1}}


def _cmp(op: str, name: str, value: Any) -> Expr:
    return {name: value} if op == "eq" else {_DR_OPS[op]: {name: value}}


def _join(op: str, items: list[Expr], unit: bool) -> Expr:
    """``op`` ("$and" with ``unit`` True, "$or" with False) over ``items``, constants folded: the
    unit drops out, its opposite decides the whole; nested nodes of the same ``op`` are flattened,
    so a rule spends durable's few boolean nodes only where the operator changes."""
    out: list[Any] = []
    for item in items:
        if item is unit:
            continue
        if item is (not unit):
            return not unit
        assert isinstance(item, dict)
        out.extend(item.get(op, [item]))
    if not out:
        return unit
    return out[0] if len(out) == 1 else {op: out}


def _and(items: list[Expr]) -> Expr:
    return _join("$and", items, True)


def _or(items: list[Expr]) -> Expr:
    return _join("$or", items, False)


def _bool_nodes(e: Any) -> int:
    if isinstance(e, dict) and ("$and" in e or "$or" in e):
        return 1 + sum(_bool_nodes(x) for x in next(iter(e.values())))
    return 0


def _fanout(e: Any) -> tuple[int, int]:
    """(children ``e`` attaches to the node it hangs from, largest fan-out anywhere inside it)."""
    if isinstance(e, dict) and "$and" in e:
        items = e["$and"]
        entry, worst = _fanout(items[0])
        for x in items[1:]:
            w, m = _fanout(x)
            worst = max(worst, w, m)
        return entry, max(worst, entry)
    if isinstance(e, dict) and "$or" in e:
        total, worst = 0, 0
        for x in e["$or"]:
            w, m = _fanout(x)
            total += w
            worst = max(worst, m)
        return total, max(worst, total)
    return 1, 1


def _dnf(e: Any) -> list[list[Any]]:
    """Disjunctive normal form as a list of conjunctions of leaves; at most _MAX_TERMS terms."""
    if isinstance(e, dict) and "$or" in e:
        terms: list[list[Any]] = []
        for x in e["$or"]:
            terms.extend(_dnf(x))
            if len(terms) > _MAX_TERMS:
                raise _TooComplex(f"more than {_MAX_TERMS} alternatives")
        return terms
    if isinstance(e, dict) and "$and" in e:
        terms = [[]]
        for x in e["$and"]:
            terms = [t + u for t in terms for u in _dnf(x)]
            if len(terms) > _MAX_TERMS:
                raise _TooComplex(f"more than {_MAX_TERMS} alternatives once expanded")
        return terms
    return [[e]]


class _TooComplex(Exception):
    pass


class _NaN:
    """A NaN threshold: every comparison with it is false, except ``ne``."""


_NAN = _NaN()


@dataclass(frozen=True)
class _Attr:
    """One fact as an event attribute: ``name`` holds a comparable value; ``odd`` is set instead when
    the value is present but no comparison can hold for it (NaN, or a value of the wrong type)."""

    name: str
    odd: str
    source: str  # N (node), C (class) or I (item)
    key: str  # fact_key: where the value is read
    fact: str  # the fact's name in the policy, for messages
    kind: str  # number | integer | string | boolean
    prefix: str  # ',"a3":'
    odd_text: str  # ',"n3":1'

    @property
    def numeric(self) -> bool:
        return self.kind in ("number", "integer")

    def encode(self, value: Any) -> str:
        """The attribute's JSON text for one call: only values of the fact's kind reach durable."""
        if self.numeric:
            if isinstance(value, int | float):  # bool too: Python compares True as 1
                try:
                    f = float(value)
                except OverflowError:  # an int beyond float range: compares like infinity
                    f = math.inf if value > 0 else -math.inf
                return self.odd_text if f != f else self.prefix + _number(f)
        elif self.kind == "string":
            if isinstance(value, str):
                return self.prefix + json.dumps(value)
        elif isinstance(value, bool):
            return self.prefix + ("true" if value else "false")
        return self.odd_text  # durable would compare across types ("95" > 80 is true): never send it


@dataclass(frozen=True)
class _Route:
    """Where a call's event goes: its routing attributes and the facts its condition reads."""

    number: int
    head: str  # ',"qosd":1,"g0":1,"r5":1'
    attrs: tuple[_Attr, ...]


@dataclass(frozen=True)
class RulesetPlan:
    """A policy generation translated for durable-rules: the ruleset and how to route each call.

    ``table[rule index]`` is ``(when, clear)``; each is None when the rule has no such condition (the
    call is answered true locally, as the Python backend does) or a pair of routes (not latched,
    latched), the same route twice when no comparison has hysteresis."""

    name: str
    definition: dict[str, Any]
    table: tuple[tuple[tuple[_Route, _Route] | None, tuple[_Route, _Route] | None], ...]
    routes: int
    attrs: int

    @property
    def definition_json(self) -> str:
        return _dumps(self.definition)


class _Translator:
    def __init__(self, policy: Policy):
        self.policy = policy
        self.attrs: dict[tuple[str, str], _Attr] = {}
        self.definition: dict[str, Any] = {}
        self.routes = 0

    def attr(self, c: Compare) -> _Attr:
        source, key = source_var(c), fact_key(c)
        found = self.attrs.get((source, key))
        if found is None:
            n = len(self.attrs)
            found = _Attr(f"a{n}", f"n{n}", source, key, c.fact, c.spec.kind, f',"a{n}":', f',"n{n}":1')
            self.attrs[(source, key)] = found
        return found

    def value(self, a: _Attr, v: Any, where: str) -> Any:
        if a.numeric and isinstance(v, int | float) and not isinstance(v, bool):
            f = float(v)
            return _NAN if f != f else f
        if (a.kind == "boolean" and isinstance(v, bool)) or (a.kind == "string" and isinstance(v, str)):
            return v
        raise DurableBackendError(
            f"{where}: {a.fact!r} is a {a.kind} but the policy compares it with {v!r}; the policy "
            f"checker should have refused this. Please report it; meanwhile {FALLBACK_HINT}."
        )

    def compare(self, c: Compare, negate: bool, latched: bool, where: str) -> Expr:
        """One comparison, or its negation, with Python's semantics.

        A value is absent, odd (present but not comparable: NaN or a wrongly typed value, encoded in
        ``a.odd``) or comparable (in ``a.name``). Durable never matches a comparison on an absent
        attribute, so ``x op t`` is the bare comparison and its negation "absent, or the opposite
        comparison". Odd values behave like NaN in Python: every comparison is false except ``ne``."""
        a = self.attr(c)
        present = _or([_ex(a.name), _ex(a.odd)])
        absent = _and([_nex(a.name), _nex(a.odd)])
        if c.op == "exists":
            return present if bool(c.value) != negate else absent
        if c.op == "in":
            values = [v for v in (self.value(a, v, where) for v in c.value) if v is not _NAN]
            pos = _or([_cmp("eq", a.name, v) for v in values])
            neg = _or([_nex(a.name), _and([_cmp("ne", a.name, v) for v in values])])
            return neg if negate else pos
        threshold = c.value
        soft = relaxed(c)
        if soft is not None and latched:
            threshold = soft
        t = self.value(a, threshold, where)
        if c.op == "ne":
            if t is _NAN:  # x != nan holds for every present x
                return absent if negate else present
            pos = _or([_ex(a.odd), _cmp("ne", a.name, t)])
            neg = _and([_nex(a.odd), _or([_nex(a.name), _cmp("eq", a.name, t)])])
            return neg if negate else pos
        if t is _NAN:
            return negate
        pos = _cmp(c.op, a.name, t)
        return _or([_nex(a.name), _cmp(_NEGATED[c.op], a.name, t)]) if negate else pos

    def expr(self, cond: Condition, negate: bool, latched: bool, where: str) -> Expr:
        if isinstance(cond, Compare):
            return self.compare(cond, negate, latched, where)
        if isinstance(cond, Not):
            return self.expr(cond.item, not negate, latched, where)
        items = [self.expr(i, negate, latched, where) for i in cond.items]
        return _and(items) if isinstance(cond, AllOf) != negate else _or(items)

    def route(self, cond: Condition, latched: bool, where: str) -> _Route:
        number = self.routes
        self.routes += 1
        group = number // _ROUTES_PER_GROUP
        routing: list[Expr] = [_ex(f"g{group}"), _ex(f"r{number}")]
        expr = self.expr(cond, False, latched, where)
        attrs = tuple(dict.fromkeys(self.attr(c) for c in comparisons(cond)))
        if len(attrs) > _MAX_ATTRS:
            raise DurableBackendError(
                f"{where} reads {len(attrs)} facts; durable-rules events hold at most 255 properties. "
                f"Split the rule, or {FALLBACK_HINT}."
            )
        for i, body in enumerate(self._bodies(routing, expr, where)):
            name = f"r{number}" if i == 0 else f"r{number}t{i}"
            self.definition[name] = {"pri": 0, "all": [{"m": body}]}
        return _Route(number, f',"qosd":1,"g{group}":1,"r{number}":1', attrs)

    def _bodies(self, routing: list[Expr], expr: Expr, where: str) -> list[Expr]:
        """One durable rule if the condition fits durable's limits, else one per DNF term."""
        if expr is False:
            return []  # never true: the catch-all answers every call of this route
        nested = _and([*routing, expr])
        if _bool_nodes(nested) <= _MAX_BOOL_NODES and _fanout(nested)[1] <= _MAX_FANOUT:
            return [nested]
        try:
            terms = _dnf(expr)
        except _TooComplex as exc:
            raise DurableBackendError(
                f"{where} is too large for durable-rules ({exc}; a durable rule holds at most "
                f"{_MAX_BOOL_NODES} all/any nodes and an alpha node at most {_MAX_FANOUT} branches "
                f"here). Simplify the condition (e.g. shorter `in` lists), or {FALLBACK_HINT}."
            ) from None
        bodies = [_and([*routing, *term]) for term in terms]
        if len(terms) > _MAX_FANOUT or any(_fanout(b)[1] > _MAX_FANOUT for b in bodies):
            raise DurableBackendError(
                f"{where} has more than {_MAX_FANOUT} alternatives, beyond what durable-rules can hold "
                f"under one node (it hangs past 511). Simplify the condition, or {FALLBACK_HINT}."
            )
        return bodies


def translate(policy: Policy, rules: tuple[CompiledRule, ...]) -> RulesetPlan:
    """The durable-rules ruleset of a policy generation, and the routing table for its calls."""
    tr = _Translator(policy)
    table: list[tuple[tuple[_Route, _Route] | None, tuple[_Route, _Route] | None]] = []
    for cr in rules:
        pair: list[tuple[_Route, _Route] | None] = []
        for which, cond in (("when", cr.rule.when), ("clearWhen", cr.rule.clear_when)):
            if cond is None:
                pair.append(None)
                continue
            where = f"rule {cr.rule.name!r} {which} ({cr.rule.origin})"
            plain = tr.route(cond, False, where)
            hysteresis = any(c.hysteresis is not None for c in comparisons(cond))
            pair.append((plain, tr.route(cond, True, where) if hysteresis else plain))
        table.append((pair[0], pair[1]))
    if tr.routes > _ROUTES_PER_GROUP * _MAX_FANOUT:
        raise DurableBackendError(
            f"policy {policy.short_hash} has {tr.routes} conditions; the durable-rules backend holds at "
            f"most {_ROUTES_PER_GROUP * _MAX_FANOUT}. {FALLBACK_HINT[0].upper()}{FALLBACK_HINT[1:]}."
        )
    tr.definition[_CATCH_ALL] = {"pri": 1, "all": [{"m": {"$ex": {"qosd": 1}}}]}
    return RulesetPlan(f"qosd_{policy.short_hash}", tr.definition, tuple(table), tr.routes, len(tr.attrs))


# ---------------------------------------------------------------- the worker process
#
# Frames on both pipes: a 4-byte big-endian length, then the bytes. Requests: ``D`` + ruleset name +
# NUL + ruleset JSON (once), ``E`` + base id (u64) + count (u32) + JSON array of events, ``Q``.
# Replies: ``R`` + JSON info (ruleset registered), ``O`` + one byte per event (1 true, 0 false),
# ``I`` + message (durable_rules cannot be imported) or ``X`` + message; after I or X the worker exits,
# since durable's state may be inconsistent.


def _read_frame(fd: int) -> bytes | None:
    """Blocking read of one frame in the worker; None when the parent has gone (EOF)."""
    header = _read_all(fd, 4)
    if header is None:
        return None
    return _read_all(fd, struct.unpack("!I", header)[0])


def _read_all(fd: int, n: int) -> bytes | None:
    chunks: list[bytes] = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _write_frame(fd: int, data: bytes) -> None:
    view = memoryview(struct.pack("!I", len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def worker_main(argv: list[str]) -> int:
    """The worker process: ``python -c 'from engine.features.rules.durable import worker_main; ...' RFD WFD``.

    Started by ``DurableBackend`` only. It registers one ruleset, then answers one batch of events per
    request until the parent closes the pipe (its own death included) or sends ``Q``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group; the parent decides
    rfd, wfd = int(argv[0]), int(argv[1])
    try:
        dre: Any = importlib.import_module("durable_rules_engine")
    except Exception as exc:
        _write_frame(wfd, b"I" + f"{type(exc).__name__}: {exc}".encode())
        return 1
    msg = _read_frame(rfd)
    if msg is None or msg[:1] != b"D":
        return 1
    name, _, definition = msg[1:].decode().partition("\0")
    try:
        handle = dre.create_ruleset(name, definition)
    except Exception as exc:
        _write_frame(wfd, b"X" + f"durable-rules rejected the generated ruleset: {exc}".encode())
        return 1
    info: dict[str, Any] = {"pid": os.getpid(), "python": sys.version.split()[0]}
    with contextlib.suppress(Exception):
        from importlib.metadata import version

        info["durable_rules"] = version("durable_rules")
    _write_frame(wfd, b"R" + json.dumps(info).encode())
    while True:
        msg = _read_frame(rfd)
        if msg is None or msg[:1] != b"E":
            return 0
        base, count = struct.unpack_from("!QI", msg, 1)
        try:
            answers = _run_batch(dre, handle, base, count, msg[13:].decode())
        except Exception as exc:
            _write_frame(
                wfd, b"X" + "".join(traceback.format_exception_only(type(exc), exc)).strip().encode()
            )
            return 1
        _write_frame(wfd, b"O" + bytes(answers))


class _BatchError(Exception):
    pass


def _consumed(message: str) -> tuple[str, int, bool]:
    """(rule, event id, whether the event carries the rule's route) of one action message.

    durable echoes the event's own text: ``{"r5":{"m":{"id":17,"qosd":1,"g0":1,"r5":1,...}}}``; the id
    comes first because the parent writes it first. Reading that with string operations is several
    times faster than json.loads; anything else falls back to json.loads."""
    end = message.find('":{"m":{"id":', 2)
    stop = message.find(",", end + 13)
    if message.startswith('{"') and end > 0 and stop > 0 and message[end + 13 : stop].isdigit():
        rule = message[2:end]
        return rule, int(message[end + 13 : stop]), f',"{rule.split("t")[0]}":1' in message
    ((rule, frame),) = json.loads(message).items()
    event = frame["m"]
    return rule, int(event["id"]), event.get(rule.split("t")[0]) == 1


def _run_batch(dre: Any, handle: int, base: int, count: int, events: str) -> bytearray:
    """Assert one batch of events and run its actions synchronously: each event must be consumed by
    exactly one rule, a condition rule (answer 1) or the catch-all (answer 0)."""
    code, state = dre.assert_events(handle, events)
    if code != 0:
        raise _BatchError(_ASSERT_CODES.get(code, f"assert_events returned {code}"))
    answers = bytearray(b"\x02") * count
    started = dre.start_action_for_state(handle, state)
    message: str | None = started[1] if started else None
    while message is not None:
        rule, eid, routed = _consumed(message)
        j = eid - base
        if not 0 <= j < count:
            raise _BatchError(f"rule {rule} answered event {eid}, which is not in this batch")
        if answers[j] != 2:
            raise _BatchError(f"event {eid} was answered twice (second by rule {rule})")
        if rule == _CATCH_ALL:
            answers[j] = 0
        elif routed:
            answers[j] = 1
        else:
            raise _BatchError(f"rule {rule} consumed event {eid} of another route")
        message = dre.complete_and_start_action(handle, state)
    missing = answers.count(2)
    if missing:
        raise _BatchError(f"{missing} of {count} events got no answer (durable deferred their actions)")
    return answers


class _Timeout(Exception):
    pass


class _Gone(Exception):
    pass


def _stop_process(process: subprocess.Popen[bytes], fds: list[int], grace: float) -> None:
    """Stop a worker for good (also the finalizer of an unclosed backend): close its pipes, which makes
    an idle worker exit by itself within ``grace`` seconds, then terminate, then kill."""
    while fds:
        with contextlib.suppress(OSError):
            os.close(fds.pop())
    for step in (None, process.terminate, process.kill):
        if step is not None:
            with contextlib.suppress(OSError):
                step()
        try:
            process.wait(grace if step is None else 1.0)
            return
        except subprocess.TimeoutExpired:
            continue


_WORKER_COMMAND = (
    "import sys; from engine.features.rules.durable import worker_main; sys.exit(worker_main(sys.argv[1:]))"
)


class _Worker:
    """One worker process and its two pipes, with a deadline on every read and write in the parent."""

    def __init__(self, name: str, definition: str, start_timeout: float):
        deadline = time.monotonic() + start_timeout
        child_r, self._wfd = os.pipe()  # requests; os.pipe() fds are not inherited by other children
        self._rfd, child_w = os.pipe()  # replies
        root = str(Path(__file__).resolve().parents[2])  # the directory holding the engine package
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        try:
            self.process = subprocess.Popen(
                [sys.executable or "python3", "-c", _WORKER_COMMAND, str(child_r), str(child_w)],
                pass_fds=(child_r, child_w),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,  # stderr stays: a worker's traceback lands in the daemon's log
                env=env,
            )
        except OSError as exc:
            os.close(self._wfd)
            os.close(self._rfd)
            raise DurableBackendError(
                f"cannot start the durable-rules worker ({sys.executable!r}: {exc}); {FALLBACK_HINT}."
            ) from None
        finally:
            os.close(child_r)  # the child has its copies; closing ours makes its death visible as EOF
            os.close(child_w)
        os.set_blocking(self._wfd, False)
        # poll, not select: a daemon with many open files may hand out fds above select's 1024 limit
        self._writable = select.poll()
        self._writable.register(self._wfd, select.POLLOUT)
        self._readable = select.poll()
        self._readable.register(self._rfd, select.POLLIN)
        self.pid = self.process.pid
        self._finalizer = weakref.finalize(self, _stop_process, self.process, [self._wfd, self._rfd], 0.0)
        self.info: dict[str, Any] = {}
        try:
            with contextlib.suppress(_Gone):  # a worker that exited wrote why (I) first: read it below
                self.write(b"D" + name.encode() + b"\0" + definition.encode(), deadline)
            reply = self.read(deadline)
        except (_Timeout, _Gone):
            self.stop(hung=True)
            raise
        if reply[:1] == b"R":
            self.info = json.loads(reply[1:])
            return
        self.stop()
        detail = reply[1:].decode(errors="replace")
        if reply[:1] == b"I":
            raise DurableBackendError(
                f"durable-rules is installed but cannot be imported ({detail}); durable_rules 2.0.28 "
                f"only works on Python < 3.13 (this is {sys.version.split()[0]}). "
                f"{INSTALL_HINT}, or {FALLBACK_HINT}."
            )
        raise DurableBackendError(f"{detail}. Please report it with the policy; meanwhile {FALLBACK_HINT}.")

    @staticmethod
    def _wait(poller: select.poll, deadline: float) -> bool:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _Timeout()
        return bool(poller.poll(max(1, math.ceil(left * 1000))))

    def write(self, data: bytes, deadline: float) -> None:
        view = memoryview(struct.pack("!I", len(data)) + data)
        while view:
            if self._wait(self._writable, deadline):
                try:
                    view = view[os.write(self._wfd, view) :]
                except BlockingIOError:
                    continue
                except OSError as exc:  # EPIPE: the worker is gone
                    raise _Gone() from exc

    def _read_exact(self, n: int, deadline: float) -> bytes:
        chunks: list[bytes] = []
        while n:
            if self._wait(self._readable, deadline):
                chunk = os.read(self._rfd, n)
                if not chunk:
                    raise _Gone()
                chunks.append(chunk)
                n -= len(chunk)
        return b"".join(chunks)

    def read(self, deadline: float) -> bytes:
        (size,) = struct.unpack("!I", self._read_exact(4, deadline))
        return self._read_exact(size, deadline)

    def describe_exit(self) -> str:
        try:
            code = self.process.wait(0.5)
        except subprocess.TimeoutExpired:
            return "stopped answering"
        if code < 0:
            try:
                return f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"was killed by signal {-code}"
        return f"exited with status {code}"

    def stop(self, hung: bool = False) -> None:
        """Ask the worker to quit and wait for it; a hung worker is terminated at once."""
        if self._finalizer.detach() is None:
            return
        if self.process.poll() is None and not hung:
            with contextlib.suppress(_Timeout, _Gone, OSError):
                self.write(b"Q", time.monotonic() + 0.5)
        _stop_process(self.process, [self._wfd, self._rfd], 0.0 if hung else 1.0)


# ---------------------------------------------------------------- the backend


class DurableBackend:
    """Evaluates compiled rule conditions through durable-rules, in a worker owned by this generation.

    Build one per policy generation (``Engine(policy, backend="durable")``) and ``close()`` it when the
    generation is replaced: the worker and everything durable allocated go with it. Calls from several
    threads are serialized (one batch at a time per worker)."""

    name = "durable"

    def __init__(
        self,
        policy: Policy,
        rules: tuple[CompiledRule, ...],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        start_timeout: float = DEFAULT_START_TIMEOUT,
    ):
        if importlib.util.find_spec("durable_rules_engine") is None:
            raise DurableBackendError(INSTALL_HINT)
        self.policy = policy
        self.rules = rules
        self.timeout = timeout
        self.start_timeout = start_timeout
        self.plan = translate(policy, rules)
        self._definition = self.plan.definition_json
        self._lock = threading.Lock()
        self._next_id = 1
        self._closed = False
        self.restarts = 0
        self._worker: _Worker | None = self._start()

    @property
    def pid(self) -> int | None:
        """The worker's process id (None between a failure and the restart on the next call)."""
        return self._worker.pid if self._worker is not None else None

    def _start(self) -> _Worker:
        try:
            return _Worker(self.plan.name, self._definition, self.start_timeout)
        except _Timeout:
            raise DurableBackendError(
                f"the durable-rules worker did not start within {self.start_timeout:g}s (spawning Python, "
                f"importing durable_rules, registering {len(self.plan.definition)} durable rules for "
                f"policy {self.policy.short_hash}); it was killed. On a loaded node retry, else "
                f"{FALLBACK_HINT}."
            ) from None
        except _Gone:
            raise DurableBackendError(
                "the durable-rules worker died while starting (crash in the C extension or while "
                f"registering the ruleset for policy {self.policy.short_hash}); {FALLBACK_HINT}."
            ) from None

    def evaluate_many(
        self, node: Mapping[str, Any], classes: Mapping[str, Any], calls: list[Call]
    ) -> list[bool]:
        """One batch of events per tick, one round trip; a rule without the condition is true."""
        with self._lock:
            return self._evaluate(node, classes, calls)

    def _evaluate(self, node: Mapping[str, Any], classes: Mapping[str, Any], calls: list[Call]) -> list[bool]:
        out = [True] * sum(len(items) for _, _, items, _ in calls)
        order: list[int] = []
        events: list[str] = []
        table = self.plan.table
        base = self._next_id
        pos = 0
        for index, which, items, latched in calls:
            pair = table[index][0 if which == "when" else 1]
            if pair is None:
                pos += len(items)
                continue  # no condition: true, as in the Python backend
            route = pair[1] if latched else pair[0]
            for item in items:
                parts = ['{"id":', str(base + len(events)), route.head]
                for a in route.attrs:
                    if a.source == "I":
                        value = read(item, a.key)
                    else:
                        value = (node if a.source == "N" else classes).get(a.key)
                    if value is not None:
                        parts.append(a.encode(value))
                parts.append("}")
                events.append("".join(parts))
                order.append(pos)
                pos += 1
        if not events:
            return out
        answers = self._call(base, len(events), "[" + ",".join(events) + "]")
        for pos, answer in zip(order, answers, strict=True):
            out[pos] = answer == 1
        return out

    def _call(self, base: int, count: int, payload: str) -> bytes:
        """Send one batch and read its answers; the caller holds ``self._lock``."""
        if self._closed:
            raise DurableBackendError(
                "this durable-rules backend was closed (its policy generation was replaced); "
                "evaluate with the current Engine"
            )
        if self._worker is None:
            self.restarts += 1
            self._worker = self._start()
        worker = self._worker
        self._next_id = base + count
        request = b"E" + struct.pack("!QI", base, count) + payload.encode()
        deadline = time.monotonic() + self.timeout
        what = f"{count} conditions of policy {self.policy.short_hash}"
        try:
            worker.write(request, deadline)
            reply = worker.read(deadline)
        except _Timeout:
            self._drop(worker, hung=True)
            raise DurableBackendError(
                f"the durable-rules worker (pid {worker.pid}) did not answer within {self.timeout:g}s "
                f"({what}); it was killed and a new one starts on the next tick. If this repeats, "
                f"{FALLBACK_HINT}."
            ) from None
        except _Gone:
            how = worker.describe_exit()
            self._drop(worker)
            raise DurableBackendError(
                f"the durable-rules worker (pid {worker.pid}) {how} while evaluating {what}; a new one "
                f"starts on the next tick. If this repeats, {FALLBACK_HINT}."
            ) from None
        if reply[:1] != b"O" or len(reply) != count + 1:
            self._drop(worker)
            detail = reply[1:].decode(errors="replace") if reply[:1] == b"X" else repr(reply[:80])
            raise DurableBackendError(
                f"durable-rules failed on {what}: {detail}. The worker was stopped and a new one "
                f"starts on the next tick. Please report this with the policy; meanwhile "
                f"{FALLBACK_HINT}."
            )
        return reply[1:]

    def _drop(self, worker: _Worker, hung: bool = False) -> None:
        self._worker = None
        worker.stop(hung)

    def close(self) -> None:
        """Stop the worker (idempotent); durable's memory goes with the process."""
        with self._lock:
            self._closed = True
            if self._worker is not None:
                self._worker.stop()
                self._worker = None
