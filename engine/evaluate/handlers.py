"""Rule actions, one small file each: a function of the ``ActionContext`` that appends intents.

A handler returns whether it acted (which starts the rule's cooldown). Handlers decide nothing about
timing (sustain, latches, cooldowns, rate limits): the engine has done that before calling them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from engine.evaluate.context import ActionContext
from engine.features.class_knobs.action import set_cgroup
from engine.features.eviction.action import evict
from engine.features.memory_qos.guard import memory_guard_action
from engine.features.reclaim.action import publish
from engine.features.resctrl.action import set_resctrl
from engine.features.rules.node_signal import node_signal
from engine.features.suppress.action import suppress

Handler = Callable[[ActionContext], bool]

HANDLERS: Mapping[str, Handler] = {
    "evict": evict,
    "taint": lambda ctx: node_signal(ctx, "taint"),
    "condition": lambda ctx: node_signal(ctx, "condition"),
    "notify": lambda ctx: node_signal(ctx, "notify"),
    "publish": publish,
    "setCgroup": set_cgroup,
    "setResctrl": set_resctrl,
    "memoryGuard": memory_guard_action,
    "suppress": suppress,
}
