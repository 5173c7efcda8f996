"""Nothing is planned into a cgroup the collector found absent.

Katalyst's burst manager checks that a container's cgroup exists before it writes (IsContainerCgroupExist)
and skips the container otherwise. qosd used to plan the write and let the adapter report it as
vanished every tick. Now the observer marks a path absent when its directory is missing (the facts
snapshot's ``absentCgroups``) and the planner holds every write there, or under it, with the reason.
The observer test uses a fake cgroup v1 tree in a temporary directory (the kernel's layout; tests
cannot mount).
"""

from __future__ import annotations

from pathlib import Path

from engine.model.facts import snapshot_from_dict
from engine.model.intents import CgroupIntent, Provenance
from engine.model.operations import WriteCgroup
from engine.plan.planner import Guards, plan
from engine.sources.files import FileReader, TickReader
from engine.sources.observer import Observer
from engine.sources.snapshot_file import snapshot_to_dict
from tests.builders import policy
from tests.test_collectors import layout_of, v1_cgroup, v1_root

PROV = Provenance("knobs", "h", 1, "test.yaml:1:1", "enforce")
POLICY = policy("classes:\n  - {name: be, match: [{labels: {q: be}}]}\n")


def _writes(intents: tuple[CgroupIntent, ...], absent: frozenset[str]) -> list[str]:
    result = plan(intents, POLICY, Guards(), {}, None, None, absent)
    return [o.path for o in result.operations if isinstance(o, WriteCgroup)]


def test_writes_into_an_absent_cgroup_or_under_it_are_held_with_the_reason() -> None:
    gone = CgroupIntent("kubepods/pod1/c1", "cpu.cfs_burst_us", "100", "default/p1", PROV)
    under = CgroupIntent("kubepods/pod2/c2", "cpu.cfs_burst_us", "100", "default/p2", PROV)
    # a sibling whose name only starts with the absent one's is not under it
    sibling = CgroupIntent("kubepods/pod22/c1", "cpu.cfs_burst_us", "100", "default/p22", PROV)
    result = plan(
        (gone, under, sibling),
        POLICY,
        Guards(),
        {},
        None,
        None,
        frozenset({"kubepods/pod1/c1", "kubepods/pod2"}),
    )
    assert [o.path for o in result.operations if isinstance(o, WriteCgroup)] == ["kubepods/pod22/c1"]
    assert [(h.intent, h.reason) for h in result.held] == [
        (gone, "cgroup kubepods/pod1/c1 does not exist (the collector found no directory): not written"),
        (under, "cgroup kubepods/pod2 does not exist (the collector found no directory): not written"),
    ]


def test_the_same_intents_are_written_once_the_cgroup_is_there() -> None:
    """The plan is cached across steady ticks: a change in the absent set alone plans again."""
    intents = (CgroupIntent("kubepods/pod1/c1", "cpu.cfs_burst_us", "100", "default/p1", PROV),)
    assert _writes(intents, frozenset({"kubepods/pod1/c1"})) == []
    assert _writes(intents, frozenset()) == ["kubepods/pod1/c1"]


def test_the_observer_reports_missing_directories_only(tmp_path: Path) -> None:
    cg = v1_root(tmp_path)
    v1_cgroup(cg, "kubepods/pod1/c1", 0)  # exists, with cpu.shares
    (cg / "cpu" / "kubepods" / "pod1" / "c2").mkdir()  # exists, but without the observed file
    observer = Observer(layout_of(cg), TickReader(FileReader()))
    pairs = tuple(
        (p, "cpu.cfs_burst_us") for p in ("kubepods/pod1/c1", "kubepods/pod1/c2", "kubepods/pod1/c3")
    )
    pairs += (("kubepods/pod1/c1", "cpu.shares"),)
    observed = observer.observe(pairs)
    assert observed == {"kubepods/pod1/c1": {"cpu.shares": "1024"}}
    assert observer.absent == frozenset({"kubepods/pod1/c3"})
    # The container starts: its directory appears (without the burst file, as before Linux 5.14),
    # and the next read of the pair finds it.
    v1_cgroup(cg, "kubepods/pod1/c3", 0)
    observer.observe(pairs)
    assert observer.absent == frozenset()


def test_absent_cgroups_round_trip_through_a_facts_snapshot() -> None:
    doc = {
        "apiVersion": "qosd.io/v1alpha1",
        "kind": "FactsSnapshot",
        "time": 1,
        "node": {"name": "n", "capacity": {"cpu": 4, "memory": 1 << 30}},
        "absentCgroups": ["kubepods/pod1/c1"],
    }
    snap = snapshot_from_dict(doc)
    assert snap.absent_cgroups == frozenset({"kubepods/pod1/c1"})
    assert snapshot_to_dict(snap)["absentCgroups"] == ["kubepods/pod1/c1"]
    assert "absentCgroups" not in snapshot_to_dict(snapshot_from_dict({**doc, "absentCgroups": []}))


def test_a_burst_above_the_quota_is_held_with_its_quota_not_half_written() -> None:
    """Hypothesis found it (tests/test_validate_then_run_properties.py, a real v1 cgroup): a setCgroup
    of cpu.max 50000 100000 beside a computed cfs_burst_us of 200000000 validated, and the kernel
    refused the quota once the burst was in (EINVAL). The planner now holds every quota and burst
    change of that cgroup, with the kernel's reason, so nothing is half-written."""
    from engine.plan.cgroups import Desired, cfs_refusals

    changes = [
        Desired("a", "cpu.cfs_burst_us", "200000000"),
        Desired("a", "cpu.cfs_quota_us", "-1"),
        Desired("a", "cpu.max", "50000 100000"),
        Desired("a", "cpu.shares", "2"),
        Desired("b", "cpu.max", "50000 100000"),
    ]
    refused = cfs_refusals(changes, {"b": {"cpu.cfs_burst_us": "10000"}})
    assert set(refused) == {("a", "cpu.cfs_burst_us"), ("a", "cpu.cfs_quota_us"), ("a", "cpu.max")}
    assert "above the quota 50000" in refused["a", "cpu.max"]
    # b's quota is above its observed burst; a quota below it is held, an unlimited one is not.
    assert cfs_refusals(changes[4:], {"b": {"cpu.cfs_burst_us": "60000"}}) == {
        ("b", "cpu.max"): refused["a", "cpu.max"].replace("200000000", "60000")
    }
    assert cfs_refusals([Desired("c", "cpu.cfs_quota_us", "-1")], {"c": {"cpu.cfs_burst_us": "9"}}) == {}
