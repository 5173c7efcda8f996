"""Intents -> the minimal, ordered operations that make them true, behind guards.

Guards stand between a decision and its side effect: audit-mode rules and dry runs produce no
operations, a daemon in audit mode (``qosd run --mode audit``) keeps only its Events (and says which
pods it would have evicted), protected classes are never evicted (whatever a rule says), and at most
``eviction_burst`` pods are evicted per tick across all rules (Katalyst's EvictionBurst, 3). A cgroup
value its file does not accept (cpu.shares 0, cpu.weight 10001: computed values, since validation
refuses literal ones) is refused, never clamped to the nearest bound, and the other writes go ahead.
Nothing is written into a cgroup the collector found absent, or under one (a container not started
yet, or gone), as Katalyst checks that a container's cgroup exists before it writes.
Everything held back is reported with its reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from operator import is_
from types import MappingProxyType
from typing import Any

from engine.cgroups.files import SHARE_FILES, value_problem
from engine.cgroups.weight import DEFAULT_WEIGHT_FORMULA
from engine.config.policy import Policy
from engine.features.resctrl.strategy import changed_lines
from engine.model.facts import Workload
from engine.model.intents import CgroupIntent, EvictIntent, Intent, NodeIntent, ResctrlIntent
from engine.model.operations import (
    DEFAULT_GRACE_SECONDS,
    AssignTasks,
    CreateResctrlGroup,
    EmitEvent,
    EvictPod,
    Operation,
    PublishNodeResource,
    SetNodeCondition,
    SetNodeTaint,
    WriteCgroup,
    WriteSchemata,
)
from engine.plan.cgroups import Desired, cfs_refusals, order_writes


@dataclass(frozen=True)
class Guards:
    dry_run: bool = False
    eviction_burst: int = 3
    # The daemon's audit mode (`qosd run --mode audit`, the kustomize base's first install): the
    # plan is made as in enforce mode, then every operation that changes the node or a workload is
    # held; Events go out, and each eviction enforce mode would make becomes a WouldEvict Event.
    audit: bool = False


AUDIT_HELD = "audit mode (qosd run --mode audit): decided, not executed"
WOULD_EVICT = "WouldEvict"  # the reason of the Event an audit-mode eviction becomes


@dataclass(frozen=True)
class Held:
    """An intent that produced no operation, and why."""

    intent: Intent
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.intent.target,
            "kind": self.intent.kind,
            "rule": self.intent.provenance.rule,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Plan:
    operations: tuple[Operation, ...]
    held: tuple[Held, ...]
    evicted: tuple[EvictIntent, ...] = ()  # the evict intents that became operations

    def to_dict(self) -> dict[str, Any]:
        return {
            "operations": [o.to_dict() for o in self.operations],
            "held": [h.to_dict() for h in self.held],
        }


# The last plan and what it was made of. plan() is a pure function, and a steady daemon asks the
# same question every tick: the engine hands back the same intent objects and the collector the same
# observation mapping while nothing changed, so the answer is the last one (about a tenth of a steady
# tick at 500 workloads otherwise, every intent diffed again to find no change). Only read-only
# observations are recognized by identity: a dict a caller fills in between two calls is not the
# same question twice, and the collector's MappingProxyType is never changed once handed out.
_last: tuple[Any, ...] | None = None


def _frozen(observed: Mapping[str, Any] | None) -> bool:
    return observed is None or type(observed) is MappingProxyType


def _same_objects(a: tuple[Intent, ...], b: tuple[Intent, ...]) -> bool:
    """The very same intent objects (not merely equal ones: what a plan holds back refers to the
    caller's own intents), compared at C speed."""
    return len(a) == len(b) and all(map(is_, a, b))


def plan(
    intents: tuple[Intent, ...],
    policy: Policy,
    guards: Guards,
    observed_cgroups: Mapping[str, Mapping[str, str]] | None = None,
    observed_resctrl: Mapping[str, str] | None = None,
    workload: Callable[[str], Workload | None] | None = None,
    absent_cgroups: frozenset[str] = frozenset(),
) -> Plan:
    """The operations that make ``intents`` true against the observed state, behind ``guards``.
    ``workload(uid)`` gives an eviction asking for the pod's own grace period its value;
    ``absent_cgroups`` are the cgroup paths the collector found missing."""
    global _last
    last = _last
    if (
        last is not None
        and _frozen(observed_cgroups)
        and _frozen(observed_resctrl)
        and last[1] is policy
        and last[3] is observed_cgroups
        and last[4] is observed_resctrl
        and last[2] == guards
        and _same_objects(last[0], intents)
        and (not last[6] or last[5] is workload)  # pods are looked up only for evictions
        and (last[8] is absent_cgroups or last[8] == absent_cgroups)
    ):
        return last[7]  # type: ignore[no-any-return]
    result = _plan(intents, policy, guards, observed_cgroups, observed_resctrl, workload, absent_cgroups)
    evicts = any(isinstance(i, EvictIntent) for i in intents)
    _last = (
        intents,
        policy,
        guards,
        observed_cgroups,
        observed_resctrl,
        workload,
        evicts,
        result,
        absent_cgroups,
    )
    return result


def _plan(
    intents: tuple[Intent, ...],
    policy: Policy,
    guards: Guards,
    observed_cgroups: Mapping[str, Mapping[str, str]] | None,
    observed_resctrl: Mapping[str, str] | None,
    workload: Callable[[str], Workload | None] | None,
    absent_cgroups: frozenset[str] = frozenset(),
) -> Plan:
    ops: list[Operation] = []
    claimed: dict[tuple[str, str], str] = {}  # cgroup file -> the rule whose intent sets it this tick
    changes: list[Desired] = []  # only files whose observed value differs (a steady state has none)
    observed = observed_cgroups or {}
    held: list[Held] = []
    evicts: list[EvictIntent] = []
    seen: set[tuple[str, str]] = set()
    resctrl: list[ResctrlIntent] = []
    acting: list[Intent] = []  # intents that produced an operation (audit mode holds them)
    for intent in intents:
        if intent.provenance.audit:
            held.append(Held(intent, "audit mode: reported, not executed"))
            continue
        if guards.dry_run:
            held.append(Held(intent, "dry run: reported, not executed"))
            continue
        if isinstance(intent, CgroupIntent):
            slot = (intent.path, intent.file)
            owner = claimed.get(slot)
            if owner is not None:
                held.append(Held(intent, f"rule {owner} already sets this file this tick"))
                continue
            gone = _absent(intent.path, absent_cgroups) if absent_cgroups else None
            if gone is not None:
                held.append(
                    Held(
                        intent,
                        f"cgroup {gone} does not exist (the collector found no directory): not written",
                    )
                )
                continue
            current = observed.get(intent.path)
            if current is None or current.get(intent.file) != intent.value:
                # Checked only when it would be written, so a steady state checks nothing.
                bad = value_problem(intent.file, intent.value.strip())
                if bad:
                    held.append(Held(intent, f"refused, not written: {bad}"))
                    continue
                changes.append(Desired(intent.path, intent.file, intent.value))
                acting.append(intent)
            claimed[slot] = intent.provenance.rule
            continue
        if isinstance(intent, EvictIntent):
            cls = policy.class_index.get(intent.class_name) if intent.class_name else None
            if cls is not None and cls.protected:
                held.append(Held(intent, f"class {cls.name} is protected"))
            elif ("evict", intent.uid) in seen:
                held.append(Held(intent, "already evicted this tick"))
            elif len(evicts) >= guards.eviction_burst:
                held.append(Held(intent, f"eviction burst of {guards.eviction_burst} per tick reached"))
            else:
                seen.add(("evict", intent.uid))
                evicts.append(intent)
                acting.append(intent)
                reason = _evict_reason(intent)
                ops.append(
                    EvictPod(
                        intent.uid,
                        intent.namespace,
                        intent.name,
                        deletion_grace(
                            intent.grace_period_seconds, workload(intent.uid) if workload else None
                        ),
                        reason,
                        intent.provenance.rule,
                        intent.killer,
                    )
                )
            continue
        if isinstance(intent, ResctrlIntent):
            resctrl.append(intent)
            continue
        op = _node_op(intent)
        key = (
            op.kind,
            getattr(op, "key", "")
            or getattr(op, "type", "")
            or getattr(op, "name", "")
            or getattr(op, "reason", ""),
        )
        if key in seen:
            held.append(Held(intent, "same operation already planned this tick"))
            continue
        seen.add(key)
        ops.append(op)
        if not isinstance(op, EmitEvent):
            acting.append(intent)
    ops.extend(_resctrl_ops(resctrl, observed_resctrl, held, acting))
    refused = cfs_refusals(changes, observed) if changes else {}
    if refused:
        changes = [d for d in changes if (d.path, d.file) not in refused]
        for intent in [i for i in acting if isinstance(i, CgroupIntent) and (i.path, i.file) in refused]:
            acting.remove(intent)
            held.append(Held(intent, f"refused, not written: {refused[intent.path, intent.file]}"))
    formula = policy.weight_formula or DEFAULT_WEIGHT_FORMULA
    for write in order_writes(changes, observed):
        rule = claimed[(write.path, write.file)]
        shares = write.file in SHARE_FILES
        ops.append(WriteCgroup(write.path, write.file, write.value, rule, formula if shares else None))
    if guards.audit:
        return _audited(ops, held, acting)
    return Plan(tuple(ops), tuple(held), tuple(evicts))


def _audited(ops: list[Operation], held: list[Held], acting: list[Intent]) -> Plan:
    """The audit-mode plan: the Events of the enforce-mode plan, a WouldEvict Event for each eviction
    it holds, and every other intent that would have changed something held with AUDIT_HELD. The
    message leaves out the observed values, so the same decision tick after tick is the same Event
    (the daemon sends it at most every few minutes: engine.daemon.wiring.audit_events)."""
    events: list[Operation] = [op for op in ops if isinstance(op, EmitEvent)]
    events.extend(
        EmitEvent(
            WOULD_EVICT,
            f"audit mode: qosd would evict pod {op.namespace}/{op.name} (rule {op.rule}); "
            "nothing was evicted",
            "Normal",
            op.rule,
        )
        for op in ops
        if isinstance(op, EvictPod)
    )
    return Plan(tuple(events), (*held, *(Held(i, AUDIT_HELD) for i in acting)), ())


def _absent(path: str, absent: frozenset[str]) -> str | None:
    """The absent cgroup ``path`` is, or lies under; None when neither."""
    while path:
        if path in absent:
            return path
        path = path.rpartition("/")[0]
    return None


def _resctrl_ops(
    intents: list[ResctrlIntent], observed: Mapping[str, str] | None, held: list[Held], acting: list[Intent]
) -> list[Operation]:
    """Groups first (created if missing), then only the schemata lines that differ, then tasks.

    ``observed`` is None when resctrl is not mounted: then nothing can be written, and the intents
    are held with one reason each rather than failing in the adapter every tick."""
    out: list[Operation] = []
    owner: dict[str, str] = {}
    for intent in intents:
        rule = intent.provenance.rule
        if observed is None:
            held.append(Held(intent, "resctrl is not mounted on this node"))
            continue
        if intent.group in owner:
            held.append(
                Held(intent, f"rule {owner[intent.group]} already sets group {intent.group} this tick")
            )
            continue
        owner[intent.group] = rule
        current = observed.get(intent.group)
        before = len(out)
        if current is None:
            out.append(CreateResctrlGroup(intent.group, rule))
        for line in changed_lines(current or "", intent.schemata):
            out.append(WriteSchemata(intent.group, line, rule))
        if intent.cgroups:
            out.append(AssignTasks(intent.group, intent.cgroups, rule))
        if len(out) > before:
            acting.append(intent)
    return out


def deletion_grace(requested: int | None, workload: Workload | None) -> int | None:
    """The grace period an eviction is carried out with. A rule's ``gracePeriodSeconds: -1`` means
    the pod's own: DeleteOptions accept only non-negative values, so it is resolved here to the
    pod's ``terminationGracePeriodSeconds`` (DEFAULT_GRACE_SECONDS when the pod has none), as
    Katalyst's pod killer does. None (the rule names none) stays None: the API then applies the
    pod's own itself, and a standalone eviction uses the default."""
    if requested is None or requested >= 0:
        return requested
    own = workload.termination_grace_seconds if workload is not None else None
    return own if own is not None and own >= 0 else DEFAULT_GRACE_SECONDS


def _evict_reason(intent: EvictIntent) -> str:
    p = intent.provenance
    met = [o for o in p.conditions if o.met]
    what = ", ".join(
        f"{o.fact} {o.observed:g} {o.op} {o.threshold:g}" for o in met if _numeric(o.observed, o.threshold)
    )
    return f"qosd rule {p.rule}" + (f": {what}" if what else "")


def _numeric(*values: Any) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def kubernetes_units(resource: str, value: float) -> int:
    """A reclaimed resource as the Node is told it: both anchors publish CPU in milli-cores as an
    integer, memory in bytes. Rounded, not truncated: 1.001 cores is 1000.9999999999999 milli-cores
    in binary floating point."""
    return round(value * 1000) if resource == "cpu" else round(value)


def _quantity(value: float, cores: bool) -> str:
    return str(kubernetes_units("cpu" if cores else "memory", value))


def _node_op(intent: NodeIntent) -> Operation:
    p = dict(intent.params)
    rule = intent.provenance.rule
    if intent.kind == "taint":
        return SetNodeTaint(str(p["key"]), str(p.get("value", "")), str(p["effect"]), rule)
    if intent.kind == "publish":
        value = p.get("value")
        cores = p.get("unit") == "cores"
        quantity = None if value is None else _quantity(value, cores)
        zones = p.get("zones")
        zoned = (
            None
            if zones is None
            else tuple((str(z), _quantity(v, cores)) for z, v in zones.items() if v is not None)
        )
        return PublishNodeResource(str(p["resource"]), quantity, rule, zoned)
    if intent.kind == "condition":
        return SetNodeCondition(
            str(p["type"]),
            "True",
            str(p.get("reason", "QosdRule")),
            str(p.get("message", f"qosd rule {rule}")),
            rule,
        )
    return EmitEvent(
        str(p.get("reason", "QosdRule")),
        str(p.get("message", f"qosd rule {rule} fired")),
        str(p.get("severity", "Warning")),
        rule,
    )
