"""``qosd test``: run the suites the paths name and report."""

from __future__ import annotations

import argparse
import json
import re
import sys

from engine.config.errors import PolicyError, UsageError
from engine.resources import API_VERSION
from engine.ruletest.reader import load_suites
from engine.ruletest.report import format_json, format_text
from engine.ruletest.runner import run

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


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
        if args.output == "json":
            print(
                json.dumps(
                    {
                        "apiVersion": API_VERSION,
                        "kind": "RuleTestReport",
                        "passed": False,
                        "problems": [p.to_dict() for p in exc.problems],
                    },
                    indent=2,
                )
            )
        else:
            print(exc.format(), file=sys.stderr)
        return EXIT_FAILED
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
    sys.stdout.write(format_json(results) + "\n" if args.output == "json" else format_text(results))
    return EXIT_OK if all(r.ok for r in results) else EXIT_FAILED
