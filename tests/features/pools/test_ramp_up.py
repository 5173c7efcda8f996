"""Katalyst QRM's ramp-up of a new shared container (issue 16: "no ramp-up").

Anchor: katalyst-core ``qrm-plugins/cpu/dynamicpolicy/policy_test.go`` TestAllocate "req for
shared_cores main container": a shared_cores container met for the first time gets every CPU but
the reserve (14 of 16 on the dummy node, AllocatedQuantity 14 "ramp up") and joins its pool after
the transition period (30s). qosd counts the period from the pod's start time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.config.pipeline import build_policy, load_documents
from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState
from engine.kube.apicall import parse_time
from engine.model.facts import snapshot_from_dict
from engine.model.intents import CgroupIntent

NODE = Path(__file__).parents[3] / "examples" / "parity" / "katalyst" / "snapshots" / "qrm-dummy-16cpu.yaml"


def _cpuset(pods: list[dict[str, Any]], time: float) -> dict[str, tuple[str, Any]]:
    data = yaml.safe_load(NODE.read_text())
    data["workloads"], data["time"] = pods, time
    snap = snapshot_from_dict(data)
    ev = Engine(build_policy(load_documents([]), snap.node)).evaluate(snap, EngineState())
    return {
        i.path.split("/")[-2]: (i.value, i.provenance.inputs["pool"])
        for i in ev.intents
        if isinstance(i, CgroupIntent) and i.file == "cpuset.cpus"
    }


def shared(uid: str, start: float | None, **ann: str) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "uid": uid,
        "namespace": "default",
        "name": uid,
        "annotations": {"katalyst.kubewharf.io/qos_level": "shared_cores", **ann},
        "containers": [{"name": "main", "cgroupPath": f"kubepods/burstable/pod{uid}/main", "requests": {"cpu": 2}}],
    }
    if start is not None:
        pod["startTime"] = start
    return pod


@pytest.mark.parametrize(
    ("age", "ramping"),
    [pytest.param(0.0, True, id="just-started"), pytest.param(29.9, True, id="inside-30s"),
     pytest.param(30.0, False, id="period-over"), pytest.param(None, False, id="no-start-time")],
)
def test_new_shared_container_ramps_up_for_30s(age: float | None, ramping: bool) -> None:
    now = 1_700_000_000.0
    got = _cpuset([shared("a", None if age is None else now - age)], now)
    if ramping:
        assert got["poda"] == ("1,3-15", "share (ramp-up)")
    else:
        assert got["poda"][1] == "share" and got["poda"][0] != "1,3-15"


def test_ramp_up_set_leaves_out_dedicated_and_numa_bound_cpus() -> None:
    now = 1_700_000_000.0
    ded = {
        "uid": "d",
        "namespace": "default",
        "name": "d",
        "annotations": {
            "katalyst.kubewharf.io/qos_level": "dedicated_cores",
            "katalyst.kubewharf.io/memory_enhancement": '{"numa_binding":"true"}',
            "katalyst.kubewharf.io/numa_ids": "3",
        },
        "containers": [{"name": "main", "cgroupPath": "kubepods/podd/main", "requests": {"cpu": 2}, "limits": {"cpu": 2}}],
    }
    got = _cpuset([ded, shared("a", now)], now)
    ramp = set(got["poda"][0].replace("-", ",").split(","))
    dedicated = got["podd"][0]
    assert got["poda"][1] == "share (ramp-up)"
    assert not ramp & {"0", "2"} and all(c not in got["poda"][0].split(",") for c in dedicated.split(","))


def test_an_snb_container_does_not_ramp_up() -> None:
    now = 1_700_000_000.0
    snb = shared("s", now, **{"katalyst.kubewharf.io/memory_enhancement": '{"numa_binding":"true"}'})
    got = _cpuset([snb], now)
    assert "ramp-up" not in got["pods"][1]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("2026-11-26T07:00:00Z", 1795676400.0), ("2026-11-26T07:00:00+00:00", 1795676400.0),
     ("not a time", None), (None, None)],
)
def test_kube_start_time(text: str | None, expected: float | None) -> None:
    assert parse_time(text) == expected


def test_a_named_cpuset_pool_ramps_up_as_its_share_template() -> None:
    now = 1_700_000_000.0
    named = shared("n", now, **{"katalyst.kubewharf.io/cpu_enhancement": '{"cpuset_pool": "batch"}'})
    got = _cpuset([named], now)
    assert got["podn"] == ("1,3-15", "batch (ramp-up)")
