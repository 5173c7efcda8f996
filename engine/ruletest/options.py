"""The command line of ``qosd test``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.argtypes import run_command
from engine.ruletest.command import cmd_test


def add_parser(sub: Any) -> None:
    """Register ``test`` on an argparse subparsers object (engine/cli.py wires it in)."""
    p = sub.add_parser(
        "test",
        help="run RuleTest suites (rule unit tests in YAML); exit 0 all pass, 1 failures, 2 usage error",
        description=(
            "Run rule unit tests: each RuleTest suite names a policy and cases that evaluate it on facts "
            "snapshots and compare intents, operations, held and skipped entries with expectations. "
            "Directories are searched for *.yaml files of kind RuleTest. Exit 0 when every case passes, "
            "1 when a case fails or a suite is malformed, 2 on usage errors."
        ),
    )
    p.add_argument("paths", nargs="+", type=Path, metavar="SUITE", help="suite files or directories")
    p.add_argument("--run", metavar="REGEX", help="only cases whose name matches this regular expression")
    p.add_argument("--backend", choices=("python", "durable"), default="python", help="condition evaluator")
    p.add_argument(
        "-o",
        "--output",
        choices=("text", "json", "yaml"),
        default="text",
        help="text: each case, its failures field by field, a result table, rule coverage and a summary; "
        "json/yaml: the same as a RuleTestReport document",
    )
    p.add_argument(
        "--junit",
        type=Path,
        metavar="FILE",
        help="also write the results as a JUnit XML report (one testsuite per suite) for CI systems",
    )
    p.set_defaults(func=cmd_test)


def main(argv: Sequence[str] | None = None) -> int:
    return run_command("test", add_parser, argv)
