"""The text output of ``qosd simulate``: the summary and the timeline."""

from __future__ import annotations

import textwrap

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
    lines.append(
        f"  {'suppressions':<20}{sup['performed']} performed, {sup['wantedButNotPerformed']} wanted but not "
        "performed"
    )
    lines.extend(f"  {'':<20}{line}" for line in textwrap.wrap(sup["note"], 86))
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
