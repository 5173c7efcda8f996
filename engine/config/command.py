"""``qosd validate``, ``qosd render``, ``qosd schema`` and ``qosd crd``: what each does with its parsed
flags (engine.cli parses them), and the node a policy is built for (a file, or this machine)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine.config.errors import (
    Location,
    PolicyError,
    Problem,
    UsageError,
    problems_document,
    summary_line,
    unique_problems,
)
from engine.config.lints import lint
from engine.config.load import Document, read_file
from engine.config.output import dump_yaml, emit, yaml_with_origins
from engine.config.pipeline import build_policy, load_documents, node_labels, read_documents, validate
from engine.config.schema_check import schema_problems
from engine.model.factnames import registry
from engine.model.node import NodeInfo, node_from_kube, node_from_snapshot
from engine.resources import load_schema
from engine.sources.facts_check import with_numbers
from engine.sources.localnode import read_local_node

EXIT_OK, EXIT_INVALID = 0, 1


def not_a_file(path: Path) -> str:
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
            raise UsageError(f"node file {path} {not_a_file(path)}")
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
    return node_from_snapshot(with_numbers(snapshot)["node"])


def report_problems(
    problems: Sequence[Problem], output: str, summary: str, valid: bool, notes: Sequence[Problem] = ()
) -> None:
    """Problems as the command's result: a document on stdout for ``-o json|yaml`` (the shape
    PolicyError uses for every command, plus validate's notes), else diagnostics on stderr and,
    when the input is valid, the summary on stdout."""
    if output in ("json", "yaml"):
        emit({**problems_document(problems, summary, valid), "notes": [n.to_dict() for n in notes]}, output)
        return
    for p in (*problems, *notes):
        print(p.format(), file=sys.stderr)
    print(summary, file=sys.stdout if valid else sys.stderr)


def cmd_validate(args: argparse.Namespace) -> int:
    docs, unread = read_documents(args.rules, builtin=not args.no_builtin)
    if any(p.message == "no such file or directory" for p in unread):
        raise PolicyError(unread)  # a usage error (exit 2): engine.cli
    node = (
        load_node(args.node, args.profile, args.label) if (args.node or args.profile or args.label) else None
    )
    # A file that cannot be read does not hide the others' problems; the checks across documents
    # (references, merging) wait until every file reads, or a reference into it would look missing.
    notes: list[Problem] = []
    problems = [*unread, *validate(docs, node, notes, documents_only=bool(unread))]
    if not any(p.severity == "error" for p in problems):
        problems += lint(docs, node)
    if args.strict:
        problems = [replace(p, severity="error") for p in problems]
    problems = unique_problems(problems)
    files = {d.source for d in docs} | {p.location.source for p in unread}
    summary = summary_line(problems, len(docs), len(files))
    if unread:
        n = len({p.location.source for p in unread})
        summary += f"; checks across documents skipped while {n} file{'s' if n != 1 else ''} cannot be read"
    valid = not any(p.severity == "error" for p in problems)
    report_problems(problems, args.output, summary, valid, [replace(n, severity="note") for n in notes])
    return EXIT_OK if valid else EXIT_INVALID


def cmd_render(args: argparse.Namespace) -> int:
    docs = load_documents(args.rules, builtin=not args.no_builtin)
    node = load_node(args.node, args.profile, args.label)
    policy = build_policy(docs, node)
    if args.output == "json":
        out = policy.to_document()
        if args.show_origin:
            out["origins"] = {path: str(loc) for path, loc in sorted(policy.origins.items())}
        emit(out, "json")
    elif args.show_origin:
        sys.stdout.write(yaml_with_origins(policy))
    else:
        sys.stdout.write(dump_yaml(policy.to_document()))
    return EXIT_OK


def cmd_schema(args: argparse.Namespace) -> int:
    if args.names:
        if args.kind != "facts":
            raise UsageError("--names lists fact names; use `qosd schema facts --names`")
        specs = sorted(registry().specs.values(), key=lambda s: s.name)
        if args.output != "text":
            rows = [
                {"name": s.name, "kind": s.kind, "unit": s.unit or None, "windowed": bool(s.series),
                 "description": s.description}
                for s in specs
            ]
            emit(rows, args.output)
            return EXIT_OK
        width = max(len(s.name) for s in specs)
        for s in specs:
            extra = " (windowed)" if s.series else ""
            unit = f" [{s.unit}]" if s.unit else ""
            print(f"{s.name:<{width}}  {s.kind}{unit}{extra}  {s.description}".rstrip())
        return EXIT_OK
    emit(load_schema(args.kind), "yaml" if args.output == "yaml" else "json")
    return EXIT_OK


def cmd_crd(args: argparse.Namespace) -> int:
    from engine.config.crd import qosd_crds
    from engine.config.crd.node_status import build_node_status_crd

    crds = qosd_crds()
    if args.kind != "all":
        crds = crds[:1] if args.kind == "policy" else [build_node_status_crd()]
    if args.output == "json":
        emit(crds[0] if len(crds) == 1 else {"apiVersion": "v1", "kind": "List", "items": crds}, "json")
    else:
        sys.stdout.write("---\n".join(dump_yaml(c) for c in crds))
    return EXIT_OK
