"""``qosd simulate --baseline OLD... --rules NEW... TRACE``: one trace under two policies, and what
changes, as ``terraform plan`` shows a change to infrastructure before it is applied.

Both runs use the same trace, node and options; each is closed loop, so a decision that differs
early (a pod evicted at 10:32 under the new policy only) changes what both runs see afterwards, which
is exactly the consequence a reviewer wants to see. What is compared:

- per tick, the decisions (rules fired, operations planned with their targets and values, what the
  guards held): how many ticks differ, and the first one, in words;
- the outcomes: evictions (total and per rule), evict/admit loops, suppressed cores, published CPU
  and memory, minutes at SLO risk, batch work;
- per rule: ticks fired and operations by kind, for the rules whose counts changed.

The document (``kind: SimulationDiff``) is what ``-o json`` prints for a CI bot; ``differ`` is what
makes ``qosd simulate`` exit 3, so a pipeline can require a review when decisions change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.resources import API_VERSION
from engine.simulate.decision import only_in
from engine.simulate.report import policy_names
from engine.simulate.result import Simulation
from engine.sources.trace import clock_text
from engine.sources.trace import describe as describe_trace

EXIT_DIFFER = 3


def _pair(base: float | int | None, new: float | int | None, unit: str = "") -> dict[str, Any]:
    delta = None if base is None or new is None else round(new - base, 2)
    return {"baseline": base, "new": new, "change": delta, "unit": unit}


def _rules(base: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for rule in sorted(set(base) | set(new)):
        b, n = base.get(rule) or {}, new.get(rule) or {}
        kinds = sorted(set(b.get("operations") or {}) | set(n.get("operations") or {}))
        ops = {
            k: _pair((b.get("operations") or {}).get(k, 0), (n.get("operations") or {}).get(k, 0))
            for k in kinds
        }
        fired = _pair(b.get("firedTicks", 0), n.get("firedTicks", 0))
        if fired["change"] or any(o["change"] for o in ops.values()):
            out[rule] = {"firedTicks": fired, "operations": ops}
    return out


def compare(base: Simulation, new: Simulation) -> dict[str, Any]:
    """The ``kind: SimulationDiff`` document of two runs of one trace."""
    ticks = min(len(base.decisions), len(new.decisions))
    differing = [i for i in range(ticks) if base.decisions[i] != new.decisions[i]]
    first = None
    if differing:
        i = differing[0]
        offset = base.numbers[i].offset
        first = {
            "tick": i,
            "offset": offset,
            "clock": clock_text(offset),
            "baselineOnly": only_in(base.decisions[i], new.decisions[i]),
            "newOnly": only_in(new.decisions[i], base.decisions[i]),
        }
    b, n = base.summary, new.summary
    published = {
        kind: _pair(
            (b["reclaimed"]["published"].get(kind) or {}).get("mean"),
            (n["reclaimed"]["published"].get(kind) or {}).get("mean"),
            "cores" if kind == "cpu" else "GiB",
        )
        for kind in sorted(set(b["reclaimed"]["published"]) | set(n["reclaimed"]["published"]))
    }
    by_rule = sorted(set(b["evictions"]["byRule"]) | set(n["evictions"]["byRule"]))
    return {
        "apiVersion": API_VERSION,
        "kind": "SimulationDiff",
        "trace": {"source": base.trace.source, "name": base.trace.name, "samples": len(base.trace.samples)},
        "baseline": {"policy": base.policy.hash, "documents": [d.name for d in base.policy.documents]},
        "new": {"policy": new.policy.hash, "documents": [d.name for d in new.policy.documents]},
        "differ": bool(differing),
        "ticks": ticks,
        "differingTicks": len(differing),
        "firstDivergence": first,
        "changes": {
            "evictions": {
                **_pair(b["evictions"]["total"], n["evictions"]["total"]),
                "byRule": {
                    r: _pair(b["evictions"]["byRule"].get(r, 0), n["evictions"]["byRule"].get(r, 0))
                    for r in by_rule
                },
            },
            "evictAdmitLoops": _pair(b["loops"]["readmitted"], n["loops"]["readmitted"]),
            "suppressedCores": _pair(
                b["suppressions"]["suppressedCores"]["mean"],
                n["suppressions"]["suppressedCores"]["mean"],
                "cores",
            ),
            "published": published,
            "sloRiskMinutes": _pair(
                b["sloRisk"]["withReclaim"]["minutes"], n["sloRisk"]["withReclaim"]["minutes"], "min"
            ),
            "batchCpuCoreHours": _pair(
                b["reclaimed"]["batchCpuCoreHours"], n["reclaimed"]["batchCpuCoreHours"], "core-hours"
            ),
            "batchDemandMetPercent": _pair(
                b["reclaimed"]["batchDemandMetPercent"], n["reclaimed"]["batchDemandMetPercent"], "%"
            ),
            "rules": _rules(b["rules"], n["rules"]),
        },
    }


def _num(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v:g}" if isinstance(v, float) else str(v)


def _change(v: Any) -> str:
    if v is None:
        return "-"
    if v == 0:
        return "0"
    return f"{v:+g}"


def format_diff(doc: Mapping[str, Any], base: Simulation, new: Simulation) -> str:
    """The plan in words: which policies, whether and where decisions differ, then a table."""
    lines = [
        f"qosd simulate --baseline: {describe_trace(base.trace)}",
        f"  baseline  {policy_names(base.policy)} ({base.policy.short_hash})",
        f"  new       {policy_names(new.policy)} ({new.policy.short_hash})",
        "",
    ]
    first = doc["firstDivergence"]
    if first is None:
        lines.append(f"Decisions are the same on all {doc['ticks']} ticks.")
    else:
        lines += [
            f"Decisions differ on {doc['differingTicks']} of {doc['ticks']} ticks; first at {first['clock']} "
            f"(tick {first['tick']}):",
            f"  baseline only  {first['baselineOnly']}",
            f"  new only       {first['newOnly']}",
        ]
    c = doc["changes"]
    rows: list[tuple[str, dict[str, Any]]] = [("evictions", c["evictions"])]
    rows += [(f"  by {rule}", p) for rule, p in c["evictions"]["byRule"].items()]
    rows += [
        ("evict/admit loops", c["evictAdmitLoops"]),
        ("suppressed cores (mean)", c["suppressedCores"]),
    ]
    rows += [(f"published {kind} (mean {p['unit']})", p) for kind, p in c["published"].items()]
    rows += [
        ("minutes at SLO risk", c["sloRiskMinutes"]),
        ("batch core-hours", c["batchCpuCoreHours"]),
        ("batch demand met (%)", c["batchDemandMetPercent"]),
    ]
    lines += ["", f"{'':<34}{'baseline':>12}{'new':>12}{'change':>12}"]
    lines += [
        f"{label:<34}{_num(p['baseline']):>12}{_num(p['new']):>12}{_change(p['change']):>12}"
        for label, p in rows
    ]
    if c["rules"]:
        lines += ["", "rules whose activity changed (baseline -> new):"]
        for rule, r in c["rules"].items():
            f = r["firedTicks"]
            ops = ", ".join(
                f"{k} {_num(p['baseline'])} -> {_num(p['new'])}"
                for k, p in r["operations"].items()
                if p["change"]
            )
            lines.append(
                f"  {rule}: fired on {f['baseline']} -> {f['new']} ticks" + (f"; {ops}" if ops else "")
            )
    lines += [
        "",
        "exit 3: decisions differ (review before rollout)"
        if doc["differ"]
        else "exit 0: no decision differs",
    ]
    return "\n".join(lines) + "\n"
