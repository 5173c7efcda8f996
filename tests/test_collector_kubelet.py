"""The collector reads the kubelet's CPU manager policy (node.kubelet.cpu_manager_policy) from its
checkpoint file while the policy needs it: a reclaim free policy whose heldRequests depend on it,
or a condition on the fact. Otherwise the file is never opened."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.builders import policy
from tests.test_collectors import collector_for, v1_root

HELD = """\
reclaim:
  cpu:
    policy: free
    free: {heldRequests: {cpuManagerPolicy: static}}
    publishAs: x/cpu
"""
CONDITION = """\
rules:
  - name: static-node
    when: {node.kubelet.cpu_manager_policy: {eq: static}}
    then: {taint: {key: k, effect: NoSchedule}}
"""


@pytest.mark.parametrize(("spec", "read"), [(HELD, True), (CONDITION, True), ("priority: 1\n", False)])
def test_cpu_manager_policy_is_read_while_the_policy_needs_it(tmp_path: Path, spec: str, read: bool) -> None:
    state = tmp_path / "cpu_manager_state"
    state.write_text(json.dumps({"policyName": "static", "defaultCpuSet": "0-7", "checksum": 1}))
    collector, clock = collector_for(tmp_path, v1_root(tmp_path), cpu_manager_state=state)
    collector.use_policy(policy(spec))
    clock.t += 1
    node = collector.collect().metrics.node
    assert node.get("kubelet.cpu_manager_policy") == ("static" if read else None)


def test_a_missing_checkpoint_leaves_the_fact_out(tmp_path: Path) -> None:
    collector, clock = collector_for(tmp_path, v1_root(tmp_path), cpu_manager_state=tmp_path / "absent")
    collector.use_policy(policy(HELD))
    clock.t += 1
    assert "kubelet.cpu_manager_policy" not in collector.collect().metrics.node
