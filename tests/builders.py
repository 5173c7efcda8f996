"""Small builders for facts snapshots and policies in engine tests."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from engine.config.load import Layer, parse_documents
from engine.config.pipeline import REFERENCE_NODE, build_policy
from engine.config.policy import Policy
from engine.model.facts import Container, Cpu, Metrics, Snapshot, Topology, Workload
from engine.model.node import NodeInfo
from tests.conftest import policy_text

GiB = 1 << 30


def policy(spec: str, labels: dict[str, str] | None = None) -> Policy:
    docs = parse_documents(policy_text(spec), "test.yaml", Layer.FILE)
    return build_policy(docs, REFERENCE_NODE.with_labels(labels or {}))


def pod(
    uid: str,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    priority: int | None = None,
    qos: str = "Burstable",
    phase: str = "Running",
    cpu: float = 1.0,
    memory: float = 1 * GiB,
    limits: dict[str, float] | None = None,
    terminating: bool = False,
    namespace: str = "default",
) -> Workload:
    return Workload(
        uid=uid,
        name=uid,
        namespace=namespace,
        labels=MappingProxyType(labels or {}),
        annotations=MappingProxyType(annotations or {}),
        priority=priority,
        kube_qos=qos,
        phase=phase,
        terminating=terminating,
        containers=(Container("main", requests={"cpu": cpu, "memory": memory}, limits=limits or {}),),
    )


def snapshot(
    *,
    time: float = 1000.0,
    node: dict[str, Any] | None = None,
    numa: dict[int, dict[str, Any]] | None = None,
    pods: list[Workload] | None = None,
    pod_metrics: dict[str, dict[str, Any]] | None = None,
    cpus: int = 16,
    memory: float = 64 * GiB,
    allocatable: dict[str, float] | None = None,
) -> Snapshot:
    topology = Topology(
        tuple(Cpu(i, i % (cpus // 2), 0 if i < cpus // 2 else 1, 0 if i < cpus // 2 else 1) for i in range(cpus)),
        {0: memory / 2, 1: memory / 2},
    )
    info = NodeInfo("node-a", {}, {"cpu": float(cpus), "memory": memory}, cpus, 2, 2, int(memory), frozenset(range(cpus)))
    return Snapshot(
        time,
        info,
        topology,
        tuple(pods or ()),
        Metrics(
            node=MappingProxyType(dict(node or {})),
            numa={k: MappingProxyType(v) for k, v in (numa or {}).items()},
            pods={k: MappingProxyType(v) for k, v in (pod_metrics or {}).items()},
        ),
        allocatable or {},
    )
