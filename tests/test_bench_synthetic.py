"""The synthetic policies the benchmarks build (bench/synthetic.py) pass validation.

``python -m bench.bench_config`` builds ``synthetic_policy(500, 1)`` by default; a generator that
draws what validate refuses (a literal CFS burst above a literal quota, two names of one host file,
numaScoped victims in a rule that is not per NUMA node) broke that bench without any test noticing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.synthetic import synthetic_policy
from engine.config.pipeline import REFERENCE_NODE, build_policy, load_documents


@pytest.mark.parametrize(
    ("rules", "seed"), [(500, 1), (500, 42), (150, 5)], ids=["bench-default", "seed-42", "durable-test"]
)
def test_a_synthetic_policy_builds(tmp_path: Path, rules: int, seed: int) -> None:
    path = tmp_path / "synthetic.yaml"
    path.write_text(synthetic_policy(rules, seed), encoding="utf-8")
    policy = build_policy(load_documents([path], builtin=False), REFERENCE_NODE)
    assert len(policy.rules) >= rules
