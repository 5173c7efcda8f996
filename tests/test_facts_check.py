"""Facts documents the schema accepts but the tick cannot use are refused at load, located.

Regression for issue 14: a snapshot listing CPU 2 twice passed ``qosd eval --facts`` and then
stopped the tick in the suppress policy (``ValueError: processors must have distinct CPU ids``).
Every facts reader (eval, RuleTest cases and patches, trace bases and snapshot samples) now runs the
same semantic checks after the schema.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.config.errors import PolicyError
from engine.ruletest.reader import load_suites
from engine.sources.snapshot_file import read_facts
from engine.sources.trace import read_trace
from tests.test_cli_usage import qosd

ROOT = Path(__file__).resolve().parents[1]
CANARY = ROOT / "examples" / "snapshots" / "canary-be-memory.yaml"


def canary() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(CANARY.read_text())
    return data


def dup_cpu(d: dict[str, Any]) -> None:
    d["node"]["topology"]["cpus"].append(dict(d["node"]["topology"]["cpus"][2]))


def dup_numa(d: dict[str, Any]) -> None:
    d["node"]["topology"]["numa"].append({"id": 1})


def unlisted_numa(d: dict[str, Any]) -> None:
    d["node"]["topology"]["cpus"][15]["numa"] = 7


def split_core(d: dict[str, Any]) -> None:
    d["node"]["topology"]["cpus"].append({"id": 16, "core": 0, "socket": 0, "numa": 1})


def dup_uid(d: dict[str, Any]) -> None:
    d["workloads"].append({**copy.deepcopy(d["workloads"][0]), "name": "other"})


def dup_name(d: dict[str, Any]) -> None:
    d["workloads"].append({**copy.deepcopy(d["workloads"][0]), "uid": "other", "cgroupPath": "x/other"})


def dup_container(d: dict[str, Any]) -> None:
    w = d["workloads"][0]
    w["containers"] = [{"name": "c"}, {"name": "c"}]


def shared_cgroup(d: dict[str, Any]) -> None:
    d["workloads"][0]["cgroupPath"] = "kubepods/besteffort/same"
    d["workloads"][1]["cgroupPath"] = "/kubepods/besteffort/same/"


def dotdot_cgroup(d: dict[str, Any]) -> None:
    d["workloads"][0]["cgroupPath"] = "kubepods/../../etc"


def dotdot_observed(d: dict[str, Any]) -> None:
    d["cgroups"] = {"../outside": {"cpu.shares": "2"}}


def huge_capacity(d: dict[str, Any]) -> None:
    d["node"]["capacity"]["memory"] = 1e300


def huge_request(d: dict[str, Any]) -> None:
    d["workloads"][0]["containers"] = [{"name": "c", "requests": {"cpu": 1e300}}]


def huge_metric(d: dict[str, Any]) -> None:
    # found by the fuzz harness: a pod's usage_cores of -1e308 passed, then the reclaim step's
    # millicores (x 1000) overflowed to infinity in the middle of the tick
    d["metrics"]["pods"] = {"x": {"cpu": {"usage_cores": -1e308}}}


def dup_host_app(d: dict[str, Any]) -> None:
    d["hostApplications"] = [{"name": "nginx", "qos": "LS"}, {"name": "nginx", "qos": "BE"}]


def huge_host_app_usage(d: dict[str, Any]) -> None:
    d["hostApplications"] = [{"name": "nginx", "usage": {"cpuCores": 1e300}}]


def numa_metric_key(d: dict[str, Any]) -> None:
    d["metrics"]["numa"] = {"zero": {}}


# (name, change, JSON path of the problem, words of the message)
CASES: list[tuple[str, Callable[[dict[str, Any]], None], str, str]] = [
    ("duplicate CPU id", dup_cpu, "$.node.topology.cpus[16].id", "CPU 2 is listed twice"),
    ("duplicate NUMA id", dup_numa, "$.node.topology.numa[2].id", "NUMA node 1 is listed twice"),
    (
        "CPU on unlisted NUMA",
        unlisted_numa,
        "$.node.topology.cpus[15].numa",
        "which node.topology.numa does not list",
    ),
    (
        "core over two NUMA nodes",
        split_core,
        "$.node.topology.cpus[16].numa",
        "another CPU of that core is on NUMA node 0",
    ),
    ("duplicate pod uid", dup_uid, "$.workloads[4].uid", "pod uid 'be-1' is listed twice"),
    ("duplicate pod name", dup_name, "$.workloads[4].name", "pod batch/spark-big is listed twice"),
    (
        "duplicate container",
        dup_container,
        "$.workloads[0].containers[1].name",
        "container 'c' is listed twice",
    ),
    ("two pods one cgroup", shared_cgroup, "$.workloads[1].cgroupPath", "is the cgroup of two pods"),
    ("cgroup path leaves the root", dotdot_cgroup, "$.workloads[0].cgroupPath", "'..' component"),
    ("observed cgroup leaves the root", dotdot_observed, "$.cgroups['../outside']", "'..' component"),
    ("NUMA metrics key", numa_metric_key, "$.metrics.numa.zero", "keyed by NUMA id"),
    ("capacity out of range", huge_capacity, "$.node.capacity.memory", "is too large"),
    ("metric out of range", huge_metric, "$.metrics.pods.x.cpu.usage_cores", "beyond what a node reports"),
    ("request out of range", huge_request, "$.workloads[0].containers[0].requests.cpu", "is too large"),
    ("duplicate host application", dup_host_app, "$.hostApplications[1].name", "host application 'nginx' is listed twice"),
    (
        "host application usage out of range",
        huge_host_app_usage,
        "$.hostApplications[0].usage.cpuCores",
        "beyond what a node reports",
    ),
]


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(data, indent=1))
    return path


def test_the_canary_snapshot_itself_passes() -> None:
    assert read_facts(CANARY)["node"]["name"] == "node-canary"


@pytest.mark.parametrize(("name", "change", "where", "words"), CASES, ids=[c[0] for c in CASES])
def test_semantic_problems_are_located(
    tmp_path: Path, name: str, change: Callable[[dict[str, Any]], None], where: str, words: str
) -> None:
    data = canary()
    change(data)
    path = write(tmp_path, data)
    with pytest.raises(PolicyError) as info:
        read_facts(path)
    [problem] = [p for p in info.value.problems if words in p.message]
    assert problem.location.source == str(path)
    assert problem.location.line > 1, name
    assert problem.location.column >= 1
    assert problem.location.path == where


def test_eval_refuses_duplicate_cpus_with_location_and_exit_1(tmp_path: Path) -> None:
    """The reported case end to end: before, this was a traceback from pick_suppress_cpus."""
    data = canary()
    dup_cpu(data)
    path = write(tmp_path, data)
    proc = qosd("eval", "--facts", str(path))
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"{path}:" in proc.stderr and "CPU 2 is listed twice" in proc.stderr
    assert "processors must have distinct" not in proc.stderr


def test_ruletest_patch_that_duplicates_a_pod_is_located(tmp_path: Path) -> None:
    (tmp_path / "f.yaml").write_text(CANARY.read_text())
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "apiVersion: qosd.io/v1alpha1\nkind: RuleTest\ncases:\n"
        "  - name: dup\n"
        "    facts: f.yaml\n"
        "    patch: {node: {topology: {numa: [{id: 0}, {id: 0}]}}}\n"
        "    expect: {}\n"
    )
    with pytest.raises(PolicyError) as info:
        load_suites([suite])
    text = info.value.format()
    assert "NUMA node 0 is listed twice" in text
    assert str(suite) + ":6:" in text


def test_trace_inline_base_and_snapshot_sample_are_checked(tmp_path: Path) -> None:
    base = canary()
    dup_cpu(base)
    snap = canary()
    dup_uid(snap)
    doc = {
        "apiVersion": "qosd.io/v1alpha1",
        "kind": "Trace",
        "base": base,
        "step": "1m",
        "samples": [{}, {"snapshot": snap}],
    }
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(doc, indent=1))
    with pytest.raises(PolicyError) as info:
        read_trace(path)
    [p] = info.value.problems
    assert p.location.path == "$.base.node.topology.cpus[16].id" and "CPU 2 is listed twice" in p.message
    dup_cpu(snap)  # only the sample is wrong now
    doc["base"] = canary()
    path.write_text(json.dumps(doc, indent=1))
    with pytest.raises(PolicyError) as info:
        read_trace(path)
    paths = {p.location.path for p in info.value.problems}
    assert paths == {
        "$.samples[1].snapshot.workloads[4].uid",
        "$.samples[1].snapshot.node.topology.cpus[16].id",
    }


def test_a_facts_file_that_is_a_pipe_is_refused_without_blocking(tmp_path: Path) -> None:
    """Opening a FIFO for reading waits for a writer: the reader must refuse it from its stat."""
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(PolicyError) as info:
        read_facts(tmp_path / "pipe")
    assert "is not a regular file" in info.value.format()
