"""setResctrl: a class's L3 ways and memory bandwidth (Koordinator ResctrlReconcile, Katalyst mb).

The action only records what it asks (``Tick.resctrl``). Groups share the node's few CLOSIDs, so
whether a group fits depends on every group asked for in the tick: the resctrl step plans them
together after the rules (``engine.features.resctrl.step``), merges them with the classes'
``resctrl`` declarations (the rule wins for its group) and emits the intents.

The group defaults to the class's declared ``resctrl.group``, else the class name, so a rule that
names only the class retunes the group the class already lives in. The action acts on the class
as a whole, whatever the rule's scope: resctrl groups are per class, not per pod.
"""

from __future__ import annotations

from engine.evaluate.context import ActionContext
from engine.features.resctrl.spec import SetResctrlSpec
from engine.features.resctrl.step import ResctrlAsk, declared_group
from engine.features.resctrl.strategy import GroupRequest


def set_resctrl(ctx: ActionContext) -> bool:
    p = ctx.spec_as(SetResctrlSpec)
    class_name = p.class_name
    cls = ctx.env.policy.class_index.get(class_name) if class_name else None
    group = str(p.group or (declared_group(cls) if cls is not None else class_name))
    l3 = p.l3_percent
    mb = p.mb_percent
    source = f"rule {ctx.name}" + (f" (class {class_name})" if class_name else "")
    inputs = {"class": class_name, "group": group}
    ctx.tick.resctrl.append(
        ResctrlAsk(ctx.name, class_name, GroupRequest(group, l3, mb, source), ctx.node_provenance(inputs))
    )
    # Without resctrl nothing can change: the rule does not count as acting (no cooldown, not in
    # `fired`), and the step says so once for the whole tick rather than once per rule.
    return ctx.snap.resctrl.mounted
