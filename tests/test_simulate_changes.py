"""``qosd simulate`` says what changed and its summary agrees with its timeline (issue 18): a rule
that fires all day is one ``fired`` line, not 1,440; what a rule performed is counted once, in the
``performed`` lines and in the summary alike; suppression is modelled and reported as performed (the
summary once said "0 performed ... no suppress strategy yet" beside 1,375 writes from it); admit,
evict, admit again is counted and said; the plot draws each rule's threshold on a clock-time axis."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from engine.cli import main as cli_main
from engine.config.pipeline import build_policy, load_documents
from engine.config.policy import Policy
from engine.evaluate.engine import Engine
from engine.simulate.plot import clock_label, plot, rule_thresholds
from engine.simulate.result import Options, Simulation
from engine.simulate.run import simulate
from engine.sources.trace import read_trace
from tests.qosdcli import shipped_day_summary

ROOT = Path(__file__).resolve().parent.parent
DAY = ROOT / "examples" / "traces" / "tidal-day.yaml"
FIGHT = ROOT / "tests" / "data" / "evict-at-60.yaml"


def timeline(out: str) -> list[tuple[str, str, str]]:
    """(clock, kind, detail) of every timeline line of the text output."""
    body = out.split("TIME      EVENT    DETAIL\n", 1)[1].split("\n\nSUMMARY", 1)[0]
    return [
        (line[:9].strip(), line[10:].split(" ", 1)[0], line[10:].split(" ", 1)[1].strip())
        for line in body.splitlines()
    ]


def test_the_shipped_day_timeline_is_changes_and_the_summary_agrees(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli_main(["simulate", "--trace", str(DAY)]) == 0
    out = capsys.readouterr().out
    lines = timeline(out)
    kinds = Counter(kind for _, kind, _ in lines)
    # be-cpu-suppress fires on all 1440 ticks: one fired line, no cleared line.
    fired = [d for _, k, d in lines if k == "fired" and d.startswith("be-cpu-suppress fired")]
    assert len(fired) == 1
    assert len(lines) < 100, kinds
    summary = out.split("SUMMARY", 1)[1]
    assert "no suppress strategy" not in out and "0 performed" not in out
    m = re.search(
        r"be-cpu-suppress: fired on (\d+) tick\(s\) in (\d+) episode\(s\); (\d+) writeCgroup", summary
    )
    assert m is not None, summary
    assert int(m.group(1)) == 1440 and int(m.group(2)) == len(fired)
    # The performed lines of be-cpu-suppress add up to the writes the summary counts for it.
    total = 0
    for _, kind, detail in lines:
        if kind == "performed" and detail.startswith("be-cpu-suppress performed"):
            again = re.search(r"\((\d+) operations in all", detail)
            total += (
                int(again.group(1)) if again else int(re.search(r"performed (\d+) cgroup", detail).group(1))
            )  # type: ignore[union-attr]
    assert total == int(m.group(3)) > 0
    writes = re.search(r"suppressions\s+be-cpu-suppress fired on 1440 ticks and wrote (\d+) cgroup", summary)
    assert writes is not None and int(writes.group(1)) == total
    cgroup_writes = re.search(r"cgroup writes\s+(\d+)", summary)
    assert cgroup_writes is not None and int(cgroup_writes.group(1)) == total  # the only writer here
    # Every eviction is its own evict line, as many as the summary counts.
    evicted = sum(
        len(d.split(" evicted ", 1)[1].split(";")[0].split(", ")) for _, k, d in lines if k == "evict"
    )
    ev_total = re.search(r"evictions\s+(\d+) \(", summary)
    assert ev_total is not None and int(ev_total.group(1)) == evicted == 3


@pytest.fixture(scope="module")
def shipped_day() -> tuple[Policy, Simulation]:
    """The shipped day on the built-in policy, simulated once for the tests below that read it."""
    trace = read_trace(DAY)
    policy = build_policy(load_documents([]), trace.base.node)
    return policy, simulate(trace, Engine(policy), Options())


def test_counts_agree_in_the_simulation_document(shipped_day: tuple[Policy, Simulation]) -> None:
    """The same agreement in the data: each rule's fired edges are its episodes, each performed
    stretch's operations sum to the rule's count of non-eviction operations."""
    _, sim = shipped_day
    rules = sim.summary["rules"]
    for rule, counts in rules.items():
        edges = [e for e in sim.events if e.rule == rule and e.kind == "fired"]
        if rule != "publish-batch-resources":  # publish rules report through publish lines
            assert len(edges) == counts["episodes"], rule
    sup = sim.summary["suppressions"]
    assert (
        sup["writes"] == rules["be-cpu-suppress"]["operations"]["writeCgroup"] == sim.summary["cgroupWrites"]
    )
    allowed = [n.batch_cpu_allowed for n in sim.numbers]
    assert min(allowed) == sup["batchCpuAllowedCores"]["min"] < 32
    # batch CPU never exceeds what suppression allowed (the model holds it there)
    assert all(n.batch_cpu <= n.batch_cpu_allowed + 1e-9 for n in sim.numbers)


def test_admit_evict_admit_again_is_a_summary_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An overlay that evicts BE pods at 60% memory beside reclaim that publishes up to 65%: the
    scheduler admits what the eviction removes, again and again; the summary says so and the
    timeline has an admit line for each turn."""
    assert cli_main(["simulate", "--trace", str(DAY), "--rules", str(FIGHT)]) == 0
    out = capsys.readouterr().out
    m = re.search(r"evict/admit loops\s+(\d+) batch pod\(s\) admitted again after an eviction", out)
    assert m is not None, out.split("SUMMARY", 1)[1]
    admits = [d for _, k, d in timeline(out) if k == "admit"]
    assert int(m.group(1)) == len(admits) > 10
    assert all("(admit, evict, admit again)" in d for d in admits)
    assert "the published amounts admit work the eviction rules then remove" in out

    shared = shipped_day_summary()  # the README's line, which tests/test_docs.py runs too
    assert shared.returncode == 0, shared.stderr
    day = shared.stdout
    loops = re.search(r"evict/admit loops\s+(.*)", day)
    assert loops is not None and loops.group(1).startswith(("none", "2 batch pod(s)"))


