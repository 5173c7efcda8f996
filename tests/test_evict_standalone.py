"""Standalone evictions (engine/adapters/evict.py): the timing state machine, then the real thing.

The real tests run on this machine's cgroup v1 hierarchy (tests/realcgroup.py) with real processes:
shell scripts that fork children, ignore SIGTERM, or fork in a loop. What is asserted is what the
kernel reports (the cgroup's process list, each process's exit status) and what the adapter and the
daemon recorded; never how long anything took. Waits are bounded only so a broken build fails
instead of hanging.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.adapters.evict import KILL_TIMEOUT, Kill, Signals, StandaloneEvictions, finished_result, next_step
from engine.adapters.result import OperationResult
from engine.cgroups.mounts import CgroupLayout
from engine.cli import build_parser
from engine.cli import main as cli_main
from engine.daemon.wiring import build_standalone
from engine.model.operations import EvictPod
from tests.realcgroup import Subtree, real_subtree

BOUND = 120.0  # seconds: only ends a test that would otherwise hang


# ------------------------------------------------------------------------------ the state machine

OP = EvictPod("ns/batch", "ns", "batch", 5, "memory pressure", "numa-memory-pressure")
TERMINATING = Kill(OP, "ns/batch", started=100.0, term_deadline=105.0, signalled=3)
KILLING = Kill(OP, "ns/batch", started=100.0, term_deadline=105.0, signalled=3, kill_deadline=115.0, killed=2)


@pytest.mark.parametrize(
    ("kill", "now", "alive", "step"),
    [
        (TERMINATING, 100.0, 3, "wait"),  # within the grace period
        (TERMINATING, 104.9, 1, "wait"),
        (TERMINATING, 102.0, 0, "done"),  # all exited on SIGTERM
        (TERMINATING, 105.0, 1, "kill"),  # grace over, one left
        (KILLING, 106.0, 1, "kill"),  # swept again until empty
        (KILLING, 106.0, 0, "done"),
        (KILLING, 115.0, 1, "stuck"),  # survived SIGKILL for KILL_TIMEOUT
        (KILLING, 115.0, 0, "done"),
    ],
)
def test_next_step(kill: Kill, now: float, alive: int, step: str) -> None:
    assert next_step(kill, now, alive) == step


def test_finished_results_say_what_happened() -> None:
    done = finished_result(TERMINATING, "done", 102.0, 0)
    assert (done.status, done.error) == ("applied", None)
    assert "its 3 process(es) are gone within the grace period, after SIGTERM" in done.detail
    killed = finished_result(KILLING, "done", 107.0, 0)
    assert "after SIGKILL to 2 process(es) at the end of the 5s grace period" in killed.detail
    stuck = finished_result(KILLING, "stuck", 115.0, 1)
    assert stuck.status == "failed"
    assert f"1 process(es) still in the cgroup {KILL_TIMEOUT:g}s after SIGKILL" in (stuck.error or "")


# ------------------------------------------------------------------------------ real cgroups


@pytest.fixture
def tree() -> Iterator[Subtree]:
    with real_subtree(children=("web", "batch"), sleeper=None) as t:
        yield t


def fs_of(tree: Subtree) -> CgroupLayout:
    return tree.layout


def procs(tree: Subtree, rel: str = "batch") -> set[int]:
    return {int(p) for p in tree.read("cpu", rel, "cgroup.procs").split()}


def start(tree: Subtree, script: str, at_least: int) -> subprocess.Popen[bytes]:
    """Run ``script`` in the batch cgroup (it waits for a line on stdin, so all it forks is inside)
    and wait until the cgroup holds ``at_least`` processes."""
    proc = tree.spawn("batch", ["sh", "-c", f"read go; {script}"], stdin=True)
    assert proc.stdin is not None
    proc.stdin.write(b"go\n")
    proc.stdin.flush()
    until(lambda: len(procs(tree)) >= at_least, f"{at_least} processes in the batch cgroup")
    return proc


def until(check: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + BOUND
    while not (value := check()):
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.01)
    return value


def evict(
    evictions: StandaloneEvictions, tree: Subtree, grace: int
) -> tuple[OperationResult, OperationResult]:
    """Evict the batch workload; (the tick's result, the final outcome)."""
    op = EvictPod(f"{tree.name}/batch", tree.name, "batch", grace, "test", "evict-batch")
    first = evictions.evict(op)
    assert evictions.wait(BOUND), "the eviction never ended"
    done = evictions.finished()
    assert len(done) == 1
    return first, done[0]


def adapter(tree: Subtree) -> StandaloneEvictions:
    return StandaloneEvictions(fs_of(tree), lambda uid: uid if uid.startswith(tree.name) else None, poll=0.02)


def freezer_root() -> Path:
    signals = Signals(CgroupLayout.detect())
    if signals.freezer is None:
        pytest.skip("no v1 freezer hierarchy mounted: the frozen sweep cannot be tested here")
    return Path(signals.freezer)


@pytest.mark.realcgroup
def test_processes_that_exit_on_sigterm_are_gone_within_the_grace_period(tree: Subtree) -> None:
    proc = start(tree, "sleep 300 & sleep 300 & wait", at_least=3)
    first, done = evict(adapter(tree), tree, grace=60)
    assert first.status == "started" and "SIGTERM sent to 3 process(es)" in first.detail
    assert done.status == "applied", done
    assert "within the grace period, after SIGTERM" in done.detail
    assert procs(tree) == set()
    assert proc.wait(BOUND) == -signal.SIGTERM
    assert not (freezer_root() / tree.name).exists()  # the freezer cgroups it made are removed


@pytest.mark.realcgroup
def test_a_sigterm_ignoring_process_tree_is_killed_after_the_grace_period(tree: Subtree) -> None:
    # SIG_IGN is inherited: the children ignore SIGTERM too.
    proc = start(tree, "trap '' TERM; sleep 300 & sleep 300 & wait; sleep 300", at_least=3)
    first, done = evict(adapter(tree), tree, grace=1)
    assert first.status == "started"
    assert done.status == "applied", done
    assert "after SIGKILL to 3 process(es) at the end of the 1s grace period" in done.detail
    assert procs(tree) == set()
    assert proc.wait(BOUND) == -signal.SIGKILL


@pytest.mark.realcgroup
def test_a_process_forking_in_a_loop_cannot_escape(tree: Subtree) -> None:
    """Forks all the time and ignores SIGTERM: only a frozen sweep gets every process, including
    children forked while the list was read."""
    proc = start(tree, "trap '' TERM; while :; do sleep 5 & sleep 0.01; done", at_least=5)
    first, done = evict(adapter(tree), tree, grace=1)
    assert first.status == "started"
    assert done.status == "applied", done
    assert procs(tree) == set()
    assert proc.wait(BOUND) == -signal.SIGKILL
    assert procs(tree) == set()  # and nothing came back


@pytest.mark.realcgroup
def test_an_empty_or_vanished_cgroup_starts_nothing(tree: Subtree) -> None:
    evictions = adapter(tree)
    empty = evictions.evict(EvictPod(f"{tree.name}/web", tree.name, "web", 1, "test", "evict"))
    assert (empty.status, empty.detail) == (
        "unchanged",
        f"no process runs in cgroup {tree.name}/web: nothing to stop",
    )
    gone = evictions.evict(EvictPod("elsewhere/batch", "elsewhere", "batch", 1, "test", "evict"))
    assert gone.status == "vanished"
    assert evictions.in_progress() == 0 and evictions.finished() == []


@pytest.mark.realcgroup
def test_qosd_refuses_to_evict_its_own_cgroup(tree: Subtree) -> None:
    (tree.dir("cpu", "batch") / "cgroup.procs").write_text(str(os.getpid()))
    try:
        result = adapter(tree).evict(EvictPod(f"{tree.name}/batch", tree.name, "batch", 1, "test", "evict"))
    finally:
        (tree.dir("cpu").parent / "cgroup.procs").write_text(str(os.getpid()))
    assert result.status == "failed" and "qosd itself runs in its cgroup" in (result.error or "")


EVICT_BATCH = """\
apiVersion: qosd.io/v1alpha1
kind: QoSPolicy
metadata: {name: evict-batch}
spec:
  priority: 10
  rules:
    - name: evict-batch
      when: {node.cpus: {gte: 1}}
      then:
        evict:
          victims: {classes: [reclaimed_cores]}
          maxPerRound: 1
          cooldown: 1h
          gracePeriodSeconds: 1
"""


@pytest.mark.realcgroup
def test_qosd_run_evicts_for_real_and_records_it_only_once_the_processes_are_gone(
    tree: Subtree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The daemon as ``qosd run`` wires it: the tick starts the eviction (metrics: started), a later
    tick records it applied once the processes are gone; the audit log and ``qosd explain`` agree."""
    rules = tmp_path / "evict.yaml"
    rules.write_text(EVICT_BATCH)
    audit = tmp_path / "audit.jsonl"
    args = build_parser().parse_args(
        [
            *("run", "--root", f"{tree.name}/*", "--listen", "", "--rules", str(rules), "--no-watch"),
            *("--audit-log", str(audit), "--resctrl-root", str(tmp_path / "no-resctrl")),
        ]
    )
    proc = start(tree, "trap '' TERM; sleep 300 & wait; sleep 300", at_least=2)
    d = build_standalone(args)
    first = d.tick()
    assert first is not None, d.last_error
    assert [op.kind for op in first.plan.operations if op.kind == "evictPod"] == ["evictPod"]

    def metric(result: str) -> float:
        labels = {"action": "evictPod", "result": result}
        return d.metrics.registry.get_sample_value("qosd_actions_total", labels) or 0.0

    assert metric("started") == 1 and metric("applied") == 0
    assert d.metrics.registry.get_sample_value("qosd_evictions_total", {"rule": "evict-batch"}) is None
    assert d.executor.wait(BOUND)
    assert d.tick() is not None, d.last_error
    assert metric("applied") == 1
    assert d.metrics.registry.get_sample_value("qosd_evictions_total", {"rule": "evict-batch"}) == 1
    assert procs(tree) == set() and proc.wait(BOUND) == -signal.SIGKILL
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    statuses = [
        r["status"] for rec in records for r in rec["results"] if r["operation"]["kind"] == "evictPod"
    ]
    assert statuses == ["started", "applied"]
    capsys.readouterr()
    assert cli_main(["explain", str(audit), "--target", f"{tree.name}/batch"]) == 0
    out = capsys.readouterr().out
    assert f"- Started evicting {tree.name}/batch (" in out
    assert f"- Evicted {tree.name}/batch (rule evict-batch, started in an earlier tick): evicted" in out
    d.shutdown()


def test_cgroup_v2_freezes_for_sigterm_and_writes_cgroup_kill_for_sigkill(tmp_path: Path) -> None:
    """cgroup v2, on a fake tree with the kernel's file names (this machine's workloads are on v1):
    SIGTERM goes to each listed process with ``cgroup.freeze`` set around it, SIGKILL is one write
    of ``cgroup.kill``, which the kernel applies to the whole subtree. The listed process is real."""
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    group = tmp_path / "batch"
    (group / "child").mkdir(parents=True)
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        (group / "cgroup.procs").write_text("")
        (group / "child" / "cgroup.procs").write_text(f"{sleeper.pid}\n")
        (group / "cgroup.freeze").write_text("")
        (group / "cgroup.events").write_text("populated 1\nfrozen 1\n")  # the kernel's answer to a freeze
        (group / "cgroup.kill").write_text("")
        signals = Signals(CgroupLayout.unified_tree(tmp_path))
        assert signals.procs("batch") == {sleeper.pid}
        assert signals.send("batch", signal.SIGTERM) == (1, "frozen (cgroup.freeze)")
        assert sleeper.wait(BOUND) == -signal.SIGTERM
        assert (group / "cgroup.freeze").read_text() == "0"  # thawed again
        assert signals.send("batch", signal.SIGKILL) == (1, "cgroup.kill")
        assert (group / "cgroup.kill").read_text() == "1"
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.parametrize(
    ("status", "kept"),
    [
        ("started", True),
        ("applied", True),
        ("vanished", True),
        ("failed", False),
        ("skipped", False),
        ("deferred", False),
    ],
)
def test_the_engine_forgets_an_eviction_that_was_not_carried_out(status: str, kept: bool) -> None:
    """An eviction record counts the pod as released; one not carried out (failed at the start, or
    later when its processes outlived SIGKILL; skipped; deferred) must not, so a later round may
    choose again."""
    from engine.daemon.loop import _unrecord_refused
    from engine.evaluate.state import EngineState, Evicting

    state = EngineState(
        evicting={OP.uid: Evicting(1.0, OP.rule, "memory", 1.0), "other": Evicting(1.0, "r", "memory", 1.0)}
    )
    after = _unrecord_refused(state, [OperationResult(OP, status)])  # type: ignore[arg-type]
    assert (OP.uid in after.evicting) is kept
    assert "other" in after.evicting
