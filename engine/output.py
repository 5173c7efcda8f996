"""The table of one tick (``qosd eval``'s text output), in the units people read: GiB, cores, percent
(engine.model.units formats every amount, as ``qosd explain`` does). Values an adapter would write
are shown exactly, with the amount beside them: ``quantity=5600 (5.6 cores)``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.explain.provenance import observation_text
from engine.model.intents import CgroupIntent, EvictIntent, NodeIntent, step_description
from engine.model.operations import EvictPod, PublishNodeResource, WriteCgroup
from engine.model.units import human_bytes, num, resource_amount, with_unit
from engine.tick import TickResult

BYTE_FILES = ("memory.min", "memory.low", "memory.high", "memory.max", "memory.limit_in_bytes")


def _why(i: Any) -> str:
    """What a rule saw (its comparisons that held), then what the intent carries."""
    met = [observation_text(o.to_dict()) for o in i.provenance.conditions if o.met]
    parts = ["; ".join(met)] if met else []
    if isinstance(i, EvictIntent):
        resource = i.release.resource if i.release else "memory"
        text = f"rank {i.rank}"
        candidates = i.provenance.inputs.get("candidates")
        if isinstance(candidates, int):
            text += f" of {candidates} eligible"
        text += f", frees {resource_amount(i.credit, resource)}"
        if i.release:
            text += f" toward {resource_amount(i.release.target, resource)} ({i.release.formula})"
        parts.append(text)
    elif isinstance(i, NodeIntent) and i.kind == "publish":
        value = i.params.get("value")
        shown = "withdrawn" if value is None else with_unit(value, str(i.params.get("unit") or ""))
        parts.append(f"{i.params.get('resource')} = {shown}")
    elif isinstance(i, CgroupIntent):
        parts.append(f"{i.file} = {_cgroup_value(i.file, i.value)}")
    return "; ".join(parts) or "no condition"


def _cgroup_value(file: str, value: str) -> str:
    """A cgroup file value as written, with its size beside it for byte-valued memory files."""
    if file in BYTE_FILES and value.strip().isdigit():
        return f"{value} ({human_bytes(int(value))})"
    return value


def _published(quantity: str, name: str) -> str:
    """A published quantity as sent (milli-cores or bytes), with its amount beside it."""
    return f"{quantity} ({resource_amount(float(quantity), name)})" if quantity.isdigit() else quantity


def _operation(op: Any) -> str:
    fields = {k: v for k, v in op.to_dict().items() if k != "kind" and v is not None}
    text = ", ".join(f"{k}={v}" for k, v in fields.items())
    if isinstance(op, PublishNodeResource):
        if op.quantity is not None and op.quantity.isdigit():
            text = text.replace(f"quantity={op.quantity}", f"quantity={_published(op.quantity, op.name)}")
        if op.zones:
            zones = "; ".join(f"{zone} {_published(q, op.name)}" for zone, q in op.zones)
            text = text[: text.index(", zones=")] + f", zones=[{zones}]"
    elif isinstance(op, WriteCgroup) and op.file in BYTE_FILES:
        text = text.replace(f"value={op.value}", f"value={_cgroup_value(op.file, op.value)}")
    return f"  {op.kind}: {text}"


def _attributed(rule: str) -> str:
    step = step_description(rule)
    return f"by {step}" if step is not None else f"rule {rule}"


def format_table(result: TickResult) -> str:
    ev = result.evaluation
    lines = [f"policy {ev.policy_hash[:12]} generation {ev.generation} at t={num(ev.time)}"]
    lines.append(f"rules fired: {', '.join(ev.fired) or 'none'}")
    if ev.intents:
        lines.append("")
        lines.append(f"{'INTENT':<10} {'TARGET':<32} {'BY':<32} WHY")
        for i in ev.intents:
            mode = " (audit)" if i.provenance.audit else ""
            lines.append(f"{i.kind:<10} {i.target:<32} {i.provenance.rule + mode:<32} {_why(i)}")
    if result.plan.operations:
        lines.append("")
        lines.append("OPERATIONS")
        lines.extend(_operation(op) for op in result.plan.operations)
    for h in result.plan.held:
        lines.append(f"held: {h.intent.kind} {h.intent.target} ({h.intent.provenance.rule}): {h.reason}")
    for s in ev.skipped:
        lines.append(f"skipped {_attributed(s.rule)}: {s.reason}")
    for w in ev.workload_issues:
        lines.append(f"workload {w.name} ({w.class_name}): " + "; ".join(w.errors))
    if ev.oom_priorities:
        # One line per value and source, not per pod: a node runs hundreds of pods.
        groups: dict[tuple[int, str, str], list[str]] = {}
        for o in ev.oom_priorities:
            groups.setdefault((o.value, o.class_name, o.source), []).append(o.pod)
        lines.append("")
        lines.append("OOM PRIORITY (Katalyst; reported, no BPF map is written)")
        for (value, cls, source), pods in sorted(groups.items(), key=lambda kv: (-kv[0][0], kv[0][1])):
            note = " (ignored)" if value == -300 else ""
            lines.append(f"  {value}{note} {cls}, {source}: {', '.join(pods)}")
    return "\n".join(lines) + "\n"


def _intent_of(op: Any, intents: Any) -> Any:
    """The intent an operation was planned from (the same rule and target)."""
    rule = getattr(op, "rule", None)
    for i in intents:
        if i.provenance.rule != rule:
            continue
        if isinstance(op, WriteCgroup) and (getattr(i, "path", None), getattr(i, "file", None)) == (
            op.path,
            op.file,
        ):
            return i
        if isinstance(i, EvictIntent) and getattr(op, "uid", None) == i.uid:
            return i
        if (
            isinstance(op, PublishNodeResource)
            and isinstance(i, NodeIntent)
            and i.params.get("resource") == op.name
        ):
            return i
        if not isinstance(op, WriteCgroup | PublishNodeResource) and not isinstance(
            i, EvictIntent | CgroupIntent
        ):
            return i
    return None


VERBS = {
    "writeCgroup": "write",
    "evictPod": "evict",
    "publishNodeResource": "publish",
    "setNodeTaint": "taint",
    "setNodeCondition": "set condition",
    "emitEvent": "emit event",
}


def format_plan(result: TickResult, unavailable: Mapping[str, str] | None = None) -> str:
    """``qosd run --once --dry-run``: what the tick would do, an operation a line with its reason,
    then what the guards would hold back and what was skipped. Nothing of it was executed.
    ``unavailable`` maps the operation kinds this node cannot carry out to why (standalone mode has
    no Kubernetes API): those read "would skip", so the plan does not promise what a run refuses."""
    unavailable = unavailable or {}
    ev, plan = result.evaluation, result.plan
    ops = plan.operations
    lines = [
        f"Plan of one tick (dry run: nothing written, evicted or published), policy {ev.policy_hash[:12]} "
        f"generation {ev.generation}: {len(ops)} operation(s), {len(plan.held)} held, "
        f"{len(ev.skipped)} skipped."
    ]
    for op in ops:
        verb = VERBS.get(op.kind, op.kind)
        if isinstance(op, WriteCgroup):
            what = f"{op.path}/{op.file} = {_cgroup_value(op.file, op.value)}"
        elif isinstance(op, PublishNodeResource):
            amount = (
                ""
                if op.quantity is None or not op.quantity.isdigit()
                else f" ({resource_amount(float(op.quantity), op.name)})"
            )
            what = f"{op.name} = {op.quantity if op.quantity is not None else 'withdrawn'}{amount}"
            if op.zones:
                what += f" (zones: {', '.join(f'{z} {q}' for z, q in op.zones)})"
        elif isinstance(op, EvictPod):
            what = f"{op.namespace}/{op.name}" if op.namespace else op.name
        else:
            what = _operation(op).split(": ", 1)[1]
        why = _plan_why(op, _intent_of(op, ev.intents))
        refused = unavailable.get(op.kind)
        if refused is not None:
            lines.append(f"  would skip     {verb} {what}: {refused} ({why})")
        else:
            lines.append(f"  would {verb:<8} {what}  ({why})")
    for h in plan.held:
        lines.append(f"  held     {h.intent.kind} {h.intent.target} ({h.intent.provenance.rule}): {h.reason}")
    for s in ev.skipped:
        lines.append(f"  skipped {_attributed(s.rule)}: {s.reason}")
    if not ops and not plan.held:
        lines.append("  nothing to do: every value qosd manages already holds what the policy wants")
    return "\n".join(lines) + "\n"


def _plan_why(op: Any, intent: Any) -> str:
    """Who asked for an operation and why: a rule with the comparisons that held (and, for an
    eviction, its rank and release; for a publish, its formula), or an engine step and where the
    class or pool it applies is written."""
    by = str(getattr(op, "rule", ""))
    step = step_description(by)
    if intent is None:
        return step if step is not None else f"rule {by}"
    if step is not None:
        return f"{step}, {intent.provenance.source}"
    met = [observation_text(o.to_dict()) for o in intent.provenance.conditions if o.met]
    parts = ["; ".join(met)] if met else []
    if isinstance(intent, NodeIntent) and intent.kind == "publish":
        parts.append(f"formula {intent.params.get('formula')}")
    elif isinstance(intent, EvictIntent):
        parts.append(_why(intent).split("; ")[-1])
    return f"rule {by}" + (f": {'; '.join(parts)}" if parts else "")
