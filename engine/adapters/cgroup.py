"""The cgroup adapter: observes and writes cgroup files on v1, hybrid and v2 hosts. It decides nothing.

- **Names**: operations name *logical* files in either dialect; :mod:`engine.cgroups.files` maps
  them to the host's files and formats (``cpu.shares`` on v2 becomes ``cpu.weight``, ``cpu.max`` on
  v1 becomes quota and period). Which hierarchy holds a controller comes from
  :class:`~engine.cgroups.mounts.CgroupLayout`.
- **No policy**: converting cpu.shares <-> cpu.weight takes a formula, which is the policy's; each
  write operation carries its own (``WriteCgroup.weight_formula``) and ``observe`` is told it per
  call, so nothing is pushed into the adapter when a policy generation loads.
- **Read-compare-write**: every write is preceded by a read of the host file and happens only when
  the value differs by meaning, so a steady state writes nothing even when the planner's view was
  a tick old. Operations are executed strictly in the order given: the planner orders parents and
  children (loosen top-down, tighten bottom-up) and this adapter must not undo that.
- **Confinement**: an operation's path is relative to the hierarchy's mount; ``..`` is refused and
  the resolved path must stay inside the mount (no symlink escape). Every write resolves and checks
  its directory afresh. ``observe`` runs every tick over hundreds of cgroups, so it keeps each
  directory it resolved (confined like a write's) for ``DIR_TTL`` calls, and drops it at once when a
  read finds the cgroup gone; a read can therefore follow a rename for at most that many calls, and
  a write never can. Files are always opened with ``O_NOFOLLOW``. An ``observe_reader`` (the
  daemon passes a :class:`~engine.sources.files.PinnedReader`) may keep the observed files open
  between calls; it is only asked for files of directories confined as above, and any file it
  cannot read is read again the plain way so that a vanished cgroup or a symlink is classified.
- **Errors are classified**, one :class:`~engine.adapters.result.OperationResult` per operation:
  the cgroup went away (ENOENT/ENODEV: the pod ended between plan and write) is *vanished*, benign,
  logged at info; a missing file in an existing cgroup (cpu.idle before 5.15, memory.high on v1) is
  *skipped*, logged once per file; EINVAL is *failed* with the value and, for cpusets, the parent's
  set; EBUSY is retried with a short backoff; EACCES/EPERM/EROFS are *failed* with what to fix.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from engine.adapters.fsio import (
    DENIED,
    GONE,
    SYMLINK,
    BadValue,
    FileIO,
    PathEscape,
    Retry,
    check_name,
    confine,
    denied_hint,
    encode_value,
    errno_name,
    relative_parts,
    symlink_refused,
)
from engine.adapters.result import OperationResult
from engine.cgroups.files import (
    CPUSET_FILES,
    TranslationError,
    controller_of,
    from_host,
    host_files,
    to_host,
)
from engine.cgroups.mounts import CgroupLayout
from engine.cgroups.weight import WeightFormula
from engine.model.operations import Operation, WriteCgroup

log = logging.getLogger("qosd.adapters.cgroup")

CPUSET_ERRORS = {
    errno.EACCES: "a cpuset must lie within its parent's",
    errno.EBUSY: "a child cpuset holds CPUs or nodes outside the new value; narrow the children first",
    errno.ENOSPC: "a cpuset with tasks in it cannot be empty",
    errno.EINVAL: "not a valid CPU or node list, or one the kernel does not have",
    errno.ERANGE: "a CPU or node number beyond what this machine can have",
}
NO_RETRY = Retry(attempts=1)
DIR_TTL = 256  # observe() calls a resolved directory is reused before it is resolved again
MISSING: Any = object()


class ObserveReader(Protocol):
    """Reads a file's text (None when it cannot), and hears of each observe() call."""

    def read(self, path: str) -> str | None: ...

    def begin_tick(self) -> None: ...


class _Vanished(Exception):
    """The cgroup directory is gone."""


class _Missing(Exception):
    """The cgroup exists but this file does not."""


