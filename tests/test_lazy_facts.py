"""Per-pod facts built when the engine looks at them: the same maps as building them every tick.

The v1 collector keeps each cgroup's memory files as the kernel's text and the tick's CPU rates, and
hands the engine ``PodFacts`` over a ``CgroupSample``, which builds a pod's map on first lookup
(issue 15: building and parsing 500 maps a tick that nobody read was a quarter of the daemon's
tick). These tests hold it to the plain dicts it replaced:

- a tick nobody looks at parses no memory file, and a pod looked at twice is parsed once;
- the lazy maps equal the eager ones (a collector that reads containers builds every map at once),
  tick by tick, through counters that move, memory files that change, go missing and come back, and
  a cgroup that vanishes;
- facts kept from an earlier tick stay what the kernel said then, after later reads;
- ``read_ints`` gives what ``int_or_none(read(path))`` gives, for every kind of file.

Temp trees with the kernel's file names stand in for cgroupfs here (no mount is needed for what is
checked: which file text becomes which fact); tests/test_tick_cost.py reads the real one.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import engine.sources.cgroupfs as cgroupfs
from engine.model.facts import Snapshot
from engine.model.units import int_or_none
from engine.sources.collector import CollectorOptions, NodeCollector
from engine.sources.files import SMALL, PinnedReader, TickReader, read_ints
from engine.sources.standalone import StandaloneConfig, StandaloneSource
from tests.test_collectors import (
    PAGE,
    V1_MEMORY_STAT,
    Clock,
    layout_of,
    procfs_tree,
    sysfs_tree,
    v1_cgroup,
    v1_root,
    write,
)
from tests.test_numa_stat import GUARD_AND_NUMA_EVICT, V1_TWO_NODES, policy_of


def collector(tmp_path: Path, cg: Path, clock: Clock, pin: bool = True, **options: Any) -> NodeCollector:
    """A standalone collector over the temp tree ``cg``. Unpinned (``pin=False``), a file removed
    from the tree reads as gone, as a removed cgroup's files do on cgroupfs (a descriptor kept open
    on a temp file would go on reading the unlinked inode)."""
    fs = layout_of(cg)
    return NodeCollector(
        StandaloneSource(fs, StandaloneConfig()),
        fs,
        procfs=procfs_tree(tmp_path),
        sysfs=sysfs_tree(tmp_path),
        reader=PinnedReader(pinnable=lambda _: pin),
        options=CollectorOptions(**options),
        clock=clock,
        monotonic=clock,
        page_size=PAGE,
    )


def plain(snap: Snapshot, drop: str = "") -> dict[str, dict[str, Any]]:
    """The pods' maps as dicts, without the ``drop`` fact (and a pod that had only that)."""
    out = {uid: {k: v for k, v in facts.items() if k != drop} for uid, facts in snap.metrics.pods.items()}
    return {uid: facts for uid, facts in out.items() if facts}


class Counted:
    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.n = 0

    def __call__(self, *args: Any) -> Any:
        self.n += 1
        return self.fn(*args)


def test_a_tick_nobody_looks_at_parses_no_memory_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cg = v1_root(tmp_path)
    for i in range(6):
        v1_cgroup(cg, f"qosd-demo/w{i}", 10**9 * i)
    clock = Clock()
    parse = Counted(cgroupfs.parse_stat_keys)
    monkeypatch.setattr(cgroupfs, "parse_stat_keys", parse)
    c = collector(tmp_path, cg, clock)
    c.prime()
    snaps = []
    for _ in range(3):
        clock.t += 1
        snaps.append(c.collect())
    assert parse.n == 0, "memory.stat was parsed though no part of the tick looked at a pod"
    pods = snaps[-1].metrics.pods
    assert pods["qosd-demo/w3"]["memory.rss_bytes"] > 0 and parse.n == 1
    assert pods.get("qosd-demo/w3") is pods["qosd-demo/w3"] and parse.n == 1


def with_total_rss(rss: int) -> str:
    return re.sub(r"^total_rss \d+$", f"total_rss {rss}", V1_MEMORY_STAT, count=1, flags=re.M)


