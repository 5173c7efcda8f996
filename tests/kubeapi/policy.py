"""The Eviction subresource and the PodDisruptionBudget arithmetic behind it.

Follows pkg/registry/core/pod/storage/eviction.go (EvictionREST.Create) and the disruption controller
(pkg/controller/disruption): a pod that is Pending, Succeeded, Failed or already terminating is deleted
without looking at budgets; otherwise the one PDB whose selector matches the pod must allow a
disruption, or the answer is 429 with a DisruptionBudget cause; two matching PDBs are a 500. A
successful eviction first adds the DisruptionTarget condition to the pod, then deletes it (gracefully
when the server has a pod_termination_delay).

Why the budget is computed at eviction time: there is no disruption controller here, so the emulator
acts as one that is always caught up (status.observedGeneration == generation). Without controllers
(ReplicaSets...) to ask for a scale, the expected pod count of percentage and maxUnavailable budgets is
the number of pods the selector matches, terminating ones included: a controller's replica count in
steady state.
"""

from __future__ import annotations

import math
from typing import Any

from tests.kubeapi import errors as E
from tests.kubeapi.errors import ApiError
from tests.kubeapi.registry import DeleteOptions, Registry, now, rfc3339
from tests.kubeapi.selectors import FieldSelector, LabelSelector, selector_from_object

Json = dict[str, Any]

EVICTION_REFUSED = "Cannot evict pod as it would violate the pod's disruption budget."
MULTIPLE_PDBS = (
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
)


def is_pod_ready(pod: Json) -> bool:
    """podutil.IsPodReady: the Ready condition exists and is True (no condition: not ready)."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def can_ignore_pdb(pod: Json) -> bool:
    """canIgnorePDB: the pod already disrupts nothing (not started, finished, or terminating)."""
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed", "Pending") or bool(
        (pod.get("metadata") or {}).get("deletionTimestamp")
    )


def scaled(value: Any, total: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent with roundUp=true."""
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    return int(value)


def disruption_status(pdb: Json, pods: list[Json]) -> Json:
    """PodDisruptionBudgetStatus as the disruption controller computes it for ``pods`` (all pods of the
    PDB's namespace). Healthy: not terminating and Ready (countHealthyPods)."""
    spec = pdb.get("spec") or {}
    selector = selector_from_object(spec.get("selector"))
    matched = [p for p in pods if selector.matches((p.get("metadata") or {}).get("labels"))]
    expected = len(matched)
    if spec.get("maxUnavailable") is not None:
        desired = max(expected - scaled(spec["maxUnavailable"], expected), 0)
    elif spec.get("minAvailable") is not None:
        desired = scaled(spec["minAvailable"], expected)
    else:
        desired = 0
    healthy = sum(
        1 for p in matched if not (p.get("metadata") or {}).get("deletionTimestamp") and is_pod_ready(p)
    )
    return {
        "observedGeneration": (pdb.get("metadata") or {}).get("generation", 1),
        "disruptionsAllowed": max(healthy - desired, 0),
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
    }


def _success() -> Json:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


def evict(registry: Registry, namespace: str, name: str, body: Any) -> Json:
    """POST pods/<name>/eviction. Returns the Status to write with 201, or raises an ApiError."""
    if not isinstance(body, dict) or body.get("kind") not in (None, "Eviction"):
        raise E.bad_request(f"not a Eviction object: {type(body).__name__}")
    if body.get("apiVersion") not in (None, "policy/v1", "policy/v1beta1"):
        raise E.bad_request(
            f"the API version in the data ({body.get('apiVersion')}) does not match the expected API version (policy/v1)"
        )
    if (body.get("metadata") or {}).get("name") != name:
        raise E.bad_request("name in URL does not match name in Eviction object")
    options = DeleteOptions.parse(body.get("deleteOptions"), {})
    pods = registry.lookup("", "v1", "pods")
    pdbs = registry.lookup("policy", "v1", "poddisruptionbudgets")
    assert pods is not None and pdbs is not None
    with registry.store.lock:
        pod = registry.get(pods, namespace, name)
        if not can_ignore_pdb(pod):
            labels = (pod.get("metadata") or {}).get("labels") or {}
            matching = [
                p
                for p in registry.list(pdbs, namespace, LabelSelector(), FieldSelector()).items
                if _selects(p, labels)
            ]
            if len(matching) > 1:
                raise ApiError(500, "", MULTIPLE_PDBS)
            if matching:
                pdb = matching[0]
                all_pods = registry.list(pods, namespace, LabelSelector(), FieldSelector()).items
                status = disruption_status(pdb, all_pods)
                unhealthy_may_go = not is_pod_ready(pod) and (
                    (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow"
                    or (status["currentHealthy"] >= status["desiredHealthy"] and status["desiredHealthy"] > 0)
                )
                if not unhealthy_may_go and status["disruptionsAllowed"] <= 0:
                    pdb_name = pdb["metadata"]["name"]
                    raise E.too_many_requests(
                        EVICTION_REFUSED,
                        [
                            {
                                "reason": "DisruptionBudget",
                                "message": f"The disruption budget {pdb_name} needs {status['desiredHealthy']} "
                                f"healthy pods and has {status['currentHealthy']} currently",
                            }
                        ],
                    )
        if options.dry_run:
            return _success()
        _check_preconditions(pod, options)
        _add_disruption_condition(registry, pod)
        registry.delete(
            pods, namespace, name, DeleteOptions(grace_period_seconds=options.grace_period_seconds)
        )
        return _success()


def _selects(pdb: Json, labels: dict[str, str]) -> bool:
    try:
        selector = selector_from_object((pdb.get("spec") or {}).get("selector"))
    except ApiError:
        return False  # "This object has an invalid selector, it does not match the pod"
    return selector.matches(labels)


def _check_preconditions(pod: Json, options: DeleteOptions) -> None:
    """addConditionAndDeletePod's preconditions (note the resource "Pod" in these messages)."""
    meta = pod["metadata"]
    if options.uid and options.uid != meta.get("uid"):
        raise E.conflict(
            "",
            "Pod",
            meta["name"],
            f"the UID in the precondition ({options.uid}) does not match the UID in record ({meta.get('uid')}). "
            "The object might have been deleted and then recreated",
        )
    if options.resource_version and options.resource_version != meta.get("resourceVersion"):
        raise E.conflict(
            "",
            "Pod",
            meta["name"],
            f"the ResourceVersion in the precondition ({options.resource_version}) does not match the "
            f"ResourceVersion in record ({meta.get('resourceVersion')}). The object might have been modified",
        )


def _add_disruption_condition(registry: Registry, pod: Json) -> None:
    """podutil.UpdatePodCondition with DisruptionTarget=True (reason EvictionByEvictionAPI)."""
    pods = registry.lookup("", "v1", "pods")
    assert pods is not None
    status = dict(pod.get("status") or {})
    conditions = [dict(c) for c in status.get("conditions") or []]
    wanted = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting",
    }
    existing = next((c for c in conditions if c.get("type") == "DisruptionTarget"), None)
    if existing is None:
        conditions.append({**wanted, "lastTransitionTime": rfc3339(now())})
    else:
        if existing.get("status") != "True":
            existing["lastTransitionTime"] = rfc3339(now())
        existing.update(wanted)
    status["conditions"] = conditions
    updated = {**pod, "status": status}
    registry.update(
        pods, pod["metadata"]["namespace"], pod["metadata"]["name"], updated, subresource="status"
    )
