"""Semantic checks on a facts document, after its schema: what the tick assumes unique or consistent.

The schema says each CPU has an integer id; it cannot say no two CPUs share one, yet the cpuset
allocator and the suppress policy index CPUs by id and stop the tick on a duplicate. Every facts
document qosd reads (``qosd eval --facts``, RuleTest cases and their patches, trace bases and
snapshots) passes through :func:`facts_problems`, so such a file is refused at load with its
file:line:col and JSON path instead of raising in the middle of a tick.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from engine.config.errors import Location, Problem
from engine.config.load import JsonPath
from engine.config.schema_check import schema_problems
from engine.config.unitcheck import schema_file, unit_values
from engine.model.units import parse_quantity

Locate = Callable[[JsonPath, bool], Location]

def quantity_problem(value: Any) -> str:
    """Why ``value`` is not a resource amount qosd takes ("" when it is): parse_quantity's bounds
    (finite, 0 to 8Pi), so that a node's sums cannot reach infinity in the middle of a tick."""
    try:
        parse_quantity(value)
    except ValueError as exc:
        return str(exc)
    return ""


def with_numbers(data: Any, root: Mapping[str, Any] | None = None) -> Any:
    """A copy of a schema-valid facts document (or of the part at schema node ``root``, such as a
    workload) with every Kubernetes quantity string ("32Gi", "500m") the schema allows replaced by
    its number in base units. Rules, traces and RuleTests take quantities; so do facts, and every
    reader of facts gets numbers, whichever way the author wrote them."""
    found = [
        (path, parse(value))
        for path, is_key, parse, value in unit_values(schema_file("facts.schema.json"), data, root)
        if parse is parse_quantity and not is_key and isinstance(value, str)
    ]
    if not found:
        return data
    out = copy.deepcopy(data)
    for path, number in found:
        target = out
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = number
    return out


def facts_problems(data: Any, locate: Locate) -> list[Problem]:
    """Schema problems of a facts document, then (if it is schema-valid) its semantic problems."""
    found = schema_problems(data, locate, "facts")
    if found or not isinstance(data, Mapping):
        return found
    return semantic_problems(data, locate)


class _Seen:
    """First occurrence of each key, to report a duplicate together with the entry it repeats."""

    def __init__(self, locate: Locate, out: list[Problem]):
        self.locate = locate
        self.out = out
        self.first: dict[Hashable, JsonPath] = {}

    def add(self, key: Hashable, path: JsonPath, message: str, hint: str) -> None:
        if key in self.first:
            self.out.append(
                Problem(self.locate(path, False), message, hint, (self.locate(self.first[key], False),))
            )
        else:
            self.first[key] = path


def semantic_problems(data: Mapping[str, Any], locate: Locate) -> list[Problem]:
    """Problems of a schema-valid facts document that its schema cannot express."""
    out: list[Problem] = []
    node = data.get("node") or {}
    topo = node.get("topology") or {}
    _topology(topo, ("node", "topology"), locate, out)
    for field in ("capacity", "allocatable"):
        _amounts(node.get(field), ("node", field), locate, out)
    _workloads(data.get("workloads") or [], locate, out)
    _host_apps(data.get("hostApplications") or [], locate, out)
    metrics = data.get("metrics") or {}
    for key in metrics.get("numa") or {}:
        if not str(key).isdigit():
            out.append(
                Problem(
                    locate(("metrics", "numa", key), True),
                    f"metrics.numa is keyed by NUMA id, and {str(key)[:60]!r} is not a non-negative integer",
                    'use the node\'s NUMA ids as keys, e.g. "0", "1"',
                )
            )
    _metric_values(metrics, ("metrics",), locate, out)
    for key in data.get("cgroups") or {}:
        _cgroup_path(str(key), ("cgroups", key), True, locate, out)
    return out


# The largest magnitude of a metric value: 2**53 (8 PiB in bytes, far past any core count or rate),
# the same bound as quantities, so a tick's products and sums of metrics stay finite.
METRIC_LIMIT = float(2**53)


def _metric_values(raw: Any, base: JsonPath, locate: Locate, out: list[Problem]) -> None:
    if isinstance(raw, Mapping):
        for key, value in raw.items():
            _metric_values(value, (*base, key), locate, out)
    elif isinstance(raw, list):
        for i, value in enumerate(raw):
            _metric_values(value, (*base, i), locate, out)
    elif isinstance(raw, int | float) and not isinstance(raw, bool) and abs(raw) > METRIC_LIMIT:
        out.append(
            Problem(
                locate(base, False),
                f"metric value {raw:.6g} is beyond what a node reports (at most 2^53 in magnitude)",
                "a real counter, rate or usage is far smaller; check the unit and the exponent",
            )
        )


