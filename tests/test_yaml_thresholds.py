"""Changing one number in a bundled profile's YAML changes the decision by exactly the anchor's arithmetic.

Each row edits one threshold in a copy of rules/profiles/koordinator.yaml (the literal text a platform
team would change), evaluates it with ``qosd eval --no-builtin`` on examples/snapshots/memory-pressure.yaml,
and checks the new decision against Koordinator's formula worked by hand (koordinator.md 3.1 CPUSuppress,
3.3 BEMemoryEvict). The unedited profile is the control row, so a change that had no effect would fail.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.cli import main

ROOT = Path(__file__).resolve().parent.parent
PROFILE = ROOT / "rules/profiles/koordinator.yaml"
SNAPSHOT = ROOT / "examples/snapshots/memory-pressure.yaml"

SUPPRESS = "thresholdPercent: 65        # koord: cpuSuppressThresholdPercent"
EVICT = "node.memory.usage_percent: {gte: 70}     # koord: memoryEvictThresholdPercent\n      then:\n        evict:\n          victims:\n            classes: [BE]"


def evaluate(tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str) -> dict[str, Any]:
    text = PROFILE.read_text()
    assert text.count(old) == 1, f"the profile no longer contains {old!r} exactly once; update this test"
    rules = tmp_path / "koordinator.yaml"
    rules.write_text(text.replace(old, new))
    capsys.readouterr()
    code = main(["eval", "--no-builtin", "--rules", str(rules), "--facts", str(SNAPSHOT), "--output", "json"])
    out = capsys.readouterr().out
    assert code == 0, out
    result: dict[str, Any] = json.loads(out)
    return result


def suppress_cpuset(result: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    # The class directory's cpuset (the policy also lifts its CFS quota: cpu.cfs_quota_us -1).
    (intent,) = [
        i
        for i in result["intents"]
        if i["kind"] == "cgroup" and i["provenance"]["rule"] == "be-cpu-suppress" and i["file"] == "cpuset.cpus"
    ]
    return intent["value"], intent["provenance"]["inputs"]


def evicted(result: dict[str, Any]) -> list[str]:
    return [i["target"] for i in result["intents"] if i["kind"] == "evict"]


# (name, old text, new text, expected suppress milli, expected CPUs)
SUPPRESS_ROWS = [
    # 16000 x 65 / 100 - 3000 (LS + LSR usage) - 1000 (system: node reserved) = 6400m -> 7 CPUs.
    ("bundled 65%", SUPPRESS, SUPPRESS, 6400, 7),
    # 16000 x 50 / 100 - 3000 - 1000 = 4000m -> 4 CPUs.
    ("lowered to 50%", SUPPRESS, SUPPRESS.replace("65", "50"), 4000, 4),
    # 16000 x 80 / 100 - 3000 - 1000 = 8800m -> 9 CPUs.
    ("raised to 80%", SUPPRESS, SUPPRESS.replace("65", "80"), 8800, 9),
]


@pytest.mark.parametrize(
    ("name", "old", "new", "milli", "cpus"), SUPPRESS_ROWS, ids=[r[0] for r in SUPPRESS_ROWS]
)
def test_suppress_threshold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, old: str, new: str, milli: int, cpus: int
) -> None:
    value, inputs = suppress_cpuset(evaluate(tmp_path, capsys, old, new))
    assert inputs["suppressMilli"] == milli
    assert inputs["targetCpus"] == cpus
    assert len(_cpus(value)) == cpus


# (name, new threshold, expected victims in order)
EVICT_ROWS = [
    # 82% >= 70: release 64Gi x (82 - 68) / 100 = 8.96 GiB -> etl-small (1 GiB), spark-exec-1 (12 GiB).
    ("bundled 70%", 70, ["batch/etl-small", "batch/spark-exec-1"]),
    # 82% >= 80: lowerPercent stays 68 in the profile, so the release is unchanged.
    ("raised to 80%", 80, ["batch/etl-small", "batch/spark-exec-1"]),
    # 82% < 85: no eviction at all.
    ("raised to 85%", 85, []),
]


@pytest.mark.parametrize(("name", "threshold", "victims"), EVICT_ROWS, ids=[r[0] for r in EVICT_ROWS])
def test_memory_evict_threshold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, threshold: int, victims: list[str]
) -> None:
    result = evaluate(tmp_path, capsys, EVICT, EVICT.replace("gte: 70", f"gte: {threshold}"))
    assert evicted(result) == victims


def _cpus(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out
