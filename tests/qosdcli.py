"""``qosd`` run as an operator runs it: a child process of the real command line, without the
QOSD_DEBUG the test session sets (so an internal error is the one line an operator would see); or,
where the process is not what a test is about, the same command line in this interpreter."""

from __future__ import annotations

import contextlib
import functools
import io
import os
import subprocess
import sys
from pathlib import Path

from engine import cli

ROOT = Path(__file__).resolve().parent.parent


def qosd(
    *argv: str, stdin: str | None = None, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    child_env = {k: v for k, v in (env or os.environ).items() if k != cli.DEBUG_ENV}
    child_env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *argv],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=child_env,
    )


def qosd_in_process(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``engine.cli.main(argv)`` in this interpreter, run from ``cwd``, with its stdout and stderr
    captured: the same command line, parsed and dispatched as ``qosd`` does, without a fresh
    interpreter's start-up (about a second per command) and with the file caches warm. For tests of
    what a command does (its exit code, its output), not of the process. QOSD_DEBUG stays set, so a
    bug fails the test with its traceback instead of becoming exit 70."""
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(list(argv))
            except SystemExit as exc:  # argparse's usage errors and --help
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.chdir(here)
    return subprocess.CompletedProcess(["qosd", *argv], code, out.getvalue(), err.getvalue())


@functools.cache
def repository_run(*argv: str) -> subprocess.CompletedProcess[str]:
    """A command line that reads only the repository and writes nothing, run in this interpreter from
    the repository root (where the README's commands run) once per session, for every test that
    reads its result: its output does not depend on which test asks first."""
    return qosd_in_process(*argv)


def shipped_rule_tests(*options: str) -> subprocess.CompletedProcess[str]:
    """``qosd test examples/`` (with ``options``, e.g. ``-o json``), as the README shows it: README.md
    and docs/parity.md show the line, and several tests read its report (tests/test_ruletest.py,
    tests/test_ruletest_report.py, tests/test_docs.py). The whole run takes seconds."""
    return repository_run("test", "examples/", *options)


SHIPPED_DAY = "examples/traces/tidal-day.yaml"


def shipped_day_summary() -> subprocess.CompletedProcess[str]:
    """``qosd simulate --trace examples/traces/tidal-day.yaml --no-timeline`` (README.md), shared by
    tests/test_docs.py and tests/test_simulate_changes.py."""
    return repository_run("simulate", "--trace", SHIPPED_DAY, "--no-timeline")
