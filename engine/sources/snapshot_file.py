"""Facts snapshots as files: read (JSON or YAML, checked against the facts schema with located errors)
and written (a Snapshot back as the facts document, for recorded traces)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.config.errors import Location, PolicyError, Problem
from engine.config.load import read_file
from engine.model.facts import HostApp, Snapshot, Workload, snapshot_from_dict
from engine.resources import API_VERSION
from engine.sources.facts_check import facts_problems, with_numbers
from engine.sources.named_files import shown, unusable


def read_facts(path: Path) -> dict[str, Any]:
    """The validated facts document in ``path`` (exactly one YAML/JSON mapping), schema and semantics."""
    why = unusable(path)
    if why:
        raise PolicyError([Problem(Location(shown(str(path), 200), 0, 0), f"the facts file {why}")])
    docs = read_file(path)
    if len(docs) != 1 or not isinstance(docs[0].data, dict):
        raise PolicyError(
            [Problem(Location(str(path), 1, 1), "a facts file holds exactly one YAML or JSON mapping")]
        )
    doc = docs[0]
    problems = facts_problems(doc.data, doc.locate)
    if problems:
        raise PolicyError(problems)
    # A copy: the loader caches documents by content, and a caller that edits its facts (a test
    # patch, a trace step) must not change what the next reader of the same file gets.
    data: dict[str, Any] = copy.deepcopy(with_numbers(doc.data))
    return data


def load_snapshot(path: Path) -> Snapshot:
    return snapshot_from_dict(read_facts(path))


# ---------------------------------------------------------------- writing: a Snapshot as a facts document


def unflatten_metrics(flat: Mapping[str, Any]) -> dict[str, Any]:
    """The inverse of engine.model.facts.flatten_metrics: ``a.b`` -> nested; windowed keys
    ``path@agg:300s`` -> a series ``{last, agg: {300s: v}}`` at ``path``."""
    out: dict[str, Any] = {}
    windowed: dict[str, dict[str, dict[str, Any]]] = {}
    for key, value in flat.items():
        path, at, rest = key.partition("@")
        if at:
            agg, _, window = rest.partition(":")
            windowed.setdefault(path, {}).setdefault(agg, {})[_duration(window)] = value
            continue
        _put(out, path, value)
    for path, aggs in windowed.items():
        last = _get(out, path)
        _put(out, path, {"last": last, **aggs})
    return out


def _duration(window: str) -> str:
    """A flat key's window (``300s``, ``0.5s``) as the facts schema writes windows (integer units)."""
    seconds = float(window.rstrip("s"))
    return f"{int(seconds)}s" if seconds.is_integer() else f"{round(seconds * 1000)}ms"


def _put(tree: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for p in parents:
        tree = tree.setdefault(p, {})
    tree[leaf] = value


def _get(tree: Mapping[str, Any], path: str) -> Any:
    node: Any = tree
    for p in path.split("."):
        node = node.get(p) if isinstance(node, Mapping) else None
    return node


def snapshot_to_dict(snap: Snapshot, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A facts document (schemas/facts.schema.json) that ``snapshot_from_dict`` reads back into the
    same facts: what ``qosd run --audit-log-facts`` records and ``qosd trace record`` replays.
    ``labels`` are node labels the daemon added (``--label``, ``--profile``)."""
    node = snap.node
    node_doc: dict[str, Any] = {
        "name": node.name,
        "labels": {**node.labels, **(labels or {})},
        "capacity": dict(node.capacity),
        "topology": {
            "cpus": [
                {
                    "id": c.id,
                    "core": c.core,
                    "socket": c.socket,
                    "numa": c.numa,
                    **({"l3": c.l3} if c.l3 is not None else {}),
                }
                for c in snap.topology.cpus
            ],
            "numa": [{"id": n, "memoryBytes": m} for n, m in sorted(snap.topology.numa_memory.items())],
        },
    }
    if snap.node_annotations:
        node_doc["annotations"] = dict(snap.node_annotations)
    if snap.allocatable:
        node_doc["allocatable"] = dict(snap.allocatable)
    if snap.cgroup_version is not None:
        node_doc["cgroup"] = {"version": snap.cgroup_version}
    r = snap.resctrl
    if r.mounted:
        node_doc["resctrl"] = {
            "mounted": True,
            **({"cbmMask": r.cbm_mask} if r.cbm_mask else {}),
            "minCbmBits": r.min_cbm_bits,
            **({"numClosids": r.num_closids} if r.num_closids else {}),
            "mbGranularity": r.mb_granularity,
            "mbMin": r.mb_min,
            "vendor": r.vendor,
            "cacheIds": list(r.cache_ids),
            "mbDomains": list(r.mb_domains),
            "sparseMasks": r.sparse_masks,
            "delayLinear": r.delay_linear,
            "groups": {g: {"schemata": s} for g, s in r.groups.items()},
        }
    m = snap.metrics
    metrics: dict[str, Any] = {"node": unflatten_metrics(m.node)}
    if m.windows:
        metrics["windows"] = list(m.windows)
    for name, scope in (
        ("numa", m.numa),
        ("pods", m.pods),
        ("containers", m.containers),
        ("classes", m.classes),
    ):
        if scope:
            metrics[name] = {str(k): unflatten_metrics(v) for k, v in scope.items()}
    doc: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "FactsSnapshot",
        "time": snap.time,
        "node": node_doc,
        "workloads": [_workload_doc(w) for w in snap.workloads],
        "metrics": metrics,
        "cgroups": {path: dict(files) for path, files in snap.cgroups.items()},
        **({"absentCgroups": sorted(snap.absent_cgroups)} if snap.absent_cgroups else {}),
    }
    if snap.host_apps:
        doc["hostApplications"] = [_host_app_doc(a) for a in snap.host_apps]
    return doc


def _host_app_doc(a: HostApp) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": a.name}
    if a.qos:
        doc["qos"] = a.qos
    if a.priority:
        doc["priority"] = a.priority
    path = {
        k: v
        for k, v in (("base", a.cgroup_base), ("parentDir", a.parent_dir), ("relativePath", a.relative_path))
        if v
    }
    if path:
        doc["cgroupPath"] = path
    measured = (("cpuCores", a.cpu_usage_cores), ("memoryBytes", a.memory_usage_bytes))
    usage = {k: v for k, v in measured if v is not None}
    if usage:
        doc["usage"] = usage
    return doc


def _workload_doc(w: Workload) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "uid": w.uid,
        "name": w.name,
        "namespace": w.namespace,
        "labels": dict(w.labels),
        "annotations": dict(w.annotations),
        "priorityClassName": w.priority_class_name,
        "kubeQoS": w.kube_qos,
        "phase": w.phase,
        "terminating": w.terminating,
        "cgroupPath": w.cgroup_path,
        "containers": [
            {
                "name": c.name,
                "id": c.id,
                "requests": dict(c.requests),
                "limits": dict(c.limits),
                "cgroupPath": c.cgroup_path,
                "init": c.init,
            }
            for c in w.containers
        ],
    }
    if w.priority is not None:
        doc["priority"] = w.priority
    if w.termination_grace_seconds is not None:
        doc["terminationGracePeriodSeconds"] = w.termination_grace_seconds
    return doc
