"""The node update gate: publish intents reach the Node only on a real change or a refresh.

Koordinator writes batch resources to the Node only when one moved by more than
``resourceDiffThreshold`` (10 %) of the Node's value, appeared or disappeared, or when the last
update is older than ``updateTimeThresholdSeconds`` (300 s): every Node write wakes every watcher of
Nodes in the cluster (the scheduler, every kubelet's informer, autoscalers), and a 2 % drift in
reclaimable CPU is not worth that. ``spec.reclaim.update`` turns the gate on.

The step runs once per tick after the rules, because the decision is for the node as a whole (a
change in one resource updates all of them, as Koordinator writes the node status at once). A held
report keeps its intent, carrying the last published value: the planner then asks for what the Node
already holds, the Kubernetes adapter writes nothing, and a Node someone else changed is still put
back. The decision and its reason go into the intent's formula and provenance, the computed value
into ``inputs.computed``. Publish intents of audit-mode rules are left alone: they change nothing,
so they must not move the gate's memory.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from engine.evaluate.context import Tick
from engine.evaluate.factview import FactViews
from engine.features.reclaim.spec import ReclaimUpdate
from engine.features.reclaim.strategy import Published, update_due
from engine.model.facts import Snapshot
from engine.model.intents import NodeIntent


class PublishGateStep:
    """The node update gate as a step: after the rules, it holds or lets through their publishes."""

    def __init__(self, update: ReclaimUpdate | None):
        self.update = update

    def before_rules(self, snap: Snapshot, views: FactViews, t: Tick) -> None:
        """Nothing: the gate judges what the publish actions computed this tick."""

    def after_rules(self, snap: Snapshot, views: FactViews, t: Tick) -> None:
        gate_publishes(self.update, t)


def gate_publishes(update: ReclaimUpdate | None, t: Tick) -> None:
    """Hold or let through this tick's publish intents, and remember what went through."""
    if update is None:
        return
    found = [
        (i, intent)
        for i, intent in enumerate(t.intents)
        if isinstance(intent, NodeIntent) and intent.kind == "publish" and not intent.provenance.audit
    ]
    if not found:
        return
    new = {str(intent.params["resource"]): intent.params["value"] for _, intent in found}
    # A zone's value is judged like a resource (Koordinator's NodeResourceTopology update has the
    # same threshold), under "<resource>@<zone>".
    for _, intent in found:
        for zone, value in (intent.params.get("zones") or {}).items():
            new[zone_key(str(intent.params["resource"]), zone)] = value
    due, reason = update_due(t.published, new, update.diff_threshold, update.max_interval, t.now)
    last = t.published
    if due:
        t.published = Published(MappingProxyType({**last.values, **new}), t.now)
    for i, intent in found:
        params = dict(intent.params)
        name = str(params["resource"])
        if not due:
            params["value"] = last.values.get(name)
            if params.get("zones") is not None:
                params["zones"] = {z: last.values.get(zone_key(name, z)) for z in params["zones"]}
        params["formula"] = f"{params['formula']}; {reason}"
        inputs = {**intent.provenance.inputs, "computed": new[name]}
        if last.at is not None:
            inputs["lastPublished"] = last.values.get(name)
        t.intents[i] = NodeIntent(
            "publish", MappingProxyType(params), replace(intent.provenance, inputs=MappingProxyType(inputs))
        )


def zone_key(resource: str, zone: str) -> str:
    return f"{resource}@{zone}"
