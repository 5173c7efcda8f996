"""Real-part tests may skip only where the machine lacks the part: a pytest plugin that enforces it.

Some tests exercise the real thing: a writable cgroup v1 hierarchy as root (``realcgroup``), the
durable_rules backend (``durable``), Linux /proc and /sys (``realproc``), forked children measured
through /proc (``fork``), this machine's cgroup mounts of any version (``cgroupmount``), the real
kubectl binary against the API-server emulator (``kubectl``, tests/kubectl.py). Each skips, with its
reason, where the machine lacks the part. That is right on a laptop and wrong in CI: if a bug in a
capability check (or a changed mount, a missing extra) made them all skip, the suite would still be
green while testing none of the real parts. So this plugin detects each part itself, independently
of the tests' own checks, and:

* fails the session (exit status 1) when a test marked with a part the machine *has* was skipped,
  naming the test and its skip reason;
* prints ``real-part tests run: cgroup v1 N, durable M, procfs K, fork F, cgroup mount C, kubectl B`` (and which
  parts are absent here).

A marker may name what else the test needs, so a machine that has the part but not that is not
held to it: ``realcgroup(cpus=2)`` (at least two CPUs), ``realcgroup(swap_off=True)`` (no active
swap). ``tests/conftest.py`` registers the plugin, so the README's test command enforces it.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

PARTS: Mapping[str, str] = {
    "realcgroup": "cgroup v1",
    "durable": "durable",
    "realproc": "procfs",
    "fork": "fork",
    "cgroupmount": "cgroup mount",
    "kubectl": "kubectl",
}
MARKERS = (
    "realcgroup(cpus=1, swap_off=False): needs root and a writable cgroup v1 hierarchy (cpu, cpuacct, "
    "cpuset, memory); a skip fails the run where the machine has them",
    "durable: needs the durable_rules backend importable; a skip fails the run where it is",
    "realproc: reads the real Linux /proc and /sys; a skip fails the run on Linux",
    "fork: runs code in a forked child measured through /proc/self; a skip fails the run where fork works",
    "cgroupmount: reads this machine's cgroup mounts (any version); a skip fails the run where one is mounted",
    "kubectl: runs the real kubectl binary (tests/kubectl.py); a skip fails the run where kubectl is on PATH",
)
V1_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory")

# (part, marker kwargs) -> None when the machine has it, else why not
Detect = Callable[[str, Mapping[str, Any]], str | None]


def _v1_mounts(mounts: str) -> dict[str, tuple[str, bool]]:
    """controller -> (mount point, mounted read-write) of the v1 hierarchies in /proc/self/mounts."""
    out: dict[str, tuple[str, bool]] = {}
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) < 4 or parts[2] != "cgroup":
            continue
        options = parts[3].split(",")
        for ctl in V1_CONTROLLERS:
            if ctl in options:
                out.setdefault(ctl, (parts[1], "rw" in options))
    return out


def cgroup_v1_missing(mounts_file: str = "/proc/self/mounts") -> str | None:
    """Why this machine has no writable cgroup v1 hierarchy for qosd's real tests, or None."""
    if not sys.platform.startswith("linux"):
        return f"not Linux ({sys.platform})"
    if os.geteuid() != 0:
        return "not root"
    try:
        mounts = _v1_mounts(Path(mounts_file).read_text())
    except OSError as exc:
        return f"cannot read {mounts_file}: {exc.strerror}"
    missing = [c for c in V1_CONTROLLERS if c not in mounts]
    if missing:
        return f"no cgroup v1 mount of {', '.join(missing)}"
    readonly = [
        f"{c} ({mounts[c][0]})"
        for c in V1_CONTROLLERS
        if not mounts[c][1] or not os.access(mounts[c][0], os.W_OK)
    ]
    if readonly:
        return f"cgroup v1 read-only: {', '.join(readonly)}"
    return None


def swap_on(swaps_file: str = "/proc/swaps") -> bool:
    try:
        return Path(swaps_file).read_text().count("\n") > 1
    except OSError:
        return False


def durable_missing() -> str | None:
    try:
        importlib.import_module("durable_rules_engine")
    except ImportError as exc:
        return f"durable_rules cannot be imported ({exc})"
    return None


def procfs_missing() -> str | None:
    if not sys.platform.startswith("linux") or not Path("/proc/stat").is_file():
        return "no Linux /proc"
    return None


def fork_missing() -> str | None:
    """Why forked, /proc-measured children (tests/childproc.py) cannot run here, or None."""
    if not hasattr(os, "fork") or "fork" not in multiprocessing.get_all_start_methods():
        return "no fork() start method"
    if not Path("/proc/self/statm").is_file():
        return "no /proc/self/statm"
    return None


def cgroup_mount_missing(mounts_file: str = "/proc/self/mounts") -> str | None:
    """Why this machine has no cgroup filesystem (v1 or v2) mounted, or None."""
    try:
        text = Path(mounts_file).read_text()
    except OSError as exc:
        return f"cannot read {mounts_file}: {exc.strerror}"
    if any(
        len(f) > 2 and f[2] in ("cgroup", "cgroup2") for f in (line.split() for line in text.splitlines())
    ):
        return None
    return "no cgroup filesystem mounted"


