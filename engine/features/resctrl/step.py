"""The resctrl step: class declarations and rule actions become resctrl groups, once per tick.

A node has few CLOSIDs (often 16, 8 with MBA, half that with CDP), and every control group holds
one. Whether a group fits therefore depends on all the groups asked for in the tick, so neither
a class declaration nor a ``setResctrl`` action creates a group by itself: actions only record
what they ask (``Tick.resctrl``), and this step, after the rules, puts every request of the tick
through one :func:`~engine.features.resctrl.strategy.plan_groups`. Groups that do not fit are reported
one by one, with the reason, and the others still apply.

Precedence, when a rule and a class declaration name the same group: the rule's settings win,
field by field (a rule that only sets ``mbPercent`` keeps the class's ``l3Percent``), and the
class's pods still join the group. A task belongs to exactly one group, so a class's pods go to
the group of the first rule action naming the class, else to the class's declared group.

The masks depend only on the node's capabilities, the requests and the groups already on the
node, so the group plan is cached per engine (one policy generation) on exactly those; a steady
tick reuses it and only re-lists the member pods (pods come and go between ticks).

On a node without resctrl the step adds one ``Skipped`` note per tick and no intents: the same
policy runs on nodes with and without RDT, so a missing resctrl is a fact, not an error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from engine.config.policy import Policy, QoSClass
from engine.evaluate.classify import Classifier
from engine.evaluate.context import Skipped, Tick
from engine.evaluate.factview import ACTIVE_PHASES, FactViews
from engine.features.resctrl.strategy import (
    ROOT_GROUP,
    Capabilities,
    GroupPlan,
    GroupRequest,
    PlannedGroup,
    ResctrlError,
    plan_groups,
)
from engine.model.facts import Snapshot, Workload
from engine.model.intents import Provenance, ResctrlIntent

RULE = "resctrl"  # the provenance name of class-declared groups and of the step's notes


def declared_group(cls: QoSClass) -> str:
    """The group a class's pods join by declaration: ``resctrl.group``, else the class name."""
    return (cls.resctrl.group if cls.resctrl is not None else None) or cls.name


def task_cgroups(w: Workload) -> tuple[str, ...]:
    """The cgroups whose tasks belong in the pod's group: its app containers (init containers have
    exited), or the workload's own cgroup when it has no containers (standalone cgroup mode)."""
    paths = tuple(dict.fromkeys(c.cgroup_path for c in w.containers if not c.init and c.cgroup_path))
    if paths:
        return paths
    return (w.cgroup_path,) if w.cgroup_path else ()


@dataclass(frozen=True)
class ResctrlAsk:
    """One ``setResctrl`` action of a rule that matched this tick, as recorded by the action."""

    rule: str
    class_name: str | None
    request: GroupRequest
    provenance: Provenance


@dataclass
class _Selection:
    """This tick's requests after precedence, and who asked for what."""

    requests: list[GroupRequest]
    placed: dict[str, tuple[str, str]]  # class -> (group its pods join, source that placed them)
    origin: dict[str, ResctrlAsk | QoSClass]  # request source -> the rule action or class
    extra: dict[str, list[str]]  # group -> precedence notes for its provenance
    notes: list[Skipped]  # placement conflicts, reported only where resctrl can act at all


