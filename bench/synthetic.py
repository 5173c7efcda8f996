"""A seeded generator of large, realistic and *valid* QoSPolicy documents for the config benchmark.

    python -m bench.synthetic --rules 500 --seed 1 > out.yaml
    python -m engine.cli validate --no-builtin out.yaml

The document has ~10 classes with matchers, ~10 enhancements (Katalyst-style, with requires and
conflicts), 8 pools (static cpus, fromRequests, perContainer, remainder), cpu and memory reclaim, and
``rules`` rules whose conditions nest all/any/not over real fact names taken from the facts registry
(``engine.model.factnames.registry()``), so the generator follows the facts schema as it evolves.

Validity rules the generator keeps (the compiler checks them):

* numeric facts get numeric thresholds; text facts get eq/ne/in with strings (enum values if any);
* ``window``/``agg`` only on facts whose spec has ``series=True``; ``hysteresis`` only next to exactly one
  of lt/lte/gt/gte;
* ``class.<name>.*`` facts name generated classes;
* a rule iterates over at most one of numa, pod, container (``when`` and ``clearWhen`` together);
* evict ``release.lowerPercent`` stays below every ``*usage_percent`` gt/gte trigger of its rule;
* eviction victims are never protected classes; class/pool references always exist;
* a few numeric fields are Jinja2 templates over node facts ("{{ [4, node.numa_count] | max }}"),
  written so they also hold for the 16-CPU, 2-NUMA reference node ``qosd validate`` renders against.

The output depends only on (rules, seed): no set or dict-hash order leaks into it.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from typing import Any

import yaml

from engine.cgroups.files import burst_problem, same_host_file
from engine.model.factnames import FactSpec, registry

Json = dict[str, Any]

ITERATED = ("numa", "pod", "container")
DURATIONS = ("10s", "30s", "1m", "2m", "5m", "10m")
WINDOWS = ("30s", "1m", "5m", "10m", "15m")
AGGS = ("avg", "max", "min")
NAMESPACES = ("default", "batch", "spark", "flink", "ml-training", "web", "payments", "search")
ORDER_KEYS = (
    "class",
    "priority",
    "-priority",
    "evictionPriority",
    "subPriority",
    "name",
    "-memory.usage",
    "-memory.rss",
    "-memory.usage_over_request",
    "-memory.numa_usage",
    "-cpu.usage",
    "-cpu.usage_over_request",
    "cpu.request",
    "memory.request",
    "-load",
)
CGROUP_KEYS_CPU = ("cpu.shares", "cpu.weight", "cpu.cfs_quota_us", "cpu.max.burst", "cpu.cfs_burst_us")
CGROUP_KEYS_MEM = ("memory.high", "memory.low", "memory.min", "memory.max")

# Templates that render to numbers and stay sensible on any node shape. Keyed by the fact they
# threshold, so a templated threshold never lands on a *usage_percent fact (whose value the evict
# release check compares with).
FACT_TEMPLATES: dict[str, tuple[str, ...]] = {
    "node.load.load1": ("{{ node.cpus * 2 }}", "{{ [4, node.numa_count] | max * 8 }}"),
    "node.load.load5": ("{{ (node.cpus * 1.5) | round(1) }}",),
    "node.load.load15": ("{{ node.cpus }}",),
    "node.cpu.usage_cores": ("{{ (node.cpus * 0.85) | round(1) }}",),
    "node.memory.available_bytes": (
        "{{ (node.memory * 0.05) | int }}",
        "{{ [1073741824, node.memory // 20] | max }}",
    ),
    "numa.cpu.usage_cores": ("{{ (node.cpus / node.numa_count * 0.8) | round(1) }}",),
    "numa.memory.free_bytes": ("{{ (node.memory / node.numa_count * 0.03) | int }}",),
    "node.numa_count": ("{{ [4, node.numa_count] | max }}",),
}


# ---------------------------------------------------------------- skeleton: classes, enhancements, pools


def _pools(rng: random.Random) -> list[Json]:
    """8 pools; static ones take 0-1, 1 (templated) and 2 CPUs: fits every node of >= 5 CPUs."""
    return [
        {
            "name": "reserve",
            "kind": "reserve",
            "description": "kubelet and system daemons",
            "cpus": {"list": "0-1"},
            "order": "lowFirst",
        },
        {"name": "system", "kind": "system", "cpus": {"count": "{{ [1, node.cpus // 16] | max }}"}},
        {
            "name": "isolation",
            "kind": "isolation",
            "cpus": {"count": 2},
            "ht": {"policy": "fullCores"},
            "order": "highFirst",
        },
        {
            "name": "dedicated",
            "kind": "dedicated",
            "size": {"perContainer": True},
            "numa": {"placement": "bound"},
            "ht": {"policy": "fullCores"},
        },
        {
            "name": "share",
            "kind": "share",
            "size": {"fromRequests": round(rng.uniform(1.0, 1.4), 2), "min": 2, "max": "{{ node.cpus }}"},
            "numa": {"placement": "spread"},
        },
        {
            "name": "share-numa",
            "kind": "share",
            "size": {"fromRequests": 1.0, "min": 1},
            "numa": {"perNuma": True, "placement": "pack"},
            "template": True,
        },
        {
            "name": "batch",
            "kind": "reclaim",
            "size": {"fromRequests": round(rng.uniform(0.4, 0.8), 2), "max": 8},
            "ht": {"policy": "spreadCores"},
        },
        {"name": "reclaim", "kind": "reclaim", "size": {"remainder": True}, "order": "highFirst"},
    ]


def _classes(rng: random.Random) -> list[Json]:
    """10 classes, first match wins; system-critical, lsr and lse are protected."""
    oom = rng.randint(-100, -50)
    return [
        {
            "name": "system-critical",
            "description": "node-critical add-ons",
            "match": [
                {"namespaces": ["kube-system"]},
                {"priorityClassName": {"in": ["system-node-critical", "system-cluster-critical"]}},
            ],
            "protected": True,
            "cpu": {"policy": "system", "pool": "system", "weight": 10000},
            "memory": {"min": {"percent": 100, "of": "request"}},
            "oomPriority": {"default": oom, "min": -1000, "max": 0},
            "evictionPriority": 1000,
        },
        {
            "name": "lsr",
            "match": [{"labels": {"koordinator.sh/qosClass": "LSR"}, "kubeQoS": "Guaranteed"}],
            "protected": True,
            "cpu": {
                "policy": "exclusive",
                "pool": "dedicated",
                "requires": ["numa-binding"],
                "shares": {"expr": "pod.requests.cpu * 1024"},
            },
            "memory": {"min": {"percent": 100, "of": "request"}, "high": "max"},
            "resctrl": {"group": "LSR", "l3Percent": [0, 100], "mbPercent": 100},
            "oomPriority": {"default": -50, "min": -100, "max": 0},
            "evictionPriority": 900,
        },
        {
            "name": "lse",
            "match": [{"labels": {"koordinator.sh/qosClass": "LSE"}, "kubeQoS": ["Guaranteed"]}],
            "protected": True,
            "cpu": {"policy": "exclusive", "pool": "isolation", "burstPolicy": "closed"},
            "memory": {"low": {"percent": 100, "of": "request"}},
            "evictionPriority": 850,
        },
        {
            "name": "dedicated-cores",
            "match": [
                {"annotations": {"katalyst.kubewharf.io/qos_level": "dedicated_cores"}},
                {
                    "jsonAnnotations": [
                        {
                            "annotation": "katalyst.kubewharf.io/memory_enhancement",
                            "key": "numa_binding",
                            "value": "true",
                        }
                    ]
                },
            ],
            "cpu": {"policy": "exclusive", "pool": "dedicated", "requires": ["numa-binding"]},
            "memory": {"low": {"percent": 80, "of": "request"}},
            "resctrl": {"l3Percent": [0, 70], "mbPercent": 80},
            "oomPriority": {"default": 0, "min": -100, "max": 100},
            "evictionPriority": 700,
        },
        {
            "name": "ls",
            "match": [
                {"labels": {"koordinator.sh/qosClass": "LS"}},
                {"annotations": {"katalyst.kubewharf.io/qos_level": "shared_cores"}, "kubeQoS": "Guaranteed"},
            ],
            "cpu": {
                "policy": "shared",
                "pool": "share",
                "burstPolicy": "dynamic",
                "burst": {"percent": rng.choice([50, 100, 200]), "of": "limit"},
            },
            "memory": {"high": {"percent": rng.choice([90, 95, 100]), "of": "limit"}},
            "evictionPriority": 500,
        },
        {
            "name": "ls-burstable",
            "match": [{"kubeQoS": "Burstable", "priority": {"gte": 1000}}],
            "cpu": {"policy": "shared", "pool": "share", "shares": {"percent": 100, "of": "request"}},
            "memory": {"high": {"expr": "pod.limits.memory * 0.9"}},
            "evictionPriority": 400,
        },
        {
            "name": "shared-numa",
            "match": [{"annotations": {"qosd.io/cpuset-pool": {"exists": True}}}],
            "cpu": {"policy": "shared", "pool": "share-numa"},
            "evictionPriority": 350,
        },
        {
            "name": "batch",
            "match": [
                {
                    "labels": {"koordinator.sh/qosClass": "BE"},
                    "namespaces": {"in": ["batch", "spark", "flink"]},
                },
                {"priorityClassName": ["koord-batch", "batch"]},
            ],
            "cpu": {
                "policy": "reclaimed",
                "pool": "batch",
                "weight": 2,
                "cfsQuota": {"percent": 100, "of": "limit"},
            },
            "memory": {"high": {"percent": 80, "of": "limit"}, "limit": {"percent": 100, "of": "limit"}},
            "resctrl": {"group": "BE", "l3Percent": [0, 30], "mbPercent": 30},
            "oomPriority": {"default": 300, "min": 100, "max": 1000},
            "evictionPriority": 100,
        },
        {
            "name": "reclaimed-cores",
            "match": [
                {"annotations": {"katalyst.kubewharf.io/qos_level": "reclaimed_cores"}},
                {"priority": {"lte": 0}, "kubeQoS": "BestEffort"},
            ],
            "cpu": {"policy": "reclaimed", "pool": "reclaim", "idle": True, "shares": 2},
            "memory": {"high": {"percent": 90, "of": "limit"}},
            "oomPriority": {"default": 500, "min": 100, "max": 1000},
            "evictionPriority": 50,
        },
        {
            "name": "default",
            "description": "everything else (defaultClass)",
            "match": [{"namespaces": {"notIn": ["kube-system"]}}],
            "cpu": {"policy": "shared", "pool": "share"},
            "evictionPriority": 200,
        },
    ]


PROTECTED = ("system-critical", "lsr", "lse")
VICTIM_CLASSES = ("batch", "reclaimed-cores", "default", "ls-burstable", "shared-numa")


def _enhancements() -> list[Json]:
    """10 Katalyst-style enhancements; numa-exclusive requires numa-binding, numa-share conflicts with it."""
    mem_enh = "katalyst.kubewharf.io/memory_enhancement"
    cpu_enh = "katalyst.kubewharf.io/cpu_enhancement"
    return [
        {
            "name": "numa-binding",
            "from": {"jsonAnnotation": mem_enh, "key": "numa_binding"},
            "type": "bool",
            "appliesTo": ["lsr", "dedicated-cores"],
            "effect": {"set": "cpu.numaBinding"},
        },
        {
            "name": "numa-exclusive",
            "from": {"jsonAnnotation": mem_enh, "key": "numa_exclusive"},
            "type": "bool",
            "appliesTo": ["dedicated-cores"],
            "requires": ["numa-binding"],
            "effect": {"set": "cpu.numaExclusive"},
        },
        {
            "name": "full-pcpus",
            "from": [{"label": "qosd.io/full-pcpus"}, {"annotation": "qosd.io/full-pcpus"}],
            "type": "bool",
            "equals": "yes",
            "conflictsWith": ["numa-exclusive"],
            "effect": {"set": "cpu.fullPCPUsPairing"},
        },
        {
            "name": "cpuset-pool",
            "from": {"jsonAnnotation": cpu_enh, "key": "cpuset_pool"},
            "type": "string",
            "appliesTo": ["shared-numa", "ls"],
            "effect": {"set": "cpu.pool"},
        },
        {
            "name": "oom-priority",
            "from": {"annotation": "katalyst.kubewharf.io/oom_priority", "aliases": ["qosd.io/oom-priority"]},
            "type": "integer",
            "range": [-100, 1000],
            "onInvalid": "clamp",
            "effect": {"set": "oomPriority"},
        },
        {
            "name": "burst-policy",
            "from": {"annotation": "koordinator.sh/cpuBurstPolicy"},
            "type": "string",
            "values": ["default", "closed", "static", "dynamic"],
            "default": "default",
            "appliesTo": ["ls", "ls-burstable"],
            "effect": {"set": "cpu.burstPolicy"},
        },
        {
            "name": "burst-percent",
            "from": {"annotation": "koordinator.sh/cpuBurstPercent"},
            "type": "number",
            "range": [0, 1000],
            "onInvalid": "ignore",
            "appliesTo": ["ls", "ls-burstable"],
            "effect": {"set": "cpu.burstPercent"},
        },
        {
            "name": "suppression-tolerance",
            "from": {"jsonAnnotation": cpu_enh, "key": "cpu_suppression_tolerance"},
            "type": "number",
            "range": [0, 10],
            "appliesTo": ["reclaimed-cores", "batch"],
            "effect": {"set": "eviction.suppressionToleranceRate"},
        },
        {
            "name": "rss-overuse",
            "from": {"jsonAnnotation": mem_enh, "key": "rss_overuse_threshold"},
            "type": "number",
            "range": [1, 10],
            "onInvalid": "reject",
            "effect": {"set": "eviction.rssOveruseThreshold"},
        },
        {
            "name": "spread-evenly",
            "from": {"label": "qosd.io/spread-evenly"},
            "type": "bool",
            "effect": {"set": "cpu.distributeEvenlyAcrossNuma", "value": True},
        },
    ]


def _reclaim(rng: random.Random) -> Json:
    return {
        "enabled": True,
        "cpu": {
            "policy": "maxUsageRequest",
            "reclaimThresholdPercent": rng.choice([60, 65, 70]),
            "maxPercent": rng.choice([50, 60, 70]),
            "min": "0",
            "max": "{{ node.cpus }}",
            "reservedForReport": "500m",
            "minReport": "1",
            "minIgnored": "100m",
            "publishAs": "kubernetes.io/batch-cpu",
            "smoothing": {"window": "5m", "aggregate": "avg", "minStep": "100m", "maxStep": "2"},
        },
        "memory": {
            "policy": "usage",
            "reclaimThresholdPercent": rng.choice([60, 65, 70]),
            "maxPercent": 60,
            "min": "0",
            "max": "{{ (node.memory * 0.6) | int }}",
            "reservedForReport": "1Gi",
            "minReport": "512Mi",
            "publishAs": "kubernetes.io/batch-memory",
            "smoothing": {"window": "10m", "aggregate": "max", "minStep": "256Mi", "maxStep": "4Gi"},
        },
        "degradeAfter": "15m",
        "reportInterval": "60s",
    }


# ---------------------------------------------------------------- conditions


class _Facts:
    """The registry's facts, grouped by scope, in a stable order."""

    def __init__(self, class_names: list[str]):
        self.class_names = class_names
        specs = sorted(registry().specs.values(), key=lambda s: s.name)
        self.by_scope: dict[str, list[FactSpec]] = {}
        for s in specs:
            self.by_scope.setdefault(s.scope, []).append(s)
        if not all(self.by_scope.get(s) for s in ("node", "numa", "pod", "container")):
            raise SystemExit(f"facts registry lacks a scope: {sorted(self.by_scope)}")

    def pick(self, rng: random.Random, scope: str) -> tuple[str, FactSpec]:
        """A fact usable in a rule iterating over ``scope`` (``node`` means no iteration)."""
        roll = rng.random()
        if scope in ITERATED and roll < 0.6:
            spec = rng.choice(self.by_scope[scope])
        elif roll < 0.85 or not self.by_scope.get("class"):
            spec = rng.choice(self.by_scope["node"])
        else:
            spec = rng.choice(self.by_scope["class"])
        if spec.scope == "class":
            return "class." + rng.choice(self.class_names) + "." + ".".join(spec.path), spec
        return spec.name, spec


