"""``qosd trace record``: what a real node saw, as a trace ``qosd simulate`` replays.

A platform team tries a rule change on a recorded day of a real node, not only on generated ones.
Two sources, one format:

- ``--audit-log FILE...``: the audit log of a ``qosd run --audit-log-facts`` (rotated files too, in
  any order). Each record carries the facts snapshot the tick was decided on; every tick is there.
- ``--live DURATION``: run the daemon here, in dry run (nothing is written, evicted or published),
  for DURATION, with the flags after ``--`` (``--root``, ``--workloads``, ``--rules``, ``--profile``,
  ``--kubeconfig``...), recording each tick's facts the same way; then convert.

The trace holds one ``snapshot`` sample per tick (open loop: ``simulate`` replays each recorded
snapshot as it was, so under the same rules it decides what the node decided), the first snapshot
as ``base``, the first tick's time as ``start``, and the median time between ticks as ``step``.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from engine.config.errors import Location, PolicyError, Problem, UsageError
from engine.resources import API_VERSION
from engine.simulate.command import emit_trace
from engine.sources.trace import duration_text

EXIT_OK = 0


def trace_from_records(records: Sequence[Mapping[str, Any]], name: str | None = None) -> dict[str, Any]:
    """A trace document from audit records that carry ``facts`` (others, such as the records of
    evictions that ended after their tick, hold no tick of their own and are left out)."""
    ticks = sorted(
        (r for r in records if isinstance(r.get("facts"), Mapping)), key=lambda r: float(r["time"])
    )
    if not ticks:
        raise ValueError("no record carries facts")
    start = float(ticks[0]["time"])
    gaps = [float(b["time"]) - float(a["time"]) for a, b in itertools.pairwise(ticks)]
    step = round(statistics.median(gaps), 3) if gaps else 1.0  # a daemon's interval, to the millisecond
    node = str((ticks[0]["facts"].get("node") or {}).get("name", "node"))
    return {
        "apiVersion": API_VERSION,
        "kind": "Trace",
        "metadata": {"name": name or f"recorded-{node}"},
        "base": dict(ticks[0]["facts"]),
        "start": start,
        "step": duration_text(step) if step > 0 else "1s",
        "samples": [{"at": round(float(r["time"]) - start, 6), "snapshot": dict(r["facts"])} for r in ticks],
    }


def read_audit_records(paths: Sequence[Path]) -> list[Mapping[str, Any]]:
    """Every Evaluation record of these audit logs, schema-checked (located errors otherwise)."""
    from engine.explain.reader import read_ticks

    out: list[Mapping[str, Any]] = []
    problems: list[Problem] = []
    for path in paths:
        if not path.is_file():
            raise UsageError(f"--audit-log {path}: no such file")
        try:
            out.extend(t.doc for t in read_ticks(path))
        except PolicyError as exc:
            problems.extend(exc.problems)
    if problems:
        raise PolicyError(problems)
    return out


def record_live(duration: float, interval: str, run_argv: Sequence[str], audit: Path) -> None:
    """Run ``qosd run --dry-run --audit-log-facts`` here for ``duration`` seconds."""
    from engine.daemon.logs import configure_logging
    from engine.daemon.options import add_parser
    from engine.daemon.wiring import build_kube, build_standalone, kube_mode

    argv = ["run", "--dry-run", "--listen", "", "--no-watch", "--interval", interval, *run_argv]
    argv += ["--audit-log", str(audit), "--audit-log-facts", "--audit-log-max-bytes", "0"]
    parser = argparse.ArgumentParser(prog="qosd")
    add_parser(parser.add_subparsers(dest="command", required=True))
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse said what is wrong with the flags after --
        raise UsageError(f"the qosd run flags after -- are not valid: {' '.join(run_argv)}") from exc
    configure_logging(args.log_level)
    daemon = build_kube(args) if kube_mode(args) else build_standalone(args)
    timer = threading.Timer(duration, daemon.stop.set)
    timer.daemon = True
    timer.start()
    try:
        daemon.run()
    finally:
        timer.cancel()


def cmd_trace_record(args: argparse.Namespace) -> int:
    if bool(args.audit_log) == (args.live is not None):
        raise UsageError("trace record needs one source: --audit-log FILE... or --live DURATION")
    if args.audit_log:
        records = read_audit_records(args.audit_log)
        source = ", ".join(str(p) for p in args.audit_log)
    else:
        with tempfile.TemporaryDirectory(prefix="qosd-record-") as tmp:
            audit = Path(tmp) / "audit.jsonl"
            record_live(args.live, args.interval, args.run_args, audit)
            if not audit.exists():
                raise UsageError("the live recording ended before its first tick; nothing to write")
            records = read_audit_records([audit])
        source = f"a live recording of {duration_text(args.live)} on this node"
    try:
        doc = trace_from_records(records, args.name)
    except ValueError:
        raise PolicyError(
            [
                Problem(
                    Location(source),
                    "no audit record carries the facts it was decided on, so there is nothing to replay",
                    "record with `qosd run --audit-log FILE --audit-log-facts` (every tick, with its "
                    "facts), or use `qosd trace record --live 10m -- <qosd run flags>`",
                )
            ]
        ) from None
    comment = (
        f"Recorded by qosd trace record from {source}: {len(doc['samples'])} ticks, one snapshot each\n"
        "(replayed open loop: `qosd simulate` decides on exactly what the node saw)."
    )
    emit_trace(doc, args.output_file, args.format or "jsonl", comment)
    return EXIT_OK


def add_record_parser(tsub: Any) -> None:
    """``qosd trace record`` on the ``trace`` subcommand parser."""
    from engine.argtypes import duration

    r = tsub.add_parser(
        "record",
        help="turn a node's audit log (qosd run --audit-log-facts) or a live recording into a trace",
        description=(
            "Turn what a node saw into a trace `qosd simulate` replays: the audit log of a "
            "`qosd run --audit-log-facts` (--audit-log), or a recording here (--live DURATION, qosd run "
            "in dry run with the flags after --). One snapshot sample per tick, replayed open loop."
        ),
    )
    r.add_argument(
        "--audit-log",
        action="extend",
        nargs="+",
        type=Path,
        default=[],
        metavar="FILE",
        help="audit log(s) of `qosd run --audit-log-facts`, rotated ones too (any order)",
    )
    r.add_argument(
        "--live",
        type=duration(1.0, 7 * 24 * 3600.0),
        metavar="DURATION",
        help="record here for this long (e.g. 10m), running qosd run in dry run with the flags after --",
    )
    r.add_argument("--interval", default="1s", help="with --live: the tick period (default 1s)")
    r.add_argument("--name", help="metadata.name of the trace (default recorded-<node>)")
    r.add_argument("--format", choices=("yaml", "json", "jsonl"), help="stdout format (default jsonl)")
    r.add_argument(
        "-o",
        "--output-file",
        type=Path,
        metavar="PATH",
        help="write here (.yaml, .json or .jsonl); default stdout",
    )
    r.add_argument("run_args", nargs=argparse.REMAINDER, help="with --live: -- then qosd run flags")
    r.set_defaults(func=_strip_dashes(cmd_trace_record))


def _strip_dashes(cmd: Any) -> Any:
    """argparse keeps the ``--`` that starts REMAINDER; the run flags start after it."""

    def run(args: argparse.Namespace) -> int:
        if args.run_args and args.run_args[0] == "--":
            args.run_args = args.run_args[1:]
        if args.run_args and args.live is None:
            raise UsageError(f"flags after -- go to a --live recording: {' '.join(args.run_args)}")
        code: int = cmd(args)
        return code

    return run
