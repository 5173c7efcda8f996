"""``qosd explain``: what the command does with its parsed flags."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine.config.errors import PolicyError
from engine.config.output import emit, print_policy_error
from engine.explain.decisions import explain
from engine.explain.reader import read_ticks
from engine.explain.report import format_json, format_text

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


def cmd_explain(args: argparse.Namespace) -> int:
    path: Path = args.file
    if not path.exists():
        print(f"qosd: error: {path} does not exist", file=sys.stderr)
        return EXIT_USAGE
    if path.is_dir():
        print(f"qosd: error: {path} is a directory; explain reads one file", file=sys.stderr)
        return EXIT_USAGE
    if not path.is_file():  # /dev/zero would be read forever
        print(f"qosd: error: {path} is not a regular file; explain reads one file", file=sys.stderr)
        return EXIT_USAGE
    try:
        ticks = read_ticks(path)
    except PolicyError as exc:
        print_policy_error(exc, args.output)
        return EXIT_INVALID
    results = explain(ticks, args.rule, args.target)
    if args.output == "yaml":
        emit(json.loads(format_json(results)), "yaml")
    elif args.output == "json":
        sys.stdout.write(format_json(results) + "\n")
    else:
        sys.stdout.write(format_text(results, args.rule, args.target))
    return EXIT_OK
