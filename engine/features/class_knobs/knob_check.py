"""The check of an expression knob (a class's cpu/memory knob, a setCgroup value): it must parse, read
only pod, container and node, and not be one that can only fail or only yield a value its file
refuses. It evaluates the knob as the tick would, on synthetic pods (and their container, for a knob
of each container's cgroup) and a node with typical facts, with a typical ``current`` value, so
that what passes ``qosd validate`` does not fail every tick. It also checks the bounds relative to
``current`` (``deadBandPercent``, ``maxGrowthPercent``)."""

from __future__ import annotations

from functools import cache
from typing import Any

from jinja2 import TemplateSyntaxError, meta
from jinja2.exceptions import SecurityError

from engine.cgroups.files import value_problem
from engine.config.errors import Checker, short
from engine.config.load import JsonPath
from engine.config.render import ENV, RenderError
from engine.features.class_knobs.knobs import compile_knob, resource_of
from engine.model.factnames import registry
from engine.model.facts import Container, Workload

EXPR_VARIABLES = frozenset({"pod", "container", "node", "current"})


def check_knob(
    c: Checker, path: JsonPath, knob: Any, file: str | None, pods: bool, *, containers: bool = False
) -> None:
    """An expression knob must parse, read only pod/container/node/current, and
    (``_try_expression``) not be one that can only fail or only yield a value ``file`` refuses;
    ``container`` only where the value is for a container's own cgroup (``containers``). A growth
    cap must be above the dead band, else the value could never grow."""
    if isinstance(knob, dict):
        band, growth = knob.get("deadBandPercent"), knob.get("maxGrowthPercent")
        if band is not None and growth is not None and growth <= band:
            c.add(
                (*path, "maxGrowthPercent"),
                f"maxGrowthPercent {short(growth)} is not above deadBandPercent {short(band)}: every "
                "increase it allows is inside the dead band, so the value could never grow",
                "raise maxGrowthPercent above the dead band, or lower the dead band",
            )
    if isinstance(knob, dict) and "expr" in knob:
        try:
            ast = ENV.parse("{{ " + knob["expr"] + " }}")
        except TemplateSyntaxError as exc:
            c.add((*path, "expr"), f"expression {short(knob['expr'])} does not parse: {exc.message}")
            return
        names = meta.find_undeclared_variables(ast)
        unknown = names - EXPR_VARIABLES
        if "container" in names and not containers and not unknown:
            c.add(
                (*path, "expr"),
                f"expression {short(knob['expr'])} reads container, but this value is for a "
                "pod or path cgroup",
                "container is defined for the values of each container's own cgroup (setCgroup "
                "containers, class cpu.cfsQuota and cpu.burst)",
            )
            return
        if unknown:
            c.add(
                (*path, "expr"),
                f"expression {short(knob['expr'])} uses unknown name(s) {', '.join(sorted(unknown))}",
                "cgroup expressions may read pod, container, node and current",
            )
            return
        _try_expression(c, (*path, "expr"), knob, file, pods, constant=not names, containers=containers)


# Errors of an expression that no pod can avoid: the template limits (SecurityError) and numbers
# too large for any file. Others (a ZeroDivisionError, a missing label, None for a pod without a
# limit) depend on the pod, so the synthetic pods below cannot prove them wrong.
_HOPELESS = (SecurityError, OverflowError, MemoryError, RecursionError)

# Typical node fact values by unit: non-zero, so that a division by a fact does not fail here only.
_TYPICAL = {
    "percent": 50.0,
    "bytes": float(8 << 30),
    "cores": 4.0,
    "count": 2.0,
    "microseconds": 1000.0,
    "tasks": 100.0,
    "seconds": 60.0,
}


