"""Operations: the minimal writes that make intents true. Adapters execute them and decide nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.cgroups.weight import WeightFormula

DEFAULT_GRACE_SECONDS = 30  # Kubernetes' default terminationGracePeriodSeconds


@dataclass(frozen=True)
class EvictPod:
    uid: str
    namespace: str
    name: str
    grace_period_seconds: int | None
    reason: str
    rule: str
    # "evictionAPI": POST the Eviction subresource (PodDisruptionBudgets respected);
    # "delete": a plain DELETE of the pod (Katalyst's deletion-api-killer). Chosen by the rule.
    killer: str = "evictionAPI"

    kind = "evictPod"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "uid": self.uid,
            "namespace": self.namespace,
            "name": self.name,
            "gracePeriodSeconds": self.grace_period_seconds,
            "reason": self.reason,
            "rule": self.rule,
            "killer": self.killer,
        }


@dataclass(frozen=True)
class SetNodeTaint:
    key: str
    value: str
    effect: str
    rule: str

    kind = "setNodeTaint"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "key": self.key,
            "value": self.value,
            "effect": self.effect,
            "rule": self.rule,
        }


@dataclass(frozen=True)
class SetNodeCondition:
    type: str
    status: str
    reason: str
    message: str
    rule: str

    kind = "setNodeCondition"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "type": self.type,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "rule": self.rule,
        }


@dataclass(frozen=True)
class EmitEvent:
    reason: str
    message: str
    severity: str
    rule: str

    kind = "emitEvent"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "reason": self.reason,
            "message": self.message,
            "type": self.severity,
            "rule": self.rule,
        }


@dataclass(frozen=True)
class PublishNodeResource:
    """Set (or, with quantity None, remove) an extended resource in the node's capacity/allocatable.

    ``zones``: the resource per NodeResourceTopology zone (zone name, quantity), written into this
    node's NodeResourceTopology when it exists; None leaves that object alone (Koordinator too
    leaves the zones as they are when it withdraws the node's batch resources)."""

    name: str
    quantity: str | None
    rule: str
    zones: tuple[tuple[str, str], ...] | None = None

    kind = "publishNodeResource"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "name": self.name,
            "quantity": self.quantity,
            "rule": self.rule,
        }
        if self.zones is not None:
            out["zones"] = dict(self.zones)
        return out


@dataclass(frozen=True)
class WriteCgroup:
    """Make a logical cgroup file hold ``value``. ``weight_formula`` is set on cpu.shares and
    cpu.weight writes: the policy generation's shares <-> weight formula, for a host that holds the
    other file. It travels with the write so that the adapter holds no policy, and a plan made under
    one generation is applied with that generation's formula even while another is loading."""

    path: str
    file: str
    value: str
    rule: str
    weight_formula: WeightFormula | None = None

    kind = "writeCgroup"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "path": self.path,
            "file": self.file,
            "value": self.value,
            "rule": self.rule,
        }
        if self.weight_formula is not None:
            out["weightFormula"] = self.weight_formula
        return out


@dataclass(frozen=True)
class CreateResctrlGroup:
    group: str
    rule: str

    kind = "createResctrlGroup"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "group": self.group, "rule": self.rule}


@dataclass(frozen=True)
class RemoveResctrlGroup:
    """Remove a control group qosd no longer needs, giving its CLOSID back; its tasks fall back to
    the default group (the kernel moves them)."""

    group: str
    rule: str

    kind = "removeResctrlGroup"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "group": self.group, "rule": self.rule}


@dataclass(frozen=True)
class WriteSchemata:
    """One resource line of a group's schemata; the kernel merges it per domain."""

    group: str
    line: str  # e.g. "L3:0=ff;1=ff"
    rule: str

    kind = "writeSchemata"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "group": self.group, "line": self.line, "rule": self.rule}


@dataclass(frozen=True)
class AssignTasks:
    """Move the tasks of these cgroups into a group. Emitted every tick: task ids churn, so the
    adapter reads them fresh and writes only those not already in the group."""

    group: str
    cgroups: tuple[str, ...]
    rule: str

    kind = "assignTasks"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "group": self.group, "cgroups": list(self.cgroups), "rule": self.rule}


Operation = (
    EvictPod
    | SetNodeTaint
    | SetNodeCondition
    | EmitEvent
    | PublishNodeResource
    | WriteCgroup
    | CreateResctrlGroup
    | RemoveResctrlGroup
    | WriteSchemata
    | AssignTasks
)
