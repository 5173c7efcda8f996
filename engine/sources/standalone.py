"""Standalone mode: workloads are cgroups under configured roots, classified by a small workloads file.

Without Kubernetes there are no pods, so each cgroup a root pattern matches is one workload (with one
container, "main", in the same cgroup). The first entry of the workloads file (format:
schemas/workloads.schema.json, documented in docs/standalone.md) whose path matches gives it a name,
labels and annotations, priority, requests and limits. Classification is then the policy's own: the
entry's labels and annotations meet the same class matchers a pod's would, so the bundled policies
work unchanged. A cgroup no entry matches gets the default mapping by name, which makes the bundled
default policy useful on a plain Linux host with no file at all:

- ``be``, ``be-*``, ``be_*``, ``*-be``, ``batch*``, ``*-batch``, ``offline*``, ``*-offline``,
  ``reclaim*``, ``besteffort*``, ``best-effort*`` -> reclaimed_cores / BE;
- ``system*``, ``*-system`` -> system_cores / SYSTEM;
- anything else -> shared_cores / LS.

Identity: a workload's uid is its cgroup path, its namespace the parent path and its name the last
component, so ``namespace/name`` (the key rules, timers and evictions use) is the cgroup path. The
Workload object of a cgroup is built once and handed back unchanged while the cgroup exists, so
classification and pod facts stay cached across ticks.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase, translate
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from jsonschema import Draft202012Validator

from engine.cgroups.mounts import CgroupLayout
from engine.config.errors import Location, PolicyError, Problem
from engine.config.load import read_file
from engine.config.schema_check import Locator, inline_refs, validation_problems
from engine.config.unitcheck import schema_file, unit_problems
from engine.model.facts import Container, ResctrlInfo, Workload
from engine.model.units import parse_quantity
from engine.resources import data_dir
from engine.sources.collector import CollectorOptions, NodeCollector
from engine.sources.observer import Translate

KIND = "StandaloneWorkloads"
DEFAULT_ROOTS = ("qosd*/*",)
KATALYST_QOS = "katalyst.kubewharf.io/qos_level"
KOORDINATOR_QOS = "koordinator.sh/qosClass"

# qos shorthand -> (Katalyst qos_level, Koordinator QoS class)
QOS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "dedicated_cores": ("dedicated_cores", "LSE"),
        "LSE": ("dedicated_cores", "LSE"),
        "shared_cores": ("shared_cores", "LS"),
        "LS": ("shared_cores", "LS"),
        "LSR": ("shared_cores", "LSR"),
        "reclaimed_cores": ("reclaimed_cores", "BE"),
        "BE": ("reclaimed_cores", "BE"),
        "system_cores": ("system_cores", "SYSTEM"),
        "SYSTEM": ("system_cores", "SYSTEM"),
    }
)
DEFAULT_NAMES: tuple[tuple[tuple[str, ...], str], ...] = (
    (
        (
            "be",
            "be-*",
            "be_*",
            "*-be",
            "batch*",
            "*-batch",
            "offline*",
            "*-offline",
            "reclaim*",
            "besteffort*",
            "best-effort*",
        ),
        "BE",
    ),
    (("system*", "*-system"), "SYSTEM"),
)


def default_qos(name: str) -> str:
    """The default mapping: the Koordinator class a cgroup's last path component suggests."""
    lowered = name.lower()
    for patterns, qos in DEFAULT_NAMES:
        if any(fnmatchcase(lowered, p) for p in patterns):
            return qos
    return "LS"


# ------------------------------------------------------------------------------------------ config


@dataclass(frozen=True)
class Entry:
    """One ``workloads`` entry of the file (see schemas/workloads.schema.json)."""

    path: str
    name: str = "{base}"
    namespace: str | None = None
    qos: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    priority: int | None = None
    priority_class_name: str = ""
    requests: Mapping[str, float] = field(default_factory=dict)
    limits: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class StandaloneConfig:
    roots: tuple[str, ...] = ()
    entries: tuple[Entry, ...] = ()
    default_mapping: bool = True
    namespace: str | None = None
    node_name: str | None = None
    node_labels: Mapping[str, str] = field(default_factory=dict)
    source: str = "<built-in defaults>"

    @property
    def effective_roots(self) -> tuple[str, ...]:
        if self.roots:
            return self.roots
        return tuple(e.path for e in self.entries) or DEFAULT_ROOTS