def mutate(cg: Path, rng: random.Random, names: list[str], counters: dict[str, int]) -> None:
    """One random change of the kind a live node sees between ticks."""
    name = rng.choice(names)
    base = f"qosd-demo/{name}"
    kind = rng.choice(["cpu", "cpu", "memory", "numa", "no-stat", "stat-back", "garbled-counter"])
    if kind == "cpu":
        counters[name] += rng.randrange(0, 2 * 10**9)
        write(cg, f"cpuacct/{base}/cpuacct.usage", f"{counters[name]}\n")
    elif kind == "memory":
        rss = rng.randrange(0, 1 << 32)
        write(cg, f"memory/{base}/memory.stat", with_total_rss(rss))
        write(cg, f"memory/{base}/memory.usage_in_bytes", f"{rng.randrange(0, 1 << 33)}\n")
    elif kind == "numa":
        n0, n1 = rng.randrange(0, 1000), rng.randrange(0, 1000)
        write(
            cg, f"memory/{base}/memory.numa_stat", V1_TWO_NODES.replace("N0=600 N1=700", f"N0={n0} N1={n1}")
        )
    elif kind == "no-stat":
        (cg / f"memory/{base}/memory.stat").unlink(missing_ok=True)
    elif kind == "stat-back":
        write(cg, f"memory/{base}/memory.stat", V1_MEMORY_STAT)
    else:
        write(cg, f"cpuacct/{base}/cpuacct.usage", "garbled\n")
        counters[name] = 0


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    ("memory_every", "numa_every"),
    [(1, 1), (3, 1), (3, 2)],
    ids=["memory-every-tick", "memory-every-3", "numa-every-2"],
)
def test_lazy_maps_equal_the_eager_maps_tick_by_tick(
    tmp_path: Path, seed: int, memory_every: int, numa_every: int
) -> None:
    """Two collectors over one tree: the daemon's (batched reads, lazy maps) and one that also reads
    each cgroup's cpu.stat for throttling and its containers, which samples cgroup by cgroup and
    builds every map at once. After each tick's random change they hand the engine equal pods (but
    for the throttling facts only the second reads)."""
    rng = random.Random(seed)
    cg = v1_root(tmp_path)
    names = [f"w{i}" for i in range(8)]
    counters = {}
    for i, name in enumerate(names):
        counters[name] = 10**9 * i
        v1_cgroup(cg, f"qosd-demo/{name}", counters[name])
        write(cg, f"memory/qosd-demo/{name}/memory.numa_stat", V1_TWO_NODES)
    clock = Clock()
    opts = {"memory_every": memory_every, "numa_every": numa_every}
    lazy = collector(tmp_path, cg, clock, pin=False, **opts)
    eager = collector(tmp_path, cg, clock, pin=False, containers=True, throttling=True, **opts)
    if numa_every > 1:  # a numaScoped evict: numa.<id>.memory_usage_bytes per pod
        policy = policy_of(tmp_path, GUARD_AND_NUMA_EVICT)
        lazy.use_policy(policy)  # type: ignore[arg-type]
        eager.use_policy(policy)  # type: ignore[arg-type]
    lazy.prime()
    eager.prime()
    numa_facts = 0
    for tick in range(25):
        clock.t += 1
        for _ in range(rng.randrange(0, 3)):
            mutate(cg, rng, names, counters)
        a, b = lazy.collect(), eager.collect()
        assert type(a.metrics.pods).__name__ == "PodFacts" and isinstance(b.metrics.pods, dict)
        assert plain(a) == plain(b, drop="cpu.throttled_ratio"), f"seed {seed}, tick {tick}"
        numa_facts += sum("numa.1.memory_usage_bytes" in facts for facts in a.metrics.pods.values())
        present = set(plain(b, drop="cpu.throttled_ratio"))
        assert len(a.metrics.pods) == len(present) and set(a.metrics.pods) == present
        for uid in (*b.metrics.pods, "qosd-demo/absent"):
            assert (uid in a.metrics.pods) == (uid in present) == (a.metrics.pods.get(uid) is not None)
        assert a.metrics.node.get("cpu.system_usage_cores") == b.metrics.node.get("cpu.system_usage_cores")
    assert (numa_facts > 0) == (numa_every > 1), "the NUMA facts were compared where the policy reads them"


