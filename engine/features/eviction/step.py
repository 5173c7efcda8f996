"""Engine-computed memory pressure facts: Katalyst's NUMA watermark counter and system memory pressure.

Both anchors' memory plugins remember something between rounds (a counter per NUMA node, the time
PSI pressure started), which a condition over one snapshot cannot express. This step runs once per
tick, before any condition: it feeds the pure step functions of ``engine.features.eviction.pressure`` with
this tick's facts and the engine state, keeps their state in ``EngineState.pressure`` (so a restart
resumes the counter), and publishes the decisions as ordinary facts that rules test:

- ``numa.memory.below_watermark_count`` and ``numa.memory.watermark_pressure`` per NUMA node;
- ``node.memory.pressure`` and ``node.memory.pressure_quiet_seconds`` for the node;
- ``node.cpu.pool_load_pressure`` and ``node.cpu.pool_load_pool``: Katalyst's shared-pool load rings
  (``engine.features.eviction.pool_load``), sampled from this tick's pool plan.

A value the snapshot supplies itself wins: a collector that keeps Katalyst's counter (or a
hand-written snapshot) is authoritative, and qosd's counter resumes from the supplied count. Each
decision's terms go to ``Tick.pressure_inputs`` so an eviction can show them in its provenance.
Parameters come from ``spec.pressure`` (compiled into ``Policy.pressure``) and are turned into the
strategies' parameter objects once per generation. The step does nothing unless some rule reads one
of its facts, so policies without these rules carry no extra state.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from engine.config.policy import Policy
from engine.evaluate.classify import Classifier
from engine.evaluate.factview import ACTIVE_PHASES, FactViews, ItemFacts
from engine.evaluate.state import NumaCounter, PressureState
from engine.features.eviction.pool_load import (
    NO_POOL_LOAD,
    PoolLoadState,
    node_verdict,
    pool_load_step,
)
from engine.features.eviction.pressure import (
    Action,
    NumaCounterParams,
    NumaCounterState,
    PsiParams,
    PsiState,
    Watermarks,
    metric_watermarks,
    numa_pressure_step,
    psi_pressure_step,
    stronger,
    system_watermark_pressure,
    zoneinfo_watermarks,
)
from engine.features.eviction.spec import EvictSpec, PoolLoad, SuppressionTolerance
from engine.features.pools.strategy import PoolPlan, PoolSpec, reclaim_quotas
from engine.features.rules.conditions import comparisons
from engine.model.facts import EMPTY

if TYPE_CHECKING:
    from engine.evaluate.context import Tick
    from engine.model.facts import Snapshot

NUMA_FACTS = frozenset({"numa.memory.below_watermark_count", "numa.memory.watermark_pressure"})
SYSTEM_FACTS = frozenset({"node.memory.pressure", "node.memory.pressure_quiet_seconds"})
POOL_LOAD_FACTS = frozenset({"node.cpu.pool_load_pressure", "node.cpu.pool_load_pool"})
POD_PSI = "psi.memory.some.avg10"
POD_LOAD, POD_USAGE = "cpu.load_1min", "cpu.usage_cores"


def action_of_count(count: int, params: NumaCounterParams) -> Action:
    """The counter's action for a count supplied from outside (no watermarks to compare this round):
    eviction from T_nonreclaimed, reclaimed eviction above T_reclaimed."""
    if count >= params.times_threshold:
        return Action.EVICTION
    if count > params.reclaimed_times_threshold:
        return Action.RECLAIMED_EVICTION
    return Action.NOOP


def watermarks_of(facts: ItemFacts, scale_factor: float) -> Watermarks | None:
    """A NUMA node's effective watermarks: zoneinfo when the collector read them, else Katalyst's
    metric fallback (low = total x watermark_scale_factor / 10000). None without a free-memory reading.

    Without inactive_file the zoneinfo path counts it as 0, so low is raised to at least 4 GiB: the
    cautious reading, as nothing is known to be reclaimable."""
    free = facts.get("memory.free_bytes")
    if free is None:
        return None
    low, minimum = facts.get("memory.watermark_low_bytes"), facts.get("memory.watermark_min_bytes")
    if low is not None and minimum is not None:
        inactive = facts.get("memory.inactive_file_bytes", 0)
        return zoneinfo_watermarks(int(free), int(minimum), int(low), int(inactive))
    total = facts.get("memory.total_bytes")
    return metric_watermarks(free, total, scale_factor) if total else None


def _reads(policy: Policy, names: frozenset[str]) -> frozenset[str]:
    return frozenset(
        r.name
        for r in policy.rules
        if any(c.fact in names for c in comparisons(r.when) + comparisons(r.clear_when))
    )


class PressureStep:
    """The pressure facts of one policy generation; ``run`` once per tick before the conditions."""

    def __init__(self, policy: Policy, classifier: Classifier):
        cfg = policy.pressure
        self.classifier = classifier
        self.numa_rules = _reads(policy, NUMA_FACTS)
        self.system_rules = _reads(policy, SYSTEM_FACTS)
        self.pool_load_params = cfg.pool_load
        self.pool_load_rules = _reads(policy, POOL_LOAD_FACTS) | frozenset(
            r.name
            for r in policy.rules
            for a in r.actions
            if isinstance(a.spec, EvictSpec) and isinstance(a.spec.trigger, PoolLoad)
        )
        self.shared_classes = frozenset(c.name for c in policy.classes if c.cpu_policy == "shared")
        specs = [PoolSpec.from_policy(p) for p in policy.pools]  # the kind a pool's sizing implies
        self.reserve_pools = tuple(s.name for s in specs if s.kind == "reserve")
        self.reclaim_specs = tuple(s for s in specs if s.kind == "reclaim")
        self.numa_params = NumaCounterParams(cfg.numa_times, cfg.numa_reclaimed_times, cfg.numa_fast_wait)
        self.numa_interval = cfg.numa_interval
        self.scale_factor = cfg.watermark_scale_factor
        self.free_minimum = cfg.system_free_minimum
        self.psi_params: PsiParams | None = (
            PsiParams(
                some_threshold=cfg.psi_some,
                full_threshold=cfg.psi_full,
                duration=cfg.psi_duration,
                min_pods=cfg.psi_min_pods,
                min_pod_pressure=cfg.psi_min_pod_pressure,
                reset_when_below=cfg.psi_reset_when_below,
            )
            if cfg.psi_enabled
            else None
        )
        self.psi_classes = frozenset(
            cfg.psi_pod_classes
            if cfg.psi_pod_classes is not None
            else (c.name for c in policy.classes if c.cpu_policy in ("shared", "exclusive"))
        )
        # Rules whose evict action keeps per-pod tolerance timers; timers of other rules are dropped.
        self.tolerance_rules = frozenset(
            r.name
            for r in policy.rules
            for a in r.actions
            if isinstance(a.spec, EvictSpec) and isinstance(a.spec.trigger, SuppressionTolerance)
        )

    def before_rules(self, snap: Snapshot, views: FactViews, t: Tick) -> None:
        """Before any condition: the counters' facts are what the memory pressure rules test."""
        self.run(views, t)

    def after_rules(self, snap: Snapshot, views: FactViews, t: Tick) -> None:
        """Nothing: the eviction actions read this tick's pressure while the rules run."""

    def run(self, views: FactViews, t: Tick) -> None:
        """Step the counters, publish their facts into ``views``, and keep their state in ``t``."""
        state = t.pressure
        if self.numa_rules:
            state = replace(state, numa=self._numa(views, t))
        elif state.numa:
            state = replace(state, numa={})
        if self.system_rules:
            state = self._system(views, t, state)
        elif state.psi_since is not None or state.system_met_at is not None:
            state = replace(state, psi_since=None, system_met_at=None)
        if self.pool_load_rules:
            state = replace(state, pool_load=self._pool_load(views, t, state.pool_load))
        elif state.pool_load.at is not None:
            state = replace(state, pool_load=NO_POOL_LOAD)
        if any(rule not in self.tolerance_rules for rule in state.tolerance):
            state = replace(
                state, tolerance={k: v for k, v in state.tolerance.items() if k in self.tolerance_rules}
            )
        t.pressure = state

    # ---------------------------------------------------------------- NUMA watermark counter

    def _numa(self, views: FactViews, t: Tick) -> dict[str, NumaCounter]:
        old = t.pressure.numa
        out: dict[str, NumaCounter] = {}
        scale = float(views.node.get("memory.watermark_scale_factor", self.scale_factor))
        for nid, facts in views.numa.items():
            key = str(nid)
            prev = old.get(key)
            inputs: dict[str, Any]
            supplied = facts.get("memory.below_watermark_count")
            if supplied is not None:
                count = int(supplied)
                action = action_of_count(count, self.numa_params).value
                out[key] = NumaCounter(count, action, t.now)
                inputs = {"count": count, "action": action, "source": "snapshot"}
            else:
                wm = watermarks_of(facts, scale)
                if wm is None:
                    if prev is not None:
                        out[key] = prev  # no reading this tick: keep the count, decide nothing
                    continue
                if prev is not None and t.now - prev.at < self.numa_interval:
                    out[key] = prev
                    count, action = prev.count, prev.action
                    inputs = {
                        "count": count,
                        "action": action,
                        "source": f"round of {prev.at:g} (one round per {self.numa_interval:g}s)",
                    }
                else:
                    start = NumaCounterState(prev.count if prev is not None else 0)
                    decision, stepped = numa_pressure_step(wm, start, self.numa_params)
                    count, action = stepped.count, decision.action.value
                    out[key] = NumaCounter(count, action, t.now)
                    inputs = {
                        "count": count,
                        "previous": decision.previous,
                        "action": action,
                        "branch": decision.branch,
                        "deep": decision.deep,
                        "freeBytes": wm.free,
                        "minBytes": wm.min,
                        "lowBytes": wm.low,
                        "watermarks": wm.source,
                        "source": "counter",
                    }
            derived = {"memory.below_watermark_count": count, "memory.watermark_pressure": action}
            views.derive_numa(nid, derived)
            t.pressure_inputs[f"numa:{key}"] = inputs
        return out

    # ---------------------------------------------------------------- system memory pressure

    def _system(self, views: FactViews, t: Tick, state: PressureState) -> PressureState:
        node = views.node
        inputs: dict[str, Any] = {}
        action = Action.NOOP
        known = False
        free, total = node.get("memory.free_bytes"), node.get("memory.capacity_bytes")
        if free is not None and total:
            scale = float(node.get("memory.watermark_scale_factor", self.scale_factor))
            wm = system_watermark_pressure(free, total, scale, self.free_minimum)
            known = True
            inputs["watermark"] = {"met": wm.met, "freeBytes": wm.free, "thresholdBytes": wm.threshold}
            if wm.met:
                action = Action.RECLAIMED_EVICTION
        psi_since = state.psi_since
        if self.psi_params is not None:
            gate, source = node.get("workload_psi.memory.some.avg10"), "workload cgroup"
            if gate is None:
                gate, source = node.get("psi.memory.some.avg10"), "node"
            pods: list[float] = []
            if gate is not None and int(gate) >= self.psi_params.some_threshold:
                pods = self._pod_psi(views)
            decision, psi_state = psi_pressure_step(gate, pods, t.now, PsiState(psi_since), self.psi_params)
            psi_since = psi_state.since
            if gate is not None:
                known = True
                inputs["psi"] = {
                    "action": decision.action.value,
                    "gate": decision.node_avg10,
                    "gateSource": source,
                    "podAverage": decision.pod_average,
                    "pressuredPods": decision.pressured_pods,
                    "pods": decision.pods,
                    "heldFor": decision.held_for,
                    "reason": decision.reason,
                }
            action = stronger(action, decision.action)
        met_at = t.now if action is not Action.NOOP else state.system_met_at
        if known:
            facts: dict[str, Any] = {"memory.pressure": action.value}
            if met_at is not None:
                facts["memory.pressure_quiet_seconds"] = t.now - met_at
            views.derive_node(facts)
            inputs["action"] = action.value
            t.pressure_inputs["node"] = inputs
        return replace(state, psi_since=psi_since, system_met_at=met_at)

    def _pod_psi(self, views: FactViews) -> list[float]:
        """Memory some avg10 of each active pod of the PSI classes that reports one."""
        out: list[float] = []
        classify = self.classifier.classify
        for w in views.snapshot.workloads:
            if w.phase not in ACTIVE_PHASES or classify(w).class_name not in self.psi_classes:
                continue
            value = views.pod(w).get(POD_PSI)
            if value is not None:
                out.append(float(value))
        return out

    # ---------------------------------------------------------------- shared-pool load

    def _pool_load(self, views: FactViews, t: Tick, state: PoolLoadState) -> PoolLoadState:
        """Sample the pools of shared pods from this tick's plan (each pod's load: cpu.load_1min,
        else cpu.usage_cores) and publish the node's verdict. Without a plan nothing is sampled."""
        plan = t.pool_plan
        if plan is None:
            return state
        params = self.pool_load_params
        by_size: bool | None = None  # known on the ticks that sample
        if state.at is not None and t.now - state.at < params.interval:
            # Between samples the rings stand: no pod is read, only the verdict is published again.
            pools = {n: (len(plan.pools.get(n, ())), r[-1].value) for n, r in state.pools.items() if r}
            state, verdicts = pool_load_step(params, state, t.now, pools, {}, False)
        else:
            pools, pod_loads = self._pool_samples(views, plan)
            by_size = self._pools_fill_their_limit(views, plan, pools)
            state, verdicts = pool_load_step(params, state, t.now, pools, pod_loads, by_size)
        verdict = node_verdict(verdicts)
        met = verdict.met if verdict is not None else "none"
        views.derive_node(
            {"cpu.pool_load_pressure": met, "cpu.pool_load_pool": verdict.pool if verdict else ""}
        )
        inputs: dict[str, Any] = {
            "met": met,
            "pool": verdict.pool if verdict else "",
            "sampledAt": state.at,
            "pools": [v.to_dict() for v in verdicts],
        }
        if by_size is not None:
            inputs["poolSizePressure"] = by_size
        t.pressure_inputs["pool_load"] = inputs
        return state

    def _pool_samples(
        self, views: FactViews, plan: PoolPlan
    ) -> tuple[dict[str, tuple[int, float]], dict[str, float]]:
        """Each pool of shared pods: (its size, its pods' summed load), and each such pod's load
        (cpu.load_1min, else cpu.usage_cores, as measured)."""
        classify = self.classifier.classify
        pod_pool: dict[str, str] = {}
        for (uid, _), name in plan.assignments.items():
            pod_pool.setdefault(uid, name)
        measured = views.snapshot.metrics.pods
        pools: dict[str, tuple[int, float]] = {}
        pod_loads: dict[str, float] = {}
        for w in views.snapshot.workloads:
            pool = pod_pool.get(w.uid)
            if pool is None or w.phase not in ACTIVE_PHASES:
                continue
            if classify(w).class_name not in self.shared_classes:
                continue
            facts = measured.get(w.uid, EMPTY)
            load = facts.get(POD_LOAD)
            if load is None:
                load = facts.get(POD_USAGE)
            if load is None:
                continue
            pod_loads[w.uid] = float(load)
            size, total = pools.get(pool, (len(plan.pools.get(pool, ())), 0.0))
            pools[pool] = (size, total + float(load))
        return pools, pod_loads

    def _pools_fill_their_limit(
        self, views: FactViews, plan: PoolPlan, pools: dict[str, tuple[int, float]]
    ) -> bool:
        """katalyst checkSharedPressureByPoolSize: the shared pools together hold every CPU they may
        have, all CPUs minus the reserve minus the CPUs kept for reclaim."""
        reserved = sum(len(plan.pools.get(name, ())) for name in self.reserve_pools)
        topology = views.snapshot.topology
        counts = {n: len(topology.cpus_of_numa(n)) for n in topology.numa_ids}
        floor = 0
        for s in self.reclaim_specs:
            if s.min:
                quotas = reclaim_quotas(s, s.min, counts)
                floor += sum(quotas.values()) if quotas is not None else s.min
        limit = len(topology.cpus) - reserved - floor
        return sum(size for size, _ in pools.values()) >= limit