@cache
def workloads_validator() -> Draft202012Validator:
    with (data_dir("schemas") / "workloads.schema.json").open(encoding="utf-8") as fh:
        schema: dict[str, Any] = json.load(fh)
    return Draft202012Validator(inline_refs(schema))


def load_workloads(path: Path, fs: CgroupLayout | None = None) -> StandaloneConfig:
    """The workloads file at ``path``: one YAML/JSON mapping, schema-checked with located errors;
    with ``fs``, its root and entry paths are checked against that hierarchy too."""
    docs = read_file(path)
    if len(docs) != 1 or not isinstance(docs[0].data, dict):
        raise PolicyError(
            [
                Problem(
                    Location(str(path), 1, 1),
                    f"a workloads file holds exactly one YAML or JSON mapping (kind: {KIND})",
                )
            ]
        )
    doc = docs[0]
    problems = validation_problems(workloads_validator(), doc.data, doc.locate)
    problems = problems or unit_problems(schema_file("workloads.schema.json"), doc.data, doc.locate)
    if problems:
        raise PolicyError(problems)
    config = config_from_dict(doc.data, str(path))
    problems = pattern_problems(config, fs, doc.locate) if fs is not None else []
    if problems:
        raise PolicyError(problems)
    return config


def _resources(raw: Mapping[str, Any] | None) -> Mapping[str, float]:
    return MappingProxyType({str(k): parse_quantity(v) for k, v in (raw or {}).items()})


def config_from_dict(data: Mapping[str, Any], source: str = "<dict>") -> StandaloneConfig:
    """A config from a workloads document that passed the schema and the unit bounds (as
    load_workloads checks it): its quantities parse."""
    node = data.get("node") or {}
    return StandaloneConfig(
        roots=tuple(str(r) for r in data.get("roots") or ()),
        entries=tuple(
            Entry(
                path=str(e["path"]),
                name=str(e.get("name", "{base}")),
                namespace=e.get("namespace"),
                qos=e.get("qos"),
                labels=MappingProxyType(dict(e.get("labels") or {})),
                annotations=MappingProxyType(dict(e.get("annotations") or {})),
                priority=e.get("priority"),
                priority_class_name=str(e.get("priorityClassName", "")),
                requests=_resources(e.get("requests")),
                limits=_resources(e.get("limits")),
            )
            for e in data.get("workloads") or ()
        ),
        default_mapping=bool(data.get("defaultMapping", True)),
        namespace=data.get("namespace"),
        node_name=node.get("name"),
        node_labels=MappingProxyType(dict(node.get("labels") or {})),
        source=source,
    )


# ------------------------------------------------------------------------------------------ paths


class PatternError(ValueError):
    """A root or entry pattern that cannot name cgroups under the cgroup root."""


def check_pattern(pattern: str) -> str:
    """The checks a pattern needs before the hierarchy is known: it names something, holds no NUL
    and no ``..`` component (a pattern may not climb out of the cgroup root)."""
    if not pattern.strip("/ "):
        raise PatternError(f"cgroup pattern {pattern!r} names no cgroup; write e.g. 'qosd*/*'")
    if "\0" in pattern:
        raise PatternError(f"cgroup pattern {pattern!r} contains a NUL byte")
    if any(part == ".." for part in pattern.strip().split("/")):
        raise PatternError(f"cgroup pattern {pattern!r} contains '..'; name cgroups below the cgroup root")
    return pattern


