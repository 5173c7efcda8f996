"""Latency-sensitive probe: a fixed small piece of work at a fixed rate, timed from its scheduled start.

Latency is measured from the instant the request was *due* to the instant its work finished, so it
includes the wake-up delay (how long the scheduler kept the probe waiting) and the run time of the
work (longer when a CPU is shared). That is what an online service's tail latency suffers from under
colocation. Prints one JSON object: count, p50/p99/p999 in microseconds, and the CPU time it used.
"""

from __future__ import annotations

import argparse
import json
import resource
import time


def work(n: int) -> int:
    """Fixed CPU work; the result is returned so the loop cannot be optimized away."""
    acc = 0
    for i in range(n):
        acc ^= i * 2654435761
    return acc


def percentile(sorted_values: list[int], q: float) -> float:
    """Nearest-rank percentile, as latency reports usually give it."""
    if not sorted_values:
        return 0.0
    rank = max(1, min(len(sorted_values), int(-(-q * len(sorted_values) // 1))))
    return float(sorted_values[rank - 1])


def run(rate_hz: float, duration_s: float, work_n: int, warmup_s: float) -> dict[str, float]:
    period_ns = int(1e9 / rate_hz)
    latencies: list[int] = []
    start = time.perf_counter_ns() + int(warmup_s * 1e9)
    # Warm-up: the first moments carry page faults and cache misses, not scheduling.
    while time.perf_counter_ns() < start:
        work(work_n)
        time.sleep(period_ns / 1e9)
    usage0 = resource.getrusage(resource.RUSAGE_SELF)
    end = start + int(duration_s * 1e9)
    due = start
    while due < end:
        now = time.perf_counter_ns()
        if due > now:
            time.sleep((due - now) / 1e9)
        work(work_n)
        latencies.append(time.perf_counter_ns() - due)
        due += period_ns
    usage1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    latencies.sort()
    return {
        "count": len(latencies),
        "p50_us": percentile(latencies, 0.50) / 1e3,
        "p99_us": percentile(latencies, 0.99) / 1e3,
        "p999_us": percentile(latencies, 0.999) / 1e3,
        "max_us": latencies[-1] / 1e3 if latencies else 0.0,
        "cpu_seconds": cpu,
        "cpu_cores": cpu / duration_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=200.0, help="requests per second (default 200)")
    parser.add_argument("--duration", type=float, default=20.0, help="measured seconds")
    parser.add_argument("--work", type=int, default=20000, help="loop iterations per request")
    parser.add_argument("--warmup", type=float, default=1.0)
    args = parser.parse_args()
    print(json.dumps(run(args.rate, args.duration, args.work, args.warmup)), flush=True)


if __name__ == "__main__":
    main()
