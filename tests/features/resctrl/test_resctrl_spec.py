"""The setResctrl action's typed spec."""

from __future__ import annotations

from typing import Any

import pytest

from engine.features.resctrl.spec import SetResctrlSpec, compile_spec


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param({"class": "be"}, SetResctrlSpec("be"), id="class-only"),
        pytest.param({"group": "batch", "l3Percent": (0, 30), "mbPercent": 40},
                     SetResctrlSpec(None, "batch", (0, 30), 40), id="group-with-limits"),
        pytest.param({"class": "", "group": "g"}, SetResctrlSpec(None, "g"), id="empty-class-is-none"),
    ],
)
def test_compile(raw: dict[str, Any], expected: SetResctrlSpec) -> None:
    assert compile_spec(raw) == expected
