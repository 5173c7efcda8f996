"""setCgroup: desired cgroup values for a literal path, or for every pod of a class."""

from __future__ import annotations

from engine.config.render import RenderError
from engine.evaluate.context import ActionContext
from engine.model.facts import Workload
from engine.model.intents import CgroupIntent
from engine.strategies.knobs import compile_knob


def set_cgroup(ctx: ActionContext) -> bool:
    target = ctx.params["target"]
    cache = ctx.engine.knob_cache
    knobs = cache.get(ctx.name)
    if knobs is None:
        knobs = cache[ctx.name] = {f: compile_knob(f, k) for f, k in ctx.params["values"].items()}
    provenance = ctx.first_provenance({"target": dict(target)})
    paths: list[tuple[str, Workload | None]]
    if "path" in target:
        paths = [(str(target["path"]), None)]
    elif "class" in target:
        paths = [(w.cgroup_path, w) for w in ctx.class_members(str(target["class"])) if w.cgroup_path]
    else:
        ctx.skip("setCgroup on a pool needs the pool strategy, not in this version")
        return False
    wrote = False
    node = ctx.views.node
    for path, workload in paths:
        for file, knob in knobs.items():
            try:
                value = knob(workload, node)
            except RenderError as exc:
                ctx.skip(f"{path}/{file}: {exc.message}")
                continue
            if value is None:
                continue
            ctx.tick.intents.append(
                CgroupIntent(path, file, value, workload.key if workload else None, provenance)
            )
            wrote = True
    return wrote
