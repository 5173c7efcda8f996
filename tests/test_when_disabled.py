"""``whenDisabled``: what holds while a rule is switched off.

Koordinator's CPUSuppress, turned off (resourceUsedThresholdWithBE.enable false), resets the BE
directory's quota to -1 and its cpuset to every CPU each round; a qosd rule switched off did
nothing, so the last suppressed values stayed. A rule's ``whenDisabled`` now holds while it is off,
as a condition-less rule of the same name; while it is on, it is ignored.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.config.errors import PolicyError
from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState
from engine.model.operations import WriteCgroup
from engine.plan.planner import Guards
from engine.tick import run_tick
from tests.builders import policy, snapshot

RULE = """\
rules:
  - name: squeeze
    enabled: {enabled}
    then:
      setCgroup:
        target: {{path: kubepods/besteffort}}
        values: {{cpu.cfs_quota_us: 200000}}
    whenDisabled:
      setCgroup:
        target: {{path: kubepods/besteffort}}
        values:
          cpu.cfs_quota_us: -1
          cpuset.cpus: {{expr: "'0-' ~ (node.cpus - 1)"}}
"""


def _writes(enabled: bool) -> dict[str, tuple[str, str]]:
    p = policy(RULE.format(enabled=str(enabled).lower()))
    snap = replace(
        snapshot(cpus=16),
        cgroups={"kubepods/besteffort": {"cpu.cfs_quota_us": "200000", "cpuset.cpus": "0-1"}},
    )
    result = run_tick(Engine(p), snap, EngineState(), Guards())
    return {o.file: (o.value, o.rule) for o in result.plan.operations if isinstance(o, WriteCgroup)}


def test_a_disabled_rule_restores_what_its_when_disabled_says() -> None:
    assert _writes(False) == {"cpu.cfs_quota_us": ("-1", "squeeze"), "cpuset.cpus": ("0-15", "squeeze")}


def test_an_enabled_rule_ignores_when_disabled() -> None:
    assert _writes(True) == {}  # its own value is already there; nothing is restored


def test_a_bad_when_disabled_is_refused_where_it_is_written() -> None:
    bad = RULE.format(enabled="false").replace(
        "      setCgroup:\n        target: {path: kubepods/besteffort}\n        values:\n          cpu.cfs_quota_us: -1",
        "      setCgroup:\n        target: {class: nosuchclass}\n        values:\n          cpu.cfs_quota_us: -1",
    )
    assert "nosuchclass" in bad
    with pytest.raises(PolicyError) as err:
        policy(bad)
    message = str(err.value)
    assert "nosuchclass" in message and "whenDisabled" in message
