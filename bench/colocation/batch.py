"""CPU-hungry batch job: one busy worker per CPU, counting fixed chunks of work until the deadline.

The throughput (chunks per second, summed over workers) is the batch job's useful work. It stands in
for stress-ng's bogo-ops with no extra package: the scenarios only compare it with its own solo rate.
"""

from __future__ import annotations

import argparse
import json
import os
import time


def spin(deadline: float, chunk: int) -> int:
    done = 0
    while time.monotonic() < deadline:
        acc = 0
        for i in range(chunk):
            acc += i
        done += 1
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds before counting starts")
    parser.add_argument("--chunk", type=int, default=10000)
    args = parser.parse_args()
    start = time.monotonic() + args.warmup
    deadline = start + args.duration
    pipes = []
    for _ in range(args.workers):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            spin(start, args.chunk)  # warm-up, uncounted
            count = spin(deadline, args.chunk)
            os.write(w, str(count).encode())
            os._exit(0)
        os.close(w)
        pipes.append((pid, r))
    total = 0
    for pid, r in pipes:
        with os.fdopen(r) as f:
            total += int(f.read() or 0)
        os.waitpid(pid, 0)
    print(json.dumps({"chunks": total, "rate": total / args.duration, "workers": args.workers}), flush=True)


if __name__ == "__main__":
    main()
