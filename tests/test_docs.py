"""The README and docs/ are true (issue 18): every relative link resolves, and every ``qosd`` command
line they show parses; those that need no cluster, root or cgroup hierarchy run, for real, and
succeed.

A command line is a line of a fenced code block that starts with ``qosd `` (inline code spans name
commands and flags in prose, and synopses such as ``qosd validate [PATH...]`` are not command lines).
The lines run in a scratch directory that links the repository's examples/, rules/ and schemas/, so
one line can write a file (``> sim.json``) that the next reads, as in a terminal. They run through
``engine.cli.main`` in this interpreter (tests/qosdcli.py): what is checked is the documented command
line, parsed and dispatched as ``qosd`` does; the installed ``qosd`` process has its own tests
(tests/test_cli_conventions.py, tests/test_cli_errors.py).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from engine import cli
from tests.qosdcli import SHIPPED_DAY, qosd_in_process, shipped_day_summary, shipped_rule_tests

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Commands that start the daemon or the live demo: they need root, a cgroup hierarchy or a cluster.
NEEDS_THE_MACHINE = {"run", "demo"}
# Commands that read what only a running node has: its audit log, or minutes of live collection.
NEEDS_A_NODE = (("trace", "record"),)
# Exit codes a documented command gives by design: a --baseline comparison exits 3 when decisions differ.
DOCUMENTED_EXIT = {"--baseline": 3}
# Lines that read only the repository and write nothing, whose run other tests share: the same
# command line from the repository root (README.md and docs/parity.md both show `qosd test examples/`).
SHARED_RUNS = {
    ("test", "examples/"): shipped_rule_tests,
    ("simulate", "--trace", SHIPPED_DAY, "--no-timeline"): shipped_day_summary,
}


def _needs_machine(argv: list[str]) -> bool:
    return argv[0] in NEEDS_THE_MACHINE or tuple(argv[:2]) in NEEDS_A_NODE


def _links(path: Path) -> list[tuple[int, str]]:
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        for m in re.finditer(r"\[[^\]]*\]\(([^)\s]+)\)", line):
            target = m.group(1)
            if not re.match(r"[a-z]+:", target) and not target.startswith("#"):
                out.append((i, target))
    return out


LINKS = [(d, i, t) for d in DOCS for i, t in _links(d)]


@pytest.mark.parametrize(
    ("doc", "line", "target"), LINKS, ids=[f"{d.relative_to(ROOT)}:{i}:{t}" for d, i, t in LINKS]
)
def test_relative_links_resolve(doc: Path, line: int, target: str) -> None:
    file, _, anchor = target.partition("#")
    resolved = (doc.parent / file).resolve()
    assert resolved.exists(), f"{doc.relative_to(ROOT)}:{line}: {target} does not exist"
    assert resolved.is_relative_to(ROOT), f"{doc.relative_to(ROOT)}:{line}: {target} leaves the repository"
    if anchor and resolved.suffix == ".md":
        slugs = {_slug(h) for h in re.findall(r"^#+ (.+)$", resolved.read_text(encoding="utf-8"), flags=re.M)}
        assert anchor in slugs, f"{doc.relative_to(ROOT)}:{line}: no heading #{anchor} in {file}"


def _slug(heading: str) -> str:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _command_lines(path: Path) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    fenced = False
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines, 1):
        if line.strip().startswith("```"):
            fenced = not fenced
            continue
        text = line.strip().removeprefix("$ ")
        if fenced and text.startswith("qosd "):
            j = i
            while text.endswith("\\") and j < len(lines):  # a command continued on the next line
                text = text[:-1] + " " + lines[j].strip()
                j += 1
            out.append((i, text))
    return out


COMMANDS = [(d, i, c) for d in DOCS for i, c in _command_lines(d)]


def _argv(command: str) -> tuple[list[str], str | None]:
    """The arguments after ``qosd`` and the file stdout is redirected to, without the comment."""
    words = shlex.split(command, comments=True)[1:]
    if ">" in words:
        at = words.index(">")
        return words[:at], words[at + 1]
    return words, None


def test_the_docs_show_command_lines() -> None:
    assert len(COMMANDS) >= 10, COMMANDS


@pytest.mark.parametrize(
    ("doc", "line", "command"), COMMANDS, ids=[f"{d.relative_to(ROOT)}:{i}" for d, i, _ in COMMANDS]
)
def test_every_command_line_parses(doc: Path, line: int, command: str) -> None:
    argv, _ = _argv(command)
    try:
        cli.build_parser().parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"{doc.relative_to(ROOT)}:{line}: `{command}` does not parse (exit {exc.code})")


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("docs")
    for name in ("examples", "rules", "schemas", "tests"):
        (d / name).symlink_to(ROOT / name)
    # What a placeholder such as <eval-output.json> stands for: an evaluation of a shipped snapshot.
    facts = "examples/snapshots/numa-watermark-pressure.yaml"
    proc = qosd_in_process("eval", "--facts", facts, "-o", "json", cwd=d)
    assert proc.returncode == 0, proc.stderr
    (d / "eval-output.json").write_text(proc.stdout)
    return d


@pytest.mark.parametrize(
    ("doc", "line", "command"),
    [c for c in COMMANDS if not _needs_machine(_argv(c[2])[0])],
    ids=[f"{d.relative_to(ROOT)}:{i}" for d, i, c in COMMANDS if not _needs_machine(_argv(c)[0])],
)
def test_every_command_line_that_needs_no_machine_runs(
    scratch: Path, doc: Path, line: int, command: str
) -> None:
    """Lines run in document order (pytest keeps it), so a file one line writes is there for the
    next. A placeholder (``<eval-output.json>``) names a file the scratch directory holds."""
    argv, stdout_file = _argv(command)
    argv = [_fill(a, scratch) for a in argv]
    if "--plot" in argv:
        pytest.importorskip("matplotlib", reason="--plot draws with matplotlib, not installed here")
    shared = SHARED_RUNS.get(tuple(argv))
    proc = shared() if shared is not None and stdout_file is None else qosd_in_process(*argv, cwd=scratch)
    expected = next((code for flag, code in DOCUMENTED_EXIT.items() if flag in argv), 0)
    assert proc.returncode == expected, (
        f"{doc.relative_to(ROOT)}:{line}: `{command}` exited {proc.returncode}:\n{proc.stderr[-2000:]}"
    )
    if stdout_file is not None:
        (scratch / stdout_file).write_text(proc.stdout)


def _fill(arg: str, scratch: Path) -> str:
    if re.fullmatch(r"<[^>]+>", arg):
        name = arg.strip("<>")
        assert (scratch / name).is_file(), f"placeholder {arg}: no such file in the scratch directory"
        return name
    return arg