def _threshold(rng: random.Random, spec: FactSpec) -> int | float:
    unit = spec.unit
    if unit == "percent":
        return rng.choice([5, 10, 20]) if ".psi." in spec.name else rng.randint(50, 95)
    if unit == "ratio":
        return round(rng.uniform(0.5, 2.5), 2)
    if unit == "bytes":
        return rng.choice([256, 512, 1024, 2048, 4096, 8192]) << 20
    if unit == "cores":
        return round(rng.uniform(0.5, 12.0), 1)
    if unit == "microseconds":
        return rng.randint(1, 100) * 100_000
    if unit == "seconds":
        return rng.choice([30, 60, 120, 300])
    if unit == "tasks":
        return rng.randint(4, 64)
    if unit == "count":
        return rng.randint(1, 8)
    if spec.name == "pod.priority":
        return rng.choice([0, 1000, 5000, 10000])
    return rng.randint(0, 3) if spec.kind == "integer" else round(rng.uniform(0, 10), 2)


def _margin(spec: FactSpec, threshold: float) -> int | float:
    """A hysteresis margin of ~10% of the threshold, as an integer where the fact counts whole units."""
    if spec.unit == "percent":
        return 5
    if spec.kind == "integer" or spec.unit in ("bytes", "microseconds", "count", "tasks", "seconds"):
        return max(1, int(abs(threshold) * 0.1))
    return max(0.05, round(abs(threshold) * 0.1, 2))


