"""Which pods count as high priority (HP) in the batch-resource formulas.

HP pods' usage and requests reduce what is lent; the others run on it. By default a pod is HP when
its class is not a reclaimed one. Koordinator decides by the pod's priority class first
(``koordinator.sh/priority-class``, else the band of ``spec.priority``) and by its QoS class only
when it has none, so a BE-labelled pod in the koord-mid band is HP there: spec.reclaim.
priorityOverrides expresses that, the first override that fits deciding.

Compiled once per policy generation; a pod no override fits costs one (cached) classification.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from engine.config.policy import Policy
from engine.evaluate.classify import Classifier, match_any
from engine.model.facts import Workload


class HighPriority:
    def __init__(self, policy: Policy, classifier: Classifier, reclaimed: frozenset[str]) -> None:
        self.classifier = classifier
        self.reclaimed = reclaimed
        self.overrides: tuple[tuple[Callable[[Workload], bool], bool], ...] = tuple(
            (match_any(o.matchers), o.high_priority) for o in policy.reclaim.priority_overrides
        )

    def __call__(self, w: Workload) -> bool:
        for test, high in self.overrides:
            if test(w):
                return high
        return self.classifier.classify(w).class_name not in self.reclaimed

    def unlisted(self, uid: str, facts: Mapping[str, Any]) -> bool:
        """A pod metric whose pod is in no list (Koordinator's dangling pod): only what the metric
        says of its pod (``priority``, ``name``, ``namespace``) can be judged, by the overrides. None
        fitting, it is HP: Koordinator counts it unless its priority class is batch or free, and a
        class cannot be told from a metric."""
        priority = facts.get("priority")
        pod = Workload(
            uid=uid,
            name=str(facts.get("name") or uid),
            namespace=str(facts.get("namespace") or ""),
            priority=int(priority) if isinstance(priority, int | float) else None,
        )
        return next((high for test, high in self.overrides if test(pod)), True)
