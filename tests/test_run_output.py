"""What ``qosd run`` tells its operator (issue 18): ``--once --dry-run`` prints the plan to stdout and
changes nothing; a start-up line names the mode, where workloads come from, how many per class and
the generation in effect; a ``--root`` that matches nothing is a warning; every performed operation
is an info line; the audit log records only ticks that decide or change something, and rotates by
size. Real ``qosd run`` processes on this machine's cgroup v1 hierarchy (tests/realcgroup.py);
skipped, with the reason, without root or a writable v1 hierarchy."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.cli import build_parser
from engine.cli import main as cli_main
from engine.daemon.audit import AuditLog
from engine.daemon.metrics import Metrics
from engine.daemon.wiring import build_standalone
from tests.realcgroup import Subtree, web_and_batch

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def tree() -> Iterator[Subtree]:
    with web_and_batch() as t:
        yield t


def qosd_run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", "run", "--listen", "", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def logs(stderr: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


def batch_weight(tree: Subtree) -> tuple[str, str]:
    """(file, value) the default policy sets on the batch cgroup: cpu.idle 1, else cpu.shares 2."""
    if (tree.dir("cpu", "batch") / "cpu.idle").exists():
        return "cpu.idle", "1"
    return "cpu.shares", "2"


@pytest.mark.realcgroup
def test_once_dry_run_prints_the_plan_and_changes_nothing(tree: Subtree) -> None:
    file, value = batch_weight(tree)
    before = tree.read("cpu", "batch", file)
    done = qosd_run("--once", "--dry-run", "--root", f"{tree.name}/*")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("Plan of one tick (dry run: nothing written, evicted or published)"), out
    assert (
        f"  would write    {tree.name}/batch/{file} = {value}  (the class knobs step of spec.classes" in out
    )
    # standalone mode has no Kubernetes API: the plan says so instead of promising a publish
    assert "  would skip     publish resource.katalyst.kubewharf.io/reclaimed_millicpu = " in out
    assert (
        ": standalone mode: no Kubernetes API on this node (rule publish-reclaimed-resources: formula headroom"
        in out
    )
    assert "  would publish" not in out
    assert tree.read("cpu", "batch", file) == before  # nothing written
    # docs/standalone.md says which files a batch cgroup gets: exactly what the plan writes there.
    written = sorted(
        line.split(f"{tree.name}/batch/", 1)[1].split(" ", 1)[0]
        for line in out.splitlines()
        if line.startswith("  would write") and f"{tree.name}/batch/" in line
    )
    doc = (ROOT / "docs" / "standalone.md").read_text()
    said = doc.split("With the bundled default policy a batch cgroup gets", 1)[1].split("\n\n", 1)[0]
    # the weight file always (the kernel's default differs); cfs_burst_us only where it is not 0 yet
    assert file in written and set(written) <= {file, "cpu.cfs_burst_us"}, out
    assert "`cpu.idle` 1" in said and "`cpu.cfs_burst_us` 0" in said and "no cpuset" in said


@pytest.mark.realcgroup
def test_startup_line_and_each_performed_operation_are_logged(tree: Subtree) -> None:
    done = qosd_run("--once", "--root", f"{tree.name}/*")
    assert done.returncode == 0, done.stderr
    records = logs(done.stderr)
    (start,) = [r for r in records if r["msg"] == "qosd running: first tick done"]
    assert start["mode"] == "standalone" and start["cgroupRoot"] == "/sys/fs/cgroup"
    assert start["roots"] == [f"{tree.name}/*"]
    assert start["workloadsByClass"] == {"reclaimed_cores": 1, "shared_cores": 1}
    assert start["generation"] == 1 and len(start["hash"]) == 12
    applied = [r for r in records if r["msg"] == "writeCgroup applied"]
    file, value = batch_weight(tree)
    assert any(
        r["path"] == f"{tree.name}/batch" and r["file"] == file and r["value"] == value for r in applied
    )
    assert all(r["level"] == "info" for r in applied)
    assert tree.read("cpu", "batch", file) == value
    assert not [r for r in records if r["msg"].startswith("no workload found")]


def test_a_root_that_matches_nothing_is_a_warning() -> None:
    pattern = f"qosd-nothing-{secrets.token_hex(4)}*/*"
    done = qosd_run("--once", "--dry-run", "--root", pattern)
    if done.returncode == 2 and "--cgroup-root" in done.stderr:
        pytest.skip(f"no cgroup hierarchy to look in here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    (warning,) = [r for r in logs(done.stderr) if r["msg"].startswith("no workload found")]
    assert warning["level"] == "warning" and pattern in warning["msg"]
    assert "--root PATTERN or --workloads FILE" in warning["msg"]


@pytest.mark.realcgroup
def test_a_steady_node_writes_no_audit_record(tree: Subtree, tmp_path: Path) -> None:
    """Five ticks: the first writes (a record), the next four re-plan the same publish and notes and
    decide nothing new (no record). A new workload is a change: its tick is recorded."""
    audit = tmp_path / "audit.jsonl"
    args = build_parser().parse_args(
        ["run", "--root", f"{tree.name}/*", "--listen", "", "--audit-log", str(audit)]
    )
    d = build_standalone(args)
    try:
        for _ in range(5):
            assert d.tick() is not None, d.last_error
        assert d.audit is not None
        assert len(audit.read_text().splitlines()) == 1
        assert d.audit.unchanged == 4
        tree.mkdir("batch2", *(tree.read("cpuset", "", f) for f in ("cpuset.cpus", "cpuset.mems")))
        tree.spawn("batch2", ["sleep", "300"])
        assert d.tick() is not None
        lines = audit.read_text().splitlines()
        assert len(lines) == 2
        assert f"{tree.name}/batch2" in lines[1]
    finally:
        d.shutdown()
    assert cli_main(["explain", str(audit)]) == 0


def test_the_audit_log_rotates_by_size(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(path, Metrics().audit_failures, max_bytes=1000, keep=2)
    for i in range(40):
        assert audit.append({"i": i, "pad": "x" * 80})
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"]
    for name in files:
        assert (tmp_path / name).stat().st_size <= 1000
    kept = [
        json.loads(line)["i"]
        for name in ("audit.jsonl.2", "audit.jsonl.1", "audit.jsonl")
        for line in (tmp_path / name).read_text().splitlines()
    ]
    assert kept == list(range(40 - len(kept), 40))  # the newest records, in order, none torn


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--audit-log-max-bytes", "lots"], "--audit-log-max-bytes"),
        (["--audit-log-keep", "-1"], "--audit-log-keep"),
        (["--audit-log-keep", "101"], "--audit-log-keep"),
    ],
)
def test_rotation_flags_are_bounded(capsys: pytest.CaptureFixture[str], argv: list[str], said: str) -> None:
    with pytest.raises(SystemExit) as exc:
        cli_main(["run", "--once", *argv])
    assert exc.value.code == 2 and said in capsys.readouterr().err


def _tick(fired: tuple[str, ...], reason: str) -> Any:
    """A TickResult-shaped tick with one skipped note and nothing planned."""
    from types import SimpleNamespace

    from engine.evaluate.context import Skipped
    from engine.evaluate.state import EngineState

    ev = SimpleNamespace(fired=fired, skipped=(Skipped("r", reason),), workload_issues=(), intents=())
    plan = SimpleNamespace(operations=(), held=())

    def to_dict() -> dict[str, Any]:
        return {
            "time": 1.0,
            "policy": {"hash": "h", "generation": 1},
            "fired": list(fired),
            "intents": [],
            "skipped": [{"rule": "r", "reason": reason}],
            "workloadIssues": [],
            "operations": [],
            "held": [],
        }

    return SimpleNamespace(evaluation=ev, plan=plan, state=EngineState(), to_dict=to_dict)


@pytest.mark.parametrize(
    ("first", "then", "records"),
    [
        ((("a",), "cooldown: 3s of 4s left"), (("a",), "cooldown: 2s of 4s left"), 1),  # a note ticking on
        ((("a",), "|5120 - 5000| < 500"), (("a",), "|5100 - 5000| < 500"), 1),  # a dead band
        ((("a",), "cooldown: 3s of 4s left"), (("a",), "rate limit: fired 3 times in 60s"), 2),  # news
        ((("a",), "cooldown: 3s of 4s left"), (("a", "b"), "cooldown: 2s of 4s left"), 2),  # b fired
    ],
)
def test_which_ticks_are_news(
    tmp_path: Path, first: tuple[tuple[str, ...], str], then: tuple[tuple[str, ...], str], records: int
) -> None:
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(path, Metrics().audit_failures)
    audit.tick(_tick(*first), ())
    audit.tick(_tick(*then), ())
    assert len(path.read_text().splitlines()) == records


def test_rotation_flags_parse_quantities() -> None:
    args = build_parser().parse_args(["run", "--audit-log-max-bytes", "64Mi", "--audit-log-keep", "2"])
    assert (args.audit_log_max_bytes, args.audit_log_keep) == (64 * 2**20, 2)
    defaults = build_parser().parse_args(["run"])
    assert (defaults.audit_log_max_bytes, defaults.audit_log_keep) == (64 * 2**20, 3)
