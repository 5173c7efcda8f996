"""Class matchers on requested resources (``match: [{requests: {<resource>: {gt|gte|lt|lte|exists}}}]``):
the sum over a pod's app containers, 0 when it requests none, every bound given must hold."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.evaluate.classify import Classifier
from engine.model.facts import Container
from tests.builders import pod, policy

POLICY = """\
classes:
  - name: gpu
    match: [{requests: {nvidia.com/gpu: {gte: 1}}}]
  - name: small
    match: [{requests: {cpu: {gt: 0, lte: 500m}, memory: {lt: 1Gi}}}]
  - name: no-batch
    match: [{requests: {kubernetes.io/batch-cpu: {exists: false}}, labels: {tier: batch}}]
  - name: other
    match: [{labels: {tier: batch}}, {requests: {cpu: {exists: true}}}]
"""



@pytest.mark.parametrize(
    ("containers", "labels", "expected"),
    [
        pytest.param((Container("a", requests={"nvidia.com/gpu": 1.0}),), {}, "gpu", id="one-gpu"),
        # summed over app containers: 0.5 + 0.5 GPUs is one
        pytest.param(
            (Container("a", requests={"nvidia.com/gpu": 0.5}), Container("b", requests={"nvidia.com/gpu": 0.5})),
            {},
            "gpu",
            id="summed-over-containers",
        ),
        # init containers run before the app, not alongside: not counted
        pytest.param((Container("i", requests={"nvidia.com/gpu": 1.0}, init=True),), {}, None, id="init-not-counted"),
        pytest.param((Container("a", requests={"cpu": 0.5, "memory": 512 * 2**20}),), {}, "small", id="small-bounds"),
        # 500m is the bound: lte holds; 0.6 does not, so the pod falls through to "other"
        pytest.param((Container("a", requests={"cpu": 0.6, "memory": 512 * 2**20}),), {}, "other", id="above-lte"),
        pytest.param((Container("a", requests={"cpu": 0.5, "memory": 2**30}),), {}, "other", id="lt-is-strict"),
        pytest.param((Container("a"),), {"tier": "batch"}, "no-batch", id="exists-false-means-zero"),
        pytest.param(
            (Container("a", requests={"kubernetes.io/batch-cpu": 1000.0}),), {"tier": "batch"}, "other", id="exists"
        ),
        pytest.param((Container("a"),), {}, None, id="no-requests-no-class"),
    ],
)
def test_requests_matchers(containers: tuple[Container, ...], labels: dict[str, str], expected: str | None) -> None:
    classifier = Classifier(policy(POLICY))
    workload = replace(pod("p", labels=labels), containers=containers)
    assert classifier.classify(workload).class_name == expected
