"""Where pod and container cgroups live per driver, QoS class and runtime, and how the hierarchy is
detected from the mount table. Pure functions and parsed text: no cgroupfs needed.

Expected paths are the kubelet's and the runtimes' (koordinator.md §5.3 table for the drivers and the
containerd/docker names; CRI-O's ``internal/config/cgmgr`` for ``crio-<id>`` under cgroupfs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.cgroups.mounts import CgroupLayout, CgroupUnavailable, parse_mountinfo
from engine.cgroups.paths import (
    cgroup_name_to_path,
    cgroup_path_problem,
    container_dir,
    container_path,
    detect_driver,
    parse_container_id,
    pod_path,
    qos_path,
)

UID = "1a2b3c4d-0000-4e5f-8a9b-0123456789ab"
UID_ = "1a2b3c4d_0000_4e5f_8a9b_0123456789ab"


@pytest.mark.parametrize(
    ("qos", "driver", "expected"),
    [
        ("Guaranteed", "cgroupfs", "kubepods"),
        ("Burstable", "cgroupfs", "kubepods/burstable"),
        ("BestEffort", "cgroupfs", "kubepods/besteffort"),
        ("Guaranteed", "systemd", "kubepods.slice"),
        ("Burstable", "systemd", "kubepods.slice/kubepods-burstable.slice"),
        ("BestEffort", "systemd", "kubepods.slice/kubepods-besteffort.slice"),
    ],
)
def test_qos_paths(qos: str, driver: str, expected: str) -> None:
    assert qos_path(qos, driver) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("qos", "driver", "expected"),
    [
        ("Guaranteed", "cgroupfs", f"kubepods/pod{UID}"),
        ("Burstable", "cgroupfs", f"kubepods/burstable/pod{UID}"),
        ("BestEffort", "cgroupfs", f"kubepods/besteffort/pod{UID}"),
        ("Guaranteed", "systemd", f"kubepods.slice/kubepods-pod{UID_}.slice"),
        (
            "Burstable",
            "systemd",
            f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice",
        ),
        (
            "BestEffort",
            "systemd",
            f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice",
        ),
        ("besteffort", "cgroupfs", f"kubepods/besteffort/pod{UID}"),  # case as in some API clients
    ],
)
def test_pod_paths(qos: str, driver: str, expected: str) -> None:
    assert pod_path(UID, qos, driver) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("container_id", "driver", "expected"),
    [
        ("containerd://abc123", "systemd", "cri-containerd-abc123.scope"),
        ("cri-o://abc123", "systemd", "crio-abc123.scope"),
        ("docker://abc123", "systemd", "docker-abc123.scope"),
        ("containerd://abc123", "cgroupfs", "abc123"),
        ("cri-o://abc123", "cgroupfs", "crio-abc123"),
        ("docker://abc123", "cgroupfs", "abc123"),
    ],
)
def test_container_dirs(container_id: str, driver: str, expected: str) -> None:
    assert container_dir(container_id, driver) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("qos", "container_id", "driver", "expected"),
    [
        (
            "Burstable",
            "containerd://c0ffee",
            "systemd",
            f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-c0ffee.scope",
        ),
        (
            "Guaranteed",
            "cri-o://c0ffee",
            "systemd",
            f"kubepods.slice/kubepods-pod{UID_}.slice/crio-c0ffee.scope",
        ),
        ("BestEffort", "docker://c0ffee", "cgroupfs", f"kubepods/besteffort/pod{UID}/c0ffee"),
        ("Burstable", "cri-o://c0ffee", "cgroupfs", f"kubepods/burstable/pod{UID}/crio-c0ffee"),
    ],
)
def test_container_paths(qos: str, container_id: str, driver: str, expected: str) -> None:
    assert container_path(UID, qos, container_id, driver) == expected  # type: ignore[arg-type]


def test_systemd_expands_a_custom_kubelet_root_like_systemd_does() -> None:
    """kind runs the kubelet with --cgroup-root=/kubelet: the slice is kubelet-kubepods.slice, nested
    in kubelet.slice, and every level below carries the full prefix."""
    root = ("kubelet", "kubepods")
    assert cgroup_name_to_path(root, "systemd") == "kubelet.slice/kubelet-kubepods.slice"
    assert pod_path(UID, "Burstable", "systemd", root) == (
        "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/"
        f"kubelet-kubepods-burstable-pod{UID_}.slice"
    )
    assert pod_path(UID, "Burstable", "cgroupfs", root) == f"kubelet/kubepods/burstable/pod{UID}"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: pod_path(UID, "Premium", "cgroupfs"), "unknown Kubernetes QoS class"),
        (lambda: pod_path(UID, "Burstable", "openrc"), "unknown cgroup driver"),  # type: ignore[arg-type]
        (lambda: pod_path("../x", "Burstable", "cgroupfs"), "cannot name a cgroup"),
        (lambda: container_dir("abc123", "systemd"), "is not <runtime>://<id>"),
        (lambda: container_dir("rkt://abc", "systemd"), "unknown container runtime 'rkt'"),
        (lambda: container_dir("docker://..", "cgroupfs"), "cannot name a cgroup"),
    ],
)
def test_bad_inputs_are_refused_with_a_reason(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()  # type: ignore[operator]


def test_parse_container_id() -> None:
    assert parse_container_id("containerd://0123abcd") == ("containerd", "0123abcd")


def test_driver_detection_prefers_the_systemd_slice(tmp_path: Path) -> None:
    assert detect_driver(str(tmp_path)) is None
    (tmp_path / "kubepods").mkdir()
    assert detect_driver(str(tmp_path)) == "cgroupfs"
    (tmp_path / "kubepods.slice").mkdir()
    assert detect_driver(str(tmp_path)) == "systemd"


# ---------------------------------------------------------------- hierarchy detection

V1_LINE = "{id} 31 0:{id} / /sys/fs/cgroup/{point} rw,relatime shared:{id} - cgroup cgroup rw,{opts}"
HYBRID = "\n".join(
    [
        "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755",
        V1_LINE.format(id=32, point="cpu,cpuacct", opts="cpu,cpuacct"),
        V1_LINE.format(id=34, point="cpuset", opts="cpuset"),
        V1_LINE.format(id=35, point="memory", opts="memory"),
        V1_LINE.format(id=40, point="systemd", opts="xattr,name=systemd"),
        "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate",
        "50 23 0:45 / /sys/fs/resctrl rw,relatime - resctrl resctrl rw",
    ]
)
V1_ONLY = "\n".join(line for line in HYBRID.splitlines() if "cgroup2" not in line)
V2 = "\n".join(
    [
        "25 23 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate",
        "26 23 0:24 / /sys/fs/bpf rw - bpf bpf rw",
    ]
)
# A DaemonSet that mounts the host's hierarchy at /host-cgroup also sees its own at /sys/fs/cgroup.
DAEMONSET = "\n".join(
    [
        V2,
        r"90 80 0:23 / /host\040cgroup rw,relatime - cgroup2 cgroup2 rw",
    ]
)


def test_hybrid_keeps_controllers_on_v1_and_notes_the_unified_mount() -> None:
    layout = CgroupLayout.from_mounts("/sys/fs/cgroup", parse_mountinfo(HYBRID), unified_controllers=[])
    assert layout.mode == "hybrid"
    assert layout.locate("cpu") == (1, "/sys/fs/cgroup/cpu,cpuacct")
    assert layout.locate("cpuacct") == (1, "/sys/fs/cgroup/cpu,cpuacct")
    assert layout.locate("cpuset") == (1, "/sys/fs/cgroup/cpuset")
    assert layout.locate("memory") == (1, "/sys/fs/cgroup/memory")
    assert layout.locate("") == (1, "/sys/fs/cgroup/cpu,cpuacct")  # core files: the cpu hierarchy
    assert layout.locate("io") is None
    assert layout.unified == "/sys/fs/cgroup/unified"
    assert "name=systemd" not in layout.v1


def test_v1_without_cgroup2() -> None:
    layout = CgroupLayout.from_mounts("/sys/fs/cgroup", parse_mountinfo(V1_ONLY))
    assert (layout.mode, layout.unified) == ("v1", None)


def test_a_controller_moved_to_cgroup2_on_a_hybrid_host_is_found_there() -> None:
    layout = CgroupLayout.from_mounts("/sys/fs/cgroup", parse_mountinfo(HYBRID), unified_controllers=["io"])
    assert layout.locate("io") == (2, "/sys/fs/cgroup/unified")
    assert layout.locate("cpu") == (1, "/sys/fs/cgroup/cpu,cpuacct")


def test_unified_mount_at_the_root_is_v2() -> None:
    layout = CgroupLayout.from_mounts(
        "/sys/fs/cgroup", parse_mountinfo(V2), unified_controllers=["cpuset", "cpu", "memory"]
    )
    assert layout.mode == "v2"
    assert layout.locate("cpu") == (2, "/sys/fs/cgroup")
    assert layout.locate("") == (2, "/sys/fs/cgroup")
    assert layout.locate("hugetlb") is None  # not offered in cgroup.controllers


def test_only_mounts_under_the_configured_root_count() -> None:
    """Escaped mount points (a space is \\040) are decoded; the container's own /sys/fs/cgroup is
    ignored when the host's is configured."""
    layout = CgroupLayout.from_mounts("/host cgroup", parse_mountinfo(DAEMONSET), unified_controllers=["cpu"])
    assert (layout.mode, layout.unified) == ("v2", "/host cgroup")


