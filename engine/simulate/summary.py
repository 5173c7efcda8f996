"""The summary of a simulation run, from the recorder's per-tick numbers and counts (the same counts the
timeline's lines were written from, so the two agree)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from engine.sources.trace import GiB

if TYPE_CHECKING:
    from engine.simulate.recorder import Recorder


def summarize(
    rec: Recorder, runtime: float, readmissions: Sequence[tuple[str, float, float]]
) -> dict[str, Any]:
    nums = rec.numbers
    minutes = sum(n.duration for n in nums) / 60.0
    weights = [n.duration for n in nums]

    def stats(values: list[float]) -> dict[str, float]:
        if not values:
            return {"mean": 0.0, "p95": 0.0, "max": 0.0}
        total = sum(weights) or 1.0
        ordered = sorted(values)
        return {
            "mean": round(sum(v * w for v, w in zip(values, weights, strict=True)) / total, 2),
            "p95": round(ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)], 2),
            "max": round(ordered[-1], 2),
        }

    def risk_minutes(label: str) -> dict[str, Any]:
        attr = "risk_without" if label == "withoutReclaim" else "risk_with"
        return {
            "minutes": round(sum(n.duration for n in nums if getattr(n, attr)) / 60.0, 1),
            "cpuMinutes": round(sum(n.duration for n in nums if "cpu" in getattr(n, attr)) / 60.0, 1),
            "memoryMinutes": round(sum(n.duration for n in nums if "memory" in getattr(n, attr)) / 60.0, 1),
            "episodes": len(rec.risk_episodes[label]),
        }

    published: dict[str, Any] = {}
    names: dict[str, list[tuple[float, float]]] = {}
    for n in nums:
        for kind, value in n.published.items():
            if value is not None:
                names.setdefault(kind, []).append((value, n.duration))
    for kind, values in names.items():
        covered = sum(d for _, d in values)
        unit, scale = ("cores", 1.0) if kind == "cpu" else ("GiB", GiB)
        published[kind] = {
            "unit": unit,
            "mean": round(sum(v * d for v, d in values) / (covered or 1.0) / scale, 2),
            "min": round(min(v for v, _ in values) / scale, 2),
            "max": round(max(v for v, _ in values) / scale, 2),
            "publishedMinutes": round(covered / 60.0, 1),
        }
    by_rule: dict[str, int] = {}
    by_template: dict[str, int] = {}
    for e in rec.evictions:
        by_rule[e["rule"]] = by_rule.get(e["rule"], 0) + 1
        key = e["template"] or "(not from a batch template)"
        by_template[key] = by_template.get(key, 0) + 1
    demanded = sum((n.batch_running + n.batch_waiting) * n.duration for n in nums)
    ran = sum(n.batch_running * n.duration for n in nums)
    rules = rec.changes.summary()
    return {
        "ticks": len(nums),
        "minutes": round(minutes, 1),
        "closedLoop": rec.trace.closed_loop,
        "utilizationPercent": {
            "cpu": {
                "withoutReclaim": stats([n.cpu_without for n in nums]),
                "withReclaim": stats([n.cpu_with for n in nums]),
            },
            "memory": {
                "withoutReclaim": stats([n.memory_without for n in nums]),
                "withReclaim": stats([n.memory_with for n in nums]),
            },
        },
        "reclaimed": {
            "published": published,
            "batchCpuCoreHours": round(sum(n.batch_cpu * n.duration for n in nums) / 3600.0, 2),
            "batchMemoryGiBHours": round(sum(n.batch_memory * n.duration for n in nums) / 3600.0 / GiB, 2),
            "batchPodsStarted": rec.admitted,
            "batchPodsFinished": rec.finished,
            "batchDemandMetPercent": round(100.0 * ran / demanded, 1) if demanded else None,
        },
        "evictions": {
            "total": len(rec.evictions),
            "byRule": by_rule,
            "byTemplate": by_template,
            "heldBack": rec.held_evictions,
            "list": rec.evictions,
        },
        "suppressions": _suppressions(rec, rules),
        "loops": _loops(readmissions, rec.admitted, len(rec.evictions)),
        "sloRisk": {
            "thresholds": {
                "cpuPercent": rec.opts.risk_cpu_percent,
                "memoryPercent": rec.opts.risk_memory_percent,
            },
            "withoutReclaim": risk_minutes("withoutReclaim"),
            "withReclaim": risk_minutes("withReclaim"),
        },
        "rules": rules,
        "rulesFired": {rule: c["firedTicks"] for rule, c in rules.items() if c["firedTicks"]},
        "cgroupWrites": rec.cgroup_writes,
        "runtimeSeconds": round(runtime, 3),
    }


def _suppressions(rec: Recorder, rules: dict[str, Any]) -> dict[str, Any]:
    """What the suppress rules did: the ticks they fired, the cgroup writes they performed, and the
    cores the batch pods' cgroup allowed (the simulated node holds batch CPU to it)."""
    nums = rec.numbers
    capacity = rec.capacity_cpu
    limited = [n for n in nums if n.batch_cpu_allowed < capacity]
    total = sum(n.duration for n in nums) or 1.0
    suppressed = [capacity - n.batch_cpu_allowed for n in nums]
    return {
        "rules": sorted(rec.suppress_rules),
        "firedTicks": sum(rules.get(r, {}).get("firedTicks", 0) for r in rec.suppress_rules),
        "writes": rec.suppress_writes,
        "wantedButNotPerformed": rec.suppress_skipped,
        "limitedMinutes": round(sum(n.duration for n in limited) / 60.0, 1),
        "suppressedCores": {
            "mean": round(sum(v * n.duration for v, n in zip(suppressed, nums, strict=True)) / total, 2),
            "max": round(max(suppressed, default=0.0), 2),
        },
        "batchCpuAllowedCores": {
            "min": round(min((n.batch_cpu_allowed for n in limited), default=capacity), 2),
            "max": round(max((n.batch_cpu_allowed for n in limited), default=capacity), 2),
        },
    }


def _loops(readmissions: Sequence[tuple[str, float, float]], admitted: int, evicted: int) -> dict[str, Any]:
    """Admit, evict, admit again: batch work the scheduler admitted on what qosd published, that an
    eviction rule then removed, and that was admitted again. A policy whose published amounts and
    eviction thresholds agree has none; many mean the two fight each other."""
    by_template: dict[str, int] = {}
    for template, _, _ in readmissions:
        by_template[template] = by_template.get(template, 0) + 1
    lags = [(again - evicted_at) / 60.0 for _, evicted_at, again in readmissions]
    return {
        "readmitted": len(readmissions),
        "byTemplate": dict(sorted(by_template.items())),
        "medianMinutesToReadmission": round(statistics.median(lags), 1) if lags else None,
        "admitted": admitted,
        "evicted": evicted,
    }
