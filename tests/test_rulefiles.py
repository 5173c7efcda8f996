"""The rule-file watcher (engine.sources.rulefiles) and the one decision of which files are rules.

Filesystem: real inotify through watchdog on pytest's temporary directories; nothing is mocked.
Kubernetes ConfigMap volumes: simulated with kubelet AtomicWriter's steps as documented in
pkg/volume/util/atomic_writer.go (shared/reference/ecosystem.md 4.4); no kubelet can run here.
Every wait is on a condition with a generous timeout; no test asserts how long anything took.
"""

from __future__ import annotations

import gc
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from watchdog.events import (
    DirCreatedEvent,
    FileClosedEvent,
    FileClosedNoWriteEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileOpenedEvent,
)

from bench.bench_reload import DOC as SITE  # one site overlay: a threshold to change
from engine.config.load import expand_paths, is_rule_file_name, skipped_entry, yaml_files_under
from engine.config.pipeline import REFERENCE_NODE, load_documents
from engine.reload import ReloadConfig, Reloader, ReloadOutcome, rule_files
from engine.sources.rulefiles import (
    REASON_BACKSTOP,
    REASON_EVENT,
    REASON_RESCAN,
    RuleFileWatcher,
    content_hash,
)

TIMEOUT = 10.0
HOUR = 3600.0  # a debounce no test waits out: a callback within TIMEOUT came from a check that skips it


def policy(name: str, priority: int = 10) -> str:
    return (
        f"apiVersion: qosd.io/v1alpha1\nkind: QoSPolicy\nmetadata: {{name: {name}}}\n"
        f"spec:\n  priority: {priority}\n"
    )


