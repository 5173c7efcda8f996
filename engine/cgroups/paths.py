"""Where the kubelet and the container runtimes put pod and container cgroups.

Paths are relative to a controller mount (v1) or to the cgroup2 root (v2); the same relative path
works under every v1 controller. Pure functions: they say where a cgroup should be, not whether it
exists.

Pod cgroups follow the kubelet's naming: a cgroup *name* is a list of components (``kubepods``,
the QoS class unless Guaranteed, ``pod<uid>``). The cgroupfs driver joins them with ``/``. The
systemd driver escapes ``-`` to ``_`` in each component (pod UIDs carry dashes), names each level
``<all components so far joined by ->.slice`` and nests the levels, the way systemd expands a slice
name into its parents::

    cgroupfs  kubepods/burstable/pod1a2b-3c
    systemd   kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b_3c.slice

Container cgroups are the runtime's, below the pod (koordinator.md §5.3; CRI-O's cgmgr):

=========== ======================== ============================
runtime     systemd driver           cgroupfs driver
=========== ======================== ============================
containerd  cri-containerd-<id>.scope <id>
CRI-O       crio-<id>.scope          crio-<id>
docker      docker-<id>.scope        <id>
=========== ======================== ============================

(Koordinator's table gives ``<id>`` for every runtime under cgroupfs; CRI-O's own cgroupfs manager
joins ``crio-<id>``, and that is what is on disk.)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Literal

Driver = Literal["cgroupfs", "systemd"]
DRIVERS: tuple[Driver, ...] = ("cgroupfs", "systemd")
KUBEPODS: tuple[str, ...] = ("kubepods",)

QOS_DIRS = {"guaranteed": None, "burstable": "burstable", "besteffort": "besteffort"}

_RUNTIMES = {
    # runtime -> (systemd scope prefix, cgroupfs prefix)
    "containerd": ("cri-containerd-", ""),
    "cri-o": ("crio-", "crio-"),
    "crio": ("crio-", "crio-"),
    "docker": ("docker-", ""),
}


NAME_MAX = 255  # bytes in one directory name (the kernel's NAME_MAX)
PATH_MAX = 4096  # bytes in a whole path, mount point included (PATH_MAX)


def cgroup_path_problem(path: str) -> str | None:
    """Why a configured cgroup path cannot name a cgroup, or None when it can.

    A configured path (setCgroup's target.path) is relative to the cgroup root: the v2 mount, or
    each v1 controller's mount, so one path serves every controller. It must be written the one
    way it is used: relative, normalized (no empty, ``.`` or ``..`` component, no trailing ``/``),
    printable (no NUL, newline or other control character) and within the kernel's name limits.
    The adapter would refuse ``..`` and NUL at write time and read ``/sys/fs/cgroup/cpu/x`` as
    ``<mount>/sys/fs/cgroup/cpu/x``; saying so at validation beats a warning every tick."""
    if not path:
        return "the path is empty; name a cgroup below the cgroup root, e.g. kubepods/besteffort"
    if "\0" in path:
        return "the path contains a NUL byte"
    if not path.isprintable():
        return "the path contains a control character (newline, tab, ...); cgroup names are printable"
    if path.startswith("/"):
        return (
            "the path is absolute; write it relative to the cgroup root, the same for every controller "
            "(kubepods/besteffort, not /sys/fs/cgroup/cpu/kubepods/besteffort)"
        )
    parts = path.split("/")
    if "" in parts:
        return "the path has an empty component ('//' or a trailing '/'); write it normalized"
    if "." in parts or ".." in parts:
        return "the path has a '.' or '..' component; a cgroup path names directories below the root only"
    longest = max(parts, key=lambda p: len(p.encode()))
    if len(longest.encode()) > NAME_MAX:
        return f"the component {longest[:20]!r}... is longer than {NAME_MAX} bytes, the kernel's limit"
    if len(path.encode()) > PATH_MAX - 256:  # room for the mount point and the file name
        return f"the path is longer than {PATH_MAX - 256} bytes"
    return None


def _qos_component(qos: str) -> str | None:
    key = qos.replace("-", "").replace("_", "").lower()
    if key not in QOS_DIRS:
        raise ValueError(f"unknown Kubernetes QoS class {qos!r}; one of Guaranteed, Burstable, BestEffort")
    return QOS_DIRS[key]


def _check_driver(driver: str) -> None:
    if driver not in DRIVERS:
        raise ValueError(f"unknown cgroup driver {driver!r}; one of {', '.join(DRIVERS)}")


def cgroup_name_to_path(components: Sequence[str], driver: Driver) -> str:
    """The kubelet's CgroupName -> directory path for a driver (no leading ``/``)."""
    _check_driver(driver)
    parts = [c for c in components if c]
    if driver == "cgroupfs":
        return "/".join(parts)
    levels: list[str] = []
    prefix = ""
    for part in parts:
        escaped = part.replace("-", "_")
        prefix = f"{prefix}-{escaped}" if prefix else escaped
        levels.append(f"{prefix}.slice")
    return "/".join(levels)


def qos_path(qos: str, driver: Driver, root: Sequence[str] = KUBEPODS) -> str:
    """The QoS-level cgroup; Guaranteed pods sit directly in the kubepods root."""
    component = _qos_component(qos)
    return cgroup_name_to_path([*root, *([component] if component else [])], driver)


def pod_path(uid: str, qos: str, driver: Driver, root: Sequence[str] = KUBEPODS) -> str:
    if not uid or "/" in uid:
        raise ValueError(f"pod UID {uid!r} cannot name a cgroup")
    component = _qos_component(qos)
    return cgroup_name_to_path([*root, *([component] if component else []), f"pod{uid}"], driver)


def parse_container_id(container_id: str) -> tuple[str, str]:
    """``containerd://abc`` (a pod status's containerID) -> ("containerd", "abc")."""
    runtime, sep, cid = container_id.partition("://")
    if not sep or not runtime or not cid:
        raise ValueError(
            f"container ID {container_id!r} is not <runtime>://<id> as in a pod's status.containerStatuses"
        )
    return runtime, cid


def container_dir(container_id: str, driver: Driver) -> str:
    """The container's directory name below its pod cgroup."""
    _check_driver(driver)
    runtime, cid = parse_container_id(container_id)
    if "/" in cid or cid in (".", ".."):
        raise ValueError(f"container ID {container_id!r} cannot name a cgroup")
    try:
        scope, plain = _RUNTIMES[runtime]
    except KeyError:
        known = ", ".join(sorted(_RUNTIMES))
        raise ValueError(
            f"unknown container runtime {runtime!r} in {container_id!r}; one of {known}"
        ) from None
    return f"{scope}{cid}.scope" if driver == "systemd" else f"{plain}{cid}"


def container_path(
    uid: str, qos: str, container_id: str, driver: Driver, root: Sequence[str] = KUBEPODS
) -> str:
    return f"{pod_path(uid, qos, driver, root)}/{container_dir(container_id, driver)}"


def detect_driver(mount: str, root: Sequence[str] = KUBEPODS) -> Driver | None:
    """Koordinator's first detection step: the systemd kubepods slice, else the cgroupfs
    directory, under one controller mount (or the v2 root). None: neither exists (no pods yet, or
    the kubelet uses another root); the caller then needs the driver from configuration."""
    if os.path.isdir(os.path.join(mount, cgroup_name_to_path(root, "systemd"))):
        return "systemd"
    if os.path.isdir(os.path.join(mount, cgroup_name_to_path(root, "cgroupfs"))):
        return "cgroupfs"
    return None
