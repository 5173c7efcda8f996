"""The command line of ``qosd simulate`` and ``qosd trace``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from engine.argtypes import (
    add_output,
    add_profile,
    add_rule_paths,
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
            "run closed loop: batch pods start as published capacity allows and leave when evicted."
        ),
    )
    add_rule_paths(s, "rule files or directories, over the built-in layer")
    s.add_argument("--trace", required=True, type=Path, help="trace file (.yaml, .json or .jsonl)")
    s.add_argument(
        "--plot", type=Path, metavar="PNG", help="draw utilization, reclaim and evictions to this PNG"
    )
    add_output(s, what="json/yaml: a Simulation document with every tick's Evaluation")
    s.add_argument("--no-timeline", action="store_true", help="text output: the summary only")
    s.add_argument("--no-builtin", action="store_true", help="leave out the built-in default layer")
    add_profile(s)
    s.add_argument(
        "--backend",
        choices=("python", "durable"),
        default="python",
        help="condition evaluator (default python; durable: the durable-rules worker)",
    )
    s.add_argument("--dry-run", action="store_true", help="plan no operations (nothing is published either)")
    s.add_argument(
        "--eviction-burst",
        type=integer(0, 10000),
        default=3,
        help="evictions per tick across all rules (default 3)",
    )
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
    v = tsub.add_parser("validate", help="check trace files; exit 0 valid, 1 invalid, 2 missing file")
    v.add_argument(
        "traces", nargs="+", type=Path, metavar="TRACE", help="trace files (.yaml, .json or .jsonl)"
    )
    add_output(v, what="json/yaml: a report of the traces read")
    v.set_defaults(func=lazy("engine.simulate.command", "cmd_trace_validate"))
