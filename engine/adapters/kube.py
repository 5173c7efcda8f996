"""The Kubernetes adapter: evictions, the Node's extended resources, conditions and taints, Events.

It decides nothing. The planner said what must be true; this executes it through the API server and
reports what happened in the executor's vocabulary (engine.adapters.result):

- **evictPod**: the policy/v1 Eviction subresource with a UID precondition, so a pod that was
  replaced by a namesake between plan and call is never the one evicted, and PodDisruptionBudgets
  are honoured. 2xx applied (plus a Warning ``Evicted`` Event on the pod carrying the rule's
  explanation, the kubelet's reason for the same act); 404 and the UID-precondition 409 vanished
  (our pod is gone); 429 deferred (a PDB, or API throttling: ask again in a later round; a throttling
  429's ``Retry-After`` holds every eviction back, without a request, until it has passed); anything
  else failed, with the server's status, reason, message and causes.
- **publishNodeResource**: an extended resource in ``status.capacity`` and ``status.allocatable``
  through the nodes/status subresource; a null value removes it. Its zone values, when it has
  them, go into the node's NodeResourceTopology (engine.adapters.nrt).
- **setNodeCondition**: one condition, merged by ``type`` into the kubelet's list.
- **setNodeTaint**: read-modify-write of ``spec.taints`` with the resourceVersion as precondition.
- **emitEvent**: an Event on the Node.

Node writes first compare with the Node the daemon's watch holds (``node()``): a steady state costs
no request at all. Status patches are strategic merge patches (what the official client sends for a
dict body; named explicitly): ``conditions`` has ``type`` as its merge key, so the kubelet's own
conditions are kept, and a ``null`` deletes a key of ``capacity``/``allocatable``.

Every call runs with ``REQUEST_TIMEOUT`` and raw JSON (``_preload_content=False``); no exception
leaves a handler: whatever goes wrong becomes a *failed* result naming the operation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from engine.adapters.nrt import TopologyZones
from engine.adapters.result import OperationResult
from engine.kube.apicall import (
    SMP,
    causes_of,
    consume,
    describe_error,
    parse_time,
    read_json,
    retry_after,
    rfc3339,
)
from engine.kube.client import REQUEST_TIMEOUT
from engine.kube.events import EventRecorder, EventType, ObjectRef
from engine.model.operations import (
    EmitEvent,
    EvictPod,
    Operation,
    PublishNodeResource,
    SetNodeCondition,
    SetNodeTaint,
)
from engine.model.units import parse_quantity

log = logging.getLogger("qosd")

NodeGetter = Callable[[], Mapping[str, Any] | None]
Handler = Callable[[Operation], OperationResult]

HEARTBEAT_REFRESH = 60.0  # seconds: an unchanged condition is rewritten this often to stay fresh
TAINT_CONFLICT_RETRIES = 3  # after the first write: re-read and retry on 409
EVICTED_REASON = "Evicted"  # the kubelet's Event reason for an eviction


class _Unreadable(Exception):
    """The Node could not be read; the message says why."""


# A pod whose eviction failed is asked again only after a per-pod backoff that doubles from 5ms to
# 1000s: client-go's DefaultControllerRateLimiter per item, the queue Katalyst's pod killer
# (AsynchronizedPodKiller) retries through. A daemon ticking every second asks again on the next
# ticks for the first few failures; a pod a PodDisruptionBudget keeps refusing is asked less and
# less often, instead of once a tick for as long as its rule holds.
RETRY_BASE_SECONDS = 0.005
RETRY_MAX_SECONDS = 1000.0
RETRY_TRACKED_PODS = 10_000  # bound on the per-pod failure records (oldest dropped first)


def retry_delay(failures: int) -> float:
    """Seconds to wait after the ``failures``-th failed eviction of a pod (1, 2, ...)."""
    return min(RETRY_BASE_SECONDS * float(2 ** min(failures - 1, 64)), RETRY_MAX_SECONDS)


class KubeOperations:
    """``node()`` returns the latest Node the daemon's node watch holds, or None before it synced
    (the adapter then reads the Node itself). ``clock`` gives seconds since the epoch."""

    def __init__(
        self,
        api_client: client.ApiClient,
        node_name: str,
        events: EventRecorder,
        node: NodeGetter,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.core = client.CoreV1Api(api_client)
        self.zones = TopologyZones(api_client, node_name)
        self.node_name = node_name
        self.events = events
        self.node = node
        self.clock = clock
        self.evict_not_before = 0.0  # a throttling 429 asked to wait until then (clock seconds)
        self.retry: dict[str, tuple[int, float]] = {}  # pod uid -> (failed evictions, not before)

    def handlers(self) -> dict[str, Handler]:
        """Handlers by operation kind, for ``NodeExecutor(others=...)``."""
        return {
            EvictPod.kind: self._guard(EvictPod, self.evict),
            PublishNodeResource.kind: self._guard(PublishNodeResource, self.publish),
            SetNodeCondition.kind: self._guard(SetNodeCondition, self.set_condition),
            SetNodeTaint.kind: self._guard(SetNodeTaint, self.set_taint),
            EmitEvent.kind: self._guard(EmitEvent, self.emit_event),
        }

    @staticmethod
    def _guard(expected: type, handler: Callable[[Any], OperationResult]) -> Handler:
        """Check the type and turn anything unforeseen into a failed result: the tick goes on."""

        def run(op: Operation) -> OperationResult:
            if not isinstance(op, expected):
                return OperationResult(op, "skipped", f"{op.kind} is not handled by this adapter entry")
            try:
                return handler(op)
            except Exception as exc:
                log.exception(
                    "Kubernetes operation raised unexpectedly",
                    extra={"fields": {"operation": op.to_dict()}},
                )
                return OperationResult(op, "failed", f"unexpected error (a qosd bug, see its log): {exc!r}")

        return run

    # ------------------------------------------------------------------ evictPod

    def evict(self, op: EvictPod) -> OperationResult:
        pod = f"{op.namespace}/{op.name}"
        wait = self.evict_not_before - self.clock()
        if wait > 0:
            return OperationResult(
                op,
                "deferred",
                f"eviction of {pod} not asked yet: the API server is throttling evictions and asked "
                f"to wait {wait:.1f}s more (Retry-After)",
                0,
            )
        failures, not_before = self.retry.get(op.uid, (0, 0.0))
        wait = not_before - self.clock()
        if wait > 0:
            return OperationResult(
                op,
                "deferred",
                f"eviction of {pod} not asked yet: it failed {failures} time(s) in a row and is retried "
                f"with a backoff ({retry_delay(failures):g}s now, doubling to {RETRY_MAX_SECONDS:g}s); "
                f"{wait:.3f}s more to wait",
                0,
            )
        result = self._evict(op, pod)
        self._note_outcome(op.uid, result.status)
        return result

    def _note_outcome(self, uid: str, status: str) -> None:
        """Count a refused or failed eviction toward the pod's backoff (a throttling 429 is the API
        server's, not the pod's: it holds every eviction through ``evict_not_before`` instead)."""
        if status in ("applied", "vanished"):
            self.retry.pop(uid, None)
            return
        if status not in ("failed", "deferred") or self.evict_not_before > self.clock():
            return
        failures = self.retry.pop(uid, (0, 0.0))[0] + 1
        self.retry[uid] = (failures, self.clock() + retry_delay(failures))
        while len(self.retry) > RETRY_TRACKED_PODS:
            self.retry.pop(next(iter(self.retry)))

    def _evict(self, op: EvictPod, pod: str) -> OperationResult:
        if op.grace_period_seconds is not None and op.grace_period_seconds < 0:
            # The planner resolves -1 (the pod's own) to a number; a negative value here is a bug.
            return OperationResult(
                op,
                "failed",
                f"eviction of {pod} not sent: gracePeriodSeconds {op.grace_period_seconds} is negative "
                "and the API accepts only seconds >= 0 (-1 should have been resolved to the pod's own)",
                0,
            )
        body = client.V1Eviction(
            api_version="policy/v1",
            kind="Eviction",
            metadata=client.V1ObjectMeta(name=op.name, namespace=op.namespace),
            delete_options=client.V1DeleteOptions(
                preconditions=client.V1Preconditions(uid=op.uid),
                grace_period_seconds=op.grace_period_seconds,
            ),
        )
        try:
            if op.killer == "delete":  # the rule chose a plain DELETE: no PodDisruptionBudget check
                response = self.core.delete_namespaced_pod(
                    op.name,
                    op.namespace,
                    body=body.delete_options,
                    _preload_content=False,
                    _request_timeout=REQUEST_TIMEOUT,
                )
            else:
                response = self.core.create_namespaced_pod_eviction(
                    op.name,
                    op.namespace,
                    body,
                    _preload_content=False,
                    _request_timeout=REQUEST_TIMEOUT,
                )
            consume(response)
        except ApiException as exc:
            error = describe_error(exc)
            if exc.status == 404:
                return OperationResult(op, "vanished", f"pod {pod} already gone ({error})", 1)
            if exc.status == 409:
                return OperationResult(
                    op,
                    "vanished",
                    f"pod {pod} with UID {op.uid} is gone: the name now belongs to another pod, "
                    f"which is left alone ({error})",
                    1,
                )
            if exc.status == 429:
                if "DisruptionBudget" in causes_of(exc):
                    why = "a PodDisruptionBudget does not allow it now"
                else:
                    # API priority and fairness (or a proxy) throttling: not about this pod.
                    seconds = retry_after(exc) or 0.0
                    self.evict_not_before = max(self.evict_not_before, self.clock() + seconds)
                    why = f"the API server is throttling requests (retry after {seconds:g}s)"
                message = f"eviction of {pod} refused for now ({why}), will be asked again: {error}"
                return OperationResult(op, "deferred", message, 1)
            return OperationResult(op, "failed", f"eviction of {pod} (UID {op.uid}) failed: {error}", 1)
        except Exception as exc:  # timeouts, refused connections, resets
            return OperationResult(
                op, "failed", f"eviction of {pod} (UID {op.uid}) failed: {describe_error(exc)}", 1
            )
        log.info(
            "pod evicted",
            extra={"fields": {"pod": pod, "uid": op.uid, "rule": op.rule, "reason": op.reason}},
        )
        self.events.record(
            ObjectRef("v1", "Pod", op.name, op.namespace, op.uid), "Warning", EVICTED_REASON, op.reason
        )
        grace = "" if op.grace_period_seconds is None else f", grace {op.grace_period_seconds}s"
        return OperationResult(op, "applied", None, 1, f"evicted {pod} (UID {op.uid}{grace})")

    # ------------------------------------------------------------------ node reads and writes

    def _observed(self) -> tuple[Mapping[str, Any], int]:
        """The Node as the watch holds it, else read now; and the number of requests that took."""
        node = self.node()
        if node is not None:
            return node, 0
        return self._read_node(), 1

    def _read_node(self) -> Mapping[str, Any]:
        try:
            obj = read_json(
                self.core.read_node(self.node_name, _preload_content=False, _request_timeout=REQUEST_TIMEOUT)
            )
        except Exception as exc:
            raise _Unreadable(f"cannot read Node {self.node_name}: {describe_error(exc)}") from exc
        if not isinstance(obj, Mapping):
            raise _Unreadable(f"cannot read Node {self.node_name}: the API server returned {obj!r}")
        return obj

    def _patch_status(self, body: Mapping[str, Any]) -> None:
        consume(
            self.core.patch_node_status(
                self.node_name,
                body,
                _content_type=SMP,
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT,
            )
        )

    def _status_failure(self, op: Operation, what: str, exc: Exception, attempts: int) -> OperationResult:
        error = describe_error(exc)
        if isinstance(exc, ApiException) and exc.status == 404:
            error += f" (is NODE_NAME={self.node_name} this node's name?)"
        return OperationResult(op, "failed", f"{what} on Node {self.node_name} failed: {error}", attempts)

    # ------------------------------------------------------------------ publishNodeResource

    def publish(self, op: PublishNodeResource) -> OperationResult:
        """The Node's capacity/allocatable, then the zones (engine.adapters.nrt) when the op has
        them: a zone failure fails the operation, a missing NodeResourceTopology only says so."""
        done = self._publish_node(op)
        if op.zones is None or done.status == "failed":
            return done
        status, what, calls = self.zones.publish(op.name, dict(op.zones))
        attempts = done.attempts + calls
        if status == "failed":
            return OperationResult(op, "failed", what, attempts, done.detail)
        detail = "; ".join(d for d in (done.detail, what) if d)
        if status == "applied":
            return OperationResult(op, "applied", None, attempts, detail)
        return OperationResult(op, done.status, done.error, attempts, detail)

    def _publish_node(self, op: PublishNodeResource) -> OperationResult:
        want: float | None = None
        if op.quantity is not None:
            try:
                want = parse_quantity(op.quantity)
            except ValueError as exc:
                return OperationResult(op, "failed", f"cannot publish {op.name}: {exc}")
        try:
            node, calls = self._observed()
        except _Unreadable as exc:
            return OperationResult(op, "failed", str(exc), 1)
        status = node.get("status") or {}
        have = {
            field: (status.get(field) or {}).get(op.name) for field in ("capacity", "allocatable")
        }
        if want is None:
            if all(v is None for v in have.values()):
                return OperationResult(op, "unchanged", None, calls, f"{op.name} not published")
        elif all(_same_quantity(v, want) for v in have.values()):
            return OperationResult(op, "unchanged", None, calls, f"{op.name} = {have['capacity']}")
        body = {"status": {"capacity": {op.name: op.quantity}, "allocatable": {op.name: op.quantity}}}
        try:
            self._patch_status(body)
        except Exception as exc:
            return self._status_failure(op, f"publishing {op.name}", exc, calls + 1)
        before = have["capacity"] if have["capacity"] is not None else "absent"
        after = op.quantity if op.quantity is not None else "removed"
        return OperationResult(op, "applied", None, calls + 1, f"{op.name}: {before} -> {after}")

    # ------------------------------------------------------------------ setNodeCondition

    def set_condition(self, op: SetNodeCondition) -> OperationResult:
        try:
            node, calls = self._observed()
        except _Unreadable as exc:
            return OperationResult(op, "failed", str(exc), 1)
        now = self.clock()
        conditions = (node.get("status") or {}).get("conditions") or []
        old = next((c for c in conditions if isinstance(c, Mapping) and c.get("type") == op.type), None)
        if old is not None and (old.get("status"), old.get("reason"), old.get("message")) == (
            op.status,
            op.reason,
            op.message,
        ):
            beat = parse_time(old.get("lastHeartbeatTime"))
            if beat is not None and abs(now - beat) < HEARTBEAT_REFRESH:
                return OperationResult(op, "unchanged", None, calls, f"{op.type}={op.status}")
        flips = old is None or old.get("status") != op.status or not old.get("lastTransitionTime")
        transition = rfc3339(now) if flips or old is None else str(old["lastTransitionTime"])
        condition = {
            "type": op.type,
            "status": op.status,
            "reason": op.reason,
            "message": op.message,
            "lastHeartbeatTime": rfc3339(now),
            "lastTransitionTime": transition,
        }
        try:
            self._patch_status({"status": {"conditions": [condition]}})
        except Exception as exc:
            return self._status_failure(op, f"setting condition {op.type}", exc, calls + 1)
        if old is None:
            detail = f"{op.type}={op.status} (new)"
        elif flips:
            detail = f"{op.type}: {old.get('status')} -> {op.status}"
        elif (old.get("reason"), old.get("message")) == (op.reason, op.message):
            detail = f"{op.type}={op.status} (heartbeat)"
        else:
            detail = f"{op.type}={op.status} (reason/message updated)"
        return OperationResult(op, "applied", None, calls + 1, detail)

    # ------------------------------------------------------------------ setNodeTaint

    def set_taint(self, op: SetNodeTaint) -> OperationResult:
        """Read-modify-write of ``spec.taints`` as the kube-controller-manager does it
        (``controller.PatchNodeTaints``): the whole list, patched with the resourceVersion it was
        read at. The API server treats that resourceVersion as a precondition, so a taint the
        kubelet or another controller added meanwhile yields a 409 and a re-read, never a lost
        write. A patch rather than a PUT: the official client's typed Node model silently drops
        fields it does not know, and a PUT of that model would reset them on a newer cluster.

        The first try uses the watched Node; each retry reads it fresh."""
        taint = f"{op.key}={op.value}:{op.effect}" if op.value else f"{op.key}:{op.effect}"
        calls = 0
        node = self.node()
        for attempt in range(1 + TAINT_CONFLICT_RETRIES):
            if node is None or attempt > 0:
                calls += 1
                try:
                    node = self._read_node()
                except _Unreadable as exc:
                    return OperationResult(op, "failed", f"cannot set taint {taint}: {exc}", calls)
            taints = [t for t in (node.get("spec") or {}).get("taints") or [] if isinstance(t, Mapping)]
            same = [t for t in taints if t.get("key") == op.key and t.get("effect") == op.effect]
            if same and all(str(t.get("value") or "") == op.value for t in same):
                return OperationResult(op, "unchanged", None, calls, f"taint {taint} present")
            new: dict[str, Any] = {"key": op.key, "effect": op.effect}
            if op.value:
                new["value"] = op.value
            if op.effect == "NoExecute":  # what kubectl and the node controller stamp, for tolerationSeconds
                new["timeAdded"] = rfc3339(self.clock())
            kept = [dict(t) for t in taints if not (t.get("key") == op.key and t.get("effect") == op.effect)]
            version = (node.get("metadata") or {}).get("resourceVersion")
            body = {"metadata": {"resourceVersion": version}, "spec": {"taints": [*kept, new]}}
            calls += 1
            try:
                consume(
                    self.core.patch_node(
                        self.node_name,
                        body,
                        _content_type=SMP,
                        _preload_content=False,
                        _request_timeout=REQUEST_TIMEOUT,
                    )
                )
            except ApiException as exc:
                if exc.status == 409:
                    log.info(
                        "Node changed while setting a taint; re-reading",
                        extra={"fields": {"node": self.node_name, "taint": taint, "attempt": attempt + 1}},
                    )
                    continue
                return self._status_failure(op, f"setting taint {taint}", exc, calls)
            except Exception as exc:
                return self._status_failure(op, f"setting taint {taint}", exc, calls)
            if same:
                detail = f"taint {op.key}:{op.effect} value {same[0].get('value') or ''!r} -> {op.value!r}"
            else:
                detail = f"taint {taint} added"
            return OperationResult(op, "applied", None, calls, detail)
        return OperationResult(
            op,
            "failed",
            f"setting taint {taint} on Node {self.node_name} gave up after {1 + TAINT_CONFLICT_RETRIES} "
            "conflicting writes (409): other writers keep changing the Node; it will be tried next tick",
            calls,
        )

    # ------------------------------------------------------------------ emitEvent

    def emit_event(self, op: EmitEvent) -> OperationResult:
        type_: EventType = "Normal" if op.severity == "Normal" else "Warning"
        node = self.node()
        uid = str(((node or {}).get("metadata") or {}).get("uid") or "")
        self.events.record(ObjectRef("v1", "Node", self.node_name, "", uid), type_, op.reason, op.message)
        detail = f"{type_} Event {op.reason} queued on Node {self.node_name}"
        return OperationResult(op, "applied", None, 0, detail)


def _same_quantity(have: object, want: float) -> bool:
    """The API server stores quantities in canonical form ("4000" comes back as "4k"), so compare
    values, not strings."""
    if not isinstance(have, str | int | float):
        return False
    try:
        return parse_quantity(have) == want
    except ValueError:
        return False
