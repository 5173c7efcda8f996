"""A node's own reservation annotation (Koordinator's ``node.koordinator.sh/reservation``), as the
batch-resource formulas add it to nodeReserved.

The annotation holds a NodeReservation in JSON: ``{"resources": {"cpu": "2", "memory": "5G"},
"reservedCPUs": "0-9"}``. Koordinator (pkg/util/node.go GetNodeReservationResources) reads
``resources`` and, when ``reservedCPUs`` is set, replaces the CPU quantity with the number of CPUs it
lists; nodeReserved is then max(kubelet reserved = capacity - allocatable, the annotation's) per
resource. An annotation that does not parse reserves nothing, as in Koordinator (which logs it); the
reason is kept for the formula, so a platform engineer sees why the reservation did not count.

Parsed once per distinct annotation text (the Node object changes rarely, the tick reads it every
second).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

from engine.model.units import UnitError, parse_cpuset, parse_quantity


@dataclass(frozen=True)
class NodeReservation:
    """What the annotation reserves, in cores and bytes (None: it reserves none of that resource),
    and why it reserves nothing when it does not parse."""

    cpu: float | None = None
    memory: float | None = None
    problem: str | None = None

    def amount(self, resource: str) -> float | None:
        return self.cpu if resource == "cpu" else self.memory


NO_RESERVATION = NodeReservation()


@lru_cache(maxsize=16)
def parse_reservation(text: str) -> NodeReservation:
    """The reservation of one annotation value (see the module docstring)."""
    if not text:
        return NO_RESERVATION
    try:
        raw = json.loads(text)
    except ValueError as exc:
        return NodeReservation(problem=f"not JSON ({exc})")
    if not isinstance(raw, dict):
        return NodeReservation(problem="not a JSON object")
    resources = raw.get("resources") or {}
    if not isinstance(resources, dict):
        return NodeReservation(problem="resources is not an object")
    amounts: dict[str, float | None] = {"cpu": None, "memory": None}
    for name in amounts:
        value = resources.get(name)
        if value is None:
            continue
        try:
            amounts[name] = parse_quantity(value)
        except UnitError as exc:
            return NodeReservation(problem=f"resources.{name}: {exc}")
    cpus = raw.get("reservedCPUs")
    if cpus:  # Koordinator: listed CPUs win over the CPU quantity
        try:
            amounts["cpu"] = float(len(parse_cpuset(str(cpus))))
        except UnitError as exc:
            return NodeReservation(problem=f"reservedCPUs: {exc}")
    return NodeReservation(amounts["cpu"], amounts["memory"])
