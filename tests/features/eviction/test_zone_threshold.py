"""A NUMA zone's free memory against its own watermark, as a condition (issue 16).

The issue: Katalyst's zone-threshold check (per-zone free memory against the zone's min watermark,
/proc/zoneinfo) could not be written, because a condition compares a fact with a constant and each
zone has its own watermark. The derived facts ``numa.memory.free_over_min_bytes`` and
``free_over_low_bytes`` (free minus the watermark) make it one comparison with 0.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from engine.evaluate.classify import Classifier
from engine.evaluate.engine import Engine
from engine.evaluate.factview import FactViews
from engine.evaluate.state import EngineState
from engine.model.facts import snapshot_from_dict
from engine.model.intents import EvictIntent, NodeIntent
from tests.builders import GiB, policy

SNAPSHOT = Path(__file__).parents[3] / "examples" / "snapshots" / "numa-zoneinfo-pressure.yaml"

SPEC = """
classes:
  - name: batch
    match: [{annotations: {katalyst.kubewharf.io/qos_level: reclaimed_cores}}]
rules:
  - name: zone-below-min
    when: {numa.memory.free_over_min_bytes: {lte: 0}}
    then:
      - evict: {victims: {classes: [batch]}, orderBy: [-memory.usage]}
      - notify: {reason: ZoneBelowMin}
"""


def test_zone_free_at_its_min_watermark_matches_only_that_zone() -> None:
    """NUMA 0: 1 GiB free, min watermark 1 GiB (free - min = 0); NUMA 1: 12 GiB free."""
    snap = snapshot_from_dict(yaml.safe_load(SNAPSHOT.read_text()))
    ev = Engine(policy(SPEC)).evaluate(snap, EngineState())
    notes = [i for i in ev.intents if isinstance(i, NodeIntent)]
    assert [i.provenance.item for i in notes] == ["0"]
    (obs,) = notes[0].provenance.conditions
    assert (obs.fact, obs.observed, obs.met) == ("numa.memory.free_over_min_bytes", 0, True)
    evicts = [i for i in ev.intents if isinstance(i, EvictIntent)]
    assert [i.provenance.item for i in evicts] == ["0"]


def test_headroom_is_derived_from_the_zone_readings_only() -> None:
    snap = snapshot_from_dict(yaml.safe_load(SNAPSHOT.read_text()))
    views = FactViews(snap, Classifier(policy(SPEC)), {}, {})
    assert views.numa[1]["memory.free_over_min_bytes"] == 11 * GiB
    assert views.numa[1]["memory.free_over_low_bytes"] == 12 * GiB - 5100273664
    data = yaml.safe_load(SNAPSHOT.read_text())
    del data["metrics"]["numa"]["1"]["memory"]["watermark_min_bytes"]
    views = FactViews(snapshot_from_dict(data), Classifier(policy(SPEC)), {}, {})
    assert views.numa[1].get("memory.free_over_min_bytes") is None
