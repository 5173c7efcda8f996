"""bench/RESULTS.md: each benchmark owns one ``## `` section and replaces only that one."""

from __future__ import annotations

import os
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def write_section(heading: str, section: str, path: Path = RESULTS) -> None:
    """Replace the section whose first line is ``heading`` (up to the next ``## ``), or append it;
    other sections are left alone. Written via a temporary file, so a crash never truncates it."""
    text = path.read_text(encoding="utf-8") if path.is_file() else "# Benchmark results\n"
    lines = text.splitlines(keepends=True)
    body = section.rstrip("\n") + "\n"
    start = next((i for i, line in enumerate(lines) if line.strip() == heading), None)
    if start is None:
        new = text.rstrip("\n") + "\n\n" + body
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        tail = "".join(lines[end:])
        new = "".join(lines[:start]) + body + ("\n" + tail if tail else "")
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(new, encoding="utf-8")
    os.replace(tmp, path)
