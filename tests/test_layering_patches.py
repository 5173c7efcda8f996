"""Layering, continued (issue 16): an overlay can unset inherited fields (``unset: [path, ...]``), and a
partial entry (a rule without ``then``) patches the entry where one exists and is left out where none
does, so an overlay without nodeSelector can switch on a rule only one bundled profile defines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine import cli
from engine.config.load import Document, Layer, parse_documents
from engine.config.pipeline import REFERENCE_NODE, build_policy, load_documents, validate
from engine.config.unset import path_problem
from tests.conftest import policy_text

BASE = """\
classes:
  - name: be
    match: [{labels: {q: be}}]
    cpu: {policy: reclaimed, pool: reclaim, shares: 2, idle: true}
    memoryQos: {lowLimitPercent: 50}
pools:
  - {name: reclaim, size: {remainder: true, min: 4}}
rules:
  - name: mem-evict
    when: {node.memory.usage_percent: {gte: 70}}
    for: 10s
    cooldown: 30s
    then: {evict: {victims: {classes: [be]}, release: {lowerPercent: 68}, maxPerRound: 3}}
"""


def docs_of(*items: tuple[str, str, Layer]) -> list[Document]:
    out: list[Document] = []
    for name, spec, layer in items:
        out.extend(parse_documents(policy_text(spec, name=name), f"{name}.yaml", layer))
    return out


def effective_rule(docs: list[Document], name: str) -> dict[str, Any]:
    policy = build_policy(docs, REFERENCE_NODE)
    [rule] = [r for r in policy.to_document()["spec"]["rules"] if r["name"] == name]
    return dict(rule)


# ---------------------------------------------------------------- unset


def test_unset_removes_inherited_fields_before_the_overlay_applies() -> None:
    docs = docs_of(
        ("base", BASE, Layer.BUILTIN),
        (
            "team",
            "rules:\n  - name: mem-evict\n    unset: [cooldown, for, then.evict.maxPerRound]\n"
            "classes:\n  - name: be\n    unset: [memoryQos]\n",
            Layer.FILE,
        ),
    )
    rule = effective_rule(docs, "mem-evict")
    assert "cooldown" not in rule and "for" not in rule
    assert rule["then"]["evict"] == {"victims": {"classes": ["be"]}, "release": {"lowerPercent": 68}}
    assert "unset" not in rule
    policy = build_policy(docs, REFERENCE_NODE)
    [be] = [c for c in policy.to_document()["spec"]["classes"] if c["name"] == "be"]
    assert "memoryQos" not in be
    # Provenance of what was removed is gone with it.
    assert not [p for p in policy.origins if "cooldown" in p]


def test_unset_then_set_in_one_document_sets_afresh() -> None:
    """`unset: [then.evict.release]` plus a new release: the new one alone, no key (lowerPercent) of the old."""
    docs = docs_of(
        ("base", BASE, Layer.BUILTIN),
        (
            "team",
            "rules:\n  - name: mem-evict\n    unset: [then.evict.release]\n"
            "    then: {evict: {release: {amount: 1Gi}}}\n",
            Layer.FILE,
        ),
    )
    assert effective_rule(docs, "mem-evict")["then"]["evict"]["release"] == {"amount": "1Gi"}


def test_unset_of_a_field_the_entry_lacks_is_a_no_op_and_a_first_definition_drops_it() -> None:
    docs = docs_of(
        ("base", BASE, Layer.BUILTIN),
        ("team", "rules:\n  - name: mem-evict\n    unset: [clearWhen]\n", Layer.FILE),
        ("new", "rules:\n  - name: fresh\n    unset: [cooldown]\n    then: {notify: {reason: X}}\n", Layer.FILE),
    )
    assert validate(docs) == []
    assert effective_rule(docs, "mem-evict")["cooldown"] == "30s"
    assert "unset" not in effective_rule(docs, "fresh")


@pytest.mark.parametrize(
    ("section", "path", "message"),
    [
        ("rules", "cooldwn", "the entry has no field 'cooldwn' to unset"),
        ("rules", "then.evict.gracePeriodSecond", "then.evict has no field 'gracePeriodSecond' to unset"),
        ("rules", "then", "'then' is required of every entry and cannot be unset"),
        ("rules", "then.suppress.class", "'class' is required in then.suppress and cannot be unset"),
        ("rules", "limits.perWindow.window", "'window' is required in limits.perWindow and cannot be unset"),
        ("reclaim", "update.diffThreshold", "'diffThreshold' is required in update and cannot be unset"),
        ("rules", "name", "'name' cannot be unset"),
        ("classes", "enabled", "'enabled' cannot be unset"),
        ("classes", "cpu.sharez", "cpu has no field 'sharez' to unset"),
        ("reclaim", "cpu.policy", None),
        ("pools", "size.min", None),
        ("rules", "then.evict.victims.classes", None),
        ("cgroup", "weightFormula", None),
        ("pressure", "numaWatermark", None),
    ],
)
def test_unset_paths_are_checked_against_the_schema(section: str, path: str, message: str | None) -> None:
    found = path_problem(section, path)
    assert (found[1] if found else None) == message


def test_bad_unset_paths_are_located_by_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        policy_text("rules:\n  - name: be-memory-evict\n    unset: [cooldwn, then]\nreclaim:\n  unset: [cpu.polcy]\n")
    )
    code = cli.main(["validate", str(path), "--output", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    found = {(p["line"], p["column"], p["message"], p["hint"]) for p in report["problems"]}
    assert found == {
        (7, 15, "the entry has no field 'cooldwn' to unset", "did you mean 'cooldown'?"),
        (7, 24, "'then' is required of every entry and cannot be unset", None),
        (9, 13, "cpu has no field 'polcy' to unset", "did you mean 'policy'?"),
    }


def test_null_is_not_an_unset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The schema and validate agree: null is a wrong type, not a deletion (a CR would lose it)."""
    path = tmp_path / "null.yaml"
    path.write_text(policy_text("rules:\n  - name: be-memory-evict\n    cooldown: null\n"))
    assert cli.main(["validate", str(path)]) == 1
    assert "null" in capsys.readouterr().out


