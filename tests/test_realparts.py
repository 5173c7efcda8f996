"""The real-part plugin (tests/realparts.py) on a tiny suite run in a subprocess: a marked test that
skips fails the run exactly when the machine has the part (and what else its marker asks), and the
run prints how many real-part tests ran."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.realparts import PARTS, _v1_mounts, cgroup_mount_missing

REPO = Path(__file__).resolve().parent.parent

CONFTEST = """\
import os

from tests.realparts import RealParts

HAVE = {p for p in os.environ["FAKE_PARTS"].split(",") if p}
CPUS = int(os.environ["FAKE_CPUS"])


def detect(part, needs):
    if part not in HAVE:
        return "absent on this pretend machine"
    if CPUS < int(needs.get("cpus", 1)):
        return f"fewer than {needs['cpus']} CPUs"
    return None


def pytest_configure(config):
    config.pluginmanager.register(RealParts(detect=detect), "qosd-real-parts")
"""

SUITE = """\
import pytest


@pytest.mark.realcgroup
def test_cgroup_skips_in_the_call():
    pytest.skip("no cgroup v1 here")


@pytest.mark.realcgroup
@pytest.mark.skipif(True, reason="skipif at setup")
def test_cgroup_skips_at_setup():
    pass


@pytest.mark.realcgroup
def test_cgroup_runs():
    pass


@pytest.mark.realcgroup(cpus=2)
def test_needs_two_cpus():
    pytest.skip("needs two CPUs")


@pytest.mark.durable
def test_durable_skips():
    pytest.skip("durable_rules cannot be imported")


@pytest.mark.durable
@pytest.mark.realcgroup
def test_both_run():
    pass


def test_unmarked_skip_is_not_the_plugins_business():
    pytest.skip("unrelated")


def test_unmarked_but_skipped_by_the_cgroup_helpers():
    from realcgroup import need_cgroup_v1

    need_cgroup_v1()


@pytest.mark.realcgroup
@pytest.mark.xfail(reason="known", strict=True)
def test_expected_failure():
    assert False


@pytest.mark.kubectl
def test_kubectl_skips():
    pytest.skip("no kubectl binary on PATH")


def test_unmarked_but_skipped_by_the_kubectl_harness():
    from kubectl import need_kubectl

    need_kubectl()
"""


HELPERS = """\
import pytest


def need_cgroup_v1():
    pytest.skip("no cgroup v1 here")
"""


KUBECTL_HELPERS = """\
import pytest


def need_kubectl():
    pytest.skip("the real kubectl is needed: no kubectl binary on PATH")
