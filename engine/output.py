"""Human-readable tables of a tick (``qosd eval --output table``)."""

from __future__ import annotations

from engine.model.intents import EvictIntent
from engine.tick import TickResult


def _num(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def format_table(result: TickResult) -> str:
    ev = result.evaluation
    lines = [f"policy {ev.policy_hash[:12]} generation {ev.generation} at t={_num(ev.time)}"]
    lines.append(f"rules fired: {', '.join(ev.fired) or 'none'}")
    if ev.intents:
        lines.append("")
        lines.append(f"{'INTENT':<10} {'TARGET':<32} {'RULE':<32} WHY")
        for i in ev.intents:
            met = [o for o in i.provenance.conditions if o.met]
            why = (
                "; ".join(f"{o.fact}={_num(o.observed)} {o.op} {_num(o.threshold)}" for o in met)
                or "no condition"
            )
            if isinstance(i, EvictIntent):
                why += f"; rank {i.rank}, credit {_num(i.credit)}"
                if i.release:
                    why += f", release {_num(i.release.target)} = {i.release.formula}"
            mode = " (audit)" if i.provenance.audit else ""
            lines.append(f"{i.kind:<10} {i.target:<32} {i.provenance.rule + mode:<32} {why}")
    if result.plan.operations:
        lines.append("")
        lines.append("OPERATIONS")
        for op in result.plan.operations:
            lines.append(
                f"  {op.kind}: "
                + ", ".join(f"{k}={v}" for k, v in op.to_dict().items() if k != "kind" and v is not None)
            )
    for h in result.plan.held:
        lines.append(f"held: {h.intent.kind} {h.intent.target} ({h.intent.provenance.rule}): {h.reason}")
    for s in ev.skipped:
        lines.append(f"skipped: {s.rule}: {s.reason}")
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
