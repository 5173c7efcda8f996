"""The ``qosd`` command line. Wiring only: every decision lives in engine.config and friends.

Exit codes follow the usual validator convention: 0 clean, 1 invalid input, 2 usage error. An
exception nobody expected (a bug) is one line on stderr and exit 70 (EX_SOFTWARE), not a traceback
in the face of whoever ran the command; ``--debug`` or ``QOSD_DEBUG=1`` lets it through with its
traceback (the test suite sets QOSD_DEBUG so that a bug fails its test loudly).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from engine import __version__, demo, explain
from engine.argtypes import integer, profile
from engine.config.errors import Location, PolicyError, Problem, UsageError
from engine.config.load import MAX_DEPTH, Document, json_brackets, json_path, parse_documents, read_file
from engine.config.output import dump_yaml, yaml_with_origins
from engine.config.pipeline import PROFILE_LABEL, build_policy, load_documents, node_labels, validate
from engine.config.schema_check import schema_problems
from engine.daemon import options as daemon_options
from engine.evaluate.engine import Engine
from engine.evaluate.state import CorruptState, EngineState, state_from_json
from engine.model.factnames import registry
from engine.model.node import NodeInfo, node_from_kube, node_from_snapshot
from engine.output import format_table
from engine.plan.planner import Guards
from engine.resources import load_schema
from engine.ruletest import options as ruletest_options
from engine.simulate import options as simulate_options
from engine.sources.localnode import read_local_node
from engine.sources.snapshot_file import load_snapshot
from engine.tick import run_tick

EXIT_OK, EXIT_INVALID, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 70
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it
DEBUG_ENV = "QOSD_DEBUG"


def _not_a_file(path: Path) -> str:
    if not path.exists():
        return "does not exist"
    if path.is_dir():
        return "is a directory; name one file"
    return "is not a regular file (a device or a pipe cannot be read to its end)"


def load_node(path: Path | None, profile: str | None, labels: Sequence[str] = ()) -> NodeInfo:
    """Node facts from a file (facts snapshot, its node section, or a Kubernetes Node), else this machine."""
    if path is None:
        node = read_local_node()
    else:
        if not path.is_file():
            raise UsageError(f"node file {path} {_not_a_file(path)}")
        docs = read_file(path)
        if len(docs) != 1 or not isinstance(docs[0].data, dict):
            raise PolicyError(
                [Problem(Location(str(path), 1, 1), "a node file holds exactly one YAML mapping")]
            )
        node = _node_from_document(docs[0])
    extra = node_labels(labels, profile)
    return node.with_labels(extra) if extra else node


def _node_from_document(doc: Document) -> NodeInfo:
    data: dict[str, Any] = doc.data
    if data.get("kind") == "Node":
        try:
            return node_from_kube(data)
        except ValueError as exc:  # a capacity that is not a quantity within bounds
            raise PolicyError([Problem(doc.locate(("status", "capacity")), str(exc))]) from None
    snapshot = data if "node" in data else {"node": data}
    locate = doc.locate if "node" in data else (lambda p, k=False: doc.locate(p[1:], k))
    problems = schema_problems(snapshot, locate, "facts")
    if problems:
        raise PolicyError(problems)
    return node_from_snapshot(snapshot["node"])


def _print_problems(problems: Sequence[Problem], output: str, summary: str) -> None:
    if output == "json":
        print(
            json.dumps(
                {"valid": not problems, "summary": summary, "problems": [p.to_dict() for p in problems]},
                indent=2,
            )
        )
        return
    for p in problems:
        print(p.format())
    print(summary)


def cmd_validate(args: argparse.Namespace) -> int:
    docs = load_documents(args.paths, builtin=not args.no_builtin)
    node = (
        load_node(args.node, args.profile, args.label) if (args.node or args.profile or args.label) else None
    )
    problems = validate(docs, node)
    files = {d.source for d in docs}
    n = len(problems)
    if problems:
        summary = f"{n} problem{'s' if n != 1 else ''} in {len(docs)} document(s) from {len(files)} file(s)"
    else:
        summary = f"valid: {len(docs)} document(s) from {len(files)} file(s)"
    _print_problems(problems, args.output, summary)
    return EXIT_INVALID if problems else EXIT_OK


def cmd_render(args: argparse.Namespace) -> int:
    docs = load_documents(args.paths, builtin=not args.no_builtin)
    node = load_node(args.node, args.profile, args.label)
    policy = build_policy(docs, node)
    if args.output == "json":
        out = policy.to_document()
        if args.show_origin:
            out["origins"] = {path: str(loc) for path, loc in sorted(policy.origins.items())}
        print(json.dumps(out, indent=2))
    elif args.show_origin:
        sys.stdout.write(yaml_with_origins(policy))
    else:
        sys.stdout.write(dump_yaml(policy.to_document()))
    return EXIT_OK


def cmd_schema(args: argparse.Namespace) -> int:
    if args.names:
        if args.kind != "facts":
            raise UsageError("--names lists fact names; use `qosd schema facts --names`")
        specs = registry().specs.values()
        width = max(len(s.name) for s in specs)
        for s in sorted(specs, key=lambda s: s.name):
            extra = " (windowed)" if s.series else ""
            unit = f" [{s.unit}]" if s.unit else ""
            print(f"{s.name:<{width}}  {s.kind}{unit}{extra}  {s.description}".rstrip())
        return EXIT_OK
    print(json.dumps(load_schema(args.kind), indent=2))
    return EXIT_OK


def cmd_eval(args: argparse.Namespace) -> int:
    if not args.facts.is_file():
        raise UsageError(f"facts file {args.facts} {_not_a_file(args.facts)}")
    snapshot = load_snapshot(args.facts)
    node = snapshot.node.with_labels({PROFILE_LABEL: args.profile}) if args.profile else snapshot.node
    policy = build_policy(load_documents(args.rules, builtin=not args.no_builtin), node)
    state = _eval_state(args.state) if args.state else EngineState()
    engine = Engine(policy, backend=args.backend)
    try:
        result = run_tick(
            engine, snapshot, state, Guards(dry_run=args.dry_run, eviction_burst=args.eviction_burst)
        )
    finally:
        engine.backend.close()
    if args.output == "json":
        print(
            json.dumps(
                {
                    "apiVersion": "qosd.io/v1alpha1",
                    "kind": "Evaluation",
                    **result.to_dict(),
                    "state": result.state.to_dict(),
                },
                indent=2,
                default=str,
            )
        )
    else:
        sys.stdout.write(format_table(result))
    return EXIT_OK


def _state_fault_position(text: str, reason: str) -> tuple[int, int]:
    """line:col for a state fault the JSON decoder gives no position for: the first NaN/Infinity
    token, the first bracket nested deeper than a state goes, else the document's first value."""
    index = -1
    if "NaN" in reason or "Infinity" in reason:
        token = re.search(r"-?Infinity|NaN", text)
        index = token.start() if token else -1
    elif "nested too deeply" in reason:
        index = next((i for i, ch, depth in json_brackets(text) if ch in "[{" and depth > MAX_DEPTH), -1)
    if index < 0:
        index = len(text) - len(text.lstrip())
    before = text[:index]
    return before.count("\n") + 1, index - (before.rfind("\n") + 1) + 1


