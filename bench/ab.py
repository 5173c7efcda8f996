"""Before/after comparison of one benchmark across two source trees, in one run (issue 15).

    python -m bench.ab --before DIR --after DIR --bench tick|strategies|config [--rounds N]
                       [--bench-args "..."] [--json FILE] [--write]

Runs the named bench from EACH tree's own copy (``python -m bench.<module>`` with the tree as working
directory and PYTHONPATH), so each side measures its own engine with its own inputs. The two sides
alternate in ABBA order (round 0 before-after, round 1 after-before, ...) so the drift of this shared
machine hits both alike. Per metric it prints the median before, the median after, their ratio
(after / before) and the spread of the per-round ratios (each round's after / before, min..max).

The numbers are read from the benches' text output, which both trees print in the same format:
bench_tick prints one ``CPUs NUMA containers {json}`` line per size, bench_config a markdown summary
table. Parsing that output (instead of adding a --json flag only the after tree would have) keeps the
before tree untouched and lets each tree run its own bench.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.results import RESULTS

SECTION = "## Issue 15 re-cut: before (1cecfc1) and after, in one run"
SIDES = ("before", "after")
THRESHOLD = 1.10  # "no regression beyond 10%"

Metrics = dict[str, float]


# ---------------------------------------------------------------- parsing

_TICK_LINE = re.compile(r"^(\d+) (\d+) (\d+) (\{.*\})\s*$")
_REF_LOOP = re.compile(r"Reference loop[^:]*: (\d+(?:\.\d+)?) ms before, (\d+(?:\.\d+)?) ms after")


class ParseError(ValueError):
    """A bench's output lacks the lines this comparison reads (its format changed, or it failed)."""


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.splitlines()[-lines:])


def parse_tick(text: str) -> Metrics:
    """bench_tick's per-size lines -> ``"<cpus>/<numa> <n> pods <backend> <stat>"`` in ms, plus the
    reference loop (mean of its before/after readings), which reads the machine's speed during the run."""
    out: Metrics = {}
    for line in text.splitlines():
        m = _TICK_LINE.match(line.strip())
        if not m:
            continue
        cpus, numa, n, blob = m.groups()
        try:
            per_backend = json.loads(blob)
        except json.JSONDecodeError as exc:
            raise ParseError(f"bench_tick line for {cpus}/{numa} {n} is not JSON ({exc}): {line!r}") from exc
        for backend, stats in per_backend.items():
            for stat in ("median", "conditions"):
                if stat not in stats:
                    raise ParseError(f"bench_tick line for {cpus}/{numa} {n} has no {stat!r} for {backend}")
                out[f"{cpus}/{numa} {n} pods {backend} {stat}"] = float(stats[stat])
    if not out:
        raise ParseError(f"no per-size result lines in bench_tick output; its last lines:\n{_tail(text)}")
    ref = _REF_LOOP.search(text)
    if ref:
        out["reference loop (machine speed)"] = (float(ref.group(1)) + float(ref.group(2))) / 2
    return out


_CONFIG_COLUMNS = {
    "e2e warm median": "e2e warm median",
    "e2e cold": "e2e cold (first build, fresh process)",
    "rebuild, files unchanged (median)": "rebuild, files unchanged",
    "validate() median (label sets / builds)": "validate() median",
}
_NUMBER = re.compile(r"^\s*(\d+(?:\.\d+)?)")


def parse_config(text: str) -> Metrics:
    """bench_config's "### Summary" table -> ``"<case> <column>"`` in ms, for the columns above.

    Cells that hold no number (``= bundled``: validated with another case) are left out."""
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "### Summary")
    except StopIteration:
        raise ParseError(
            f"no '### Summary' table in bench_config output; its last lines:\n{_tail(text)}"
        ) from None
    rows = []
    for line in lines[start + 1 :]:
        if line.startswith("### ") or line.startswith("## "):
            break
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    if len(rows) < 3:
        raise ParseError("bench_config's Summary table has no data rows")
    header, data = rows[0], [r for r in rows[2:] if len(r) == len(rows[0])]
    out: Metrics = {}
    for row in data:
        case = row[0]
        for column, name in _CONFIG_COLUMNS.items():
            if column not in header:
                raise ParseError(f"bench_config's Summary table has no column {column!r}: {header}")
            m = _NUMBER.match(row[header.index(column)])
            if m:
                out[f"{case} {name}"] = float(m.group(1))
    if not out:
        raise ParseError("bench_config's Summary table has no numeric cells")
    return out


# ---------------------------------------------------------------- arithmetic


