"""The command line of ``qosd simulate`` and ``qosd trace``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from engine.argtypes import (
    add_output,
    add_profile,
    add_tick_flags,
    duration,
    integer,
    lazy,
    number,
    percent,
    profile,
    quantity,
)

GiB = float(1 << 30)
# Traces longer than this show a progress bar on a terminal (simulate.command reads it from here).
PROGRESS_MIN_STEPS = 200


def add_parser(sub: Any) -> None:
    """Register ``simulate`` and ``trace`` on the ``qosd`` subcommand parser (``add_subparsers()``)."""
    s = sub.add_parser(
        "simulate",
        help="replay a trace through the engine with a simulated clock; print a timeline and a summary",
        description=(
            "Replay a trace (schemas/trace.schema.json) through the same tick as the daemon. Delta samples "
            "run closed loop: batch pods start as published capacity allows and leave when evicted. "
            "With --baseline OLD... --rules NEW..., replay it under both policies and print what "
            "changes (exit 0 same decisions, 3 different ones)."
        ),
    )
    s.add_argument(
        "--rules",
        action="append",
        default=[],
        type=Path,
        metavar="PATH",
        help="rule file or directory (repeatable; - reads standard input), over the built-in layer. "
        "simulate's positional argument is its TRACE, so rule files are given with --rules here",
    )
    s.add_argument(
        "trace_file", nargs="?", type=Path, metavar="TRACE", help="trace file (.yaml, .json or .jsonl)"
    )
    s.add_argument("--trace", type=Path, help="the trace, as an option (the same as TRACE)")
    s.add_argument(
        "--baseline",
        action="extend",
        nargs="+",
        type=Path,
        default=[],
        metavar="PATH",
        help="compare: the rules in effect today (files or directories); --rules are the proposed "
        "ones. Prints what changes and exits 3 when any decision differs",
    )
    s.add_argument(
        "--plot", type=Path, metavar="PNG", help="draw utilization, reclaim and evictions to this PNG"
    )
    add_output(s, what="json/yaml: a Simulation with every tick's Evaluation (--baseline: a SimulationDiff)")
    s.add_argument("--no-timeline", action="store_true", help="text output: the summary only")
    s.add_argument("--no-builtin", action="store_true", help="leave out the built-in default layer")
    add_profile(s)
    add_tick_flags(s, "plan no operations (nothing is published either)")
    s.add_argument(
        "--risk-cpu",
        type=percent,
        default=90.0,
        metavar="PERCENT",
        help="node CPU usage above this is a minute at SLO risk (default 90)",
    )
    s.add_argument(
        "--risk-memory",
        type=percent,
        default=90.0,
        metavar="PERCENT",
        help="node memory usage above this is a minute at SLO risk (default 90)",
    )
    s.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=f"progress bar on stderr (default: when stderr is a terminal and the trace has "
        f"more than {PROGRESS_MIN_STEPS} samples)",
    )
    s.set_defaults(func=lazy("engine.simulate.command", "cmd_simulate"))

    t = sub.add_parser("trace", help="generate or check simulation traces")
    tsub = t.add_subparsers(dest="trace_command", required=True, metavar="ACTION")
    g = tsub.add_parser("generate", help="write a synthetic tidal trace (seeded, reproducible)")
    g.add_argument(
        "--hours", type=number(0.001, 24 * 366), default=24.0, help="length of the trace (default 24)"
    )
    g.add_argument(
        "--step", type=duration(0.001, 24 * 3600), default=60.0, help="time between samples (default 1m)"
    )
    g.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    g.add_argument("--cpus", type=integer(1, 8192), default=32, help="logical CPUs of the node (default 32)")
    g.add_argument("--numa", type=integer(1, 1024), default=2, help="NUMA nodes, dividing --cpus (default 2)")
    g.add_argument(
        "--memory",
        type=quantity(64 * 2**20, 2**50, "bytes"),
        default=128 * GiB,
        help="node memory (default 128Gi)",
    )
    g.add_argument(
        "--profile",
        type=profile,
        default="koordinator",
        help="bundled profile the node is labelled for: koordinator (default) or katalyst (no label)",
    )
    g.add_argument("--name", help="metadata.name of the trace")
    g.add_argument(
        "-o",
        "--output",
        "--format",
        dest="format",
        choices=("yaml", "json", "jsonl", "text"),
        help="stdout format: yaml (also: text), json or jsonl (files: by suffix)",
    )
    g.add_argument(
        "--output-file",
        type=Path,
        metavar="PATH",
        help="write here (.yaml, .json or .jsonl); default stdout",
    )
    g.set_defaults(func=lazy("engine.simulate.command", "cmd_trace_generate"))
    _add_record_parser(tsub)
    v = tsub.add_parser("validate", help="check trace files; exit 0 valid, 1 invalid, 2 missing file")
    v.add_argument(
        "traces", nargs="+", type=Path, metavar="TRACE", help="trace files (.yaml, .json or .jsonl)"
    )
    add_output(v, what="json/yaml: a report of the traces read")
    v.set_defaults(func=lazy("engine.simulate.command", "cmd_trace_validate"))


def _add_record_parser(tsub: Any) -> None:
    """``qosd trace record`` on the ``trace`` subcommand parser (engine/simulate/record.py runs it)."""
    r = tsub.add_parser(
        "record",
        help="turn a node's audit log (qosd run --audit-log-facts) or a live recording into a trace",
        description=(
            "Turn what a node saw into a trace `qosd simulate` replays: the audit log of a "
            "`qosd run --audit-log-facts` (--audit-log), or a recording here (--live DURATION, qosd run "
            "in dry run with the flags after --). One snapshot sample per tick, replayed open loop."
        ),
    )
    r.add_argument(
        "--audit-log",
        action="extend",
        nargs="+",
        type=Path,
        default=[],
        metavar="FILE",
        help="audit log(s) of `qosd run --audit-log-facts`, rotated ones too (any order)",
    )
    r.add_argument(
        "--live",
        type=duration(1.0, 7 * 24 * 3600.0),
        metavar="DURATION",
        help="record here for this long (e.g. 10m), running qosd run in dry run with the flags after --",
    )
    r.add_argument("--interval", default="1s", help="with --live: the tick period (default 1s)")
    r.add_argument("--name", help="metadata.name of the trace (default recorded-<node>)")
    r.add_argument(
        "-o",
        "--output",
        "--format",
        dest="format",
        choices=("yaml", "json", "jsonl"),
        help="stdout format: yaml, json or jsonl (default jsonl; files: by suffix)",
    )
    r.add_argument(
        "--output-file",
        type=Path,
        metavar="PATH",
        help="write here (.yaml, .json or .jsonl); default stdout",
    )
    r.add_argument("run_args", nargs=argparse.REMAINDER, help="with --live: -- then qosd run flags")
    r.set_defaults(func=lazy("engine.simulate.record", "cmd_trace_record_args"))
