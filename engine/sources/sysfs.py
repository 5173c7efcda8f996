"""The machine's topology from sysfs: logical CPUs with core, socket, NUMA node and L3; memory per NUMA.

Topology changes only with CPU hotplug or memory onlining, so it is read once at start (and again on
demand, ``TopologySource.refresh``), never per tick. This is the one home of topology reading:
``qosd render`` (engine.sources.localnode) and the node collector both use it.

Files read (all under ``<sysfs>/devices/system``):

- ``cpu/online``: the logical CPUs (offline CPUs are not schedulable, so they are not in the model);
- ``cpu/cpuN/topology/{core_id,physical_package_id,thread_siblings_list}``;
- ``cpu/cpuN/cache/indexK/{level,id,shared_cpu_list}``: the L3 cache of each CPU;
- ``node/nodeM/{cpulist,meminfo}``: NUMA membership and memory.

The model derives hyper-thread siblings from shared (socket, core). ``core_id`` is unique only within
a package and, on some multi-die parts, not even there; when (socket, core_id) disagrees with the
kernel's own ``thread_siblings_list``, cores are renumbered by their lowest sibling so the model's
siblings are always the kernel's.
"""

from __future__ import annotations

import os
import re
import socket as _socket
from collections.abc import Mapping
from pathlib import Path

from engine.model.facts import Cpu, Topology
from engine.model.node import NodeInfo
from engine.model.units import parse_cpuset
from engine.sources.files import FileReader, Reader, read_int

CPU_DIR = "devices/system/cpu"
NODE_DIR = "devices/system/node"
_CPU_NAME = re.compile(r"cpu([0-9]+)$")
_NODE_NAME = re.compile(r"node([0-9]+)$")


def _cpuset(reader: Reader, path: str) -> frozenset[int] | None:
    text = reader.read(path)
    if text is None:
        return None
    try:
        return parse_cpuset(text)
    except ValueError:
        return None


def _numbered(directory: str, pattern: re.Pattern[str]) -> list[int]:
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(int(m.group(1)) for n in names if (m := pattern.match(n)))


def online_cpus(sysfs: Path, reader: Reader) -> frozenset[int]:
    cpu_root = str(sysfs / CPU_DIR)
    online = _cpuset(reader, f"{cpu_root}/online")
    if online:
        return online
    listed = _numbered(cpu_root, _CPU_NAME)
    return frozenset(listed) if listed else frozenset(range(os.cpu_count() or 1))


def numa_layout(sysfs: Path, reader: Reader) -> tuple[dict[int, int], dict[int, float]]:
    """CPU -> NUMA node, and NUMA node -> MemTotal bytes (from nodeM/meminfo)."""
    node_root = str(sysfs / NODE_DIR)
    cpu_node: dict[int, int] = {}
    memory: dict[int, float] = {}
    for nid in _numbered(node_root, _NODE_NAME):
        for cpu in _cpuset(reader, f"{node_root}/node{nid}/cpulist") or ():
            cpu_node[cpu] = nid
        text = reader.read(f"{node_root}/node{nid}/meminfo")
        if text is not None:
            for line in text.splitlines():
                # "Node 0 MemTotal:        4942028 kB"
                parts = line.split()
                if len(parts) >= 4 and parts[2] == "MemTotal:":
                    memory[nid] = float(int(parts[3]) * 1024)
                    break
    return cpu_node, memory


def _l3_of(reader: Reader, cpu_dir: str) -> tuple[int | None, frozenset[int] | None]:
    """(cache id, shared CPUs) of the CPU's level-3 cache; the id file is missing on some kernels."""
    for index in _numbered(f"{cpu_dir}/cache", re.compile(r"index([0-9]+)$")):
        base = f"{cpu_dir}/cache/index{index}"
        if read_int(reader, f"{base}/level") != 3:
            continue
        return read_int(reader, f"{base}/id"), _cpuset(reader, f"{base}/shared_cpu_list")
    return None, None