def abba(rounds: int) -> list[tuple[int, str]]:
    """(round, side) in run order: before-after, after-before, before-after, ..."""
    order: list[tuple[int, str]] = []
    for r in range(rounds):
        order += [(r, s) for s in (SIDES if r % 2 == 0 else SIDES[::-1])]
    return order


@dataclass(frozen=True)
class Row:
    metric: str
    before: float  # median over rounds
    after: float
    ratio: float  # median after / median before
    low: float  # smallest per-round after / before
    high: float  # largest per-round after / before
    paired: float  # median of the per-round after / before: each round's two runs share the machine's state

    @property
    def noisy(self) -> bool:
        """The per-round ratios spread wider than the effect: this run cannot tell its sign."""
        half = (self.high - self.low) / 2
        return half > abs(self.paired - 1)

    @property
    def regression(self) -> bool:
        """Judged on the paired ratio: on a machine whose speed swings 2x between minutes, the ratio of
        the two medians can pair a quiet round on one side with a loud one on the other."""
        return self.paired > THRESHOLD


def compare(results: dict[str, list[Metrics]]) -> list[Row]:
    """Per metric present in every run of both sides: medians, their ratio and the per-round spread.

    ``results[side][r]`` is round r's metrics; rounds pair by index."""
    before, after = results["before"], results["after"]
    if not before or len(before) != len(after):
        raise ValueError(f"need the same number of rounds on both sides, got {len(before)} and {len(after)}")
    names = [k for k in before[0] if all(k in run for run in (*before, *after))]
    rows = []
    for k in names:
        b = [run[k] for run in before]
        a = [run[k] for run in after]
        mb, ma = statistics.median(b), statistics.median(a)
        per_round = [x / y if y else math.nan for x, y in zip(a, b, strict=True)]
        rows.append(
            Row(
                k,
                mb,
                ma,
                ma / mb if mb else math.nan,
                min(per_round),
                max(per_round),
                statistics.median(per_round),
            )
        )
    return rows


