"""The gauges of what the daemon's last tick computed: workloads per class, each rule's fired state,
the node's PSI, the NUMA watermark counters, the reclaim metrics' age and degradation, and the
reclaimed resources qosd computed and published on the Node.

Why a collector read at scrape time and not gauges set every tick: the tick runs every second on
every node and the daemon's CPU budget is 1% of a core (issue 15), while Prometheus scrapes every
15-60 s. So the tick only hands over references to what it already holds (``TickCollector.saw``:
one small object per tick, no kernel read, no label lookups), and the work of turning them into
samples is done per scrape, in the HTTP thread, from immutable objects (the Evaluation, the
EngineState, the snapshot's read-only node fact map, the generation's class index). A tick that
fails leaves the previous tick's view in place: ``qosd_last_tick_timestamp_seconds`` and
``qosd_ticks_total{result="error"}`` say how old it is.

Label cardinality is bounded by the policy and the hardware, never by the pods: ``class`` (the
policy's classes), ``rule`` and ``mode`` (its rules), ``numa`` (NUMA nodes), ``resource`` (the
publishAs names, at most one per reclaimed resource) and the fixed PSI triples. No series carries a
pod name. docs/monitoring.md lists every metric.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from engine.evaluate.engine import Engine, Evaluation
from engine.evaluate.state import EngineState
from engine.features.reclaim.strategy import degraded
from engine.model.facts import Workload
from engine.model.operations import PublishNodeResource
from engine.plan.planner import kubernetes_units

PSI_RESOURCES = ("cpu", "memory", "io")
PSI_KINDS = ("some", "full")
PSI_WINDOWS = (("avg10", "10s"), ("avg60", "60s"), ("avg300", "300s"))
# (fact key, resource, kind, window label), built once: the scrape reads the node map by these keys
PSI_KEYS = tuple(
    (f"psi.{r}.{k}.{avg}", r, k, window)
    for r in PSI_RESOURCES
    for k in PSI_KINDS
    for avg, window in PSI_WINDOWS
)
# Katalyst's NUMA counter decision, as a level an alert can compare: noop < reclaimed_eviction < eviction
PRESSURE_LEVELS = {"noop": 0.0, "reclaimed_eviction": 1.0, "eviction": 2.0}
PUBLISHED = ("applied", "unchanged")  # the Node holds the quantity: written now, or already there


@dataclass(frozen=True, slots=True)
class TickView:
    """References to what one tick computed; nothing here is copied or derived at tick time."""

    engine: Engine
    evaluation: Evaluation
    state: EngineState  # after the tick (refused evictions forgotten)
    node: Mapping[str, Any]  # the snapshot's node facts (read-only)
    members: Mapping[str, tuple[Workload, ...]]  # active workloads by class (the engine's cached index)


class TickCollector(Collector):
    """Gauges of the last tick, built at scrape time (see the module docstring)."""

    def __init__(self) -> None:
        self.view: TickView | None = None
        # publishAs name -> the quantity the Node holds by qosd's last publish (milli-cores for CPU,
        # bytes for memory, as PublishNodeResource writes it). Replaced, never mutated: the scrape
        # thread reads it while the tick thread may swap it.
        self._published: Mapping[str, float] = {}

    # -- tick thread

    def saw(self, view: TickView) -> None:
        self.view = view

    def published(self, op: PublishNodeResource, status: str) -> None:
        """An executed publish: the Node now holds ``op.quantity`` (or no longer the resource)."""
        if status not in PUBLISHED:
            return
        current = self._published
        if op.quantity is None:
            if op.name in current:
                self._published = {k: v for k, v in current.items() if k != op.name}
        elif current.get(op.name) != (value := float(op.quantity)):
            self._published = {**current, op.name: value}

    # -- scrape thread

    def describe(self) -> list[Metric]:
        """The names, for the registry's duplicate check, without a view."""
        return list(_families().values())

    def collect(self) -> Generator[Metric, None, None]:
        families = _families()
        view = self.view
        if view is not None:
            _fill(families, view)
        published = families["qosd_reclaimed_resource_published"]
        for name, value in sorted(self._published.items()):
            published.add_metric([name], value)
        yield from families.values()


