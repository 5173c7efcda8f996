"""``qosd simulate`` and ``qosd trace generate|validate``: what each command does with its parsed flags."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from engine.config.errors import UsageError
from engine.config.output import emit
from engine.config.pipeline import PROFILE_LABEL, build_policy, load_documents
from engine.evaluate.engine import Engine
from engine.plan.planner import Guards
from engine.resources import DEFAULT_PROFILE
from engine.simulate.diff import EXIT_DIFFER, compare, format_diff
from engine.simulate.options import PROGRESS_MIN_STEPS
from engine.simulate.plot import plot, plot_available
from engine.simulate.report import format_text
from engine.simulate.result import Options, Simulation
from engine.simulate.run import simulate
from engine.sources.trace import (
    GiB,
    Trace,
    describe,
    dump_trace,
    duration_text,
    generate_tidal,
    read_trace,
    write_trace,
)

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


class Progress:
    """A one-line progress bar on a terminal stream; redraws at most once per percent."""

    def __init__(self, stream: IO[str], width: int = 30):
        self.stream = stream
        self.width = width
        self.last = -1

    def __call__(self, done: int, total: int) -> None:
        pct = int(100 * done / total) if total else 100
        if pct == self.last and done != total:
            return
        self.last = pct
        filled = int(self.width * done / total) if total else self.width
        bar = "#" * filled + "." * (self.width - filled)
        self.stream.write(f"\rsimulating [{bar}] {pct:3d}% {done}/{total} samples")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()


# ---------------------------------------------------------------- command line


def _trace_path(args: argparse.Namespace) -> Path:
    """The trace: the positional TRACE or --trace (one of them)."""
    given = [p for p in (args.trace_file, args.trace) if p is not None]
    if len(given) != 1:
        raise UsageError(
            "simulate needs exactly one trace: qosd simulate [--rules PATH]... TRACE (or --trace TRACE)"
            + (
                "; with --baseline, put TRACE before --baseline or pass it as --trace"
                if args.baseline
                else ""
            )
        )
    path: Path = given[0]
    return path


def _run(
    trace: Trace, paths: list[Path], args: argparse.Namespace, keep_ticks: bool, progress: Progress | None
) -> Simulation | int:
    """One simulation of ``trace`` under the built-in layer and ``paths``; an exit code when the
    chosen backend cannot run."""
    node = trace.base.node.with_labels({PROFILE_LABEL: args.profile}) if args.profile else trace.base.node
    policy = build_policy(load_documents(paths, builtin=not args.no_builtin), node)
    options = Options(
        guards=Guards(dry_run=args.dry_run, eviction_burst=args.eviction_burst),
        risk_cpu_percent=args.risk_cpu,
        risk_memory_percent=args.risk_memory,
        keep_ticks=keep_ticks,
        progress=progress,
    )
    try:
        engine = Engine(policy, backend=args.backend)
        try:
            return simulate(trace, engine, options)
        finally:
            engine.backend.close()
    except RuntimeError as exc:
        # An optional evaluator that is missing or whose worker died (DurableBackendError): the trace
        # and the rules are fine, the environment is not. The in-process evaluator has no such failure.
        if args.backend == "python":
            raise
        print(f"qosd: error: the {args.backend} backend cannot run the simulation: {exc}", file=sys.stderr)
        return EXIT_USAGE


def cmd_simulate(args: argparse.Namespace) -> int:
    if args.plot is not None:
        if args.baseline:
            raise UsageError("--plot draws one run; drop --baseline, or plot each policy on its own")
        missing = plot_available()
        if missing:
            print(f"qosd: error: {missing}", file=sys.stderr)
            return EXIT_USAGE
    trace = read_trace(_trace_path(args))
    if args.baseline:
        return _compare(trace, args)
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    progress = Progress(sys.stderr) if show and len(trace.samples) > PROGRESS_MIN_STEPS else None
    if args.progress and progress is None:
        progress = Progress(sys.stderr)
    sim = _run(trace, args.rules, args, args.output in ("json", "yaml"), progress)
    if isinstance(sim, int):
        return sim
    if args.output == "json":
        # json.dumps, not json.dump: dump streams through the pure-Python encoder (a day's ticks
        # took seconds); dumps encodes in C, to the same text.
        sys.stdout.write(json.dumps(sim.to_dict(), default=str, separators=(",", ":")) + "\n")
        sys.stdout.flush()
    elif args.output == "yaml":
        emit(json.loads(json.dumps(sim.to_dict(), default=str)), "yaml")
    else:
        text = format_text(sim, timeline=not args.no_timeline)
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()
    if args.plot is not None:
        plot(sim, args.plot)
        print(f"plot written to {args.plot}", file=sys.stderr)
    return EXIT_OK


def _compare(trace: Trace, args: argparse.Namespace) -> int:
    """``--baseline``: the same trace under the baseline's rules and under --rules; exit 3 when any
    decision differs (engine.simulate.diff)."""
    runs = []
    for paths in (args.baseline, args.rules):
        sim = _run(trace, paths, args, False, None)
        if isinstance(sim, int):
            return sim
        runs.append(sim)
    base, new = runs
    doc = compare(base, new)
    if args.output in ("json", "yaml"):
        emit(json.loads(json.dumps(doc, default=str)), args.output)
    else:
        sys.stdout.write(format_diff(doc, base, new))
    sys.stdout.flush()
    return EXIT_DIFFER if doc["differ"] else EXIT_OK


MAX_GENERATED_SAMPLES = 1_000_000  # a year of minutes is 527,040; more only exhausts memory


def cmd_trace_generate(args: argparse.Namespace) -> int:
    if args.cpus % args.numa or args.cpus // args.numa < 2:
        raise UsageError(
            f"--cpus {args.cpus} --numa {args.numa}: the generated node splits its CPUs evenly over its "
            "NUMA nodes, at least 2 (one core of two hyper-threads) each; make --cpus a multiple of --numa"
        )
    samples = args.hours * 3600 / args.step
    if not 1 <= samples <= MAX_GENERATED_SAMPLES:
        raise UsageError(
            f"--hours {args.hours:g} --step {duration_text(args.step)}: that is {math.floor(samples):,} "
            f"samples; a trace needs from 1 to {MAX_GENERATED_SAMPLES:,} "
            + (
                "(lengthen --hours or shorten --step)"
                if samples < 1
                else "(lengthen --step or shorten --hours)"
            )
        )
    profile = None if args.profile == DEFAULT_PROFILE else args.profile  # katalyst: no label needed
    doc = generate_tidal(
        hours=args.hours,
        step=args.step,
        seed=args.seed,
        cpus=args.cpus,
        numa=args.numa,
        memory=args.memory,
        profile=profile,
        name=args.name,
    )
    target = (
        "the Koordinator profile (node label qosd.io/profile: koordinator)"
        if profile
        else ("the default (Katalyst-style) profile (no qosd.io/profile label)")
    )
    comment = (
        f"Generated by: qosd trace generate --hours {args.hours:g} --step {duration_text(args.step)} "
        f"--seed {args.seed} --cpus {args.cpus} --numa {args.numa} --memory {args.memory / GiB:g}Gi "
        f"--profile {args.profile}" + (f" --name {args.name}" if args.name else "") + "\n"
        f"Targets {target}.\n"
        "Online pods carry both Koordinator labels and Katalyst annotations, so either profile reads them;\n"
        "override the profile with `qosd simulate --profile ...`."
    )
    emit_trace(doc, args.output_file, "yaml" if args.format in (None, "text") else args.format, comment)
    return EXIT_OK


def emit_trace(doc: Mapping[str, Any], output_file: Path | None, fmt: str, comment: str) -> None:
    """A trace to stdout in ``fmt`` (no file, or ``-``), else to the file in the format of its suffix."""
    if output_file is None or str(output_file) == "-":
        sys.stdout.write(dump_trace(doc, fmt, comment))
    else:
        write_trace(doc, output_file, comment)
        print(f"wrote {len(doc['samples'])} samples to {output_file}", file=sys.stderr)


def cmd_trace_validate(args: argparse.Namespace) -> int:
    described = [describe(read_trace(path)) for path in args.traces]
    if args.output in ("json", "yaml"):
        traces = [{"path": str(p), "summary": d} for p, d in zip(args.traces, described, strict=True)]
        emit({"valid": True, "traces": traces}, args.output)
    else:
        for d in described:
            print(f"valid: {d}")
    return EXIT_OK
