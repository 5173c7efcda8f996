"""Files an input document names (a RuleTest's facts, state and policy paths, a trace's base).

A name in a YAML file is data, not a path the operating system has vetted: it can be 300 characters
long (ENAMETOOLONG), hold a NUL byte, name a directory, a FIFO (opening it would block the run) or a
device. :func:`unusable` says why such a name cannot be read, so the reader reports it at the field
that names it instead of raising OSError from a ``stat`` deep in the loader.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

_WHY = {
    errno.ENOENT: "does not exist",
    errno.ENOTDIR: "does not exist (a part of it is not a directory)",
    errno.ENAMETOOLONG: "is longer than the file system allows (a name is at most 255 bytes)",
    errno.EACCES: "cannot be read (permission denied)",
    errno.ELOOP: "is a loop of symbolic links",
}


def shown(name: str, limit: int = 80) -> str:
    """A name as an error message shows it: a 4,000-character name is cut, not printed whole."""
    return name if len(name) <= limit else f"{name[:limit]}... ({len(name)} characters)"


def named_file(base: Path, name: str, what: str, directory_ok: bool = False) -> tuple[Path | None, str]:
    """The file ``name`` (relative to ``base``) as an absolute path and "", or None and the message
    for the field that names it ("facts file x.yaml is a directory, not a file (looked at ...)")."""
    full, why = resolve(base, name)
    if full is not None:
        why = unusable(full, directory_ok)
    if not why:
        return full, ""
    looked = f" (looked at {shown(str(full), 120)})" if full is not None else ""
    return None, f"{what} {shown(name)} {why}{looked}"


def resolve(base: Path, name: str) -> tuple[Path | None, str]:
    """``base / name`` made absolute, or None and why not (a NUL byte makes no path at all)."""
    try:
        return (base / name).resolve(), ""
    except ValueError:
        return None, "holds a NUL byte, which no file name can"
    except OSError as exc:
        return None, _WHY.get(exc.errno or 0, exc.strerror or str(exc))


def unusable(path: Path, directory_ok: bool = False) -> str:
    """Why ``path`` cannot be read as an input file ("" when it can)."""
    try:
        st = os.stat(path)
    except ValueError:
        return "holds a NUL byte, which no file name can"
    except OSError as exc:
        return _WHY.get(exc.errno or 0, exc.strerror or str(exc))
    if stat.S_ISDIR(st.st_mode):
        return "" if directory_ok else "is a directory, not a file"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file (a device, pipe or socket)"
    if not os.access(path, os.R_OK):
        return "cannot be read (permission denied)"
    return ""