@cache
def _sample_node() -> tuple[tuple[str, Any], ...]:
    """Every node fact of the facts schema (keyed as the tick's flattened ``node``) at a typical value."""
    out: list[tuple[str, Any]] = []
    for spec in registry().specs.values():
        if spec.scope != "node":
            continue
        if spec.kind == "string":
            value: Any = spec.enum[0] if spec.enum else ""
        elif spec.kind == "boolean":
            value = False
        else:
            value = _TYPICAL.get(spec.unit, 1.0)
            value = int(value) if spec.kind == "integer" else value
        out.append((".".join(spec.path), value))
    return tuple(out)


# A pod of each Kubernetes QoS shape, with non-zero requests: (what it is, requests, limits).
_SAMPLE_SHAPES: tuple[tuple[str, dict[str, float], bool], ...] = (
    (
        "a pod requesting 1 CPU and 1Gi with limits of 2 CPUs and 2Gi",
        {"cpu": 1.0, "memory": 1.0 * (1 << 30)},
        True,
    ),
    ("a pod requesting 0.5 CPU and 512Mi without limits", {"cpu": 0.5, "memory": 0.5 * (1 << 30)}, False),
    ("a pod without requests or limits", {}, False),
)


def _sample_pods() -> tuple[tuple[str, Workload], ...]:
    return tuple(
        (
            what,
            Workload(
                uid=f"validate-{i}",
                name=f"sample-{i}",
                namespace="default",
                priority=0,
                containers=(
                    Container("app", requests=req, limits={k: 2 * v for k, v in req.items()} if lim else {}),
                ),
            ),
        )
        for i, (what, req, lim) in enumerate(_SAMPLE_SHAPES)
    )


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# A typical current value by resource, in the unit knobs compute in (cores, bytes).
_TYPICAL_CURRENT = {"cpu": 1.0, "memory": float(1 << 30)}


def _try_expression(
    c: Checker,
    path: JsonPath,
    knob: dict[str, Any],
    file: str | None,
    pods: bool,
    *,
    constant: bool,
    containers: bool = False,
) -> None:
    """Evaluate an expression knob once per sample (a pod of each shape when it targets pods, else no
    pod) on a node with typical facts, as the tick would. Refused: a failure of the template limits
    or a number too large for any file (``_HOPELESS``) for any sample, any failure of an expression
    that reads neither pod nor node (``constant``), or, for every sample that
    yields a value, a value that is not a number and that ``file`` refuses (a string, a list). A
    number out of the file's range is refused only when the expression reads neither pod nor node
    (``constant``): otherwise real requests and facts may bring it in range, and the tick skips it
    when they do not. Without this, the tick would skip the write with an error every tick."""
    formula = (c.spec.get("cgroup") or {}).get("weightFormula")
    fn = compile_knob(file or "", knob, weight_formula=formula)
    node = dict(_sample_node())
    samples: tuple[tuple[str, Workload | None], ...] = (
        _sample_pods() if pods else (("a cgroup target without a pod", None),)
    )
    refused: list[str] = []
    yielded = 0
    current = _TYPICAL_CURRENT[resource_of(file or "")]
    for what, w in samples:
        ctr = w.containers[0] if containers and w is not None else None
        try:
            text = fn(w, node, ctr, current)
        except RenderError as exc:
            if constant:
                c.add(
                    path,
                    f"expression {short(knob['expr'])} fails: {exc.__cause__}",
                    "it reads neither pod nor node, so it would fail the same way at every tick",
                )
                return
            if isinstance(exc.__cause__, _HOPELESS):
                c.add(
                    path,
                    f"expression {short(knob['expr'])} fails for {what} on a typical node: {exc.__cause__}",
                    "every tick would skip this value; keep the expression's numbers and strings small",
                )
                return
            continue
        if text is None or not file:
            continue
        yielded += 1
        bad = value_problem(file, text.strip(), c.node)
        if bad and (constant or not _is_number(text.strip())):
            refused.append(bad)
    if refused and len(refused) == yielded:
        c.add(
            path,
            f"expression {short(knob['expr'])} yields a value {file} refuses: {refused[0]}",
            "an expression must yield a number (bytes for memory files, cores for CPU files) "
            "or a text the file takes; it was evaluated on typical pods and node facts",
        )
