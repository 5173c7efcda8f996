"""The pool step: the policy's CPU pools, sized and placed, become each container's cpuset.

Pools are not a rule: like Katalyst's QRM cpu plugin (and Koordinator's cpuset hook), they hold at
all times for every pod whose class names a pool. The plan depends only on the topology, the pods'
demands and the dedicated cpusets they already have, so it is computed once per change of those and
reused every tick; a steady state derives nothing and the planner writes nothing.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from engine.config.policy import Policy
from engine.evaluate.classify import Classifier
from engine.evaluate.factview import ACTIVE_PHASES
from engine.model.facts import Snapshot, Workload
from engine.model.intents import CgroupIntent, Provenance
from engine.model.units import format_cpuset, parse_cpuset
from engine.strategies.cpuset import CpuDetails
from engine.strategies.pools import CpuDemand, PoolPlan, PoolSpec, allocate

RULE = "pools"  # the provenance name of pool intents (not a rule the policy can name)


class PoolStep:
    """Pool specs of one generation, and the last plan with the inputs it was computed from."""

    def __init__(self, policy: Policy, classifier: Classifier, generation: int):
        self.policy = policy
        self.classifier = classifier
        self.generation = generation
        self.specs = tuple(PoolSpec.from_policy(p) for p in policy.pools)
        self._key: Any = None
        self._plan: PoolPlan | None = None
        self._details: tuple[Any, CpuDetails] | None = None
        self._unbound: set[str] = set()  # pods placed on one NUMA node without binding their memory

    def plan(self, snap: Snapshot) -> PoolPlan | None:
        if not self.specs:
            return None
        if self._details is None or self._details[0] is not snap.topology:
            self._details = (snap.topology, CpuDetails.of(snap.topology))
        details = self._details[1]
        demands = tuple(self._demands(snap))
        previous = self._previous(snap)
        key = (details, demands, previous)
        if key != self._key:
            self._plan = allocate(details, self.specs, demands, MappingProxyType(dict(previous)))
            self._key = key
        return self._plan

    def _dedicated(self, pool: str) -> bool:
        spec = next((p for p in self.specs if p.name == pool), None)
        return spec is not None and spec.is_dedicated

    def _demands(self, snap: Snapshot) -> list[CpuDemand]:
        self._unbound.clear()
        out = []
        for w in snap.workloads:
            if w.phase not in ACTIVE_PHASES:
                continue
            c = self.classifier.classify(w)
            cls = self.policy.class_index.get(c.class_name) if c.class_name else None
            if cls is None:
                continue
            pool = c.effects.get("cpu.pool") or cls.pool
            if not pool:
                continue
            ids = c.effects.get("cpu.numaIds")
            numa_ids = None
            if ids:
                try:
                    numa_ids = parse_cpuset(str(ids))
                except ValueError:
                    numa_ids = None  # the classifier has already reported the bad annotation
            bound = bool(c.effects.get("cpu.numaBinding", False))
            if not bound and "numa_binding" not in cls.requires and self._dedicated(str(pool)):
                # An exclusive class that does not require NUMA binding (Koordinator LSE/LSR): its
                # cores are still taken on one NUMA node, full cores first, but memory stays free.
                bound = True
                self._unbound.add(w.uid)
            for container in w.containers:
                if container.init:
                    continue
                out.append(
                    CpuDemand(
                        uid=w.uid,
                        pod=w.key,
                        container=container.name,
                        class_name=cls.name,
                        pool=str(pool),
                        request=float(container.requests.get("cpu", 0.0)),
                        numa_binding=bound,
                        numa_exclusive=bool(c.effects.get("cpu.numaExclusive", False)),
                        numa_ids=numa_ids,
                        numa_number=_int(c.effects.get("cpu.numaNumber")),
                        full_pcpus_pairing=bool(c.effects.get("cpu.fullPCPUsPairing", False)),
                        distribute_evenly_across_numa=bool(
                            c.effects.get("cpu.distributeEvenlyAcrossNuma", False)
                        ),
                    )
                )
        return out

    def _previous(self, snap: Snapshot) -> tuple[tuple[tuple[str, str], frozenset[int]], ...]:
        """The cpusets containers hold now (so running dedicated pods keep their cores)."""
        out = []
        for w in snap.workloads:
            for c in w.containers:
                text = snap.cgroups.get(c.cgroup_path, {}).get("cpuset.cpus") if c.cgroup_path else None
                if text:
                    try:
                        out.append(((w.uid, c.name), parse_cpuset(text)))
                    except ValueError:
                        continue
        return tuple(sorted(out, key=lambda kv: kv[0]))

    def intents(self, snap: Snapshot, plan: PoolPlan, policy_hash: str) -> list[CgroupIntent]:
        """cpuset.cpus (and cpuset.mems for NUMA-bound containers) of every pooled container."""
        out: list[CgroupIntent] = []
        for w in snap.workloads:
            if w.phase not in ACTIVE_PHASES:
                continue
            for c in w.containers:
                if c.init or not c.cgroup_path:
                    continue
                key = (w.uid, c.name)
                cpus = plan.cpuset_of(key)
                if not cpus:
                    # An empty pool (e.g. no reserve on a small node): writing "" would strand the
                    # container; it keeps the cpuset it has. The plan's warnings say why.
                    continue
                pool = "dedicated" if key in plan.dedicated else plan.assignments.get(key, "")
                prov = self._provenance(w, pool, policy_hash, cpus)
                out.append(CgroupIntent(c.cgroup_path, "cpuset.cpus", format_cpuset(cpus), w.key, prov))
                mems = plan.numa_bindings.get(key)
                if mems and w.uid not in self._unbound:  # memory stays node-wide unless NUMA-bound
                    out.append(CgroupIntent(c.cgroup_path, "cpuset.mems", format_cpuset(mems), w.key, prov))
        return out

    def _provenance(self, w: Workload, pool: str, policy_hash: str, cpus: frozenset[int]) -> Provenance:
        spec = next((p for p in self.policy.pools if p.name == pool.split("-NUMA")[0]), None)
        return Provenance(
            rule=RULE,
            policy_hash=policy_hash,
            generation=self.generation,
            source=str(spec.origin) if spec is not None else "spec.pools",
            mode=self.policy.mode,
            item=w.key,
            conditions=(),
            inputs=MappingProxyType({"pool": pool, "cpus": len(cpus)}),
        )


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def pool_cpus(plan: PoolPlan | None, w: Workload) -> frozenset[int] | None:
    """The union of the cpusets the plan gives a pod's containers (None when it assigns none)."""
    if plan is None:
        return None
    found: set[int] = set()
    any_found = False
    for c in w.containers:
        cpus = plan.cpuset_of((w.uid, c.name))
        if cpus is not None:
            found |= cpus
            any_found = True
    return frozenset(found) if any_found else None
