"""What a run records: per-tick numbers, the timeline and the summary."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engine.evaluate.engine import Engine
from engine.explain.provenance import observation_text
from engine.model.operations import EvictPod, SetNodeTaint, WriteCgroup
from engine.model.units import cores, human_bytes
from engine.resources import API_VERSION
from engine.simulate.changes import RuleChanges, pod_name
from engine.simulate.decision import decision
from engine.simulate.node import SimulatedNode
from engine.simulate.result import Event, Options, TickNumbers
from engine.simulate.summary import summarize
from engine.sources.trace import (
    Sample,
    Trace,
    clock_text,
    duration_text,
)
from engine.tick import TickResult


class Recorder:
    """Per-tick numbers, the timeline and the summary: everything a run reports."""

    def __init__(self, trace: Trace, engine: Engine, opts: Options):
        self.trace = trace
        self.engine = engine
        self.opts = opts
        base = trace.base
        self.capacity_cpu = float(base.node.capacity.get("cpu") or len(base.topology.cpus) or 1)
        self.capacity_memory = float(base.node.capacity.get("memory") or base.node.memory or 1)
        self.numbers: list[TickNumbers] = []
        self.events: list[Event] = []
        self.ticks: list[dict[str, Any]] = []
        self.publish_only = {
            r.name for r in engine.policy.rules if r.actions and all(a.kind == "publish" for a in r.actions)
        }
        self.suppress_rules = {
            r.name for r in engine.policy.rules if any(a.kind == "suppress" for a in r.actions)
        }
        self.suppress_skipped = 0
        self.changes = RuleChanges(self._event, self._amend, opts.performed_gap_seconds, self.publish_only)
        self.readmitted_seen = 0
        self.skipped_first: dict[tuple[str, str], tuple[int, int]] = {}  # -> (event index, count)
        self.issues_seen: set[str] = set()
        self.evictions: list[dict[str, Any]] = []
        self.held_evictions = 0
        self.cgroup_writes = 0
        self.suppress_writes = 0
        self.decisions: list[tuple[Any, ...]] = []
        self.logged_publish: dict[str, float | None] = {}
        self.in_risk: dict[str, float | None] = {"withoutReclaim": None, "withReclaim": None}
        self.calm_since: dict[str, float | None] = {"withoutReclaim": None, "withReclaim": None}
        self.risk_episodes: dict[str, list[tuple[float, float]]] = {"withoutReclaim": [], "withReclaim": []}
        self.admitted = 0
        self.finished = 0
        self.warned_templates = False

    def _event(self, now: float, offset: float, kind: str, message: str, rule: str | None = None) -> int:
        self.events.append(Event(now, offset, kind, message, rule))
        return len(self.events) - 1

    def _amend(self, index: int, text: str) -> None:
        e = self.events[index]
        self.events[index] = Event(e.time, e.offset, e.kind, e.message + text, e.rule)

    def record(
        self,
        s: Sample,
        now: float,
        duration: float,
        split: Mapping[str, float],
        result: TickResult,
        node: SimulatedNode,
        admitted: int,
        finished: int,
        waiting: int,
    ) -> None:
        """Everything one tick contributes to the report."""
        if self.opts.keep_ticks:
            self.ticks.append(
                {
                    "apiVersion": API_VERSION,
                    "kind": "Evaluation",
                    **result.to_dict(),
                    "state": result.state.to_dict(),
                }
            )
        self.decisions.append(decision(result))
        self._check_templates(now, s.offset, node)
        evicted = self._rules(now, s.offset, result, node)
        self._readmissions(now, s.offset, node)
        self._skipped_and_issues(now, s.offset, result)
        self._taints(now, s.offset, result, node)
        published = self._publishes(now, s.offset, node)
        self.admitted += admitted
        self.finished += finished
        cap_cpu, cap_mem = self.capacity_cpu, self.capacity_memory
        without_cpu = 100.0 * min(split["system_cpu"] + split["online_cpu"], cap_cpu) / cap_cpu
        without_mem = 100.0 * min(split["system_memory"] + split["online_memory"], cap_mem) / cap_mem
        with_cpu = 100.0 * split["node_cpu"] / cap_cpu
        with_mem = 100.0 * split["node_memory"] / cap_mem
        risk_without = self._risk(without_cpu, without_mem)
        risk_with = self._risk(with_cpu, with_mem)
        self._risk_episode("withoutReclaim", risk_without, now, s.offset, without_cpu, without_mem)
        self._risk_episode("withReclaim", risk_with, now, s.offset, with_cpu, with_mem)
        running = list(node.running.values()) if s.snapshot is None else []
        self.numbers.append(
            TickNumbers(
                time=now,
                offset=s.offset,
                duration=duration,
                system_cpu=split["system_cpu"],
                system_memory=split["system_memory"],
                online_cpu=split["online_cpu"],
                online_memory=split["online_memory"],
                batch_cpu=split["batch_cpu"],
                batch_memory=split["batch_memory"],
                cpu_without=without_cpu,
                cpu_with=with_cpu,
                memory_without=without_mem,
                memory_with=with_mem,
                published=published,
                batch_requested_cpu=sum(p.template.request_cpu for p in running),
                batch_requested_memory=sum(p.template.request_memory for p in running),
                batch_running=len(running),
                batch_waiting=waiting,
                admitted=admitted,
                finished=finished,
                evicted=[{"uid": op.uid, "pod": pod_name(op), "rule": op.rule} for op in evicted],
                fired=list(result.evaluation.fired),
                risk_without=risk_without,
                risk_with=risk_with,
                batch_cpu_allowed=min(split.get("batch_cpu_allowed", cap_cpu), cap_cpu),
            )
        )

    def _check_templates(self, now: float, off: float, node: SimulatedNode) -> None:
        """Once: a batch template this policy does not classify as reclaimed is a trace mistake."""
        if self.warned_templates or not node.running:
            return
        self.warned_templates = True
        for t in self.trace.batch:
            pod = next((p for p in node.running.values() if p.template is t), None)
            if pod is not None and not node.reclaimed(pod.workload):
                cls = self.engine.classifier.classify(pod.workload).class_name
                self._event(
                    now,
                    off,
                    "warning",
                    f"batch template {t.name} is classified {cls or 'unclassified'}, not a reclaimed "
                    "class, by this policy: its pods count as online and as high-priority usage",
                )

    def _rules(self, now: float, off: float, result: TickResult, node: SimulatedNode) -> list[EvictPod]:
        """The rules' lines (engine.simulate.changes: edges and performed runs) and the evictions."""
        intents = result.evaluation.intents

        def why(rule: str) -> str:
            return _why([i for i in intents if i.provenance.rule == rule])

        evicted = self.changes.record(now, off, result, why)
        for op in evicted:
            pod = node.running.get(op.uid)
            self.evictions.append(
                {
                    "time": now,
                    "offset": off,
                    "clock": clock_text(off),
                    "uid": op.uid,
                    "pod": pod_name(op),
                    "rule": op.rule,
                    "template": pod.template.name if pod is not None else None,
                }
            )
        self.held_evictions += sum(1 for h in result.plan.held if h.intent.kind == "evict")
        writes = [op for op in result.plan.operations if isinstance(op, WriteCgroup)]
        self.cgroup_writes += len(writes)
        self.suppress_writes += sum(1 for op in writes if op.rule in self.suppress_rules)
        return evicted

    def _readmissions(self, now: float, off: float, node: SimulatedNode) -> None:
        """A batch pod started from the requeue re-admits work an eviction removed: one turn of an
        admit-evict-admit loop, said on the timeline where it happens."""
        start = self.trace.start
        for template, evicted_at, _ in node.readmissions[self.readmitted_seen :]:
            self._event(
                now,
                off,
                "admit",
                f"{template}: a pod admitted again {duration_text(max(off - (evicted_at - start), 0))} after "
                f"one was evicted at {clock_text(evicted_at - start)} (admit, evict, admit again)",
            )
        self.readmitted_seen = len(node.readmissions)

    def _skipped_and_issues(self, now: float, off: float, result: TickResult) -> None:
        """Skipped rules and workload issues once each (the count is added at the end); the ticks a
        suppress rule matched but did not act are counted for the summary."""
        ev = result.evaluation
        for sk in ev.skipped:
            if sk.rule in self.suppress_rules:
                self.suppress_skipped += 1
            key = (sk.rule, sk.reason.split(":", 1)[0])
            seen = self.skipped_first.get(key)
            if seen is None:
                self._event(now, off, "skipped", f"{sk.rule}: {sk.reason}", sk.rule)
                self.skipped_first[key] = (len(self.events) - 1, 1)
            else:
                self.skipped_first[key] = (seen[0], seen[1] + 1)
        for issue in ev.workload_issues:
            if issue.uid not in self.issues_seen:
                self.issues_seen.add(issue.uid)
                what = "; ".join(issue.errors)
                self._event(now, off, "issue", f"pod {issue.name} ({issue.class_name}): {what}")

    def _taints(self, now: float, off: float, result: TickResult, node: SimulatedNode) -> None:
        """Taint rules plan SetNodeTaint on every tick they hold: report the edges only."""
        taints = {f"{op.key}:{op.effect}" for op in result.plan.operations if isinstance(op, SetNodeTaint)}
        for taint in sorted(taints - node.taints):
            self._event(now, off, "taint", f"taint {taint} set")
        for taint in sorted(node.taints - taints):
            self._event(now, off, "taint", f"taint {taint} no longer wanted")
        node.taints = taints

    def _publishes(self, now: float, off: float, node: SimulatedNode) -> dict[str, float | None]:
        """What the node advertises now; a line when it moved by publish_delta_percent of capacity
        since the last line (every value is in ``series``)."""
        published = {kind: node.published.base_units(kind) for kind in ("cpu", "memory")}
        changes = []
        for kind, name in sorted(node.published.names().items()):
            value = published[kind]
            last = self.logged_publish.get(kind)
            cap = self.capacity_cpu if kind == "cpu" else self.capacity_memory
            if kind not in self.logged_publish:
                changes.append(f"{name} {_amount(kind, value)}")
            elif (value is None) != (last is None) or (
                value is not None
                and last is not None
                and abs(value - last) >= cap * self.opts.publish_delta_percent / 100.0
            ):
                changes.append(f"{name} {_amount(kind, last)} -> {_amount(kind, value)}")
            else:
                continue
            self.logged_publish[kind] = value
        if changes:
            self._event(now, off, "publish", "published " + "; ".join(changes))
        return published

    def _risk(self, cpu: float, mem: float) -> list[str]:
        out = []
        if cpu > self.opts.risk_cpu_percent:
            out.append("cpu")
        if mem > self.opts.risk_memory_percent:
            out.append("memory")
        return out

    def _risk_episode(
        self, label: str, risk: list[str], now: float, off: float, cpu: float, mem: float
    ) -> None:
        """Episode start/end lines. An episode ends only after ``risk_gap_seconds`` without risk, so a
        series hovering at the threshold reads as one episode (the minutes are counted per tick)."""
        began = self.in_risk[label]
        words = "without reclaim" if label == "withoutReclaim" else "with reclaim"
        if risk:
            self.calm_since[label] = None
            if began is None:
                self.in_risk[label] = off
                over = []
                if "cpu" in risk:
                    over.append(f"cpu {cpu:.1f}% > {self.opts.risk_cpu_percent:g}%")
                if "memory" in risk:
                    over.append(f"memory {mem:.1f}% > {self.opts.risk_memory_percent:g}%")
                self._event(now, off, "risk", f"SLO risk {words} begins: {', '.join(over)}")
            return
        if began is None:
            return
        calm = self.calm_since[label]
        if calm is None:
            self.calm_since[label] = calm = off
        if off - calm >= self.opts.risk_gap_seconds:
            self._close_episode(label, calm)

    def _close_episode(self, label: str, ended: float, at_end: bool = False) -> None:
        began = self.in_risk[label]
        if began is None:
            return
        words = "without reclaim" if label == "withoutReclaim" else "with reclaim"
        verb = "is still on when the trace ends" if at_end else "ends"
        at_risk = sum(
            n.duration
            for n in self.numbers
            if began <= n.offset < ended and (n.risk_without if label == "withoutReclaim" else n.risk_with)
        )
        self.in_risk[label] = None
        self.calm_since[label] = None
        self.risk_episodes[label].append((began, ended))
        self.events.append(
            Event(
                self.trace.start + ended,
                ended,
                "risk",
                f"SLO risk {words} {verb}: {_minutes(at_risk)} at risk over {_minutes(ended - began)}",
            )
        )

    def finish_events(self) -> list[Event]:
        self.changes.finish()
        for index, count in self.skipped_first.values():
            if count > 1:
                e = self.events[index]
                self.events[index] = Event(
                    e.time, e.offset, e.kind, f"{e.message} (on {count} ticks; shown once)", e.rule
                )
        for label in list(self.in_risk):
            if self.in_risk[label] is not None:
                calm = self.calm_since[label]
                if calm is None:
                    self._close_episode(label, self.trace.duration, at_end=True)
                else:
                    self._close_episode(label, calm)
        self.events.sort(key=lambda e: e.offset)  # stable: same-tick events keep their order
        return self.events

    def summary(
        self, runtime: float, readmissions: Sequence[tuple[str, float, float]] = ()
    ) -> dict[str, Any]:
        return summarize(self, runtime, readmissions)


def _why(intents: Sequence[Any]) -> str:
    """The comparisons that held, worded as ``qosd explain`` words them (``usage_percent = 73 >= 70``)."""
    seen: list[str] = []
    for i in intents:
        for o in i.provenance.conditions:
            if o.met:
                text = observation_text(o.to_dict())
                if text not in seen:
                    seen.append(text)
    return ", ".join(seen)


def _amount(kind: str, value: float | None) -> str:
    if value is None:
        return "withdrawn"
    return cores(value) if kind == "cpu" else human_bytes(value)


def _minutes(seconds: float) -> str:
    m = seconds / 60.0
    return f"{m:.0f} min" if m >= 1 else f"{seconds:.0f} s"