def relative_pattern(fs: CgroupLayout, pattern: str) -> str:
    """A root or entry pattern as a cgroup path relative to the root; PatternError when it escapes it.

    Absolute patterns may name the controller directory on v1 (/sys/fs/cgroup/cpu/qosd-demo/*)."""
    text = check_pattern(pattern).strip()
    if not text.startswith("/"):
        return text.strip("/")
    text = text.rstrip("/")
    below = fs.relative(text)
    if below:
        return below
    if fs.version == 1 and text.startswith(fs.root + "/"):
        rest = text[len(fs.root) + 1 :]
        head, _, tail = rest.partition("/")
        if head in {os.path.basename(m) for m in fs.v1.values()} or "," in head:
            if not tail:
                raise PatternError(f"cgroup pattern {pattern!r} names a controller mount, not cgroups in it")
            return tail
        return rest
    raise PatternError(
        f"cgroup pattern {pattern!r} is outside the cgroup root {fs.root}; write it relative to the "
        f"root (e.g. 'qosd-demo/*') or as an absolute path under {fs.root}"
    )


def pattern_problems(config: StandaloneConfig, fs: CgroupLayout, locate: Locator) -> list[Problem]:
    """Each root and entry path of a workloads file that cannot name cgroups under ``fs``, located
    at its line and column (the schema already refused ``..``; an absolute path needs the root)."""
    out: list[Problem] = []
    for key, patterns in (("roots", config.roots), ("workloads", tuple(e.path for e in config.entries))):
        for i, pattern in enumerate(patterns):
            try:
                relative_pattern(fs, pattern)
            except PatternError as exc:
                where: tuple[str | int, ...] = (key, i) if key == "roots" else (key, i, "path")
                out.append(Problem(locate(where, False), str(exc)))
    return out


def _matches(pattern: Sequence[str], parts: Sequence[str]) -> bool:
    return len(pattern) == len(parts) and all(fnmatchcase(p, g) for p, g in zip(parts, pattern, strict=True))


def discover(base: str, patterns: Sequence[Sequence[str]], kinds: Kinds | None = None) -> list[str]:
    """Cgroup paths below ``base`` that match any pattern (per component; symlinks are not followed).
    ``kinds`` remembers listings and which names are directories between calls (see ``Kinds``): a
    discovery whose every listing is unchanged returns the same list object as the last one."""
    kinds = kinds if kinds is not None else Kinds()
    found: set[str] = set()
    steps: list[tuple[str, ...]] = []
    for pattern in patterns:
        level = [""]
        for glob in pattern:
            nxt: list[str] = []
            for rel in level:
                directory = f"{base}/{rel}" if rel else base
                if not any(ch in glob for ch in "*?["):
                    here = f"{directory}/{glob}"
                    is_dir = os.path.isdir(here) and not os.path.islink(here)
                    matched: tuple[str, ...] = ((f"{rel}/{glob}" if rel else glob),) if is_dir else ()
                else:
                    matched = kinds.matching(directory, glob, rel)
                steps.append(matched)
                nxt.extend(matched)
            level = nxt
        found.update(level)
    return kinds.result((base, tuple(map(tuple, patterns))), steps, found)


_Patterns = tuple[str, tuple[tuple[str, ...], ...]]  # a discovery's base and its patterns


