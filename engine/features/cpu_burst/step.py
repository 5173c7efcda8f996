"""The CFS quota burst step: after the rules, each container of the bursting classes gets the quota
its throttling, its token bucket and the node's shared CPUs allow, and its pod the same change.

The buckets are engine state (``Tick.burst``, container key -> bucket), so a restarted daemon keeps
them. Writes go through the planner, whose leveled order puts a raise on the pod before its
container and a cut on the container before its pod, as Koordinator's applyContainerCFSQuota does.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from engine.config.policy import Policy
from engine.evaluate.classify import Classifier
from engine.evaluate.context import Skipped, Tick
from engine.evaluate.factview import FactViews, MembersIndex
from engine.features.cpu_burst import limiter
from engine.features.cpu_burst.spec import SECTION, CfsQuotaBurstSpec
from engine.features.cpu_burst.strategy import (
    NodeState,
    Operation,
    base_quota,
    by_node,
    ceil_quota,
    container_operation,
    node_state,
    share_pool_ratio,
    target_quota,
)
from engine.model.facts import EMPTY, Snapshot, Workload, window_key
from engine.model.intents import CgroupIntent, Provenance
from engine.model.units import int_or_none

QUOTA = "cpu.cfs_quota_us"


class CfsQuotaBurstStep:
    def __init__(
        self, policy: Policy, spec: CfsQuotaBurstSpec | None, classifier: Classifier, generation: int
    ):
        self.spec = spec
        self.classify = classifier.classify
        self.members = MembersIndex(classifier)
        origin = policy.origin(f"$.spec.{SECTION}")
        self.base = Provenance(
            rule=SECTION,
            policy_hash=policy.hash,
            generation=generation,
            source=str(origin) if origin is not None else f"spec.{SECTION}",
            mode=policy.mode,
        )

    def before_rules(self, snap: Snapshot, views: FactViews, t: Tick) -> None:
        return None

    def after_rules(self, snap: Snapshot, views: FactViews, t: Tick) -> None:
        spec = self.spec
        if spec is None:
            t.burst = {}  # nothing bursts: no bucket to keep
            return
        before = dict(t.burst)
        ratio = self._share_pool_ratio(spec, snap, views.node)
        state = node_state(ratio, spec.share_pool_threshold_percent)
        members = self.members(snap.workloads)
        for name in spec.classes:
            for w in members.get(name, ()):
                self._pod(spec, snap, t, w, state, ratio)
        # Buckets stepped this round stay; the others until two of the node's periods have passed
        # (Koordinator's Recycle), or at once when the node keeps no bucket of its own.
        now = snap.time
        period = spec.period_seconds if spec.enabled else -1
        t.burst = {
            k: b
            for k, b in t.burst.items()
            if b is not before.get(k) or (period >= 0 and not limiter.expired(b, period, now))
        }

    def _share_pool_ratio(
        self, spec: CfsQuotaBurstSpec, snap: Snapshot, node: Mapping[str, Any]
    ) -> float | None:
        """The shared CPUs' usage ratio (getNodeStateForBurst), None without a node usage."""
        usage = node.get(window_key("cpu.usage_cores", "avg", spec.window)) if spec.window else None
        if usage is None:
            usage = node.get("cpu.usage_cores")
        if usage is None:
            return None
        dedicated = frozenset(spec.dedicated_classes)
        excluded = dedicated | frozenset(spec.reclaimed_classes)
        requests = 0.0
        used = 0.0
        for w in snap.workloads:  # every pod the node knows, as Koordinator's GetAllPods
            name = self.classify(w).class_name
            if name in dedicated:
                requests += w.request("cpu")
            if name in excluded:
                used += float(snap.metrics.pods.get(w.uid, EMPTY).get("cpu.usage_cores", 0.0))
        return share_pool_ratio(len(snap.topology.cpus), requests, float(usage), used)

    def _pod(
        self,
        spec: CfsQuotaBurstSpec,
        snap: Snapshot,
        t: Tick,
        w: Workload,
        state: NodeState,
        ratio: float | None,
    ) -> None:
        spec, ignored = spec.for_pod(w.annotations)
        if ignored:
            t.skipped.append(
                Skipped(SECTION, f"annotation {spec.pod_annotation} of {w.key} ignored: {ignored}")
            )
        now = snap.time
        containers = snap.metrics.containers
        delta = 0
        for c in w.containers:
            if c.init or not c.cgroup_path:
                continue
            limit = c.limits.get("cpu")
            base = base_quota(limit) if limit else -1
            if base <= 0 or limit is None:
                continue  # no limit to burst over
            # What the cgroup holds, else what the kubelet set for the limit: the daemon reads a
            # quota once qosd manages it (the pairs it wrote are tracked), not before.
            observed = int_or_none((snap.cgroups.get(c.cgroup_path) or {}).get(QUOTA))
            current = base if observed is None else observed
            key = f"{w.uid}/{c.name}"
            facts = containers.get(key, EMPTY)
            allowed, tokens = True, None
            if spec.enabled and spec.period_seconds >= 0:
                usage = float(facts.get("cpu.usage_cores", limit))  # no metric: taken as its limit
                bucket = limiter.current(t.burst.get(key), spec.period_seconds, spec.max_percent, now)
                allowed, bucket = limiter.step(bucket, now, int(usage / limit * 100))
                t.burst[key] = bucket
                tokens = bucket.tokens
            throttled = facts.get("cpu.throttled_ratio")
            asked = container_operation(allowed, None if throttled is None else float(throttled))
            operation: Operation = by_node(state, asked) if spec.enabled else "reset"
            ceiling = ceil_quota(base, spec.max_percent)
            target = target_quota(current, base, ceiling, operation)
            if target == current:
                continue
            inputs = {
                "container": c.name,
                "nodeState": state,
                "sharePoolRatio": ratio,
                "throttledRatio": throttled,
                "limiterAllows": allowed,
                "tokens": tokens,
                "operation": operation,
                "asked": asked,
                "baseQuota": base,
                "ceilingQuota": ceiling,
                "currentQuota": current,
            }
            t.intents.append(
                CgroupIntent(c.cgroup_path, QUOTA, str(target), w.key, self._provenance(w, inputs))
            )
            delta += target - current
        if not delta or not w.cgroup_path:
            return
        pod_quota = int_or_none((snap.cgroups.get(w.cgroup_path) or {}).get(QUOTA))
        if pod_quota is None:  # unread: the kubelet's, from the pod's limit (-1 when one is unlimited)
            pod_limit = w.limit("cpu")
            pod_quota = base_quota(pod_limit) if pod_limit else -1
        if pod_quota > 0:  # an unlimited pod (-1) stays unlimited
            inputs = {"containersDelta": delta, "currentQuota": pod_quota, "nodeState": state}
            t.intents.append(
                CgroupIntent(w.cgroup_path, QUOTA, str(pod_quota + delta), w.key, self._provenance(w, inputs))
            )

    def _provenance(self, w: Workload, inputs: dict[str, Any]) -> Provenance:
        b = self.base
        return Provenance(
            b.rule, b.policy_hash, b.generation, b.source, b.mode, w.key, (), MappingProxyType(inputs)
        )
