"""What a steady tick costs, checked by what it does rather than by how long it takes.

DESIGN.md asks for <= 1% of a core at a 1 s tick with 500 containers (measured by
``bench/bench_daemon.py``). Wall-clock assertions would be flaky on a shared machine, so these tests
guard the mechanisms the budget rests on, by counting:

- the pool step derives nothing when nothing changed (no classification, no cpuset parsing, no
  allocation) and hands back the same demands, plan and intents;
- the collector opens no file in a steady tick (counters stay open and are re-read with pread),
  reads each CPU counter every tick, each memory.stat once per ``memory_every`` ticks and each
  observed file once per ``observe_every`` ticks, and still sees every change in place;
- memory.numa_stat is read only for a policy that uses it: per pod with the memory files for a
  numaScoped evict, the reclaim root's once a tick for a memoryGuard, never otherwise;
- the Observer re-reads a pair at once after ``invalidate`` and hands back the same mapping while
  nothing changed (never one it later changes);
- the cgroup adapter resolves a directory once per DIR_TTL calls, and again at once when the cgroup
  vanished;
- PinnedReader on the real cgroupfs: fresh values through a pinned descriptor, ENODEV after rmdir
  reads as None, a recreated cgroup is read anew, descriptors are let go after ``refresh`` ticks.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

import engine.adapters.cgroup as cgroup_module
import engine.features.pools.step as pools_module
from engine.adapters.cgroup import DIR_TTL, CgroupAdapter
from engine.cgroups.mounts import CgroupLayout
from engine.config.pipeline import build_policy, load_documents
from engine.evaluate.engine import Engine
from engine.model.facts import Container, Snapshot, Workload
from engine.sources.collector import CollectorOptions, NodeCollector
from engine.sources.files import FileReader, PinnedReader, TickReader, read_many
from engine.sources.observer import Observer
from engine.sources.standalone import StandaloneConfig, StandaloneSource
from tests.builders import snapshot
from tests.test_collectors import (
    PAGE,
    Clock,
    CountingOpener,
    layout_of,
    procfs_tree,
    sysfs_tree,
    v1_cgroup,
    v1_root,
    write,
)
from tests.test_numa_stat import GUARD_AND_NUMA_EVICT, NEITHER, V1_TWO_NODES, policy_of

KATALYST_QOS = "katalyst.kubewharf.io/qos_level"


# ------------------------------------------------------------------------------------------ pools


def workload(name: str, qos: str) -> Workload:
    path = f"qosd-test/{name}"
    return Workload(
        uid=path,
        name=name,
        namespace="qosd-test",
        annotations=MappingProxyType({KATALYST_QOS: qos}),
        phase="Running",
        cgroup_path=path,
        containers=(Container("main", requests={"cpu": 1.0}, cgroup_path=path),),
    )


class Calls:
    """Wraps a function and counts its calls."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.n = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.n += 1
        return self.fn(*args, **kwargs)


@pytest.fixture
def pool_engine() -> Engine:
    base = snapshot()
    return Engine(build_policy(load_documents([], builtin=True), base.node), generation=1)


def pool_snapshot(workloads: tuple[Workload, ...], cpus: dict[str, str]) -> Snapshot:
    observed = MappingProxyType({path: MappingProxyType({"cpuset.cpus": c}) for path, c in cpus.items()})
    return dataclasses.replace(snapshot(), workloads=workloads, cgroups=observed)


