"""The README's "Run on a cluster" section, run as written: every command of its fenced blocks, in
order, by the real kubectl against the API-server emulator (tests/kubectl.py; no kube-apiserver can
run here).

There is no kubelet, DaemonSet controller or qosd pod behind the emulator, so the test puts in what
they would write (the nodes, a node's QoSNodeStatus, the Events and reclaimed resources a daemon
posts) and checks, after each block, what the commands must have changed on the server: the base in
audit mode on labelled nodes, the canary's two DaemonSets, the fleet in enforce mode, the rollback.
A line that is not a kubectl command fails the first test: the section shows nothing that cannot run.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.kubectl import Kubectl

pytestmark = pytest.mark.kubectl

ROOT = Path(__file__).resolve().parent.parent
NS = "qosd-system"
TAINT = "node.katalyst.kubewharf.io/MemoryPressure"  # a taint rules/default.yaml sets
RECLAIMED = ("resource.katalyst.kubewharf.io/reclaimed_millicpu", "resource.katalyst.kubewharf.io/reclaimed_memory")


def section_blocks(readme: Path = ROOT / "README.md", heading: str = "## Run on a cluster") -> list[list[str]]:
    """The lines of each fenced block between ``heading`` and the next level-2 heading."""
    text = readme.read_text(encoding="utf-8")
    start = text.index(heading + "\n")
    end = text.find("\n## ", start + len(heading))
    body = text[start : end if end >= 0 else len(text)]
    return [
        [line.strip() for line in block.splitlines() if line.strip()]
        for block in re.findall(r"^```[a-z]*\n(.*?)^```", body, flags=re.S | re.M)
    ]


BLOCKS = section_blocks()


def test_the_section_shows_only_kubectl_commands() -> None:
    assert len(BLOCKS) >= 5, BLOCKS
    for block in BLOCKS:
        for line in block:
            words = shlex.split(line, comments=True)
            assert words and words[0] == "kubectl", f"README 'Run on a cluster': not a kubectl command: {line}"


# ---------------------------------------------------------------- what the cluster holds


def node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}},
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
        },
    }


def event(name: str, reason: str, kind: str, obj: str, message: str) -> dict[str, Any]:
    api = "qosd.io/v1alpha1" if kind == "QoSPolicy" else "v1"
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": "default"},
        "involvedObject": {"apiVersion": api, "kind": kind, "name": obj},
        "reason": reason,
        "message": message,
        "type": "Normal",
        "count": 1,
        "source": {"component": "qosd", "host": "node-a"},
        "firstTimestamp": "2026-11-26T10:00:00Z",
        "lastTimestamp": "2026-11-26T10:00:00Z",
    }


def what_the_nodes_would_write(kubectl: Kubectl) -> None:
    """The nodes, and what qosd on node-a would have written: its QoSNodeStatus, a WouldEvict
    Event (audit mode), a ReloadFailed Event on a QoSPolicy, and the reclaimed resources and the
    taint an earlier enforce run left on the Node (which the rollback block removes and lists)."""
    server = kubectl.server
    a = node("node-a")
    for where in ("capacity", "allocatable"):
        a["status"][where].update({RECLAIMED[0]: "3000", RECLAIMED[1]: "4Gi"})
    a["spec"] = {"taints": [{"key": TAINT, "effect": "NoSchedule"}]}
    server.put(a)
    server.put(node("node-b"))
    server.put(
        event("node-a.1", "WouldEvict", "Node", "node-a",
              "audit mode: qosd would evict pod default/batch (rule memory-evict); nothing was evicted")
    )  # fmt: skip
    server.put(
        event("site-canary.1", "ReloadFailed", "QoSPolicy", "site-canary", "rejected on 1 node: see node-a")
    )


def node_status(kubectl: Kubectl) -> None:
    kubectl.server.put(
        {
            "apiVersion": "qosd.io/v1alpha1",
            "kind": "QoSNodeStatus",
            "metadata": {"name": "node-a"},
            "status": {
                "nodeName": "node-a",
                "applied": {"generation": 1, "hash": "0123456789ab", "time": "2026-11-26T10:00:00Z"},
                "lastAttempt": {"generation": 1, "result": "Applied", "time": "2026-11-26T10:00:00Z"},
            },
        }
    )


def daemonsets(kubectl: Kubectl) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in kubectl.server.list("apps/v1", "DaemonSet", NS)}


def mode(ds: dict[str, Any]) -> str:
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    return next(str(e["value"]) for e in c["env"] if e["name"] == "QOSD_MODE")


def labels(kubectl: Kubectl, name: str) -> dict[str, str]:
    return dict((kubectl.server.get("v1", "Node", name) or {})["metadata"].get("labels") or {})


# ---------------------------------------------------------------- after each block


def audit(kubectl: Kubectl, out: list[str]) -> None:
    sets = daemonsets(kubectl)
    assert set(sets) == {"qosd"} and mode(sets["qosd"]) == "audit"
    assert sets["qosd"]["spec"]["template"]["spec"]["nodeSelector"]["qosd.io/enabled"] == "true"
    assert labels(kubectl, "node-a")["qosd.io/enabled"] == labels(kubectl, "node-b")["qosd.io/enabled"] == "true"
    assert "node-a" in out[3] and "0123456789ab" in out[3]  # kubectl get qosp,qosns
    assert "would evict pod default/batch" in out[4]


def canary(kubectl: Kubectl, out: list[str]) -> None:
    sets = daemonsets(kubectl)
    assert set(sets) == {"qosd", "qosd-enforce"}
    assert (mode(sets["qosd"]), mode(sets["qosd-enforce"])) == ("audit", "enforce")
    assert sets["qosd-enforce"]["spec"]["template"]["spec"]["nodeSelector"]["qosd.io/enforce"] == "true"
    assert "affinity" in sets["qosd"]["spec"]["template"]["spec"]
    assert labels(kubectl, "node-a")["qosd.io/enforce"] == "true"
    assert "qosd-enforce" in out[2]
    assert "0123456789ab" in out[3]  # the node's QoSNodeStatus: generation and hash


def fleet(kubectl: Kubectl, out: list[str]) -> None:
    sets = daemonsets(kubectl)
    assert set(sets) == {"qosd"} and mode(sets["qosd"]) == "enforce"
    assert not sets["qosd"]["spec"]["template"]["spec"].get("affinity")  # the canary's, removed by apply
    assert "qosd.io/enforce" not in labels(kubectl, "node-a")


def rollback(kubectl: Kubectl, out: list[str]) -> None:
    sets = daemonsets(kubectl)
    assert set(sets) == {"qosd"} and mode(sets["qosd"]) == "audit"
    assert "qosd.io/enabled" not in labels(kubectl, "node-b")
    status = (kubectl.server.get("v1", "Node", "node-a") or {})["status"]
    for where in ("capacity", "allocatable"):
        assert not set(RECLAIMED) & set(status[where]), where
        assert status[where]["cpu"] == "8"  # only qosd's resources went
    assert TAINT in out[3]  # what to remove by hand


def policy_canary(kubectl: Kubectl, out: list[str]) -> None:
    assert kubectl.server.get("qosd.io/v1alpha1", "QoSPolicy", "site-canary") is not None
    assert labels(kubectl, "node-a")["qosd.io/canary"] == "true"
    assert "site-canary" in out[2] and "site-canary" in out[3]
    assert "ReloadFailed" in out[5]
    assert "matchLabels" in out[6]


def policy_deleted(kubectl: Kubectl, out: list[str]) -> None:
    assert kubectl.server.get("qosd.io/v1alpha1", "QoSPolicy", "site-canary") is None


def nothing(_kubectl: Kubectl) -> None:
    pass


Hook = Callable[[Kubectl], None]
# (the block's first command, what to set up before it, and after its first command (once the
# CRDs are in), what must hold after the block)
STEPS: list[tuple[str, Hook, Hook, Callable[[Kubectl, list[str]], None]]] = [
    ("kubectl apply -k examples/deploy", what_the_nodes_would_write, node_status, audit),
    ("kubectl label node node-a qosd.io/enforce=true", nothing, nothing, canary),
    ("kubectl delete daemonset -n qosd-system qosd-enforce", nothing, nothing, fleet),
    ("kubectl apply -k examples/deploy", nothing, nothing, rollback),
    ("kubectl label node node-a qosd.io/canary=true", nothing, nothing, policy_canary),
    ("kubectl delete qosp site-canary", nothing, nothing, policy_deleted),
]


def test_the_steps_follow_the_readme() -> None:
    """The checks below are matched to the README's blocks by their first command."""
    assert [b[0] for b in BLOCKS] == [first for first, *_ in STEPS]


def test_the_readme_cluster_commands_run_with_the_real_kubectl(kubectl: Kubectl) -> None:
    assert len(BLOCKS) == len(STEPS)
    for block, (_, before, first_done, after) in zip(BLOCKS, STEPS, strict=True):
        before(kubectl)
        out: list[str] = []
        for line in block:
            out.append(kubectl(*shlex.split(line, comments=True)[1:]).stdout)
            if len(out) == 1:
                first_done(kubectl)
        after(kubectl, out)
