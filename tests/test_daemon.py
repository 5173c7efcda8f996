"""``qosd run`` in standalone mode against the real cgroup v1 hierarchy of this machine.

Each test builds the daemon exactly as ``qosd run`` does (``build_standalone`` on parsed arguments)
over a fresh cgroup subtree (tests/realcgroup.py) whose children are the workloads: ``web`` (shared
by the default name mapping) and ``batch`` (reclaimed). Values are checked as the kernel shows them.
Faults are real too: a real SIGTERM during a tick, a real ``kill -9`` of a real ``qosd run`` process,
a half-written rule file on disk. Skipped, with the reason, when not root or cgroup v1 is not writable.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from engine.adapters.cgroup import CgroupAdapter
from engine.adapters.result import OperationResult
from engine.cli import build_parser
from engine.cli import main as cli_main
from engine.daemon.loop import Daemon
from engine.daemon.wiring import (
    MEMORY_SECONDS,
    NUMA_SECONDS,
    OBSERVE_SECONDS,
    CollectorSource,
    build_standalone,
    daemon_options,
)
from engine.evaluate.state import state_from_json
from engine.model.intents import CgroupIntent
from engine.model.operations import Operation, WriteCgroup
from tests.realcgroup import Subtree, web_and_batch

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def tree() -> Iterator[Subtree]:
    with web_and_batch() as t:
        yield t


def daemon(tree: Subtree, tmp_path: Path, *extra: str) -> Daemon:
    args = build_parser().parse_args(
        [
            "run",
            "--root",
            f"{tree.name}/*",
            "--listen",
            "",
            "--state-file",
            str(tmp_path / "state.json"),
            "--audit-log",
            str(tmp_path / "audit.jsonl"),
            *extra,
        ]
    )
    return build_standalone(args)


def assert_batch_deprioritized(tree: Subtree) -> None:
    """reclaimed_cores: SCHED_IDLE where the kernel has cpu.idle (it then pins the group's weight to
    its idle weight, read back as 3 shares, so qosd writes no shares), else cpu.shares 2."""
    if (tree.dir("cpu", "batch") / "cpu.idle").exists():
        assert tree.read("cpu", "batch", "cpu.idle") == "1"
        assert tree.read("cpu", "batch", "cpu.shares") == "3"
    else:
        assert tree.read("cpu", "batch", "cpu.shares") == "2"


def adapter_of(d: Daemon) -> CgroupAdapter:
    cgroup = getattr(d.executor, "cgroup", None)
    assert isinstance(cgroup, CgroupAdapter)
    return cgroup


@pytest.mark.realcgroup
def test_one_tick_enforces_the_bundled_policy_and_a_steady_state_writes_nothing(
    tree: Subtree, tmp_path: Path
) -> None:
    """Katalyst reclaimed_cores on the batch cgroup (cpu.idle, or cpu.shares 2); shared work keeps the
    kernel's default weight. Then the plan is already true and the next tick writes nothing."""
    d = daemon(tree, tmp_path)
    first = d.tick()
    assert first is not None, d.last_error
    assert_batch_deprioritized(tree)
    assert tree.read("cpu", "web", "cpu.shares") == "1024"
    writes = adapter_of(d).writes
    assert writes > 0
    second = d.tick()
    assert second is not None
    assert [op for op in second.plan.operations if op.kind == "writeCgroup"] == []
    assert adapter_of(d).writes == writes


@pytest.mark.realcgroup
def test_audit_mode_decides_the_same_writes_and_makes_none(tree: Subtree, tmp_path: Path) -> None:
    """`--mode audit` on the real hierarchy: the tick decides what enforce mode writes (the test
    above), holds each write with the audit reason, and the kernel's values stay as they were."""
    before = {g: tree.read("cpu", g, "cpu.shares") for g in ("web", "batch")}
    d = daemon(tree, tmp_path, "--mode", "audit")
    result = d.tick()
    assert result is not None, d.last_error
    assert result.plan.operations == ()
    held = [h for h in result.plan.held if h.reason.startswith("audit mode (qosd run --mode audit)")]
    assert any(getattr(h.intent, "path", "").endswith("/batch") for h in held)
    assert {g: tree.read("cpu", g, "cpu.shares") for g in ("web", "batch")} == before
    if (tree.dir("cpu", "batch") / "cpu.idle").exists():
        assert tree.read("cpu", "batch", "cpu.idle") == "0"
    assert d.metrics.registry.get_sample_value("qosd_held_total", {"rule": held[0].intent.provenance.rule}) == sum(
        1 for h in result.plan.held if h.intent.provenance.rule == held[0].intent.provenance.rule
    )


