"""The current values of the files qosd manages (``cpuset.cpus``, ``cpu.shares``, ...), for the
planner's diff.

The collector observes every (cgroup, file) pair its policy generation may write. With ``every`` > 1
the pairs are staggered over the ticks (a cgroup's files together), and a value is reported as last
read, or as qosd last wrote it, in between; see ``Observer``. Reads go through the collector's
TickReader, or through the cgroup adapter (``translate``), which reads each logical file from the
host's own cgroup version.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from engine.cgroups.files import SHARE_FILES
from engine.cgroups.mounts import CgroupLayout
from engine.cgroups.weight import WeightFormula
from engine.sources.files import Reader

NO_VALUES: Mapping[str, str] = MappingProxyType({})


class _Seen:
    __slots__ = ("file", "phase", "value")

    def __init__(self, file: str, phase: int) -> None:
        self.file = file
        self.phase = phase
        self.value: str | None = None


Pair = tuple[str, str]
Translate = Callable[[Mapping[str, Sequence[str]], WeightFormula | None], Mapping[str, Mapping[str, str]]]
"""The cgroup adapter's ``observe``: logical file names per path, and the weight formula to read
share files of the other cgroup version by."""


class _Layout:
    """The pairs of one ``observe`` list, grouped once: by path (to build the output) and by the tick
    they are due in (so a staggered tick touches only its share)."""

    __slots__ = ("buckets", "every", "groups", "pairs")

    def __init__(self, pairs: Sequence[Pair], every: int, seen: Mapping[Pair, _Seen]) -> None:
        self.pairs = pairs
        self.every = every
        self.groups: dict[str, list[tuple[str, _Seen]]] = {}
        self.buckets: list[list[tuple[Pair, _Seen]]] = [[] for _ in range(every)]
        for pair in pairs:
            s = seen[pair]
            group = self.groups.setdefault(pair[0], [])
            if all(f != pair[1] for f, _ in group):
                group.append((pair[1], s))
                # due when (tick + phase) % every == 0
                self.buckets[-s.phase % every].append((pair, s))


class Observer:
    """Current values of (cgroup path, file) pairs, stripped, for the planner's diff.

    Files that do not exist (cpu.idle before Linux 5.15, a cgroup that just vanished) are absent.
    With ``every`` > 1 each pair is re-read every ``every`` ticks (staggered by path: a cgroup's files
    are read together) and its last value is reported in between. So a value changed behind qosd's
    back is seen within ``every`` ticks. ``note`` records what qosd itself just wrote, so a write is
    never followed by a stale observation that would plan it again; ``invalidate`` makes a pair due
    at the next tick (a write that failed or found the cgroup gone: the kernel's value is unknown).
    A pair seen for the first time is read at once. The default re-reads every tick.

    A path none of whose files gave a value is checked for its directory (``exists``): ``absent``
    lists those that have none, so the planner writes nothing into a cgroup that is not there
    (a container not started yet, or gone) rather than failing in the adapter.

    A steady tick costs its due reads plus a copy of the path index: the grouping of the pairs is
    kept while the caller hands over the same list object (the collector does while workloads and
    tracked files are unchanged; a tuple, as a list could have changed in place), and a path's values
    are rebuilt only when one of them changed."""

    def __init__(
        self,
        fs: CgroupLayout,
        reader: Reader,
        every: int = 1,
        translate: Translate | None = None,
        exists: Callable[[str], bool] = os.path.isdir,
    ) -> None:
        self.fs = fs
        self.exists = exists
        self.reader = reader
        self.every = every
        # The cgroup adapter's observe(): reads the host files of logical names (cpu.shares on a v2
        # host reads cpu.weight) so the planner compares like with like. Without it: names as given.
        self.translate = translate
        self._formula: WeightFormula | None = None  # the formula the share files were last read by
        self._seen: dict[Pair, _Seen] = {}
        self._layout: _Layout | None = None
        self._forced: dict[Pair, _Seen] = {}  # due at the next observe whatever their phase
        self._dirty: set[str] = set()  # paths whose values changed since ``_out`` was built
        self._out: dict[str, dict[str, str]] = {}
        self._view: Mapping[str, Mapping[str, str]] = MappingProxyType(self._out)
        self._absent: set[str] = set()
        self._absent_view: frozenset[str] = frozenset()

    @property
    def absent(self) -> frozenset[str]:
        """The observed cgroup paths whose directory was missing at their last read; the same object
        while unchanged."""
        return self._absent_view

    def note(self, path: str, file: str, value: str) -> None:
        seen = self._seen.get((path, file))
        if seen is not None:
            text = value.strip()
            if text != seen.value:
                seen.value = text
                self._dirty.add(path)

    def invalidate(self, path: str, file: str) -> None:
        """Read this pair at the next observe (its last value stays reported until then)."""
        seen = self._seen.get((path, file))
        if seen is not None:
            self._forced[path, file] = seen

    def observe(
        self, pairs: Sequence[Pair], tick: int = 0, formula: WeightFormula | None = None
    ) -> Mapping[str, Mapping[str, str]]:
        """The current values of ``pairs``; share files translated from the other cgroup version
        read by ``formula``, the caller's policy generation (a new formula re-reads them at once)."""
        every = max(self.every, 1)
        layout = self._layout
        if layout is None or layout.pairs is not pairs or layout.every != every or isinstance(pairs, list):
            layout = self._relayout(pairs, every)
        if formula != self._formula:
            self._formula = formula
            if self.translate is not None:
                self._forced.update((p, s) for p, s in self._seen.items() if p[1] in SHARE_FILES)
        due = self._forced
        self._forced = {}
        if every == 1:
            for group_path, group in layout.groups.items():
                for file, seen in group:
                    due[group_path, file] = seen
        else:
            for pair, seen in layout.buckets[tick % every]:
                due[pair] = seen
        if due:
            if self._absent:  # a read of an absent path checks its directory again
                self._dirty.update(path for path, _ in due if path in self._absent)
            self._read(due)
        if self._dirty:
            out = dict(self._out)
            groups = layout.groups
            absent = self._absent
            before = len(absent)
            for path in self._dirty:
                group = groups.get(path) or []
                values = {f: s.value for f, s in group if s.value is not None}
                if values:
                    out[path] = values
                    absent.discard(path)
                else:
                    out.pop(path, None)
                    if group and not self.exists(os.path.dirname(group[0][1].file)):
                        absent.add(path)
                    else:
                        absent.discard(path)
            if len(absent) != before or (before and absent != self._absent_view):
                self._absent_view = frozenset(absent)
            self._dirty.clear()
            self._out = out
            self._view = MappingProxyType(out)
        # Never mutated once handed out: a changed path gets a new dict in a new outer one. So an
        # unchanged observation is the same object as last tick's, which consumers may rely on.
        return self._view

    def _relayout(self, pairs: Sequence[Pair], every: int) -> _Layout:
        """Group a new list of pairs; pairs seen before keep their values, new ones are read now,
        pairs no longer asked are forgotten."""
        known = self._seen
        seen: dict[Pair, _Seen] = {}
        phases: dict[str, int] = {}
        for pair in pairs:
            path = pair[0]
            phase = phases.get(path)
            if phase is None:
                phase = phases[path] = zlib.crc32(path.encode()) % every if every > 1 else 0
            s = known.get(pair)
            if s is None:
                s = _Seen(self.fs.file(*pair), phase)
                self._forced[pair] = s  # first sight: read now
            s.phase = phase
            seen[pair] = s
        self._seen = seen
        self._forced = {p: s for p, s in self._forced.items() if p in seen}
        layout = self._layout = _Layout(pairs, every, seen)
        # Rebuild the output for the paths asked now (and drop those no longer asked).
        self._out = {}
        self._view = MappingProxyType(self._out)
        self._dirty = set(layout.groups)
        self._absent &= self._dirty
        return layout

    def _read(self, due: Mapping[Pair, _Seen]) -> None:
        dirty = self._dirty
        if self.translate is not None:
            asked: dict[str, list[str]] = {}
            for path, file in due:
                asked.setdefault(path, []).append(file)
            found = self.translate(asked, self._formula)
            for (path, file), s in due.items():
                value = found.get(path, NO_VALUES).get(file)
                if value != s.value:
                    s.value = value
                    dirty.add(path)
            return
        read = self.reader.read
        for (path, _), s in due.items():
            text = read(s.file)
            value = text.strip() if text is not None else None
            if value != s.value:
                s.value = value
                dirty.add(path)
