"""The daemon's Prometheus metrics (served on ``/metrics`` by engine.daemon.endpoints)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

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
