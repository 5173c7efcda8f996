"""Which cgroup hierarchy is mounted where: v1, hybrid or v2, from the mount table.

- **v1**: one ``cgroup`` mount per controller (or per co-mounted set, ``cpu,cpuacct``) under the
  root, no ``cgroup2``.
- **hybrid**: v1 controller mounts plus a ``cgroup2`` mount under the root (``/sys/fs/cgroup/unified``)
  that usually carries no controllers, only PSI and process membership. Controllers stay v1.
- **v2** (unified): ``cgroup2`` mounted at the root itself; its ``cgroup.controllers`` lists them.

The decision is made per controller, not per node: a controller is v1 where a v1 mount carries it,
else v2 where the unified mount offers it. That is what the kernel does (a controller is bound to
one hierarchy) and it covers the rare hybrid host that moved one controller to cgroup2. Only mounts
at or below the configured root count, so a DaemonSet that mounts the host's cgroupfs at
``/host-cgroup`` sees the host and not its own container.

This is qosd's one v1/v2 detector: ``qosd run`` detects once and hands the same layout to the cgroup
adapter (writes) and the node collector (usage, memory and observed values: ``dir``, ``file``), so
reads and writes never disagree about where a controller is.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from engine.cgroups.files import controller_of

Mode = Literal["v1", "hybrid", "v2"]

V1_CONTROLLERS = frozenset(
    {
        "cpu",
        "cpuacct",
        "cpuset",
        "memory",
        "blkio",
        "devices",
        "freezer",
        "net_cls",
        "net_prio",
        "perf_event",
        "hugetlb",
        "pids",
        "rdma",
        "misc",
    }
)
# Where per-cgroup membership files (tasks, cgroup.procs) are read on v1: any hierarchy lists the
# same processes, these are the ones every Kubernetes node mounts.
CORE_PREFERENCE = ("cpu", "cpuacct", "memory", "cpuset", "pids")
_OCTAL = re.compile(r"\\([0-7]{3})")


class CgroupUnavailable(RuntimeError):
    """No cgroup filesystem under the configured root."""


@dataclass(frozen=True)
class Mount:
    point: str
    fstype: str
    super_options: frozenset[str]


def _unescape(text: str) -> str:
    """The kernel writes space, tab, newline and backslash in mount points as octal escapes."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), text)


def parse_mountinfo(text: str) -> list[Mount]:
    """Lines of ``/proc/self/mountinfo``: ``id parent maj:min root point opts [optional...] - fstype
    source super_opts``. The optional fields vary in number, hence the search for ``-``."""
    out: list[Mount] = []
    for line in text.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        sep = fields.index("-")
        if sep < 5 or len(fields) < sep + 3:
            continue
        out.append(Mount(_unescape(fields[4]), fields[sep + 1], frozenset(fields[sep + 3].split(","))))
    return out


def _under(point: str, root: str) -> bool:
    return point == root or point.startswith(root.rstrip("/") + "/")