def test_no_cgroup_mount_is_a_clear_error() -> None:
    with pytest.raises(CgroupUnavailable, match="no cgroup filesystem is mounted at or under /srv"):
        CgroupLayout.from_mounts("/srv", parse_mountinfo(HYBRID))


@pytest.mark.parametrize(
    ("table", "controllers", "version", "file", "on_disk"),
    [
        (HYBRID, [], 1, "cpuacct.usage", "/sys/fs/cgroup/cpu,cpuacct/kubepods/pod1/cpuacct.usage"),
        (HYBRID, [], 1, "cpu.stat", "/sys/fs/cgroup/cpu,cpuacct/kubepods/pod1/cpu.stat"),
        (HYBRID, [], 1, "memory.stat", "/sys/fs/cgroup/memory/kubepods/pod1/memory.stat"),
        (HYBRID, [], 1, "cgroup.procs", "/sys/fs/cgroup/cpu,cpuacct/kubepods/pod1/cgroup.procs"),
        # no v1 io hierarchy: the core one, where the file is then simply absent
        (HYBRID, [], 1, "io.pressure", "/sys/fs/cgroup/cpu,cpuacct/kubepods/pod1/io.pressure"),
        (V2, ["cpu", "memory"], 2, "memory.stat", "/sys/fs/cgroup/kubepods/pod1/memory.stat"),
        (V2, ["cpu", "memory"], 2, "io.pressure", "/sys/fs/cgroup/kubepods/pod1/io.pressure"),
    ],
)
def test_the_layout_says_where_each_file_of_a_cgroup_is(
    table: str, controllers: list[str], version: int, file: str, on_disk: str
) -> None:
    """The one detection serves reads (sources) as it serves writes (the adapter)."""
    layout = CgroupLayout.from_mounts("/sys/fs/cgroup", parse_mountinfo(table), unified_controllers=controllers)
    assert layout.version == version
    assert layout.file("/kubepods/pod1/", file) == on_disk
    assert layout.relative(on_disk.rsplit("/", 1)[0]) == "kubepods/pod1"
    assert layout.relative("/srv/kubepods") is None


