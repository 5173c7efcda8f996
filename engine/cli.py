"""The ``qosd`` command line: argument parsing and exit codes only. Each command's implementation lives
with its package: engine.config.command (validate, render, schema, crd), engine.eval_command (eval),
engine.ruletest, engine.explain, engine.simulate, engine.daemon, engine.webhook and engine.demo.

Exit codes follow the usual validator convention: 0 clean, 1 invalid input, 2 usage error. An
exception nobody expected (a bug) is one line on stderr and exit 70 (EX_SOFTWARE), not a traceback
in the face of whoever ran the command; ``--debug`` or ``QOSD_DEBUG=1`` lets it through with its
traceback (the test suite sets QOSD_DEBUG so that a bug fails its test loudly).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

# The commands' option modules only: each command's function is imported when it runs
# (argtypes.lazy), so `qosd --version` and `qosd --help` load neither the rule pipeline nor Jinja2,
# jsonschema or the Kubernetes client (tests/test_cli_conventions.py).
from engine import __version__, demo
from engine.argtypes import add_output, add_profile, add_rule_paths, integer, lazy
from engine.config.errors import PolicyError, UsageError
from engine.daemon import options as daemon_options
from engine.explain import options as explain_options
from engine.resources import SCHEMAS
from engine.ruletest import options as ruletest_options
from engine.simulate import options as simulate_options
from engine.webhook import options as webhook_options

EXIT_OK, EXIT_INVALID, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 70
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it
DEBUG_ENV = "QOSD_DEBUG"


def _policy_source_args(p: argparse.ArgumentParser) -> None:
    add_rule_paths(p, "rule files or directories (*.yaml, *.yml)")
    p.add_argument("--no-builtin", action="store_true", help="leave out the built-in default layer")
    add_profile(p)
    p.add_argument(
        "--label", action="append", default=[], metavar="KEY=VALUE", help="extra node label (repeatable)"
    )


class Parser(argparse.ArgumentParser):
    """argparse with its usage errors on one line: the error and where to read more, not the
    whole usage block (``qosd run`` has thirty flags; the line that matters would scroll away).
    Subcommand parsers are of the same class."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="qosd",
        description="Node QoS engine for Kubernetes colocation, driven by declarative YAML rules.",
    )
    parser.add_argument("--version", action="version", version=f"qosd {__version__}")
    parser.add_argument(
        "--debug",
        action="store_true",
        help=f"let an unexpected error through with its traceback (also: {DEBUG_ENV}=1)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    v = sub.add_parser("validate", help="check rule documents; exit 0 clean, 1 invalid, 2 usage error")
    _policy_source_args(v)
    v.add_argument(
        "--node", type=Path, help="validate for this node only (facts snapshot or Kubernetes Node YAML)"
    )
    v.add_argument(
        "--strict",
        action="store_true",
        help="treat warnings (policies that work against themselves, e.g. an admit/evict loop) as errors",
    )
    add_output(v, what="text: problems on stderr; json/yaml: a report on stdout")
    v.set_defaults(func=lazy("engine.config.command", "cmd_validate"))

    r = sub.add_parser("render", help="print the effective merged policy for one node")
    _policy_source_args(r)
    r.add_argument("--node", type=Path, help="facts snapshot or Kubernetes Node YAML (default: this machine)")
    r.add_argument(
        "--show-origin",
        action="store_true",
        help="annotate every value with the file:line that set it (json: an origins map)",
    )
    add_output(r, what="text and yaml: the policy as YAML")
    r.set_defaults(func=lazy("engine.config.command", "cmd_render"))

    s = sub.add_parser("schema", help="print a JSON Schema qosd ships (policy, facts, trace, ...)")
    s.add_argument(
        "kind",
        nargs="?",
        choices=tuple(SCHEMAS),
        default="policy",
        help="which schema (default policy): " + ", ".join(f"{k} ({v})" for k, v in SCHEMAS.items()),
    )
    s.add_argument("--names", action="store_true", help="list the fact names conditions may use (facts only)")
    add_output(s, what="text and json: the schema as JSON")
    s.set_defaults(func=lazy("engine.config.command", "cmd_schema"))

    e = sub.add_parser("eval", help="evaluate the policy on one facts snapshot; print intents and operations")
    add_rule_paths(e, "rule files or directories, over the built-in layer")
    e.add_argument(
        "--facts", required=True, type=Path, help="facts snapshot (YAML or JSON, schemas/facts.schema.json)"
    )
    e.add_argument(
        "--backend",
        choices=("python", "durable"),
        default="python",
        help="condition evaluator (default python; durable: the durable-rules worker)",
    )
    add_output(e, "table", what="text (also: table) is a table; json/yaml an Evaluation document")
    e.add_argument(
        "--state",
        type=Path,
        help="engine state to start from: a previous `qosd eval` output (JSON or YAML; its `state` is "
        "read), that `state` object alone, or a `qosd run --state-file` file",
    )
    e.add_argument("--no-builtin", action="store_true", help="leave out the built-in default layer")
    add_profile(e)
    e.add_argument("--dry-run", action="store_true", help="plan no operations, report them as held")
    e.add_argument(
        "--eviction-burst",
        type=integer(0, 10000),
        default=3,
        help="evictions per tick across all rules (default 3)",
    )
    e.set_defaults(func=lazy("engine.eval_command", "cmd_eval"))

    ruletest_options.add_parser(sub)
    explain_options.add_parser(sub)
    simulate_options.add_parser(sub)
    daemon_options.add_parser(sub)
    webhook_options.add_parser(sub)
    demo.add_parser(sub)

    c = sub.add_parser("crd", help="print qosd's CustomResourceDefinitions (QoSPolicy, QoSNodeStatus)")
    add_output(c, what="text and yaml: multi-document YAML; json: one CRD or a v1 List")
    c.add_argument(
        "--kind",
        choices=("all", "policy", "nodestatus"),
        default="all",
        help="which CRD (default all: a multi-document YAML, or a v1 List in JSON)",
    )
    c.set_defaults(func=lazy("engine.config.command", "cmd_crd"))
    return parser


def debugging(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "debug", False)) or os.environ.get(DEBUG_ENV, "") not in ("", "0")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _dispatch(args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as exc:  # the last resort: a bug, said in one line (see the module docstring)
        if debugging(args):
            raise
        if isinstance(exc, OSError) and exc.filename is not None:
            # A file named on the command line that cannot be read or written: the user's to fix.
            print(f"qosd: error: {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_USAGE
        what = " ".join((f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__).split())
        print(
            f"qosd: internal error: {what[:500]} (a bug in qosd: rerun with --debug or {DEBUG_ENV}=1 "
            "for the traceback, and report it)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


def _dispatch(args: argparse.Namespace) -> int:
    try:
        code: int = args.func(args)
        return code
    except UsageError as exc:
        print(f"qosd: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except PolicyError as exc:
        from engine.config.output import print_policy_error

        print_policy_error(exc, getattr(args, "output", "text"))
        missing = all(p.message == "no such file or directory" for p in exc.problems)
        return EXIT_USAGE if missing else EXIT_INVALID
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