class Calls:
    """on_change: records (reason, the watcher's current_hash() at that moment); can be told to raise."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.calls: list[tuple[str, str]] = []
        self.watcher: RuleFileWatcher | None = None
        self.failures = 0

    def __call__(self, reason: str) -> None:
        assert self.watcher is not None
        current = self.watcher.current_hash()
        with self.cond:
            self.calls.append((reason, current))
            self.cond.notify_all()
            if self.failures:
                self.failures -= 1
                raise RuntimeError("reload exploded")

    def wait(self, count: int) -> list[tuple[str, str]]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.calls) >= count, TIMEOUT), self.calls
            return list(self.calls)

    def wait_hash(self, digest: str) -> list[tuple[str, str]]:
        """Until a call reports ``digest``; the calls up to and including it."""
        with self.cond:
            assert self.cond.wait_for(lambda: any(h == digest for _, h in self.calls), TIMEOUT), self.calls
            return self.calls[: next(i for i, (_, h) in enumerate(self.calls) if h == digest) + 1]

    def __len__(self) -> int:
        with self.cond:
            return len(self.calls)


Start = Callable[..., tuple[RuleFileWatcher, Calls]]


@pytest.fixture
def watch() -> Iterator[Start]:
    started: list[RuleFileWatcher] = []

    def _start(paths: list[Path], **kwargs: Any) -> tuple[RuleFileWatcher, Calls]:
        calls = Calls()
        watcher = RuleFileWatcher(paths, calls, **kwargs)
        calls.watcher = watcher
        started.append(watcher)
        watcher.start()
        return watcher, calls

    yield _start
    for w in started:
        w.stop()


def settle(watcher: RuleFileWatcher) -> None:
    """One more full check after everything so far: any callback the past changes cause has
    happened once this returns (checks run and call on_change serially, in one thread)."""
    done = watcher.checks
    watcher.rescan()
    assert watcher.wait_for_checks(done + 1, TIMEOUT)


def atomic_write(mount: Path, payload: dict[str, str], stamp: str) -> None:
    """kubelet AtomicWriter.Write, steps 5-11: a new ..<timestamp> payload directory, the files,
    missing visible symlinks ``name -> ..data/name``, ``..data_tmp -> ..<timestamp>`` renamed over
    ``..data`` (the atomic switch), stale visible links removed, the old payload directory removed."""
    data = mount / "..data"
    old = os.readlink(data) if data.is_symlink() else None
    payload_dir = mount / f"..{stamp}"
    payload_dir.mkdir()
    for name, text in payload.items():
        (payload_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (payload_dir / name).write_text(text)
    visible = {name.split("/")[0] for name in payload}
    for top in sorted(visible):
        if not (mount / top).is_symlink():
            os.symlink(f"..data/{top}", mount / top)
    os.symlink(payload_dir.name, mount / "..data_tmp")
    os.rename(mount / "..data_tmp", data)
    for entry in mount.iterdir():
        if not entry.name.startswith(".") and entry.name not in visible:
            entry.unlink()
    if old is not None:
        shutil.rmtree(mount / old)


# ---------------------------------------------------------------- which files are rule files


def test_rule_file_names() -> None:
    for name in ("rules.yaml", "a.yml", "rules.v2.yaml"):
        assert is_rule_file_name(name), name
    for name in (
        "..data",
        "..2026_11_22_10_00_00.123",
        ".rules.yaml",
        ".rules.yaml.swp",
        "rules.yaml~",
        "#rules.yaml#",
        ".#rules.yaml",
        "rules.yaml.swp~",
        "notes.txt",
        "state.json",
        "rules.yaml.tmp",
    ):
        assert not is_rule_file_name(name), name
    assert skipped_entry("..data") and skipped_entry("..2026_11_22_10_00_00.123")
    assert not skipped_entry("team")


def test_a_configmap_volume_is_read_once_through_its_visible_names(tmp_path: Path) -> None:
    """Each key exists three times in a ConfigMap volume (visible link, ..data/, ..<timestamp>/);
    the loader and the daemon's rule_files read the visible one only, nested items included, and
    skip editor leftovers; a link loop does not hang the walk."""
    mount = tmp_path / "rules"
    mount.mkdir()
    atomic_write(
        mount, {"rules.yaml": policy("a"), "team/b.yaml": policy("b")}, "2026_11_22_10_00_00.000000001"
    )
    (mount / "local").mkdir()
    (mount / "local" / "c.yml").write_text(policy("c"))
    for leftover in (".rules.yaml.swp", "rules.yaml~", "#rules.yaml#", "local/.c.yml.tmp", "notes.txt"):
        (mount / leftover).write_text(policy("leftover"))
    os.symlink("rules.yaml", mount / ".#rules.yaml")  # emacs lock link
    os.symlink("..data/missing.yaml", mount / "dangling.yaml")  # kubelet may link before the target exists
    os.symlink(".", mount / "local" / "loop")

    expected = [mount / "local" / "c.yml", mount / "rules.yaml", mount / "team" / "b.yaml"]
    files, problems = expand_paths([mount])
    assert (files, problems) == (expected, [])
    assert yaml_files_under(mount) == expected
    assert list(rule_files([mount])) == expected  # engine.reload uses the same decision
    docs = load_documents([mount], builtin=False)
    assert sorted(d.name for d in docs) == ["a", "b", "c"]


# ---------------------------------------------------------------- the relevance filter


@pytest.mark.parametrize(
    ("kind", "src", "dest", "relevant"),
    [
        (FileOpenedEvent, "{d}/rules.yaml", "", False),
        (FileClosedNoWriteEvent, "{d}/rules.yaml", "", False),
        (FileModifiedEvent, "{d}/rules.yaml", "", False),  # an in-place write counts at its close
        (FileCreatedEvent, "{d}/rules.yaml", "", False),  # created and still being written
        (FileClosedEvent, "{d}/rules.yaml", "", True),
        (FileMovedEvent, "{d}/rules.yaml.swp~", "{d}/rules.yaml", True),
        (FileClosedEvent, "{d}/rules.yaml.swp~", "", True),  # the editor's temp sibling, renamed next
        (FileMovedEvent, "{d}/..data_tmp", "{d}/..data", True),
        (DirCreatedEvent, "{d}/..2026_11_22_10_00_00.5", "", True),
        (FileClosedEvent, "{d}/other.txt", "", False),
        (FileDeletedEvent, "{d}/rules.yaml", "", True),
        (FileClosedEvent, "{r}/nested/x.yaml", "", True),
        (FileMovedEvent, "", "{r}/moved-in.yml", True),
        (FileClosedEvent, "{r}/..2026_11_22_10_00_00.5/x.yaml", "", False),  # the hidden copy
        (FileClosedEvent, "{r}/notes.txt", "", False),
        (DirCreatedEvent, "{r}/team", "", True),
        (FileMovedEvent, "{r}/..data_tmp", "{r}/..data", True),
    ],
)
def test_relevance(tmp_path: Path, kind: Any, src: str, dest: str, relevant: bool) -> None:
    """Watched: the file cm/rules.yaml (through cm/) and the directory dir/ (recursively)."""
    d, r = tmp_path / "cm", tmp_path / "dir"
    d.mkdir()
    r.mkdir()
    paths = [p.format(d=d, r=r) for p in (src, dest)]
    event = kind(*paths) if kind is FileMovedEvent else kind(paths[0])
    watcher = RuleFileWatcher([d / "rules.yaml", r], lambda reason: None)
    assert watcher._relevant(event) is relevant


# ---------------------------------------------------------------- real inotify


def test_editor_atomic_save_makes_one_callback(tmp_path: Path, watch: Start) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(policy("a", 1))
    watcher, calls = watch([rules])
    tmp = tmp_path / "rules.yaml.swp~"
    tmp.write_text(policy("a", 2))
    os.replace(tmp, rules)
    expected = content_hash([rules])[0]
    assert calls.wait_hash(expected) == [(REASON_EVENT, expected)]
    settle(watcher)
    assert len(calls) == 1


def test_in_place_write_is_read_after_close_never_half_written(tmp_path: Path, watch: Start) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(policy("a", 1))
    _, calls = watch([rules])
    full = policy("a", 2) + "  # " + "x" * 4096 + "\n"
    with rules.open("w") as f:
        f.write(full[:100])
        f.flush()
        os.fsync(f.fileno())
        # Half written and still open: give a watcher that (wrongly) reacted to IN_MODIFY ten
        # debounce periods to read it. Not a duration assertion: a slow machine can only make a
        # broken watcher pass, never a correct one fail.
        time.sleep(0.5)
        f.write(full[100:])
    expected = content_hash([rules])[0]
    assert rules.read_text() == full
    assert calls.wait_hash(expected) == [(REASON_EVENT, expected)]


def test_in_place_write_makes_one_callback_with_the_full_content(tmp_path: Path, watch: Start) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(policy("a", 1))
    watcher, calls = watch([rules])
    full = policy("a", 2) + "  # " + "x" * 65536 + "\n"
    with rules.open("w") as f:
        for i in range(0, len(full), 4096):
            f.write(full[i : i + 4096])
            f.flush()
    expected = content_hash([rules])[0]
    assert calls.wait_hash(expected) == [(REASON_EVENT, expected)]
    settle(watcher)
    assert len(calls) == 1


@pytest.mark.parametrize("watched", ["mount", "file"])
def test_configmap_update_makes_one_callback_and_is_read_without_duplicates(
    tmp_path: Path, watch: Start, watched: str
) -> None:
    mount = tmp_path / "rules"
    mount.mkdir()
    atomic_write(mount, {"rules.yaml": policy("a", 1)}, "2026_11_22_10_00_00.000000001")
    target = mount if watched == "mount" else mount / "rules.yaml"
    watcher, calls = watch([target])

    atomic_write(mount, {"rules.yaml": policy("a", 2)}, "2026_11_22_10_01_00.000000002")
    expected = content_hash([target])[0]
    assert calls.wait_hash(expected) == [(REASON_EVENT, expected)]
    settle(watcher)
    assert len(calls) == 1
    assert sorted(p.name for p in mount.iterdir()) == [
        "..2026_11_22_10_01_00.000000002",
        "..data",
        "rules.yaml",
    ]

    files, problems = expand_paths([target])
    assert (files, problems) == ([mount / "rules.yaml"], [])
    docs = load_documents([target], builtin=False)
    assert [(d.name, d.data["spec"]["priority"]) for d in docs] == [("a", 2)]




class Outcomes:
    """Reloader listener: every outcome, with a condition to wait on."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.seen: list[ReloadOutcome] = []

    def __call__(self, outcome: ReloadOutcome) -> None:
        with self.cond:
            self.seen.append(outcome)
            self.cond.notify_all()

    def wait(self, count: int) -> list[str]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.seen) >= count, TIMEOUT), self.seen
            return [o.result for o in self.seen]