def _text_values(rng: random.Random, spec: FactSpec, class_names: list[str]) -> list[str]:
    if spec.enum:
        return rng.sample(list(spec.enum), rng.randint(1, len(spec.enum)))
    if spec.name == "pod.class":
        return rng.sample(class_names, rng.randint(1, 3))
    if spec.name == "pod.phase":
        return rng.sample(["Pending", "Running", "Unknown"], rng.randint(1, 2))
    if spec.name == "pod.namespace":
        return rng.sample(list(NAMESPACES), rng.randint(1, 3))
    if spec.name == "container.name":
        return rng.sample(["istio-proxy", "main", "sidecar", "log-agent"], rng.randint(1, 2))
    return [f"{spec.path[-1]}-{rng.randint(0, 99)}" for _ in range(rng.randint(1, 2))]


class _RuleState:
    """Per-rule bookkeeping: usage_percent triggers (for release.lowerPercent)."""

    def __init__(self) -> None:
        self.usage_triggers: list[float] = []


def _comparison(rng: random.Random, name: str, spec: FactSpec, facts: _Facts, st: _RuleState) -> Json:
    ops: Json = {}
    if spec.numeric:
        roll = rng.random()
        if spec.kind == "integer" and roll < 0.15:
            ops["in"] = sorted({int(_threshold(rng, spec)) for _ in range(rng.randint(1, 3))})
        elif roll < 0.25:
            lo = _threshold(rng, spec)
            ops["gte"] = lo
            ops["lt"] = lo * 2 if not isinstance(lo, float) else round(lo * 2, 2)
            if name.endswith("usage_percent"):
                ops["lt"] = 100
        else:
            op = rng.choice(("gt", "gte", "gte", "lt", "lte"))
            templates = FACT_TEMPLATES.get(name)
            ops[op] = rng.choice(templates) if templates and rng.random() < 0.5 else _threshold(rng, spec)
            if rng.random() < 0.15 and not isinstance(ops[op], str):
                ops["hysteresis"] = _margin(spec, ops[op])
        for op in ("gt", "gte"):
            if name.endswith("usage_percent") and isinstance(ops.get(op), int | float):
                st.usage_triggers.append(ops[op])
        if spec.series and rng.random() < 0.4:
            ops["window"] = rng.choice(WINDOWS)
            if rng.random() < 0.7:
                ops["agg"] = rng.choice(AGGS)
    elif spec.kind == "boolean":
        ops["eq"] = rng.random() < 0.5
    else:
        values = _text_values(rng, spec, facts.class_names)
        roll = rng.random()
        if roll < 0.1:
            ops["exists"] = True
        elif len(values) > 1 or roll < 0.4:
            ops["in"] = values
        else:
            ops[rng.choice(("eq", "ne"))] = values[0]
    return {name: ops}


