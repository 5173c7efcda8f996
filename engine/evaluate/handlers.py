"""Rule actions, one small file each: a function of the ``ActionContext`` that appends intents.

A handler returns whether it acted (which starts the rule's cooldown). Handlers decide nothing about
timing (sustain, latches, cooldowns, rate limits): the engine has done that before calling them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from engine.evaluate.actions.cgroup import set_cgroup
from engine.evaluate.actions.evict import evict
from engine.evaluate.actions.memory_guard import memory_guard_action
from engine.evaluate.actions.node import node_signal
from engine.evaluate.actions.publish import publish
from engine.evaluate.actions.resctrl import set_resctrl
from engine.evaluate.actions.suppress import suppress
from engine.evaluate.context import ActionContext

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