def _families() -> dict[str, GaugeMetricFamily]:
    specs: tuple[tuple[str, str, list[str]], ...] = (
        (
            "qosd_workloads",
            "Active workloads (pending or running) of each class of the policy in effect.",
            ["class"],
        ),
        (
            "qosd_rule_fired",
            "1 when the rule acted in the last tick, else 0 (every rule of the policy).",
            ["rule", "mode"],
        ),
        (
            "qosd_rule_active_items",
            "Scope items (the node, NUMA nodes, pods, containers) the rule acted on whose condition "
            "still holds.",
            ["rule"],
        ),
        (
            "qosd_rule_last_fired_timestamp_seconds",
            "When the rule last acted (engine state: kept across restarts with --state-file).",
            ["rule"],
        ),
        (
            "qosd_node_psi_ratio",
            "Pressure stall information of the node (/proc/pressure) as the last tick read it, 0-1.",
            ["resource", "kind", "window"],
        ),
        (
            "qosd_numa_watermark_count",
            "Katalyst's free-below-low-watermark counter of each NUMA node, in rounds "
            "(only while a rule reads it).",
            ["numa"],
        ),
        (
            "qosd_numa_watermark_pressure",
            "The NUMA counter's decision in its last round: 0 noop, 1 reclaimed_eviction, 2 eviction.",
            ["numa"],
        ),
        (
            "qosd_reclaim_metrics_age_seconds",
            "Seconds since qosd last had a whole view of node and workload usage.",
            [],
        ),
        (
            "qosd_reclaim_degraded",
            "1 when the usage metrics are older than spec.reclaim.degradeAfter, so reclaimed resources "
            "are withdrawn (Koordinator's degradation); present only when degradeAfter is set.",
            [],
        ),
        (
            "qosd_reclaimed_resource_computed",
            "The reclaimed resource the policy computed for the Node (after smoothing and bounds, before "
            "the update gate), in the units it is published in; in audit mode too, where nothing is "
            "written.",
            ["resource"],
        ),
        (
            "qosd_reclaimed_resource_published",
            "The reclaimed resource the Node holds by qosd's last publish (applied or already there), "
            "in Kubernetes units: milli-cores for CPU, bytes for memory. Absent once withdrawn.",
            ["resource"],
        ),
    )
    return {name: GaugeMetricFamily(name, doc, labels=labels) for name, doc, labels in specs}


def _fill(families: Mapping[str, GaugeMetricFamily], view: TickView) -> None:
    policy = view.engine.policy
    for c in policy.classes:
        families["qosd_workloads"].add_metric([c.name], float(len(view.members.get(c.name, ()))))
    fired = frozenset(view.evaluation.fired)
    active: dict[str, int] = {}
    for key in view.state.latched:
        rule = key.split("|", 1)[0]
        active[rule] = active.get(rule, 0) + 1
    last = view.state.last_fired
    for r in policy.rules:
        families["qosd_rule_fired"].add_metric([r.name, r.mode], 1.0 if r.name in fired else 0.0)
        families["qosd_rule_active_items"].add_metric([r.name], float(active.get(r.name, 0)))
        if r.name in last:
            families["qosd_rule_last_fired_timestamp_seconds"].add_metric([r.name], float(last[r.name]))
    node = view.node
    psi = families["qosd_node_psi_ratio"]
    for key, resource, kind, window in PSI_KEYS:
        value = node.get(key)
        if value is not None:
            psi.add_metric([resource, kind, window], float(value) / 100.0)
    for numa, counter in sorted(view.state.pressure.numa.items()):
        families["qosd_numa_watermark_count"].add_metric([numa], float(counter.count))
        level = PRESSURE_LEVELS.get(counter.action)
        if level is not None:
            families["qosd_numa_watermark_pressure"].add_metric([numa], level)
    for resource, spec in (("cpu", policy.reclaim.cpu), ("memory", policy.reclaim.memory)):
        name = spec.publish_as if spec is not None else None
        history = view.state.reports.get(name) if name else None  # popped when withdrawn
        if name and history is not None and history.reported is not None:
            value = float(kubernetes_units(resource, history.reported))
            families["qosd_reclaimed_resource_computed"].add_metric([name], value)
    age = node.get("reclaim.metrics_age_seconds")
    if age is not None:
        families["qosd_reclaim_metrics_age_seconds"].add_metric([], float(age))
        degrade_after = policy.reclaim.degrade_after
        if degrade_after is not None:  # the test the reclaim strategies withdraw by
            families["qosd_reclaim_degraded"].add_metric(
                [], 1.0 if degraded(float(age), degrade_after) else 0.0
            )
