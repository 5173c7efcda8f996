"""``qosd trace record`` (issue 18): a real standalone ``qosd run --audit-log-facts`` records what the
node saw; the trace made of its audit log replays through ``qosd simulate`` to the same decisions,
tick for tick. Also: rotated logs in any order, a log without facts (a located error with the way
to record one), and a live recording here. Real cgroup v1 (tests/realcgroup.py); skipped, with the
reason, without root or a writable v1 hierarchy."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.cli import main as cli_main
from engine.evaluate.state import EngineState
from engine.sources.trace import read_trace
from tests.realcgroup import Subtree, web_and_batch

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def tree() -> Iterator[Subtree]:
    with web_and_batch() as t:
        yield t


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def record_run(tree: Subtree, audit: Path) -> None:
    """A real qosd run, 100 ms ticks, recording facts; a new workload appears after a few ticks."""
    argv = [sys.executable, "-m", "engine.cli", "run", "--root", f"{tree.name}/*", "--listen", ""]
    argv += ["--interval", "100ms", "--audit-log", str(audit), "--audit-log-facts"]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120  # only ends a failing test
        while len(records(audit)) < 4:
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "qosd run recorded nothing"
            time.sleep(0.02)
        cpus, mems = (tree.read("cpuset", "", f) for f in ("cpuset.cpus", "cpuset.mems"))
        tree.mkdir("batch2", cpus, mems)
        tree.spawn("batch2", ["sleep", "300"])
        seen = len(records(audit))
        while len(records(audit)) < seen + 4:
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "qosd run stopped recording"
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, proc.communicate()[1]


@pytest.mark.realcgroup
def test_a_recorded_run_replays_to_the_same_decisions(
    tree: Subtree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    audit = tmp_path / "audit.jsonl"
    record_run(tree, audit)
    logged = [r for r in records(audit) if "facts" in r]
    assert len(logged) >= 8
    trace = tmp_path / "node.jsonl"
    assert cli_main(["trace", "record", "--audit-log", str(audit), "-o", str(trace)]) == 0
    assert read_trace(trace).samples and not read_trace(trace).closed_loop
    capsys.readouterr()
    assert cli_main(["simulate", str(trace), "-o", "json"]) == 0
    replayed = json.loads(capsys.readouterr().out)["ticks"]
    assert len(replayed) == len(logged)
    for i, (node, sim) in enumerate(zip(logged, replayed, strict=True)):
        for key in ("fired", "operations", "held", "skipped"):
            assert node[key] == sim[key], (i, key)
    # The new workload's first tick wrote its cgroup, in the node's record and in the replay alike.
    writes = [
        i
        for i, r in enumerate(logged)
        if any(f"{tree.name}/batch2" in json.dumps(op) for op in r["operations"])
    ]
    assert writes, "the recording never saw batch2"


def test_rotated_logs_in_any_order_make_one_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Records are ordered by time, whichever file holds them (audit.jsonl.1 is older than audit.jsonl)."""
    from engine.simulate.record import trace_from_records

    docs = [{**_record(100.0 + i), "results": [], "facts": _facts()} for i in range(4)]
    (tmp_path / "audit.jsonl.1").write_text("".join(json.dumps(d) + "\n" for d in docs[:2]))
    (tmp_path / "audit.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs[2:]))
    out = tmp_path / "t.jsonl"
    args = ["trace", "record", "--audit-log", str(tmp_path / "audit.jsonl"), str(tmp_path / "audit.jsonl.1")]
    assert cli_main([*args, "-o", str(out)]) == 0
    trace = read_trace(out)
    assert [s.offset for s in trace.samples] == [0.0, 1.0, 2.0, 3.0]
    assert trace.start == 100.0 and trace.step == 1.0
    assert trace_from_records(docs)["samples"][0]["at"] == 0.0


def test_a_log_without_facts_says_how_to_record_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "audit.jsonl"
    doc = _record(1.0)
    log.write_text(json.dumps(doc) + "\n")
    assert cli_main(["trace", "record", "--audit-log", str(log)]) == 1
    err = capsys.readouterr().err
    assert str(log) in err and "--audit-log-facts" in err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        ([], "needs one source"),
        (["--audit-log", "a.jsonl", "--live", "1m"], "needs one source"),
        (["--audit-log", "missing.jsonl"], "no such file"),
    ],
)
def test_record_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    argv = [str(tmp_path / a) if a.endswith(".jsonl") else a for a in argv]
    assert cli_main(["trace", "record", *argv]) == 2
    assert said in capsys.readouterr().err


@pytest.mark.realcgroup
def test_a_live_recording_changes_nothing_and_replays(tree: Subtree, tmp_path: Path) -> None:
    file = "cpu.idle" if (tree.dir("cpu", "batch") / "cpu.idle").exists() else "cpu.shares"
    before = tree.read("cpu", "batch", file)
    out = tmp_path / "live.jsonl"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "engine.cli",
            "trace",
            "record",
            "--live",
            "2s",
            "--interval",
            "200ms",
            "-o",
            str(out),
            "--",
            "--root",
            f"{tree.name}/*",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    trace = read_trace(out)
    assert len(trace.samples) >= 2
    assert tree.read("cpu", "batch", file) == before  # a dry run
    assert cli_main(["simulate", str(out), "--no-timeline"]) == 0


def _record(time: float) -> dict[str, Any]:
    """An audit record of a tick that decided nothing."""
    return {
        "apiVersion": "qosd.io/v1alpha1",
        "kind": "Evaluation",
        "time": time,
        "policy": {"hash": "0123456789ab", "generation": 1},
        **{key: [] for key in ("fired", "intents", "skipped", "workloadIssues", "operations", "held")},
        "state": EngineState().to_dict(),
    }


def _facts() -> dict[str, Any]:
    return {
        "apiVersion": "qosd.io/v1alpha1",
        "kind": "FactsSnapshot",
        "time": 100.0,
        "node": {"name": "n1", "capacity": {"cpu": 4, "memory": 8589934592}},
        "workloads": [],
        "metrics": {"node": {"cpu": {"usage_cores": 1.0}, "memory": {"usage_bytes": 1073741824}}},
    }
