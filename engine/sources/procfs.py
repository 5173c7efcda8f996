"""Node and NUMA metrics from /proc (and the per-NUMA meminfo in sysfs), as flat facts per tick.

What each fact means, and which anchor defines it:

- ``cpu.usage_cores``: busy ticks of /proc/stat (user + nice + system + irq + softirq; steal and
  idle/iowait are not usage, guest time is already inside user/nice) between two ticks, over the
  elapsed wall time in ticks: Koordinator's node collector (``parseCPUStatUsageTicks``,
  ``GetPeriodTicks``). Per NUMA node the same sum runs over the ``cpuN`` lines of its CPUs.
- ``numa.cpu.system_usage_percent``: kernel time (system + irq + softirq) of the NUMA node's CPUs as
  a percent of those CPUs, the input of Katalyst's NUMA sys-CPU pressure plugin.
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

Usage needs two samples: the first tick after start has no ``cpu.usage_*`` facts (a condition on a
missing fact is false), unless the collector was primed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.model.facts import Topology
from engine.sources.files import Reader
from engine.sources.sysfs import NODE_DIR

PSI_RESOURCES = ("cpu", "memory", "io")
BUSY_FIELDS = (1, 2, 3, 6, 7)  # user nice system . . irq softirq (fields of a "cpu" line)
KERNEL_FIELDS = (3, 6, 7)  # system irq softirq


# ---------------------------------------------------------------------------------------- parsers


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """Cumulative ticks of one ``cpu``/``cpuN`` line of /proc/stat."""

    busy: int
    kernel: int


def _cpu_times(fields: list[str]) -> CpuTimes | None:
    if len(fields) < 8:
        return None
    try:
        busy = sum(int(fields[i]) for i in BUSY_FIELDS)
        kernel = sum(int(fields[i]) for i in KERNEL_FIELDS)
    except ValueError:
        return None
    return CpuTimes(busy, kernel)


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


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo or ``nodeN/meminfo`` -> values; ``kB`` values in bytes, counts (HugePages_*) as is.

    Node meminfo lines carry a "Node N " prefix, which is dropped."""
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


def parse_zoneinfo(text: str, page_size: int) -> list[Zone]:
    """Every zone of /proc/zoneinfo with its free pages, watermarks and inactive file pages, in bytes.

    A zone starts at "Node N, zone NAME"; its values are "key value" lines. "pages free N" (older
    kernels) counts as nr_free_pages. The "per-node stats" block inside a node's first zone holds
    node-wide counters (nr_inactive_file, without "_zone_"), which are not zone values and are
    skipped because their names differ."""
    zones: list[Zone] = []
    current: dict[str, int] | None = None
    head: tuple[int, str] | None = None

    def close() -> None:
        if current is not None and head is not None:
            zones.append(
                Zone(
                    node=head[0],
                    name=head[1],
                    free=current.get("free", 0) * page_size,
                    min=current.get("min", 0) * page_size,
                    low=current.get("low", 0) * page_size,
                    high=current.get("high", 0) * page_size,
                    inactive_file=current.get("inactive_file", 0) * page_size,
                    managed=current.get("managed", 0) * page_size,
                )
            )

    for line in text.splitlines():
        if line.startswith("Node "):
            close()
            # "Node 0, zone   Normal"
            node_part, _, zone_part = line.partition(",")
            try:
                head = (int(node_part.split()[1]), zone_part.split()[1])
            except (IndexError, ValueError):
                head, current = None, None
                continue
            current = {}
            continue
        if current is None:
            continue
        parts = line.split()
        if len(parts) < 2:
            continue
        key = parts[0]
        if key == "pages" and parts[1] == "free" and len(parts) > 2:
            key, value_text = "nr_free_pages", parts[2]
        else:
            value_text = parts[1]
        field = _ZONE_KEYS.get(key)
        if field is None or (field == "free" and "free" in current):
            continue
        try:
            current[field] = int(value_text)
        except ValueError:
            continue
    close()
    return zones


# ---------------------------------------------------------------------------------------- rates


