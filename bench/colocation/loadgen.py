"""An open-loop memcached load generator: fixed request rate, latency from each request's *due* time.

Debian bookworm packages no fixed-rate generator for memcached or nginx (no wrk2, memtier_benchmark
or mc-crusher; its ``wrk`` and memcached's ``memslap`` are closed loop: each connection waits for a
reply before it sends again, so a stalled server stops the clock and its stall goes unmeasured, the
"coordinated omission" Gil Tene named). This generator is the small part of wrk2 that matters here:

- request *i* is due at ``start + i / rate``, whatever happened to earlier requests; it is sent at
  once if the generator is late, and pipelined behind any request still outstanding on its
  connection (memcached answers a connection's requests in order);
- its latency is the reply's arrival minus its due time, so time spent queued behind a slow reply,
  or waiting for the generator itself to be scheduled, is counted, never omitted.

Run as ``python -m bench.colocation.loadgen --port P --rate R --duration S`` (in the server's cgroup:
the bench places both in the latency-sensitive class); it prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import select
import socket
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from bench.colocation.stats import latency_summary

VALUE_SIZE = 100
END = b"END\r\n"


class Connection:
    """One TCP connection: the due times of its outstanding requests, oldest first, and the bytes of
    a reply not yet complete. Replies are matched to requests in order, as memcached sends them."""

    def __init__(self, sock: socket.socket | None = None) -> None:
        self.sock = sock
        self.due: deque[int] = deque()
        self.buf = b""

    def sent(self, due_ns: int) -> None:
        self.due.append(due_ns)

    def received(self, data: bytes) -> list[int]:
        """The due times of the requests ``data`` completes (a ``get`` reply ends with END\\r\\n; the
        values are ``x`` bytes, so END\\r\\n appears nowhere else)."""
        self.buf += data
        done = []
        while (k := self.buf.find(END)) >= 0:
            self.buf = self.buf[k + len(END) :]
            if not self.due:
                raise RuntimeError("memcached sent a reply to no outstanding request")
            done.append(self.due.popleft())
        return done


def _connect(port: int) -> socket.socket:
    deadline = time.monotonic() + 30
    while True:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def preload(port: int, keys: int) -> None:
    """Store every key once, so each ``get`` is a hit of the same size."""
    with _connect(port) as s:
        value = b"x" * VALUE_SIZE
        for k in range(keys):
            s.sendall(b"set key%d 0 0 %d\r\n%s\r\n" % (k, VALUE_SIZE, value))
            reply = b""
            while not reply.endswith(b"\r\n"):
                reply += s.recv(64)
            if reply != b"STORED\r\n":
                raise RuntimeError(f"memcached refused set key{k}: {reply!r}")


def cpu_ns(usage_file: Path | None) -> int:
    return int(usage_file.read_text()) if usage_file else 0


def run(
    port: int,
    rate: float,
    duration: float,
    warmup: float,
    connections: int,
    keys: int,
    usage_file: Path | None,
    drain: float = 5.0,
) -> dict[str, float]:
    preload(port, keys)
    conns = [Connection(_connect(port)) for _ in range(connections)]
    for c in conns:
        assert c.sock is not None
        c.sock.setblocking(False)
    socks = {c.sock: c for c in conns}
    requests = [b"get key%d\r\n" % k for k in range(keys)]
    period = 1e9 / rate
    t0 = time.perf_counter_ns() + 10_000_000
    measure_from = t0 + int(warmup * 1e9)
    end = measure_from + int(duration * 1e9)
    latencies: list[int] = []
    cpu0 = cpu1 = 0
    late = 0
    i = 0
    due = t0
    while True:
        now = time.perf_counter_ns()
        if cpu0 == 0 and now >= measure_from:
            cpu0 = cpu_ns(usage_file) or 1
        while due <= now and due < end:
            c = conns[i % connections]
            assert c.sock is not None
            c.sock.send(requests[i % keys])  # a few bytes: the socket buffer always has room
            c.sent(due)
            late += now - due > 1_000_000
            i += 1
            due = t0 + int(i * period)
        outstanding = any(c.due for c in conns)
        if due >= end and not cpu1:
            cpu1 = cpu_ns(usage_file)
        if due >= end and (not outstanding or now > end + drain * 1e9):
            break
        wait = (due - now) / 1e9 if due < end else 0.05
        readable, _, _ = select.select(list(socks), [], [], max(0.0, wait))
        for s in readable:
            data = s.recv(65536)
            if not data:
                raise RuntimeError("memcached closed the connection")
            got = time.perf_counter_ns()
            latencies += [got - d for d in socks[s].received(data) if d >= measure_from]
    unanswered = sum(len(c.due) for c in conns)
    for c in conns:
        assert c.sock is not None
        c.sock.close()
    out = latency_summary(latencies)
    out.update(
        sent=i,
        unanswered=unanswered,
        late_sends=late,
        rate=rate,
        duration=duration,
        cpu_cores=(cpu1 - cpu0) / 1e9 / duration if usage_file else float("nan"),
    )
    return out


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.colocation.loadgen", description=__doc__)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--rate", type=float, default=2000.0, help="requests per second (default 2000)")
    p.add_argument("--duration", type=float, default=20.0, help="measured seconds")
    p.add_argument("--warmup", type=float, default=2.0, help="seconds at the same rate, not recorded")
    p.add_argument("--connections", type=int, default=4)
    p.add_argument("--keys", type=int, default=1000)
    p.add_argument(
        "--cpu-usage-file", type=Path, help="cpuacct.usage of the server's cgroup, read over the window"
    )
    a = p.parse_args(argv)
    if a.rate <= 0 or a.duration <= 0 or a.connections < 1 or a.keys < 1:
        p.error("--rate and --duration must be positive, --connections and --keys at least 1")
    result = run(a.port, a.rate, a.duration, a.warmup, a.connections, a.keys, a.cpu_usage_file)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
