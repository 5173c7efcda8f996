"""The text output of ``qosd simulate``: the summary and the timeline."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.config.policy import Policy
from engine.simulate.result import Simulation
from engine.sources.trace import (
    clock_text,
    describe,
)


def policy_names(policy: Policy) -> str:
    """The documents that make the policy, e.g. ``qosd-koordinator + my-overlay``."""
    return " + ".join(d.name for d in policy.documents) or "(empty)"


def format_text(sim: Simulation, timeline: bool = True) -> str:
    t = sim.trace
    lines = [
        f"qosd simulate: {describe(t)}",
        f"policy {policy_names(sim.policy)} ({sim.policy.short_hash}) for node {sim.policy.node}; "
        f"published as {', '.join(f'{k}={v}' for k, v in sorted(sim.published_names.items())) or 'nothing'}",
    ]
    if timeline:
        lines.append("")
        lines.append(f"{'TIME':<9} {'EVENT':<8} DETAIL")
        for e in sim.events:
            lines.append(f"{clock_text(e.offset):<9} {e.kind:<8} {e.message}")
    s = sim.summary
    u = s["utilizationPercent"]
    r = s["reclaimed"]
    ev = s["evictions"]
    sup = s["suppressions"]
    risk = s["sloRisk"]
    lines += ["", f"SUMMARY ({s['ticks']} ticks, {clock_text(s['minutes'] * 60)} simulated)"]
    for res in ("cpu", "memory"):
        a, b = u[res]["withoutReclaim"], u[res]["withReclaim"]
        for label, x in ((f"{res} utilization", a), ("", b)):
            words = "without reclaim" if x is a else "with reclaim"
            lines.append(
                f"  {label:<20}{words:<16} mean {x['mean']:5.1f}%  p95 {x['p95']:5.1f}%  max {x['max']:5.1f}%"
            )
    for kind, p in r["published"].items():
        name = sim.published_names.get(kind, kind)
        lines.append(
            f"  {'published ' + kind:<20}{name}: mean {p['mean']:g} {p['unit']}, "
            f"min {p['min']:g}, max {p['max']:g}"
        )
    if not r["published"]:
        lines.append("  published: nothing (no publish operation in the plan; dry run or reclaim disabled?)")
    met = r["batchDemandMetPercent"]
    lines.append(
        f"  {'batch work':<20}{r['batchCpuCoreHours']:g} core-hours, "
        f"{r['batchMemoryGiBHours']:g} GiB-hours; "
        f"{r['batchPodsStarted']} pods started, {r['batchPodsFinished']} finished"
        + (f"; {met:g}% of demanded pod-time ran" if met is not None else "")
    )
    by_rule = ", ".join(f"{k} {v}" for k, v in sorted(ev["byRule"].items())) or "none"
    lines.append(f"  {'evictions':<20}{ev['total']} ({by_rule}); {ev['heldBack']} held back by guards")
    lines.append(f"  {'evict/admit loops':<20}{loops_text(s['loops'])}")
    lines.append(f"  {'suppressions':<20}{suppressions_text(sup)}")
    lines += [
        f"  {'rules':<20}{rule_line}" if i == 0 else f"  {'':<20}{rule_line}"
        for i, rule_line in enumerate(rule_lines(s["rules"]))
    ]
    th = risk["thresholds"]
    for label, words in (("withoutReclaim", "without reclaim"), ("withReclaim", "with reclaim")):
        x = risk[label]
        lines.append(
            f"  {'minutes at SLO risk':<20}{words:<16} {x['minutes']:g} min in {x['episodes']} episode(s) "
            f"(cpu > {th['cpuPercent']:g}%: {x['cpuMinutes']:g} min, memory > {th['memoryPercent']:g}%: "
            f"{x['memoryMinutes']:g} min)"
        )
    lines.append(f"  {'cgroup writes':<20}{s['cgroupWrites']}")
    lines.append(f"  {'runtime':<20}{s['runtimeSeconds']:.2f} s")
    return "\n".join(lines) + "\n"


def loops_text(loops: Mapping[str, Any]) -> str:
    """The summary line for admit-evict-admit loops."""
    n = loops["readmitted"]
    if not n:
        return "none (no evicted batch pod was admitted again)"
    by = ", ".join(f"{k} {v}" for k, v in loops["byTemplate"].items())
    return (
        f"{n} batch pod(s) admitted again after an eviction ({by}; median "
        f"{loops['medianMinutesToReadmission']:g} min later), of {loops['admitted']} admitted: the published "
        "amounts admit work the eviction rules then remove"
    )


def suppressions_text(sup: Mapping[str, Any]) -> str:
    if not sup["rules"]:
        return "none (the policy has no suppress rule)"
    cores = sup["suppressedCores"]
    allowed = sup["batchCpuAllowedCores"]
    text = (
        f"{', '.join(sup['rules'])} fired on {sup['firedTicks']} ticks and wrote {sup['writes']} cgroup "
        f"value(s); batch CPU held to {allowed['min']:g}-{allowed['max']:g} cores for "
        f"{sup['limitedMinutes']:g} min (mean {cores['mean']:g} cores suppressed)"
    )
    if sup["wantedButNotPerformed"]:
        text += f"; {sup['wantedButNotPerformed']} tick(s) matched without acting (see the skipped lines)"
    return text


def rule_lines(rules: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """A line per rule or engine step that fired or performed something: the timeline's counts."""
    out = []
    for rule, c in rules.items():
        ops = ", ".join(f"{n} {kind}" for kind, n in c["operations"].items()) or "no operation"
        fired = (
            f"fired on {c['firedTicks']} tick(s) in {c['episodes']} episode(s); " if c["firedTicks"] else ""
        )
        held = f"; {c['held']} held" if c["held"] else ""
        out.append(f"{rule}: {fired}{ops}{held}")
    return out or ["none fired"]
