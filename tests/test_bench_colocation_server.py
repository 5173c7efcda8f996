"""bench/colocation's real-server bench: the arithmetic it reports, and that its load generator is
open loop (it keeps sending on schedule while the server answers nothing).

The numbers asserted are what the harness must compute from given samples; no test here asserts a
latency or how much CPU anything was granted (the bench records those in bench/RESULTS.md).
"""

from __future__ import annotations

import math
import os
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from bench.colocation import loadgen
from bench.colocation.server import ARMS, arm_order, busy_seconds, comparability, derive, verdict
from bench.colocation.stats import batch_share, latency_summary, spread, stress_ng_rate


@pytest.mark.parametrize(
    ("samples_ns", "expected"),
    [
        # 1..1000 µs, shuffled order: nearest rank of 1000 samples
        (
            [(k * 7919) % 1000 * 1000 + 1000 for k in range(1000)],
            {"count": 1000, "p50_us": 500.0, "p99_us": 990.0, "p999_us": 999.0, "max_us": 1000.0},
        ),
        # 99 fast replies and one stalled one: the stall is the p99 of 100 samples only at rank 100
        (
            [100_000] * 99 + [50_000_000],
            {"count": 100, "p50_us": 100.0, "p99_us": 100.0, "p999_us": 50_000.0, "max_us": 50_000.0},
        ),
        ([2_000], {"count": 1, "p50_us": 2.0, "p99_us": 2.0, "p999_us": 2.0, "max_us": 2.0}),
        ([], {"count": 0, "p50_us": 0.0, "p99_us": 0.0, "p999_us": 0.0, "max_us": 0.0}),
    ],
)
def test_latency_summary_is_nearest_rank_in_microseconds(
    samples_ns: list[int], expected: dict[str, float]
) -> None:
    assert latency_summary(samples_ns) == expected


@pytest.mark.parametrize(
    ("rate", "solo", "server_cores", "cpus", "expected"),
    [
        (900.0, 1000.0, 0.2, 2, 1.0),  # the server leaves 1.8 of 2 CPUs: 900 is all of it
        (765.0, 1000.0, 0.2, 2, 0.85),
        (500.0, 1000.0, 0.0, 2, 0.5),
        (1000.0, 1000.0, 1.0, 4, 1000 / 750),  # more than the idle share: > 100%
    ],
)
def test_batch_share_scales_the_solo_rate_to_the_idle_cpu(
    rate: float, solo: float, server_cores: float, cpus: int, expected: float
) -> None:
    assert batch_share(rate, solo, server_cores, cpus) == pytest.approx(expected)


@pytest.mark.parametrize(("solo", "server_cores"), [(0.0, 0.2), (1000.0, 2.0), (1000.0, -0.1)])
def test_batch_share_refuses_when_there_is_no_idle_cpu_to_compare_with(
    solo: float, server_cores: float
) -> None:
    with pytest.raises(ValueError, match="no idle CPU"):
        batch_share(500.0, solo, server_cores, 2)


STRESS_NG_YAML = """\
---
system-info:
      stress-ng-version: 0.15.06
      cpus: 2
metrics:
    - stressor: cpu
      bogo-ops: 1535
      bogo-ops-per-second-usr-sys-time: 1114.042377
      bogo-ops-per-second-real-time: 510.485236
      wall-clock-time: 3.006943
    - stressor: matrix
      bogo-ops: 100
      bogo-ops-per-second-usr-sys-time: 40.0
      bogo-ops-per-second-real-time: 33.5
      wall-clock-time: 3.0
...
"""


def test_stress_ng_rate_sums_real_time_bogo_ops_over_stressors() -> None:
    assert stress_ng_rate(STRESS_NG_YAML) == pytest.approx(510.485236 + 33.5)


@pytest.mark.parametrize("report", ["---\nsystem-info: {cpus: 2}\n...\n", "", "- 1\n"])
def test_stress_ng_rate_refuses_a_report_without_metrics(report: str) -> None:
    with pytest.raises(ValueError, match="no metrics section"):
        stress_ng_rate(report)


def test_spread_is_median_min_max() -> None:
    assert spread([3.0, 1.0, 2.0, 10.0, 4.0]) == {"median": 3.0, "min": 1.0, "max": 10.0}
    with pytest.raises(ValueError):
        spread([])