@dataclass(frozen=True)
class CgroupLayout:
    """The controller mounts under one root. ``v1`` maps a controller to its mount directory;
    ``unified`` is the cgroup2 mount, if any, with the controllers it offers."""

    root: str
    mode: Mode
    v1: Mapping[str, str] = field(default_factory=dict)
    unified: str | None = None
    unified_controllers: frozenset[str] = frozenset()

    def locate(self, controller: str) -> tuple[int, str] | None:
        """(cgroup version, mount directory) holding ``controller``'s files; ``""`` means the core
        files every hierarchy has (``cgroup.procs``, ``tasks``). None: not mounted here."""
        if not controller:
            if self.mode == "v2" and self.unified is not None:
                return 2, self.unified
            for name in CORE_PREFERENCE:
                if name in self.v1:
                    return 1, self.v1[name]
            if self.v1:
                return 1, self.v1[sorted(self.v1)[0]]
            return None
        if controller in self.v1:
            return 1, self.v1[controller]
        if self.unified is not None and controller in self.unified_controllers:
            return 2, self.unified
        return None

    @property
    def version(self) -> int:
        """The cgroup version the node's metrics are read in: 2 on a unified host; 1 on v1 and hybrid
        hosts, where the controllers (and their statistics) stay on v1."""
        return 2 if self.mode == "v2" else 1

    def dir(self, path: str, controller: str = "") -> str:
        """The directory of cgroup ``path`` (relative to the root) in the hierarchy holding
        ``controller``; a controller mounted nowhere falls back to the core hierarchy, where the
        cgroup's files of that controller are then simply absent."""
        located = self.locate(controller) or self.locate("")
        base = located[1] if located is not None else self.root
        rel = path.strip("/")
        return f"{base}/{rel}" if rel else base

    def file(self, path: str, name: str) -> str:
        """The host file ``name`` (``cpuacct.usage``, ``memory.stat``, ``cgroup.procs``) of ``path``."""
        return f"{self.dir(path, controller_of(name))}/{name}"

    def relative(self, absolute: str) -> str | None:
        """The cgroup path of a directory on disk, or None if it is outside every hierarchy."""
        text = absolute.rstrip("/")
        mounts = {*self.v1.values(), *([self.unified] if self.unified else [])}
        for base in sorted(mounts, key=len, reverse=True):
            if text == base:
                return ""
            if text.startswith(base + "/"):
                return text[len(base) + 1 :]
        return None

    def describe(self) -> str:
        parts = [f"{c}={p}" for c, p in sorted(self.v1.items())]
        if self.unified:
            offered = " ".join(sorted(self.unified_controllers)) or "no controllers"
            parts.append(f"cgroup2={self.unified} ({offered})")
        return f"cgroup {self.mode} under {self.root}: " + ", ".join(parts)

    # ---------------------------------------------------------------- constructors

    @classmethod
    def from_mounts(
        cls,
        root: str,
        mounts: Iterable[Mount],
        unified_controllers: Iterable[str] | None = None,
    ) -> CgroupLayout:
        """The layout under ``root``. ``unified_controllers`` None: read the cgroup2 mount's
        ``cgroup.controllers``."""
        root = os.path.realpath(root)
        v1: dict[str, str] = {}
        unified: str | None = None
        for m in mounts:
            point = os.path.realpath(m.point) if os.path.exists(m.point) else m.point
            if not _under(point, root):
                continue
            if m.fstype == "cgroup2":
                # The one at the root wins over a nested one (a v2 host with a stray mount below).
                if unified is None or point == root:
                    unified = point
            elif m.fstype == "cgroup":
                for ctrl in m.super_options & V1_CONTROLLERS:
                    v1.setdefault(ctrl, point)
        if unified is not None and unified == root:
            mode: Mode = "v2"
            v1 = {}  # nothing can be mounted inside a cgroup2 root but cgroup2 itself
        elif v1:
            mode = "hybrid" if unified is not None else "v1"
        else:
            raise CgroupUnavailable(
                f"no cgroup filesystem is mounted at or under {root}; mount the host's cgroupfs there "
                "or pass the right --cgroup-root"
            )
        if unified is None:
            offered: frozenset[str] = frozenset()
        elif unified_controllers is not None:
            offered = frozenset(unified_controllers)
        else:
            offered = _read_controllers(unified)
        return cls(root, mode, MappingProxyType(v1), unified, offered)

    @classmethod
    def detect(
        cls, root: str | Path = "/sys/fs/cgroup", mountinfo: str | Path = "/proc/self/mountinfo"
    ) -> CgroupLayout:
        text = Path(mountinfo).read_text(encoding="utf-8", errors="replace")
        return cls.from_mounts(str(root), parse_mountinfo(text))

    @classmethod
    def unified_tree(cls, root: str | Path, controllers: Iterable[str] | None = None) -> CgroupLayout:
        """A v2 layout over a directory (a temp tree in tests, or a known cgroup2 mount), without
        consulting the mount table. Controllers: as given, else its ``cgroup.controllers``."""
        real = os.path.realpath(root)
        offered = frozenset(controllers) if controllers is not None else _read_controllers(real)
        return cls(real, "v2", MappingProxyType({}), real, offered)

    @classmethod
    def v1_tree(cls, root: str | Path, controllers: Iterable[str]) -> CgroupLayout:
        """A v1 layout with each controller at ``root/<controller>``, without the mount table."""
        real = os.path.realpath(root)
        return cls(real, "v1", MappingProxyType({c: os.path.join(real, c) for c in controllers}))


def _read_controllers(mount: str) -> frozenset[str]:
    try:
        with open(os.path.join(mount, "cgroup.controllers"), encoding="ascii") as fh:
            return frozenset(fh.read().split())
    except OSError:
        return frozenset()