def _condition(
    rng: random.Random, facts: _Facts, scope: str, depth: int, st: _RuleState, negated: bool = False
) -> Json:
    roll = rng.random()
    if depth >= 3 or roll < 0.35 or (negated and roll >= 0.92):
        name, spec = facts.pick(rng, scope)
        return _comparison(rng, name, spec, facts, st)
    if roll < 0.75:
        return {"all": [_condition(rng, facts, scope, depth + 1, st) for _ in range(rng.randint(2, 4))]}
    if roll < 0.92:
        return {"any": [_condition(rng, facts, scope, depth + 1, st) for _ in range(rng.randint(2, 3))]}
    return {"not": _condition(rng, facts, scope, depth + 1, st, negated=True)}


# ---------------------------------------------------------------- actions


def _evict(rng: random.Random, scope: str, st: _RuleState) -> Json:
    victims: Json = {"classes": sorted(rng.sample(VICTIM_CLASSES, rng.randint(1, 3)))}
    if rng.random() < 0.3:
        victims["excludeClasses"] = ["system-critical"]
    if rng.random() < 0.4:
        victims["phases"] = ["Running"]
    if rng.random() < 0.3:
        victims["maxPriority"] = rng.choice([0, 1000, 5000])
    if rng.random() < 0.2:
        victims["requireLabel"] = {"koordinator.sh/eviction-enabled": "true"}
    if scope == "numa":
        victims["numaScoped"] = True
        victims["minNumaUsageRatio"] = round(rng.uniform(0.05, 0.3), 2)
    order: list[str] = []
    for key in rng.sample(ORDER_KEYS, rng.randint(1, 4)):
        if key.lstrip("-") not in (k.lstrip("-") for k in order):
            order.append(key)
    evict: Json = {"victims": victims, "orderBy": order}
    resource = rng.choice(("memory", "cpu", "batch-cpu", "batch-memory"))
    release: Json = {"resource": resource, "target": rng.choice(("usage", "request"))}
    if st.usage_triggers:
        release["lowerPercent"] = max(0, min(st.usage_triggers) - 2)
    elif rng.random() < 0.5:
        release["lowerPercent"] = rng.randint(40, 80)
    else:
        release["amount"] = (
            rng.choice(("1", "500m", "2")) if "cpu" in resource else rng.choice(("1Gi", "512Mi"))
        )
    evict["release"] = release
    if rng.random() < 0.5:
        evict["maxPerRound"] = rng.randint(1, 5)
    if rng.random() < 0.3:
        evict["gracePeriodSeconds"] = rng.choice([0, 10, 30])
    if rng.random() < 0.3:
        evict["killer"] = rng.choice(("evictionAPI", "delete"))
    if rng.random() < 0.2:
        evict["cooldown"] = rng.choice(DURATIONS)
    return {"evict": evict}