def read_topology(sysfs: Path = Path("/sys"), reader: Reader | None = None) -> Topology:
    """The topology of this machine (see the module docstring for the files and the fallbacks)."""
    reader = reader or FileReader()
    cpu_root = str(sysfs / CPU_DIR)
    ids = sorted(online_cpus(sysfs, reader))
    cpu_node, numa_memory = numa_layout(sysfs, reader)
    cores: dict[int, tuple[int, int]] = {}
    siblings: dict[int, frozenset[int]] = {}
    l3_raw: dict[int, tuple[int | None, frozenset[int] | None]] = {}
    for cpu in ids:
        base = f"{cpu_root}/cpu{cpu}"
        core = read_int(reader, f"{base}/topology/core_id")
        pkg = read_int(reader, f"{base}/topology/physical_package_id")
        # -1 means "unknown" (some ARM and virtual machines): one socket, one core per CPU.
        cores[cpu] = (
            pkg if pkg is not None and pkg >= 0 else 0,
            core if core is not None and core >= 0 else cpu,
        )
        siblings[cpu] = _cpuset(reader, f"{base}/topology/thread_siblings_list") or frozenset({cpu})
        l3_raw[cpu] = _l3_of(reader, base)
    if not _siblings_agree(cores, siblings):
        cores = {cpu: (cores[cpu][0], min(siblings[cpu])) for cpu in ids}
    l3 = _l3_ids(l3_raw)
    cpus = tuple(Cpu(cpu, cores[cpu][1], cores[cpu][0], cpu_node.get(cpu, 0), l3.get(cpu)) for cpu in ids)
    return Topology(cpus, numa_memory)


def _siblings_agree(cores: Mapping[int, tuple[int, int]], siblings: Mapping[int, frozenset[int]]) -> bool:
    groups: dict[tuple[int, int], set[int]] = {}
    for cpu, key in cores.items():
        groups.setdefault(key, set()).add(cpu)
    online = set(cores)
    return all(groups[cores[cpu]] == (siblings[cpu] & online) for cpu in cores)


def _l3_ids(raw: Mapping[int, tuple[int | None, frozenset[int] | None]]) -> dict[int, int]:
    """L3 id per CPU: the kernel's ``id`` where present, else one number per distinct shared set."""
    out: dict[int, int] = {}
    by_set: dict[frozenset[int], int] = {}
    for cpu in sorted(raw):
        cache_id, shared = raw[cpu]
        if cache_id is not None:
            out[cpu] = cache_id
        elif shared:
            out[cpu] = by_set.setdefault(shared, len(by_set))
    return out


def mem_total(procfs: Path, reader: Reader) -> int:
    """MemTotal of /proc/meminfo in bytes (0 if unreadable)."""
    text = reader.read(str(procfs / "meminfo")) or ""
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return 0


def node_info(
    topology: Topology,
    memory: int,
    name: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> NodeInfo:
    """The template facts of this node (name, labels, capacity, topology sizes)."""
    memory = memory or int(sum(topology.numa_memory.values()))
    ncpu = len(topology.cpus)
    return NodeInfo(
        name=name or os.environ.get("NODE_NAME") or _socket.gethostname(),
        labels=dict(labels or {}),
        capacity={"cpu": float(ncpu), "memory": float(memory)},
        cpus=ncpu,
        numa_count=max(len(topology.numa_ids), 1),
        sockets=max(len(topology.sockets), 1),
        memory=memory,
        cpu_ids=frozenset(c.id for c in topology.cpus),
    )


class TopologySource:
    """The topology and node info, read once and cached; ``refresh`` re-reads after a hotplug."""

    def __init__(
        self,
        sysfs: Path = Path("/sys"),
        procfs: Path = Path("/proc"),
        reader: Reader | None = None,
        name: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        self.sysfs = sysfs
        self.procfs = procfs
        self.reader = reader or FileReader()
        self.name = name
        self.labels = dict(labels or {})
        self.topology = read_topology(sysfs, self.reader)
        self.node = node_info(self.topology, mem_total(procfs, self.reader), name, self.labels)

    def refresh(self) -> bool:
        """Re-read; True if the topology changed (callers drop state keyed by CPU or NUMA id)."""
        topology = read_topology(self.sysfs, self.reader)
        node = node_info(topology, mem_total(self.procfs, self.reader), self.name, self.labels)
        changed = topology != self.topology or node != self.node
        self.topology, self.node = topology, node
        return changed
