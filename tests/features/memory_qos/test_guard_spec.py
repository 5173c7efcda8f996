"""The memoryGuard action's typed spec: Katalyst's MemoryGuard defaults, filled in once per generation."""

from __future__ import annotations

from typing import Any

import pytest

from engine.features.memory_qos.spec import DEFAULT_RECLAIM_ROOT, MemoryGuardSpec, compile_spec


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param({}, MemoryGuardSpec(DEFAULT_RECLAIM_ROOT, 4 << 30, 1.0), id="katalyst-defaults"),
        pytest.param(
            {"cgroup": "reclaimed", "minCriticalWatermark": "1Gi", "criticalWatermarkScaleFactor": 2},
            MemoryGuardSpec("reclaimed", 1 << 30, 2.0),
            id="quantity-parsed-once",
        ),
    ],
)
def test_compile(raw: dict[str, Any], expected: MemoryGuardSpec) -> None:
    assert compile_spec(raw) == expected
