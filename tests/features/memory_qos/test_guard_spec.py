"""The memoryGuard action's typed spec: Katalyst's MemoryGuard defaults, filled in once per generation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.config.errors import PolicyError
from engine.config.pipeline import build_policy, load_documents
from engine.features.memory_qos.spec import DEFAULT_RECLAIM_ROOT, MemoryGuardSpec, compile_spec
from tests.builders import snapshot


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


ONE_ROOT = """\
apiVersion: qosd.io/v1alpha1
kind: QoSPolicy
metadata: {name: guards}
spec:
  rules:
    - name: g1
      then: {memoryGuard: {cgroup: kubepods/besteffort}}
    - name: g2
      then: {memoryGuard: {cgroup: %s}}
"""


@pytest.mark.parametrize(
    ("second", "problems"),
    [
        pytest.param("kubepods/besteffort", [], id="same-root"),
        pytest.param(
            "other/root",
            ["policy.yaml:9:36: memoryGuard cgroup 'other/root' differs from 'kubepods/besteffort'"],
            id="second-root",
        ),
    ],
)
def test_every_memory_guard_names_one_reclaim_root(tmp_path: Path, second: str, problems: list[str]) -> None:
    """The collector reads one reclaim root's memory.numa_stat (numa.memory.reclaimed_usage_bytes),
    so a guard on another cgroup would be capped from the first one's usage: a located error."""
    (tmp_path / "policy.yaml").write_text(ONE_ROOT % second)
    try:
        build_policy(load_documents([tmp_path / "policy.yaml"], builtin=False), snapshot().node)
        found: list[str] = []
    except PolicyError as exc:
        found = [f"{Path(p.location.source).name}:{p.location.line}:{p.location.column}: {p.message}" for p in exc.problems]
    assert [f[: len(want)] for f, want in zip(found, problems, strict=False)] == problems
    assert len(found) == len(problems), found
