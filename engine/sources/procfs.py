"""Node and NUMA metrics from /proc (and the per-NUMA meminfo in sysfs), as flat facts per tick.

What each fact means, and which anchor defines it:

- ``cpu.usage_cores``: busy ticks of /proc/stat (user + nice + system + irq + softirq; steal and
  idle/iowait are not usage, guest time is already inside user/nice) between two samples, as a share
  of all ticks the kernel counted on those CPUs in the same interval (busy + idle + iowait + steal),
  times the number of CPUs. The busy fields are Koordinator's (``parseCPUStatUsageTicks``); the
  denominator is the kernel's own elapsed ticks rather than Koordinator's wall time
  (``GetPeriodTicks``), as procps ``top`` does: the wall clock and the file are read at different
  instants, and under load a reader descheduled between the two stretches one interval and shrinks
  the other, which is how a 50 ms window once read 2.13 cores on 2 CPUs. With the kernel's own
  ticks busy <= all and the usage cannot pass the CPU count. Per NUMA node the same sums run over the
  ``cpuN`` lines of its CPUs.
- ``numa.cpu.system_usage_percent``: kernel time (system + irq + softirq) of the NUMA node's CPUs as
  a percent of those CPUs' ticks, the input of Katalyst's NUMA sys-CPU pressure plugin.
- ``memory.usage_bytes``: MemTotal - MemAvailable, Koordinator's node usage without page cache
  (``MemInfo.MemUsageBytes``); per NUMA node MemTotal - (MemFree + Active(file) + Inactive(file) +
  SReclaimable), because node meminfo has no MemAvailable (``MemInfo.NUMAMemUsageBytes``).
  ``usage_percent`` is floored to an integer, as Koordinator compares it.
- ``numa.memory.{free,watermark_min,watermark_low,watermark_high,inactive_file}_bytes``: the
  *Normal* zone of /proc/zoneinfo (nr_free_pages, min, low, high, nr_zone_inactive_file) times the
  page size, exactly what Katalyst's NUMA memory pressure plugin compares (``GetNormalZoneInfo``).
  A NUMA node without a Normal zone (or a kernel without zoneinfo) reports the node meminfo's
  MemFree and Inactive(file) and no watermarks, which sends the strategy down Katalyst's
  "metric fallback" path. The node-wide ``memory.watermark_{min,low}_bytes`` sum *all* zones, the
  scope of /proc/meminfo's MemFree they are compared with.
- ``memory.watermark_scale_factor`` from /proc/sys/vm (Katalyst's fallback watermark and system
  memory pressure threshold scale with it);
- ``load.load{1,5,15}`` from /proc/loadavg; ``psi.{cpu,memory,io}.{some,full}.{avg10,avg60,avg300,
  total}`` from /proc/pressure (absent when the kernel runs without PSI).

Usage needs two samples at least ``MIN_WINDOW_TICKS`` per CPU apart (USER_HZ is 100, so 0.1 s):
the busy fields advance a whole tick at a time, so over 5 ticks one tick more or less is 20 % of a
core, over 100 ticks (the daemon's 1 s) 1 %. A sample that comes sooner keeps the earlier sample as
the baseline and reports the last usage computed over a full window, as staggered memory facts stand
between reads; the first tick after start has no ``cpu.usage_*`` facts (a condition on a missing
fact is false) unless the collector was primed at least that long before. Every usage is clamped to
[0, CPUs]: with the kernel's ticks the bound already holds, the clamp only keeps a kernel whose idle
counter steps (a NO_HZ iowait quirk) from reporting an impossible figure. Memory percents are
floored integers of used <= total, so within [0, 100].
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.model.facts import Topology
from engine.sources.files import Reader
from engine.sources.sysfs import NODE_DIR

PSI_RESOURCES = ("cpu", "memory", "io")
BUSY_FIELDS = (1, 2, 3, 6, 7)  # user nice system . . irq softirq (fields of a "cpu" line)
KERNEL_FIELDS = (3, 6, 7)  # system irq softirq
ALL_FIELDS = (1, 2, 3, 4, 5, 6, 7, 8)  # ... idle iowait ... steal; guest is already in user/nice
MIN_WINDOW_TICKS = 10  # per CPU; see the module docstring
MIN_WINDOW_SECONDS = 0.1  # the same window for counters read against the clock (cgroups)


# ---------------------------------------------------------------------------------------- parsers


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """Cumulative ticks of one ``cpu``/``cpuN`` line of /proc/stat: busy, kernel, and all of them
    (busy + idle + iowait + steal: the time the kernel accounted on those CPUs)."""

    busy: int
    kernel: int
    total: int

    def follows(self, earlier: CpuTimes) -> bool:
        """No counter went backwards since ``earlier`` (else the CPU was re-onlined: no rate)."""
        return self.busy >= earlier.busy and self.kernel >= earlier.kernel and self.total >= earlier.total


def _cpu_times(fields: list[str]) -> CpuTimes | None:
    if len(fields) < 8:
        return None
    try:
        busy = sum(int(fields[i]) for i in BUSY_FIELDS)
        kernel = sum(int(fields[i]) for i in KERNEL_FIELDS)
        total = sum(int(fields[i]) for i in ALL_FIELDS if i < len(fields))  # steal since 2.6.11
    except ValueError:
        return None
    return CpuTimes(busy, kernel, total)


def parse_stat(text: str) -> tuple[CpuTimes | None, dict[int, CpuTimes]]:
    """The aggregate ``cpu`` line and each ``cpuN`` line of /proc/stat (which come first in the file)."""
    total: CpuTimes | None = None
    per_cpu: dict[int, CpuTimes] = {}
    for line in text.splitlines():
        if not line.startswith("cpu"):
            break  # intr, ctxt, ... follow the cpu lines
        fields = line.split()
        times = _cpu_times(fields)
        if times is None:
            continue
        name = fields[0]
        if name == "cpu":
            total = times
        elif name[3:].isdigit():
            per_cpu[int(name[3:])] = times
    return total, per_cpu


def parse_meminfo(text: str, keys: Iterable[str] | None = None) -> dict[str, int]:
    """/proc/meminfo or ``nodeN/meminfo`` -> values; ``kB`` values in bytes, counts (HugePages_*) as is.

    Node meminfo lines carry a "Node N " prefix, which is dropped. With ``keys``, only those lines
    are looked up (``str.find``, no loop over the file's 50 lines): the collector reads two such
    files every tick and wants a handful of values of each."""
    if keys is not None:
        return _meminfo_values(text, keys)
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        if not sep:
            continue
        if key.startswith("Node "):
            key = key.split(None, 2)[2]
        parts = rest.split()
        if not parts:
            continue
        try:
            value = int(parts[0])
        except ValueError:
            continue
        out[key] = value * 1024 if len(parts) > 1 and parts[1] == "kB" else value
    return out


def line_rest(text: str, needle: str, after: str = "\n") -> str | None:
    """The rest of the first line where ``needle`` starts the line (or follows a character of
    ``after``), found with ``str.find`` instead of splitting every line: these files run to dozens
    of lines of which qosd wants a few, every tick. None when there is no such line."""
    i = text.find(needle)
    while i > 0 and text[i - 1] not in after:
        i = text.find(needle, i + 1)
    if i < 0:
        return None
    start = i + len(needle)
    end = text.find("\n", start)
    return text[start:end] if end >= 0 else text[start:]


def _meminfo_values(text: str, keys: Iterable[str]) -> dict[str, int]:
    """``parse_meminfo`` of the lines of ``keys`` only: a key counts where it starts a line or follows
    the "Node N " prefix (so "Cached" is not found inside "SwapCached")."""
    out: dict[str, int] = {}
    for key in keys:
        parts = (line_rest(text, key + ":", "\n ") or "").split()
        if parts and parts[0].isdigit():
            out[key] = int(parts[0]) * 1024 if len(parts) > 1 and parts[1] == "kB" else int(parts[0])
    return out


# The meminfo values the node and NUMA facts read (node_memory_facts, numa_memory_facts).
NODE_MEMINFO = ("MemTotal", "MemFree", "MemAvailable", "AnonPages", "Cached", "Buffers")
NUMA_MEMINFO = ("MemTotal", "MemFree", "Active(file)", "Inactive(file)", "SReclaimable")


def parse_loadavg(text: str) -> tuple[float, float, float] | None:
    parts = text.split()
    try:
        return float(parts[0]), float(parts[1]), float(parts[2])
    except (IndexError, ValueError):
        return None


def parse_psi(text: str) -> dict[str, dict[str, float]]:
    """A PSI file ("some avg10=0.39 avg60=0.25 avg300=0.17 total=220079930", "full ...") -> values.

    avg* are percents of wall time stalled; total is cumulative microseconds."""
    out: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind not in ("some", "full"):
            continue
        values: dict[str, float] = {}
        for item in rest.split():
            key, eq, value = item.partition("=")
            if eq:
                try:
                    values[key] = float(value)
                except ValueError:
                    continue
        out[kind] = values
    return out


def psi_facts(prefix: str, text: str | None, into: dict[str, Any]) -> None:
    """``<prefix>.some.avg10`` ... into ``into`` (nothing when the file is absent)."""
    if text is None:
        return
    for kind, values in parse_psi(text).items():
        for key, value in values.items():
            into[f"{prefix}.{kind}.{key}"] = value


@dataclass(frozen=True, slots=True)
class Zone:
    """One zone of /proc/zoneinfo, in bytes."""

    node: int
    name: str
    free: int
    min: int
    low: int
    high: int
    inactive_file: int
    managed: int


_ZONE_KEYS = {
    "nr_free_pages": "free",
    "min": "min",
    "low": "low",
    "high": "high",
    "nr_zone_inactive_file": "inactive_file",
    "managed": "managed",
}


# A zone's head, or one of the zone lines qosd reads (``_ZONE_KEYS``, and "pages free N" of older
# kernels): /proc/zoneinfo runs to thousands of lines on a big machine (per-CPU pagesets, dozens of
# counters per zone), read every tick. Each match starts at a newline, a literal the regex engine
# scans for in C, so the lines qosd does not read cost no Python (2.6x the line loop here).
_ZONE_LINE = re.compile(
    r"\n(?:Node[ \t]+(\d+),[ \t]*zone[ \t]+(\S+)"
    r"|[ \t]*(pages[ \t]+free|nr_free_pages|min|low|high|nr_zone_inactive_file|managed)[ \t]+(\d+)(?=\s|$))"
)


def parse_zoneinfo(text: str, page_size: int) -> list[Zone]:
    """Every zone of /proc/zoneinfo with its free pages, watermarks and inactive file pages, in bytes.

    A zone starts at "Node N, zone NAME"; its values are "key value" lines. "pages free N" (older
    kernels) counts as nr_free_pages; the first of the two in a zone counts. The "per-node stats"
    block inside a node's first zone holds node-wide counters (nr_inactive_file, without "_zone_"),
    which are not zone values and are skipped because their names differ."""
    zones: list[Zone] = []
    current: dict[str, int] | None = None
    head: tuple[int, str] | None = None
    for node, zone, key, value in _ZONE_LINE.findall("\n" + text):
        if node:
            if current is not None and head is not None:
                zones.append(_zone(head, current, page_size))
            head, current = (int(node), zone), {}
            continue
        if current is None:
            continue
        field = "free" if key.startswith("pages") else _ZONE_KEYS[key]
        if field != "free" or "free" not in current:  # the first of "pages free" and nr_free_pages
            current[field] = int(value)
    if current is not None and head is not None:
        zones.append(_zone(head, current, page_size))
    return zones


def _zone(head: tuple[int, str], values: Mapping[str, int], page_size: int) -> Zone:
    return Zone(
        node=head[0],
        name=head[1],
        free=values.get("free", 0) * page_size,
        min=values.get("min", 0) * page_size,
        low=values.get("low", 0) * page_size,
        high=values.get("high", 0) * page_size,
        inactive_file=values.get("inactive_file", 0) * page_size,
        managed=values.get("managed", 0) * page_size,
    )


# ---------------------------------------------------------------------------------------- rates


def rate(
    previous: float, current: float, seconds: float, per_second: float, limit: float | None = None
) -> float | None:
    """A cumulative counter's growth per second in its own unit over ``per_second``, i.e. cores for
    CPU time (ticks with USER_HZ, ns with 1e9, us with 1e6). None when there is no interval or the
    counter went backwards (a CPU came back from hotplug, a cgroup was recreated at the same path).

    ``limit`` is what the counter can grow by per second at most (the CPUs that could run it): a
    figure above it is measurement skew (the clock and the counter are read at different instants,
    and a reader descheduled in between stretches one and not the other), reported as ``limit``."""
    if seconds <= 0:
        return None
    delta = current - previous
    if delta < 0:
        return None
    value = delta / (seconds * per_second)
    return min(value, limit) if limit is not None else value


def share(part: int, whole: int, cpus: int) -> float:
    """``part`` of ``whole`` ticks on ``cpus`` CPUs, in cores, within [0, cpus] (see the module
    docstring for why the clamp is there)."""
    return min(max(part / whole * cpus, 0.0), float(cpus)) if whole > 0 else 0.0


# ---------------------------------------------------------------------------------------- source


class ProcSource:
    """Node and per-NUMA facts from /proc and sysfs; keeps the previous CPU counters between ticks."""

    def __init__(
        self,
        reader: Reader,
        procfs: Path = Path("/proc"),
        sysfs: Path = Path("/sys"),
        page_size: int | None = None,
    ) -> None:
        self.reader = reader
        self.procfs = str(procfs)
        self.node_dir = str(sysfs / NODE_DIR)
        self.page_size = page_size or os.sysconf("SC_PAGE_SIZE")
        self._prev_total: CpuTimes | None = None  # the baseline sample of the next usage
        self._prev_cpus: dict[int, CpuTimes] = {}
        self._last_node: dict[str, float] = {}  # the usage of the last full window
        self._last_numa: dict[int, dict[str, float]] = {}

    def forget(self) -> None:
        """Drop the previous counters (after a topology change the CPU ids may mean other CPUs)."""
        self._prev_total, self._prev_cpus, self._last_node, self._last_numa = None, {}, {}, {}

    def sample(self, topology: Topology) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
        """(node facts, facts per NUMA id) now. No clock is taken: CPU usage is measured in the
        kernel's own ticks (see the module docstring)."""
        node: dict[str, Any] = {}
        numa: dict[int, dict[str, Any]] = {nid: {} for nid in topology.numa_ids}
        self._cpu(topology, node, numa)
        self._memory(topology, node, numa)
        load = parse_loadavg(self.reader.read(f"{self.procfs}/loadavg") or "")
        if load is not None:
            node["load.load1"], node["load.load5"], node["load.load15"] = load
        for resource in PSI_RESOURCES:
            psi_facts(f"psi.{resource}", self.reader.read(f"{self.procfs}/pressure/{resource}"), node)
        return node, numa

    def _cpu(self, topology: Topology, node: dict[str, Any], numa: dict[int, dict[str, Any]]) -> None:
        text = self.reader.read(f"{self.procfs}/stat")
        if text is None:
            return
        total, per_cpu = parse_stat(text)
        ncpu = len(topology.cpus)
        node["cpu.capacity_cores"] = float(ncpu)
        prev_total, prev_cpus = self._prev_total, self._prev_cpus
        if total is None:
            return
        if prev_total is None or not total.follows(prev_total) or not ncpu:
            # no baseline yet, or the counters restarted: this sample is the new baseline
            self._prev_total, self._prev_cpus, self._last_node, self._last_numa = total, per_cpu, {}, {}
            return
        window = total.total - prev_total.total
        if window < MIN_WINDOW_TICKS * ncpu:
            # Too short to measure: keep the baseline, the last full window's usage stands.
            node.update(self._last_node)
            for nid, facts in numa.items():
                facts.update(self._last_numa.get(nid, {}))
            return
        self._prev_total, self._prev_cpus = total, per_cpu
        cores = share(total.busy - prev_total.busy, window, ncpu)
        self._last_node = {"cpu.usage_cores": cores, "cpu.usage_percent": cores * 100.0 / ncpu}
        node.update(self._last_node)
        self._last_numa = {}
        for nid, facts in numa.items():
            ids = topology.cpus_of_numa(nid)
            busy = kernel = ticks = 0
            complete = bool(ids)
            for cpu in ids:
                cur, old = per_cpu.get(cpu), prev_cpus.get(cpu)
                if cur is None or old is None or not cur.follows(old):
                    complete = False
                    break
                busy += cur.busy - old.busy
                kernel += cur.kernel - old.kernel
                ticks += cur.total - old.total
            if not complete or ticks <= 0:
                continue
            used = share(busy, ticks, len(ids))
            last = self._last_numa[nid] = {
                "cpu.usage_cores": used,
                "cpu.usage_percent": used * 100.0 / len(ids),
                "cpu.system_usage_percent": share(kernel, ticks, len(ids)) * 100.0 / len(ids),
            }
            facts.update(last)

    def _memory(self, topology: Topology, node: dict[str, Any], numa: dict[int, dict[str, Any]]) -> None:
        text = self.reader.read(f"{self.procfs}/meminfo")
        if text is not None:
            node_memory_facts(parse_meminfo(text, NODE_MEMINFO), node)
        scale = self.reader.read(f"{self.procfs}/sys/vm/watermark_scale_factor")
        if scale is not None and scale.strip().isdigit():
            node["memory.watermark_scale_factor"] = float(scale)
        zones = parse_zoneinfo(self.reader.read(f"{self.procfs}/zoneinfo") or "", self.page_size)
        if zones:
            node["memory.watermark_min_bytes"] = float(sum(z.min for z in zones))
            node["memory.watermark_low_bytes"] = float(sum(z.low for z in zones))
        normal = {z.node: z for z in zones if z.name == "Normal"}
        for nid, facts in numa.items():
            raw = self.reader.read(f"{self.node_dir}/node{nid}/meminfo")
            info = parse_meminfo(raw, NUMA_MEMINFO) if raw is not None else {}
            numa_memory_facts(info, normal.get(nid), topology.numa_memory.get(nid), facts)


def node_memory_facts(info: Mapping[str, int], out: dict[str, Any]) -> None:
    total = info.get("MemTotal")
    if not total:
        return
    out["memory.capacity_bytes"] = float(total)
    if "MemFree" in info:
        out["memory.free_bytes"] = float(info["MemFree"])
    if "AnonPages" in info:
        out["memory.rss_bytes"] = float(info["AnonPages"])
    if "Cached" in info:
        out["memory.cache_bytes"] = float(info["Cached"] + info.get("Buffers", 0))
    available = info.get("MemAvailable")
    if available is not None:
        out["memory.available_bytes"] = float(available)
        used = max(total - available, 0)
        out["memory.usage_bytes"] = float(used)
        out["memory.usage_percent"] = floor_percent(used, total)


def numa_memory_facts(
    info: Mapping[str, int], zone: Zone | None, topology_total: float | None, out: dict[str, Any]
) -> None:
    total = info.get("MemTotal") or (int(topology_total) if topology_total else 0)
    if total:
        out["memory.total_bytes"] = float(total)
    if "MemFree" in info and total:
        available = (
            info["MemFree"]
            + info.get("Active(file)", 0)
            + info.get("Inactive(file)", 0)
            + info.get("SReclaimable", 0)
        )
        used = max(total - available, 0)
        out["memory.usage_bytes"] = float(used)
        out["memory.usage_percent"] = floor_percent(used, total)
    if zone is not None:
        out["memory.free_bytes"] = float(zone.free)
        out["memory.watermark_min_bytes"] = float(zone.min)
        out["memory.watermark_low_bytes"] = float(zone.low)
        out["memory.watermark_high_bytes"] = float(zone.high)
        out["memory.inactive_file_bytes"] = float(zone.inactive_file)
    else:
        if "MemFree" in info:
            out["memory.free_bytes"] = float(info["MemFree"])
        if "Inactive(file)" in info:
            out["memory.inactive_file_bytes"] = float(info["Inactive(file)"])


def floor_percent(used: float, total: float) -> int:
    """Koordinator's integer percent: int(used) * 100 / total with integer division, within [0, 100]
    (callers pass used = max(total - available, 0), so the bound holds; the clamp states it)."""
    return min(max(int(used) * 100 // int(total), 0), 100) if total > 0 else 0
