"""``qosd`` run as an operator runs it: a child process of the real command line, without the
QOSD_DEBUG the test session sets (so an internal error is the one line an operator would see)."""

from __future__ import annotations

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
