"""What one simulated tick decided, as comparable data: the rules that fired and the operations the
plan made (kind, target, value, rule), plus what the guards held back. Two runs of one trace under
two policies decide the same at a tick when these are equal (``qosd simulate --baseline``)."""

from __future__ import annotations

from typing import Any

from engine.tick import TickResult

Decision = tuple[Any, ...]


def decision(result: TickResult) -> Decision:
    ops = tuple(
        sorted(
            (
                op.kind,
                str(getattr(op, "path", None) or getattr(op, "name", None) or getattr(op, "key", "") or ""),
                str(getattr(op, "file", "") or ""),
                str(getattr(op, "value", None) or getattr(op, "quantity", None) or ""),
                str(getattr(op, "rule", "")),
            )
            for op in result.plan.operations
        )
    )
    held = tuple(
        sorted((h.intent.kind, h.intent.target, h.intent.provenance.rule, h.reason) for h in result.plan.held)
    )
    return (tuple(sorted(result.evaluation.fired)), ops, held)


def only_in(a: Decision, b: Decision) -> str:
    """What ``a`` decided that ``b`` did not (rules fired, operations, holds), in a few words; "nothing"
    when ``a`` is contained in ``b``."""
    fired = sorted(set(a[0]) - set(b[0]))
    ops = [op for op in a[1] if op not in b[1]]
    held = [h for h in a[2] if h not in b[2]]
    parts = []
    if fired:
        parts.append(f"fired {', '.join(fired)}")
    if ops:
        shown = "; ".join(_op(op) for op in ops[:4])
        parts.append(shown + (f"; +{len(ops) - 4} more" if len(ops) > 4 else ""))
    if held:
        parts.append(f"held {', '.join(f'{k} {t} ({r}: {why})' for k, t, r, why in held[:3])}")
    return "; ".join(parts) or "nothing"


def _op(op: tuple[str, str, str, str, str]) -> str:
    kind, target, file, value, rule = op
    return f"{kind} {target}{'/' + file if file else ''}{' = ' + value if value else ''} ({rule})"
