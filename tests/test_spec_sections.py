"""An unknown ``spec`` section is refused, located, with a hint, on every path (issue 18).

engine/config/merge.py builds the effective policy from the sections it knows and dropped any other
without a word. The schema refuses unknown sections first on every path a document takes (rule
files, RuleTest overlays, QoSPolicy custom resources): each is checked here as its user meets it.
merge itself now refuses one too, so a section the schema accepts but merge forgets cannot vanish,
and the sections merge knows are exactly those the schema declares.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.config.errors import PolicyError
from engine.config.load import Document, Marks
from engine.config.merge import KNOWN_SPEC_KEYS, Rendered, merge
from engine.config.pipeline import document_from_object, validate
from engine.config.unset import policy_schema
from tests.conftest import policy_text
from tests.qosdcli import qosd_in_process

ROOT = Path(__file__).resolve().parent.parent


def test_merge_knows_exactly_the_sections_the_schema_declares() -> None:
    assert set(policy_schema()["$defs"]["spec"]["properties"]) == KNOWN_SPEC_KEYS


def test_merge_refuses_a_section_it_does_not_know_located_with_a_hint() -> None:
    doc = Document(
        "team.yaml", 0, {}, Marks(values={("spec", "reclaimm"): (7, 3)}, keys={("spec", "reclaimm"): (7, 3)})
    )
    rendered = Rendered(doc, {"spec": {"reclaimm": {"cpu": {}}}})
    with pytest.raises(PolicyError) as exc:
        merge([rendered])
    (p,) = exc.value.problems
    assert (p.location.line, p.location.column, p.location.path) == (7, 3, "$.spec.reclaimm")
    assert p.message == "unknown spec section 'reclaimm'" and p.hint == "did you mean 'reclaim'?"


def test_a_rule_file_with_an_unknown_section_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "team.yaml"
    f.write_text(policy_text("reclaimm: {cpu: {policy: usage}}"))
    proc = qosd_in_process("validate", str(f))
    assert proc.returncode == 1
    assert f"{f}:5:3: error: unknown field 'reclaimm' (at $.spec.reclaimm)" in proc.stderr
    assert "hint: did you mean 'reclaim'?" in proc.stderr


def test_a_custom_resource_with_an_unknown_section_is_refused() -> None:
    obj = {"apiVersion": "qosd.io/v1alpha1", "kind": "QoSPolicy", "metadata": {"name": "team"},
           "spec": {"evction": {}}}  # fmt: skip
    (p,) = validate([document_from_object(obj)])
    assert str(p.location) == "QoSPolicy/team $.spec.evction"
    assert p.message == "unknown field 'evction'" and p.hint == "did you mean 'eviction'?"


def test_a_ruletest_overlay_with_an_unknown_section_is_refused(tmp_path: Path) -> None:
    suite = tmp_path / "suite.yaml"
    facts = ROOT / "examples" / "snapshots" / "quiet-node.yaml"
    suite.write_text(
        "apiVersion: qosd.io/v1alpha1\nkind: RuleTest\nmetadata: {name: s}\npolicy: {builtin: true}\n"
        f"overlay: {{presure: {{}}}}\ncases:\n  - {{name: a, facts: {facts}}}\n"
    )
    proc = qosd_in_process("test", str(suite))
    assert proc.returncode != 0
    assert f"{suite}:5:11: error: unknown field 'presure'" in proc.stdout + proc.stderr
    assert "did you mean 'pressure'?" in proc.stdout + proc.stderr