def overlay(path: Path, shares: int) -> None:
    path.write_text(
        "apiVersion: qosd.io/v1alpha1\nkind: QoSPolicy\nmetadata: {name: batch-shares}\n"
        f"spec:\n  priority: 10\n  classes:\n    - name: reclaimed_cores\n      cpu: {{idle: false, shares: {shares}}}\n"
    )


@pytest.mark.realcgroup
def test_rule_files_reload_and_a_half_written_file_keeps_the_last_good_generation(
    tree: Subtree, tmp_path: Path
) -> None:
    rules = tmp_path / "rules.yaml"
    overlay(rules, 4)
    # --no-watch: rule files are then re-checked (a stat each) at every tick; the watcher is tested below.
    d = daemon(tree, tmp_path, "--rules", str(rules), "--no-watch")
    assert d.tick() is not None
    assert (d.reloader.generation, tree.read("cpu", "batch", "cpu.shares")) == (1, "4")

    # An editor crashed mid-save: the file ends inside a mapping.
    text = rules.read_text()
    rules.write_text(text[: text.index("cpu:") + 6])
    assert d.tick() is not None  # the tick still runs, on generation 1
    assert d.reloader.generation == 1
    assert d.reloader.last_error is not None and "rules.yaml" in d.reloader.last_error
    assert tree.read("cpu", "batch", "cpu.shares") == "4"
    assert d.ready()[0]

    overlay(rules, 8)
    os.utime(rules, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))  # mtime granularity
    assert d.tick() is not None
    assert (d.reloader.generation, tree.read("cpu", "batch", "cpu.shares")) == (2, "8")
    failures = d.metrics.registry.get_sample_value(
        "qosd_config_reloads_total", {"source": "file", "result": "failure"}
    )
    assert failures == 1.0


@pytest.mark.realcgroup
def test_a_watched_rule_file_reloads_between_ticks_and_a_broken_save_is_rejected(
    tree: Subtree, tmp_path: Path
) -> None:
    """With the file watcher (the default when --rules is given), a save reaches a new generation
    without any tick: the reload runs in the watcher's thread and the next tick only picks it up."""
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    rules = rules_dir / "rules.yaml"
    overlay(rules, 4)
    d = daemon(tree, tmp_path, "--rules", str(rules_dir))
    d.start()
    try:
        assert d.tick() is not None
        assert (d.reloader.generation, tree.read("cpu", "batch", "cpu.shares")) == (1, "4")

        tmp = rules_dir / ".rules.yaml.swp"  # an editor's atomic save
        overlay(tmp, 8)
        os.replace(tmp, rules)
        deadline = time.monotonic() + 10
        while d.reloader.generation < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert d.reloader.generation == 2
        assert d.tick() is not None
        assert tree.read("cpu", "batch", "cpu.shares") == "8"

        rules.write_text("apiVersion: qosd.io/v1alpha1\nkind: QoSPolicy\nspec: [")
        deadline = time.monotonic() + 10
        while d.reloader.last_error is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert d.reloader.last_error is not None and "rules.yaml" in d.reloader.last_error
        assert d.reloader.generation == 2 and d.tick() is not None
    finally:
        d.shutdown()


