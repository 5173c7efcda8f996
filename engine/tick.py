"""One tick: snapshot -> evaluation -> plan -> next state. The single path every mode runs.

The daemon executes the plan's operations through adapters; ``qosd eval``, ``simulate`` and ``test``
stop at the plan (or hand it to the recording adapter). Nothing here performs a side effect.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.evaluate.engine import Engine, Evaluation, record_evictions
from engine.evaluate.state import EngineState
from engine.model.facts import Snapshot
from engine.plan.planner import Guards, Plan, plan


@dataclass(frozen=True)
class TickResult:
    evaluation: Evaluation
    plan: Plan
    state: EngineState

    def to_dict(self) -> dict[str, Any]:
        return {**self.evaluation.to_dict(), **self.plan.to_dict()}


def run_tick(engine: Engine, snapshot: Snapshot, state: EngineState, guards: Guards) -> TickResult:
    return plan_tick(engine, engine.evaluate(snapshot, state), snapshot, guards)


def plan_tick(engine: Engine, evaluation: Evaluation, snapshot: Snapshot, guards: Guards) -> TickResult:
    """The plan of an evaluation against the observed state in ``snapshot``.

    Separate from evaluation so the daemon can plan again, unchanged decisions against a fuller
    observation (files it had not read yet), without evaluating twice."""
    resctrl = snapshot.resctrl.groups if snapshot.resctrl.mounted else None
    # by_uid is built only when an eviction needs its pod (the pod's own grace period).
    result = plan(
        evaluation.intents,
        engine.policy,
        guards,
        snapshot.cgroups,
        resctrl,
        lambda uid: snapshot.by_uid.get(uid),
        snapshot.absent_cgroups,
    )
    next_state = record_evictions(evaluation.state, list(result.evicted), snapshot.time)
    return TickResult(evaluation, result, next_state)