def _knob(rng: random.Random, key: str) -> Any:
    roll = rng.random()
    if key.startswith("memory."):
        if roll < 0.4:
            return {"percent": rng.choice([50, 70, 80, 90]), "of": rng.choice(("request", "limit"))}
        if roll < 0.7:
            return {"expr": rng.choice(("pod.limits.memory * 0.8", "pod.requests.memory * 1.1"))}
        return rng.choice([512, 1024, 2048]) << 20
    if key in ("cpu.shares", "cpu.weight"):
        return rng.choice([2, 10, 100, 512]) if roll < 0.7 else {"expr": "pod.requests.cpu * 512"}
    if roll < 0.5:
        return {"percent": rng.choice([50, 100, 150]), "of": "limit"}
    return rng.choice([50_000, 100_000, 200_000])


def _set_cgroup(rng: random.Random, class_names: list[str]) -> Json:
    roll = rng.random()
    if roll < 0.7:
        target: Json = {"class": rng.choice((*VICTIM_CLASSES, "ls"))}
    elif roll < 0.9:
        target = {"pool": rng.choice(("batch", "reclaim", "share"))}
    else:
        target = {"path": "kubepods/besteffort"}
    keys = rng.sample(CGROUP_KEYS_CPU + CGROUP_KEYS_MEM, rng.randint(1, 3))
    values = {k: _knob(rng, k) for k in sorted(keys)}
    # Two names of one host file (cpu.shares and cpu.weight) in one action do not validate: the
    # first of each pair stays. Dropped after the draws, so every other rule is what the seed made.
    for _, second, _, _ in same_host_file(keys):
        values.pop(second, None)
    # Nor does a literal burst above a literal quota beside it (the kernel refuses it): no burst then.
    if burst_problem({k: str(v) for k, v in values.items() if isinstance(v, int)}):
        values.pop("cpu.cfs_burst_us", None)
        values.pop("cpu.max.burst", None)
    if rng.random() < 0.1:
        values["cpuset.mems"] = "0"
    return {"setCgroup": {"target": target, "values": values}}


