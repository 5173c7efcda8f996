"""Per-cgroup CPU and memory usage, PSI, and the current values of the files qosd manages.

Workloads name their cgroups by a path relative to the cgroup root and without the controller
("kubepods/burstable/pod<uid>", "qosd-demo/probe"), the way the rest of qosd does; this module maps
a (path, file) pair to the file on disk for cgroup v1 (one directory per controller, co-mounted
controllers such as "cpu,cpuacct" found automatically) and v2 (one unified tree). The root is
configurable so tests run on temporary trees with the kernel's file names.

Facts per cgroup (names as in the facts schema's resourceUse/memoryUse):

- ``cpu.usage_cores``: the growth of v1 ``cpuacct.usage`` (ns) or v2 ``cpu.stat usage_usec`` per
  second of wall time (Koordinator's pod collector: delta usage over delta time).
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

``Observer`` reads the current values of the files qosd manages (``cpuset.cpus``, ``cpu.shares``,
...) for the planner's diff.

Every file is read at most once per tick (through the collector's TickReader). The memory files and
the observed files of a cgroup can be staggered over several ticks (``memory_every``, the
Observer's ``every``) when hundreds of cgroups make the per-tick cost matter.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.sources.files import Reader, read_int
from engine.sources.procfs import psi_facts, rate

V1_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory")
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
V1_FILES = ("cpuacct.usage", "cpu.stat", "memory.stat", "memory.usage_in_bytes")
V2_FILES = ("cpu.stat", "memory.stat", "memory.current", *(name for _, name in PSI_FILES))


def controller_of(file: str) -> str:
    """The v1 controller directory a cgroup file lives in (``cpuacct.usage`` -> cpuacct)."""
    head = file.split(".", 1)[0]
    return head if head in V1_CONTROLLERS else "cpu"  # cgroup.procs, tasks: any hierarchy; use cpu


@dataclass(frozen=True)
class CgroupFS:
    """Where cgroup files are: ``root`` and, on v1, the directory of each controller."""

    root: str
    version: int
    mounts: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def detect(cls, root: Path | str = Path("/sys/fs/cgroup")) -> CgroupFS:
        """v2 when the root itself is a cgroup2 tree (it has cgroup.controllers), else v1/hybrid."""
        base = str(root).rstrip("/") or "/"
        if os.path.exists(f"{base}/cgroup.controllers"):
            return cls(base, 2)
        try:
            entries = os.listdir(base)
        except OSError:
            entries = []
        mounts: dict[str, str] = {}
        for ctl in V1_CONTROLLERS:
            if ctl in entries:
                mounts[ctl] = f"{base}/{ctl}"
                continue
            for name in sorted(entries):  # co-mounted: "cpu,cpuacct"
                if ctl in name.split(","):
                    mounts[ctl] = f"{base}/{name}"
                    break
        return cls(base, 1, mounts)

    def dir(self, path: str, controller: str = "cpu") -> str:
        """The directory of cgroup ``path`` (v1: in ``controller``'s hierarchy)."""
        rel = path.strip("/")
        base = self.root if self.version == 2 else self.mounts.get(controller, f"{self.root}/{controller}")
        return f"{base}/{rel}" if rel else base

    def file(self, path: str, name: str) -> str:
        return f"{self.dir(path, controller_of(name))}/{name}"

    def relative(self, absolute: str) -> str | None:
        """The cgroup path of a directory on disk, or None if it is outside every hierarchy."""
        text = absolute.rstrip("/")
        bases = [self.root] if self.version == 2 else sorted(self.mounts.values(), key=len, reverse=True)
        for base in bases:
            if text == base:
                return ""
            if text.startswith(base + "/"):
                return text[len(base) + 1 :]
        return None


def parse_stat_keys(text: str, keys: Mapping[str, str]) -> dict[str, int]:
    """The wanted ``key value`` lines of memory.stat / cpu.stat, renamed by ``keys``.

    Each key is found with ``str.find`` (at a line start) instead of splitting every line: v1's
    memory.stat has some 40 lines of which qosd wants 7, and this runs for every cgroup every tick."""
    out: dict[str, int] = {}
    for key, name in keys.items():
        needle = key + " "
        i = text.find(needle)
        while i > 0 and text[i - 1] != "\n":
            i = text.find(needle, i + 1)
        if i < 0:
            continue
        start = i + len(needle)
        end = text.find("\n", start)
        try:
            out[name] = int(text[start:end] if end >= 0 else text[start:])
        except ValueError:
            continue
    return out


def memory_facts(stat: Mapping[str, int], usage: int | None) -> dict[str, float]:
    """Flat memory facts from a normalized memory.stat (see the module docstring)."""
    out: dict[str, float] = {}
    if {"inactive_anon", "active_anon", "unevictable"} <= stat.keys():
        out["memory.usage_bytes"] = float(stat["inactive_anon"] + stat["active_anon"] + stat["unevictable"])
    for key in ("rss", "cache", "shmem", "inactive_file"):
        if key in stat:
            out[f"memory.{key}_bytes"] = float(stat[key])
    if usage is not None:
        out["memory.working_set_bytes"] = float(max(usage - stat.get("inactive_file", 0), 0))
    return out


@dataclass(frozen=True)
class CgroupOptions:
    """What to read per cgroup beyond CPU and memory usage."""

    psi: bool = True  # v2 pressure files (three extra reads per cgroup)
    throttling: bool = False  # v1 cpu.stat (v2 has it in the cpu.stat read anyway)
    memory_every: int = 1  # read memory files every N ticks, staggered by path


class _Prev:
    """Per cgroup: the previous counters, the last memory facts and its file names (built once)."""

    __slots__ = ("at", "cpu", "files", "memory", "periods", "seen", "throttled")

    def __init__(self, files: tuple[str, ...]) -> None:
        self.files = files
        self.at: float | None = None
        self.cpu: int | None = None
        self.periods: int | None = None
        self.throttled: int | None = None
        self.memory: dict[str, float] | None = None
        self.seen = -1


class CgroupMetrics:
    """Samples cgroups each tick, keeping the previous counters per path for the rates."""

    def __init__(self, fs: CgroupFS, reader: Reader, options: CgroupOptions = CgroupOptions()) -> None:
        self.fs = fs
        self.reader = reader
        self.options = options
        self._prev: dict[str, _Prev] = {}
        self._phase: dict[str, int] = {}

    def sample(self, paths: Iterable[str], now: float, tick: int) -> dict[str, dict[str, Any]]:
        """Facts per cgroup path at monotonic time ``now`` (``tick`` counts collections)."""
        out: dict[str, dict[str, Any]] = {}
        for path in paths:
            if path in out:
                continue
            prev = self._prev.get(path)
            if prev is None:
                prev = self._prev[path] = _Prev(self._files(path))
            prev.seen = tick
            facts: dict[str, Any] = {}
            if self.fs.version == 2:
                self._v2(path, prev, now, facts, self._memory_due(path, tick, prev))
            else:
                self._v1(path, prev, now, facts, self._memory_due(path, tick, prev))
            prev.at = now
            if facts:
                out[path] = facts
        if len(self._prev) > len(out):  # forget cgroups that are gone
            for path in [p for p, v in self._prev.items() if v.seen != tick]:
                del self._prev[path]
                self._phase.pop(path, None)
        return out

    def _files(self, path: str) -> tuple[str, ...]:
        fs = self.fs
        if fs.version == 2:
            return tuple(fs.file(path, n) for n in V2_FILES)
        return tuple(fs.file(path, n) for n in V1_FILES)

    def _memory_due(self, path: str, tick: int, prev: _Prev) -> bool:
        every = self.options.memory_every
        if every <= 1 or prev.memory is None:
            return True
        phase = self._phase.get(path)
        if phase is None:
            phase = self._phase[path] = zlib.crc32(path.encode()) % every
        return (tick + phase) % every == 0

    def _cpu_rate(
        self, prev: _Prev, now: float, counter: int | None, per_second: float, facts: dict[str, Any]
    ) -> None:
        if counter is not None and prev.cpu is not None and prev.at is not None:
            cores = rate(prev.cpu, counter, now - prev.at, per_second)
            if cores is not None:
                facts["cpu.usage_cores"] = cores
        prev.cpu = counter

    def _throttling(self, prev: _Prev, stat: Mapping[str, int], facts: dict[str, Any]) -> None:
        periods, throttled = stat.get("nr_periods"), stat.get("nr_throttled")
        if periods is None or throttled is None:
            return
        if prev.periods is not None and prev.throttled is not None and periods >= prev.periods:
            dp = periods - prev.periods
            facts["cpu.throttled_ratio"] = (throttled - prev.throttled) / dp if dp else 0.0
        prev.periods, prev.throttled = periods, throttled

    def _remember_memory(
        self, prev: _Prev, memory: dict[str, float] | None, due: bool, alive: bool, facts: dict[str, Any]
    ) -> None:
        """This tick's memory facts, or the last ones between staggered reads; nothing once the
        cgroup is gone (its CPU counter is unreadable) or its memory files are, so a vanished
        workload never carries stale memory."""
        if not alive or (due and memory is None):
            prev.memory = None
            return
        if memory is not None:
            prev.memory = memory
        if prev.memory:
            facts.update(prev.memory)

    def _v1(self, path: str, prev: _Prev, now: float, facts: dict[str, Any], memory_due: bool) -> None:
        read = self.reader.read
        usage_file, cpu_stat_file, stat_file, usage_in_bytes_file = prev.files
        counter = read_int(self.reader, usage_file)
        self._cpu_rate(prev, now, counter, 1e9, facts)
        if self.options.throttling:
            text = read(cpu_stat_file)
            if text is not None:
                self._throttling(
                    prev,
                    parse_stat_keys(text, _THROTTLING),
                    facts,
                )
        memory = None
        if memory_due:
            stat = read(stat_file)
            if stat is not None:
                memory = memory_facts(
                    parse_stat_keys(stat, _V1_STAT), read_int(self.reader, usage_in_bytes_file)
                )
        self._remember_memory(prev, memory, memory_due, counter is not None or memory is not None, facts)

    def _v2(self, path: str, prev: _Prev, now: float, facts: dict[str, Any], memory_due: bool) -> None:
        read = self.reader.read
        cpu_stat_file, stat_file, current_file, *psi_files = prev.files
        text = read(cpu_stat_file)
        stat = parse_stat_keys(text, _CPU_STAT) if text is not None else {}
        self._cpu_rate(prev, now, stat.get("usage_usec"), 1e6, facts)
        self._throttling(prev, stat, facts)
        memory = None
        if memory_due:
            mem_stat = read(stat_file)
            if mem_stat is not None:
                memory = memory_facts(
                    parse_stat_keys(mem_stat, _V2_STAT), read_int(self.reader, current_file)
                )
        alive = text is not None or memory is not None
        self._remember_memory(prev, memory, memory_due, alive, facts)
        if self.options.psi:
            for (resource, _), name in zip(PSI_FILES, psi_files, strict=True):
                psi_facts(f"psi.{resource}", read(name), facts)


class _Seen:
    __slots__ = ("file", "phase", "value")

    def __init__(self, file: str, phase: int) -> None:
        self.file = file
        self.phase = phase
        self.value: str | None = None


class Observer:
    """Current values of (cgroup path, file) pairs, stripped, for the planner's diff.

    Files that do not exist (cpu.idle before Linux 5.15, a cgroup that just vanished) are absent.
    With ``every`` > 1 each pair is re-read every ``every`` ticks (staggered by path) and its last
    value is reported in between; ``note`` records what qosd itself just wrote, so a write is never
    followed by a stale observation that would plan it again. The default re-reads every tick."""

    def __init__(
        self,
        fs: CgroupFS,
        reader: Reader,
        every: int = 1,
        translate: Callable[[Mapping[str, Sequence[str]]], Mapping[str, Mapping[str, str]]] | None = None,
    ) -> None:
        self.fs = fs
        self.reader = reader
        self.every = every
        # The cgroup adapter's observe(): reads the host files of logical names (cpu.shares on a v2
        # host reads cpu.weight) so the planner compares like with like. Without it: names as given.
        self.translate = translate
        self._seen: dict[tuple[str, str], _Seen] = {}

    def note(self, path: str, file: str, value: str) -> None:
        seen = self._seen.get((path, file))
        if seen is not None:
            seen.value = value.strip()

    def observe(self, pairs: Sequence[tuple[str, str]], tick: int = 0) -> dict[str, dict[str, str]]:
        known = self._seen
        read = self.reader.read
        every = max(self.every, 1)
        out: dict[str, dict[str, str]] = {}
        count = 0
        due: list[tuple[tuple[str, str], _Seen]] = []
        for pair in pairs:
            count += 1
            seen = known.get(pair)
            if seen is None:
                phase = zlib.crc32(pair[0].encode()) % every if every > 1 else 0
                seen = known[pair] = _Seen(self.fs.file(*pair), phase)
                due.append((pair, seen))
            elif every == 1 or (tick + seen.phase) % every == 0:
                due.append((pair, seen))
        if self.translate is not None and due:
            asked: dict[str, list[str]] = {}
            for (path, file), _ in due:
                asked.setdefault(path, []).append(file)
            found = self.translate(asked)
            for (path, file), seen in due:
                seen.value = found.get(path, {}).get(file)
        else:
            for _, seen in due:
                text = read(seen.file)
                seen.value = text.strip() if text is not None else None
        for pair in pairs:
            seen = known[pair]
            if seen.value is not None:
                values = out.get(pair[0])
                if values is None:
                    values = out[pair[0]] = {}
                values[pair[1]] = seen.value
        if len(known) > 2 * count + 64:  # workloads came and went: forget them
            wanted = set(pairs)
            for pair in [p for p in known if p not in wanted]:
                del known[pair]
        return out
