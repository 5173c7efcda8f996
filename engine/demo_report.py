"""What ``qosd demo`` prints about its runs: the live rounds as medians with their spread and a
verdict that says plainly when the machine is too noisy to conclude, and what the simulated day's
minutes at SLO risk mean. Apart from engine.demo, which runs the workloads and the cgroups."""

from __future__ import annotations

import math
import os
import statistics
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

NOISY = 0.5
"""The probe alone varying by more than this (max/min - 1 of its p99 over the rounds) means the
machine's own load moves the tail more than colocation could be judged by."""


@dataclass(frozen=True)
class Spread:
    """Per-round values of one figure: the median, and the range the rounds spanned."""

    values: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else 0.0

    @property
    def low(self) -> float:
        return min(self.values, default=0.0)

    @property
    def high(self) -> float:
        return max(self.values, default=0.0)

    def text(self, unit: str = "", digits: int = 0) -> str:
        if len(self.values) < 2:
            return f"{self.median:.{digits}f}{unit}"
        return f"{self.median:.{digits}f}{unit} ({self.low:.{digits}f}-{self.high:.{digits}f})"


def verdict(alone: Spread, unmanaged: Spread, managed: Spread, load: str) -> str:
    """What the rounds allow one to say about qosd, plainly: it helped, it did not, or this machine
    is too noisy to tell (the probe alone varied too much, or the rounds of the two overlap)."""
    if len(alone.values) < 2:
        return (
            "One round only: there is no spread to judge this machine's noise by, so this is no "
            "conclusion; run with --repeat 3 or more."
        )
    noise = alone.high / alone.low - 1 if alone.low > 0 else math.inf
    if noise > NOISY:
        return (
            f"This machine is too noisy to conclude: the probe alone varied by {noise:.0%} between "
            f"rounds ({load}). Run again when it is idle, or with a longer --duration."
        )
    with_q = f"with qosd {managed.low:.2f}-{managed.high:.2f}x alone"
    without = f"without {unmanaged.low:.2f}-{unmanaged.high:.2f}x"
    if managed.high < unmanaged.low:
        return f"qosd kept the probe's p99 lower in every round ({with_q}, {without})."
    if managed.low > unmanaged.high:
        return f"qosd made the probe's p99 worse in every round ({with_q}, {without}); please report it."
    return (
        f"The rounds overlap ({with_q}, {without}): this machine is too noisy to conclude whether qosd "
        "helped here. Run again when it is idle, or with more --repeat."
    )


def _load_text() -> str:
    try:
        one, _, _ = os.getloadavg()
    except OSError:
        return f"{os.cpu_count() or 1} CPUs"
    return f"load average {one:.1f} on {os.cpu_count() or 1} CPUs"


def report(runs: Mapping[str, Sequence[Any]], names: Sequence[str], out: Any) -> None:
    """The decisions of the first managed run, a table of medians with their spread, the verdict."""
    alone_runs, managed_runs = runs[names[0]], runs[names[2]]
    managed_decisions = next((r.decisions for r in managed_runs if r.decisions), ())
    print("\nWhat qosd decided (bundled default policy, standalone mode):", file=out)
    for d in managed_decisions or ("nothing to change",):
        print(f"  {d}", file=out)

    def p99(rs: Sequence[Any]) -> list[float]:
        return [float((r.probe or {}).get("p99_us", 0.0)) for r in rs]

    alone = p99(alone_runs)
    ratios = {
        n: Spread(tuple(p / a for p, a in zip(p99(runs[n]), alone, strict=False) if a > 0)) for n in names
    }
    print(
        f"\n{'run (median of rounds, range)':<26} {'p50 µs':>16} {'p99 µs':>20} {'p99 vs alone':>20} "
        f"{'batch chunks/s':>22}",
        file=out,
    )
    for n in names:
        rs = runs[n]
        p50 = Spread(tuple(float((r.probe or {}).get("p50_us", 0.0)) for r in rs))
        rates = tuple(float(r.batch["rate"]) for r in rs if r.batch)
        rate = Spread(rates).text() if rates else "-"
        print(
            f"{n:<26} {p50.text():>16} {Spread(tuple(p99(rs))).text():>20} {ratios[n].text('x', 2):>20} "
            f"{rate:>22}",
            file=out,
        )
    print(
        "\n" + verdict(Spread(tuple(alone)), ratios[names[1]], ratios[names[2]], _load_text()),
        file=out,
    )
    print("The recorded benchmark with targets: python -m bench.colocation.run (bench/RESULTS.md).", file=out)


def risk_note(sim: Any) -> str:
    """What the "minutes at SLO risk with reclaim" of a simulated day mean, from its own numbers:
    CPU above the threshold is batch at the lowest CPU weight filling the node; memory above it is
    real, and the eviction rules that never fired say why nothing removed it (the simulated node
    does not produce the kernel memory-pressure signals they read)."""
    from engine.features.rules.conditions import comparisons

    risk = sim.summary["sloRisk"]
    x, th = risk["withReclaim"], risk["thresholds"]
    if not x["minutes"]:
        return ""
    lines = [
        f"Reading the {x['minutes']:g} minutes at SLO risk with reclaim (node CPU above "
        f"{th['cpuPercent']:g}% for {x['cpuMinutes']:g} min, memory above {th['memoryPercent']:g}% for "
        f"{x['memoryMinutes']:g} min; {risk['withoutReclaim']['minutes']:g} without reclaim):"
    ]
    if x["cpuMinutes"]:
        lines.append(
            "- CPU: batch pods run at the lowest CPU weight (cpu.shares 2 / SCHED_IDLE) and yield to "
            "online work, in the simulation as on a node, so a full CPU is reclaim filling what online "
            "work leaves. What remains is interference the model does not see (caches, memory "
            "bandwidth); the live demo (root, cgroup v1) measures it on this machine."
        )
    if x["memoryMinutes"]:
        fired = {r for r, c in sim.summary["rules"].items() if c["firedTicks"]}
        silent = [
            (r.name, sorted({c.fact for c in comparisons(r.when)}))
            for r in sim.policy.rules
            if any(a.kind == "evict" for a in r.actions) and r.name not in fired and r.when is not None
        ]
        text = "- Memory does not yield: those minutes are a real risk."
        if silent:
            reads = "; ".join(f"{name} reads {', '.join(facts)}" for name, facts in silent)
            text += (
                f" This policy's memory evictions never fired ({reads}): they act on the kernel's "
                "memory-pressure signals (zone watermarks, PSI), which the simulated node does not "
                'produce (docs/simulate.md, "Not modelled"); on a node they evict batch pods as '
                "memory runs short. A rule on usage acts in the simulation too: compare "
                "`qosd simulate --trace examples/traces/tidal-day.yaml --profile koordinator`."
            )
        lines.append(text)
    return "\n".join(textwrap.fill(line, 100, subsequent_indent="  ") for line in lines)
