"""Intents say what should be true, each with the provenance that makes ``qosd explain`` possible.

An intent names the rule, the policy generation and hash, where the rule was written, what the rule
matched on (a NUMA node, a pod), the conditions with observed values against thresholds, and the
inputs of any computation (victim ranking, release arithmetic). Intents are data; the planner turns
them into operations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

STEP_NAMES: Mapping[str, str] = {
    "classes": "the class knobs step of spec.classes",
    "pools": "the CPU pool step of spec.pools",
    "resctrl": "the resctrl step of the classes' resctrl sections and the setResctrl groups",
}
"""The names under which engine steps (not rules) sign their intents and skipped notes, and what each
is. A rule may not take one of these names (the compiler refuses it), so ``qosd explain`` and the
simulate timeline can attribute a note to the step that wrote it instead of to a rule that does not
exist."""


def step_description(name: str) -> str | None:
    """What wrote a provenance or skipped note of this name when it is an engine step, else None."""
    return STEP_NAMES.get(name)


@dataclass(frozen=True)
class Observation:
    """One comparison as evaluated: what was read, against which threshold, and whether it held."""

    fact: str
    op: str
    threshold: Any
    observed: Any
    met: bool
    window: float | None = None
    agg: str = "last"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "fact": self.fact,
            "op": self.op,
            "threshold": self.threshold,
            "observed": self.observed,
            "met": self.met,
        }
        if self.window is not None:
            out["window"] = self.window
            out["agg"] = self.agg
        return out


@dataclass(frozen=True)
class Provenance:
    rule: str
    policy_hash: str
    generation: int
    source: str
    mode: str
    item: str | None = None
    conditions: tuple[Observation, ...] = ()
    inputs: Mapping[str, Any] = field(default_factory=dict)
    # A node-level action of an itemized rule acts once per tick for all its items: every item whose
    # condition held (each NUMA node of a NUMA-scoped rule); ``item``/``conditions`` are the first's.
    items: tuple[str, ...] = ()

    @property
    def audit(self) -> bool:
        return self.mode == "audit"

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "policy": {"hash": self.policy_hash, "generation": self.generation},
            "source": self.source,
            "mode": self.mode,
            "item": self.item,
            "conditions": [o.to_dict() for o in self.conditions],
            "inputs": dict(self.inputs),
            **({"items": list(self.items)} if self.items else {}),
        }


@dataclass(frozen=True)
class Release:
    """Release arithmetic of one eviction round of one rule."""

    resource: str
    target: float
    formula: str
    pending: float
    released_before: float
    released_after: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "resource": self.resource,
            "target": self.target,
            "formula": self.formula,
            "pendingCredit": self.pending,
            "releasedBefore": self.released_before,
            "releasedAfter": self.released_after,
        }


@dataclass(frozen=True)
class EvictIntent:
    uid: str
    namespace: str
    name: str
    class_name: str | None
    rank: int
    ranking: tuple[tuple[str, Any], ...]
    credit: float
    release: Release | None
    grace_period_seconds: int | None
    provenance: Provenance
    # How the pod is removed (evict.killer): "evictionAPI" (PDBs respected) or "delete".
    killer: str = "evictionAPI"

    kind = "evict"

    @property
    def target(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "target": self.target,
            "uid": self.uid,
            "class": self.class_name,
            "rank": self.rank,
            "ranking": {k: v for k, v in self.ranking},
            "credit": self.credit,
            "release": self.release.to_dict() if self.release else None,
            "gracePeriodSeconds": self.grace_period_seconds,
            "killer": self.killer,
            "provenance": self.provenance.to_dict(),
        }


@dataclass(frozen=True)
class NodeIntent:
    """A node-level side effect: ``taint``, ``condition`` or ``notify`` (an Event)."""

    kind: str
    params: Mapping[str, Any]
    provenance: Provenance

    @property
    def target(self) -> str:
        return "node"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "target": self.target,
            **dict(self.params),
            "provenance": self.provenance.to_dict(),
        }


@dataclass(frozen=True)
class CgroupIntent:
    """A cgroup file should hold this value (the planner writes it only if it does not)."""

    path: str
    file: str
    value: str
    pod: str | None
    provenance: Provenance

    kind = "cgroup"

    @property
    def target(self) -> str:
        return f"{self.path}/{self.file}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "target": self.target,
            "path": self.path,
            "file": self.file,
            "value": self.value,
            "pod": self.pod,
            "provenance": self.provenance.to_dict(),
        }


@dataclass(frozen=True)
class ResctrlIntent:
    """A resctrl control group should exist, hold these schemata lines and these pods' tasks."""

    group: str
    schemata: Mapping[str, str]  # resource ("L3", "MB") -> "0=ff;1=ff"
    pods: tuple[str, ...]  # pod keys whose tasks belong in the group
    cgroups: tuple[str, ...]  # their cgroup paths: the adapter reads the task ids from them each tick
    provenance: Provenance

    kind = "resctrl"

    @property
    def target(self) -> str:
        return f"resctrl/{self.group}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "target": self.target,
            "group": self.group,
            "schemata": dict(self.schemata),
            "pods": list(self.pods),
            "provenance": self.provenance.to_dict(),
        }


Intent = EvictIntent | NodeIntent | CgroupIntent | ResctrlIntent
