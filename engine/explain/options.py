"""The command line of ``qosd explain``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.argtypes import add_output, lazy, run_command


def add_parser(sub: Any) -> None:
    """Register ``explain`` on an argparse subparsers object (engine/cli.py wires it in)."""
    p = sub.add_parser(
        "explain",
        help="say in words why each decision in an eval/simulate JSON output or audit log was made",
        description=(
            "Read an Evaluation (qosd eval --output json), a Simulation (qosd simulate --output json) "
            "or an audit log (JSON Lines of Evaluations) and explain every eviction, taint and "
            "published resource: the rule and where it is written, what it saw, how the victim was "
            "ranked and the release arithmetic. Exit 0 explained, 1 unreadable input, 2 usage error."
        ),
    )
    p.add_argument("file", type=Path, metavar="FILE", help="eval/simulate JSON output or audit log (JSONL)")
    p.add_argument("--rule", metavar="NAME", help="only decisions of this rule")
    p.add_argument(
        "--target", metavar="POD", help="only decisions about this pod (namespace/name, name or uid)"
    )
    add_output(p, what="json/yaml: the explanations as data")
    p.set_defaults(func=lazy("engine.explain.command", "cmd_explain"))


def main(argv: Sequence[str] | None = None) -> int:
    return run_command("explain", add_parser, argv)
