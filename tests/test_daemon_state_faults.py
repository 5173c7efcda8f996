"""The write-ahead state file failing under a running daemon, and faults that repeat every tick.

- A ``--state-file`` on a real tmpfs that is full (a real ENOSPC from the kernel, no monkeypatching):
  the publish of the reclaimed resource (repeatable) still reaches the Node, the eviction (not
  repeatable without its record) waits, the failure is counted, on readiness and logged once per
  period; once space is freed the eviction happens, exactly once, without waiting out the rule's
  one-hour cooldown (the held eviction's firing was not recorded).
- The rate limit of those reports (``Throttle``) against a clock, as a table: the state file's
  warnings, and the per (target, file, reason) warning of a failing operation.
- A real tick on the real cgroup v1 hierarchy with a value the kernel refuses: the operation's
  warning is logged once, the repeats counted, not logged every tick.

Kubernetes: the in-repo emulator over real HTTP (tests/kubeapi), as in tests/test_kube_daemon.py.
"""

from __future__ import annotations

import errno
import json
import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.adapters.result import OperationResult
from engine.daemon.faults import REPORT_SECONDS, Throttle
from engine.daemon.metrics import Metrics
from engine.daemon.state_file import StateFile
from engine.evaluate.state import EngineState
from engine.model.operations import EvictPod, WriteCgroup
from tests.kubeapi import ApiServer
from tests.realcgroup import Subtree, real_subtree
from tests.test_daemon import daemon as standalone_daemon
from tests.test_kube_daemon import (
    BASE,
    BATCH_CPU,
    EVICT,
    NODE,
    pod,
    populate,
    rbac_rules,
    start_daemon,
    stop_daemons,
    wait_for,
)

# The evict-be rule of tests/test_kube_daemon.py with a cooldown no test waits out: the eviction can
# only happen after the save recovers if its held-back firing was not recorded.
EVICT_HOUR = EVICT.replace("cooldown: 1s", "cooldown: 1h")
assert EVICT_HOUR != EVICT