def _topology(topo: Mapping[str, Any], base: JsonPath, locate: Locate, out: list[Problem]) -> None:
    numa_ids = _Seen(locate, out)
    for i, n in enumerate(topo.get("numa") or []):
        numa_ids.add(
            n["id"],
            (*base, "numa", i, "id"),
            f"NUMA node {n['id']} is listed twice",
            "each NUMA node appears once in node.topology.numa",
        )
    cpu_ids = _Seen(locate, out)
    core_numa: dict[tuple[int, int], tuple[int, JsonPath]] = {}
    for i, c in enumerate(topo.get("cpus") or []):
        path: JsonPath = (*base, "cpus", i)
        cpu_ids.add(
            c["id"],
            (*path, "id"),
            f"CPU {c['id']} is listed twice",
            "each logical CPU appears once in node.topology.cpus (as in /sys/devices/system/cpu)",
        )
        if numa_ids.first and c["numa"] not in numa_ids.first:
            out.append(
                Problem(
                    locate((*path, "numa"), False),
                    f"CPU {c['id']} is on NUMA node {c['numa']}, which node.topology.numa does not list",
                    f"listed NUMA nodes: {', '.join(str(k) for k in sorted(numa_ids.first, key=str))}",
                )
            )
        core = (c["socket"], c["core"])
        if core in core_numa and core_numa[core][0] != c["numa"]:
            other, where = core_numa[core]
            out.append(
                Problem(
                    locate((*path, "numa"), False),
                    f"CPU {c['id']} (core {c['core']}, socket {c['socket']}) is on NUMA node {c['numa']}, "
                    f"but another CPU of that core is on NUMA node {other}",
                    "hyperthreads of one physical core share a NUMA node; check core/socket/numa of both",
                    (locate(where, False),),
                )
            )
        core_numa.setdefault(core, (c["numa"], (*path, "numa")))


def _workloads(items: list[Any], locate: Locate, out: list[Problem]) -> None:
    uids = _Seen(locate, out)
    names = _Seen(locate, out)
    paths = _Seen(locate, out)
    for i, w in enumerate(items):
        path: JsonPath = ("workloads", i)
        uids.add(
            w["uid"],
            (*path, "uid"),
            f"pod uid {w['uid']!r} is listed twice",
            "a uid names one pod; give each workload its own uid",
        )
        key = f"{w.get('namespace', '')}/{w['name']}"
        names.add(
            key,
            (*path, "name"),
            f"pod {key} is listed twice",
            "a namespace and name identify one pod; rename one or put it in another namespace",
        )
        if w.get("cgroupPath"):
            _cgroup_path(w["cgroupPath"], (*path, "cgroupPath"), False, locate, out)
            paths.add(
                w["cgroupPath"].strip("/"),
                (*path, "cgroupPath"),
                f"cgroup {w['cgroupPath']} is the cgroup of two pods",
                "each pod has its own cgroup; qosd would write both pods' settings to the same files",
            )
        containers = _Seen(locate, out)
        for j, c in enumerate(w.get("containers") or []):
            cpath: JsonPath = (*path, "containers", j)
            for field in ("requests", "limits"):
                _amounts(c.get(field), (*cpath, field), locate, out)
            containers.add(
                c["name"],
                (*cpath, "name"),
                f"container {c['name']!r} is listed twice in pod {key}",
                "container names are unique within a pod",
            )
            if c.get("cgroupPath"):
                _cgroup_path(c["cgroupPath"], (*cpath, "cgroupPath"), False, locate, out)


def _host_apps(items: list[Any], locate: Locate, out: list[Problem]) -> None:
    """Host applications are keyed by name (Koordinator's metrics are), and their usage is a
    metric: bounded like every other one."""
    names = _Seen(locate, out)
    for i, a in enumerate(items):
        path: JsonPath = ("hostApplications", i)
        names.add(
            a["name"],
            (*path, "name"),
            f"host application {a['name']!r} is listed twice",
            "a name identifies one host application; give each its own",
        )
        _metric_values(a.get("usage"), (*path, "usage"), locate, out)


def _amounts(raw: Any, base: JsonPath, locate: Locate, out: list[Problem]) -> None:
    for name, value in (raw or {}).items():
        why = quantity_problem(value)
        if why:
            hint = "amounts are in base units: cores, bytes"
            out.append(Problem(locate((*base, name), False), f"{name}: {why}", hint))


def _cgroup_path(text: str, path: JsonPath, key: bool, locate: Locate, out: list[Problem]) -> None:
    """A cgroup path is below the cgroup root: ``..`` would name a cgroup outside it."""
    bad = ""
    if "\x00" in text:
        bad = "holds a NUL byte"
    elif ".." in text.split("/"):
        bad = "has a '..' component, which would leave the cgroup root"
    if bad:
        out.append(
            Problem(
                locate(path, key),
                f"cgroup path {text[:120]!r} {bad}",
                "cgroup paths are relative to the cgroup root, e.g. kubepods/burstable/pod<uid>",
            )
        )
