"""Node-level actions (taint, condition, notify, ...) of a NUMA-scoped rule act once per tick, and
their record names every NUMA node whose condition held (issue 16: it named one per tick)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from engine import cli
from engine.explain.provenance import rule_ref
from engine.ruletest.options import main as qosd_test

ROOT = Path(__file__).resolve().parents[3]
FACTS = ROOT / "examples" / "snapshots" / "numa-watermark-pressure.yaml"

# Both NUMA nodes of the snapshot have free memory, so `free_bytes >= 0` holds on each; only NUMA 0 has
# its below-watermark counter at 8 (NUMA 1 at 2).
OVERLAY = """
rules:
  - name: numa-signal
    when: {numa.memory.free_bytes: {gte: 0}}
    then:
      - {taint: {key: qosd.io/numa-pressure, effect: NoSchedule}}
      - {notify: {reason: NumaPressure}}
  - name: numa-zero-signal
    when: {numa.memory.below_watermark_count: {gte: 6}}
    then: {condition: {type: NumaMemoryPressure}}
"""


def suite(tmp_path: Path, case_body: str) -> Path:
    """One case on the snapshot with OVERLAY inline; ``case_body`` is the rest of the case (expect or steps)."""
    head = (
        "apiVersion: qosd.io/v1alpha1\nkind: RuleTest\nmetadata: {name: numa-node-level}\ncases:\n"
        f"  - name: node-level actions\n    facts: {FACTS}\n    overlay:\n"
    )
    overlay = textwrap.indent(textwrap.dedent(OVERLAY).strip(), " " * 6)
    rest = textwrap.indent(textwrap.dedent(case_body).strip(), " " * 4)
    path = tmp_path / "suite.yaml"
    path.write_text(f"{head}{overlay}\n{rest}\n", encoding="utf-8")
    return path


def test_one_intent_per_tick_naming_every_numa_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = suite(
        tmp_path,
        """
        expect:
          intents:
            - {kind: taint, rule: numa-signal, items: ["0", "1"], item: "0"}
            - {kind: notify, rule: numa-signal, items: ["0", "1"]}
            - {kind: condition, rule: numa-zero-signal, items: ["0"]}
          notIntents:
            - {rule: numa-signal}
            - {rule: numa-zero-signal}
        """,
    )
    assert qosd_test([str(path)]) == 0, capsys.readouterr().out


def test_a_numa_node_newly_matching_sends_the_event_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """notify is an Event when the rule first fires; a NUMA node that starts to match while another
    stays latched is news too. Before, only the first item's latch was looked at."""
    path = suite(
        tmp_path,
        """
        steps:
          - name: only NUMA 0
            patch: {metrics: {numa: {"1": {memory: {free_bytes: null}}}}}
            expect:
              intents: [{kind: notify, items: ["0"]}]
          - name: NUMA 0 still, NUMA 1 too
            at: 5s
            expect:
              intents: [{kind: notify, items: ["0", "1"]}]
          - name: both still
            at: 10s
            expect:
              notIntents: [{kind: notify}]
              intents: [{kind: taint, items: ["0", "1"]}]
        """,
    )
    code = qosd_test([str(path)])
    assert code == 0, capsys.readouterr().out


def test_eval_json_and_explain_name_every_numa_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    overlay = tmp_path / "numa.yaml"
    overlay.write_text(
        "apiVersion: qosd.io/v1alpha1\nkind: QoSPolicy\nmetadata: {name: numa}\nspec:\n  priority: 5\n"
        + textwrap.indent(textwrap.dedent(OVERLAY).strip(), "  ")
        + "\n"
    )
    assert cli.main(["eval", "--facts", str(FACTS), "--rules", str(overlay), "--output", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    [taint] = [i for i in doc["intents"] if i["kind"] == "taint"]
    assert taint["provenance"]["items"] == ["0", "1"]
    assert rule_ref(taint["provenance"]).endswith(" on NUMA nodes 0, 1")
    # A node-scoped rule's record carries no items.
    publish = [i for i in doc["intents"] if i["kind"] == "publish"]
    assert publish and all("items" not in i["provenance"] for i in publish)
