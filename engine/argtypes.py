"""Command-line value types: each flag's value is parsed where argparse reads it.

A value that cannot work is refused by argparse itself (``qosd run: error: argument --interval:
'1' is not a duration; write e.g. 30s...``, exit 2) before anything starts, instead of surfacing as
a traceback from deep inside start-up. Only what needs the machine (is that port free, is that
pattern under the cgroup root) is checked later, and is then raised as a UsageError (also exit 2).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

from engine.model.units import parse_duration, parse_quantity

MAX_PORT = 65535


def duration(minimum: float, maximum: float) -> Callable[[str], float]:
    """A Go-style duration (``500ms``, ``1s``, ``1m30s``) in seconds, within [minimum, maximum]."""

    def parse(text: str) -> float:
        try:
            seconds = parse_duration(text)
        except ValueError as exc:
            if _is_number(text):  # the commonest slip: --interval 1
                raise argparse.ArgumentTypeError(
                    f"{text!r} has no unit; a duration needs one: write {text.strip()}s (or e.g. 500ms, 1m)"
                ) from None
            raise argparse.ArgumentTypeError(str(exc)) from None
        if not math.isfinite(seconds) or not minimum <= seconds <= maximum:
            raise argparse.ArgumentTypeError(
                f"{text!r} is out of range: between {_seconds(minimum)} and {_seconds(maximum)}"
            )
        return seconds

    parse.__name__ = "duration"  # argparse names the type in its messages
    return parse


def _is_number(text: str) -> bool:
    return re.fullmatch(r"\s*[0-9]+(\.[0-9]+)?\s*", text) is not None


def _seconds(value: float) -> str:
    if value == 0:
        return "0s"
    if value < 1:
        return f"{value * 1000:g}ms"
    if value >= 3600 and value % 3600 == 0:
        return f"{value / 3600:g}h"
    if value >= 60 and value % 60 == 0:
        return f"{value / 60:g}m"
    return f"{value:g}s"


def integer(minimum: int, maximum: int) -> Callable[[str], int]:
    """A whole number within [minimum, maximum]."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip(), 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number") from None
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"{value} is out of range: between {minimum} and {maximum}")
        return value

    parse.__name__ = "integer"
    return parse


def number(minimum: float, maximum: float) -> Callable[[str], float]:
    """A finite decimal number within [minimum, maximum]."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number") from None
        if not math.isfinite(value) or not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(
                f"{text[:40]} is out of range: between {minimum:g} and {maximum:g}"
            )
        return value

    parse.__name__ = "number"
    return parse


def quantity(minimum: float, maximum: float, unit: str = "") -> Callable[[str], float]:
    """A Kubernetes quantity (``128Gi``, ``500m``, ``4``) in base units, finite, within [minimum,
    maximum]; ``unit`` names what the bounds count (``bytes``) in the message."""

    def parse(text: str) -> float:
        try:
            value = parse_quantity(text)
        except ValueError as exc:  # UnitError: names the value and what qosd accepts
            raise argparse.ArgumentTypeError(str(exc)) from None
        if not math.isfinite(value) or not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(
                f"{text[:40]} is out of range: between {_quantity(minimum)} and {_quantity(maximum)}"
                + (f" {unit}" if unit else "")
            )
        return value

    parse.__name__ = "quantity"
    return parse


_BINARY = (("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def _quantity(value: float) -> str:
    for suffix, factor in _BINARY:
        if value >= factor and value % factor == 0:
            return f"{value / factor:g}{suffix}"
    return f"{value:g}"


def percent(text: str) -> float:
    """A percent above 0 and at most 100 (a threshold of 0 would hold for every sample)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number; write a percent, e.g. 90") from None
    if not math.isfinite(value) or not 0 < value <= 100:
        raise argparse.ArgumentTypeError(f"{text[:40]} is out of range: a percent above 0 and at most 100")
    return value


_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")


def profile(text: str) -> str:
    """A ``--profile`` name: it becomes the node label ``qosd.io/profile``, so it must be a valid
    Kubernetes label value (at most 63 characters, alphanumerics and ``-_.`` inside)."""
    if not text or len(text) > 63 or not _LABEL_VALUE.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text[:70]!r} is not a profile name: it becomes the node label qosd.io/profile, so it must "
            "be a label value (1-63 characters: letters, digits and -_. inside), e.g. koordinator"
        )
    return text


def listen_address(text: str) -> str:
    """``host:port``, ``:port`` (every interface) or ``''`` (no HTTP endpoint); the port 0-65535.
    An IPv6 host is written in brackets (``[::1]:9464``). Whether the port is free is known only
    when it is bound (Daemon.serve)."""
    if text == "":
        return text
    host, sep, port = text.rpartition(":")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r} is not host:port; write e.g. :9464 or 127.0.0.1:9464")
    if not port.isdigit() or int(port) > MAX_PORT:
        raise argparse.ArgumentTypeError(f"{text!r}: the port must be a number from 0 to {MAX_PORT}")
    if host.startswith("[") != host.endswith("]") or (":" in host and not host.startswith("[")):
        raise argparse.ArgumentTypeError(f"{text!r}: write an IPv6 host in brackets, e.g. [::1]:9464")
    return text


def cgroup_pattern(text: str) -> str:
    """A ``--root`` pattern: a cgroup path or glob, refused when empty, with NUL or ``..``. Whether
    an absolute pattern lies under --cgroup-root is checked once the hierarchy is known."""
    # Imported here: the demo's workload processes parse their flags with this module and should
    # not pay for the collectors at start-up.
    from engine.sources.standalone import PatternError, check_pattern

    try:
        return check_pattern(text)
    except PatternError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run_command(name: str, add_parser: Callable[[Any], None], argv: Sequence[str] | None = None) -> int:
    """Run one ``qosd`` command from its own argv, as ``qosd <name> ...`` would (used by a command's
    ``main`` for ``python -m`` and for tests that drive one command without the whole CLI)."""
    parser = argparse.ArgumentParser(prog="qosd")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args([name, *(argv if argv is not None else sys.argv[1:])])
    code: int = args.func(args)
    return code


def add_tick_flags(parser: Any, dry_run_help: str) -> None:
    """The flags every command that runs the tick shares (``run``, ``simulate``): the evaluator, the
    dry run and the eviction burst, with one wording and one bound each."""
    parser.add_argument(
        "--backend",
        choices=("python", "durable"),
        default="python",
        help="condition evaluator: compiled Python (default) or durable-rules (the optional extra)",
    )
    parser.add_argument("--dry-run", action="store_true", help=dry_run_help)
    parser.add_argument(
        "--eviction-burst",
        type=integer(0, 10000),
        default=3,
        help="evictions per tick across all rules, 0-10000 (default 3)",
    )
