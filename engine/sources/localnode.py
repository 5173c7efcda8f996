"""The node qosd runs on, for rendering policies without a cluster (``qosd render`` with no --node).

Topology is read by engine.sources.sysfs (its one home); this only names the result.
"""

from __future__ import annotations

from pathlib import Path

from engine.model.node import NodeInfo
from engine.sources.files import FileReader
from engine.sources.sysfs import mem_total, node_info, read_topology


def read_local_node(
    sysfs: Path = Path("/sys"), procfs: Path = Path("/proc"), name: str | None = None
) -> NodeInfo:
    reader = FileReader()
    return node_info(read_topology(sysfs, reader), mem_total(procfs, reader), name)
