"""``qosd validate``, ``qosd render``, ``qosd schema`` and ``qosd crd``: what each does with its parsed
flags (engine.cli parses them), and the node a policy is built for (a file, or this machine)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.config.errors import Location, PolicyError, Problem, UsageError
from engine.config.load import Document, read_file
from engine.config.output import dump_yaml, yaml_with_origins
from engine.config.pipeline import build_policy, load_documents, node_labels, validate
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


def _print_problems(
    problems: Sequence[Problem], output: str, summary: str, notes: Sequence[Problem] = ()
) -> None:
    if output == "json":
        print(
            json.dumps(
                {
                    "valid": not problems,
                    "summary": summary,
                    "problems": [p.to_dict() for p in problems],
                    "notes": [n.to_dict() for n in notes],
                },
                indent=2,
            )
        )
        return
    for p in problems:
        print(p.format())
    for n in notes:
        print(n.format().replace(": error: ", ": note: ", 1))
    print(summary)


def cmd_validate(args: argparse.Namespace) -> int:
    docs = load_documents(args.paths, builtin=not args.no_builtin)
    node = (
        load_node(args.node, args.profile, args.label) if (args.node or args.profile or args.label) else None
    )
    notes: list[Problem] = []
    problems = validate(docs, node, notes)
    files = {d.source for d in docs}
    n = len(problems)
    if problems:
        summary = f"{n} problem{'s' if n != 1 else ''} in {len(docs)} document(s) from {len(files)} file(s)"
    else:
        summary = f"valid: {len(docs)} document(s) from {len(files)} file(s)"
    _print_problems(problems, args.output, summary, notes)
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



def cmd_crd(args: argparse.Namespace) -> int:
    from engine.config.crd import qosd_crds
    from engine.config.crd.node_status import build_node_status_crd

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
