"""The suppress action on whole snapshots: which usages enter Koordinator's suppress arithmetic.

Numbers of Test_cpuSuppress_calculateBESuppressCPU (koordinator-sh/koordinator a7a1b76,
pkg/koordlet/qosmanager/plugins/cpusuppress/cpu_suppress_test.go), on a 20-core node at a 70%
threshold, through the cfsQuota policy so the budget shows as a quota (suppress cores x 100000 us):

* a pod metric with no pod object counts as non-BE usage, not as system usage;
* host applications count by their QoS: an LS one is usage BE must leave room for, a BE one under
  the BestEffort directory is BE's own usage, one without a metric is left out.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState
from engine.model.facts import snapshot_from_dict
from engine.model.intents import CgroupIntent
from engine.plan.planner import Guards
from engine.tick import run_tick
from tests.builders import policy

RULES = """\
classes:
  - {name: BE, match: [{labels: {koordinator.sh/qosClass: BE}}], cpu: {policy: reclaimed}}
  - {name: LS, match: [{labels: {koordinator.sh/qosClass: LS}}], cpu: {policy: shared}}
rules:
  - name: be-cpu-suppress
    then: {suppress: {class: BE, policy: cfsQuota, thresholdPercent: 70}}
"""

POD_A = {"uid": "abc", "name": "podA", "labels": {"koordinator.sh/qosClass": "LS"}, "kubeQoS": "Guaranteed",
         "containers": [{"name": "c", "requests": {"cpu": 10}, "limits": {"cpu": 10}}]}  # fmt: skip
POD_B = {"uid": "def", "name": "podB", "labels": {"koordinator.sh/qosClass": "BE"},
         "containers": [{"name": "c", "requests": {"kubernetes.io/batch-cpu": 4000}}]}  # fmt: skip


def facts(
    used: float, pods: list[dict[str, Any]], usage: dict[str, float], apps: list[Any] | None = None
) -> Any:
    return snapshot_from_dict(
        {
            "node": {"name": "test-node0", "capacity": {"cpu": 20}, "allocatable": {"cpu": 20}},
            "workloads": pods,
            "hostApplications": apps or [],
            "metrics": {
                "node": {"cpu": {"usage_cores": used}},
                "pods": {uid: {"cpu": {"usage_cores": cores}} for uid, cores in usage.items()},
            },
        }
    )


def suppress_intent(snap: Any) -> CgroupIntent:
    result = run_tick(Engine(policy(RULES)), snap, EngineState(), Guards())
    [intent] = [
        i for i in result.evaluation.intents if isinstance(i, CgroupIntent) and i.file == "cpu.cfs_quota_us"
    ]
    return intent


def test_a_pod_metric_without_its_pod_counts_as_non_be() -> None:
    """ "calculate correctly for missing podMeta or transient metrics": 20 x 70% - 8 (abc, no pod
    object) - max(11 - 8 - 4, 0) = 6 cores. Counting abc as system usage gave 7."""
    intent = suppress_intent(facts(11, [POD_B], {"abc": 8, "def": 4}))
    assert intent.provenance.inputs["podsNonBEUsedMilli"] == 8000
    assert intent.provenance.inputs["systemUsedMilli"] == 0
    assert intent.value == "600000"


def test_terminated_pods_metric_counts_by_its_class() -> None:
    """Koordinator sums every pod metric; a pod that has finished but still has a metric counts by
    its class like any other (a BE one is BE usage), not as system usage."""
    done = {**POD_B, "phase": "Succeeded"}
    intent = suppress_intent(facts(12, [POD_A, done], {"abc": 8, "def": 2}))
    assert intent.provenance.inputs["podsAllUsedCores"] == pytest.approx(10)
    assert intent.value == "400000"  # 14 - 8 - (12 - 10)


@pytest.mark.parametrize(
    ("app", "milli", "apps_non_be"),
    [
        # "calculate be suppress cpus correctly with ls host app": 14 - (12 - 8 - 2 - 1) - 8 - 1 = 4
        ({"name": "test-ls-app", "qos": "LS", "priority": "koord-prod", "usage": {"cpuCores": 1}}, 4000, 1000),
        # the BE host app case: 14 - (12 - 8 - 2 - 1) - 8 = 5
        (
            {"name": "test-be-app", "qos": "BE", "priority": "koord-batch",
             "cgroupPath": {"base": "KubepodsBesteffort"}, "usage": {"cpuCores": 1}},
            5000,
            0,
        ),
        # a BE app outside the BestEffort directory is usage BE must leave room for
        ({"name": "be-elsewhere", "qos": "BE", "cgroupPath": {"base": "CgroupRoot"}, "usage": {"cpuCores": 1}}, 4000, 1000),
        # no metric: left out, its usage stays in systemUsed: 14 - (12 - 10) - 8 = 4
        ({"name": "unmeasured", "qos": "LS"}, 4000, 0),
    ],
)  # fmt: skip
def test_host_applications_count_by_their_qos(app: dict[str, Any], milli: int, apps_non_be: int) -> None:
    intent = suppress_intent(facts(12, [POD_A, POD_B], {"abc": 8, "def": 2}, [app]))
    assert intent.provenance.inputs["hostAppsNonBEUsedMilli"] == apps_non_be
    assert intent.provenance.inputs["suppressMilli"] == milli
    assert intent.value == str(milli * 100)


def intents_of(rules: str, snap: Any) -> dict[tuple[str, str], str]:
    result = run_tick(Engine(policy(rules)), snap, EngineState(), Guards())
    return {(i.path, i.file): i.value for i in result.evaluation.intents if isinstance(i, CgroupIntent)}


def test_each_policy_lifts_the_other_ones_limit() -> None:
    """Test_cpuSuppress_suppressBECPU: with cfsQuota the BE directory gets the whole share pool back
    as its cpuset (recoverCPUSetIfNeed), with cpuset its quota goes back to -1
    (recoverCFSQuotaIfNeed), so switching policies leaves no stale limit behind."""
    snap = facts(12, [POD_A, POD_B], {"abc": 8, "def": 2})
    quota = intents_of(RULES, snap)
    assert quota[("kubepods/besteffort", "cpu.cfs_quota_us")] == "400000"  # 14 - 8 - (12 - 10) = 4 cores
    assert quota[("kubepods/besteffort", "cpuset.cpus")] == "0-19"
    cpuset = intents_of(RULES.replace("policy: cfsQuota", "policy: cpuset"), snap)
    assert cpuset[("kubepods/besteffort", "cpu.cfs_quota_us")] == "-1"
    assert cpuset[("kubepods/besteffort", "cpuset.cpus")] == "0-3"  # 4 CPUs


def test_a_quota_in_the_dead_band_still_recovers_the_cpuset() -> None:
    """adjustByCfsQuota skips a change under 1% of the node, but the cpuset is recovered anyway."""
    snap = facts(12, [POD_A, POD_B], {"abc": 8, "def": 2})
    held = replace(snap, cgroups={"kubepods/besteffort": {"cpu.cfs_quota_us": "400000"}})
    got = intents_of(RULES, held)
    assert ("kubepods/besteffort", "cpu.cfs_quota_us") not in got
    assert got[("kubepods/besteffort", "cpuset.cpus")] == "0-19"
