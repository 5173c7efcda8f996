"""The timeline's rule lines: what changed, not what held still.

A rule that fires on every tick of a day is one "fired" line and, if it ever stops, one "cleared"
line, not 1,440 lines. What the rule made happen is a "performed" line per run of ticks with
operations (a run ends after ``gap`` seconds without one, 30 minutes by default, so a controller
such as suppress that adjusts a cpuset every few minutes reads as one line per busy stretch; the
line then says how many ticks and operations it covered and the last value written), and an
"evict" line per tick with evictions.
The counts the summary prints are the ones kept here, so the two cannot disagree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.model.operations import (
    EmitEvent,
    EvictPod,
    Operation,
    PublishNodeResource,
    SetNodeCondition,
    SetNodeTaint,
    WriteCgroup,
)
from engine.model.units import UnitError, parse_cpuset
from engine.sources.trace import clock_text, duration_text
from engine.tick import TickResult

# Planned on every tick a rule holds (the node keeps them), reported by their edges elsewhere.
STEADY_OPERATIONS = (SetNodeTaint, SetNodeCondition, PublishNodeResource)

Emit = Callable[[float, float, str, str, "str | None"], int]  # (now, offset, kind, message, rule) -> index


@dataclass
class _Run:
    """Consecutive ticks on which one rule's operations were performed."""

    index: int  # of its timeline line
    first: float
    last: float
    ticks: int = 1
    operations: int = 0
    last_value: str = ""


@dataclass
class RuleCounts:
    """What one rule (or engine step) did over the run: the summary's per-rule line."""

    fired_ticks: int = 0
    episodes: int = 0
    operations: dict[str, int] = field(default_factory=dict)  # operation kind -> count
    held: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "firedTicks": self.fired_ticks,
            "episodes": self.episodes,
            "operations": dict(sorted(self.operations.items())),
            "held": self.held,
        }


def operation_text(op: Operation) -> str:
    if isinstance(op, WriteCgroup):
        text = f"{op.path}/{op.file} = {op.value}"
        if op.file == "cpuset.cpus":
            try:
                n = len(parse_cpuset(op.value))
            except UnitError:
                return text
            text += f" ({n} CPU{'s' if n != 1 else ''})"
        return text
    if isinstance(op, EmitEvent):
        return f"event {op.reason}"
    target = getattr(op, "group", None) or getattr(op, "name", None) or ""
    return f"{op.kind} {target}".strip()


def _noun(kind: str, n: int) -> str:
    words = {"writeCgroup": "cgroup write", "emitEvent": "event", "evictPod": "eviction"}
    word = words.get(kind, f"{kind} operation")
    return f"{n} {word}{'s' if n != 1 else ''}"


class RuleChanges:
    """Fired/cleared edges, performed runs and evictions, per rule; the counts behind the summary."""

    def __init__(self, emit: Emit, amend: Callable[[int, str], None], gap: float, publish_only: set[str]):
        self.emit = emit
        self.amend = amend  # (event index, text to append)
        self.gap = gap
        self.publish_only = publish_only
        self.counts: dict[str, RuleCounts] = {}
        self.firing: dict[str, float] = {}  # rule -> offset it started firing
        self.runs: dict[str, _Run] = {}

    def _of(self, rule: str) -> RuleCounts:
        c = self.counts.get(rule)
        if c is None:
            c = self.counts[rule] = RuleCounts()
        return c

    def record(self, now: float, off: float, result: TickResult, why: Callable[[str], str]) -> list[EvictPod]:
        ev, plan = result.evaluation, result.plan
        fired = set(ev.fired)
        for rule in ev.fired:
            c = self._of(rule)
            c.fired_ticks += 1
            if rule not in self.firing:
                self.firing[rule] = off
                c.episodes += 1
                if rule not in self.publish_only:
                    kinds = sorted({i.kind for i in ev.intents if i.provenance.rule == rule})
                    reason = why(rule)
                    self.emit(
                        now,
                        off,
                        "fired",
                        f"{rule} fired{f' ({reason})' if reason else ''}: {', '.join(kinds) or 'no intent'}",
                        rule,
                    )
        for rule in sorted(set(self.firing) - fired):
            began = self.firing.pop(rule)
            if rule not in self.publish_only:
                self.emit(now, off, "cleared", f"{rule} cleared after {duration_text(off - began)}", rule)
        for h in plan.held:
            self._of(h.intent.provenance.rule).held += 1
        evicted = [op for op in plan.operations if isinstance(op, EvictPod)]
        by_rule: dict[str, list[Operation]] = {}
        for op in plan.operations:
            rule = str(getattr(op, "rule", ""))
            c = self._of(rule)
            c.operations[op.kind] = c.operations.get(op.kind, 0) + 1
            if not isinstance(op, (EvictPod, *STEADY_OPERATIONS)):
                by_rule.setdefault(rule, []).append(op)
        for rule in sorted({op.rule for op in evicted}):
            mine = [op for op in evicted if op.rule == rule]
            held = [h for h in plan.held if h.intent.provenance.rule == rule and h.intent.kind == "evict"]
            msg = f"{rule} evicted {', '.join(pod_name(op) for op in mine)}"
            if held:
                msg += f"; {len(held)} held ({'; '.join(sorted({h.reason for h in held}))})"
            self.emit(now, off, "evict", msg, rule)
        for rule, ops in by_rule.items():
            self._performed(now, off, rule, ops)
        for rule in [r for r, run in self.runs.items() if r not in by_rule and off - run.last >= self.gap]:
            self._close(rule)
        return evicted

    def _performed(self, now: float, off: float, rule: str, ops: Sequence[Operation]) -> None:
        run = self.runs.get(rule)
        if run is not None and off - run.last < self.gap:
            run.last = off
            run.ticks += 1
            run.operations += len(ops)
            run.last_value = operation_text(ops[-1])
            return
        if run is not None:
            self._close(rule)
        kinds: dict[str, int] = {}
        for op in ops:
            kinds[op.kind] = kinds.get(op.kind, 0) + 1
        shown = operation_text(ops[0]) + (f" and {len(ops) - 1} more" if len(ops) > 1 else "")
        counted = ", ".join(_noun(k, n) for k, n in sorted(kinds.items()))
        index = self.emit(now, off, "performed", f"{rule} performed {counted}: {shown}", rule)
        self.runs[rule] = _Run(index, off, off, 1, len(ops), operation_text(ops[-1]))

    def _close(self, rule: str) -> None:
        run = self.runs.pop(rule)
        if run.ticks > 1:
            self.amend(
                run.index,
                f"; then again on {run.ticks - 1} more tick(s) until {clock_text(run.last)} "
                f"({run.operations} operations in all; last {run.last_value})",
            )

    def finish(self) -> None:
        for rule in list(self.runs):
            self._close(rule)

    def summary(self) -> dict[str, Any]:
        return {rule: c.to_dict() for rule, c in sorted(self.counts.items())}


def pod_name(op: EvictPod) -> str:
    return f"{op.namespace}/{op.name}" if op.namespace else op.name
