"""Policy status in the cluster: each node's QoSNodeStatus, and each QoSPolicy's conditions.

Who writes what, and why nothing conflicts across nodes:

- **QoSNodeStatus/<node>** is written only by the daemon of that node (NodeStatusWriter): the
  generation in effect (hash, time, the QoSPolicies and files it was built from) and the last
  reload attempt with its problems. One writer per object: no 409s between nodes, no lost updates,
  no daemon watching its peers, and an object whose size does not grow with the cluster. It is
  owned by the Node, so the garbage collector deletes it with the node.
- **QoSPolicy.status** (observedGeneration, the Valid and Applied conditions, ``nodes`` counts and
  recent errors) is written only by the one daemon holding the ``qosd-policy-status`` Lease
  (PolicyStatusAggregator), from the QoSPolicies and the QoSNodeStatus objects. A single elected
  writer again: the alternatives (every node patching a shared status, or a per-node map inside
  it) make every node's write an event for every other node's watch, O(nodes^2) traffic, and hit
  etcd's object size limit on large clusters.

Both write through the status subresource with JSON merge patches, from a background thread that
keeps only the latest wanted content, so a slow or unreachable API server never delays a tick or
a reload, and a burst of reloads makes one write.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from kubernetes import client
from kubernetes.client.rest import ApiException

from engine.config.errors import Problem
from engine.config.load import Document
from engine.config.pipeline import load_documents, validate
from engine.kube.apicall import consume, describe_error, rfc3339
from engine.kube.client import (
    API_VERSION,
    GROUP,
    NODE_STATUS_KIND,
    NODE_STATUS_PLURAL,
    POLICY_KIND,
    POLICY_PLURAL,
    REQUEST_TIMEOUT,
    VERSION,
    Backoff,
)
from engine.kube.events import EventRecorder, ObjectRef
from engine.reload import ReloadOutcome

log = logging.getLogger("qosd")

T = TypeVar("T")

MAX_PROBLEMS = 20  # per status object; full detail is in the daemon's log and Events
MAX_RECENT_ERRORS = 10  # QoSPolicy.status.nodes.recentErrors (schema maxItems)
MESSAGE_LIMIT = 4000
# The policy-status Lease: duration, renew deadline, retry period (seconds; client-go's defaults
# for controllers). A leader that cannot renew within the deadline stops writing; a standby takes
# over once the duration has passed since the last renewal it saw.
LEASE_TIMING = (15, 10, 2)
STATUS_RETRY = (0.5, 30.0)  # seconds: first and longest wait between retries of a status write


def _clip(text: str, limit: int = MESSAGE_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 15] + " ... (truncated)"


def problem_status(p: Problem) -> dict[str, Any]:
    out: dict[str, Any] = {"source": p.location.source, "path": p.location.path, "message": _clip(p.message)}
    if p.location.line:
        out["line"], out["column"] = p.location.line, p.location.column
    return out


def policy_of(p: Problem) -> str | None:
    """The QoSPolicy a problem is located in (CR documents are named QoSPolicy/<name>)."""
    source = p.location.source
    return source.removeprefix(f"{POLICY_KIND}/") if source.startswith(f"{POLICY_KIND}/") else None


class LatestWriter(Generic[T]):
    """Writes the most recent value handed to it, from one background thread, retrying failures
    with jittered backoff. Values superseded before they were written are never written."""

    def __init__(self, name: str, write: Callable[[T], None], backoff: Backoff | None = None) -> None:
        self.name = name
        self.write = write
        self.backoff = backoff or Backoff(base=STATUS_RETRY[0], cap=STATUS_RETRY[1])
        self.failures = 0
        self._cv = threading.Condition()
        self._value: T | None = None
        self._pending = False
        self._busy = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"qosd-{name}", daemon=True)

    def start(self) -> None:
        """Values submitted before start are written once it runs."""
        if not self._thread.is_alive():
            self._thread.start()

    def submit(self, value: T) -> None:
        with self._cv:
            self._value, self._pending = value, True
            self._cv.notify()

    def flush(self, timeout: float) -> bool:
        """Wait until nothing is pending or being written (tests, shutdown)."""
        with self._cv:
            return self._cv.wait_for(lambda: not self._pending and not self._busy, timeout)

    def stop(self) -> None:
        self._stop.set()
        with self._cv:
            self._cv.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._cv:
                self._cv.wait_for(lambda: self._pending or self._stop.is_set())
                if self._stop.is_set():
                    return
                value, self._pending, self._busy = self._value, False, True
            assert value is not None
            try:
                self.write(value)
                self.backoff.reset()
            except Exception as exc:  # the API is down, slow or refusing: retry, never die
                self.failures += 1
                log.warning(
                    "status write failed; retrying",
                    extra={"fields": {"writer": self.name, "error": describe_error(exc)}},
                )
                with self._cv:
                    if not self._pending:  # nothing newer arrived: retry this one
                        self._value, self._pending = value, True
                self.backoff.sleep(self._stop)
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()


# ---------------------------------------------------------------- the node's own status


class NodeStatusWriter:
    """A Reloader listener that keeps QoSNodeStatus/<node> current and puts an Event on the Node
    when a reload is rejected (the Node is where an on-call engineer looks for one node's trouble)."""

    def __init__(
        self,
        api_client: client.ApiClient,
        node_name: str,
        events: EventRecorder | None = None,
        node_uid: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.api = client.CustomObjectsApi(api_client)
        self.node_name = node_name
        self.events = events
        self.node_uid = node_uid
        self.applied: dict[str, Any] | None = None
        self._exists = False
        self.writer: LatestWriter[dict[str, Any]] = LatestWriter("node-status", self._write)

    def __call__(self, outcome: ReloadOutcome) -> None:
        policies = [{"name": n, "generation": g} for n, g in outcome.policies]
        attempt: dict[str, Any] = {
            "generation": outcome.generation,
            "hash": outcome.attempted_hash or outcome.policy_hash,
            "time": rfc3339(outcome.time),
            "result": {"loaded": "Applied", "unchanged": "Unchanged", "failed": "Rejected"}[outcome.result],
            "source": outcome.source,
            "policies": policies,
            "files": list(outcome.files),
            "problems": [problem_status(p) for p in outcome.problems[:MAX_PROBLEMS]] or None,
        }
        if outcome.result == "loaded" or (outcome.result == "unchanged" and self.applied is None):
            self.applied = {
                "generation": outcome.generation,
                "hash": outcome.policy_hash,
                "time": rfc3339(outcome.time),
                "policies": policies,
                "files": list(outcome.files),
            }
        elif outcome.result == "unchanged" and self.applied is not None:
            # The same policy from newer resources (a CR re-applied unchanged): it is what runs.
            self.applied = {**self.applied, "policies": policies, "files": list(outcome.files)}
        self.writer.submit(
            {"status": {"nodeName": self.node_name, "applied": self.applied, "lastAttempt": attempt}}
        )
        if outcome.result == "failed" and self.events is not None:
            kept = (
                f"generation {outcome.generation}" if outcome.policy_hash else "no policy (none loaded yet)"
            )
            self.events.record(
                ObjectRef("v1", "Node", self.node_name, "", self.node_uid() or ""),
                "Warning",
                "PolicyRejected",
                _clip(f"qosd rejected a policy reload ({outcome.source}); keeping {kept}: {outcome.error}"),
            )

    def _write(self, body: dict[str, Any]) -> None:
        if not self._exists:
            self._create()
        try:
            consume(
                self.api.patch_cluster_custom_object_status(
                    GROUP,
                    VERSION,
                    NODE_STATUS_PLURAL,
                    self.node_name,
                    body,
                    _request_timeout=REQUEST_TIMEOUT,
                    _preload_content=False,
                )
            )
        except ApiException as exc:
            if exc.status == 404:  # deleted behind our back: create it again on the retry
                self._exists = False
            raise

    def _create(self) -> None:
        meta: dict[str, Any] = {"name": self.node_name, "labels": {"app.kubernetes.io/part-of": "qosd"}}
        uid = self.node_uid()
        if uid:
            meta["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Node", "name": self.node_name, "uid": uid}
            ]
        try:
            consume(
                self.api.create_cluster_custom_object(
                    GROUP,
                    VERSION,
                    NODE_STATUS_PLURAL,
                    {"apiVersion": API_VERSION, "kind": NODE_STATUS_KIND, "metadata": meta},
                    _request_timeout=REQUEST_TIMEOUT,
                    _preload_content=False,
                )
            )
        except ApiException as exc:
            if exc.status != 409:  # 409: it exists (a previous run made it)
                raise
        self._exists = True

    def start(self) -> None:
        self.writer.start()

    def flush(self, timeout: float = 5.0) -> bool:
        return self.writer.flush(timeout)

    def stop(self) -> None:
        self.writer.stop()


# ---------------------------------------------------------------- QoSPolicy status (one elected writer)


def condition(
    type_: str,
    status: str,
    reason: str,
    message: str,
    generation: int,
    previous: Sequence[Mapping[str, Any]],
    now: float,
) -> dict[str, Any]:
    """A metav1.Condition whose lastTransitionTime moves only when its status flips."""
    old = next((c for c in previous if isinstance(c, Mapping) and c.get("type") == type_), None)
    since = old.get("lastTransitionTime") if old is not None and old.get("status") == status else None
    return {
        "type": type_,
        "status": status,
        "observedGeneration": generation,
        "lastTransitionTime": since or rfc3339(now),
        "reason": reason,
        "message": _clip(message, 32000),
    }


def _mentions(refs: Any, name: str, generation: int | None = None) -> bool:
    for r in refs or ():
        if (
            isinstance(r, Mapping)
            and r.get("name") == name
            and (generation is None or int(r.get("generation") or 0) == generation)
        ):
            return True
    return False


def node_summary(
    name: str, generation: int, node_statuses: Mapping[str, Mapping[str, Any]]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """QoSPolicy.status.nodes from the nodes' reports: matched = nodes whose last attempt or
    generation in effect included the policy (its selector picked them); applied = those running
    its current generation; failed = those whose attempt with its current generation was rejected.
    Returns the summary and the failures (newest first) for recentErrors."""
    matched = applied = failed = 0
    errors: list[dict[str, Any]] = []
    for node, obj in sorted(node_statuses.items()):
        status = obj.get("status") or {}
        attempt, running = status.get("lastAttempt") or {}, status.get("applied") or {}
        if not (_mentions(attempt.get("policies"), name) or _mentions(running.get("policies"), name)):
            continue
        matched += 1
        if attempt.get("result") == "Rejected" and _mentions(attempt.get("policies"), name, generation):
            failed += 1
            problems = attempt.get("problems") or []
            mine = [p for p in problems if p.get("source") == f"{POLICY_KIND}/{name}"] or problems
            text = "; ".join(
                f"{p.get('source', '?')} {p.get('path', '$')}: {p.get('message', '')}" for p in mine[:3]
            )
            errors.append(
                {
                    "node": node,
                    "generation": generation,
                    "hash": str(attempt.get("hash") or "")[:128],
                    "time": attempt.get("time"),
                    "message": _clip(text or "rejected (no detail reported)", 4000),
                }
            )
        elif _mentions(running.get("policies"), name, generation):
            applied += 1
    errors.sort(key=lambda e: str(e.get("time") or ""), reverse=True)
    return {"matched": matched, "applied": applied, "failed": failed}, errors


def applied_condition(summary: Mapping[str, int]) -> tuple[str, str, str]:
    matched, applied, failed = summary["matched"], summary["applied"], summary["failed"]
    if failed:
        return (
            "False",
            "RejectedOnNodes",
            f"{failed} of {matched} matched nodes rejected the current generation",
        )
    if matched == 0:
        return (
            "Unknown",
            "NoReportingNodes",
            "no node running qosd has reported this policy; check spec.nodeSelector against node labels",
        )
    if applied < matched:
        return "Unknown", "Progressing", f"{applied} of {matched} matched nodes run the current generation"
    return "True", "Applied", f"all {matched} matched nodes run the current generation"


class PolicyStatusAggregator:
    """Computes and writes every QoSPolicy's status while this daemon holds the Lease.

    Valid comes from validating the QoSPolicies themselves (with the built-in layer, across the
    node variants their selectors distinguish: pipeline.validate), so it does not depend on which
    nodes happen to run; Applied and ``nodes`` come from the QoSNodeStatus reports."""

    def __init__(
        self,
        api_client: client.ApiClient,
        policies: Callable[[], Mapping[str, Mapping[str, Any]]],
        documents: Callable[[], Sequence[Document]],
        node_statuses: Callable[[], Mapping[str, Mapping[str, Any]]],
        events: EventRecorder | None = None,
        builtin: bool = True,
        clock: Callable[[], float] | None = None,
    ) -> None:
        import time

        self.api = client.CustomObjectsApi(api_client)
        self.policies = policies
        self.documents = documents
        self.node_statuses = node_statuses
        self.events = events
        self.builtin = builtin
        self.clock = clock or time.time
        self.writes = 0
        self._valid_key: Any = None
        self._problems: dict[str, list[Problem]] = {}
        self._reported: dict[tuple[str, str], Any] = {}  # events already sent (policy, kind) -> key
        self._written: dict[str, str] = {}  # name -> what we last wrote (the watch may lag behind it)

    def validity(self) -> Mapping[str, list[Problem]]:
        """QoSPolicy name -> its problems (empty: valid); recomputed only when a policy changed."""
        docs = self.documents()
        key = tuple(id(d) for d in docs)
        if key != self._valid_key:
            base = load_documents([], builtin=True) if self.builtin else []
            found: dict[str, list[Problem]] = {}
            for p in validate([*base, *docs]):
                for loc in (p.location, *p.related):
                    name = policy_of(Problem(loc, p.message))
                    if name is not None:
                        found.setdefault(name, []).append(p)
            self._problems, self._valid_key = found, key
        return self._problems

    def desired(self, obj: Mapping[str, Any], now: float) -> dict[str, Any]:
        meta = obj.get("metadata") or {}
        name, generation = str(meta.get("name")), int(meta.get("generation") or 0)
        previous = (obj.get("status") or {}).get("conditions") or []
        problems = self.validity().get(name, [])
        if problems:
            valid = condition(
                "Valid",
                "False",
                "Invalid",
                _clip("; ".join(p.format() for p in problems[:5])),
                generation,
                previous,
                now,
            )
        else:
            valid = condition(
                "Valid", "True", "Valid", "renders, validates and compiles", generation, previous, now
            )
        summary, errors = node_summary(name, generation, self.node_statuses())
        status, reason, message = applied_condition(summary)
        applied = condition("Applied", status, reason, message, generation, previous, now)
        return {
            "observedGeneration": generation,
            "conditions": [valid, applied],
            "nodes": {**summary, "recentErrors": errors[:MAX_RECENT_ERRORS]},
        }

    def sync(self) -> int:
        """One pass over every QoSPolicy; returns how many statuses were written."""
        now = self.clock()
        written = 0
        for name, obj in sorted(self.policies().items()):
            want = self.desired(obj, now)
            key = _comparable(want)
            if key == _comparable(obj.get("status") or {}) or key == self._written.get(name):
                continue
            # The answer (the whole object) is not read: a policy nested past the client's JSON
            # decoder would make it raise RecursionError, and the status must still be written.
            consume(
                self.api.patch_cluster_custom_object_status(
                    GROUP,
                    VERSION,
                    POLICY_PLURAL,
                    name,
                    {"status": want},
                    _request_timeout=REQUEST_TIMEOUT,
                    _preload_content=False,
                )
            )
            self._written[name] = key
            written += 1
            self.writes += 1
            self._announce(obj, want)
        return written

    def forget(self) -> None:
        """Drop the memo of writes: the next sync compares only with what the API holds."""
        self._written.clear()

    def _announce(self, obj: Mapping[str, Any], status: Mapping[str, Any]) -> None:
        """One Event per new invalid generation and per new set of rejecting nodes."""
        if self.events is None:
            return
        meta = obj.get("metadata") or {}
        name, generation = str(meta.get("name")), int(meta.get("generation") or 0)
        ref = ObjectRef(API_VERSION, POLICY_KIND, name, "", str(meta.get("uid") or ""))
        valid = status["conditions"][0]
        if valid["status"] == "False" and self._reported.get((name, "invalid")) != generation:
            self._reported[(name, "invalid")] = generation
            self.events.record(
                ref, "Warning", "InvalidPolicy", _clip(f"generation {generation}: {valid['message']}")
            )
        failed = tuple(e["node"] for e in status["nodes"]["recentErrors"])
        if failed and self._reported.get((name, "rejected")) != (generation, failed):
            self._reported[(name, "rejected")] = (generation, failed)
            first = status["nodes"]["recentErrors"][0]
            self.events.record(
                ref,
                "Warning",
                "ReloadFailed",
                _clip(
                    f"generation {generation} rejected on {len(failed)} node(s), each keeping its last good "
                    f"generation; {first['node']}: {first['message']}"
                ),
            )


def _comparable(status: Mapping[str, Any]) -> Any:
    """A status without its timestamps: what decides whether a write is needed."""
    conds = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"}
        for c in status.get("conditions") or ()
        if isinstance(c, Mapping)
    ]
    nodes = dict(status.get("nodes") or {})
    nodes["recentErrors"] = [
        {k: v for k, v in e.items() if k != "time"} for e in nodes.get("recentErrors") or ()
    ]
    return json.dumps([status.get("observedGeneration"), conds, nodes], sort_keys=True)


class _Stopped(Exception):
    """The daemon is stopping: ends the leader election loop."""


class PolicyStatusController:
    """Runs the aggregator while this daemon holds the Lease (the official client's leader election,
    kubernetes.leaderelection with a LeaseLock). Only the leader watches the QoSNodeStatus objects:
    the other daemons never see their peers' writes."""

    LEASE_NAME = "qosd-policy-status"

    def __init__(
        self,
        api_client: client.ApiClient,
        aggregator: PolicyStatusAggregator,
        node_statuses: Callable[[Callable[[], None]], Any],
        *,
        namespace: str,
        identity: str,
        lease: tuple[int, int, int] | None = None,
        resync_seconds: float = 60.0,
    ) -> None:
        self.api_client = api_client
        self.aggregator = aggregator
        self.make_reflector = node_statuses  # on_change -> a started reflector of QoSNodeStatus
        self.namespace = namespace
        self.identity = identity
        self.lease = lease or LEASE_TIMING
        self.resync_seconds = resync_seconds
        self.leading = threading.Event()
        self.synced = threading.Event()  # set after each completed sync (tests)
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._reflector: Any = None
        self._threads: list[threading.Thread] = []

    def poke(self) -> None:
        """Something the statuses are computed from changed."""
        self._dirty.set()

    def start(self) -> None:
        for target, name in ((self._elect, "qosd-leader-election"), (self._loop, "qosd-policy-status")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        self._dirty.set()
        self._stop_leading()
        for t in self._threads:
            t.join(timeout=self.lease[2] + 5)

    # -- leadership

    def _elect(self) -> None:
        from kubernetes.leaderelection import electionconfig, leaderelection
        from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

        stop = self._stop

        class StoppableLeaseLock(LeaseLock):  # type: ignore[misc]  # kubernetes is untyped (Any)
            """The official election loops forever; every attempt reads the lock first, so refusing
            that read once stopped is how the loop (and its thread) ends."""

            def get(self, name: str, namespace: str) -> Any:
                if stop.is_set():
                    raise _Stopped
                return super().get(name, namespace)

        lease, renew, retry = self.lease
        backoff = Backoff(base=1.0, cap=30.0)
        while not stop.is_set():
            lock = StoppableLeaseLock(self.LEASE_NAME, self.namespace, self.identity)
            lock.api_instance = client.CoordinationV1Api(self.api_client)
            config = electionconfig.Config(
                lock,
                lease,
                renew,
                retry,
                onstarted_leading=self._start_leading,
                onstopped_leading=self._stop_leading,
            )
            try:
                leaderelection.LeaderElection(config).run()  # returns when leadership is lost
            except _Stopped:
                break
            except Exception as exc:
                log.warning(
                    "leader election failed; retrying", extra={"fields": {"error": describe_error(exc)}}
                )
            self._stop_leading()
            backoff.sleep(stop)
        self._stop_leading()

    def _start_leading(self) -> None:
        log.info("leading QoSPolicy status", extra={"fields": {"identity": self.identity}})
        self._reflector = self.make_reflector(self.poke)
        self.aggregator.forget()
        self.leading.set()
        self.poke()

    def _stop_leading(self) -> None:
        if self.leading.is_set():
            log.info("stopped leading QoSPolicy status", extra={"fields": {"identity": self.identity}})
        self.leading.clear()
        reflector, self._reflector = self._reflector, None
        if reflector is not None:
            reflector.stop()

    # -- the loop

    def _loop(self) -> None:
        backoff = Backoff(base=STATUS_RETRY[0], cap=STATUS_RETRY[1])
        while not self._stop.is_set():
            self._dirty.wait(self.resync_seconds)
            if self._stop.is_set():
                return
            if not self._dirty.is_set():
                self.aggregator.forget()  # periodic resync: correct statuses edited by hand
            self._dirty.clear()
            if not self.leading.is_set():
                continue
            reflector = self._reflector
            if reflector is not None and not reflector.wait_synced(5.0):
                self._dirty.set()
                continue
            self._stop.wait(0.05)  # let a burst of watch events land: one pass for all of them
            try:
                self.aggregator.sync()
                backoff.reset()
                self.synced.set()
            except Exception as exc:
                log.warning(
                    "policy status sync failed; retrying", extra={"fields": {"error": describe_error(exc)}}
                )
                self._dirty.set()
                backoff.sleep(self._stop)