def table(rows: Sequence[Row], unit: str) -> str:
    lines = [
        f"| metric | before median ({unit}) | after median ({unit}) | after / before (medians) "
        "| after / before per round: median (min..max) | note |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        note = []
        if r.regression:
            note.append("**> 1.10**")
        if r.noisy:
            note.append("spread > effect")
        lines.append(
            f"| {r.metric} | {r.before:.3f} | {r.after:.3f} | {r.ratio:.3f} | "
            f"**{r.paired:.3f}** ({r.low:.2f}..{r.high:.2f}) | "
            f"{', '.join(note)} |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------- running


@dataclass(frozen=True)
class Bench:
    title: str
    module: str
    args: tuple[str, ...]
    parse: Callable[[str], Metrics]
    unit: str


BENCHES = {
    "tick": Bench(
        "Tick latency, both backends",
        "bench.bench_tick",
        ("--ticks", "60", "--backends", "python,durable"),
        parse_tick,
        "ms",
    ),
    "strategies": Bench(
        "Tick latency, every strategy enabled",
        "bench.bench_tick",
        ("--ticks", "60", "--backends", "python", "--all-strategies"),
        parse_tick,
        "ms",
    ),
    "config": Bench(
        "Config build (rule pipeline)",
        "bench.bench_config",
        # Seed 2: seed 1's synthetic policy sets a CFS burst above its quota, which `qosd validate` refuses
        # in both trees, so bench_config stops before measuring. 100 synthetic rules and few repeats: one
        # run takes about 80 s on this loaded 2-core machine (500 rules took 300 s).
        tuple(
            shlex.split(
                "--repeat 5 --synthetic-repeat 2 --validate-repeat 2 --synthetic-validate-repeat 1 "
                "--cold-runs 1 --synthetic-cold-runs 1 --seed 2 --rules 100"
            )
        ),
        parse_config,
        "ms",
    ),
}


def git_commit(tree: Path) -> str:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=tree, capture_output=True, text=True, check=False
        ).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "?"
    # Not bench/: this harness itself lives there, uncommitted while it is being written.
    dirty = git("status", "--porcelain", "--", "engine", "rules", "schemas")
    return head + (" + uncommitted changes" if dirty else "")


def run_once(tree: Path, bench: Bench, args: Sequence[str], timeout: float) -> tuple[Metrics, float]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    cmd = [sys.executable, "-m", bench.module, *args]
    t0 = time.perf_counter()
    proc = subprocess.run(
        cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(
            f"{' '.join(cmd)} in {tree} exited {proc.returncode}; its last output:\n"
            f"{_tail(proc.stdout)}\n{_tail(proc.stderr)}"
        )
    try:
        return bench.parse(proc.stdout), wall
    except ParseError as exc:
        raise SystemExit(f"{' '.join(cmd)} in {tree}: {exc}") from exc


def uptime() -> str:
    try:
        load = Path("/proc/loadavg").read_text().split()[:3]
    except OSError:
        return "?"
    return "load average " + ", ".join(load)


def write_subsection(title: str, body: str, path: Path = RESULTS) -> None:
    """Replace (or append) ``### title`` inside SECTION, leaving the section's other text alone, so the
    three benches, run one after another, each own their part of one section."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    sub = f"### {title}"
    block = body.rstrip("\n") + "\n"
    start = next((i for i, line in enumerate(lines) if line.strip() == SECTION), None)
    if start is None:
        new = text.rstrip("\n") + f"\n\n{SECTION}\n\n{block}"
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        s = next((i for i in range(start + 1, end) if lines[i].strip() == sub), None)
        if s is None:
            section_text = "".join(lines[start:end]).rstrip("\n") + "\n\n" + block
        else:
            e = next((i for i in range(s + 1, end) if lines[i].startswith("### ")), end)
            rest = "".join(lines[e:end])
            section_text = "".join(lines[start:s]) + block + ("\n" + rest if rest else "")
        tail = "".join(lines[end:])
        new = "".join(lines[:start]) + section_text.rstrip("\n") + "\n" + ("\n" + tail if tail else "")
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(new, encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, help="tree of the before commit")
    ap.add_argument("--after", type=Path, help="tree of the after commit")
    ap.add_argument("--bench", choices=sorted(BENCHES), required=True)
    ap.add_argument("--rounds", type=int, default=4, help="rounds; each runs both sides, in ABBA order")
    ap.add_argument("--bench-args", help="arguments for the bench instead of the defaults (one string)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds one bench run may take")
    ap.add_argument("--json", type=Path, help="also save every run's numbers here")
    ap.add_argument("--write", action="store_true", help=f"write the result into {SECTION!r} of RESULTS.md")
    ap.add_argument(
        "--from-json", type=Path, help="print the table of runs saved earlier with --json; run nothing"
    )
    args = ap.parse_args(argv)
    bench = BENCHES[args.bench]
    if args.from_json:
        saved = json.loads(args.from_json.read_text(encoding="utf-8"))
        print(table(compare(saved["results"]), bench.unit))
        return 0
    if args.before is None or args.after is None:
        ap.error("--before and --after are required (unless --from-json)")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    bench_args = shlex.split(args.bench_args) if args.bench_args is not None else list(bench.args)
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    commits = {s: git_commit(t) for s, t in trees.items()}
    load_start = uptime()
    results: dict[str, list[Metrics]] = {s: [] for s in SIDES}
    walls: dict[str, list[float]] = {s: [] for s in SIDES}
    t0 = time.perf_counter()
    for r, side in abba(args.rounds):
        metrics, wall = run_once(trees[side], bench, bench_args, args.timeout)
        results[side].append(metrics)
        walls[side].append(wall)
        print(f"[ab] round {r} {side} ({commits[side]}): {wall:.0f} s", file=sys.stderr, flush=True)
    total = time.perf_counter() - t0
    load_end = uptime()
    rows = compare(results)
    argv_text = " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    body = "\n".join(
        [
            f"### {bench.title}",
            "",
            f"Command: `python -m bench.ab {argv_text}` (each run: `python -m {bench.module} "
            f"{' '.join(bench_args)}` in the tree, PYTHONPATH=the tree).",
            "",
            f"Before {commits['before']}, after {commits['after']}; {args.rounds} rounds in ABBA order, "
            f"{total:.0f} s in all; {load_start} at the start, {load_end} at the end "
            f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}).",
            "",
            table(rows, bench.unit),
            "",
            f"Regressions beyond 10% (per-round after / before, median, > {THRESHOLD:.2f}): "
            + (", ".join(r.metric for r in rows if r.regression) or "none")
            + ". Ratios whose per-round spread is wider than their distance from 1.00: "
            + (", ".join(r.metric for r in rows if r.noisy) or "none")
            + ".",
        ]
    )
    print(body)
    if args.json:
        args.json.write_text(
            json.dumps(
                {"commits": commits, "args": bench_args, "results": results, "walls": walls}, indent=1
            ),
            encoding="utf-8",
        )
    if args.write:
        write_subsection(bench.title, body)
        print(f"[ab] wrote {RESULTS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