def test_the_plot_draws_each_rules_threshold_on_clock_time(
    tmp_path: Path, shipped_day: tuple[Policy, Simulation]
) -> None:
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib (the qosd[plot] extra)")
    policy, sim = shipped_day
    lines = rule_thresholds(policy)
    assert ("be-memory-evict", "acts at node.memory.usage_percent >=", 70.0) in lines["memory"]
    assert ("be-cpu-suppress", "suppresses batch CPU above", 65.0) in lines["cpu"]
    assert clock_label(1699920000, 13.5 * 3600, False) == "13:30"  # the trace's start is 00:00 UTC
    assert clock_label(1699920000, 26 * 3600, True) == "11-15 02:00"
    # What the PNG holds: a line per rule threshold at its value, and clock times on the time axis.
    fig = plot(sim, tmp_path / "day.png")
    cpu, memory = fig.axes[0], fig.axes[1]
    labelled = {line.get_label(): line.get_ydata()[0] for ax in (cpu, memory) for line in ax.get_lines()}
    assert labelled["rule be-memory-evict: acts at node.memory.usage_percent >= 70%"] == 70.0
    assert labelled["rule be-cpu-suppress: suppresses batch CPU above 65%"] == 65.0
    ticks = [t.get_text() for t in fig.axes[-1].get_xticklabels()]
    assert ticks[:3] == ["00:00", "02:00", "04:00"]


def test_docs_describe_the_timeline_kinds_and_no_stale_suppress_note() -> None:
    text = (ROOT / "docs" / "simulate.md").read_text()
    assert "no suppress strategy" not in text and "has no strategy yet" not in text
    for kind in ("`fired`", "`cleared`", "`performed`", "`evict`", "`admit`", "`publish`", "`risk`"):
        assert kind in text, kind
    assert "evict/admit loops" in text
