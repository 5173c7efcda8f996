"""Operations: the minimal writes that make intents true. Adapters execute them and decide nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class EvictPod:
    uid: str
    namespace: str
    name: str
    grace_period_seconds: int | None
    reason: str
    rule: str

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
    """Set (or, with quantity None, remove) an extended resource in the node's capacity/allocatable."""

    name: str
    quantity: str | None
    rule: str

    kind = "publishNodeResource"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "quantity": self.quantity, "rule": self.rule}


@dataclass(frozen=True)
class WriteCgroup:
    path: str
    file: str
    value: str
    rule: str

    kind = "writeCgroup"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "path": self.path,
            "file": self.file,
            "value": self.value,
            "rule": self.rule,
        }


Operation = EvictPod | SetNodeTaint | SetNodeCondition | EmitEvent | PublishNodeResource | WriteCgroup
