"""``qosd simulate --plot``: utilization, reclaim, evictions and SLO risk as a PNG (matplotlib, optional)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine.config.policy import Policy
from engine.explain.provenance import OP_WORDS
from engine.features.rules.conditions import comparisons
from engine.features.suppress.spec import SuppressSpec
from engine.simulate.report import policy_names
from engine.simulate.result import Simulation, TickNumbers
from engine.sources.trace import (
    GiB,
)


def plot(sim: Simulation, path: Path) -> Any:
    """Utilization without/with reclaim, published capacity against what batch asked for and used,
    evictions and SLO-risk shading, on one hours axis (PNG).

    Uses matplotlib's object API with the Agg canvas: no display, no pyplot global state."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    nums = sim.numbers
    hours = [n.offset / 3600.0 for n in nums]
    end = sim.trace.duration / 3600.0
    if nums:  # step plots need the end of the last tick as a final point
        hours.append(end)
    fig = Figure(figsize=(14, 12), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(4, 1, sharex=True, height_ratios=[3, 3, 2.2, 2.2])
    s = sim.summary
    u = s["utilizationPercent"]
    risk = s["sloRisk"]
    th = risk["thresholds"]
    risk_color = "#d62728"
    with_color, without_color, cpu_color, mem_color = "#2ca02c", "#1f77b4", "#9467bd", "#ff7f0e"
    evictions = [(n.offset / 3600.0, e["pod"]) for n in nums for e in n.evicted]

    def series(values: Sequence[float | None]) -> list[float]:
        out = [math.nan if v is None else v for v in values]
        return [*out, out[-1]] if out else out

    rule_lines = rule_thresholds(sim.policy)
    rule_colors = ("#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79")
    for ax, res, key_wo, key_w, thresh in (
        (axes[0], "CPU", "cpu_without", "cpu_with", th["cpuPercent"]),
        (axes[1], "Memory", "memory_without", "memory_with", th["memoryPercent"]),
    ):
        for i, (rule, what, value) in enumerate(rule_lines[res.lower()]):
            ax.axhline(
                value,
                color=rule_colors[i % len(rule_colors)],
                linestyle="-.",
                linewidth=1,
                label=f"rule {rule}: {what} {value:g}%",
            )
        without = series([getattr(n, key_wo) for n in nums])
        with_ = series([getattr(n, key_w) for n in nums])
        _shade(ax, nums, "risk_with", res.lower(), risk_color)
        ax.fill_between(
            hours,
            without,
            with_,
            step="post",
            color=with_color,
            alpha=0.2,
            linewidth=0,
            label="batch admitted by reclaim",
        )
        ax.step(
            hours, with_, where="post", color=with_color, linewidth=1.2, label="with reclaim (node total)"
        )
        ax.step(
            hours,
            without,
            where="post",
            color=without_color,
            linewidth=1.2,
            label="without reclaim (online + system)",
        )
        ax.axhline(
            thresh, color=risk_color, linestyle="--", linewidth=1, label=f"SLO risk threshold {thresh:g}%"
        )
        ax.set_ylim(0, 108)
        ax.set_ylabel(f"{res} utilization\n(% of node capacity)")
        ax.grid(True, alpha=0.3)
        if evictions:
            ax.plot(
                [h for h, _ in evictions],
                [104.0] * len(evictions),
                linestyle="none",
                marker="v",
                color="black",
                markersize=7,
            )
        handles, _ = ax.get_legend_handles_labels()
        minutes = risk["withReclaim"][f"{res.lower()}Minutes"]
        handles += [
            Patch(color=risk_color, alpha=0.15, label=f"{res} at SLO risk with reclaim ({minutes:g} min)")
        ]
        if evictions:
            handles.append(
                Line2D(
                    [],
                    [],
                    linestyle="none",
                    marker="v",
                    color="black",
                    label=f"eviction ({len(evictions)} in all)",
                )
            )
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
    names = sim.published_names
    for ax, kind, color, scale, unit, requested, used in (
        (axes[2], "cpu", cpu_color, 1.0, "cores", "batch_requested_cpu", "batch_cpu"),
        (axes[3], "memory", mem_color, GiB, "GiB", "batch_requested_memory", "batch_memory"),
    ):
        pub = [n.published.get(kind) for n in nums]
        ax.fill_between(
            hours,
            0,
            series([getattr(n, used) / scale for n in nums]),
            step="post",
            color=color,
            alpha=0.2,
            linewidth=0,
            label=f"batch {kind} in use",
        )
        ax.step(
            hours,
            series([getattr(n, requested) / scale for n in nums]),
            where="post",
            color=color,
            linestyle=":",
            linewidth=1.4,
            label=f"batch {kind} requested (running pods)",
        )
        ax.step(
            hours,
            series([None if v is None else v / scale for v in pub]),
            where="post",
            color=color,
            linewidth=1.5,
            label=f"published {names.get(kind, kind)}",
        )
        ax.set_ylim(bottom=0)
        ax.set_ylabel(f"reclaimed {kind}\n({unit})")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
    for ax in axes:
        for h, _ in evictions:
            ax.axvline(h, color="black", linewidth=0.7, alpha=0.35)
    axes[-1].set_xlim(0, end)
    tick = 1 if end <= 12 else 2 if end <= 48 else 6
    ticks = [float(h) for h in range(0, int(end) + 1, tick)]
    axes[-1].set_xticks(ticks, [clock_label(sim.trace.start, h * 3600.0, end > 24) for h in ticks])
    axes[-1].set_xlabel("time of day (UTC, from the trace's start)")
    fig.suptitle(
        f"qosd simulate: {sim.trace.name}, policy {policy_names(sim.policy)} ({sim.policy.short_hash})\n"
        f"mean CPU {u['cpu']['withoutReclaim']['mean']:.0f}% → {u['cpu']['withReclaim']['mean']:.0f}% and "
        f"memory {u['memory']['withoutReclaim']['mean']:.0f}% → {u['memory']['withReclaim']['mean']:.0f}% "
        f"with reclaim; {s['evictions']['total']} evictions; minutes at SLO risk "
        f"{risk['withoutReclaim']['minutes']:g} without → {risk['withReclaim']['minutes']:g} with reclaim",
        fontsize=12,
    )
    fig.savefig(str(path))
    return fig  # the matplotlib Figure, for whoever wants to look inside


def _shade(ax: Any, nums: Sequence[TickNumbers], attr: str, res: str, color: str) -> None:
    start: float | None = None
    for n in nums:
        on = res in getattr(n, attr)
        if on and start is None:
            start = n.offset
        elif not on and start is not None:
            ax.axvspan(start / 3600.0, n.offset / 3600.0, color=color, alpha=0.15, linewidth=0)
            start = None
    if start is not None and nums:
        last = nums[-1]
        ax.axvspan(
            start / 3600.0, (last.offset + last.duration) / 3600.0, color=color, alpha=0.15, linewidth=0
        )


def plot_available() -> str | None:
    """None when matplotlib can be imported, else what to tell the user."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "--plot needs matplotlib, which is not installed; install it with: pip install 'qosd[plot]'"
    return None


def clock_label(start: float, offset: float, with_date: bool) -> str:
    """The wall-clock time of a trace offset (UTC): ``13:00``, or ``11-14 13:00`` on a trace of days."""
    try:
        when = datetime.fromtimestamp(start + offset, UTC)
    except (OverflowError, OSError, ValueError):
        return f"+{offset / 3600.0:g}h"
    return when.strftime("%m-%d %H:%M" if with_date else "%H:%M")


CPU_FACTS = ("node.cpu.usage_percent",)
MEMORY_FACTS = ("node.memory.usage_percent",)


def rule_thresholds(policy: Policy) -> dict[str, list[tuple[str, str, float]]]:
    """(rule, what, percent) per panel: the node-level utilization thresholds of the policy's rules
    (``when`` comparisons on node CPU or memory usage percent) and its suppress thresholds, so the
    plot shows where each rule acts against the curve it reads."""
    out: dict[str, list[tuple[str, str, float]]] = {"cpu": [], "memory": []}
    for rule in policy.rules:
        for c in comparisons(rule.when):
            panel = "cpu" if c.fact in CPU_FACTS else "memory" if c.fact in MEMORY_FACTS else None
            numeric = isinstance(c.value, int | float) and not isinstance(c.value, bool)
            if panel is not None and numeric and c.op in ("gt", "gte", "lt", "lte"):
                entry = (rule.name, f"acts at {c.fact} {OP_WORDS[c.op]}", float(c.value))
                if entry not in out[panel]:
                    out[panel].append(entry)
        for a in rule.actions:
            if isinstance(a.spec, SuppressSpec):
                out["cpu"].append((rule.name, "suppresses batch CPU above", float(a.spec.threshold_percent)))
    return out
