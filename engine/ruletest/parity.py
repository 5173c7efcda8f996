"""The generated part of docs/parity.md: the anchors' own unit tests, ported as RuleTest suites under
examples/parity/, counted per anchor package (cases ported, passing, xfail with their reasons).

Parity claimed in prose drifts from parity shown; this table is computed by running the suites, so it
says what qosd does today. The generator rewrites only the block between the two markers below and
keeps every other line of the page (the hand-written feature rows and deliberate differences)::

    python -m engine.ruletest.parity --write      # regenerate docs/parity.md
    python -m engine.ruletest.parity --check      # exit 1 when docs/parity.md is stale (CI, tests)
    python -m engine.ruletest.parity              # print the block

A package is the directory of the anchor's test file (``pkg/koordlet/qosmanager/plugins/cpusuppress``).
A case without an anchor is counted under "(no anchor)", so a port that forgot to name its source shows.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from engine.config.errors import PolicyError, UsageError
from engine.ruletest.reader import load_suites
from engine.ruletest.runner import CaseResult, run

BEGIN = (
    "<!-- BEGIN GENERATED: anchor unit tests (python -m engine.ruletest.parity --write); "
    "edit the suites, not this block -->"
)
END = "<!-- END GENERATED: anchor unit tests -->"
NO_ANCHOR = "(no anchor)"


@dataclass
class Package:
    repo: str
    package: str
    suites: set[str] = field(default_factory=set)
    results: list[CaseResult] = field(default_factory=list)

    def count(self, *statuses: str) -> int:
        return sum(r.status in statuses for r in self.results)


def _relative(path: str, root: Path) -> str:
    try:
        return Path(path).resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return Path(path).as_posix()


def packages(results: Sequence[CaseResult]) -> list[Package]:
    table: dict[tuple[str, str], Package] = {}
    for r in results:
        key = (r.anchor.repo, str(Path(r.anchor.file).parent)) if r.anchor else ("", NO_ANCHOR)
        pkg = table.setdefault(key, Package(*key))
        pkg.suites.add(r.source)
        pkg.results.append(r)
    return [table[k] for k in sorted(table)]


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def render(results: Sequence[CaseResult], root: Path, suites_dir: Path) -> str:
    """The generated block, markers included. Deterministic: the same suites give the same text."""
    shown = _relative(str(suites_dir), root)
    lines = [BEGIN, "", "## Anchor unit tests, ported (generated)", ""]
    lines.append(
        f"The anchors' own unit tests, ported case by case as `qosd test` suites under `{shown}/` and run "
        "through the bundled profiles with overlays that set only what each anchor test sets. "
        "Regenerate with `python -m engine.ruletest.parity --write`; `tests/test_parity_doc.py` fails "
        "when this block is stale."
    )
    lines.append("")
    if not results:
        lines += [f"No suites under `{shown}/` yet.", "", END]
        return "\n".join(lines) + "\n"
    n = len(results)
    passing = sum(r.status == "pass" for r in results)
    xfail = sum(r.status == "xfail" for r in results)
    failing = n - passing - xfail
    lines.append(
        f"**{n} cases ported, {passing} pass ({100 * passing // n}%), {xfail} xfail (known differences, "
        f"reasons below), {failing} failing.** The target of at least 90% passing is "
        + ("met." if passing * 10 >= n * 9 else "not met yet.")
    )
    lines += [
        "",
        "| repository | package | suites | cases | pass | xfail | failing |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for p in packages(results):
        lines.append(
            f"| {p.repo or '—'} | `{p.package}` | {len(p.suites)} | {len(p.results)} | {p.count('pass')} | "
            f"{p.count('xfail')} | {p.count('fail', 'error', 'xpass')} |"
        )
    known = [r for r in results if r.status in ("xfail", "xpass")]
    broken = [r for r in results if r.status in ("fail", "error")]
    for title, rows in (("Known differences (xfail)", known), ("Failing", broken)):
        if not rows:
            continue
        lines += ["", f"### {title}", "", "| anchor test | case | suite | reason |", "|---|---|---|---|"]
        for r in rows:
            anchor = NO_ANCHOR
            if r.anchor is not None:
                anchor = f"`{r.anchor.function}`" + (f" › {_cell(r.anchor.case)}" if r.anchor.case else "")
            where = f"{_relative(r.source, root)}:{r.location.line}"
            why = r.xfail or ""
            if r.status == "xpass":
                why += " (passes now: remove the xfail)"
            elif r.status in ("fail", "error"):
                first = r.failures[0].message if r.failures else (r.problems[0].message if r.problems else "")
                why = first
            lines.append(f"| {anchor} | {_cell(r.name)} | `{where}` | {_cell(why)} |")
    lines += ["", END]
    return "\n".join(lines) + "\n"


def replaced(page: str, block: str) -> str:
    """``page`` with its generated block replaced by ``block``; appended if the page has none."""
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 or end < start:
        return page.rstrip("\n") + "\n\n" + block
    return page[:start] + block.rstrip("\n") + page[end + len(END) :]


def results_for(suites_dir: Path) -> list[CaseResult]:
    if not suites_dir.is_dir():
        return []
    try:
        suites = load_suites([suites_dir])
    except UsageError:  # no RuleTest suites in it yet
        return []
    return run(suites)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m engine.ruletest.parity",
        description="Generate (or check) the anchor unit-test table of docs/parity.md from examples/parity/.",
    )
    parser.add_argument(
        "--suites", type=Path, default=Path("examples/parity"), help="default: examples/parity"
    )
    parser.add_argument("--doc", type=Path, default=Path("docs/parity.md"), help="default: docs/parity.md")
    parser.add_argument("--root", type=Path, default=Path("."), help="repository root paths are shown from")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the generated block of --doc")
    mode.add_argument(
        "--check", action="store_true", help="exit 1 when --doc's block is not what the suites give"
    )
    args = parser.parse_args(argv)
    try:
        block = render(results_for(args.suites), args.root, args.suites)
    except PolicyError as exc:
        print(exc.format(), file=sys.stderr)
        return 1
    if not (args.write or args.check):
        sys.stdout.write(block)
        return 0
    page = args.doc.read_text(encoding="utf-8")
    new = replaced(page, block)
    if args.check:
        if new != page:
            print(f"{args.doc} is stale: run python -m engine.ruletest.parity --write", file=sys.stderr)
            return 1
        return 0
    args.doc.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