class Records(logging.Handler):
    """The ``qosd`` logger's records, whatever configure_logging did to it in this process."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def messages(self, start: str) -> list[logging.LogRecord]:
        return [r for r in self.records if r.getMessage().startswith(start)]


@pytest.fixture
def records() -> Iterator[Records]:
    handler = Records()
    qosd_log = logging.getLogger("qosd")
    level = qosd_log.level
    qosd_log.addHandler(handler)
    qosd_log.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        qosd_log.removeHandler(handler)
        qosd_log.setLevel(level)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs of its own, so the test can fill it without touching anyone else's disk."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "qosd-test", str(mnt)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill (mounting needs root): {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(directory: Path) -> Path:
    """Write a file until the file system answers ENOSPC; returns it (delete it to free the space)."""
    filler = directory / "filler"
    with filler.open("wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return filler


@pytest.mark.realcgroup  # root: it mounts a tmpfs of its own
def test_a_full_state_file_system_holds_evictions_back_applies_the_rest_and_recovers(
    apiserver: ApiServer, tmp_path: Path, small_fs: Path, records: Records
) -> None:
    cluster = populate(apiserver)
    cluster.put(pod("batch", "be"))
    uid = cluster.get("v1", "Pod", "batch", "default")["metadata"]["uid"]  # type: ignore[index]
    filler = fill(small_fs)
    state_path = small_fs / "state.json"
    token = cluster.authorize("qosd-sa-token", rbac_rules())
    q = start_daemon(cluster, tmp_path, NODE, token, BASE + EVICT_HOUR, ("--state-file", str(state_path)))

    def evictions(status: int | None = None) -> int:
        found = cluster.requests.matching("POST", r"/pods/batch/eviction$")
        return len([r for r in found if status is None or r.status == status])

    def published() -> Any:
        status = (cluster.get("v1", "Node", NODE) or {}).get("status") or {}
        return (status.get("allocatable") or {}).get(BATCH_CPU)

    try:
        wait_for("three failed saves", lambda: q.metric("qosd_state_write_failures_total") >= 3, timeout=60)
        # Repeatable: the reclaimed CPU is published while the state cannot be saved.
        assert wait_for("batch-cpu on the node", published) == "1500"
        assert evictions() == 0 and not state_path.exists()
        assert q.metric("qosd_held_total", rule="evict-be") >= 1
        assert q.metric("qosd_ticks_total", result="error") == 0
        ready, why = q.daemon.ready()
        assert not ready
        assert f"state file {state_path} failing: No space left on device (ENOSPC)" in why
        assert "eviction(s) held back since the last good save" in why
        failures = q.metric("qosd_state_write_failures_total")
        warned = records.messages("state file save failed")
        assert warned and warned[0].levelno == logging.WARNING
        assert len(warned) < failures  # rate-limited, not one per tick
        assert not records.messages("tick failed")

        filler.unlink()
        wait_for("the eviction once the save works", lambda: evictions(201) == 1, timeout=60)
        saved = json.loads(state_path.read_text())
        assert uid in saved["state"]["evicting"]  # the record was written before the request
        wait_for("readiness back", lambda: q.daemon.ready()[0], timeout=60)
        ticks = q.metric("qosd_ticks_total", result="ok")
        wait_for(
            "five more ticks", lambda: q.metric("qosd_ticks_total", result="ok") >= ticks + 5, timeout=60
        )
        assert evictions() == 1
        assert records.messages("state file writable again")
    finally:
        stop_daemons([q])


def test_state_file_failures_are_reported_once_per_period_and_recovery_says_what_was_held(
    tmp_path: Path, records: Records
) -> None:
    """Table against a clock; the fault is a real one (the state file's directory does not exist)."""
    now = [0.0]
    metrics = Metrics()
    state_file = StateFile(tmp_path / "gone" / "state.json", metrics.state_failures, clock=lambda: now[0])
    # (time, directory exists, evictions this tick) -> saved?, logged messages
    steps = [
        (0.0, False, 1, False, ["state file save failed"]),
        (1.0, False, 2, False, []),
        (59.0, False, 0, False, []),
        (61.0, False, 1, False, ["state file save failed"]),
        (62.0, True, 1, True, ["state file writable again"]),
        (63.0, True, 1, True, []),
    ]
    logged: list[list[logging.LogRecord]] = []
    for at, exists, evictions, saved, messages in steps:
        now[0] = at
        if exists:
            (tmp_path / "gone").mkdir(exist_ok=True)
        records.records.clear()
        assert state_file.save(EngineState(), 1, at, evictions) is saved
        assert [r.getMessage().split(" (reported")[0].split(":")[0] for r in records.records] == messages
        logged.append(list(records.records))
        if not saved:
            assert state_file.problem() is not None and "ENOENT" in (state_file.problem() or "")
    first, second = logged[0][0], logged[3][0]
    assert (first.fields["failedSaves"], first.fields["evictionsHeld"]) == (1, 1)
    assert (second.fields["failedSaves"], second.fields["evictionsHeld"]) == (3, 3)
    assert logged[4][0].fields["evictionsHeld"] == 4  # 1 + 2 + 0 + 1: the saved ticks hold none
    assert metrics.registry.get_sample_value("qosd_state_write_failures_total") == 4
    assert state_file.problem() is None and state_file.held == 0


def test_the_throttle_logs_each_key_first_then_once_per_period_with_the_repeats() -> None:
    now = [0.0]
    throttle = Throttle(clock=lambda: now[0])
    # (time, key) -> what admit answers: None (silent) or the repeats suppressed since the last report
    table: list[tuple[float, str, int | None]] = [
        (0.0, "a", 0),
        (1.0, "a", None),
        (2.0, "b", 0),  # another key is not held back by the first
        (REPORT_SECONDS - 1, "a", None),
        (REPORT_SECONDS, "a", 2),
        (REPORT_SECONDS + 1, "b", None),
        (REPORT_SECONDS + 2, "b", 1),
    ]
    for at, key, expected in table:
        now[0] = at
        assert throttle.admit(key) == expected, (at, key)
    throttle.clear(lambda key: key == "a")
    assert throttle.admit("a") == 0  # the fault went away and came back: logged at once
    assert throttle.admit("b") is None


@pytest.fixture
def tree() -> Iterator[Subtree]:
    with real_subtree(children=("web", "batch"), sleeper="batch") as t:
        yield t


def failed(records: Records) -> list[dict[str, Any]]:
    return [r.fields for r in records.messages("operation failed")]


@pytest.mark.realcgroup
def test_a_failing_operation_is_logged_once_per_target_file_and_reason_with_the_repeats(
    tree: Subtree, tmp_path: Path, records: Records
) -> None:
    """First a real kernel refusal over real ticks, then the grouping as a table against a clock."""
    rules = tmp_path / "rules.yaml"
    # Valid to validate, refused by this kernel: a CFS quota above the parent's (v1: EINVAL).
    (tree.dir("cpu") / "cpu.cfs_quota_us").write_text("50000")
    rules.write_text(
        "apiVersion: qosd.io/v1alpha1\nkind: QoSPolicy\nmetadata: {name: above-parent}\nspec:\n  rules:\n"
        "    - name: above-parent\n      then:\n"
        f"        - setCgroup: {{target: {{path: {tree.name}/web}}, values: {{cpu.cfs_quota_us: 200000}}}}\n"
    )
    d = standalone_daemon(tree, tmp_path, "--rules", str(rules))
    for _ in range(3):
        assert d.tick() is not None, d.last_error
    (only,) = failed(records)
    assert (
        only["path"] == f"{tree.name}/web"
        and only["file"] == "cpu.cfs_quota_us"
        and only["repeatsSuppressed"] == 0
    )
    assert (
        d.metrics.registry.get_sample_value(
            "qosd_actions_total", {"action": "writeCgroup", "result": "failed"}
        )
        == 3
    )

    now = [0.0]
    d.op_failures = Throttle(clock=lambda: now[0])
    web, batch = f"{tree.name}/web", f"{tree.name}/batch"
    shares = WriteCgroup(web, "cpu.shares", "0", "r")
    table: list[tuple[float, Any, str, str, int | None]] = [
        # time, operation, status, error -> repeatsSuppressed logged (None: not logged)
        (0.0, shares, "failed", "EINVAL", 0),
        (1.0, shares, "failed", "EINVAL", None),
        (2.0, shares, "failed", "EBUSY", 0),  # another reason
        (3.0, WriteCgroup(web, "cpu.cfs_quota_us", "1", "r"), "failed", "EINVAL", 0),  # another file
        (4.0, WriteCgroup(batch, "cpu.shares", "0", "r"), "failed", "EINVAL", 0),  # another target
        (5.0, EvictPod("u", "default", "p", None, "why", "r"), "failed", "500", 0),
        (6.0, EvictPod("u", "default", "p", None, "why", "r"), "failed", "500", None),
        (REPORT_SECONDS + 0.5, shares, "failed", "EINVAL", 1),
        (REPORT_SECONDS + 1, shares, "failed", "EINVAL", None),
        (REPORT_SECONDS + 2, WriteCgroup(web, "cpu.shares", "2", "r"), "applied", "", None),
        (REPORT_SECONDS + 3, shares, "failed", "EINVAL", 0),  # it worked in between: logged again
    ]
    for at, op, status, error, expected in table:
        now[0] = at
        records.records.clear()
        d._report_failure(op, OperationResult(op, status, error or None))
        got = [f["repeatsSuppressed"] for f in failed(records)]
        assert got == ([] if expected is None else [expected]), (at, op, error)
