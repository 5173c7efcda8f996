"""A real cgroup v1 subtree for tests: created fresh, processes moved in, always removed.

Used by the adapter tests and the daemon's integration tests. Each subtree is named
``qosd-test-<pid>-<random>`` under the cpu, cpuset and memory mounts; ``real_subtree`` moves every
process it started back to the root, kills it and removes the subtree bottom-up, whatever the test
did. Skips (with the reason) when not root or when the v1 mounts are missing or read-only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from engine.cgroups.mounts import CgroupLayout, CgroupUnavailable

CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory")
# pytest node ids of the tests that got a real subtree: the real-part plugin counts them as
# real-cgroup tests whether or not they carry the marker
ENTERED: set[str] = set()
UNLIMITED_V1 = str((2**63 - 1) // os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PAGE_SIZE"))


def v1_layout() -> CgroupLayout:
    if os.geteuid() != 0:
        pytest.skip("needs root to create cgroups")
    try:
        layout = CgroupLayout.detect()
    except (CgroupUnavailable, OSError) as exc:
        pytest.skip(f"no cgroup hierarchy: {exc}")
    for c in CONTROLLERS:
        located = layout.locate(c)
        if located is None or located[0] != 1:
            pytest.skip(f"controller {c} is not on a cgroup v1 mount here ({layout.describe()})")
        probe = Path(located[1]) / f"qosd-probe-{os.getpid()}-{secrets.token_hex(3)}"
        try:
            probe.mkdir()
            probe.rmdir()
        except OSError as exc:
            pytest.skip(f"{located[1]} is not writable: {exc.strerror}")
    return layout


@dataclass
class Subtree:
    layout: CgroupLayout
    name: str
    pid: int
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def dir(self, controller: str, rel: str = "") -> Path:
        located = self.layout.locate(controller)
        assert located is not None
        return Path(located[1]) / self.name / rel if rel else Path(located[1]) / self.name

    def read(self, controller: str, rel: str, file: str) -> str:
        return (self.dir(controller, rel) / file).read_text().strip()

    def mkdir(self, rel: str, cpus: str | None = None, mems: str | None = None) -> None:
        for c in CONTROLLERS:
            if not self.dir(c, rel).is_dir():  # co-mounted controllers (cpu,cpuacct) share one
                self.dir(c, rel).mkdir()
        if cpus is not None:
            (self.dir("cpuset", rel) / "cpuset.cpus").write_text(cpus)
        if mems is not None:
            (self.dir("cpuset", rel) / "cpuset.mems").write_text(mems)

    def spawn(self, rel: str, argv: list[str], stdin: bool = False) -> subprocess.Popen[bytes]:
        """Start ``argv`` and move it into ``rel`` (with ``stdin`` a pipe, to let it go on once moved)."""
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.PIPE if stdin else None)
        self.procs.append(proc)
        for c in CONTROLLERS:
            (self.dir(c, rel) / "cgroup.procs").write_text(str(proc.pid))
        return proc


def remove_tree(top: Path, root: Path) -> None:
    if not top.exists():
        return
    dirs = [*sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)), top]
    for d in dirs:
        for pid in (d / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):  # exited meanwhile
                (root / "cgroup.procs").write_text(pid)
        for _ in range(50):
            try:
                d.rmdir()
                break
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    raise
                time.sleep(0.02)


@contextlib.contextmanager
def real_subtree(children: tuple[str, ...] = ("app",), sleeper: str | None = "app") -> Iterator[Subtree]:
    """A fresh subtree with these child cgroups; ``sleeper`` gets a real ``sleep`` process."""
    layout = v1_layout()
    ENTERED.add(os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0])
    name = f"qosd-test-{os.getpid()}-{secrets.token_hex(3)}"
    roots = {c: Path(layout.locate(c)[1]) for c in CONTROLLERS}  # type: ignore[index]
    tree = Subtree(layout, name, 0)
    try:
        cpus = (roots["cpuset"] / "cpuset.cpus").read_text().strip()
        mems = (roots["cpuset"] / "cpuset.mems").read_text().strip()
        tree.mkdir("", cpus, mems)
        for child in children:
            tree.mkdir(child, cpus, mems)
        if sleeper is not None:
            tree.pid = tree.spawn(sleeper, ["sleep", "300"]).pid
        yield tree
    finally:
        for proc in tree.procs:
            if proc.stdin is not None:
                proc.stdin.close()
            for c in CONTROLLERS:
                with contextlib.suppress(OSError):
                    (roots[c] / "cgroup.procs").write_text(str(proc.pid))
            proc.kill()
            proc.wait()
        for c in CONTROLLERS:
            remove_tree(roots[c] / name, roots[c])
    for c in CONTROLLERS:
        assert not (roots[c] / name).exists(), f"cleanup left {roots[c] / name}"


@contextlib.contextmanager
def web_and_batch() -> Iterator[Subtree]:
    """The subtree the daemon's tests run on: ``web`` (shared_cores by the default name mapping)
    and ``batch`` (reclaimed_cores), each with a sleeping process."""
    with real_subtree(children=("web", "batch"), sleeper="batch") as t:
        t.spawn("web", ["sleep", "300"])
        yield t
