"""Per-cgroup CPU and memory usage, PSI, and the current values of the files qosd manages.

Workloads name their cgroups by a path relative to the cgroup root and without the controller
("kubepods/burstable/pod<uid>", "qosd-demo/probe"), the way the rest of qosd does. Where a (path,
file) pair is on disk, for cgroup v1 (one directory per controller, co-mounted controllers such as
"cpu,cpuacct" included) and v2 (one unified tree), is the one detected
:class:`~engine.cgroups.mounts.CgroupLayout` the cgroup adapter writes through, so both sides agree
on the hierarchy. Tests build the layout over temporary trees with the kernel's file names.

Facts per cgroup (names as in the facts schema's resourceUse/memoryUse):

- ``cpu.usage_cores``: the growth of v1 ``cpuacct.usage`` (ns) or v2 ``cpu.stat usage_usec`` per
  second of wall time (Koordinator's pod collector: delta usage over delta time), over at least
  ``MIN_WINDOW_SECONDS``: a sample that comes sooner keeps the baseline, and the last rate stands.
  The counter and the clock are read at different instants, and a collector descheduled between
  the two (a loaded node) stretches one interval and not the other, more so the shorter the window.
  So the rate is clamped to [0, node CPUs] (``capacity``), the one bound that holds for any cgroup
  over any window; a CFS quota does not (a cgroup may run several CPUs for part of a period) and a
  cpuset would cost another read per cgroup per tick.
- ``cpu.throttled_ratio``: nr_throttled / nr_periods between two ticks, from ``cpu.stat`` (v2
  always; v1 when ``throttling`` is on, since it is an extra file in the cpu controller).
- ``memory.usage_bytes``: inactive_anon + active_anon + unevictable of ``memory.stat`` (v1 with
  the hierarchical ``total_`` prefix): Koordinator's usage without page cache
  (``MemoryStatRaw.Usage``), the same meaning as the node's usage.
- ``memory.rss_bytes``, ``cache_bytes``, ``shmem_bytes``, ``inactive_file_bytes``: total_rss /
  anon, total_cache / file, total_shmem / shmem, total_inactive_file / inactive_file.
- ``memory.working_set_bytes``: ``memory.usage_in_bytes`` (v1) or ``memory.current`` (v2) minus
  inactive file, the kubelet's working set.
- ``psi.{cpu,memory,io}.{some,full}.*`` from the cgroup's pressure files (v2 only; v1 has none).
- ``numa.<id>.memory_usage_bytes``: the cgroup's memory on each NUMA node from ``memory.numa_stat``
  (:func:`parse_numa_stat`), read only when ``numa`` is on: the policy has a ``numaScoped`` evict
  (the collector decides, per generation), since it is one more file per cgroup per memory read.

The current values of the files qosd manages are read by :mod:`engine.sources.observer`.

Every file is read at most once per tick (through the collector's TickReader). The memory files of a
cgroup can be staggered over several ticks (``memory_every``) when hundreds of cgroups make the
per-tick cost matter.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.cgroups.mounts import CgroupLayout
from engine.model.units import int_or_none
from engine.sources.files import Reader, read_ints, read_unshared
from engine.sources.procfs import MIN_WINDOW_SECONDS, line_rest, psi_facts, rate

PSI_FILES = (("cpu", "cpu.pressure"), ("memory", "memory.pressure"), ("io", "io.pressure"))

_V1_STAT = {
    "total_rss": "rss",
    "total_cache": "cache",
    "total_shmem": "shmem",
    "total_inactive_file": "inactive_file",
    "total_inactive_anon": "inactive_anon",
    "total_active_anon": "active_anon",
    "total_unevictable": "unevictable",
}
_V2_STAT = {
    "anon": "rss",
    "file": "cache",
    "shmem": "shmem",
    "inactive_file": "inactive_file",
    "inactive_anon": "inactive_anon",
    "active_anon": "active_anon",
    "unevictable": "unevictable",
}
_CPU_STAT = {"usage_usec": "usage_usec", "nr_periods": "nr_periods", "nr_throttled": "nr_throttled"}
_THROTTLING = {"nr_periods": "nr_periods", "nr_throttled": "nr_throttled"}
NUMA_STAT = "memory.numa_stat"
V1_FILES = ("cpuacct.usage", "cpu.stat", "memory.stat", "memory.usage_in_bytes", NUMA_STAT)
V2_FILES = ("cpu.stat", "memory.stat", "memory.current", NUMA_STAT, *(name for _, name in PSI_FILES))
# memory.numa_stat lines summed into one cgroup's use of a NUMA node, and their unit. v1 counts
# pages; its plain lines (total=, anon=) are the cgroup's own pages only, while the hierarchical_
# ones include its descendants, where a reclaim root's or a pod's processes live (the pod's
# container cgroups). So v1 reads hierarchical_total (= file + anon + unevictable), and v2, whose
# numa_stat is hierarchical and in bytes with no total line, anon + file: Katalyst's per-NUMA cgroup
# memory (MemoryNumaMetrics Anon + File of GetNumaStat in core pkg/util/cgroup/manager/{v1,v2}).
NUMA_LINES = {1: ("hierarchical_total",), 2: ("anon", "file")}


def parse_stat_keys(text: str, keys: Mapping[str, str]) -> dict[str, int]:
    """The wanted ``key value`` lines of memory.stat / cpu.stat, renamed by ``keys`` (v1's
    memory.stat has some 40 lines of which qosd wants 7)."""
    out: dict[str, int] = {}
    for key, name in keys.items():
        rest = line_rest(text, key + " ")
        if rest is None:
            continue
        try:
            out[name] = int(rest)
        except ValueError:
            continue
    return out


def parse_numa_stat(text: str | None, version: int, page_size: int) -> dict[int, int]:
    """Bytes per NUMA node id from a cgroup's ``memory.numa_stat`` (``NUMA_LINES`` of ``version``).

    v1 lines are ``name=<pages> N0=<pages> N1=<pages>``, v2 lines ``name N0=<bytes> N1=<bytes>``.
    Empty when the file is missing or lacks a wanted line: a use that cannot be computed is not
    guessed as zero (the memory guard then gives no advice, the NUMA victim filter says it had no
    facts). A node whose value is missing or malformed in any wanted line is left out for the same
    reason; unknown lines and tokens are ignored."""
    if text is None:
        return {}
    unit = page_size if version == 1 else 1
    sep = "=" if version == 1 else " "
    total: dict[int, int] = {}
    bad: set[int] = set()
    for i, name in enumerate(NUMA_LINES[version]):
        rest = line_rest(text, name + sep)
        if rest is None:
            return {}
        values: dict[int, int] = {}
        for token in rest.split():
            node, eq, value = token.partition("=")
            if not (eq and node[:1] == "N" and node[1:].isdigit()):
                continue  # the v1 line's own total, or a token of a format qosd does not know
            nid = int(node[1:])
            if value.isdigit():
                values[nid] = int(value)
            else:
                bad.add(nid)
        if i == 0:
            total = values
        else:
            bad.update(total.keys() ^ values.keys())
            total = {nid: total[nid] + v for nid, v in values.items() if nid in total}
    return {nid: v * unit for nid, v in total.items() if nid not in bad}


_NUMA_KEYS: dict[int, str] = {}


def numa_usage_facts(usage: Mapping[int, int], into: dict[str, float]) -> None:
    """``numa.<id>.memory_usage_bytes`` facts (the name the eviction feature reads) into ``into``."""
    for nid, value in usage.items():
        key = _NUMA_KEYS.get(nid)
        if key is None:
            key = _NUMA_KEYS[nid] = f"numa.{nid}.memory_usage_bytes"
        into[key] = float(value)


_USAGE_PARTS = frozenset({"inactive_anon", "active_anon", "unevictable"})
_MEMORY_FACTS = tuple((key, f"memory.{key}_bytes") for key in ("rss", "cache", "shmem", "inactive_file"))


def memory_facts(stat: Mapping[str, int], usage: int | None) -> dict[str, float]:
    """Flat memory facts from a normalized memory.stat (see the module docstring)."""
    out: dict[str, float] = {}
    if stat.keys() >= _USAGE_PARTS:
        out["memory.usage_bytes"] = float(stat["inactive_anon"] + stat["active_anon"] + stat["unevictable"])
    for key, name in _MEMORY_FACTS:
        if key in stat:
            out[name] = float(stat[key])
    if usage is not None:
        out["memory.working_set_bytes"] = float(max(usage - stat.get("inactive_file", 0), 0))
    return out


class NumaRead:
    """One read of a cgroup's ``memory.numa_stat``, parsed on first use (see :class:`MemoryRead`)."""

    __slots__ = ("_facts", "page_size", "text", "version")

    def __init__(self, text: str | None, version: int, page_size: int) -> None:
        self.text = text
        self.version = version
        self.page_size = page_size
        self._facts: dict[str, float] | None = None

    def facts(self) -> dict[str, float]:
        """``numa.<id>.memory_usage_bytes`` facts of this read (empty when they cannot be computed)."""
        facts = self._facts
        if facts is None:
            facts = self._facts = {}
            numa_usage_facts(parse_numa_stat(self.text, self.version, self.page_size), facts)
        return facts


