"""publish: reclaimable capacity of one resource under its extended-resource name."""

from __future__ import annotations

from types import MappingProxyType

from engine.evaluate.context import ActionContext
from engine.evaluate.factview import ACTIVE_PHASES
from engine.model.intents import NodeIntent
from engine.strategies.reclaim import PodUse, Reclaimable, ReportHistory, reclaimable, report

USE_FACTS = {
    "cpu": ("cpu.usage_cores", "cpu.request_cores"),
    "memory": ("memory.usage_bytes", "memory.request_bytes"),
}


def pod_uses(ctx: ActionContext, resource: str) -> list[PodUse]:
    """Each active pod's request and usage, and whether it counts as high priority (not reclaimed)."""
    usage_key, request_key = USE_FACTS[resource]
    reclaimed = ctx.engine.reclaimed_classes
    out = []
    for w in ctx.snap.workloads:
        if w.phase not in ACTIVE_PHASES:
            continue
        facts = ctx.views.pod(w)
        usage = facts.get(usage_key)
        out.append(
            PodUse(
                facts.get(request_key, 0.0),
                None if usage is None else float(usage),
                facts.get("class") not in reclaimed,
            )
        )
    return out


def publish(ctx: ActionContext) -> bool:
    resource = str(ctx.params["resource"])
    reclaim = ctx.engine.policy.reclaim
    spec = reclaim.cpu if resource == "cpu" else reclaim.memory
    if spec is None or not spec.publish_as:
        return False
    t = ctx.tick
    if reclaim.enabled:
        age = ctx.views.node.get("reclaim.metrics_age_seconds")
        result = reclaimable(
            resource, spec, ctx.views.node, pod_uses(ctx, resource), age, reclaim.degrade_after
        )
    else:
        result = Reclaimable(resource, None, "reclaim is disabled (spec.reclaim.enabled: false)", {})
    value = result.value
    formula = result.formula
    if value is None:
        t.reports.pop(spec.publish_as, None)  # withdrawn: smoothing starts afresh
    else:
        history = t.reports.get(spec.publish_as, ReportHistory())
        value, t.reports[spec.publish_as], steps = report(value, spec, history, t.now)
        formula = "; ".join([formula, *steps])
    params_out = {
        "resource": spec.publish_as,
        "reclaims": resource,
        "value": value,
        "unit": "cores" if resource == "cpu" else "bytes",
        "formula": formula,
    }
    t.intents.append(NodeIntent("publish", MappingProxyType(params_out), ctx.first_provenance(result.inputs)))
    return True