def test_a_vanished_cgroup_leaves_the_lazy_maps_as_it_left_the_eager_ones(tmp_path: Path) -> None:
    cg = v1_root(tmp_path)
    for i in range(3):
        v1_cgroup(cg, f"qosd-demo/w{i}", 10**9)
    clock = Clock()
    c = collector(tmp_path, cg, clock, pin=False, memory_every=4)
    c.prime()
    clock.t += 1
    before = c.collect()
    # the kernel's view of a removed cgroup: the counter unreadable, the memory files gone
    (cg / "cpuacct/qosd-demo/w1/cpuacct.usage").unlink()
    (cg / "memory/qosd-demo/w1/memory.stat").unlink()
    clock.t += 1
    after = c.collect()
    assert "qosd-demo/w1" in before.metrics.pods
    assert "qosd-demo/w1" not in after.metrics.pods and after.metrics.pods.get("qosd-demo/w1") is None
    with pytest.raises(KeyError):
        after.metrics.pods["qosd-demo/w1"]
    assert set(after.metrics.pods) == {"qosd-demo/w0", "qosd-demo/w2"}


def test_facts_kept_from_a_tick_stay_what_the_kernel_said_then(tmp_path: Path) -> None:
    """A snapshot looked at only after later ticks re-read the files still gives its own tick's
    facts: a read is parsed from the text of that read, and a rate is the rate of that tick."""
    cg = v1_root(tmp_path)
    v1_cgroup(cg, "qosd-demo/w", 0)
    clock = Clock()
    c = collector(tmp_path, cg, clock, memory_every=1)
    c.prime()
    write(cg, "cpuacct/qosd-demo/w/cpuacct.usage", f"{10**9}\n")  # 1 core over the next second
    clock.t += 1
    first = c.collect()
    write(cg, "cpuacct/qosd-demo/w/cpuacct.usage", f"{10**9 + 5 * 10**8}\n")  # then half a core
    write(cg, "memory/qosd-demo/w/memory.stat", with_total_rss(7))
    write(cg, "memory/qosd-demo/w/memory.usage_in_bytes", "123\n")
    clock.t += 1
    second = c.collect()
    later, now = first.metrics.pods["qosd-demo/w"], second.metrics.pods["qosd-demo/w"]
    assert later["cpu.usage_cores"] == pytest.approx(1.0) and now["cpu.usage_cores"] == pytest.approx(0.5)
    assert now["memory.rss_bytes"] == 7.0 and later["memory.rss_bytes"] != 7.0
    assert later["memory.working_set_bytes"] != now["memory.working_set_bytes"]


FILES = [
    ("counter", "123456789012\n", 123456789012),
    ("no newline", "42", 42),
    ("padded", "  7 \n", 7),
    ("max", "max\n", None),
    ("empty", "", None),
    ("longer than one small read", "9" * (SMALL + 5) + "\n", int("9" * (SMALL + 5))),
    ("two lines", "1\n2\n", None),
]


@pytest.mark.parametrize("pinned", ["all", "none", "some"], ids=["pinned", "first read", "some let go"])
def test_read_ints_gives_what_reading_and_int_or_none_give(tmp_path: Path, pinned: str) -> None:
    """Every kind of file, read through descriptors already open, opened now, or a mix (the refresh
    lets a few go every tick, so a steady tick is nearly always the mix)."""
    paths = []
    for name, text, _ in FILES:
        path = tmp_path / name.replace(" ", "-")
        path.write_text(text)
        paths.append(str(path))
    paths.append(str(tmp_path / "absent"))
    expected = [value for _, _, value in FILES] + [None]
    reader = PinnedReader(pinnable=lambda _: True)
    if pinned != "none":
        reader.read_many(paths)
    if pinned == "some":
        reader.forget(paths[::2])
    assert read_ints(TickReader(reader), paths) == expected
    assert [int_or_none(text_of(p)) for p in paths] == expected


def text_of(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def test_read_ints_reads_the_pinned_counters_at_once_and_opens_only_those_let_go(tmp_path: Path) -> None:
    opened: list[str] = []

    def opener(path: str) -> int:
        opened.append(Path(path).name)
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)

    paths = []
    for i in range(6):
        path = tmp_path / f"c{i}"
        path.write_text(f"{i * 1000}\n")
        paths.append(str(path))
    reader = PinnedReader(opener, pinnable=lambda _: True)
    assert read_ints(reader, paths) == [i * 1000 for i in range(6)] and len(opened) == 6
    reader.forget(paths[1::2])
    for i, path in enumerate(paths):
        Path(path).write_text(f"{i * 1000 + 7}\n")  # rewritten in place, as the kernel's are
    opened.clear()
    assert read_ints(reader, paths) == [i * 1000 + 7 for i in range(6)]
    assert opened == ["c1", "c3", "c5"] and reader.pinned == 6
