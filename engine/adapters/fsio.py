"""The few filesystem primitives the adapters share: confinement under a root, one-syscall writes,
retry on EBUSY, and errno wording.

Confinement is checked on the resolved path (``os.path.realpath``), so a ``..`` component or a
symlink anywhere on the way cannot lead a write outside the configured cgroupfs or resctrl root.
``..`` is refused outright even when it would resolve inside: an operation naming it is a bug
upstream, and saying so beats guessing what was meant.

The IO itself sits behind :class:`FileIO` so that tests can put a faithful fake kernel (resctrl's
per-domain schemata merge, ``last_cmd_status``, ESRCH for exited tasks) in front of a temp tree.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from dataclasses import dataclass


class PathEscape(ValueError):
    """An operation's path would leave the configured root."""


class BadValue(ValueError):
    """A value no cgroup or resctrl file can hold (not ASCII, or a NUL byte): refused before any write."""


def encode_value(text: str, target: str) -> bytes:
    """The bytes of one write. Kernel interface files parse ASCII; a value that is not (``0-1é``) or
    that holds a NUL (the kernel would stop reading there) is refused with what and where, instead
    of escaping as a ``UnicodeEncodeError`` from deep inside a tick."""
    try:
        data = text.encode("ascii")
    except UnicodeEncodeError as exc:
        bad = text[exc.start : exc.end]
        raise BadValue(
            f"refused {text!r} for {target}: {bad!r} at offset {exc.start} is not ASCII, "
            "and cgroup and resctrl files take ASCII text only"
        ) from None
    if b"\0" in data:
        raise BadValue(f"refused {text!r} for {target}: it contains a NUL byte")
    return data


NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class FileIO:
    """Real files. Each ``write`` is one ``write(2)``: kernfs applies a write as a unit, and a value
    split across two syscalls would be two (wrong) values. Files are opened with ``O_NOFOLLOW``:
    cgroup and resctrl files are never symlinks, so one that is fails with ELOOP instead of leading
    elsewhere (directories are resolved and checked by :func:`confine`)."""

    def read(self, path: str) -> str:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW)
        try:
            chunks = [os.read(fd, 65536)]
            while len(chunks[-1]) == 65536:  # tasks lists and stat files can be long
                chunks.append(os.read(fd, 65536))
        finally:
            os.close(fd)
        return b"".join(chunks).decode("ascii", errors="replace")

    def write(self, path: str, text: str, *, append: bool = False) -> None:
        flags = os.O_WRONLY | NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC)
        data = encode_value(text, path)  # before open: a refused value truncates nothing
        fd = os.open(path, flags)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def mkdir(self, path: str) -> None:
        os.mkdir(path, 0o755)

    def rmdir(self, path: str) -> None:
        os.rmdir(path)


def open_nofollow(path: str) -> int:
    """A read-only descriptor of a file that is not a symlink (ELOOP if it is)."""
    return os.open(path, os.O_RDONLY | NOFOLLOW)


def check_name(name: str, what: str) -> None:
    """A single path component: no separator, not empty, not ``.``/``..``, no NUL."""
    if not name or "/" in name or "\0" in name or name in (".", ".."):
        raise PathEscape(f"refused {what} {name!r}: it must be one plain file or directory name")


def relative_parts(path: str) -> list[str]:
    """The components of an operation's path, relative to the root (a leading ``/`` is dropped)."""
    if "\0" in path:
        raise PathEscape(f"refused path {path!r}: it contains a NUL byte")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise PathEscape(f"refused path {path!r}: '..' is not allowed in a cgroup or resctrl path")
    return parts


def resolve(path: str) -> str:
    """The kernel's resolution of a path: open it (following links) and read the descriptor's name
    in /proc/self/fd. Three syscalls instead of ``os.path.realpath``'s lstat per component, which
    matters when a tick observes hundreds of cgroups. Falls back to ``realpath`` for paths that
    cannot be opened (a vanished cgroup, a file without read permission) or without procfs."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return os.path.realpath(path)
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(path)
    finally:
        os.close(fd)


def confine(base: str, *parts: str) -> str:
    """``base/parts...`` resolved, if it stays under ``base`` (itself already resolved). A part may
    be an absolute path already confined (a cgroup directory), as ``os.path.join`` restarts there."""
    joined = os.path.join(base, *parts)
    real = resolve(joined)
    if real != base and not real.startswith(base.rstrip("/") + "/"):
        raise PathEscape(f"refused {joined}: it resolves to {real}, outside {base}")
    return real


@dataclass(frozen=True)
class Retry:
    """EBUSY is transient (a cgroup mid-migration, a memory limit while the kernel reclaims, freed
    RMIDs in limbo): try ``attempts`` times, sleeping ``backoff * 2**n`` between tries. Kept short
    because the whole plan must fit in a 1 s tick."""

    attempts: int = 3
    backoff: float = 0.005
    sleep: Callable[[float], None] = time.sleep

    def run(self, call: Callable[[], None]) -> tuple[int, OSError | None]:
        """(tries made, the last error or None)."""
        last: OSError | None = None
        for n in range(max(self.attempts, 1)):
            if n:
                self.sleep(self.backoff * 2 ** (n - 1))
            try:
                call()
                return n + 1, None
            except OSError as exc:
                last = exc
                if exc.errno != errno.EBUSY:
                    return n + 1, exc
        return max(self.attempts, 1), last


GONE = frozenset({errno.ENOENT, errno.ENODEV, errno.ESRCH})
SYMLINK = errno.ELOOP  # O_NOFOLLOW on a symlink
DENIED = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


def symlink_refused(path: str) -> str:
    return f"refused {path}: it is a symlink, and cgroup and resctrl files never are"


def errno_name(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, str(exc.errno))


def denied_hint(root: str) -> str:
    return f"permission denied: qosd must run as root (in a pod: privileged) with {root} mounted read-write"