def kubectl_missing() -> str | None:
    """Why the real kubectl cannot run here, or None: it must be on PATH and answer
    ``kubectl version --client`` (a broken install is absent, not a test failure)."""
    binary = shutil.which("kubectl")
    if binary is None:
        return "no kubectl binary on PATH"
    try:
        done = subprocess.run([binary, "version", "--client"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{binary} does not run: {exc}"
    if done.returncode != 0:
        return f"{binary} version --client exited {done.returncode}: {done.stderr.strip()[:200]}"
    return None


def _entered_real_subtree() -> set[str]:
    """Tests that got a real cgroup subtree from tests/realcgroup.py (empty outside this repo's suite)."""
    module = sys.modules.get("tests.realcgroup")
    entered: set[str] = getattr(module, "ENTERED", set())
    return entered


def _skipped_in(report: pytest.TestReport, filename: str) -> bool:
    """Whether the skip was raised from ``filename`` (pytest reports (path, line, reason))."""
    return isinstance(report.longrepr, tuple) and Path(str(report.longrepr[0])).name == filename


def detect(part: str, needs: Mapping[str, Any]) -> str | None:
    """This machine's answer for ``part`` with the marker's extra ``needs``."""
    if part == "realcgroup":
        why = cgroup_v1_missing()
        if why is None and (os.cpu_count() or 1) < int(needs.get("cpus", 1)):
            why = f"fewer than {needs['cpus']} CPUs"
        if why is None and needs.get("swap_off") and swap_on():
            why = "swap is on"
        return why
    if part == "durable":
        return durable_missing()
    if part == "realproc":
        return procfs_missing()
    if part == "fork":
        return fork_missing()
    if part == "cgroupmount":
        return cgroup_mount_missing()
    if part == "kubectl":
        return kubectl_missing()
    raise ValueError(f"unknown real part {part!r}")


@dataclass(eq=False)  # a plugin object must hash by identity
class RealParts:
    """The plugin: counts real-part tests that ran and fails the session on a forbidden skip."""

    detect: Detect = detect
    ran: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PARTS, 0))
    needs: dict[str, list[tuple[str, dict[str, Any]]]] = field(default_factory=dict)
    forbidden: list[str] = field(default_factory=list)
    _answers: dict[tuple[str, tuple[tuple[str, Any], ...]], str | None] = field(default_factory=dict)

    def present(self, part: str, kwargs: Mapping[str, Any]) -> str | None:
        key = (part, tuple(sorted(kwargs.items())))
        if key not in self._answers:
            self._answers[key] = self.detect(part, kwargs)
        return self._answers[key]

    def pytest_configure(self, config: pytest.Config) -> None:
        for line in MARKERS:
            config.addinivalue_line("markers", line)

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            # the closest marker wins: a test's realcgroup(cpus=2) over its module's realcgroup
            closest = {part: item.get_closest_marker(part) for part in PARTS}
            wanted = [(part, dict(m.kwargs)) for part, m in closest.items() if m is not None]
            if wanted:
                self.needs[item.nodeid] = wanted

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        wanted = self.needs.get(report.nodeid)
        if report.skipped and _skipped_in(report, "realcgroup.py"):
            # tests/realcgroup.py's helpers skip only for a missing cgroup v1 part: a test that reaches
            # them is a real-cgroup test whether or not it carries the marker
            wanted = [*(wanted or []), ("realcgroup", {})]
        if report.skipped and _skipped_in(report, "kubectl.py"):
            wanted = [*(wanted or []), ("kubectl", {})]  # the same for tests/kubectl.py's fixture
        if hasattr(report, "wasxfail") or not (wanted or report.nodeid in _entered_real_subtree()):
            return
        if report.skipped:
            had = [PARTS[p] for p, kw in wanted or [] if self.present(p, kw) is None]
            if had:
                reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
                reason = reason.removeprefix("Skipped: ")
                self.forbidden.append(
                    f"{report.nodeid}: skipped ({reason}) on a machine with {', '.join(had)}"
                )
        elif report.when == "call":
            parts = {p for p, _ in wanted or []}
            if report.nodeid in _entered_real_subtree():
                parts.add("realcgroup")
            for part in parts:
                self.ran[part] += 1

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.forbidden and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        counts = ", ".join(f"{PARTS[p]} {n}" for p, n in self.ran.items())
        absent = [f"{PARTS[p]} ({why})" for p in PARTS if (why := self.present(p, {})) is not None]
        line = f"real-part tests run: {counts}"
        if absent:
            line += f"; absent here: {'; '.join(absent)}"
        terminalreporter.write_line(line)
        if self.forbidden:
            terminalreporter.write_line(
                f"FAILED: {len(self.forbidden)} real-part test(s) skipped on a machine that has the part:",
                red=True,
            )
            for entry in self.forbidden:
                terminalreporter.write_line(f"  {entry}", red=True)
