"""The daemon's Prometheus metrics (served on ``/metrics`` by engine.daemon.endpoints); every one is
listed in docs/monitoring.md.

The ``_created`` series prometheus-client adds to each counter and histogram are turned off for the
whole process: they double the series a scrape carries, Prometheus ignores them unless asked, and
the process start time is already ``process_start_time_seconds`` where a process collector runs."""

from __future__ import annotations

import platform

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

from engine import __version__
from engine.daemon.tick_metrics import TickCollector

disable_created_metrics()  # type: ignore[no-untyped-call]  # (untyped in prometheus-client)

TICK_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Metrics:
    """The daemon's Prometheus metrics, in their own registry (tests run several daemons in one process)."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.tick_seconds = Histogram(
            "qosd_tick_duration_seconds",
            "Time of one tick: collect, evaluate, plan and apply.",
            buckets=TICK_BUCKETS,
            registry=r,
        )
        self.evaluation_seconds = Histogram(
            "qosd_evaluation_duration_seconds",
            "Time to evaluate the policy and plan operations for one snapshot.",
            buckets=TICK_BUCKETS,
            registry=r,
        )
        self.ticks = Counter("qosd_ticks_total", "Ticks run, by result.", ["result"], registry=r)
        self.rule_matches = Counter(
            "qosd_rule_matches_total", "Rules that acted in a tick.", ["rule", "mode"], registry=r
        )
        self.actions = Counter(
            "qosd_actions_total",
            "Operations executed, by action and result.",
            ["action", "result"],
            registry=r,
        )
        self.held = Counter(
            "qosd_held_total", "Intents the planner held back, by rule.", ["rule"], registry=r
        )
        self.evictions = Counter(
            "qosd_evictions_total",
            "Evictions carried out (the API accepted it; standalone: the processes are gone), by rule.",
            ["rule"],
            registry=r,
        )
        self.reloads = Counter(
            "qosd_config_reloads_total",
            "Policy reloads, by source and result.",
            ["source", "result"],
            registry=r,
        )
        self.reload_success = Gauge(
            "qosd_config_last_reload_success_timestamp_seconds",
            "When a policy generation was last loaded successfully.",
            registry=r,
        )
        self.config_info = Gauge(
            "qosd_config_info",
            "The policy generation in effect (value 1).",
            ["generation", "hash"],
            registry=r,
        )
        self.reload_failure = Gauge(
            "qosd_config_last_reload_failure_timestamp_seconds",
            "When a new policy generation was last refused (the last good one keeps running); 0: never.",
            registry=r,
        )
        self.generation = Gauge(
            "qosd_policy_generation",
            "The number of the policy generation in effect (0: none loaded yet).",
            registry=r,
        )
        self.build_info = Gauge(
            "qosd_build_info",
            "qosd's version, the Python running it, the rule evaluator backend and where workloads "
            "come from (value 1).",
            ["version", "python", "backend", "mode"],
            registry=r,
        )
        self.tick = TickCollector()
        r.register(self.tick)
        self.last_tick = Gauge(
            "qosd_last_tick_timestamp_seconds", "When the last tick completed.", registry=r
        )
        self.audit_failures = Counter(
            "qosd_audit_write_failures_total",
            "Audit log records lost because the write failed (full disk, read-only file system...).",
            registry=r,
        )
        self.state_failures = Counter(
            "qosd_state_write_failures_total",
            "State file saves that failed (full disk, read-only file system...); evictions wait meanwhile.",
            registry=r,
        )

    def built(self, backend: str, mode: str) -> None:
        """Set ``qosd_build_info`` (once, at start: none of its labels changes while the process runs)."""
        self.build_info.labels(__version__, platform.python_version(), backend, mode).set(1)
