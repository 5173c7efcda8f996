"""The resctrl adapter: what ``/sys/fs/resctrl`` offers, and the writes that make groups true.

It decides nothing: which groups exist, their masks and their members come from the planner. It
observes and executes:

- **Capabilities** from ``info/`` (kernel ``Documentation/filesystems/resctrl.rst``, ecosystem.md
  §5.1): ``L3/cbm_mask``, ``min_cbm_bits``, ``shareable_bits``, ``sparse_masks``; ``MB/bandwidth_gran``,
  ``min_bandwidth``, ``delay_linear``; ``num_closids`` as the smallest over the enabled resources (the
  kernel's rule); cache and MB domain ids from the default group's ``schemata``; the vendor from
  ``/proc/cpuinfo``. They do not change while mounted, so they are read once; the groups' schemata
  (observed state) are read on every :meth:`ResctrlAdapter.info`. With CDP on (``L3CODE``/``L3DATA``
  instead of ``L3``) no L3 mask is offered, because the strategies write plain ``L3`` lines.
- **Groups**: created only while a CLOSID is free (``num_closids`` counts the default group), removed
  on request. An existing group is left alone.
- **Schemata**: only the domains that differ from what the group holds now are written (the kernel
  keeps every domain a write does not name), one resource line per write, newline-terminated as the
  kernel requires.
- **Tasks**: the member cgroups' thread ids are read fresh, those already in the group are skipped,
  and each remaining id is its own ``write(2)``: with a comma list the kernel stops at the first
  failure, and a task that exits meanwhile (ESRCH) is normal churn, not an error.
- **Errors**: after a failed write the kernel's reason is in ``info/last_cmd_status`` ("mask f7 has
  non-consecutive 1-bits", "Out of CLOSIDs"); it is read and put in the result.
- **Not mounted**: one clear degraded status, logged once (and once more if it comes back), not a
  failure per operation per tick. :meth:`ResctrlAdapter.info` then returns an unmounted
  ``ResctrlInfo`` and the planner holds resctrl intents with that reason.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

from engine.adapters.fsio import (
    DENIED,
    GONE,
    SYMLINK,
    FileIO,
    PathEscape,
    Retry,
    check_name,
    confine,
    denied_hint,
    errno_name,
    symlink_refused,
)
from engine.adapters.result import OperationResult
from engine.features.resctrl.strategy import (
    RESERVED_GROUP_NAMES,
    ROOT_GROUP,
    Capabilities,
    changed_lines,
    parse_schemata,
)
from engine.model.facts import NO_RESCTRL, ResctrlInfo
from engine.model.operations import (
    AssignTasks,
    CreateResctrlGroup,
    Operation,
    RemoveResctrlGroup,
    WriteSchemata,
)

log = logging.getLogger("qosd.adapters.resctrl")

CONTROL_RESOURCES = ("L3", "L3CODE", "L3DATA", "L2", "L2CODE", "L2DATA", "MB", "SMBA")
NOT_GROUPS = frozenset({"info", "mon_groups", "mon_data"})
RESCTRL_OPS = (CreateResctrlGroup, RemoveResctrlGroup, WriteSchemata, AssignTasks)

TasksOf = Callable[[str], Iterable[int]]


class ResctrlAdapter:
    """``tasks_of(cgroup path)`` lists a cgroup's thread ids (``CgroupAdapter.tasks``); without
    it AssignTasks cannot run and fails saying so."""

    def __init__(
        self,
        root: str | Path = "/sys/fs/resctrl",
        *,
        cpuinfo: str | Path = "/proc/cpuinfo",
        tasks_of: TasksOf | None = None,
        retry: Retry | None = None,
        io: FileIO | None = None,
    ):
        self.root = os.path.realpath(root)
        self.cpuinfo = str(cpuinfo)
        self.tasks_of = tasks_of
        self.retry = retry or Retry()
        self.io = io or FileIO()
        self.writes = 0
        self._caps: ResctrlInfo | None = None
        self._degraded: str | None = None
        self._absent = replace(NO_RESCTRL, root=self.root)

    # ---------------------------------------------------------------- mount and capabilities

    @property
    def degraded(self) -> str | None:
        """Why resctrl cannot be used on this node, or None when it can."""
        return self._degraded

    def _mounted(self) -> bool:
        ok = os.path.isdir(os.path.join(self.root, "info")) and os.path.isfile(
            os.path.join(self.root, "schemata")
        )
        if ok and self._degraded is not None:
            log.info("resctrl is now mounted at %s; L3/MB control resumes", self.root)
            self._degraded = None
        elif not ok:
            self._caps = None
            if self._degraded is None:
                self._degraded = (
                    f"resctrl is not mounted at {self.root} (no RDT/PQoS hardware, or it needs "
                    f"`mount -t resctrl resctrl {self.root}`); L3 and memory bandwidth rules are held"
                )
                log.warning("%s", self._degraded)
        return ok

    def _info_file(self, *parts: str) -> str | None:
        try:
            return self.io.read(os.path.join(self.root, "info", *parts)).strip()
        except OSError:
            return None

    def _info_int(self, default: int, *parts: str) -> int:
        text = self._info_file(*parts)
        try:
            return int(text) if text is not None else default
        except ValueError:
            return default

    def _vendor(self) -> str:
        try:
            text = self.io.read(self.cpuinfo)
        except OSError:
            return "intel"
        for line in text.splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() == "vendor_id":
                return Capabilities.vendor_of(value)
        return "intel"

    def _read_caps(self) -> ResctrlInfo:
        present = [r for r in CONTROL_RESOURCES if os.path.isdir(os.path.join(self.root, "info", r))]
        closids = [self._info_int(0, r, "num_closids") for r in present]
        root_schemata = parse_schemata(self._read_schemata(self.root) or "")
        has_l3 = "L3" in present
        has_mb = "MB" in present
        return ResctrlInfo(
            root=self.root,
            mounted=True,
            cbm_mask=(self._info_file("L3", "cbm_mask") or "") if has_l3 else "",
            min_cbm_bits=self._info_int(1, "L3", "min_cbm_bits") if has_l3 else 1,
            num_closids=min(closids) if closids else 0,
            mb_granularity=self._info_int(10, "MB", "bandwidth_gran") if has_mb else 10,
            mb_min=self._info_int(10, "MB", "min_bandwidth") if has_mb else 10,
            vendor=self._vendor(),
            cache_ids=tuple(sorted(root_schemata.get("L3", {}))) if has_l3 else (),
            mb_domains=tuple(sorted(root_schemata.get("MB", {}))) if has_mb else (),
            sparse_masks=self._info_int(0, "L3", "sparse_masks") == 1 if has_l3 else False,
            shareable_bits=(self._info_file("L3", "shareable_bits") or "") if has_l3 else "",
            delay_linear=self._info_int(1, "MB", "delay_linear") == 1 if has_mb else True,
        )

    def info(self) -> ResctrlInfo:
        """Capabilities and every group's schemata now (``"/"`` is the default group)."""
        if not self._mounted():
            return self._absent
        if self._caps is None:
            self._caps = self._read_caps()
        return replace(self._caps, groups=MappingProxyType(self._groups()))

    def _group_names(self) -> list[str]:
        try:
            entries = list(os.scandir(self.root))
        except OSError:
            return []
        return sorted(e.name for e in entries if e.is_dir(follow_symlinks=False) and e.name not in NOT_GROUPS)

    def _groups(self) -> dict[str, str]:
        out: dict[str, str] = {}
        root = self._read_schemata(self.root)
        if root is not None:
            out[ROOT_GROUP] = root
        for name in self._group_names():
            text = self._read_schemata(os.path.join(self.root, name))
            if text is not None:
                out[name] = text
        return out

    def _read_schemata(self, directory: str) -> str | None:
        try:
            return self.io.read(os.path.join(directory, "schemata"))
        except OSError:
            return None

    def _last_cmd_status(self) -> str:
        status = self._info_file("last_cmd_status")
        return f"; kernel says: {status}" if status and status != "ok" else ""

    def _group_dir(self, group: str) -> str:
        if group == ROOT_GROUP:
            return self.root
        check_name(group, "resctrl group")
        if group in RESERVED_GROUP_NAMES or group in NOT_GROUPS:
            raise PathEscape(f"refused resctrl group {group!r}: the name is taken by resctrl itself")
        return confine(self.root, group)

    # ---------------------------------------------------------------- applying

    def apply(self, operations: Sequence[Operation]) -> list[OperationResult]:
        return [self.apply_one(op) for op in operations]

    def apply_one(self, op: Operation) -> OperationResult:
        if not isinstance(op, RESCTRL_OPS):
            return OperationResult(op, "skipped", f"{op.kind} is not a resctrl operation")
        if not self._mounted():
            return OperationResult(op, "skipped", self._degraded)
        try:
            directory = self._group_dir(op.group)
        except PathEscape as exc:
            return OperationResult(op, "failed", str(exc))
        if isinstance(op, CreateResctrlGroup):
            return self._create(op, directory)
        if isinstance(op, RemoveResctrlGroup):
            return self._remove(op, directory)
        if isinstance(op, WriteSchemata):
            return self._schemata(op, directory)
        return self._assign(op, directory)

    def _failure(self, op: Operation, doing: str, exc: OSError, tries: int) -> OperationResult:
        if exc.errno == SYMLINK:
            message = f"{doing}: {symlink_refused(exc.filename or self.root)}"
        elif exc.errno in DENIED:
            message = f"{doing}: {denied_hint(self.root)} ({errno_name(exc)})"
        elif exc.errno == errno.EBUSY:
            message = f"{doing}: still busy (EBUSY) after {tries} attempts"
        else:
            message = f"{doing}: {exc.strerror} ({errno_name(exc)})"
        return OperationResult(op, "failed", message + self._last_cmd_status(), tries)

    def _create(self, op: CreateResctrlGroup, directory: str) -> OperationResult:
        if op.group == ROOT_GROUP or os.path.isdir(directory):
            return OperationResult(op, "unchanged")
        if self._caps is None:
            self._caps = self._read_caps()
        groups = self._group_names()
        limit = self._caps.num_closids
        if 1 + len(groups) >= limit:
            held = ", ".join(groups) or "none"
            return OperationResult(
                op,
                "failed",
                f"no CLOSID left for resctrl group {op.group}: {limit} in use by the default group and "
                f"{len(groups)} others ({held}); remove a group or ask for fewer classes",
            )

        def mkdir() -> None:
            self.io.mkdir(directory)

        tries, error = self.retry.run(mkdir)
        if error is None:
            self.writes += 1
            return OperationResult(op, "applied", None, tries, f"created {directory}")
        if error.errno == errno.EEXIST:
            return OperationResult(op, "unchanged", None, tries)
        if error.errno == errno.ENOSPC:
            return OperationResult(
                op,
                "failed",
                f"creating {directory}: the kernel has no CLOSID or RMID left (ENOSPC)"
                + self._last_cmd_status(),
                tries,
            )
        return self._failure(op, f"creating {directory}", error, tries)

    def _remove(self, op: RemoveResctrlGroup, directory: str) -> OperationResult:
        if op.group == ROOT_GROUP:
            return OperationResult(op, "failed", "refused to remove the default resctrl group")
        if not os.path.isdir(directory):
            return OperationResult(op, "unchanged")

        def rmdir() -> None:
            self.io.rmdir(directory)

        tries, error = self.retry.run(rmdir)
        if error is None:
            self.writes += 1
            return OperationResult(op, "applied", None, tries, f"removed {directory}")
        if error.errno in GONE:
            return OperationResult(op, "unchanged", None, tries)
        return self._failure(op, f"removing {directory}", error, tries)

    def _schemata(self, op: WriteSchemata, directory: str) -> OperationResult:
        resource, sep, domains = op.line.strip().partition(":")
        if not sep or not resource.strip() or not domains.strip():
            return OperationResult(op, "failed", f"{op.line!r} is not a schemata line like 'L3:0=ff;1=ff'")
        target = os.path.join(directory, "schemata")
        try:
            current = self.io.read(target)
        except OSError as exc:
            if exc.errno in GONE and not os.path.isdir(directory):
                log.info("resctrl group %s vanished before its schemata could be written", op.group)
                return OperationResult(op, "vanished", f"resctrl group {directory} no longer exists")
            return self._failure(op, f"reading {target}", exc, 0)
        lines = changed_lines(current, {resource.strip(): domains.strip()})
        if not lines:
            return OperationResult(op, "unchanged")
        attempts = 0
        for line in lines:

            def write(line: str = line) -> None:
                self.io.write(target, line + "\n")

            tries, error = self.retry.run(write)
            attempts += tries
            if error is not None:
                if error.errno in GONE and not os.path.isdir(directory):
                    return OperationResult(op, "vanished", _gone(directory), attempts)
                if error.errno == errno.EINVAL:
                    return OperationResult(
                        op,
                        "failed",
                        f"kernel rejected {line!r} for {target} (EINVAL){self._last_cmd_status()}",
                        attempts,
                    )
                failed = self._failure(op, f"writing {line!r} to {target}", error, attempts)
                return failed
            self.writes += 1
        return OperationResult(op, "applied", None, attempts, "wrote " + ", ".join(lines))

    def _assign(self, op: AssignTasks, directory: str) -> OperationResult:
        if self.tasks_of is None:
            return OperationResult(op, "failed", "no cgroup reader configured: cannot list the tasks to move")
        target = os.path.join(directory, "tasks")
        try:
            have = {int(t) for t in self.io.read(target).split() if t.isdigit()}
        except OSError as exc:
            if exc.errno in GONE and not os.path.isdir(directory):
                return OperationResult(op, "vanished", f"resctrl group {directory} no longer exists")
            return self._failure(op, f"reading {target}", exc, 0)
        wanted: set[int] = set()
        for cgroup in op.cgroups:
            wanted.update(self.tasks_of(cgroup))
        moved = gone = attempts = 0
        for tid in sorted(wanted - have):
            attempts += 1
            try:
                self.io.write(target, str(tid), append=True)
            except OSError as exc:
                if exc.errno == errno.ESRCH:
                    gone += 1  # exited between listing and moving: churn, not an error
                    continue
                if exc.errno in GONE and not os.path.isdir(directory):
                    return OperationResult(op, "vanished", _gone(directory), attempts, _moved(moved, gone))
                failed = self._failure(op, f"moving task {tid} into {target}", exc, attempts)
                return replace(failed, detail=_moved(moved, gone))
            moved += 1
            self.writes += 1
        return OperationResult(op, "applied" if moved else "unchanged", None, attempts, _moved(moved, gone))


def _gone(directory: str) -> str:
    return f"resctrl group {directory} no longer exists"


def _moved(moved: int, gone: int) -> str:
    parts = [f"moved {moved} task{'s' if moved != 1 else ''}"] if moved else []
    if gone:
        parts.append(f"{gone} exited before the move")
    return ", ".join(parts)