def rate(previous: float, current: float, seconds: float, per_second: float) -> float | None:
    """A cumulative counter's growth per second in its own unit over ``per_second``, i.e. cores for
    CPU time (ticks with USER_HZ, ns with 1e9, us with 1e6). None when there is no interval or the
    counter went backwards (a CPU came back from hotplug, a cgroup was recreated at the same path)."""
    if seconds <= 0:
        return None
    delta = current - previous
    if delta < 0:
        return None
    return delta / (seconds * per_second)


# ---------------------------------------------------------------------------------------- source


class ProcSource:
    """Node and per-NUMA facts from /proc and sysfs; keeps the previous CPU counters between ticks."""

    def __init__(
        self,
        reader: Reader,
        procfs: Path = Path("/proc"),
        sysfs: Path = Path("/sys"),
        page_size: int | None = None,
        hz: int | None = None,
    ) -> None:
        self.reader = reader
        self.procfs = str(procfs)
        self.node_dir = str(sysfs / NODE_DIR)
        self.page_size = page_size or os.sysconf("SC_PAGE_SIZE")
        self.hz = hz or os.sysconf("SC_CLK_TCK")
        self._prev_at: float | None = None
        self._prev_total: CpuTimes | None = None
        self._prev_cpus: dict[int, CpuTimes] = {}

    def forget(self) -> None:
        """Drop the previous counters (after a topology change the CPU ids may mean other CPUs)."""
        self._prev_at, self._prev_total, self._prev_cpus = None, None, {}

    def sample(self, topology: Topology, now: float) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
        """(node facts, facts per NUMA id) at monotonic time ``now``."""
        node: dict[str, Any] = {}
        numa: dict[int, dict[str, Any]] = {nid: {} for nid in topology.numa_ids}
        self._cpu(topology, now, node, numa)
        self._memory(topology, node, numa)
        load = parse_loadavg(self.reader.read(f"{self.procfs}/loadavg") or "")
        if load is not None:
            node["load.load1"], node["load.load5"], node["load.load15"] = load
        for resource in PSI_RESOURCES:
            psi_facts(f"psi.{resource}", self.reader.read(f"{self.procfs}/pressure/{resource}"), node)
        return node, numa

    def _cpu(
        self, topology: Topology, now: float, node: dict[str, Any], numa: dict[int, dict[str, Any]]
    ) -> None:
        text = self.reader.read(f"{self.procfs}/stat")
        if text is None:
            return
        total, per_cpu = parse_stat(text)
        ncpu = len(topology.cpus)
        node["cpu.capacity_cores"] = float(ncpu)
        prev_at, prev_total, prev_cpus = self._prev_at, self._prev_total, self._prev_cpus
        self._prev_at, self._prev_total, self._prev_cpus = now, total, per_cpu
        if prev_at is None or total is None or prev_total is None:
            return
        elapsed = now - prev_at
        cores = rate(prev_total.busy, total.busy, elapsed, self.hz)
        if cores is not None:
            node["cpu.usage_cores"] = cores
            if ncpu:
                node["cpu.usage_percent"] = cores * 100.0 / ncpu
        for nid, facts in numa.items():
            ids = topology.cpus_of_numa(nid)
            busy = kernel = 0
            complete = bool(ids)
            for cpu in ids:
                cur, old = per_cpu.get(cpu), prev_cpus.get(cpu)
                if cur is None or old is None or cur.busy < old.busy or cur.kernel < old.kernel:
                    complete = False
                    break
                busy += cur.busy - old.busy
                kernel += cur.kernel - old.kernel
            if not complete or elapsed <= 0:
                continue
            used = busy / (elapsed * self.hz)
            facts["cpu.usage_cores"] = used
            facts["cpu.usage_percent"] = used * 100.0 / len(ids)
            facts["cpu.system_usage_percent"] = kernel / (elapsed * self.hz) * 100.0 / len(ids)

    def _memory(self, topology: Topology, node: dict[str, Any], numa: dict[int, dict[str, Any]]) -> None:
        text = self.reader.read(f"{self.procfs}/meminfo")
        if text is not None:
            node_memory_facts(parse_meminfo(text), node)
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
            info = parse_meminfo(raw) if raw is not None else {}
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
    """Koordinator's integer percent: int(used) * 100 / total with integer division."""
    return int(used) * 100 // int(total) if total else 0
