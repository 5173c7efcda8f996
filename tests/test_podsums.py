"""A pod's facts are summed from its containers when the pod-level value is absent (issue 16).

Anchor: katalyst-core ``evictionmanager/plugin/memory/rss_overuse_test.go``: the RSS overuse plugin
adds up ``mem.rss.container`` of every container; a facts source that reports only container values
must not leave the pod without an RSS (the rule would silently skip it).
"""

from __future__ import annotations

from typing import Any

import pytest

from engine.model.facts import Container, Workload, snapshot_from_dict
from engine.model.podsums import fill_from_containers

GiB = 1 << 30


def two_containers(uid: str = "p", init: bool = False) -> Workload:
    return Workload(
        uid=uid,
        name=uid,
        containers=(Container("a"), Container("b"), *((Container("setup", init=True),) if init else ())),
    )


@pytest.mark.parametrize(
    ("pods", "containers", "expected"),
    [
        pytest.param(
            {},
            {"p/a": {"memory.rss_bytes": 3 * GiB}, "p/b": {"memory.rss_bytes": 2 * GiB}},
            {"p": {"memory.rss_bytes": 5 * GiB}},
            id="absent-pod-value-is-the-sum",
        ),
        pytest.param(
            {"p": {"memory.rss_bytes": 7 * GiB}},
            {"p/a": {"memory.rss_bytes": 3 * GiB}, "p/b": {"memory.rss_bytes": 2 * GiB}},
            {},
            id="pod-value-wins",
        ),
        pytest.param(
            {"p": {"memory.usage_bytes": 9 * GiB}},
            {"p/a": {"memory.rss_bytes": 1 * GiB}, "p/b": {"memory.rss_bytes": 1 * GiB}},
            {"p": {"memory.usage_bytes": 9 * GiB, "memory.rss_bytes": 2 * GiB}},
            id="only-missing-keys-filled",
        ),
        pytest.param(
            {},
            {"p/a": {"memory.rss_bytes": 3 * GiB}, "p/b": {}},
            {},
            id="partial-sum-would-understate",
        ),
        pytest.param({}, {"p/a": {"memory.rss_bytes": 3 * GiB}}, {}, id="container-not-reported"),
    ],
)
def test_fill_from_containers(
    pods: dict[str, dict[str, Any]], containers: dict[str, dict[str, Any]], expected: dict[str, Any]
) -> None:
    assert fill_from_containers([two_containers()], pods, containers) == expected


def test_init_containers_are_not_summed() -> None:
    containers = {"p/a": {"memory.rss_bytes": 1 * GiB}, "p/b": {"memory.rss_bytes": 1 * GiB}}
    assert fill_from_containers([two_containers(init=True)], {}, containers) == {"p": {"memory.rss_bytes": 2 * GiB}}


def test_snapshot_from_dict_sums_container_rss() -> None:
    """A facts document with only container metrics gives the pod its summed RSS."""
    snap = snapshot_from_dict(
        {
            "node": {"name": "n", "capacity": {"cpu": 4, "memory": 8 * GiB}},
            "workloads": [{"uid": "p", "name": "p", "containers": [{"name": "a"}, {"name": "b"}]}],
            "metrics": {
                "containers": {
                    "p/a": {"memory": {"rss_bytes": 3 * GiB}},
                    "p/b": {"memory": {"rss_bytes": 2 * GiB}},
                }
            },
        }
    )
    assert snap.metrics.pods["p"]["memory.rss_bytes"] == 5 * GiB
