"""An SNB pod's NUMA hint from its annotation (issue 16: "no NUMA-binding hints for shared_cores").

Anchor: katalyst-core ``qrm-plugins/cpu/dynamicpolicy/policy_test.go`` TestAllocate, "shared_cores
numa_binding main container with enableReclaim false/true": the hint NUMA 0 puts the pod's SNB pool
on NUMA 0. The bundled numa_ids enhancement applied to dedicated_cores only, so an SNB pod could not
be pinned to a NUMA node at all; examples/parity/katalyst/qrm-cpu/TestAllocate.yaml has the cases.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from engine.config.pipeline import build_policy, load_documents
from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState
from engine.model.facts import snapshot_from_dict
from engine.model.intents import CgroupIntent

NODE = Path(__file__).parents[3] / "examples" / "parity" / "katalyst" / "snapshots" / "qrm-dummy-16cpu.yaml"


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