def test_a_steady_pool_step_derives_nothing_and_reuses_its_results(
    pool_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same workload objects (even in a new tuple) and the same observation: no classification, no
    cpuset parsing, no allocation; the same demands, plan and intents objects."""
    step = pool_engine.pool_step
    pods = tuple(workload(f"svc-{i}", "shared_cores") for i in range(6)) + tuple(
        workload(f"batch-{i}", "reclaimed_cores") for i in range(6)
    )
    first = pool_snapshot(pods, {w.cgroup_path: "0-15" for w in pods})
    plan = step.plan(first)
    assert plan is not None
    demands, intents = step.demands, step.intents(first, plan, "h")
    assert len(demands) == 12 and len(intents) == 12

    classify = Calls(pool_engine.classifier.classify)
    parse = Calls(pools_module.parse_cpuset)
    allocate = Calls(pools_module.allocate)
    monkeypatch.setattr(pool_engine.classifier, "classify", classify)
    monkeypatch.setattr(pools_module, "parse_cpuset", parse)
    monkeypatch.setattr(pools_module, "allocate", allocate)
    for _ in range(3):
        again = dataclasses.replace(first, time=first.time + 1, workloads=tuple(pods))
        assert step.plan(again) is plan
        assert step.demands is demands
        assert step.intents(again, plan, "h") is intents
    assert (classify.n, parse.n, allocate.n) == (0, 0, 0)

    # An observation with the same texts in a new mapping: compared, not parsed, no new plan.
    copy = pool_snapshot(pods, {w.cgroup_path: "0-15" for w in pods})
    assert step.plan(copy) is plan and (parse.n, allocate.n) == (0, 0)
    # A changed cpuset: parsed again and planned again.
    moved = pool_snapshot(pods, {**{w.cgroup_path: "0-15" for w in pods}, pods[0].cgroup_path: "0-3"})
    step.plan(moved)
    assert parse.n == 12 and allocate.n == 1


def test_changed_workloads_are_derived_again_with_the_same_result_as_a_fresh_step(
    pool_engine: Engine,
) -> None:
    step = pool_engine.pool_step
    pods = tuple(workload(f"svc-{i}", "shared_cores") for i in range(4))
    snap = pool_snapshot(pods, {})
    plan = step.plan(snap)
    assert plan is not None
    before = step.intents(snap, plan, "h")
    grown = pool_snapshot((*pods, workload("batch-0", "reclaimed_cores")), {})
    plan2 = step.plan(grown)
    assert plan2 is not None and plan2 is not plan
    after = step.intents(grown, plan2, "h")
    assert after is not before and len(after) == 5
    fresh = Engine(pool_engine.policy, generation=1).pool_step
    fresh_plan = fresh.plan(grown)
    assert fresh_plan == plan2 and fresh.intents(grown, plan2, "h") == after


# -------------------------------------------------------------------------------------- collector


class CountingReader:
    """Counts reads per path between the TickReader and the PinnedReader (batch reads included)."""

    def __init__(self, inner: PinnedReader) -> None:
        self.inner = inner
        self.reads: Counter[str] = Counter()

    def read(self, path: str) -> str | None:
        self.reads[path] += 1
        return self.inner.read(path)

    def read_many(self, paths: Sequence[str]) -> list[str | None]:
        self.reads.update(paths)
        return read_many(self.inner, paths)

    def begin_tick(self) -> None:
        self.inner.begin_tick()

    def forget(self, paths: Iterable[str]) -> None:
        self.inner.forget(paths)


def reads_of(reads: Counter[str], suffix: str) -> int:
    return sum(n for path, n in reads.items() if path.endswith(suffix) and "/cgroup/" in path)


def counting_collector(
    tmp_path: Path, cg: Path, options: CollectorOptions
) -> tuple[NodeCollector, CountingReader, CountingOpener, Clock]:
    """A collector over the v1 tree ``cg`` whose reads and opens are counted. A temp tree is no
    pseudo-filesystem, so pinning is allowed explicitly; files here are only rewritten in place,
    as the kernel's are."""
    opener = CountingOpener()
    counting = CountingReader(PinnedReader(opener, pinnable=lambda _: True))
    clock = Clock()
    fs = layout_of(cg)
    collector = NodeCollector(
        StandaloneSource(fs, StandaloneConfig()),
        fs,
        procfs=procfs_tree(tmp_path),
        sysfs=sysfs_tree(tmp_path),
        reader=counting,  # type: ignore[arg-type]
        options=options,
        clock=clock,
        monotonic=clock,
        page_size=PAGE,
    )
    return collector, counting, opener, clock


def test_a_steady_collector_opens_nothing_and_staggers_memory_and_observed_files(tmp_path: Path) -> None:
    """Twelve v1 workloads, memory every 4 ticks, observation every 3. After the first tick nothing
    is opened; each CPU counter is read every tick, each memory.stat once per 4 ticks, each observed
    cpuset once per 3; and a counter changed in place still shows up in the next tick."""
    cg = v1_root(tmp_path)
    n = 12
    for i in range(n):
        v1_cgroup(cg, f"qosd-demo/w{i:02d}", 0)
    collector, counting, opener, clock = counting_collector(
        tmp_path, cg, CollectorOptions(memory_every=4, observe_every=3)
    )
    collector.collect()
    opener.opens.clear()
    counting.reads.clear()
    per_tick = []
    for _ in range(12):
        clock.t += 1
        before = Counter(counting.reads)
        snap = collector.collect()
        tick = counting.reads - before
        per_tick.append(reads_of(tick, "cpuacct.usage"))
        assert len(snap.metrics.pods) == n and all(
            "memory.usage_bytes" in f for f in snap.metrics.pods.values()
        )
    assert sum(opener.opens.values()) == 0, opener.opens
    assert per_tick == [n] * 12
    assert reads_of(counting.reads, "memory.stat") == n * 12 // 4
    assert reads_of(counting.reads, "cpuset.cpus") == n * 12 // 3
    write(cg, "cpuacct/qosd-demo/w00/cpuacct.usage", "2000000000\n")  # 2 s of CPU in 1 s: 2 cores
    clock.t += 1
    assert collector.collect().metrics.pods["qosd-demo/w00"]["cpu.usage_cores"] == pytest.approx(2.0)
    assert opener.opens == Counter()


@pytest.mark.parametrize(
    ("policy", "pod_reads", "root_reads"),
    [(None, 0, 0), (NEITHER, 0, 0), (GUARD_AND_NUMA_EVICT, 12 * 12 // 4, 12)],
    ids=["no policy", "policy without numa rules", "memoryGuard and numaScoped evict"],
)
def test_numa_stat_is_read_only_when_the_policy_uses_it(
    tmp_path: Path, policy: str | None, pod_reads: int, root_reads: int
) -> None:
    """Twelve v1 workloads, memory every 4 ticks, over 12 ticks: a policy without a memoryGuard or
    a numaScoped evict costs no memory.numa_stat read; with them, each pod's is read with its
    memory.stat (staggered) and the reclaim root's once a tick."""
    cg = v1_root(tmp_path)
    n = 12
    for i in range(n):
        v1_cgroup(cg, f"qosd-demo/w{i:02d}", 0)
        write(cg, f"memory/qosd-demo/w{i:02d}/memory.numa_stat", V1_TWO_NODES)
    write(cg, "memory/kubepods/besteffort/memory.numa_stat", V1_TWO_NODES)
    collector, counting, _, clock = counting_collector(tmp_path, cg, CollectorOptions(memory_every=4))
    if policy is not None:
        collector.use_policy(policy_of(tmp_path, policy))  # type: ignore[arg-type]
    collector.collect()
    counting.reads.clear()
    for _ in range(12):
        clock.t += 1
        snap = collector.collect()
        assert len(snap.metrics.pods) == n
    root = sum(n for path, n in counting.reads.items() if path.endswith("besteffort/memory.numa_stat"))
    assert reads_of(counting.reads, "memory.numa_stat") - root == pod_reads
    assert root == root_reads


def test_a_vanished_cgroups_descriptors_are_closed(tmp_path: Path) -> None:
    cg = v1_root(tmp_path)
    for name in ("a", "b"):
        v1_cgroup(cg, f"qosd-demo/{name}", 0)
    pinned = PinnedReader(pinnable=lambda _: True)
    clock = Clock()
    fs = layout_of(cg)
    collector = NodeCollector(
        StandaloneSource(fs, StandaloneConfig()),
        fs,
        procfs=procfs_tree(tmp_path),
        sysfs=sysfs_tree(tmp_path),
        reader=pinned,  # type: ignore[arg-type]
        options=CollectorOptions(),
        clock=clock,
        monotonic=clock,
        page_size=PAGE,
    )
    collector.collect()
    held = pinned.pinned
    for ctl in ("cpu", "cpuacct", "cpuset", "memory"):
        for f in (cg / ctl / "qosd-demo/b").iterdir():
            f.unlink()
        (cg / ctl / "qosd-demo/b").rmdir()
    clock.t += 1
    snap = collector.collect()
    assert set(snap.metrics.pods) == {"qosd-demo/a"}
    assert pinned.pinned < held


# ---------------------------------------------------------------------------------------- observer


def test_observer_rereads_an_invalidated_pair_at_once_and_keeps_unchanged_views(tmp_path: Path) -> None:
    cg = v1_root(tmp_path)
    paths = [f"g/w{i}" for i in range(4)]
    for p in paths:
        v1_cgroup(cg, p, 0, cpus="0-3")
    opener = CountingOpener()
    reader = TickReader(FileReader(opener))
    observer = Observer(layout_of(cg), reader, every=10)
    pairs = tuple((p, "cpuset.cpus") for p in paths)
    first = observer.observe(pairs, 1)
    assert opener.opens.total() == 4  # first sight: all read at once
    # Nothing due (every 10) and nothing changed: no read, and the very same mapping.
    ticks = [t for t in range(2, 12) if all((t + zlib_phase(p)) % 10 for p in paths)]
    tick = ticks[0]
    opener.opens.clear()
    reader.begin_tick()
    assert observer.observe(pairs, tick) is first and opener.opens.total() == 0
    # Changed behind qosd's back and invalidated (a write failed): read on the next observe.
    write(cg, "cpuset/g/w0/cpuset.cpus", "0-1\n")
    observer.invalidate("g/w0", "cpuset.cpus")
    reader.begin_tick()
    second = observer.observe(pairs, tick)
    assert opener.opens.total() == 1
    assert second["g/w0"]["cpuset.cpus"] == "0-1" and first["g/w0"]["cpuset.cpus"] == "0-3"
    assert second["g/w1"] is first["g/w1"]  # unchanged paths share their (never changed) values
    # A noted write shows up without a read; a new list of pairs is grouped again.
    observer.note("g/w1", "cpuset.cpus", "2\n")
    reader.begin_tick()
    third = observer.observe(pairs, tick)
    assert third["g/w1"] == {"cpuset.cpus": "2"} and opener.opens.total() == 1
    # Fewer pairs (workloads left): the view shrinks, the earlier ones stay as they were.
    assert observer.observe(pairs[:1], tick) == {"g/w0": {"cpuset.cpus": "0-1"}}
    assert observer.observe((), tick) == {} and len(third) == 4


def zlib_phase(path: str) -> int:
    """The Observer's phase of a path at every=10 (its files are due when (tick + phase) % 10 == 0)."""
    return zlib.crc32(path.encode()) % 10


# ----------------------------------------------------------------------------------- cgroup adapter


def make_v2(root: Path, path: str) -> None:
    d = root / path
    d.mkdir(parents=True, exist_ok=True)
    (d / "cpu.weight").write_text("100\n")
    (d / "cpuset.cpus").write_text("0-3\n")


def test_observe_resolves_a_directory_once_per_ttl_and_again_when_it_vanished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "cg"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu memory\n")
    make_v2(root, "a")
    make_v2(root, "b")
    adapter = CgroupAdapter(CgroupLayout.unified_tree(root))
    confine = Calls(cgroup_module.confine)
    monkeypatch.setattr(cgroup_module, "confine", confine)
    wanted = {"a": ["cpu.weight", "cpuset.cpus"], "b": ["cpu.weight"]}
    assert adapter.observe(wanted) == {
        "a": {"cpu.weight": "100", "cpuset.cpus": "0-3"},
        "b": {"cpu.weight": "100"},
    }
    assert confine.n == 2  # one per cgroup directory, not per file
    for _ in range(DIR_TTL - 1):  # calls 2 .. DIR_TTL reuse the directories
        adapter.observe(wanted)
    assert confine.n == 2
    adapter.observe(wanted)
    assert confine.n == 4  # the TTL ran out: resolved and checked again
    for f in (root / "b").iterdir():
        f.unlink()
    (root / "b").rmdir()
    assert adapter.observe(wanted) == {"a": {"cpu.weight": "100", "cpuset.cpus": "0-3"}}
    make_v2(root, "b")
    (root / "b" / "cpu.weight").write_text("200\n")
    assert adapter.observe(wanted)["b"] == {"cpu.weight": "200"}
    assert confine.n == 5  # b: resolved again as soon as it had vanished


# ------------------------------------------------------------------------- PinnedReader, real cgroups


@pytest.fixture
def cpuacct_dir() -> Iterator[Path]:
    base = Path("/sys/fs/cgroup/cpuacct")
    if os.geteuid() != 0 or not base.is_dir() or (Path("/sys/fs/cgroup") / "cgroup.controllers").exists():
        pytest.skip("needs root and a cgroup v1 cpuacct hierarchy")
    d = base / f"qosd-test-{os.getpid()}-{secrets.token_hex(3)}"
    d.mkdir()
    try:
        yield d
    finally:
        if d.exists():
            d.rmdir()


@pytest.mark.realcgroup
def test_pinned_reads_on_the_real_cgroupfs_follow_the_kernel(cpuacct_dir: Path) -> None:
    """One open, then preads that see every change; rmdir makes the descriptor answer ENODEV (read
    as None, descriptor closed); a cgroup recreated at the path is opened and read anew."""
    opener = CountingOpener()
    reader = PinnedReader(opener, refresh=4)
    shares = str(cpuacct_dir / "cpu.shares") if (cpuacct_dir / "cpu.shares").exists() else None
    usage = str(cpuacct_dir / "cpuacct.usage")
    assert reader.read(usage) is not None and reader.pinned == 1
    for _ in range(3):
        assert reader.read(usage) is not None
    assert opener.opens[usage] == 1
    if shares is not None:  # cpu and cpuacct co-mounted: a writable file shows writes at once
        for value in ("512", "2048"):
            Path(shares).write_text(value)
            assert (reader.read(shares) or "").strip() == value
    cpuacct_dir.rmdir()
    assert reader.read(usage) is None and reader.pinned == (1 if shares else 0)
    cpuacct_dir.mkdir()
    assert (reader.read(usage) or "").strip() == "0" and opener.opens[usage] == 3
    # refresh: descriptors opened 4 ticks ago are let go (and reopened by the next read)
    for _ in range(4):
        reader.begin_tick()
    assert reader.pinned == 0
    assert reader.read(usage) is not None and opener.opens[usage] == 4


def test_only_pseudo_filesystems_are_pinned_and_the_limit_holds(tmp_path: Path) -> None:
    plain = tmp_path / "value"
    plain.write_text("1\n")
    reader = PinnedReader()
    assert reader.read(str(plain)) == "1\n" and reader.pinned == 0  # a regular file: never pinned
    plain.write_text("2\n")
    assert reader.read(str(plain)) == "2\n"
    if Path("/proc/loadavg").exists():
        assert reader.read("/proc/loadavg") is not None and reader.pinned == 1
    capped = PinnedReader(pinnable=lambda _: True, limit=1)
    other = tmp_path / "other"
    other.write_text("3\n")
    assert capped.read(str(plain)) == "2\n" and capped.read(str(other)) == "3\n"
    assert capped.pinned == 1
    assert capped.read_many([str(plain), str(other), str(tmp_path / "absent")]) == ["2\n", "3\n", None]


def test_a_batch_read_takes_the_pinned_files_at_once_and_only_the_others_one_by_one(
    tmp_path: Path,
) -> None:
    """The refresh lets a few descriptors go every tick, so nearly every tick's batch of CPU
    counters has some unpinned files: those are read (and pinned again) one by one, and the pinned
    rest still in one batch, not all 500 file by file."""
    files = [tmp_path / f"c{i}" for i in range(5)]
    for i, f in enumerate(files):
        f.write_text(f"{i}\n")
    paths = [str(f) for f in files]
    reader = PinnedReader(pinnable=lambda _: True)
    assert reader.read_many(paths) == [f"{i}\n" for i in range(5)] and reader.pinned == 5
    reader.forget([paths[1], paths[3]])  # as the refresh does
    singles: list[str] = []
    one = reader.read

    def read(path: str) -> str | None:
        singles.append(path)
        return one(path)

    reader.read = read  # type: ignore[method-assign]
    for i, f in enumerate(files):
        f.write_text(f"{i + 10}\n")
    assert reader.read_many(paths) == [f"{i + 10}\n" for i in range(5)]
    assert singles == [paths[1], paths[3]] and reader.pinned == 5
    singles.clear()
    assert reader.read_many(paths) == [f"{i + 10}\n" for i in range(5)] and singles == []