class SignalDuringApply:
    """The real executor, with a real SIGTERM delivered to this process after its first operation."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.sent = False
        self.results: list[Any] = []

    def apply(self, operations: Sequence[Operation]) -> list[Any]:
        out = []
        for op in operations:
            out.extend(self.inner.apply([op]))
            if not self.sent:
                self.sent = True
                os.kill(os.getpid(), signal.SIGTERM)
        self.results = out
        return out

    def finished(self) -> list[Any]:
        return list(self.inner.finished())

    def wait(self, timeout: float) -> bool:
        return bool(self.inner.wait(timeout))


@pytest.mark.realcgroup
def test_sigterm_mid_tick_finishes_the_whole_plan_then_stops(tree: Subtree, tmp_path: Path) -> None:
    d = daemon(tree, tmp_path, "--interval", "50ms")
    wrapped = SignalDuringApply(d.executor)
    d.executor = wrapped
    previous = signal.getsignal(signal.SIGTERM)
    gc.unfreeze()
    try:
        code = d.run()
        # After its first tick the loop froze the start-up heap (the cyclic collector's work).
        frozen = gc.get_freeze_count()
    finally:
        signal.signal(signal.SIGTERM, previous)
        gc.unfreeze()
    assert code == 0 and frozen > 0
    assert wrapped.sent and d.ticks == 1
    writes = [r for r in wrapped.results if r.op.kind == "writeCgroup"]
    assert len(wrapped.results) > 1 and writes and all(r.status in ("applied", "unchanged") for r in writes)
    # Kubernetes operations have no adapter in standalone mode and say so.
    assert all(r.status == "skipped" for r in wrapped.results if r.op.kind == "publishNodeResource")
    assert_batch_deprioritized(tree)  # the plan's last writes landed too
    saved = json.loads((tmp_path / "state.json").read_text())
    assert saved["kind"] == "EngineState" and saved["generation"] == 1


def run_qosd(tree: Subtree, tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "engine.cli", "run", "--root", f"{tree.name}/*", "--listen", ""]
    argv += ["--state-file", str(tmp_path / "state.json"), *extra]
    return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def state_mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return -1


def wait_for_state_save(proc: subprocess.Popen[str], path: Path, after: int) -> None:
    """Until the process replaced the state file (a tick reached its write-ahead save); bounded, the
    bound only ends a failing test."""
    deadline = time.monotonic() + 120
    while state_mtime(path) == after:
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "qosd run never saved its state"
        time.sleep(0.005)


@pytest.mark.realcgroup
def test_kill_9_during_ticks_then_restart_converges_without_repeating_a_write(
    tree: Subtree, tmp_path: Path
) -> None:
    """A real `qosd run` is killed with SIGKILL at several points of its tick loop: during start-up
    (maybe before any tick), right after its first write-ahead save (the tick's operations maybe
    half applied), and after further saves. Each kill point is reached by watching the state file,
    not by sleeping, so a loaded machine changes nothing but how long it takes.

    What is asserted comes from the files: after every kill the state file is a whole state qosd
    wrote (or absent); the restarted runs write only what the kernel did not hold yet (no write
    result is ``unchanged``, none is repeated) and, once converged, plan no cgroup write at all.
    Publish operations are not counted: their cadence is the reclaim report interval, so whether a
    run publishes depends on the time between runs, not on convergence."""
    state = tmp_path / "state.json"
    points = ("start-up", "first save", "third save")
    for point in points:
        proc = run_qosd(tree, tmp_path, "--interval", "20ms")
        try:
            saves = {"start-up": 0, "first save": 1, "third save": 3}[point]
            for _ in range(saves):
                wait_for_state_save(proc, state, state_mtime(state))
        finally:
            proc.kill()
            proc.wait()
        if state.exists():  # an atomic replace: whatever the kill interrupted, a whole state
            assert state_from_json(state.read_bytes()) is not None, point
        assert not state.with_name(state.name + ".corrupt").exists(), point
    runs = []
    for n in (1, 2):
        audit = tmp_path / f"audit-{n}.jsonl"
        done = run_qosd(tree, tmp_path, "--once", "--audit-log", str(audit))
        _, err = done.communicate(timeout=300)
        assert done.returncode == 0, err
        records = [json.loads(line) for line in audit.read_text().splitlines()] if audit.exists() else []
        runs.append([op for r in records for op in r["results"] if op["operation"]["kind"] == "writeCgroup"])
    assert_batch_deprioritized(tree)
    first, second = runs
    # A write planned after a restart is only ever one the kernel did not hold yet, made once.
    assert all(res["status"] == "applied" for res in first), first
    planned = [(r["operation"]["path"], r["operation"]["file"], r["operation"]["value"]) for r in first]
    assert len(planned) == len(set(planned))
    assert second == []  # converged: the next run plans no cgroup write


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.realcgroup
def test_metrics_health_and_readiness_over_http(tree: Subtree, tmp_path: Path) -> None:
    d = daemon(tree, tmp_path)
    host, port = d.serve("127.0.0.1:0")
    base = f"http://{host}:{port}"
    try:
        assert get(base + "/readyz")[0] == 503
        assert get(base + "/healthz")[0] == 200
        assert d.tick() is not None
        code, text = get(base + "/readyz")
        assert code == 200 and "generation 1" in text
        code, text = get(base + "/metrics")
        assert code == 200
        assert "qosd_tick_duration_seconds_bucket" in text
        assert 'qosd_config_info{generation="1"' in text
        assert 'qosd_actions_total{action="writeCgroup",result="applied"}' in text
        assert get(base + "/nope")[0] == 404
    finally:
        assert d._server is not None
        d._server.shutdown()
        d._server.server_close()


@pytest.mark.realcgroup
def test_the_audit_log_is_read_by_qosd_explain(
    tree: Subtree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = daemon(tree, tmp_path)
    assert d.tick() is not None
    capsys.readouterr()
    assert cli_main(["explain", str(tmp_path / "audit.jsonl")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Tick at ") and "generation 1" in out and "operation(s)" in out


# ---------------------------------------------------------------- what a steady tick reads


class CountingObserve:
    """Wraps the adapter's observe() the collector calls, counting the (path, file) pairs asked."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.asked: Counter[tuple[str, str]] = Counter()

    def __call__(self, wanted: Mapping[str, Sequence[str]], formula: Any = None) -> Any:
        for path, files in wanted.items():
            self.asked.update((path, f) for f in files)
        return self.inner(wanted, formula)