# ---------------------------------------------------------------- partial entries across profiles

ENABLE_LOAD = "rules:\n  - {name: cpu-load-pressure, enabled: true}\n"


def test_a_patch_of_a_rule_one_profile_defines_validates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Regression (issue 16): `{name: cpu-load-pressure, enabled: true}` without nodeSelector failed
    validation ('missing required field then') on the Koordinator variant, where the rule does not
    exist. It now applies on the Katalyst variant and is noted, not refused, on the other."""
    path = tmp_path / "enable.yaml"
    path.write_text(policy_text(ENABLE_LOAD, name="enable-load"))
    code = cli.main(["validate", str(path), "--output", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["valid"] is True and report["problems"] == []
    [note] = report["notes"]
    assert (note["line"], note["column"]) == (6, 14)
    assert note["message"] == (
        "rule 'cpu-load-pressure' patches nothing on nodes with qosd.io/profile=koordinator: "
        "no document there defines it, so this patch is left out there"
    )
    docs = load_documents([path])
    katalyst = build_policy(docs, REFERENCE_NODE)
    koordinator = build_policy(docs, REFERENCE_NODE.with_labels({"qosd.io/profile": "koordinator"}))
    assert "cpu-load-pressure" in katalyst.rule_index
    assert "cpu-load-pressure" not in koordinator.rule_index
    assert cli.main(["validate", str(path)]) == 0
    assert ": note: rule 'cpu-load-pressure' patches nothing" in capsys.readouterr().out


def test_a_patch_that_patches_nothing_anywhere_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text(policy_text(ENABLE_LOAD.replace("cpu-load-pressure", "cpu-load-presure"), name="typo"))
    assert cli.main(["validate", str(path), "--output", "json"]) == 1
    [problem] = json.loads(capsys.readouterr().out)["problems"]
    assert (problem["line"], problem["column"]) == (6, 14)
    assert problem["message"].startswith("rule 'cpu-load-presure' has no `then`, and no document defines")
    assert problem["hint"] == "did you mean 'cpu-load-pressure'?"


def test_a_patch_completed_by_a_higher_document_still_merges() -> None:
    """Required fields may come from any layer: a lower partial entry and a higher complete one."""
    docs = docs_of(
        ("base", BASE, Layer.BUILTIN),
        ("low", "priority: 1\nrules:\n  - name: extra\n    cooldown: 9s\n", Layer.FILE),
        ("high", "priority: 2\nrules:\n  - name: extra\n    then: {notify: {reason: X}}\n", Layer.FILE),
    )
    assert validate(docs) == []
    assert effective_rule(docs, "extra")["cooldown"] == "9s"
