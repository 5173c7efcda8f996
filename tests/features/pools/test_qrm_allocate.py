"""QRM cpu allocation cases of the bundled Katalyst profile that issue 16 found different.

Anchor: katalyst-core ``qrm-plugins/cpu/dynamicpolicy/policy_test.go`` TestAllocate:
- "shared_cores numa_binding main container with enableReclaim false/true": the hint NUMA 0 puts
  the pod's SNB pool on NUMA 0. The bundled numa_ids enhancement applied to dedicated_cores only,
  so an SNB pod could not be pinned to a NUMA node at all;
- "system_cores without specified cpuset pool": every CPU (getSystemPoolCPUSetAndNumaAwareAssignments
  falls back to the machine's CPUs); the bundled class pinned it to the reserve pool instead.
examples/parity/katalyst/qrm-cpu/TestAllocate.yaml has the cases through `qosd test`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.config.pipeline import build_policy, load_documents
from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState
from engine.model.facts import snapshot_from_dict
from engine.model.intents import CgroupIntent

NODE = Path(__file__).parents[3] / "examples" / "parity" / "katalyst" / "snapshots" / "qrm-dummy-16cpu.yaml"


def _cpusets(pods: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    data = yaml.safe_load(NODE.read_text())
    data["workloads"] = pods
    snap = snapshot_from_dict(data)
    ev = Engine(build_policy(load_documents([]), snap.node)).evaluate(snap, EngineState())
    assert not ev.workload_issues
    out: dict[str, dict[str, str]] = {}
    for i in ev.intents:
        if isinstance(i, CgroupIntent) and i.file.startswith("cpuset."):
            out.setdefault(i.path.split("/")[-2], {})[i.file] = i.value
    return out


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        pytest.param({}, None, id="no-pool-keeps-every-cpu"),
        pytest.param({"katalyst.kubewharf.io/cpu_enhancement": '{"cpuset_pool": "reserve"}'}, "0,2", id="reserve"),
    ],
)
def test_system_pod_runs_on_its_named_pool_else_every_cpu(annotations: dict[str, str], expected: str | None) -> None:
    pod = {
        "uid": "s",
        "namespace": "kube-system",
        "name": "agent",
        "annotations": {"katalyst.kubewharf.io/qos_level": "system_cores", **annotations},
        "containers": [{"name": "main", "cgroupPath": "kubepods/burstable/pods/main"}],
    }
    got = _cpusets([pod]).get("pods", {})
    assert got.get("cpuset.cpus") == expected


def test_snb_pod_follows_its_numa_ids_hint() -> None:
    data = yaml.safe_load(NODE.read_text())
    data["workloads"] = [
        {
            "uid": "p",
            "namespace": "default",
            "name": "p",
            "annotations": {
                "katalyst.kubewharf.io/qos_level": "shared_cores",
                "katalyst.kubewharf.io/memory_enhancement": '{"numa_binding":"true"}',
                "katalyst.kubewharf.io/numa_ids": "3",
            },
            "containers": [{"name": "main", "cgroupPath": "kubepods/burstable/podp/main", "requests": {"cpu": 1}}],
        }
    ]
    snap = snapshot_from_dict(data)
    ev = Engine(build_policy(load_documents([]), snap.node)).evaluate(snap, EngineState())
    assert not ev.workload_issues
    cpus = {i.file: i.value for i in ev.intents if isinstance(i, CgroupIntent) and i.path.endswith("podp/main")}
    # NUMA 3 holds CPUs 6, 7, 14, 15: ceil(1 x 2.0) = 2 of them, memory on node 3.
    assert cpus["cpuset.mems"] == "3"
    assert set(cpus["cpuset.cpus"].replace("-", ",").split(",")) <= {"6", "7", "14", "15"}