class Kinds:
    """Which names of a directory are subdirectories (not following symlinks), learned once per
    name. Discovery lists the workload directories every tick, and the names that matter rarely
    change: only a name not seen before costs an ``lstat``; the rest is set arithmetic, with no
    Python frame per entry. A cgroup hierarchy never turns a name into another kind (only
    directories can be created in it). Elsewhere (a test tree) a name deleted and recreated as
    another kind between two listings changes the directory's mtime, and then the directory is
    learned again; so is every directory every ``relearn`` calls, for timestamps too coarse to
    tell.

    It also keeps each directory's last listing: a listing equal to the last one (same names, same
    mtime) reuses the last match, so a steady node costs one ``listdir`` and one list comparison per
    directory (measured at 500 cgroups: 0.9 ms per discovery before, see bench/RESULTS.md). cgroupfs
    does not move a directory's mtime when a child is created or removed; the listing itself
    tells."""

    def __init__(self, relearn: int = 64) -> None:
        self.relearn = max(relearn, 1)
        self.calls = 0
        # directory -> (its mtime when learned, subdirectories, other names)
        self._known: dict[str, tuple[int, set[str], set[str]]] = {}
        # (directory, glob, rel) -> (the listing, the directory's mtime, the matched paths, sorted)
        self._listings: dict[tuple[str, str, str], tuple[list[str], int, tuple[str, ...]]] = {}
        # (base, patterns) -> (the matched paths of each listing, by identity; the sorted result)
        self._results: dict[_Patterns, tuple[list[tuple[str, ...]], list[str]]] = {}

    def matching(self, directory: str, glob: str, rel: str) -> tuple[str, ...]:
        """The subdirectories of ``directory`` whose names match ``glob``, as paths under ``rel``,
        sorted; empty when it cannot be listed. A listing equal to the last one (and the directory's
        mtime unchanged) gives the same tuple object without matching or set arithmetic again: the
        steady state of a node is the same few hundred names every tick, and comparing two lists
        of names is a C loop."""
        try:
            listing = os.listdir(directory)
            mtime = os.stat(directory).st_mtime_ns
        except OSError:
            return ()
        self.calls += 1
        if self.calls % self.relearn == 0:
            self._known.clear()
            self._listings.clear()
        key = (directory, glob, rel)
        last = self._listings.get(key)
        if last is not None and last[1] == mtime and last[0] == listing:
            return last[2]
        subdirs = self.subdirectories(directory, set(filter(_glob(glob), listing)))
        paths = tuple(sorted(map(f"{rel}/".__add__, subdirs) if rel else subdirs))
        self._listings[key] = (listing, mtime, paths)
        return paths

    def result(self, key: _Patterns, steps: list[tuple[str, ...]], found: set[str]) -> list[str]:
        """The sorted paths of one discovery; the last call's list when every listing gave the same
        tuple as then (so a caller comparing with its last result compares a list with itself)."""
        last = self._results.get(key)
        if last is not None and last[0] == steps:  # the same tuples: compared by identity first
            return last[1]
        found.discard("")  # an empty pattern names the base itself, which is no workload
        out = sorted(found)
        self._results[key] = (steps, out)
        return out

    def subdirectories(self, directory: str, names: set[str]) -> set[str]:
        """The subdirectories among ``names`` (entries of ``directory`` listed just now)."""
        try:
            mtime = os.stat(directory).st_mtime_ns
        except OSError:
            return set()
        known = self._known.get(directory)
        if known is None or known[0] != mtime:
            known = self._known[directory] = (mtime, set(), set())
        _, dirs, others = known
        dirs &= names  # forget what is gone: a name that comes back is learned again
        others &= names
        for name in names - dirs - others:
            try:
                mode = os.lstat(f"{directory}/{name}").st_mode
            except OSError:
                continue  # gone since the listing
            (dirs if stat.S_ISDIR(mode) else others).add(name)
        return dirs & names


@cache
def _glob(pattern: str) -> Callable[[str], re.Match[str] | None]:
    """fnmatchcase's test for one pattern, compiled once (patterns come from the configuration)."""
    return re.compile(translate(pattern)).match


def kube_qos(requests: Mapping[str, float], limits: Mapping[str, float]) -> str:
    """The kubelet's QoS class from one container's requests and limits."""
    guaranteed = limits.get("cpu") and limits.get("memory")
    if guaranteed and all(requests.get(r, limits[r]) == limits[r] for r in ("cpu", "memory")):
        return "Guaranteed"
    if any(v > 0 for v in requests.values()) or any(v > 0 for v in limits.values()):
        return "Burstable"
    return "BestEffort"


# ------------------------------------------------------------------------------------------ source