def _eval_state(path: Path) -> EngineState:
    """The state ``--state`` names; a file that is not one is invalid input (exit 1), located at the
    broken JSON's line:col or, for a value the schema refuses, at that value."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"--state {path}: {exc.strerror}") from None
    try:
        return state_from_json(data)
    except CorruptState as exc:
        where = Location(str(path), exc.line, exc.column, json_path(exc.path))
        if not exc.line:
            text = data.decode("utf-8", errors="replace")
            if exc.path:  # a value the schema refused: JSON is YAML, whose marks give its line:col
                with contextlib.suppress(PolicyError, ValueError):
                    docs = parse_documents(text, str(path))
                    if docs:
                        where = docs[0].locate(exc.path)
            if not where.line:
                where = Location(str(path), *_state_fault_position(text, str(exc)), json_path(exc.path))
        raise PolicyError(
            [
                Problem(
                    where,
                    f"not an engine state: {exc}",
                    hint="--state takes a file `qosd run --state-file` wrote, or the `state` object of "
                    "`qosd eval --output json` (schemas/state.schema.json)",
                )
            ]
        ) from None


def cmd_crd(args: argparse.Namespace) -> int:
    from engine.config.crd import build_node_status_crd, qosd_crds

    crds = qosd_crds()
    if args.kind != "all":
        crds = crds[:1] if args.kind == "policy" else [build_node_status_crd()]
    if args.output == "json":
        print(
            json.dumps(
                crds[0] if len(crds) == 1 else {"apiVersion": "v1", "kind": "List", "items": crds}, indent=2
            )
        )
    else:
        sys.stdout.write("---\n".join(dump_yaml(c) for c in crds))
    return EXIT_OK


def _policy_source_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "paths", nargs="*", type=Path, metavar="PATH", help="rule files or directories (*.yaml, *.yml)"
    )
    p.add_argument("--no-builtin", action="store_true", help="leave out the built-in default layer")
    p.add_argument(
        "--profile",
        type=profile,
        help=f"bundled profile to use (sets node label {PROFILE_LABEL}), e.g. koordinator",
    )
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
    v.add_argument("--output", choices=("text", "json"), default="text")
    v.set_defaults(func=cmd_validate)

    r = sub.add_parser("render", help="print the effective merged policy for one node")
    _policy_source_args(r)
    r.add_argument("--node", type=Path, help="facts snapshot or Kubernetes Node YAML (default: this machine)")
    r.add_argument(
        "--show-origin", action="store_true", help="annotate every value with the file:line that set it"
    )
    r.add_argument("--output", choices=("yaml", "json"), default="yaml")
    r.set_defaults(func=cmd_render)

    s = sub.add_parser("schema", help="print a JSON Schema (policy or facts)")
    s.add_argument("kind", nargs="?", choices=("policy", "facts"), default="policy")
    s.add_argument("--names", action="store_true", help="list the fact names conditions may use")
    s.set_defaults(func=cmd_schema)

    e = sub.add_parser("eval", help="evaluate the policy on one facts snapshot; print intents and operations")
    e.add_argument(
        "--rules",
        action="append",
        default=[],
        type=Path,
        metavar="PATH",
        help="rule file or directory (repeatable)",
    )
    e.add_argument(
        "--facts", required=True, type=Path, help="facts snapshot (YAML or JSON, schemas/facts.schema.json)"
    )
    e.add_argument("--backend", choices=("python", "durable"), default="python")
    e.add_argument("--output", choices=("table", "json"), default="table")
    e.add_argument("--state", type=Path, help="engine state from a previous evaluation's JSON 'state'")
    e.add_argument("--no-builtin", action="store_true", help="leave out the built-in default layer")
    e.add_argument(
        "--profile", type=profile, help=f"bundled profile to use (sets node label {PROFILE_LABEL})"
    )
    e.add_argument("--dry-run", action="store_true", help="plan no operations, report them as held")
    e.add_argument(
        "--eviction-burst",
        type=integer(0, 10000),
        default=3,
        help="evictions per tick across all rules (default 3)",
    )
    e.set_defaults(func=cmd_eval)

    ruletest_options.add_parser(sub)
    explain.add_parser(sub)
    simulate_options.add_parser(sub)
    daemon_options.add_parser(sub)
    demo.add_parser(sub)

    c = sub.add_parser("crd", help="print qosd's CustomResourceDefinitions (QoSPolicy, QoSNodeStatus)")
    c.add_argument("--output", choices=("yaml", "json"), default="yaml")
    c.add_argument(
        "--kind",
        choices=("all", "policy", "nodestatus"),
        default="all",
        help="which CRD (default all: a multi-document YAML, or a v1 List in JSON)",
    )
    c.set_defaults(func=cmd_crd)
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
        if getattr(args, "output", "text") == "json":
            print(exc.to_json())
        else:
            print(exc.format(), file=sys.stderr)
        missing = all(p.message == "no such file or directory" for p in exc.problems)
        return EXIT_USAGE if missing else EXIT_INVALID
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
