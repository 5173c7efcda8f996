"""A standalone eviction survives a daemon restart in its grace period (engine.adapters.evict_journal).

The real case: a daemon sends SIGTERM to a process tree that ignores it and is killed with SIGKILL
(kill -9, as a node drain or an OOM kill would) before the grace period ends. The next daemon, given
the same journal, sends the SIGKILL when the grace period that was left is over and reports the
eviction applied once the processes are gone. Real v1 cgroups and real processes; the first daemon
is a real child process killed for real.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from engine.adapters.evict import StandaloneEvictions
from engine.adapters.evict_journal import EvictionJournal, journal_of
from engine.adapters.executor import NodeExecutor
from engine.cli import build_parser
from engine.daemon.wiring import build_standalone
from engine.model.operations import EvictPod
from tests.realcgroup import Subtree
from tests.test_evict_standalone import BOUND, procs, start, tree, until

__all__ = ["tree"]  # the fixture, used by name

FIRST_DAEMON = """\
import sys, time
from pathlib import Path
from engine.adapters.evict import StandaloneEvictions
from engine.adapters.executor import NodeExecutor
from engine.adapters.evict_journal import EvictionJournal
from engine.cgroups.mounts import CgroupLayout
from engine.model.operations import EvictPod

uid, journal, grace = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
evictions = StandaloneEvictions(CgroupLayout.detect(), lambda u: u, poll=0.02, journal=EvictionJournal(journal))
result = evictions.evict(EvictPod(uid, "qosd-test", "batch", grace, "test", "evict-batch"))
print(result.status, flush=True)
time.sleep(600)
"""


def first_daemon_starts_and_dies(tree: Subtree, journal: Path, grace: int) -> None:
    """A daemon process that starts the eviction of the batch workload and is then killed -9."""
    proc = subprocess.Popen(
        [sys.executable, "-c", FIRST_DAEMON, f"{tree.name}/batch", str(journal), str(grace)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "started"
    proc.send_signal(signal.SIGKILL)
    proc.wait(BOUND)


@pytest.mark.realcgroup
def test_a_restarted_daemon_sends_the_sigkill_its_predecessor_owed(tree: Subtree, tmp_path: Path) -> None:
    victim = start(tree, "trap '' TERM; sleep 300 & sleep 300 & wait; sleep 300", at_least=3)
    journal = tmp_path / "state.json.evictions"
    first_daemon_starts_and_dies(tree, journal, grace=2)
    assert len(procs(tree)) == 3, "SIGTERM is ignored: nothing may have ended the processes yet"
    saved = json.loads(journal.read_text())["evictions"]
    assert [e["op"]["uid"] for e in saved] == [f"{tree.name}/batch"] and saved[0]["signalled"] == 3

    second = StandaloneEvictions(tree.layout, lambda u: u, poll=0.02, journal=EvictionJournal(journal))
    assert second.in_progress() == 1
    assert second.wait(BOUND), "the resumed eviction never ended"
    [done] = second.finished()
    assert done.status == "applied", done
    assert (
        "its 3 process(es) are gone after SIGKILL to 3 process(es) at the end of the 2s grace period"
        in done.detail
    )
    assert procs(tree) == set() and victim.wait(BOUND) == -signal.SIGKILL
    assert not journal.exists(), "a finished eviction leaves nothing to resume"
    # a duplicate from the engine while it ran is answered as already under way, not signalled again
    assert second.evict(done.op).status in ("vanished", "unchanged")


@pytest.mark.realcgroup
def test_an_eviction_whose_processes_ended_while_no_daemon_ran_is_reported_applied(
    tree: Subtree, tmp_path: Path
) -> None:
    # the shell takes a second to end on its SIGTERM, so the first daemon is dead before it does
    victim = start(tree, "trap 'sleep 1; exit 7' TERM; sleep 300 & sleep 300 & wait", at_least=3)
    journal = tmp_path / "state.json.evictions"
    first_daemon_starts_and_dies(tree, journal, grace=60)
    until(lambda: not procs(tree), "the processes to end on their SIGTERM")
    assert victim.wait(BOUND) == 7
    second = StandaloneEvictions(tree.layout, lambda u: u, poll=0.02, journal=EvictionJournal(journal))
    assert second.wait(BOUND)
    [done] = second.finished()
    assert done.status == "applied" and "within the grace period, after SIGTERM" in done.detail


def test_the_grace_left_counts_the_time_no_daemon_ran(tmp_path: Path) -> None:
    """Saved at wall time 1000 with 30 s of grace left, read back at 1012: 18 s left, the eviction
    started 12 s further back; with SIGKILL already sent, its timeout moves the same way."""
    journal = EvictionJournal(tmp_path / "j", wall=lambda: 1000.0)
    op = EvictPod("u", "ns", "batch", 40, "test", "rule", "delete")
    journal.save(
        [(op, "qosd-demo/batch", 90.0, 130.0, None, 3, 0), (op, "other", 95.0, 96.0, 104.0, 1, 1)], 100.0
    )
    later = EvictionJournal(tmp_path / "j", wall=lambda: 1012.0).load()
    assert [
        (r.op, r.path, r.started_ago, r.term_left, r.kill_left, r.signalled, r.killed) for r in later
    ] == [
        (op, "qosd-demo/batch", 22.0, 18.0, None, 3, 0),
        (op, "other", 17.0, -16.0, -8.0, 1, 1),
    ]
    journal.save([], 101.0)
    assert not (tmp_path / "j").exists()


@pytest.mark.parametrize(
    "text",
    ["", "not json", "[]", '{"version": 99}', '{"version": 1, "savedAt": 1, "evictions": [{"op": {}}]}'],
    ids=["empty", "garbage", "a list", "another version", "an entry without its fields"],
)
def test_a_journal_qosd_did_not_write_is_set_aside_not_a_crash(
    tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "state.json.evictions"
    path.write_text(text)
    assert EvictionJournal(path).load() == []
    assert "set aside, nothing resumed" in caplog.text


def test_the_journal_sits_beside_the_state_file_and_needs_one() -> None:
    assert journal_of(Path("/var/lib/qosd/state.json")) == Path("/var/lib/qosd/state.json.evictions")
    assert journal_of(None) is None


@pytest.mark.realcgroup
def test_qosd_run_journals_its_standalone_evictions_beside_its_state_file(tmp_path: Path) -> None:
    """Wired: the eviction adapter of `qosd run --state-file F` keeps its journal at F.evictions."""
    state = tmp_path / "state.json"
    args = build_parser().parse_args(
        ["run", "--root", "qosd-test-none/*", "--listen", "", "--state-file", str(state)]
    )
    executor = build_standalone(args).executor
    assert isinstance(executor, NodeExecutor)
    [evictions] = [f for f in executor.finishing if isinstance(f, StandaloneEvictions)]
    assert evictions.journal is not None and evictions.journal.path == state.with_name("state.json.evictions")