class StandaloneSource:
    """Workloads from cgroup paths; rescanned every tick, objects reused while a cgroup exists."""

    def __init__(self, fs: CgroupLayout, config: StandaloneConfig = StandaloneConfig()) -> None:
        self.fs = fs
        self.config = config
        self.roots = tuple(tuple(relative_pattern(fs, r).split("/")) for r in config.effective_roots)
        self.entries = tuple((tuple(relative_pattern(fs, e.path).split("/")), e) for e in config.entries)
        # Discovery walks the hierarchy qosd manages CPU in: cpu on v1 (cpuacct or memory as fallbacks).
        if fs.version == 2:
            self.base = fs.root
        else:
            ctl = next((c for c in ("cpu", "cpuacct", "memory") if c in fs.v1), "cpu")
            self.base = fs.dir("", ctl)
        self._known: dict[str, Workload] = {}
        self._paths: list[str] = []  # what discover() found when _last was made
        self._kinds = Kinds()
        self._last: tuple[Workload, ...] = ()

    def workloads(self) -> tuple[Workload, ...]:
        paths = discover(self.base, self.roots, self._kinds)
        if paths == self._paths:
            return self._last  # the steady state: same cgroups, same tuple
        known = self._known
        fresh: dict[str, Workload] = {}
        for rel in paths:
            w = known.get(rel)
            fresh[rel] = w if w is not None else self.build(rel)
        self._known = fresh
        self._paths = paths
        self._last = tuple(fresh.values())
        return self._last

    def cgroup_of(self, uid: str) -> str | None:
        """The cgroup path of the workload with this uid, None when it is not discovered (any more)."""
        w = self._known.get(uid)
        return w.cgroup_path if w is not None else None

    def entry_for(self, rel: str) -> Entry | None:
        parts = rel.split("/")
        return next((e for pattern, e in self.entries if _matches(pattern, parts)), None)

    def build(self, rel: str) -> Workload:
        entry = self.entry_for(rel)
        parent, _, base = rel.rpartition("/")
        qos = entry.qos if entry is not None else None
        if qos is None and entry is None and self.config.default_mapping:
            qos = default_qos(base)
        annotations: dict[str, str] = {}
        labels: dict[str, str] = {}
        if qos is not None:
            annotations[KATALYST_QOS], labels[KOORDINATOR_QOS] = QOS[qos]
        requests: Mapping[str, float] = {}
        limits: Mapping[str, float] = {}
        name = base
        namespace = self.config.namespace or parent
        priority: int | None = None
        priority_class = ""
        if entry is not None:
            labels.update(entry.labels)
            annotations.update(entry.annotations)
            requests, limits = entry.requests, entry.limits
            name = entry.name.replace("{base}", base)
            namespace = entry.namespace if entry.namespace is not None else namespace
            priority, priority_class = entry.priority, entry.priority_class_name
        return Workload(
            uid=rel,
            name=name,
            namespace=namespace,
            labels=MappingProxyType(labels),
            annotations=MappingProxyType(annotations),
            priority=priority,
            priority_class_name=priority_class,
            kube_qos=kube_qos(requests, limits),
            phase="Running",
            cgroup_path=rel,
            containers=(Container("main", requests=requests, limits=limits, cgroup_path=rel),),
        )


def standalone_collector(
    layout: CgroupLayout | None = None,
    workloads_file: Path | None = None,
    roots: Sequence[str] | None = None,
    *,
    procfs: Path = Path("/proc"),
    sysfs: Path = Path("/sys"),
    node_name: str | None = None,
    node_labels: Mapping[str, str] | None = None,
    options: CollectorOptions | None = None,
    observe: Translate | None = None,
    resctrl: Callable[[], ResctrlInfo] | None = None,
) -> NodeCollector:
    """The node collector of ``qosd run`` without Kubernetes (``roots`` overrides the file's).

    A pattern that cannot name cgroups under the root raises: PolicyError, located, for the file's;
    PatternError for ``roots``. ``layout`` is the hierarchy the cgroup adapter writes through
    (None: detected under /sys/fs/cgroup; CgroupUnavailable when nothing is mounted there)."""
    fs = layout if layout is not None else CgroupLayout.detect()
    config = load_workloads(workloads_file, fs) if workloads_file is not None else StandaloneConfig()
    for pattern in roots or ():
        relative_pattern(fs, pattern)
    if roots:
        config = StandaloneConfig(
            tuple(roots),
            config.entries,
            config.default_mapping,
            config.namespace,
            config.node_name,
            config.node_labels,
            config.source,
        )
    return NodeCollector(
        StandaloneSource(fs, config),
        fs,
        procfs=procfs,
        sysfs=sysfs,
        node_name=node_name or config.node_name,
        node_labels={**config.node_labels, **(node_labels or {})},
        options=options or CollectorOptions(),
        observe=observe,
        resctrl=resctrl,
    )
