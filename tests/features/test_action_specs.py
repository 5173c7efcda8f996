"""Every action kind with a typed spec carries it after compilation, for every bundled policy, so
the tick reads typed fields and no YAML key (engine/features/specs.py)."""

from __future__ import annotations

import pytest

from engine.config.pipeline import build_policy, load_documents
from engine.features.specs import action_specs
from tests.builders import snapshot


@pytest.mark.parametrize("profile", [{}, {"qosd.io/profile": "koordinator"}], ids=["default", "koordinator"])
def test_bundled_actions_carry_their_spec(profile: dict[str, str]) -> None:
    policy = build_policy(load_documents([], builtin=True), snapshot().node.with_labels(profile))
    compilers = action_specs(policy.weight_formula)
    seen = set()
    for rule in policy.rules:
        for action in rule.actions:
            compile_spec = compilers.get(action.kind)
            if compile_spec is None:
                assert action.spec is None
                continue
            seen.add(action.kind)
            assert action.spec == compile_spec(action.params), f"{rule.name}: {action.kind}"
    assert "evict" in seen
