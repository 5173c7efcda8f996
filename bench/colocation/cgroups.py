"""The benchmark's own cgroup v1 subtree: create it, start a process inside it, remove it.

The scenarios need the probe and the batch job in separate cgroups *before* qosd sees them, as a
kubelet would have placed them. This is test scaffolding, not qosd's adapter: qosd must find and
manage these cgroups on its own.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory")


class BenchCgroups:
    def __init__(self, root: Path = Path("/sys/fs/cgroup"), name: str = "qosd-bench"):
        self.root = root
        self.name = name

    def dir(self, controller: str, group: str = "") -> Path:
        return self.root / controller / self.name / group if group else self.root / controller / self.name

    def create(self, groups: Sequence[str]) -> None:
        for ctrl in CONTROLLERS:
            base = self.dir(ctrl)
            base.mkdir(exist_ok=True)
            if ctrl == "cpuset":
                self._inherit_cpuset(base, base.parent)
            for g in groups:
                d = base / g
                d.mkdir(exist_ok=True)
                if ctrl == "cpuset":
                    self._inherit_cpuset(d, base)

    @staticmethod
    def _inherit_cpuset(child: Path, parent: Path) -> None:
        for f in ("cpuset.cpus", "cpuset.mems"):
            if not (child / f).read_text().strip():
                (child / f).write_text((parent / f).read_text().strip())

    def reset(self, groups: Sequence[str]) -> None:
        """Put every knob qosd may have written back to the kernel default between scenarios."""
        for g in groups:
            cpu = self.dir("cpu", g)
            for f, v in (("cpu.idle", "0"), ("cpu.shares", "1024"), ("cpu.cfs_quota_us", "-1")):
                if (cpu / f).exists():
                    (cpu / f).write_text(v)
            parent = self.dir("cpuset")
            (self.dir("cpuset", g) / "cpuset.cpus").write_text((parent / "cpuset.cpus").read_text().strip())

    def popen(self, group: str, argv: Sequence[str]) -> subprocess.Popen[str]:
        procs = [self.dir(c, group) / "cgroup.procs" for c in CONTROLLERS]

        def enter() -> None:  # runs in the child before exec: the whole process tree starts inside
            pid = str(os.getpid())
            for p in procs:
                p.write_text(pid)

        return subprocess.Popen(list(argv), stdout=subprocess.PIPE, text=True, preexec_fn=enter)

    def remove(self) -> None:
        """Move stragglers to the root and remove the subtree (children first)."""
        for ctrl in CONTROLLERS:
            base = self.dir(ctrl)
            if not base.exists():
                continue
            for d in [*sorted((p for p in base.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)), base]:
                for pid in (d / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):  # exited meanwhile
                        (self.root / ctrl / "cgroup.procs").write_text(pid)
                for _ in range(50):
                    try:
                        d.rmdir()
                        break
                    except OSError:
                        time.sleep(0.05)