class ResctrlStep:
    """The class declarations of one generation, and the last group plan with its inputs."""

    def __init__(self, policy: Policy, classifier: Classifier, generation: int):
        self.policy = policy
        self.classifier = classifier
        self.generation = generation
        self.declared: tuple[tuple[QoSClass, GroupRequest], ...] = tuple(
            (
                c,
                GroupRequest(
                    declared_group(c), c.resctrl.l3_percent, c.resctrl.mb_percent, source=f"class {c.name}"
                ),
            )
            for c in policy.classes
            if c.resctrl is not None
        )
        self._key: tuple[Any, ...] | None = None
        self._plan: GroupPlan | None = None

    @property
    def last_plan(self) -> GroupPlan | None:
        """The plan of the last tick that had resctrl requests on a mounted resctrl."""
        return self._plan

    def plan(
        self, caps: Capabilities, requests: tuple[GroupRequest, ...], existing: tuple[str, ...]
    ) -> GroupPlan:
        """The group plan for these inputs; the same object while they stay the same."""
        key = (caps, requests, existing)
        if self._plan is None or key != self._key:
            self._plan = plan_groups(requests, caps, existing)
            self._key = key
        return self._plan

    def before_rules(self, snap: Snapshot, views: FactViews, t: Tick) -> None:
        """Nothing: setResctrl actions only ask; the groups are planned together after the rules."""

    def after_rules(self, snap: Snapshot, views: FactViews, t: Tick) -> None:
        self.run(snap, t)

    def run(self, snap: Snapshot, t: Tick) -> None:
        """Append this tick's resctrl intents (and notes) to the tick."""
        if not t.resctrl and not self.declared:
            return
        sel = self._select(t)
        if not sel.requests:
            return
        info = snap.resctrl
        if not info.mounted:
            t.skipped.append(
                Skipped(
                    RULE,
                    f"resctrl is not mounted on this node (no {info.root}/info): "
                    f"{_asked(sel.requests)} left alone; L3/MB isolation is off here",
                )
            )
            return
        try:
            caps = Capabilities.from_info(info)
        except ResctrlError as err:
            t.skipped.append(
                Skipped(RULE, f"resctrl info/ is unusable ({err}): {_asked(sel.requests)} left alone")
            )
            return
        if caps.num_closids <= 0:
            t.skipped.append(
                Skipped(
                    RULE,
                    "resctrl is mounted but info/ reports no CLOSIDs (num_closids 0): "
                    f"{_asked(sel.requests)} left alone",
                )
            )
            return
        t.skipped.extend(sel.notes)
        existing = tuple(sorted(g for g in info.groups if g not in ("", ROOT_GROUP)))
        gplan = self.plan(caps, tuple(sel.requests), existing)
        for r in gplan.rejected:
            who = sel.origin.get(r.sources[0])
            rule = who.rule if isinstance(who, ResctrlAsk) else RULE
            t.skipped.append(
                Skipped(rule, f"resctrl group {r.group} dropped ({', '.join(r.sources)}): {r.reason}")
            )
        if not gplan.groups:
            return
        members = self._members(snap, sel.placed)
        asked: dict[str, GroupRequest] = {}
        for req in sel.requests:
            asked.setdefault(req.group, req)
        for pg in gplan.groups:
            pods, cgroups = members.get(pg.group, ([], []))
            inputs = _inputs(pg, asked[pg.group], caps, sel.extra.get(pg.group, ()))
            prov = self._provenance(sel.origin[pg.sources[0]], inputs)
            t.intents.append(ResctrlIntent(pg.group, pg.schemata, tuple(pods), tuple(cgroups), prov))

    # ---------------------------------------------------------------- precedence

    def _select(self, t: Tick) -> _Selection:
        sel = _Selection([], {}, {}, {}, [])
        first_declared: dict[str, tuple[QoSClass, GroupRequest]] = {}
        for cls, req in self.declared:
            first_declared.setdefault(req.group, (cls, req))
        rule_groups = {a.request.group for a in t.resctrl}
        for ask in t.resctrl:
            req = ask.request
            decl = first_declared.get(req.group)
            if decl is not None:
                inherited = []
                if req.l3_percent is None and decl[1].l3_percent is not None:
                    req = replace(req, l3_percent=decl[1].l3_percent)
                    inherited.append("l3Percent")
                if req.mb_percent is None and decl[1].mb_percent is not None:
                    req = replace(req, mb_percent=decl[1].mb_percent)
                    inherited.append("mbPercent")
                if inherited:
                    sel.extra.setdefault(req.group, []).append(
                        f"{ask.rule} keeps {' and '.join(inherited)} of class {decl[0].name}"
                    )
            sel.requests.append(req)
            sel.origin.setdefault(req.source, ask)
            if ask.class_name:
                have = sel.placed.get(ask.class_name)
                if have is None:
                    sel.placed[ask.class_name] = (req.group, req.source)
                elif have[0] != req.group:
                    sel.notes.append(
                        Skipped(
                            ask.rule,
                            f"class {ask.class_name}'s pods stay in resctrl group {have[0]} ({have[1]} "
                            f"placed them first this tick; a task belongs to one group): group "
                            f"{req.group} gets its schemata but not these pods",
                        )
                    )
        for cls, req in self.declared:
            have = sel.placed.get(cls.name)
            if req.group in rule_groups:
                sel.placed.setdefault(cls.name, (req.group, req.source))
                sel.extra.setdefault(req.group, []).append(
                    f"overrides class {cls.name}'s declaration "
                    f"(l3Percent {_show(req.l3_percent)}, mbPercent {_show(req.mb_percent)})"
                )
                continue
            if have is not None and have[0] != req.group:
                # A rule moved the class elsewhere: its declared group would hold none of its pods,
                # and a CLOSID is too scarce to spend on an empty group.
                sel.extra.setdefault(have[0], []).append(
                    f"class {cls.name}'s pods moved here from its declared group {req.group}"
                )
                continue
            sel.placed.setdefault(cls.name, (req.group, req.source))
            sel.requests.append(req)
            sel.origin.setdefault(req.source, cls)
        return sel

    # ---------------------------------------------------------------- members and provenance

    def _members(
        self, snap: Snapshot, placed: Mapping[str, tuple[str, str]]
    ) -> dict[str, tuple[list[str], list[str]]]:
        """group -> (pod keys, task cgroups) of the active pods of the classes placed in it."""
        out: dict[str, tuple[list[str], list[str]]] = {}
        if not placed:
            return out
        classify = self.classifier.classify
        for w in snap.workloads:
            if w.phase not in ACTIVE_PHASES:
                continue
            name = classify(w).class_name
            where = placed.get(name) if name else None
            if where is None:
                continue
            pods, cgroups = out.setdefault(where[0], ([], []))
            pods.append(w.key)
            cgroups.extend(task_cgroups(w))
        return out

    def _provenance(self, who: ResctrlAsk | QoSClass, inputs: Mapping[str, Any]) -> Provenance:
        if isinstance(who, ResctrlAsk):
            merged = {**who.provenance.inputs, **inputs}
            return replace(who.provenance, inputs=MappingProxyType(merged))
        return Provenance(
            rule=RULE,
            policy_hash=self.policy.hash,
            generation=self.generation,
            source=str(who.origin),
            mode=self.policy.mode,
            item=None,
            conditions=(),
            inputs=MappingProxyType(dict(inputs)),
        )