def test_arm_order_puts_every_arm_in_every_position_over_as_many_reps_as_arms() -> None:
    orders = [arm_order(r) for r in range(len(ARMS))]
    assert all(sorted(o) == sorted(ARMS) for o in orders)
    for pos in range(len(ARMS)):
        assert sorted(o[pos] for o in orders) == sorted(ARMS)


def test_derive_compares_each_rep_with_its_own_alone_and_solo_arms() -> None:
    def rep(
        alone_p99: float, server_cores: float, solo: float, managed_p99: float, managed_rate: float
    ) -> Any:
        return {
            "server alone": {"p99_us": alone_p99, "cpu_cores": server_cores},
            "batch alone": {"batch_rate": solo},
            "unmanaged": {"p99_us": 4 * alone_p99, "batch_rate": solo},
            "qosd": {"p99_us": managed_p99, "batch_rate": managed_rate},
        }

    rows = derive([rep(100.0, 0.2, 1000.0, 105.0, 855.0), rep(200.0, 1.0, 500.0, 180.0, 200.0)], cpus=2)
    assert rows[0]["qosd"]["p99_ratio"] == pytest.approx(1.05)
    assert rows[0]["qosd"]["batch_share"] == pytest.approx(855 / 900)
    assert rows[0]["unmanaged"]["batch_share"] == pytest.approx(1000 / 900)
    assert rows[0]["server alone"]["p99_ratio"] == 1.0
    assert "batch_share" not in rows[0]["server alone"] and "p99_ratio" not in rows[0]["batch alone"]
    assert rows[1]["qosd"]["p99_ratio"] == pytest.approx(0.9)
    assert rows[1]["qosd"]["batch_share"] == pytest.approx(200 / 250)
    assert rows[0]["qosd"]["batch_vs_unmanaged"] == pytest.approx(0.855)
    assert rows[1]["qosd"]["batch_vs_unmanaged"] == pytest.approx(0.4)


@pytest.mark.parametrize(
    ("s", "below", "expected"),
    [
        (
            {"median": 1.0, "min": 0.9, "max": 1.04},
            True,
            "**1.00x** (met by the median; every repetition meets it)",
        ),
        (
            {"median": 1.2, "min": 1.1, "max": 1.3},
            True,
            "**1.20x** (not met by the median; no repetition meets it)",
        ),
        (
            {"median": 1.0, "min": 0.5, "max": 3.0},
            True,
            "**1.00x** (met by the median; the range 0.50–3.00 straddles the target)",
        ),
        (
            {"median": 1.2, "min": 0.5, "max": 3.0},
            True,
            "**1.20x** (not met by the median; the range 0.50–3.00 straddles the target)",
        ),
        (
            {"median": 1.05, "min": 1.05, "max": 1.05},
            True,
            "**1.05x** (met by the median; every repetition meets it)",
        ),
        (
            {"median": 1.05, "min": 0.9, "max": 1.1},
            False,
            "**1.05x** (met by the median; the range 0.90–1.10 straddles the target)",
        ),
    ],
)
def test_verdict_says_whether_the_range_of_repetitions_can_tell(
    s: dict[str, float], below: bool, expected: str
) -> None:
    assert verdict(s, 1.05 if below else 1.0, below=below, fmt=".2f", unit="x") == expected


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        ([b"VALUE key1 0 3\r\nxxx\r\nEND\r\n"], [[10]]),
        ([b"VALUE key1 0 3\r\nxxx\r\nEN", b"D\r\nEND\r\n"], [[], [10, 20]]),  # split, then a miss
        ([b"END\r\nEND\r\nEND\r\n"], [[10, 20, 30]]),
    ],
)
def test_replies_complete_requests_in_the_order_they_were_sent(
    chunks: list[bytes], expected: list[list[int]]
) -> None:
    c = loadgen.Connection()
    for due in (10, 20, 30):
        c.sent(due)
    assert [c.received(chunk) for chunk in chunks] == expected


def test_a_reply_to_no_outstanding_request_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="no outstanding request"):
        loadgen.Connection().received(b"END\r\n")


