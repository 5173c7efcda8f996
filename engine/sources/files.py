"""Reading kernel pseudo-files (procfs, sysfs, cgroupfs) for the node collectors.

Every collector reads through a ``Reader`` so that one tick reads each file at most once (a
``TickReader`` memoizes reads until the next ``begin_tick``) and so that tests can count the
underlying opens. Reads use ``os.open``/``os.read`` rather than ``open()``: for the small files a
tick reads by the hundred this is about twice as fast (measured here: 8 us against 23 us for a
cgroup's memory.stat).

A file that cannot be read is ``None``, never an exception: cgroups vanish between listing and
reading when a pod exits, PSI files are absent when the kernel has PSI off, and a collector must
degrade to "fact missing" instead of failing the tick.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Protocol

CHUNK = 1 << 16

Opener = Callable[[str], int]
"""Opens a path read-only and returns a file descriptor (``os.open`` semantics)."""


class Reader(Protocol):
    def read(self, path: str) -> str | None:
        """The whole file as text, or None if it does not exist or cannot be read."""
        ...


def open_readonly(path: str) -> int:
    return os.open(path, os.O_RDONLY | os.O_CLOEXEC)


class FileReader:
    """Reads whole files with raw descriptors; ``opener`` is injectable so tests can count opens."""

    __slots__ = ("opener",)

    def __init__(self, opener: Opener = open_readonly) -> None:
        self.opener = opener

    def read(self, path: str) -> str | None:
        try:
            fd = self.opener(path)
        except OSError:
            return None
        try:
            data = os.read(fd, CHUNK)
            if len(data) == CHUNK:  # large files (zoneinfo on big machines): read to EOF
                parts = [data]
                while chunk := os.read(fd, CHUNK):
                    parts.append(chunk)
                data = b"".join(parts)
        except OSError:  # ENODEV: the cgroup was removed after the open
            return None
        finally:
            os.close(fd)
        # latin-1 never fails and costs nothing; every value qosd parses is ASCII.
        return data.decode("latin-1")


class TickReader:
    """At most one read of each file per tick: reads are memoized until ``begin_tick``.

    Several parts of one tick may need the same file (the node's meminfo feeds memory facts and
    NodeInfo, a standalone workload's cgroup is both the pod's and its container's); they all get
    the value read first, which also keeps one tick's facts consistent with each other."""

    __slots__ = ("_memo", "inner")

    def __init__(self, inner: Reader | None = None) -> None:
        self.inner: Reader = inner if inner is not None else FileReader()
        self._memo: dict[str, str | None] = {}

    def begin_tick(self) -> None:
        self._memo.clear()

    def read(self, path: str) -> str | None:
        try:
            return self._memo[path]
        except KeyError:
            value = self.inner.read(path)
            self._memo[path] = value
            return value


def read_int(reader: Reader, path: str) -> int | None:
    """A file holding one integer (``cpuacct.usage``, ``memory.current``, ``core_id``)."""
    text = reader.read(path)
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None
