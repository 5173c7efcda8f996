"""The real-server colocation bench's arithmetic, apart from the processes so tests can feed it samples.

Definitions (the same as bench/colocation/run.py's for its synthetic probe):

- a percentile is nearest-rank (``engine.demo.percentile``);
- the CPU the server leaves idle is ``CPUs - server_cores``, where ``server_cores`` is the CPU time
  the latency-sensitive cgroup (memcached and its load generator) used per second of the measured
  window when running alone;
- the batch share is the batch job's throughput against what it could get from that idle CPU: its
  rate in the arm divided by ``solo_rate * (CPUs - server_cores) / CPUs``, where ``solo_rate`` is its
  rate with the machine to itself (the same repetition's "batch alone" arm).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

import yaml

from engine.demo import percentile


def latency_summary(latencies_ns: Sequence[int]) -> dict[str, float]:
    """Count, p50, p99, p999 and max in microseconds, from unsorted nanosecond samples."""
    s = sorted(latencies_ns)
    return {
        "count": len(s),
        "p50_us": percentile(s, 0.50) / 1e3,
        "p99_us": percentile(s, 0.99) / 1e3,
        "p999_us": percentile(s, 0.999) / 1e3,
        "max_us": (s[-1] / 1e3) if s else 0.0,
    }


def batch_share(rate: float, solo_rate: float, server_cores: float, cpus: int) -> float:
    """``rate`` as a fraction of the solo rate scaled to the CPU the server leaves idle."""
    if solo_rate <= 0 or not 0 <= server_cores < cpus:
        raise ValueError(
            f"no idle CPU to compare with: solo rate {solo_rate}, server cores {server_cores} of {cpus}"
        )
    return rate / (solo_rate * (cpus - server_cores) / cpus)


def stress_ng_rate(report: str) -> float:
    """Bogo ops per second of wall-clock time, summed over the stressors of a ``stress-ng --yaml``
    report (one ``metrics`` entry per stressor kind)."""
    doc = yaml.safe_load(report)
    metrics = doc.get("metrics") if isinstance(doc, Mapping) else None
    if not metrics:
        raise ValueError("the stress-ng report has no metrics section (did the run complete?)")
    return float(sum(float(m["bogo-ops-per-second-real-time"]) for m in metrics))


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, min and max of one measure over the repetitions."""
    if not values:
        raise ValueError("no repetitions to summarize")
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}