def test_a_configmap_switch_reloads_once_without_waiting_for_the_debounce(tmp_path: Path) -> None:
    """The ``..data`` rename is a ConfigMap update's atomic switch (kubelet wrote the payload and
    the links to new keys before it): the check runs at that event. The debounce here is an hour,
    so the reload can only come from that; the swap's other events (its payload directory created
    before the switch, the old one removed after it) must not make a second one."""
    mount = tmp_path / "rules"
    mount.mkdir()
    atomic_write(mount, {"site.yaml": SITE.format(value=5)}, "2026_11_22_10_00_00.1")
    reloader = Reloader(ReloadConfig(files=(mount,), stat_files=False))
    outcomes = Outcomes()
    reloader.listeners.append(outcomes)
    reloader.observe_node(REFERENCE_NODE)
    assert outcomes.wait(1) == ["loaded"]
    watcher = RuleFileWatcher([mount], lambda reason: reloader.request("file") and None, debounce=HOUR)
    watcher.start()
    try:
        atomic_write(mount, {"site.yaml": SITE.format(value=6)}, "2026_11_22_10_01_00.2")
        assert outcomes.wait(2) == ["loaded", "loaded"]
        settle(watcher)  # whatever the swap's later events scheduled: checked, and nothing new
        assert [o.result for o in outcomes.seen] == ["loaded", "loaded"]
        assert reloader.generation == 2
        assert reloader.engine is not None
        assert reloader.engine.policy.spec["reclaim"]["cpu"]["headroom"]["reservedForAllocate"] == 6
    finally:
        watcher.stop()
        reloader.close()


