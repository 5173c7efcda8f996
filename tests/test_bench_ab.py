"""bench.ab: the parts that compute (parsing the benches' output, ABBA order, medians, ratios, spread,
the RESULTS.md subsection). Arithmetic on given numbers only; nothing here times anything."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench.ab import (
    SECTION,
    ParseError,
    Row,
    abba,
    compare,
    parse_config,
    parse_tick,
    table,
    write_subsection,
)

TICK_OUT = """\
16 2 20 {"python": {"median": 0.5, "p99": 4.0, "conditions": 0.05}, "durable": {"median": 2.0, "p99": 6.0, "conditions": 1.0}}
384 4 2000 {"python": {"median": 13.5, "p99": 195.0, "conditions": 6.8}, "durable": {"median": 171.0, "p99": 411.0, "conditions": 163.0}}
| CPUs / NUMA | containers | ticks | python median |
|---|---|---|---|
| 16 / 2 | 20 | 60 | 0.50 ms |

Reference loop (3M additions, to read this shared VM's speed): 382 ms before, 372 ms after the run; this VM
"""

CONFIG_OUT = """\
## Rule pipeline (issue 2)

### Stage times

| case | stage | warm median | warm p95 | cold (first run) | share of warm e2e |
|---|---|---:|---:|---:|---:|
| bundled | load | 1.0 | 2.0 | 3.0 | 5% |

### Summary

| case | e2e warm median | e2e warm p95 | e2e cold | import (cold) | e2e warm, GC off | rebuild, files unchanged (median) | validate() median (label sets / builds) | peak traced memory, one build |
|---|---:|---:|---:|---:|---:|---:|---:|---:|
| bundled | 18.9 | 32.3 | 25.6 | 157 | 18.0 | 4.0 | 18.5 (3 / 2) | 0.8 MiB |
| bundled-koordinator | 14.2 | 19.9 | 16.3 | 128 | 13.8 | 1.9 | = (a) | 0.8 MiB |
| synthetic-500 | 1039 | 1192 | 1006 | 141 | 938 | 360 | 716 (1 / 1) | 43.2 MiB |

### Ratios (same run, so machine noise mostly cancels)

- synthetic-500 / bundled: 55.0×
"""


def test_parse_tick_reads_every_backend_and_size_and_the_reference_loop() -> None:
    m = parse_tick(TICK_OUT)
    assert m == {
        "16/2 20 pods python median": 0.5,
        "16/2 20 pods python conditions": 0.05,
        "16/2 20 pods durable median": 2.0,
        "16/2 20 pods durable conditions": 1.0,
        "384/4 2000 pods python median": 13.5,
        "384/4 2000 pods python conditions": 6.8,
        "384/4 2000 pods durable median": 171.0,
        "384/4 2000 pods durable conditions": 163.0,
        "reference loop (machine speed)": 377.0,
    }


@pytest.mark.parametrize(
    "text, message",
    [
        ("Traceback (most recent call last):\n  boom\n", "no per-size result lines"),
        ('16 2 20 {"python": {"median": 1.0}}\n', "no 'conditions'"),
        ("16 2 20 {not json}\n", "is not JSON"),
    ],
)
def test_parse_tick_refuses_output_it_cannot_read(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_tick(text)


def test_parse_config_reads_the_summary_table_only_and_skips_cells_without_a_number() -> None:
    m = parse_config(CONFIG_OUT)
    assert m == {
        "bundled e2e warm median": 18.9,
        "bundled e2e cold (first build, fresh process)": 25.6,
        "bundled rebuild, files unchanged": 4.0,
        "bundled validate() median": 18.5,
        "bundled-koordinator e2e warm median": 14.2,
        "bundled-koordinator e2e cold (first build, fresh process)": 16.3,
        "bundled-koordinator rebuild, files unchanged": 1.9,
        "synthetic-500 e2e warm median": 1039.0,
        "synthetic-500 e2e cold (first build, fresh process)": 1006.0,
        "synthetic-500 rebuild, files unchanged": 360.0,
        "synthetic-500 validate() median": 716.0,
    }


def test_parse_config_refuses_output_without_the_summary() -> None:
    with pytest.raises(ParseError, match="no '### Summary'"):
        parse_config("bench.synthetic drifted: its output no longer passes `qosd validate`\n")
    renamed = CONFIG_OUT.replace("e2e warm median", "warm e2e median")
    with pytest.raises(ParseError, match="no column 'e2e warm median'"):
        parse_config(renamed)


@pytest.mark.parametrize(
    "rounds, order",
    [
        (1, [(0, "before"), (0, "after")]),
        (2, [(0, "before"), (0, "after"), (1, "after"), (1, "before")]),
        (
            4,
            [
                (0, "before"),
                (0, "after"),
                (1, "after"),
                (1, "before"),
                (2, "before"),
                (2, "after"),
                (3, "after"),
                (3, "before"),
            ],
        ),
    ],
)
def test_abba_alternates_which_side_goes_first(rounds: int, order: list[tuple[int, str]]) -> None:
    assert abba(rounds) == order


def test_abba_puts_each_side_in_each_position_equally_often_over_even_rounds() -> None:
    order = abba(6)
    firsts = [side for i, (_, side) in enumerate(order) if i % 2 == 0]
    assert firsts.count("before") == firsts.count("after") == 3


def test_compare_takes_medians_their_ratio_and_the_per_round_spread() -> None:
    results = {
        "before": [{"t": 10.0, "only-before": 1.0}, {"t": 12.0}, {"t": 11.0}],
        "after": [{"t": 11.0}, {"t": 12.0}, {"t": 13.2}],
    }
    [row] = compare(results)  # a metric missing from a run is not compared
    assert row.metric == "t"
    assert row.before == 11.0 and row.after == 12.0
    assert row.ratio == pytest.approx(12.0 / 11.0)
    assert row.low == pytest.approx(1.0) and row.high == pytest.approx(1.2)
    assert row.paired == pytest.approx(1.1)  # rounds: 1.1, 1.0, 1.2


@pytest.mark.parametrize(
    "ratio, paired, low, high, regression, noisy",
    [
        (1.05, 1.05, 1.00, 1.10, False, False),  # half-spread 0.05 == effect: not wider
        (1.05, 1.05, 0.90, 1.20, False, True),
        (1.15, 1.15, 1.12, 1.18, True, False),
        (1.15, 1.15, 0.80, 1.60, True, True),
        (0.95, 0.95, 0.94, 0.96, False, False),
        # medians 1.25 apart, but round by round the sides are even: no regression, and noisy
        (1.25, 0.94, 0.87, 1.70, False, True),
    ],
)
def test_row_flags_judge_the_per_round_ratio(
    ratio: float, paired: float, low: float, high: float, regression: bool, noisy: bool
) -> None:
    row = Row("m", 1.0, ratio, ratio, low, high, paired)
    assert (row.regression, row.noisy) == (regression, noisy)


def test_compare_refuses_unpaired_rounds() -> None:
    with pytest.raises(ValueError, match="same number of rounds"):
        compare({"before": [{"t": 1.0}], "after": []})


def test_compare_zero_before_gives_nan_not_a_crash() -> None:
    [row] = compare({"before": [{"t": 0.0}], "after": [{"t": 1.0}]})
    assert math.isnan(row.ratio)


def test_table_renders_each_row_with_its_notes() -> None:
    text = table([Row("a", 1.0, 1.2, 1.2, 1.15, 1.25, 1.2), Row("b", 2.0, 2.0, 1.0, 0.9, 1.1, 1.0)], "ms")
    lines = text.splitlines()
    assert lines[2] == "| a | 1.000 | 1.200 | 1.200 | **1.200** (1.15..1.25) | **> 1.10** |"
    assert lines[3] == "| b | 2.000 | 2.000 | 1.000 | **1.000** (0.90..1.10) | spread > effect |"


def test_write_subsection_keeps_the_section_intro_other_subsections_and_sections(tmp_path: Path) -> None:
    path = tmp_path / "RESULTS.md"
    path.write_text("# Benchmark results\n\n## Other\n\nkept\n", encoding="utf-8")
    write_subsection("Tick", "### Tick\n\nfirst", path)
    write_subsection("Config", "### Config\n\nconfig numbers", path)
    text = path.read_text(encoding="utf-8")
    # a hand-written intro and a following section survive a rewrite of one subsection
    text = text.replace(f"{SECTION}\n\n", f"{SECTION}\n\nverdict by hand\n\n") + "\n## Later\n\nalso kept\n"
    path.write_text(text, encoding="utf-8")
    write_subsection("Tick", "### Tick\n\nsecond", path)
    assert path.read_text(encoding="utf-8") == (
        "# Benchmark results\n\n## Other\n\nkept\n\n"
        f"{SECTION}\n\nverdict by hand\n\n### Tick\n\nsecond\n\n### Config\n\nconfig numbers\n\n"
        "## Later\n\nalso kept\n"
    )


def test_a_real_tick_line_round_trips_through_json() -> None:
    stats = {"python": {"median": 1.25, "p99": 2.0, "conditions": 0.5}}
    assert parse_tick(f"96 2 200 {json.dumps(stats)}\n") == {
        "96/2 200 pods python median": 1.25,
        "96/2 200 pods python conditions": 0.5,
    }
