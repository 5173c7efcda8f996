"""The setResctrl action's typed spec and its checks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.config.errors import Checker
from engine.config.load import JsonPath
from engine.features.resctrl.strategy import Percent


@dataclass(frozen=True)
class SetResctrlSpec:
    """``then: {setResctrl: ...}``, compiled once per generation. Without ``group`` the pods join
    their class's declared group (resolved against the class at tick time, like the declaration)."""

    class_name: str | None = None
    group: str | None = None
    l3_percent: tuple[Percent, Percent] | None = None
    mb_percent: float | None = None


def compile_spec(raw: Mapping[str, Any]) -> SetResctrlSpec:
    l3 = raw.get("l3Percent")
    return SetResctrlSpec(
        class_name=str(raw["class"]) if raw.get("class") else None,
        group=str(raw["group"]) if raw.get("group") else None,
        l3_percent=(l3[0], l3[1]) if l3 is not None else None,
        mb_percent=raw.get("mbPercent"),
    )


def check(c: Checker, p: JsonPath, params: Mapping[str, Any]) -> None:
    """The class exists; a class or a group is named; the L3 range is not empty."""
    if "class" in params:
        c.ref((*p, "class"), params["class"], c.classes, "class")
    if "class" not in params and "group" not in params:
        c.add(p, "setResctrl needs a class or a group")
    l3 = params.get("l3Percent")
    if isinstance(l3, list) and len(l3) == 2 and l3[0] >= l3[1]:
        c.add((*p, "l3Percent"), f"l3Percent [{l3[0]}, {l3[1]}] is empty: the start must be below the end")


@dataclass(frozen=True)
class ClassResctrl:
    """A class's ``resctrl`` declaration, compiled once per generation: the group its pods join
    (``group``, else the class name) and that group's limits."""

    group: str | None = None
    l3_percent: tuple[Percent, Percent] | None = None
    mb_percent: float | None = None


def class_resctrl(raw: Mapping[str, Any]) -> ClassResctrl | None:
    """None when the class declares no resctrl (its pods stay where they are)."""
    if not raw:
        return None
    l3 = raw.get("l3Percent")
    return ClassResctrl(
        group=str(raw["group"]) if raw.get("group") else None,
        l3_percent=(l3[0], l3[1]) if l3 is not None else None,
        mb_percent=raw.get("mbPercent"),
    )


def check_class_resctrl(c: Checker, base: JsonPath, resctrl: Mapping[str, Any]) -> None:
    """A class's resctrl section: an L3 range must not be empty."""
    l3 = resctrl.get("l3Percent")
    if isinstance(l3, list) and len(l3) == 2 and l3[0] >= l3[1]:
        c.add(
            (*base, "resctrl", "l3Percent"),
            f"l3Percent [{l3[0]}, {l3[1]}] is empty: the start must be below the end",
            "e.g. [0, 30] gives the class the lowest 30% of the L3 ways",
        )