class MemoryRead:
    """One read of a cgroup's memory files, kept as the kernel's text and parsed on first use.

    The collector reads every cgroup's memory.stat on its turn, but most ticks no part of the
    engine looks at a pod's memory (the reclaim report every 30 s, an eviction's ranking): parsing
    50 files a tick that nobody reads was a fifth of the daemon's tick at 500 workloads. The text
    is what the kernel said at the read, so the facts parsed later are the facts of that read; a
    later read makes a new object and never changes this one, so a tick's facts stay as they were
    for whoever kept them."""

    __slots__ = ("_facts", "numa", "stat", "usage", "version")

    def __init__(self, stat: str, usage: str | None, version: int, numa: NumaRead | None) -> None:
        self.stat = stat
        self.usage = usage
        self.version = version
        self.numa = numa
        self._facts: dict[str, float] | None = None

    def facts(self) -> dict[str, float]:
        """The memory facts of this read (module docstring), numa.<id>.* included when read."""
        facts = self._facts
        if facts is None:
            keys = _V1_STAT if self.version == 1 else _V2_STAT
            facts = memory_facts(parse_stat_keys(self.stat, keys), int_or_none(self.usage))
            if self.numa is not None:
                facts.update(self.numa.facts())
            self._facts = facts
        return facts


class CgroupSample(Mapping[str, Mapping[str, Any]]):
    """One tick's facts per cgroup path, each built when first looked up.

    Holds the tick's CPU rates and memory reads (immutable once made); a cgroup is present when it
    has a fact, as in a plain dict of non-empty fact maps. Built fact maps are kept, so two lookups
    of one cgroup (a pod and its container sharing it) give the same map."""

    __slots__ = ("_index", "_made", "_memory", "_rates")

    def __init__(
        self, index: Mapping[str, int], rates: list[float | None], memory: list[MemoryRead | None]
    ) -> None:
        self._index = index
        self._rates = rates
        self._memory = memory
        self._made: dict[str, dict[str, Any]] = {}

    def _build(self, path: str) -> dict[str, Any] | None:
        made = self._made.get(path)
        if made is not None:
            return made
        i = self._index.get(path)
        if i is None:
            return None
        memory, rate = self._memory[i], self._rates[i]
        facts: dict[str, Any] = dict(memory.facts()) if memory is not None else {}
        if rate is not None:
            facts["cpu.usage_cores"] = rate
        if not facts:
            return None
        self._made[path] = facts
        return facts

    def __getitem__(self, path: str) -> Mapping[str, Any]:
        facts = self._build(path)
        if facts is None:
            raise KeyError(path)
        return facts

    def get(self, path: str, default: Any = None) -> Any:
        facts = self._build(path)
        return default if facts is None else facts

    def __contains__(self, path: object) -> bool:
        return isinstance(path, str) and self._build(path) is not None

    def __iter__(self) -> Iterator[str]:
        return (path for path in self._index if self._build(path) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def usage_cores(self, path: str) -> float | None:
        """The cgroup's CPU usage this tick, without building its fact map."""
        i = self._index.get(path)
        return None if i is None else self._rates[i]


@dataclass(frozen=True)
class CgroupOptions:
    """What to read per cgroup beyond CPU and memory usage."""

    psi: bool = True  # v2 pressure files (three extra reads per cgroup)
    numa: bool = False  # memory.numa_stat with the memory files (numa.<id>.memory_usage_bytes)
    throttling: bool = False  # v1 cpu.stat (v2 has it in the cpu.stat read anyway)
    memory_every: int = 1  # read memory files every N ticks, staggered by path
    numa_every: int = 1  # with ``numa``: memory.numa_stat on every Nth memory read of a cgroup


Sampled = tuple[bool, MemoryRead | None]  # (the cgroup answered, memory read now)


class _Prev:
    """Per cgroup: the previous counters, the last memory read, its file names and its memory
    phase (built once)."""

    __slots__ = (
        "at", "cpu", "files", "memory", "memory_tick", "numa",
        "periods", "phase", "rate", "reads", "throttled",
    )  # fmt: skip

    def __init__(self, files: tuple[str, ...], phase: int) -> None:
        self.files = files
        self.phase = phase
        self.at: float | None = None  # when ``cpu`` (the baseline of the next rate) was read
        self.cpu: int | None = None
        self.rate: float | None = None  # the last rate, reported until a full window passed
        self.periods: int | None = None
        self.throttled: int | None = None
        self.memory: MemoryRead | None = None
        self.memory_tick = -1  # the tick of the last memory read that succeeded
        self.numa: NumaRead | None = None  # the last memory.numa_stat read
        self.reads = 0  # memory reads so far: memory.numa_stat is read on every numa_every-th


class CgroupMetrics:
    """Samples cgroups each tick, keeping the previous counters per path for the rates.

    This runs for every cgroup every tick, so the loop is written flat: one dict lookup for the
    cgroup's state, one read of its CPU counter, and the memory files only on the cgroup's turn."""

    def __init__(
        self,
        fs: CgroupLayout,
        reader: Reader,
        options: CgroupOptions = CgroupOptions(),
        page_size: int | None = None,
    ) -> None:
        self.fs = fs
        self.reader = reader
        self.options = options
        self.page_size = page_size or os.sysconf("SC_PAGE_SIZE")
        self._prev: dict[str, _Prev] = {}
        self._batch: tuple[Sequence[str], list[tuple[str, _Prev]], list[str], dict[str, int]] | None = None

    def sample(
        self, paths: Sequence[str], now: float, tick: int, capacity: float | None = None
    ) -> Mapping[str, Mapping[str, Any]]:
        """Facts per cgroup path at monotonic time ``now`` (``tick`` counts collections); CPU usage
        is at most ``capacity`` cores (the node's CPUs).

        Between staggered reads a cgroup's last memory facts stand; it has none once it is gone (its
        CPU counter is unreadable) or its memory files are, so a vanished workload never carries
        stale memory."""
        every = self.options.memory_every
        cgroups, counter_files, index = self._batch_of(paths)
        if self.fs.version == 1 and not self.options.throttling:
            # The common case, one counter file per cgroup: every counter is read in one batch, the
            # memory files of the cgroups whose turn it is in another, and the fact maps are built
            # when someone looks (CgroupSample).
            counters = read_ints(self.reader, counter_files)
            due = [
                c for c in cgroups if every <= 1 or c[1].memory is None or (tick + c[1].phase) % every == 0
            ]
            if due:
                self._v1_memories(due, tick)
            limit = capacity if capacity is not None else float("inf")
            rates: list[float | None] = []
            for (_, prev), counter in zip(cgroups, counters, strict=True):
                if counter is None and prev.memory_tick != tick:
                    prev.memory = None  # gone: no stale memory
                # _cpu_rate with per_second 1e9, inlined: two calls per cgroup per tick were a tenth
                # of the daemon's tick at 500 cgroups (tests/test_collectors.py holds both equal).
                base, at = prev.cpu, prev.at
                if counter is None or base is None or at is None or counter < base:
                    prev.cpu, prev.at, prev.rate = counter, now, None
                elif now - at >= MIN_WINDOW_SECONDS:  # a positive window: never a zero divisor
                    prev.rate = min((counter - base) / ((now - at) * 1e9), limit)
                    prev.cpu, prev.at = counter, now
                rates.append(prev.rate)
            return CgroupSample(index, rates, [prev.memory for _, prev in cgroups])
        out: dict[str, dict[str, Any]] = {}
        v2 = self.fs.version == 2
        for path, prev in cgroups:
            memory_due = every <= 1 or prev.memory is None or (tick + prev.phase) % every == 0
            facts: dict[str, Any] = {}
            sample_one = self._v2 if v2 else self._v1
            alive, memory = sample_one(prev, now, facts, memory_due, capacity)
            if memory is not None:
                prev.memory = memory
                facts.update(memory.facts())
            elif memory_due or not alive:
                prev.memory = None
            elif prev.memory is not None:
                facts.update(prev.memory.facts())
            if facts:
                out[path] = facts
        return out

    def _batch_of(self, paths: Sequence[str]) -> tuple[list[tuple[str, _Prev]], list[str], dict[str, int]]:
        """The distinct cgroups of ``paths`` with their state, their CPU counter files and each
        path's position; kept while the caller passes the same tuple (the collector does while
        workloads are unchanged; a list could have changed in place)."""
        batch = self._batch
        if batch is not None and batch[0] is paths and isinstance(paths, tuple):
            return batch[1], batch[2], batch[3]
        known = self._prev
        every = self.options.memory_every
        cgroups: list[tuple[str, _Prev]] = []
        index: dict[str, int] = {}
        for path in paths:
            if path in index:
                continue  # listed twice (a pod and its container sharing one cgroup)
            index[path] = len(cgroups)
            prev = known.get(path)
            if prev is None:
                phase = zlib.crc32(path.encode()) % every if every > 1 else 0
                prev = known[path] = _Prev(self._files(path), phase)
            cgroups.append((path, prev))
        if len(known) > len(cgroups):  # forget cgroups no longer sampled, and their open files
            forget = getattr(self.reader, "forget", None)
            for path in [p for p in known if p not in index]:
                if forget is not None:
                    forget(known[path].files)
                del known[path]
        files = [prev.files[0] for _, prev in cgroups]
        self._batch = (paths, cgroups, files, index)
        return cgroups, files, index

    def _files(self, path: str) -> tuple[str, ...]:
        fs = self.fs
        if fs.version == 2:
            return tuple(fs.file(path, n) for n in V2_FILES)
        return tuple(fs.file(path, n) for n in V1_FILES)

    @staticmethod
    def _cpu_rate(
        prev: _Prev, now: float, counter: int | None, per_second: float, capacity: float | None
    ) -> float | None:
        """The cgroup's CPU usage in cores, advancing its baseline once a full window has passed
        (see the module docstring); None without a baseline or when the counter restarted."""
        if counter is None or prev.cpu is None or prev.at is None or counter < prev.cpu:
            prev.cpu, prev.at, prev.rate = counter, now, None  # a new baseline
            return None
        if now - prev.at < MIN_WINDOW_SECONDS:
            return prev.rate
        prev.rate = rate(prev.cpu, counter, now - prev.at, per_second, capacity)
        prev.cpu, prev.at = counter, now
        return prev.rate

    @staticmethod
    def _throttling(prev: _Prev, stat: Mapping[str, int], facts: dict[str, Any]) -> None:
        periods, throttled = stat.get("nr_periods"), stat.get("nr_throttled")
        if periods is None or throttled is None:
            return
        if prev.periods is not None and prev.throttled is not None and periods >= prev.periods:
            dp = periods - prev.periods
            facts["cpu.throttled_ratio"] = (throttled - prev.throttled) / dp if dp else 0.0
        prev.periods, prev.throttled = periods, throttled

    def _v1(
        self, prev: _Prev, now: float, facts: dict[str, Any], memory_due: bool, capacity: float | None
    ) -> Sampled:
        """CPU (and throttling) into ``facts``; whether the CPU counter was readable, and the memory
        read when due and readable."""
        read = self.reader.read
        usage_file, cpu_stat_file = prev.files[:2]
        counter = int_or_none(read(usage_file))
        cores = self._cpu_rate(prev, now, counter, 1e9, capacity)
        if cores is not None:
            facts["cpu.usage_cores"] = cores
        if self.options.throttling:
            text = read(cpu_stat_file)
            if text is not None:
                self._throttling(prev, parse_stat_keys(text, _THROTTLING), facts)
        memory = self._v1_memory(prev) if memory_due else None
        return counter is not None or memory is not None, memory

    def _v1_memory(self, prev: _Prev) -> MemoryRead | None:
        read = self.reader.read
        stat = read(prev.files[2])
        if stat is None:
            return None
        numa = self._numa(prev, prev.files[4], 1) if self.options.numa else None
        return MemoryRead(stat, read(prev.files[3]), 1, numa)

    def _v1_memories(self, due: list[tuple[str, _Prev]], tick: int) -> None:
        """The memory reads of the cgroups whose turn it is: batched reads of memory.stat and
        memory.usage_in_bytes for all of them, and of memory.numa_stat for those on its turn (see
        ``_numa``; the same cadence)."""
        stats = read_unshared(self.reader, [prev.files[2] for _, prev in due])
        usages = read_unshared(self.reader, [prev.files[3] for _, prev in due])
        read = [prev for (_, prev), stat in zip(due, stats, strict=True) if stat is not None]
        if self.options.numa and read:
            turn = [p for p in read if self._numa_due(p)]
            texts = read_unshared(self.reader, [p.files[4] for p in turn])
            for prev, text in zip(turn, texts, strict=True):
                prev.numa = NumaRead(text, 1, self.page_size)
            for prev in read:
                prev.reads += 1
        for (_, prev), stat, usage in zip(due, stats, usages, strict=True):
            if stat is None:
                prev.memory = None
                continue
            prev.memory = MemoryRead(stat, usage, 1, prev.numa)
            prev.memory_tick = tick

    def _numa(self, prev: _Prev, path: str, version: int) -> NumaRead:
        """The cgroup's NUMA read: made on the first memory read and every ``numa_every``-th after
        it, the last one carried in between. Where a pod's pages sit moves only when they are
        allocated, reclaimed or migrated, and only victim selection reads it (the NUMA trigger reads
        the node's own files every tick), so the daemon reads it less often than memory.stat: the
        file is one more kernel walk per cgroup, the most expensive of its turn."""
        numa = prev.numa
        if numa is None or self._numa_due(prev):
            numa = prev.numa = NumaRead(self.reader.read(path), version, self.page_size)
        prev.reads += 1
        return numa

    def _numa_due(self, prev: _Prev) -> bool:
        """Whether this memory read of the cgroup reads memory.numa_stat too (see ``_numa``)."""
        every = self.options.numa_every
        return prev.numa is None or every <= 1 or prev.reads % every == 0

    def _v2(
        self, prev: _Prev, now: float, facts: dict[str, Any], memory_due: bool, capacity: float | None
    ) -> Sampled:
        read = self.reader.read
        cpu_stat_file, stat_file, current_file, numa_file, *psi_files = prev.files
        text = read(cpu_stat_file)
        stat = parse_stat_keys(text, _CPU_STAT) if text is not None else {}
        cores = self._cpu_rate(prev, now, stat.get("usage_usec"), 1e6, capacity)
        if cores is not None:
            facts["cpu.usage_cores"] = cores
        self._throttling(prev, stat, facts)
        if self.options.psi:
            for (resource, _), name in zip(PSI_FILES, psi_files, strict=True):
                psi_facts(f"psi.{resource}", read(name), facts)
        if memory_due:
            mem_stat = read(stat_file)
            if mem_stat is not None:
                numa = self._numa(prev, numa_file, 2) if self.options.numa else None
                return True, MemoryRead(mem_stat, read(current_file), 2, numa)
        return text is not None, None
