"""``qosd test``: run the suites the paths name and report (text, JSON or YAML; JUnit XML on request)."""

from __future__ import annotations

import argparse
import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from engine.config.errors import PolicyError, UsageError
from engine.config.output import dump_yaml
from engine.resources import API_VERSION
from engine.ruletest.junit import junit_problems, junit_xml, write_junit
from engine.ruletest.reader import load_suites
from engine.ruletest.report import format_json, format_text, format_yaml
from engine.ruletest.runner import run

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _junit(tree: ET.ElementTree, path: Path | None) -> bool:
    """Write the JUnit report if asked; False (and a usage error printed) when the file cannot be."""
    if path is None:
        return True
    try:
        write_junit(tree, path)
    except OSError as exc:
        print(f"qosd: error: --junit {path}: {exc.strerror or exc}", file=sys.stderr)
        return False
    return True


def cmd_test(args: argparse.Namespace) -> int:
    select = None
    if args.run:
        try:
            select = re.compile(args.run)
        except re.error as exc:
            print(f"qosd: error: --run {args.run!r} is not a regular expression: {exc}", file=sys.stderr)
            return EXIT_USAGE
    try:
        suites = load_suites(args.paths)
    except UsageError as exc:
        print(f"qosd: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except PolicyError as exc:
        if args.output in ("json", "yaml"):
            doc = {
                "apiVersion": API_VERSION,
                "kind": "RuleTestReport",
                "passed": False,
                "problems": [p.to_dict() for p in exc.problems],
            }
            sys.stdout.write(json.dumps(doc, indent=2) + "\n" if args.output == "json" else dump_yaml(doc))
        else:
            print(exc.format(), file=sys.stderr)
        return EXIT_FAILED if _junit(junit_problems(exc.problems), args.junit) else EXIT_USAGE
    try:
        results = run(suites, args.backend, select)
    except RuntimeError as exc:
        # An optional evaluator that is missing or whose worker died (DurableBackendError): the
        # suites are fine, the environment is not. The in-process evaluator has no such failure.
        if args.backend == "python":
            raise
        print(f"qosd: error: the {args.backend} backend cannot run the suites: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if select is not None and not results:
        print(f"qosd: error: no case name matches --run {args.run!r}", file=sys.stderr)
        return EXIT_USAGE
    formats = {"json": lambda: format_json(results) + "\n", "yaml": lambda: format_yaml(results)}
    sys.stdout.write(formats.get(args.output, lambda: format_text(results))())
    if not _junit(junit_xml(results), args.junit):
        return EXIT_USAGE
    return EXIT_OK if all(r.ok for r in results) else EXIT_FAILED