class CgroupAdapter:
    """Executes :class:`WriteCgroup` operations and reads the values the planner compares against.

    ``writes`` counts write syscalls that succeeded since construction: the benchmark's "zero cgroup
    writes per tick in steady state" is read from it."""

    def __init__(
        self,
        layout: CgroupLayout,
        *,
        retry: Retry | None = None,
        io: FileIO | None = None,
        observe_reader: ObserveReader | None = None,
    ):
        self.layout = layout
        self.retry = retry or Retry()
        self.io = io or FileIO()
        self.observe_reader = observe_reader
        self.writes = 0
        self._unsupported_logged: set[tuple[str, str]] = set()
        # observe(): (mount, path) -> (resolved directory, the call it was resolved in)
        self._dirs: dict[tuple[str, str], tuple[str, int]] = {}
        self._calls = 0
        # logical file -> (cgroup version, mount, host files); the layout never changes
        self._hosts: dict[str, tuple[int, str, tuple[str, ...]] | None] = {}

    @classmethod
    def detect(
        cls,
        root: str | Path = "/sys/fs/cgroup",
        mountinfo: str | Path = "/proc/self/mountinfo",
        *,
        retry: Retry | None = None,
        observe_reader: ObserveReader | None = None,
    ) -> CgroupAdapter:
        """An adapter for the hierarchy mounted under ``root`` per the mount table."""
        layout = CgroupLayout.detect(root, mountinfo)
        return cls(layout, retry=retry, observe_reader=observe_reader)

    # ---------------------------------------------------------------- locating files

    def _base(self, file: str) -> tuple[int, str] | None:
        return self.layout.locate(controller_of(file))

    def _directory(self, base: str, path: str) -> str:
        return confine(base, *relative_parts(path))

    def _read(self, directory: str, name: str) -> str:
        """One host file's text; _Vanished / _Missing on ENOENT depending on the directory."""
        target = f"{directory}/{name}"
        try:
            return self.io.read(target)
        except OSError as exc:
            if exc.errno == SYMLINK:
                raise PathEscape(symlink_refused(target)) from None
            if exc.errno in GONE:
                if not os.path.isdir(directory):
                    raise _Vanished from None
                raise _Missing from None
            raise

    # ---------------------------------------------------------------- observing

    def observe(
        self, wanted: Mapping[str, Iterable[str]], formula: WeightFormula | None = None
    ) -> dict[str, dict[str, str]]:
        """Current values of logical files, ``{path: {file: value}}``, in each file's own dialect;
        a share file read from the other version's file converts by ``formula`` (the caller's
        policy generation; None: the default), as that generation's writes will compare.

        Each host file is read at most once per call (cpu.max serves both CFS files on v2). Cgroups
        that do not exist are left out, and so are files this node does not offer; a file that cannot
        be read for another reason (permissions) is left out and logged, so one bad file never hides
        the rest of the snapshot."""
        cache: dict[str, str | None] = {}
        out: dict[str, dict[str, str]] = {}
        pinned = self.observe_reader
        if pinned is not None:
            pinned.begin_tick()
        self._calls += 1
        if self._calls % DIR_TTL == 0:  # forget directories of cgroups no longer observed
            oldest = self._calls - DIR_TTL
            self._dirs = {k: v for k, v in self._dirs.items() if v[1] > oldest}
        hosts = self._hosts
        for path, files in wanted.items():
            values: dict[str, str] = {}
            directories: dict[str, str] = {}  # this path's directory per hierarchy
            for file in files:
                where = hosts.get(file, MISSING)
                if where is MISSING:
                    located = self._base(file)
                    where = hosts[file] = (
                        None if located is None else (*located, host_files(file, located[0]))
                    )
                if where is None:
                    continue
                version, base, names = where
                directory = directories.get(base)
                if directory is None:
                    try:
                        directory = directories[base] = self._observed_directory(base, path)
                    except PathEscape as exc:
                        log.warning("not observing %s: %s", path, exc)
                        break
                texts: dict[str, str] = {}
                for name in names:
                    key = f"{directory}/{name}"
                    if key not in cache:
                        if pinned is not None:
                            text = cache[key] = pinned.read(key)
                            if text is not None:
                                texts[name] = text
                                continue
                        try:
                            cache[key] = self._read(directory, name)
                        except _Vanished:
                            cache[key] = None
                            self._dirs.pop((base, path), None)  # resolve again if it comes back
                        except (_Missing, PathEscape):
                            cache[key] = None
                        except OSError as exc:
                            log.warning("cannot read %s: %s", key, exc.strerror)
                            cache[key] = None
                    text = cache[key]
                    if text is not None:
                        texts[name] = text
                value = from_host(file, version, texts, formula)
                if value is not None:
                    values[file] = value
            if values:
                out[path] = values
        return out

    def _observed_directory(self, base: str, path: str) -> str:
        """A confined directory for reading, reused for up to DIR_TTL calls (see the module docstring)."""
        cached = self._dirs.get((base, path))
        if cached is not None and self._calls - cached[1] < DIR_TTL:
            return cached[0]
        directory = self._directory(base, path)
        self._dirs[base, path] = (directory, self._calls)
        return directory

    def tasks(self, path: str) -> list[int]:
        """Thread ids in a cgroup and its descendants (a pod's tasks live in its containers): v1
        ``tasks``, v2 ``cgroup.threads``. A cgroup that is gone has none."""
        located = self.layout.locate("")
        if located is None:
            return []
        version, base = located
        name = host_files("tasks", version)[0]
        try:
            top = self._directory(base, path)
        except PathEscape as exc:
            log.warning("not reading tasks of %s: %s", path, exc)
            return []
        found: set[int] = set()
        for directory, _dirs, files in os.walk(top):
            if name not in files:
                continue
            try:
                text = self.io.read(os.path.join(directory, name))
            except OSError:
                continue  # exited between the walk and the read
            found.update(int(t) for t in text.split() if t.isdigit())
        return sorted(found)

    # ---------------------------------------------------------------- applying

    def apply(self, operations: Sequence[Operation]) -> list[OperationResult]:
        """One result per operation, in order. Operations other than WriteCgroup are skipped: they
        belong to another adapter (see :class:`engine.adapters.executor.NodeExecutor`)."""
        out: list[OperationResult] = []
        for op in operations:
            if isinstance(op, WriteCgroup):
                out.append(self.apply_one(op))
            else:
                out.append(OperationResult(op, "skipped", f"{op.kind} is not a cgroup operation"))
        return out

    def apply_one(self, op: WriteCgroup) -> OperationResult:
        where = f"{op.path.strip('/') or '/'}/{op.file}"
        try:
            check_name(op.file, "cgroup file")
            relative_parts(op.path)
        except PathEscape as exc:
            return OperationResult(op, "failed", str(exc))
        located = self._base(op.file)
        if located is None:
            controller = controller_of(op.file) or "any"
            return self._unsupported(
                op, controller, f"controller {controller} is not mounted ({self.layout.describe()})"
            )
        version, base = located
        try:
            directory = self._directory(base, op.path)
        except PathEscape as exc:
            return OperationResult(op, "failed", str(exc))
        names = host_files(op.file, version)
        current: dict[str, str | None] = {}
        try:
            for name in names:
                current[name] = self._read(directory, name)
        except _Vanished:
            log.info("cgroup %s vanished before %s could be written", directory, op.file)
            return OperationResult(op, "vanished", f"cgroup {directory} no longer exists")
        except _Missing:
            missing = ", ".join(n for n in names if n not in current)
            return self._unsupported(
                op, missing, f"{missing} does not exist in {directory}: this kernel does not offer it"
            )
        except PathEscape as exc:
            return OperationResult(op, "failed", str(exc))
        except OSError as exc:
            return OperationResult(op, "failed", self._io_error(exc, "reading", directory, names[0], None))
        try:
            writes = to_host(op.file, op.value, version, current, op.weight_formula)
        except TranslationError as exc:
            return OperationResult(op, "failed", f"{where}: {exc}")
        if not writes:
            return OperationResult(op, "unchanged")
        try:  # every file's value checked before the first write: none or all are attempted
            for name, text in writes:
                encode_value(text, os.path.join(directory, name))
        except BadValue as exc:
            return OperationResult(op, "failed", str(exc))
        attempts = 0
        done: list[str] = []
        for name, text in writes:
            target = os.path.join(directory, name)  # directory confined, file opened O_NOFOLLOW

            def write(target: str = target, text: str = text) -> None:
                self.io.write(target, text)

            # A cpuset's EBUSY means "a child is outside it": retrying cannot help.
            tries, error = (NO_RETRY if name in CPUSET_FILES else self.retry).run(write)
            attempts += tries
            if error is None:
                self.writes += 1
                done.append(f"{name} {(current.get(name) or '').strip()} -> {text}")
                continue
            if error.errno == SYMLINK:
                return OperationResult(op, "failed", symlink_refused(target), attempts)
            if error.errno in GONE and not os.path.isdir(directory):
                log.info("cgroup %s vanished while %s was written", directory, name)
                return OperationResult(
                    op, "vanished", f"cgroup {directory} no longer exists", attempts, "; ".join(done)
                )
            message = self._io_error(error, "writing", directory, name, text, tries)
            if done:
                message += f" (already written: {'; '.join(done)})"
            return OperationResult(op, "failed", message, attempts, "; ".join(done))
        return OperationResult(op, "applied", None, attempts, "; ".join(done))

    def _unsupported(self, op: WriteCgroup, what: str, reason: str) -> OperationResult:
        key = (what, op.file)
        if key not in self._unsupported_logged:
            self._unsupported_logged.add(key)
            log.info("skipping writes of %s: %s (logged once)", op.file, reason)
        return OperationResult(op, "skipped", reason)

    def _io_error(
        self, exc: OSError, doing: str, directory: str, name: str, value: str | None, tries: int = 1
    ) -> str:
        target = os.path.join(directory, name)
        code = exc.errno
        if value is not None and name in CPUSET_FILES and code in CPUSET_ERRORS:
            # cgroup v1 cpusets answer with errnos of their own (kernel cpuset1_validate_change):
            # EACCES here is "not within the parent", not a permission problem.
            return (
                f"kernel rejected {value!r} for {target} ({errno_name(exc)}): "
                f"{CPUSET_ERRORS[code]}{self._parent_has(directory, name)}"
            )
        if code == errno.EINVAL and value is not None:
            return f"kernel rejected {value!r} for {target} (EINVAL){self._einval_hint(name)}"
        if code == errno.EBUSY:
            why = ""
            if name.startswith("memory."):
                why = ": usage is above the new limit and could not be reclaimed"
            return f"{target} stayed busy (EBUSY) after {tries} attempts writing {value!r}{why}"
        if code in DENIED:
            return f"{doing} {target}: {denied_hint(self.layout.root)} ({errno_name(exc)})"
        with_value = f" with {value!r}" if value is not None else ""
        return f"{doing} {target}{with_value}: {exc.strerror} ({errno_name(exc)})"

    def _parent_has(self, directory: str, name: str) -> str:
        """The parent's value of a cpuset file, read on the spot: what the kernel compared against."""
        parent = os.path.dirname(directory)
        try:
            have = self.io.read(os.path.join(parent, name)).strip()
        except OSError:
            return ""
        return f"; the parent {parent} has {name}={have or '(empty)'}"

    @staticmethod
    def _einval_hint(name: str) -> str:
        if name in ("cpu.shares", "cpu.weight"):
            return ": not a valid number, or cpu.idle is 1 in that cgroup (the kernel then refuses shares)"
        if name.startswith("cpu.cfs") or name == "cpu.max":
            return (
                ": a CFS quota must be >= 1000 us, and quota/period may not exceed the parent's "
                "nor fall below a child's"
            )
        return ""
