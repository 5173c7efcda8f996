"""Every feature's action spec in one union, and each action kind's spec compiler.

``config/compile.py`` attaches ``ACTION_SPECS[kind](params)`` to each action once per generation,
after the feature's ``check`` passed; the action handlers read the typed spec (``ActionContext.spec_as``).
Kinds not listed (taint, condition, notify) pass their parameters through as data.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from engine.cgroups.weight import WeightFormula
from engine.features.class_knobs import spec as set_cgroup
from engine.features.eviction import spec as evict
from engine.features.memory_qos import spec as memory_guard
from engine.features.reclaim import spec as publish
from engine.features.resctrl import spec as set_resctrl
from engine.features.suppress import spec as suppress

ActionSpec = (
    evict.EvictSpec
    | suppress.SuppressSpec
    | memory_guard.MemoryGuardSpec
    | set_resctrl.SetResctrlSpec
    | publish.PublishSpec
    | set_cgroup.SetCgroupSpec
)

SpecCompiler = Callable[[Mapping[str, Any]], ActionSpec]


def action_specs(weight_formula: WeightFormula | None) -> dict[str, SpecCompiler]:
    """Each action kind's spec compiler for one generation (setCgroup's knobs need its cpu.weight
    formula)."""
    return {
        "evict": evict.compile_spec,
        "suppress": suppress.compile_spec,
        "memoryGuard": memory_guard.compile_spec,
        "setResctrl": set_resctrl.compile_spec,
        "publish": publish.compile_spec,
        "setCgroup": partial(set_cgroup.compile_spec, weight_formula=weight_formula),
    }