def _action(rng: random.Random, scope: str, st: _RuleState, class_names: list[str]) -> Json:
    roll = rng.random()
    if roll < 0.3:
        return _evict(rng, scope, st)
    if roll < 0.45:
        suppress: Json = {
            "class": rng.choice(("batch", "reclaimed-cores")),
            "policy": rng.choice(("cpuset", "cfsQuota")),
        }
        if rng.random() < 0.7:
            suppress["thresholdPercent"] = rng.randint(55, 75)
            suppress["minPercent"] = rng.randint(5, 20)
        if rng.random() < 0.5:
            suppress["minCpus"] = rng.randint(1, 2)
        if rng.random() < 0.3:
            suppress["stepPercent"] = rng.choice([5, 10])
        return {"suppress": suppress}
    if roll < 0.65:
        return _set_cgroup(rng, class_names)
    if roll < 0.72:
        taint: Json = {
            "key": rng.choice(("qosd.io/pressure", "qosd.io/memory-pressure", "qosd.io/no-batch")),
            "effect": rng.choice(("NoSchedule", "PreferNoSchedule")),
        }
        if rng.random() < 0.5:
            taint["value"] = "true"
        return {"taint": taint}
    if roll < 0.76:
        return {
            "condition": {
                "type": rng.choice(("qosd.io/MemoryPressure", "qosd.io/CPUPressure", "Degraded")),
                "reason": "ThresholdExceeded",
                "message": "raised by a synthetic rule",
            }
        }
    if roll < 0.79:
        return {
            "setResctrl": {
                "class": "batch",
                "l3Percent": [0, rng.choice([10, 20, 30])],
                "mbPercent": rng.choice([10, 20, 30]),
            }
        }
    if roll < 0.81:
        return {"publish": {"resource": rng.choice(("cpu", "memory"))}}
    return {
        "notify": {
            "reason": rng.choice(("HighLoad", "MemoryPressure", "Throttled", "PsiStall")),
            "message": "synthetic rule fired",
            "severity": rng.choice(("Normal", "Warning")),
        }
    }


