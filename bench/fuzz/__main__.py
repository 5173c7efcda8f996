"""``python -m bench.fuzz --minutes N [--surface S]... [--seed K] [--workers W] [--out DIR] [--write]``

Also ``--replay FILE --surface S``: run one file through the surface's oracle in this process and
print its class and traceback (what each finding's ``reproduce:`` line uses).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

from bench.fuzz.mutate import Mutated
from bench.fuzz.runner import HANG_SECONDS, Fuzzer, Report, execute, summary_table, write_findings
from bench.fuzz.surfaces import SURFACES, Env
from bench.results import write_section

HEADING = "## Fuzzing (issue 14): bad input through validate, eval, test and run"
DEFAULT_OUT = Path(__file__).resolve().parent / "findings"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.fuzz", description=__doc__)
    p.add_argument("--minutes", type=float, help="time budget (default 1 unless --inputs is given)")
    p.add_argument("--inputs", type=int, help="at most this many inputs per surface")
    p.add_argument("--surface", action="append", choices=sorted(SURFACES), help="repeatable; default all")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workers", type=int, default=0, help="worker processes (default: one per core)")
    p.add_argument("--timeout", type=float, default=HANG_SECONDS, help="hang limit per input, seconds")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where findings' reproducers go")
    p.add_argument("--no-minimize", action="store_true", help="keep reproducers as generated")
    p.add_argument("--write", action="store_true", help="record the summary in bench/RESULTS.md")
    p.add_argument("--replay", type=Path, help="run one file through --surface's oracle and exit")
    return p.parse_args(argv)


def replay(surface_name: str, path: Path) -> int:
    surface = SURFACES[surface_name]()
    env = Env()
    try:
        outcome, seconds = execute(env, surface, Mutated(path.read_bytes(), str(path)))
    finally:
        env.close()
    print(f"{outcome.cls} in {seconds:.2f}s {outcome.signature}")
    if outcome.detail:
        print(outcome.detail)
    return 0 if outcome.cls in ("OK", "LOCATED") else 1


def results_section(report: Report, command: str) -> str:
    total = sum(s.inputs for s in report.stats.values())
    rate = total / report.elapsed if report.elapsed else 0.0
    rss, surface, index, desc = report.worst
    lines = [
        HEADING,
        "",
        f"Command: `{command}` ({report.workers} worker processes, seed {report.seed}, "
        f"{time.strftime('%Y-%m-%d', time.gmtime())}, {os.cpu_count()} cores shared with other jobs).",
        "",
        f"{total} inputs in {report.elapsed / 60:.1f} min ({rate:.1f} inputs/s: 100,000 inputs take "
        f"{100000 / rate / 60 if rate else float('inf'):.0f} min here). Classes: bench/fuzz/oracle.py; "
        f"a hang is more than {report.hang_seconds:g} s for one input; peak RSS is the worker's "
        "high-water mark while one input ran (its baseline included).",
        "",
        summary_table(report),
        "",
        f"Worst peak RSS: {rss / 1024:.0f} MB, {surface} input {index} ({desc}).",
        "",
        f"Distinct findings ({len(report.findings)}), by signature (surface | kind | where):",
        "",
    ]
    lines += [f"- {f.cls} x{f.count}: `{f.signature}`" for f in report.findings] or ["- none"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = args.surface or list(SURFACES)
    if args.replay is not None:
        if len(names) != 1:
            print("--replay needs exactly one --surface", file=sys.stderr)
            return 2
        return replay(names[0], args.replay)
    minutes = args.minutes if args.minutes is not None else (None if args.inputs else 1.0)
    with tempfile.TemporaryDirectory(prefix="qosd-fuzz-run-") as tmp:
        fuzzer = Fuzzer(
            names,
            seed=args.seed,
            workers=args.workers,
            hang_seconds=args.timeout,
            minimize=not args.no_minimize,
            tmp=Path(tmp),
            progress=True,
        )
        report = fuzzer.run(minutes=minutes, inputs_per_surface=args.inputs)
    write_findings(report, args.out, fuzzer.surfaces)
    print(summary_table(report))
    total = sum(s.inputs for s in report.stats.values())
    print(
        f"\n{total} inputs in {report.elapsed:.0f}s ({total / max(report.elapsed, 1e-9):.1f}/s); "
        f"worst peak RSS {report.worst[0] / 1024:.0f} MB "
        f"({report.worst[1]} #{report.worst[2]}: {report.worst[3]})"
    )
    print(f"{len(report.findings)} distinct findings (reproducers in {args.out}):")
    for f in report.findings:
        print(f"  {f.cls:9} x{f.count:<6} {f.signature}")
    if args.write:
        command = "python -m bench.fuzz " + " ".join(
            shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]) if a != "--write"
        )
        write_section(HEADING, results_section(report, command))
    bad = any(f.cls in ("CRASH", "HANG", "UNLOCATED") for f in report.findings)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
