"""The command line of ``qosd simulate`` and ``qosd trace``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from engine.argtypes import add_tick_flags, duration, integer, number, percent, profile, quantity
from engine.config.pipeline import PROFILE_LABEL
from engine.simulate.command import PROGRESS_MIN_STEPS, cmd_simulate, cmd_trace_generate, cmd_trace_validate
from engine.simulate.record import add_record_parser
from engine.sources.trace import (
    GiB,
)


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
        help="rule file or directory (repeatable); the built-in layer is always loaded first",
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
    s.add_argument("-o", "--output", choices=("text", "json"), default="text", help="text (default) or json")
    s.add_argument("--no-timeline", action="store_true", help="text output: the summary only")
    s.add_argument("--no-builtin", action="store_true", help="leave out the built-in default layer")
    s.add_argument(
        "--profile", type=profile, help=f"bundled profile to use (sets node label {PROFILE_LABEL})"
    )
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
    s.set_defaults(func=cmd_simulate)

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
        choices=("koordinator", "default"),
        default="koordinator",
        help="bundled profile the node is labelled for (default koordinator)",
    )
    g.add_argument("--name", help="metadata.name of the trace")
    g.add_argument("--format", choices=("yaml", "json", "jsonl"), help="stdout format (files: by suffix)")
    g.add_argument(
        "-o",
        "--output-file",
        type=Path,
        metavar="PATH",
        help="write here (.yaml, .json or .jsonl); default stdout",
    )
    g.set_defaults(func=cmd_trace_generate)
    add_record_parser(tsub)
    v = tsub.add_parser("validate", help="check trace files; exit 0 valid, 1 invalid, 2 missing file")
    v.add_argument("traces", nargs="+", type=Path, metavar="TRACE")
    v.set_defaults(func=cmd_trace_validate)
