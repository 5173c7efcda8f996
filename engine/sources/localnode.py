"""Topology sizes of the machine qosd runs on, from sysfs and procfs.

Used to render policies for "this node" without a cluster (``qosd render`` with no --node) and by
standalone mode. The per-tick collectors live elsewhere; this reads a handful of files once.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from engine.model.node import NodeInfo
from engine.model.units import parse_cpuset


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip()
    except OSError:
        return None


def read_local_node(
    sysfs: Path = Path("/sys"), procfs: Path = Path("/proc"), name: str | None = None
) -> NodeInfo:
    cpu_root = sysfs / "devices/system/cpu"
    online = _read(cpu_root / "online")
    cpu_ids = parse_cpuset(online) if online else frozenset(range(os.cpu_count() or 1))
    sockets: set[str] = set()
    for cpu in cpu_ids:
        pkg = _read(cpu_root / f"cpu{cpu}/topology/physical_package_id")
        if pkg is not None:
            sockets.add(pkg)
    numa_nodes = list((sysfs / "devices/system/node").glob("node[0-9]*"))
    memory = 0
    meminfo = _read(procfs / "meminfo") or ""
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            memory = int(line.split()[1]) * 1024
            break
    ncpu = len(cpu_ids)
    return NodeInfo(
        name=name or os.environ.get("NODE_NAME") or socket.gethostname(),
        labels={},
        capacity={"cpu": float(ncpu), "memory": float(memory)},
        cpus=ncpu,
        numa_count=max(len(numa_nodes), 1),
        sockets=max(len(sockets), 1),
        memory=memory,
        cpu_ids=cpu_ids,
    )