@pytest.mark.cgroupmount
def test_detect_reads_this_machine() -> None:
    """The live mount table parses, whatever this host runs."""
    text = Path("/proc/self/mountinfo").read_text()
    if "cgroup" not in text:
        pytest.skip("no cgroup filesystem mounted here")
    layout = CgroupLayout.detect()
    assert layout.mode in ("v1", "hybrid", "v2")
    assert layout.locate("cpu") is not None


# ---- configured cgroup paths (setCgroup target.path; issue 14, defect 6)


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("", "empty"),
        ("..", "'..'"),
        ("../etc", "'..'"),
        ("a/../b", "'..'"),
        ("./a", "'.'"),
        ("a/.", "'.'"),
        ("/sys/fs/cgroup/cpu/x", "absolute"),  # was re-rooted under each controller mount
        ("/", "absolute"),
        ("a\0b", "NUL"),
        ("a//b", "empty component"),
        ("a/", "empty component"),
        ("a\nb", "control character"),
        ("a\x7fb", "control character"),
        ("a\u200bb", "control character"),  # zero-width space: not printable
        ("x" * 256, "longer than 255 bytes"),
        ("é" * 128, "longer than 255 bytes"),  # 256 bytes in UTF-8
        ("/".join(["x" * 200] * 20), "longer than"),
    ],
)
def test_cgroup_path_problem_refuses(path: str, reason: str) -> None:
    problem = cgroup_path_problem(path)
    assert problem is not None and reason in problem


@pytest.mark.parametrize(
    "path", ["kubepods", "kubepods/besteffort", "kubepods.slice/kubepods-besteffort.slice", "qosd demo/é", "a..b/...", "x" * 255]
)
def test_cgroup_path_problem_accepts_plain_relative_paths(path: str) -> None:
    assert cgroup_path_problem(path) is None