def _rule(rng: random.Random, i: int, facts: _Facts) -> Json:
    scope = rng.choices(("node", "numa", "pod", "container"), weights=(4, 1, 3, 2))[0]
    st = _RuleState()
    # The top level is always a group, so every rule has nesting and at least two comparisons.
    when = {
        rng.choice(("all", "all", "any")): [
            _condition(rng, facts, scope, 1, st) for _ in range(rng.randint(2, 3))
        ]
    }
    rule: Json = {
        "name": f"r{i:04d}-{scope}-{rng.choice(('pressure', 'guard', 'balance', 'protect', 'shed'))}"
    }
    if rng.random() < 0.3:
        rule["description"] = f"synthetic {scope}-scoped rule {i}"
    if rng.random() < 0.1:
        rule["mode"] = "audit"
    rule["when"] = when
    if rng.random() < 0.7:
        rule["for"] = rng.choice(DURATIONS)
    if rng.random() < 0.25:
        # clearWhen reads the same scope (or node facts): a rule iterates over one scope at most.
        rule["clearWhen"] = _condition(rng, facts, scope, 2, _RuleState())
    if rng.random() < 0.6:
        rule["cooldown"] = rng.choice(DURATIONS)
    if rng.random() < 0.3:
        rule["limits"] = {
            "perRound": rng.randint(1, 5),
            "perWindow": {"count": rng.randint(2, 10), "window": rng.choice(("5m", "10m", "1h"))},
        }
    class_names = facts.class_names
    actions = [
        _action(rng, scope, st, class_names) for _ in range(rng.choices((1, 2, 3), weights=(5, 3, 1))[0])
    ]
    if scope == "numa" and '"numa.' not in json.dumps([when, rule.get("clearWhen")]):
        # Conditions that drew only node facts make a node rule, which has no matched NUMA node
        # for numaScoped victims (validate refuses that); dropped after the draws, as above.
        for action in actions:
            victims = action.get("evict", {}).get("victims", {})
            victims.pop("numaScoped", None)
            victims.pop("minNumaUsageRatio", None)
    rule["then"] = actions[0] if len(actions) == 1 and rng.random() < 0.5 else actions
    return rule


