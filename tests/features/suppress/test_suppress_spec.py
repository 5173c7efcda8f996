"""The suppress action's typed spec: Koordinator's CPUSuppress defaults, filled in once per generation."""

from __future__ import annotations

from typing import Any

import pytest

from engine.features.suppress.spec import DEFAULT_CGROUP, SuppressSpec, compile_spec


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(
            {"class": "be"},
            SuppressSpec("be", DEFAULT_CGROUP, "cpuset", 65, None, 2, 10.0, 2000, 1.0, (), ()),
            id="koordinator-defaults",
        ),
        pytest.param(
            {"class": "be", "policy": "cfsQuota", "thresholdPercent": 70, "minPercent": 10, "minQuota": 4000,
             "deadBandPercent": 2.5, "stepPercent": 20, "cgroup": "batch", "borrowFrom": ["ls"],
             "excludeClasses": ["lse"], "minCpus": 4},
            SuppressSpec("be", "batch", "cfsQuota", 70, 10, 4, 20.0, 4000, 2.5, ("ls",), ("lse",)),
            id="all-given",
        ),
    ],
)
def test_compile(raw: dict[str, Any], expected: SuppressSpec) -> None:
    assert compile_spec(raw) == expected