@pytest.mark.realcgroup
def test_a_steady_daemon_rereads_each_managed_file_once_per_period_and_notices_a_change(
    tree: Subtree, tmp_path: Path
) -> None:
    """At the default 1 s tick each managed file is re-read once every OBSERVE_SECONDS ticks (30),
    the ticks in between write nothing, and a cpuset changed behind qosd's back is put back within
    that many ticks."""
    d = daemon(tree, tmp_path)
    assert d.tick() is not None and d.tick() is not None
    observer = d.source.collector.observer  # type: ignore[attr-defined]
    assert observer.every == round(OBSERVE_SECONDS)
    counting = CountingObserve(observer.translate)
    observer.translate = counting
    writes = adapter_of(d).writes
    for _ in range(observer.every):
        result = d.tick()
        assert result is not None
        assert [op for op in result.plan.operations if op.kind == "writeCgroup"] == []
    assert adapter_of(d).writes == writes
    managed = {(i.path, i.file) for i in result.evaluation.intents if isinstance(i, CgroupIntent)}
    assert (f"{tree.name}/web", "cpuset.cpus") in managed
    assert managed <= set(counting.asked) and set(counting.asked.values()) == {1}, counting.asked

    planned = tree.read("cpuset", "web", "cpuset.cpus")
    other = "1" if planned == "0" else "0"
    (tree.dir("cpuset", "web") / "cpuset.cpus").write_text(other)
    ticks = 0
    while tree.read("cpuset", "web", "cpuset.cpus") != planned and ticks < observer.every:
        assert d.tick() is not None
        ticks += 1
    assert tree.read("cpuset", "web", "cpuset.cpus") == planned and ticks >= 1


class StubCollector:
    def __init__(self) -> None:
        self.noted: list[tuple[str, str, str]] = []
        self.rereads: list[tuple[str, str]] = []
        self.tracked: list[tuple[str, str]] = []

    def prime(self) -> None:
        return None

    def track(self, pairs: Any) -> None:
        self.tracked.extend(pairs)

    def note_written(self, path: str, file: str, value: str) -> None:
        self.noted.append((path, file, value))

    def reread(self, path: str, file: str) -> None:
        self.rereads.append((path, file))


def test_only_a_write_that_landed_is_reported_as_observed_the_others_are_read_again() -> None:
    """A write that failed, found its cgroup gone or found the value already there says the kernel
    holds something other than what was planned against: read it at the next tick, do not wait for
    its turn in the stagger."""
    stub = StubCollector()
    source = CollectorSource(stub)  # type: ignore[arg-type]
    ops = {
        s: WriteCgroup(f"g/{s}", "cpu.shares", "2", "r")
        for s in ("applied", "failed", "vanished", "unchanged", "skipped")
    }
    outcomes = [OperationResult(op, status) for status, op in ops.items()]
    result = SimpleNamespace(evaluation=SimpleNamespace(intents=()))
    source.applied(result, outcomes)  # type: ignore[arg-type]
    assert stub.noted == [("g/applied", "cpu.shares", "2")]
    assert stub.rereads == [
        ("g/failed", "cpu.shares"),
        ("g/vanished", "cpu.shares"),
        ("g/unchanged", "cpu.shares"),
    ]
    assert daemon_options(1.0).observe_every == 30 and daemon_options(0.05).observe_every == 600
    assert daemon_options(1.0).memory_every == round(MEMORY_SECONDS)
    assert daemon_options(1.0).numa_every == round(NUMA_SECONDS / MEMORY_SECONDS) == 3
    assert daemon_options(60.0).numa_every == 1  # a tick longer than NUMA_SECONDS reads it every time