def test_an_in_place_save_in_several_writes_still_waits_for_the_debounce(
    tmp_path: Path, watch: Start
) -> None:
    """Only the ``..data`` switch skips the debounce. An editor that truncates and writes in
    several opens and closes makes a close event while the file is half written: that event
    schedules a check one debounce later (never at once), and the check reads the whole save."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(policy("a", 1))
    watcher, calls = watch([tmp_path], debounce=HOUR)
    full = policy("a", 2) + "  # " + "x" * 4096 + "\n"
    with rules.open("w") as f:  # truncated, then half written and closed
        f.write(full[:100])
    assert watcher.wait_pending(TIMEOUT)
    due = watcher.scheduled()
    assert due is not None and due > HOUR / 2, due  # debounced, not due now
    with rules.open("a") as f:
        f.write(full[100:])
    watcher.rescan()  # stands in for the debounce running out
    expected = content_hash([tmp_path])[0]
    assert calls.wait_hash(expected) == [(REASON_RESCAN, expected)]
    settle(watcher)
    assert len(calls) == 1


def test_configmap_key_added_and_removed(tmp_path: Path, watch: Start) -> None:
    mount = tmp_path / "rules"
    mount.mkdir()
    atomic_write(mount, {"a.yaml": policy("a")}, "2026_11_22_10_00_00.1")
    _, calls = watch([mount])
    atomic_write(mount, {"a.yaml": policy("a"), "b.yaml": policy("b")}, "2026_11_22_10_00_01.2")
    calls.wait_hash(content_hash([mount])[0])
    assert [d.name for d in load_documents([mount], builtin=False)] == ["a", "b"]
    atomic_write(mount, {"b.yaml": policy("b")}, "2026_11_22_10_00_02.3")
    calls.wait_hash(content_hash([mount])[0])
    assert [d.name for d in load_documents([mount], builtin=False)] == ["b"]


def test_touch_and_identical_content_make_no_callback(tmp_path: Path, watch: Start) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(policy("a"))
    watcher, calls = watch([tmp_path])

    os.utime(rules, (1, 1))  # touch: no event at all
    with rules.open("a"):  # opened for writing and closed: an event, same bytes
        pass
    settle(watcher)
    checks = watcher.checks
    tmp = tmp_path / ".rules.yaml.tmp"  # an identical atomic re-save
    tmp.write_text(policy("a"))
    os.replace(tmp, rules)
    assert watcher.wait_for_checks(checks + 1, TIMEOUT)  # the event was seen and checked
    settle(watcher)
    assert len(calls) == 0

    rules.write_text(policy("a", 11))  # and a real change still is one
    calls.wait_hash(content_hash([tmp_path])[0])


def test_a_burst_of_writes_makes_few_callbacks(tmp_path: Path, watch: Start) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(policy("a", 0))
    watcher, calls = watch([rules], debounce=0.2)
    for i in range(1, 21):
        rules.write_text(policy("a", i))
    expected = content_hash([rules])[0]
    seen = calls.wait_hash(expected)
    settle(watcher)
    assert len(calls) == len(seen) <= 3, calls.calls
    assert calls.calls[-1][1] == expected


def test_a_rules_directory_created_later(tmp_path: Path, watch: Start) -> None:
    target = tmp_path / "later" / "rules"
    watcher, calls = watch([target])
    assert watcher.watches() == [(str(tmp_path), False)]  # the nearest existing ancestor

    target.mkdir(parents=True)
    (target / "a.yaml").write_text(policy("a"))
    calls.wait_hash(content_hash([target])[0])
    # The new directory is watched now: a change inside it is an event (the backstop is 60 s).
    (target / "nested").mkdir()
    (target / "nested" / "b.yaml").write_text(policy("b"))
    expected = content_hash([target])[0]
    assert calls.wait_hash(expected)[-1] == (REASON_EVENT, expected)
    assert (str(target), True) in watcher.watches()


def test_a_rule_file_in_a_directory_created_later(tmp_path: Path, watch: Start) -> None:
    rules = tmp_path / "etc" / "qosd" / "rules.yaml"
    _, calls = watch([rules])
    rules.parent.mkdir(parents=True)
    rules.write_text(policy("a"))
    calls.wait_hash(content_hash([rules])[0])
    rules.write_text(policy("a", 2))
    expected = content_hash([rules])[0]
    assert calls.wait_hash(expected)[-1] == (REASON_EVENT, expected)


def test_a_rules_directory_deleted_and_recreated(tmp_path: Path, watch: Start) -> None:
    target = tmp_path / "rules"
    target.mkdir()
    (target / "a.yaml").write_text(policy("a"))
    _, calls = watch([target])

    shutil.rmtree(target)
    calls.wait_hash(content_hash([target])[0])  # gone: the reload path reports it
    target.mkdir()
    (target / "a.yaml").write_text(policy("a", 5))
    calls.wait_hash(content_hash([target])[0])
    (target / "a.yaml").write_text(policy("a", 6))  # the recreated directory is watched
    expected = content_hash([target])[0]
    assert calls.wait_hash(expected)[-1] == (REASON_EVENT, expected)

    # Replaced within one debounce period (the check never sees it missing): the watch on the old
    # directory is dead and is replaced, so a later change is still an event.
    staged = tmp_path / "staged"
    staged.mkdir()
    (staged / "a.yaml").write_text(policy("a", 7))
    shutil.rmtree(target)
    os.rename(staged, target)
    calls.wait_hash(content_hash([target])[0])
    (target / "a.yaml").write_text(policy("a", 8))
    expected = content_hash([target])[0]
    assert calls.wait_hash(expected)[-1] == (REASON_EVENT, expected)


def test_on_change_raising_does_not_stop_the_watcher(tmp_path: Path, watch: Start) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(policy("a", 1))
    _, calls = watch([rules])
    calls.failures = 1
    rules.write_text(policy("a", 2))
    first = content_hash([rules])[0]
    calls.wait_hash(first)
    rules.write_text(policy("a", 3))
    second = content_hash([rules])[0]
    assert calls.wait_hash(second)[-1] == (REASON_EVENT, second)


def test_backstop_catches_a_change_while_the_observer_was_dead(tmp_path: Path, watch: Start) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(policy("a", 1))
    watcher, calls = watch([rules], backstop=0.3)
    dead = watcher._observer
    dead.stop()  # as if watchdog's thread had died
    dead.join(TIMEOUT)
    rules.write_text(policy("a", 2))  # no event reaches anyone
    expected = content_hash([rules])[0]
    assert calls.wait_hash(expected) == [(REASON_BACKSTOP, expected)]
    assert watcher._observer is not dead and watcher._observer.is_alive()


def test_a_dead_observer_is_restarted_and_events_flow_again(tmp_path: Path, watch: Start) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(policy("a", 1))
    watcher, calls = watch([rules])  # backstop 60 s: only events can deliver within the timeout
    dead = watcher._observer
    dead.stop()
    dead.join(TIMEOUT)
    settle(watcher)  # a check repairs the watches (the backstop would, later)
    assert watcher.watches() == [(str(tmp_path), False)]
    rules.write_text(policy("a", 2))
    expected = content_hash([rules])[0]
    assert calls.wait_hash(expected) == [(REASON_EVENT, expected)]


def test_stop_leaves_no_thread_and_is_idempotent(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(policy("a"))
    before = set(threading.enumerate())
    with RuleFileWatcher([rules, tmp_path / "sub"], lambda reason: None) as watcher:
        assert len(set(threading.enumerate()) - before) >= 3  # observer, inotify reader, emitter, checks
        watcher.start()  # idempotent
    watcher.stop()
    assert set(threading.enumerate()) - before == set()
    with pytest.raises(RuntimeError, match="create a new one"):
        watcher.start()


def test_stop_from_on_change(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(policy("a", 1))
    stopped = threading.Event()
    before = set(threading.enumerate())

    def on_change(reason: str) -> None:
        watcher.stop()
        stopped.set()

    watcher = RuleFileWatcher([rules], on_change)
    watcher.start()
    rules.write_text(policy("a", 2))
    assert stopped.wait(TIMEOUT)
    for thread in set(threading.enumerate()) - before:
        thread.join(TIMEOUT)
        assert not thread.is_alive(), thread.name


def test_a_reload_collects_no_garbage_until_the_new_generation_is_in_effect(tmp_path: Path) -> None:
    """A reload allocates thousands of objects that all live on; a cyclic collection in the middle
    would only delay the swap. The collector is off from the start of the reload until its
    outcome is reported (the listeners run with the new engine in place), and on again after."""
    rules = tmp_path / "site.yaml"
    rules.write_text(SITE.format(value=5))
    reloader = Reloader(ReloadConfig(files=(rules,), stat_files=False))
    during: list[tuple[bool, int]] = []
    reloader.listeners.append(lambda outcome: during.append((gc.isenabled(), outcome.generation)))
    try:
        assert gc.isenabled()
        reloader.observe_node(REFERENCE_NODE)
        rules.write_text(SITE.format(value=6))
        outcome = reloader.request("file")
        assert outcome is not None and outcome.result == "loaded"
        assert during == [(False, 1), (False, 2)] and gc.isenabled()
        rules.write_text("kind: [")  # a rejected generation turns it back on too
        assert reloader.request("file").result == "failed"  # type: ignore[union-attr]
        assert during[-1] == (False, 2) and gc.isenabled()
    finally:
        reloader.close()
