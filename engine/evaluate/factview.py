"""Per-tick views of the facts that conditions read: measured metrics first, then derived facts.

Derived facts fill what collectors need not send: counts from the topology, capacities, percentages
(memory usage percent is floored to an integer, as Koordinator computes it), pod attributes
(priority, class, requests, limits) and ratios (usage over request). Pod attributes are cached per
workload object, so a steady state derives nothing.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from engine.evaluate.classify import Classifier
from engine.model.facts import EMPTY, FactMap, Snapshot, Workload

RATIOS: Mapping[str, tuple[str, str]] = {
    "cpu.usage_over_request": ("cpu.usage_cores", "cpu.request_cores"),
    "memory.usage_over_request": ("memory.usage_bytes", "memory.request_bytes"),
    "memory.rss_over_request": ("memory.rss_bytes", "memory.request_bytes"),
}


def ratio(num: Any, den: Any) -> Any:
    """A ratio fact: None without a numerator or with a zero or missing denominator."""
    return num / den if num is not None and den else None


class ItemFacts(dict[str, Any]):
    """Facts of one NUMA node, pod or container, flattened: measured values over derived ones.

    Strategies, rankings and explanations read these; conditions read the unmerged ``Row`` (see
    ``read``). A missing key goes through ``__missing__``, which computes ratio facts once and
    otherwise answers None; ``get`` keeps the same semantics."""

    __slots__ = ()

    def __missing__(self, key: str) -> Any:
        pair = RATIOS.get(key)
        if pair is None:
            return None
        value = ratio(dict.get(self, pair[0]), dict.get(self, pair[1]))
        if value is not None:
            self[key] = value
        return value

    def get(self, key: str, default: Any = None) -> Any:
        value = self[key]
        return default if value is None else value


def item_facts(measured: FactMap, derived: FactMap) -> ItemFacts:
    """Measured values over derived ones (a collector's number beats an estimate)."""
    facts = ItemFacts(derived)
    if measured:
        # A read-only proxy updates through the generic mapping path, at twice the cost of its copy.
        facts.update(measured.copy() if type(measured) is MappingProxyType else measured)
    return facts


EMPTY_ITEM = ItemFacts()

Row = tuple[FactMap, dict[str, Any]]
"""What the backends read for one item: (measured, derived) facts, unmerged. A pod's measured map is
the snapshot's and its derived map is kept across ticks, so a tick builds no per-pod dict for
conditions; ``read`` gives the same answer as ``item_facts(measured, derived)[key]``."""

NOTHING_DERIVED: dict[str, Any] = {}


def read(row: Row, key: str) -> Any:
    """A fact of one row: measured, else derived, else a ratio of two facts (``ItemFacts``' rule)."""
    measured, derived = row
    if key in measured:
        return measured[key]
    if key in derived:
        return derived[key]
    pair = RATIOS.get(key)
    if pair is None:
        return None
    return ratio(read(row, pair[0]), read(row, pair[1]))


ZONE_HEADROOM = (
    ("memory.free_over_min_bytes", "memory.watermark_min_bytes"),
    ("memory.free_over_low_bytes", "memory.watermark_low_bytes"),
)


def _headroom_keys(measured: Mapping[str, Any], derived: dict[str, Any]) -> None:
    """A NUMA zone's free memory over its min and low watermarks (negative below them), so a rule
    compares a zone's free memory with its own watermark: ``{numa.memory.free_over_min_bytes:
    {lt: 0}}``. Only from the zone's readings; a collector's own value wins."""
    free = measured.get("memory.free_bytes")
    if free is None:
        return
    for key, mark in ZONE_HEADROOM:
        watermark = measured.get(mark)
        if watermark is not None and key not in measured:
            derived[key] = free - watermark


def _percent_keys(
    facts: dict[str, Any], usage: str, capacity: float | None, target: str, floor: bool
) -> None:
    """target (and its windowed variants) = usage / capacity * 100, when the collector did not send it."""
    if not capacity:
        return
    for key in [k for k in facts if k == usage or k.startswith(usage + "@")]:
        out = target + key[len(usage) :]
        if out not in facts and isinstance(facts[key], int | float):
            pct = facts[key] * 100.0 / capacity
            facts[out] = math.floor(pct) if floor else pct


ACTIVE_PHASES = ("Running", "Pending")


def same_workloads(known: tuple[Workload, ...] | None, workloads: tuple[Workload, ...]) -> bool:
    """True when ``workloads`` holds the very objects of ``known``, in order. Sources hand back the
    same Workload objects while pods are unchanged, so this is the cache key of everything derived
    from workloads alone (a few hundred identity checks, far cheaper than re-deriving)."""
    if known is workloads:
        return True
    return (
        known is not None
        and len(known) == len(workloads)
        and all(a is b for a, b in zip(known, workloads, strict=True))
    )


class MembersIndex:
    """Active pods by class, in snapshot order. Sources hand back the same Workload objects while
    pods are unchanged, so the index is rebuilt only when the set of objects changes."""

    def __init__(self, classifier: Classifier):
        self._classify = classifier.classify
        self._cached: tuple[tuple[Workload, ...], Mapping[str, tuple[Workload, ...]]] | None = None

    def __call__(self, workloads: tuple[Workload, ...]) -> Mapping[str, tuple[Workload, ...]]:
        cached = self._cached
        if cached is not None and same_workloads(cached[0], workloads):
            return cached[1]
        out: dict[str, list[Workload]] = {}
        classify = self._classify
        for w in workloads:
            if w.phase in ACTIVE_PHASES:
                name = classify(w).class_name
                if name:
                    out.setdefault(name, []).append(w)
        index = MappingProxyType({k: tuple(v) for k, v in out.items()})
        self._cached = (workloads, index)
        return index


@dataclass(frozen=True)
class ScopeItems:
    """The items of one rule scope in one tick, as parallel sequences (keys, rows, workloads): every
    rule of the scope shares them, and the backend receives ``rows`` as one batch. Merged facts
    (``fact``) are built only for the items someone reads further: matched items, strategies."""

    keys: Sequence[str | None]
    rows: Sequence[Row]
    workloads: Sequence[Workload | None]
    fact: Callable[[int], ItemFacts]  # the merged facts of item i


class FactViews:
    """Everything conditions and strategies read in one tick, built once per snapshot."""

    def __init__(
        self,
        snapshot: Snapshot,
        classifier: Classifier,
        static_cache: dict[int, Any],
        generation_memo: dict[Any, Any] | None = None,
    ):
        self.snapshot = snapshot
        self.classifier = classifier
        self._static = static_cache
        # Results kept across the ticks of one policy generation, valid while the snapshot hands
        # over the same workload objects (see ``by_class``).
        self.generation_memo: dict[Any, Any] = {} if generation_memo is None else generation_memo
        self.node: dict[str, Any] = self._node()
        self._numa: dict[int, ItemFacts] | None = None
        self._pods: dict[str, ItemFacts] = {}
        self._classes: dict[str, Any] | None = None
        self._scopes: dict[str, ScopeItems] = {}
        # Per-tick results that several actions share (e.g. the workloads an evict rule may take),
        # keyed by their owner; gone with the tick like every other view.
        self.memo: dict[Any, Any] = {}

    def items(self, scope: str) -> ScopeItems:
        """The node, each NUMA node, each active pod or each of their containers, built once a tick."""
        hit = self._scopes.get(scope)
        if hit is not None:
            return hit
        if scope == "node":
            out = ScopeItems([None], [(EMPTY_ITEM, NOTHING_DERIVED)], [None], lambda i: EMPTY_ITEM)
        elif scope == "numa":
            facts = list(self.numa.values())
            out = ScopeItems(
                [str(n) for n in self.numa],
                [(f, NOTHING_DERIVED) for f in facts],
                [None] * len(facts),
                facts.__getitem__,
            )
        elif scope == "pod":
            pods, keys, uids, statics = self._active_pods()
            get = self.snapshot.metrics.pods.get
            rows = [(get(uid, EMPTY), static) for uid, static in zip(uids, statics, strict=True)]
            out = ScopeItems(keys, rows, pods, lambda i: self.pod(pods[i]))
        else:
            pairs = [
                (w, c.name) for w in self.snapshot.workloads if w.phase in ACTIVE_PHASES for c in w.containers
            ]
            crows = [self._container_row(w, name) for w, name in pairs]
            out = ScopeItems(
                [f"{w.key}/{name}" for w, name in pairs],
                crows,
                [w for w, _ in pairs],
                lambda i: item_facts(*crows[i]),
            )
        self._scopes[scope] = out
        return out

    # ---- node
    def _node(self) -> dict[str, Any]:
        snap = self.snapshot
        facts = dict(snap.metrics.node)
        topo = snap.topology
        cap_cpu = snap.node.capacity.get("cpu") or float(len(topo.cpus))
        cap_mem = snap.node.capacity.get("memory") or float(snap.node.memory) or None
        facts.setdefault("cpus", len(topo.cpus))
        facts.setdefault("numa_count", len(topo.numa_ids) or 1)
        facts.setdefault("sockets", len(topo.sockets) or 1)
        facts.setdefault("cpu.capacity_cores", cap_cpu)
        if cap_mem:
            facts.setdefault("memory.capacity_bytes", cap_mem)
        if "cpu" in snap.allocatable:
            facts.setdefault("cpu.allocatable_cores", snap.allocatable["cpu"])
        if "memory" in snap.allocatable:
            facts.setdefault("memory.allocatable_bytes", snap.allocatable["memory"])
        _percent_keys(facts, "cpu.usage_cores", cap_cpu, "cpu.usage_percent", floor=False)
        _percent_keys(
            facts, "memory.usage_bytes", facts.get("memory.capacity_bytes"), "memory.usage_percent", True
        )
        return facts

    # ---- NUMA nodes
    @property
    def numa(self) -> Mapping[int, ItemFacts]:
        if self._numa is None:
            topo = self.snapshot.topology
            out: dict[int, ItemFacts] = {}
            for nid in topo.numa_ids:
                measured = dict(self.snapshot.metrics.numa.get(nid, EMPTY))
                cpus = len(topo.cpus_of_numa(nid))
                derived: dict[str, Any] = {"id": nid, "cpus": cpus}
                total = measured.get("memory.total_bytes") or topo.numa_memory.get(nid)
                if total:
                    derived["memory.total_bytes"] = total
                _percent_keys(measured, "memory.usage_bytes", total, "memory.usage_percent", floor=True)
                _percent_keys(measured, "cpu.usage_cores", cpus, "cpu.usage_percent", floor=False)
                _headroom_keys(measured, derived)
                out[nid] = item_facts(measured, derived)
            self._numa = out
        return self._numa

    def by_class(self) -> Mapping[str | None, tuple[Workload, ...]]:
        """Workloads (every phase) grouped by class, in snapshot order. Kept across ticks while the
        snapshot carries the very same workload objects, so a steady node regroups nothing and
        callers may memoize on the identity of the groups."""
        workloads = self.snapshot.workloads
        hit = self.generation_memo.get("by_class")
        if hit is not None:
            seen, groups = hit
            if len(seen) == len(workloads) and all(map(operator.is_, seen, workloads)):
                result: Mapping[str | None, tuple[Workload, ...]] = groups
                return result
        grouped: dict[str | None, list[Workload]] = {}
        classify = self.classifier.classify
        for w in workloads:
            grouped.setdefault(classify(w).class_name, []).append(w)
        frozen = MappingProxyType({k: tuple(v) for k, v in grouped.items()})
        self.generation_memo["by_class"] = (workloads, frozen)
        return frozen

    # ---- engine-computed facts
    def derive_node(self, facts: Mapping[str, Any]) -> None:
        """Add facts the engine computed before conditions run (pressure triggers). A value the
        snapshot carries for the same key wins: a collector's reading beats qosd's estimate."""
        node = self.node
        for key, value in facts.items():
            node.setdefault(key, value)

    def derive_numa(self, nid: int, facts: Mapping[str, Any]) -> None:
        """The same for one NUMA node's item facts (shared by every numa-scoped rule this tick)."""
        item = self.numa.get(nid)
        if item is None:
            return
        for key, value in facts.items():
            if key not in item:
                item[key] = value

    # ---- pods
    def _active_pods(self) -> tuple[list[Workload], list[str], list[str], list[dict[str, Any]]]:
        """The active pods with their keys, uids and static facts. They follow from the workload
        objects alone, so they are kept across the ticks of a generation while the snapshot hands
        over the same objects (the lists are shared and must not be changed)."""
        workloads = self.snapshot.workloads
        hit = self.generation_memo.get("active_pods")
        if hit is not None and same_workloads(hit[0], workloads):
            result: tuple[list[Workload], list[str], list[str], list[dict[str, Any]]] = hit[1]
            return result
        pods = [w for w in workloads if w.phase in ACTIVE_PHASES]
        result = (pods, [w.key for w in pods], [w.uid for w in pods], [self._pod_static(w) for w in pods])
        self.generation_memo["active_pods"] = (workloads, result)
        return result

    def pod(self, w: Workload) -> ItemFacts:
        """One pod's merged facts, built when first asked this tick (strategies, matched pods)."""
        view = self._pods.get(w.uid)
        if view is None:
            view = self._pods[w.uid] = item_facts(
                self.snapshot.metrics.pods.get(w.uid, EMPTY), self._pod_static(w)
            )
        return view

    def _pod_static(self, w: Workload) -> dict[str, Any]:
        """A pod's derived facts (attributes and class), kept per workload object."""
        hit = self._static.get(id(w))
        if hit is not None and hit[0] is w:
            facts: dict[str, Any] = hit[1]
            return facts
        cls = self.classifier.classify(w)
        static: dict[str, Any] = {
            "priority": w.priority if w.priority is not None else 0,
            "kube_qos": w.kube_qos,
            "phase": w.phase,
            "namespace": w.namespace,
            "name": w.name,
            "cpu.request_cores": w.request("cpu"),
            "memory.request_bytes": w.request("memory"),
        }
        if cls.class_name is not None:
            static["class"] = cls.class_name
        if w.start_time is not None:
            static["start_time_seconds"] = w.start_time
        for resource, key in (("cpu", "cpu.limit_cores"), ("memory", "memory.limit_bytes")):
            limit = w.limit(resource)
            if limit is not None:
                static[key] = limit
        if len(self._static) > 50_000:
            self._static.clear()
        self._static[id(w)] = (w, static)
        return static

    def _container_row(self, w: Workload, name: str) -> Row:
        measured = self.snapshot.metrics.containers.get(f"{w.uid}/{name}", EMPTY)
        c = next((c for c in w.containers if c.name == name), None)
        derived: dict[str, Any] = {"name": name}
        if c is not None:
            derived["cpu.request_cores"] = c.requests.get("cpu", 0.0)
            derived["memory.request_bytes"] = c.requests.get("memory", 0.0)
            if "cpu" in c.limits:
                derived["cpu.limit_cores"] = c.limits["cpu"]
            if "memory" in c.limits:
                derived["memory.limit_bytes"] = c.limits["memory"]
        return measured, derived

    # ---- classes
    def classes(self, wanted: frozenset[str]) -> Mapping[str, Any]:
        """Flat ``class.<name>.<path>`` facts for the keys in ``wanted``: collector values first,
        then sums over the class's running and pending pods (only the sums some rule reads)."""
        if self._classes is not None:
            return self._classes
        out: dict[str, Any] = {}
        for name, measured in self.snapshot.metrics.classes.items():
            for key, value in measured.items():
                out[f"class.{name}.{key}"] = value
        missing = {k for k in wanted if k not in out}
        if missing:
            sums: dict[str, list[str]] = {}
            for key in missing:
                _, name, path = key.split(".", 2)
                if path == "pods" or path in SUMMED:
                    sums.setdefault(name, []).append(path)
                    if path == "pods":
                        out[key] = 0
            for w in self.snapshot.workloads:
                if w.phase not in ACTIVE_PHASES:
                    continue
                cls_name = self.classifier.classify(w).class_name
                paths = sums.get(cls_name) if cls_name is not None else None
                if not paths:
                    continue
                view = self.pod(w)
                for path in paths:
                    full = f"class.{cls_name}.{path}"
                    value = 1 if path == "pods" else view.get(path)
                    if value is not None:
                        out[full] = out.get(full, 0) + value
        self._classes = out
        return out


SUMMED = frozenset({"cpu.usage_cores", "cpu.request_cores", "memory.usage_bytes", "memory.request_bytes"})