# ---------------------------------------------------------------- document


def synthetic_spec(rules: int, seed: int) -> Json:
    """The document as data (before YAML): deterministic in (rules, seed)."""
    rng = random.Random(seed)
    classes = _classes(rng)
    class_names = [c["name"] for c in classes]
    facts = _Facts(class_names)
    spec: Json = {
        "priority": 0,
        "mode": "enforce",
        "defaultClass": "default",
        "classes": classes,
        "enhancements": _enhancements(),
        "pools": _pools(rng),
        "reclaim": _reclaim(rng),
        "rules": [_rule(rng, i, facts) for i in range(rules)],
    }
    return {
        "apiVersion": "qosd.io/v1alpha1",
        "kind": "QoSPolicy",
        "metadata": {
            "name": f"synthetic-{rules}-seed{seed}",
            "labels": {"qosd.io/generated-by": "bench.synthetic"},
        },
        "spec": spec,
    }


def synthetic_policy(rules: int, seed: int) -> str:
    """A valid QoSPolicy document with ``rules`` rules, as YAML text."""
    header = (
        f"# Generated by `python -m bench.synthetic --rules {rules} --seed {seed}`; do not edit.\n"
        "# A synthetic, schema- and semantically-valid QoSPolicy for the config pipeline benchmark.\n"
    )
    body = yaml.safe_dump(
        synthetic_spec(rules, seed), sort_keys=False, default_flow_style=None, width=110, allow_unicode=True
    )
    return header + body


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.synthetic", description="Write a seeded synthetic QoSPolicy document to stdout."
    )
    ap.add_argument("--rules", type=int, default=500, help="number of rules (default 500)")
    ap.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    args = ap.parse_args(argv)
    if args.rules < 0:
        ap.error("--rules must be >= 0")
    sys.stdout.write(synthetic_policy(args.rules, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
