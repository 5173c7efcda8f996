"""The planner refuses a cgroup value its file does not take, and writes everything else.

Validation refuses literal values with their location; values computed at tick time reach the
planner unchecked. Koordinator refuses shares 0 and weights 0, 10001 or -1 (ConvertCPUSharesToWeight,
ConvertCPUWeightToShares) where qosd used to clamp them to 2, 262144 or weight 1: a plan now holds
such a write back with the reason, and the other operations of the tick go ahead.
"""

from __future__ import annotations

import pytest

from engine.model.intents import CgroupIntent, Provenance
from engine.model.operations import WriteCgroup
from engine.plan.planner import Guards, plan
from tests.builders import policy

PROV = Provenance("knobs", "h", 1, "test.yaml:1:1", "enforce")
POLICY = policy("classes:\n  - {name: be, match: [{labels: {q: be}}]}\n")


@pytest.mark.parametrize(
    ("file", "value", "reason"),
    [
        ("cpu.shares", "0", "cpu.shares takes an integer from 2 to 262144"),
        ("cpu.shares", "1", "cpu.shares takes an integer from 2 to 262144"),
        ("cpu.shares", "262145", "cpu.shares takes an integer from 2 to 262144"),
        ("cpu.weight", "0", "cpu.weight takes an integer from 1 to 10000"),
        ("cpu.weight", "10001", "cpu.weight takes an integer from 1 to 10000"),
        ("cpu.weight", "-1", "cpu.weight takes an integer from 1 to 10000"),
    ],
)
def test_an_out_of_range_share_or_weight_is_held_and_the_rest_is_written(
    file: str, value: str, reason: str
) -> None:
    bad = CgroupIntent("kubepods/besteffort/poda", file, value, "default/a", PROV)
    good = CgroupIntent("kubepods/besteffort/podb", "cpu.shares", "1024", "default/b", PROV)
    result = plan((bad, good), POLICY, Guards(), {})
    assert [(o.path, o.file, o.value) for o in result.operations if isinstance(o, WriteCgroup)] == [
        ("kubepods/besteffort/podb", "cpu.shares", "1024")
    ]
    [held] = result.held
    assert held.intent is bad
    assert held.reason.startswith("refused, not written: ") and reason in held.reason


def test_a_refused_value_leaves_the_file_to_another_rule() -> None:
    """The refused intent does not claim the file: a second rule's valid value is written."""
    bad = CgroupIntent("kubepods/besteffort/poda", "cpu.shares", "0", "default/a", PROV)
    other = CgroupIntent(
        "kubepods/besteffort/poda",
        "cpu.shares",
        "2",
        "default/a",
        Provenance("other", "h", 1, "t", "enforce"),
    )
    result = plan((bad, other), POLICY, Guards(), {})
    assert [(o.file, o.value, o.rule) for o in result.operations if isinstance(o, WriteCgroup)] == [
        ("cpu.shares", "2", "other")
    ]


def test_a_value_already_in_place_is_not_checked_again() -> None:
    """A steady state checks nothing: what the file already holds is not a write."""
    same = CgroupIntent("kubepods/besteffort/poda", "cpu.shares", "1024", "default/a", PROV)
    result = plan((same,), POLICY, Guards(), {"kubepods/besteffort/poda": {"cpu.shares": "1024"}})
    assert result.operations == () and result.held == ()