class StallingMemcached:
    """A memcached stand-in that answers ``set`` at once and holds every ``get`` reply until it has
    received ``hold`` gets: a closed-loop client (one request in flight per connection) could never
    get that far, so the run only completes if the generator keeps sending on its schedule."""

    def __init__(self, hold: int) -> None:
        self.hold = hold
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.gets = 0
        self.unanswered_at_release = 0
        self.lock = threading.Lock()
        self.released = threading.Event()
        self.held: list[tuple[socket.socket, int]] = []
        self.thread = threading.Thread(target=self.accept, daemon=True)
        self.thread.start()

    def accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn: socket.socket) -> None:
        buf = b""
        with conn:
            while data := conn.recv(65536):
                buf += data
                while b"\r\n" in buf:
                    line, rest = buf.split(b"\r\n", 1)
                    if line.startswith(b"set "):
                        size = int(line.split()[4])
                        if len(rest) < size + 2:
                            break
                        buf = rest[size + 2 :]
                        conn.sendall(b"STORED\r\n")
                        continue
                    buf = rest
                    self.get(conn)

    def get(self, conn: socket.socket) -> None:
        reply = b"VALUE k 0 3\r\nxxx\r\nEND\r\n"
        with self.lock:
            self.gets += 1
            if not self.released.is_set():
                self.held.append((conn, 1))
                if self.gets < self.hold:
                    return
                self.unanswered_at_release = len(self.held)
                self.released.set()
                for c, _ in self.held:
                    c.sendall(reply)
                self.held.clear()
                return
        conn.sendall(reply)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def stalling() -> Iterator[StallingMemcached]:
    server = StallingMemcached(hold=50)
    yield server
    server.close()


def test_the_load_generator_keeps_its_schedule_while_the_server_answers_nothing(
    stalling: StallingMemcached,
) -> None:
    result = loadgen.run(
        stalling.port, rate=1000.0, duration=0.2, warmup=0.0, connections=4, keys=5, usage_file=None
    )
    assert stalling.unanswered_at_release == 50  # 50 gets in flight on 4 connections: open loop
    assert result["sent"] == 200  # every due time in the window, stall or not
    assert result["count"] == 200 and result["unanswered"] == 0
    assert math.isnan(result["cpu_cores"])  # no cgroup file given: not measured, not zero


@pytest.mark.parametrize(
    ("stat", "expected_ticks"),
    [
        (
            "cpu  1952979 0 107445 261603 6990 0 3513 14560 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n",
            1952979 + 107445 + 3513 + 14560,
        ),
        ("cpu  10 20 30 1000 1000 40 50 60 70 80\n", 10 + 20 + 30 + 40 + 50 + 60),  # idle, iowait, guest: no
    ],
)
def test_busy_seconds_counts_the_busy_fields_of_the_aggregate_cpu_line(
    stat: str, expected_ticks: int
) -> None:
    assert busy_seconds(stat) == pytest.approx(expected_ticks / os.sysconf("SC_CLK_TCK"))


def test_busy_seconds_refuses_a_line_that_is_not_the_aggregate() -> None:
    with pytest.raises(ValueError, match="aggregate cpu line"):
        busy_seconds("cpu0 1 2 3 4 5 6 7 8\n")


def _others(alone: float, solo: float, managed: float) -> dict[str, dict[str, Any]]:
    return {
        "server alone": {"other_cores": alone},
        "batch alone": {"other_cores": solo},
        "unmanaged": {"other_cores": managed},
        "qosd": {"other_cores": managed},
    }


def test_ratios_are_comparable_when_the_neighbours_used_about_the_same_cpu_in_every_arm() -> None:
    assert comparability([_others(1.0, 1.2, 1.1), _others(0.3, 0.2, 0.4), _others(0.9, 1.0, 1.0)]) == ""


def test_ratios_are_flagged_when_the_alone_arms_met_busier_neighbours() -> None:
    text = comparability([_others(1.8, 1.6, 0.4), _others(1.7, 1.6, 0.3), _others(1.75, 1.55, 0.9)])
    assert text.startswith("**Not comparable:**")
    assert "server alone 1.75, batch alone 1.60 cores (median)" in text
    assert "against 0.40 during the managed arms" in text