"""


def run_suite(tmp_path: Path, parts: str, cpus: int) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "realcgroup.py").write_text(HELPERS)  # a skip from here is a real-cgroup skip
    (tmp_path / "kubectl.py").write_text(KUBECTL_HELPERS)  # ... and from here a kubectl skip
    (tmp_path / "test_tiny.py").write_text(SUITE)
    env = {**os.environ, "PYTHONPATH": str(REPO), "FAKE_PARTS": parts, "FAKE_CPUS": str(cpus)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize(
    ("parts", "cpus", "code", "forbidden"),
    [
        # a machine without the parts: every skip is legitimate
        ("", 8, 0, []),
        # cgroup v1 present: both cgroup skips fail the run; the 2-CPU test is held to it on 2 CPUs...
        # (a test skipped by the cgroup helpers counts without a marker)
        ("realcgroup", 2, 1, ["test_cgroup_skips_in_the_call", "test_cgroup_skips_at_setup", "test_needs_two_cpus", "test_unmarked_but_skipped_by_the_cgroup_helpers"]),
        # ...and not on one
        ("realcgroup", 1, 1, ["test_cgroup_skips_in_the_call", "test_cgroup_skips_at_setup", "test_unmarked_but_skipped_by_the_cgroup_helpers"]),
        ("durable", 8, 1, ["test_durable_skips"]),
        ("realcgroup,durable", 1, 1, ["test_cgroup_skips_in_the_call", "test_cgroup_skips_at_setup", "test_unmarked_but_skipped_by_the_cgroup_helpers", "test_durable_skips"]),
        # kubectl on PATH: a kubectl test that skips (marked, or through the harness) fails the run
        ("kubectl", 8, 1, ["test_kubectl_skips", "test_unmarked_but_skipped_by_the_kubectl_harness"]),
    ],
    ids=["none", "cgroup-2cpus", "cgroup-1cpu", "durable", "both", "kubectl"],
)
def test_a_real_part_skip_fails_only_where_the_part_is_present(
    tmp_path: Path, parts: str, cpus: int, code: int, forbidden: list[str]
) -> None:
    result = run_suite(tmp_path, parts, cpus)
    out = result.stdout
    assert result.returncode == code, out + result.stderr
    assert "real-part tests run: cgroup v1 2, durable 1, procfs 0, fork 0, cgroup mount 0, kubectl 0" in out, out
    reported = sorted(
        line.split("::", 1)[1].split(":", 1)[0]
        for line in out.splitlines()
        if line.startswith("  test_tiny.py::")
    )
    assert reported == sorted(forbidden), out
    if forbidden:
        assert f"FAILED: {len(forbidden)} real-part test(s) skipped on a machine that has the part" in out
        assert any(f"({why})" in out for why in ("no cgroup v1 here", "durable_rules cannot be imported", "no kubectl binary on PATH"))


def test_the_plugin_does_not_mask_a_failure(tmp_path: Path) -> None:
    (tmp_path / "test_fail.py").write_text("def test_fails():\n    assert False\n")
    result = run_suite(tmp_path, "", 8)
    assert result.returncode == 1 and "1 failed" in result.stdout


@pytest.mark.parametrize(
    ("mounts", "expected"),
    [
        (
            "cgroup /sys/fs/cgroup/cpu cgroup rw,nosuid,cpu 0 0\n"
            "cgroup /sys/fs/cgroup/cpuacct cgroup rw,cpuacct 0 0\n"
            "cgroup /sys/fs/cgroup/memory cgroup ro,memory 0 0\n",
            {
                "cpu": ("/sys/fs/cgroup/cpu", True),
                "cpuacct": ("/sys/fs/cgroup/cpuacct", True),
                "memory": ("/sys/fs/cgroup/memory", False),
            },
        ),
        (
            "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,cpu,cpuacct 0 0\n"
            "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nsdelegate 0 0\n"
            "tmpfs /sys/fs/cgroup tmpfs ro,mode=755 0 0\n",
            {"cpu": ("/sys/fs/cgroup/cpu,cpuacct", True), "cpuacct": ("/sys/fs/cgroup/cpu,cpuacct", True)},
        ),
        ("cgroup2 /sys/fs/cgroup cgroup2 rw,nsdelegate 0 0\n", {}),
    ],
    ids=["separate-with-read-only-memory", "co-mounted-hybrid", "v2-only"],
)
def test_v1_mounts_from_the_mount_table(mounts: str, expected: dict[str, tuple[str, bool]]) -> None:
    assert _v1_mounts(textwrap.dedent(mounts)) == expected


@pytest.mark.parametrize(
    ("mounts", "missing"),
    [
        ("cgroup2 /sys/fs/cgroup cgroup2 rw,nsdelegate 0 0\n", None),
        ("cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n", None),
        ("proc /proc proc rw 0 0\ntmpfs /sys/fs/cgroup tmpfs ro 0 0\n", "no cgroup filesystem mounted"),
    ],
    ids=["v2", "v1", "none"],
)
def test_cgroup_mount_from_the_mount_table(tmp_path: Path, mounts: str, missing: str | None) -> None:
    (tmp_path / "mounts").write_text(mounts)
    assert cgroup_mount_missing(str(tmp_path / "mounts")) == missing


def test_the_two_former_unenforced_skips_carry_their_parts() -> None:
    """Issue 14: the forked-child tests and the live mount-table test skipped outside the plugin's
    view; they now carry the ``fork`` and ``cgroupmount`` parts, which this plugin enforces."""
    from tests import test_render_sandbox
    from tests.cgroups import test_paths

    def marks(fn: object) -> set[str]:
        return {m.name for m in getattr(fn, "pytestmark", [])}

    assert "fork" in marks(test_render_sandbox.test_python_internals_are_refused)
    assert "cgroupmount" in marks(test_paths.test_detect_reads_this_machine)
    assert {"fork", "cgroupmount"} <= set(PARTS)


def test_the_kubectl_tests_carry_their_part() -> None:
    """Every module that drives the real kubectl is marked, so a skip there fails CI where kubectl
    is installed (and the harness's own skip counts even without the marker)."""
    from tests import test_kubectl, test_kubectl_apply

    for module in (test_kubectl, test_kubectl_apply):
        marks = module.pytestmark if isinstance(module.pytestmark, list) else [module.pytestmark]
        assert "kubectl" in {m.name for m in marks}, module.__name__
    assert "kubectl" in PARTS