def _inputs(pg: PlannedGroup, req: GroupRequest, caps: Capabilities, extra: Sequence[str]) -> dict[str, Any]:
    """The arithmetic of one group, for ``qosd explain`` and rule tests."""
    out: dict[str, Any] = {"group": pg.group, "sources": list(pg.sources)}
    if req.l3_percent is not None:
        out["l3Percent"] = list(req.l3_percent)
    if req.mb_percent is not None:
        out["mbPercent"] = req.mb_percent
    if pg.l3 is not None:
        out.update(cbmMask=caps.cbm_mask, l3Ways=pg.l3.ways, l3Mask=pg.l3.mask)
    if pg.mb is not None:
        out.update(mb=pg.mb.value, mbUnit=pg.mb.unit)
    notes = [*pg.notes, *extra]
    if notes:
        out["notes"] = notes
    return out


def _asked(requests: list[GroupRequest]) -> str:
    """``group(s) reclaim (class reclaimed_cores)``: stable across ticks, so notes deduplicate."""
    by_group: dict[str, list[str]] = {}
    for r in requests:
        by_group.setdefault(r.group, []).append(r.source or r.group)
    shown = ", ".join(f"{g} ({', '.join(s)})" for g, s in by_group.items())
    return f"group{'s' if len(by_group) > 1 else ''} {shown}"


def _show(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, tuple):
        return "[" + ", ".join(f"{v:g}" for v in value) + "]"
    return f"{value:g}"
