"""Layering: defaults < files < CRs, then priority, then name; nodeSelector; field overlay; enabled: false;
equal-priority conflicts; provenance of every effective field; immutable hashed generations."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from engine.config.errors import PolicyError
from engine.config.load import Document, Layer, parse_documents
from engine.config.pipeline import REFERENCE_NODE, build_policy, document_from_object, validate
from engine.features.class_knobs.spec import ClassCpu
from tests.conftest import policy_text

BASE = """\
priority: 0
mode: enforce
defaultClass: shared
classes:
  - name: shared
    match: [{labels: {q: ls}}]
    cpu: {policy: shared, pool: share, shares: 1024}
  - name: be
    match: [{labels: {q: be}}]
    cpu: {policy: reclaimed, pool: reclaim, shares: 2, idle: true}
pools:
  - {name: share, size: {fromRequests: 1.0, min: 4}}
  - {name: reclaim, size: {remainder: true, min: 4}}
rules:
  - name: mem-evict
    when: {node.memory.usage_percent: {gte: 70}}
    for: 10s
    then: {evict: {victims: {classes: [be]}, release: {lowerPercent: 68}, maxPerRound: 3}}
  - name: notify-high
    when: {node.cpu.usage_percent: {gte: 90}}
    then: {notify: {reason: CPUHigh}}
"""


def docs_of(*items: tuple[str, str, Layer]) -> list[Document]:
    """(name, spec body, layer) -> documents, each parsed from its own in-memory file."""
    out: list[Document] = []
    for name, spec, layer in items:
        out.extend(parse_documents(policy_text(spec, name=name), f"{name}.yaml", layer))
    return out


def node(**labels: str) -> Any:
    return REFERENCE_NODE.with_labels(labels)


def test_higher_layer_overrides_field_by_field() -> None:
    docs = docs_of(
        ("base", BASE, Layer.BUILTIN),
        ("team", "rules:\n  - name: mem-evict\n    for: 30s\n", Layer.FILE),
    )
    policy = build_policy(docs, node())
    rule = policy.rule_index["mem-evict"]
    assert rule.sustain == 30.0
    assert rule.actions[0].params["release"]["lowerPercent"] == 68  # untouched fields are inherited
    assert policy.origin("$.spec.rules[0].for").source == "team.yaml"
    assert policy.origin("$.spec.rules[0].when").source == "base.yaml"


def test_custom_resources_beat_files_whatever_the_priority() -> None:
    docs = docs_of(
        ("base", BASE, Layer.BUILTIN),
        ("file", "priority: 100\nrules:\n  - name: mem-evict\n    for: 30s\n", Layer.FILE),
        ("cr", "priority: -5\nrules:\n  - name: mem-evict\n    for: 45s\n", Layer.CR),
    )
    assert build_policy(docs, node()).rule_index["mem-evict"].sustain == 45.0


def test_priority_orders_documents_within_a_layer() -> None:
    docs = docs_of(
        ("base", BASE, Layer.BUILTIN),
        ("zz-low", "priority: 1\nrules:\n  - name: mem-evict\n    for: 20s\n", Layer.FILE),
        ("aa-high", "priority: 2\nrules:\n  - name: mem-evict\n    for: 40s\n", Layer.FILE),
    )
    assert build_policy(docs, node()).rule_index["mem-evict"].sustain == 40.0


def test_equal_priority_same_value_is_not_a_conflict() -> None:
    docs = docs_of(
        ("base", BASE, Layer.BUILTIN),
        ("a", "rules:\n  - name: mem-evict\n    for: 20s\n", Layer.FILE),
        ("b", "rules:\n  - name: mem-evict\n    for: 20s\n    cooldown: 5s\n", Layer.FILE),
    )
    policy = build_policy(docs, node())
    assert (policy.rule_index["mem-evict"].sustain, policy.rule_index["mem-evict"].cooldown) == (20.0, 5.0)


def test_equal_priority_disagreement_is_an_error_naming_both_places() -> None:
    docs = docs_of(
        ("base", BASE, Layer.BUILTIN),
        ("a", "rules:\n  - name: mem-evict\n    for: 20s\n", Layer.FILE),
        ("b", "rules:\n  - name: mem-evict\n    for: 40s\n", Layer.FILE),
    )
    with pytest.raises(PolicyError) as info:
        build_policy(docs, node())
    (problem,) = info.value.problems
    assert "same priority (0)" in problem.message and "rules.mem-evict.for" in problem.message
    assert (problem.location.source, problem.location.line, problem.location.column) == ("b.yaml", 7, 12)
    assert (problem.related[0].source, problem.related[0].line) == ("a.yaml", 7)
    assert "higher spec.priority" in problem.hint


def test_equal_priority_with_disjoint_selectors_is_fine_for_validate() -> None:
    docs = docs_of(
        ("base", BASE, Layer.BUILTIN),
        (
            "a",
            "nodeSelector: {matchLabels: {pool: a}}\nrules:\n  - name: mem-evict\n    for: 20s\n",
            Layer.FILE,
        ),
        (
            "b",
            "nodeSelector: {matchLabels: {pool: b}}\nrules:\n  - name: mem-evict\n    for: 40s\n",
            Layer.FILE,
        ),
    )
    assert validate(docs) == []
    assert build_policy(docs, node(pool="a")).rule_index["mem-evict"].sustain == 20.0
    assert build_policy(docs, node(pool="b")).rule_index["mem-evict"].sustain == 40.0
    assert build_policy(docs, node()).rule_index["mem-evict"].sustain == 10.0


def test_equal_priority_with_overlapping_selectors_is_reported_by_validate() -> None:
    docs = docs_of(
        ("base", BASE, Layer.BUILTIN),
        (
            "a",
            "nodeSelector: {matchLabels: {zone: x}}\nrules:\n  - name: mem-evict\n    for: 20s\n",
            Layer.FILE,
        ),
        (
            "b",
            "nodeSelector: {matchLabels: {rack: y}}\nrules:\n  - name: mem-evict\n    for: 40s\n",
            Layer.FILE,
        ),
    )
    assert any("same priority" in p.message for p in validate(docs))


def test_disabling_an_entry_removes_it_and_conflicting_disable_is_reported() -> None:
    docs = docs_of(
        ("base", BASE, Layer.BUILTIN),
        ("team", "rules:\n  - name: notify-high\n    enabled: false\n", Layer.FILE),
    )
    policy = build_policy(docs, node())
    assert [r.name for r in policy.rules] == ["mem-evict"]
    clash = docs_of(
        ("base", BASE, Layer.BUILTIN),
        ("x", "rules:\n  - name: notify-high\n    enabled: false\n", Layer.FILE),
        ("y", "rules:\n  - name: notify-high\n    cooldown: 1m\n", Layer.FILE),
    )
    with pytest.raises(PolicyError) as info:
        build_policy(clash, node())
    assert "disables rules.notify-high" in info.value.problems[0].message


def test_a_disabled_entry_is_switched_back_on_with_its_fields() -> None:
    """Features the anchors ship off are disabled entries; a two-line overlay turns one on as it was."""
    docs = docs_of(
        ("base", BASE, Layer.BUILTIN),
        ("off", "priority: 1\nrules:\n  - name: notify-high\n    enabled: false\n", Layer.FILE),
        ("on", "priority: 2\nrules:\n  - name: notify-high\n    enabled: true\n    cooldown: 1m\n", Layer.FILE),
    )
    policy = build_policy(docs, node())
    rule = policy.rule_index["notify-high"]
    assert rule.when is not None and rule.actions[0].params["reason"] == "CPUHigh" and rule.cooldown == 60.0
    assert policy.origin("$.spec.rules[1].cooldown").source == "on.yaml"
    assert "enabled" not in policy.spec["rules"][1]


def test_a_disabled_entry_is_absent_and_references_to_it_are_errors() -> None:
    docs = docs_of(
        ("base", BASE, Layer.BUILTIN),
        ("off", "priority: 1\nclasses:\n  - name: be\n    enabled: false\n", Layer.FILE),
    )
    with pytest.raises(PolicyError) as info:
        build_policy(docs, node())
    assert any("class 'be' is not defined" in p.message for p in info.value.problems)


def test_node_selector_decides_applicability() -> None:
    docs = docs_of(
        ("base", BASE, Layer.BUILTIN),
        (
            "canary",
            "nodeSelector: {matchExpressions: [{key: qosd.io/canary, operator: In, values: ['true']}]}\nmode: audit\n",
            Layer.FILE,
        ),
    )
    assert build_policy(docs, node()).mode == "enforce"
    canary = build_policy(docs, node(**{"qosd.io/canary": "true"}))
    assert canary.mode == "audit"
    assert {r.mode for r in canary.rules} == {"audit"}  # rules inherit the policy mode


def test_lists_replace_and_mappings_merge() -> None:
    docs = docs_of(
        ("base", BASE, Layer.BUILTIN),
        (
            "team",
            "classes:\n  - name: be\n    match: [{labels: {q: batch}}]\n    cpu: {shares: 4}\n",
            Layer.FILE,
        ),
    )
    policy = build_policy(docs, node())
    be = policy.class_index["be"]
    assert len(be.matchers) == 1 and be.matchers[0].labels[0][1].any_of == frozenset({"batch"})
    assert be.cpu == ClassCpu(policy="reclaimed", pool="reclaim", shares=4, idle=True)
    assert policy.origin("$.spec.classes[1].cpu.shares").source == "team.yaml"
    assert policy.origin("$.spec.classes[1].cpu.idle").source == "base.yaml"


def test_new_class_can_be_placed_before_an_inherited_one() -> None:
    docs = docs_of(
        ("base", BASE, Layer.BUILTIN),
        ("team", "classes:\n  - name: critical\n    before: shared\n    protected: true\n", Layer.FILE),
    )
    assert [c.name for c in build_policy(docs, node()).classes] == ["critical", "shared", "be"]


def test_no_applicable_document_is_a_clear_error() -> None:
    docs = docs_of(
        ("only", "nodeSelector: {matchLabels: {x: y}}\n" + BASE.replace("priority: 0\n", ""), Layer.FILE)
    )
    with pytest.raises(PolicyError) as info:
        build_policy(docs, node())
    assert "no policy document applies" in info.value.problems[0].message


def test_custom_resource_errors_are_located_by_name_and_json_path() -> None:
    cr = {
        "apiVersion": "qosd.io/v1alpha1",
        "kind": "QoSPolicy",
        "metadata": {"name": "tight", "resourceVersion": "7"},
        "spec": {"rules": [{"name": "mem-evict", "when": {"node.memory.usage_pct": {"gte": 80}}}]},
        "status": {"observedGeneration": 1},
    }
    docs = [*docs_of(("base", BASE, Layer.BUILTIN)), document_from_object(cr)]
    with pytest.raises(PolicyError) as info:
        build_policy(docs, node())
    loc = info.value.problems[0].location
    assert (loc.source, loc.line) == ("QoSPolicy/tight", 0)
    assert loc.path == "$.spec.rules[0].when['node.memory.usage_pct']"
    assert str(loc) == "QoSPolicy/tight $.spec.rules[0].when['node.memory.usage_pct']"


def test_generation_is_immutable_and_hash_is_content_addressed() -> None:
    docs = docs_of(("base", BASE, Layer.BUILTIN))
    a = build_policy(docs, node())
    b = build_policy(docs_of(("base", BASE + "\n# a comment changes nothing\n", Layer.BUILTIN)), node())
    c = build_policy(docs_of(("base", BASE.replace("for: 10s", "for: 11s"), Layer.BUILTIN)), node())
    assert a.hash == b.hash != c.hash
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.mode = "audit"  # type: ignore[misc]
    with pytest.raises(TypeError):
        a.spec["mode"] = "audit"  # type: ignore[index]
    with pytest.raises(TypeError):
        a.class_index["x"] = a.classes[0]  # type: ignore[index]


def test_every_effective_field_has_an_origin() -> None:
    docs = docs_of(
        ("base", BASE, Layer.BUILTIN),
        ("team", "rules:\n  - name: mem-evict\n    for: 30s\n", Layer.FILE),
    )
    policy = build_policy(docs, node())

    def leaves(value: Any, path: str) -> list[str]:
        if isinstance(value, dict):
            return [p for k, v in value.items() for p in leaves(v, f"{path}.{k}")]
        if isinstance(value, list):
            return [p for i, v in enumerate(value) for p in leaves(v, f"{path}[{i}]")]
        return [path]

    from engine.config.policy import thaw

    for path in leaves(thaw(policy.spec), "$.spec"):
        key = path.replace(".node.memory.usage_percent", "['node.memory.usage_percent']").replace(
            ".node.cpu.usage_percent", "['node.cpu.usage_percent']"
        )
        assert key in policy.origins, path
        assert policy.origins[key].line > 0


def test_templates_render_per_node(tmp_path: Path) -> None:
    spec = BASE.replace("min: 4}}\n  - {name: reclaim", "min: 4}}\n  - {name: reclaim").replace(
        "{remainder: true, min: 4}", '{remainder: true, min: "{{ [4, node.numa_count * 3] | max }}"}'
    )
    docs = docs_of(("base", spec, Layer.BUILTIN))
    assert build_policy(docs, node()).pool_index["reclaim"].min == 6
    four_numa = dataclasses.replace(REFERENCE_NODE, numa_count=4)
    assert build_policy(docs, four_numa).pool_index["reclaim"].min == 12


def test_conditions_and_other_unions_replace_as_a_whole() -> None:
    """Merging two conditions key by key would make a condition neither document wrote."""
    docs = docs_of(
        ("base", BASE, Layer.BUILTIN),
        (
            "team",
            "rules:\n  - name: mem-evict\n    when: {node.memory.usage_bytes: {gte: 1000}}\n",
            Layer.FILE,
        ),
    )
    rule = build_policy(docs, node()).rule_index["mem-evict"]
    assert rule.when is not None and getattr(rule.when, "fact", None) == "node.memory.usage_bytes"


def test_an_action_of_the_same_kind_merges_and_another_kind_replaces() -> None:
    tune = docs_of(
        ("base", BASE, Layer.BUILTIN),
        ("team", "rules:\n  - name: mem-evict\n    then: {evict: {maxPerRound: 1}}\n", Layer.FILE),
    )
    params = build_policy(tune, node()).rule_index["mem-evict"].actions[0].params
    assert params["maxPerRound"] == 1 and params["release"]["lowerPercent"] == 68
    swap = docs_of(
        ("base", BASE, Layer.BUILTIN),
        ("team", "rules:\n  - name: mem-evict\n    then: {notify: {reason: Audit}}\n", Layer.FILE),
    )
    actions = build_policy(swap, node()).rule_index["mem-evict"].actions
    assert [a.kind for a in actions] == ["notify"]


def test_a_rule_without_actions_after_merging_is_reported_where_it_is_defined() -> None:
    """A partial rule no document completes patches nothing: validate refuses it at its name; a
    node's build leaves it out (tests/test_layering_patches.py has the per-variant semantics)."""
    docs = docs_of(
        ("base", BASE, Layer.BUILTIN),
        ("team", "rules:\n  - name: brand-new\n    for: 5s\n", Layer.FILE),
    )
    (problem,) = validate(docs)
    assert problem.message.startswith("rule 'brand-new' has no `then`, and no document defines")
    assert (problem.location.source, problem.location.line, problem.location.column) == ("team.yaml", 6, 13)
    assert "brand-new" not in build_policy(docs, node()).rule_index


def test_validate_for_one_node_ignores_documents_that_do_not_apply_to_it() -> None:
    docs = docs_of(
        ("base", BASE, Layer.BUILTIN),
        ("a", "nodeSelector: {matchLabels: {pool: a}}\nrules:\n  - name: mem-evict\n    for: 20s\n", Layer.FILE),
        ("b", "nodeSelector: {matchLabels: {pool: b}}\nrules:\n  - name: mem-evict\n    for: 40s\n", Layer.FILE),
    )
    assert validate(docs, node(pool="a")) == []


def test_too_many_selector_variants_fall_back_to_each_documents_own_node() -> None:
    """Documents whose selectors never meet must not be merged together by the fallback: each of the
    pool-a overlays replaces the remainder pool, which is fine alone and a clash if merged."""
    overlays = [
        (
            f"a{i}",
            f"priority: 1\nnodeSelector: {{matchLabels: {{pool: a{i}}}}}\n"
            f"pools:\n  - {{name: reclaim, enabled: false}}\n  - {{name: r{i}, size: {{remainder: true}}}}\n"
            f"classes:\n  - {{name: be, cpu: {{pool: r{i}}}}}\n",
            Layer.FILE,
        )
        for i in range(8)
    ] + [
        (f"b{i}", f"priority: 2\nnodeSelector: {{matchLabels: {{rack: b{i}}}}}\nmode: audit\n", Layer.FILE)
        for i in range(8)
    ]
    docs = docs_of(("base", BASE, Layer.BUILTIN), *overlays)
    assert validate(docs) == []
    broken = docs_of(("base", BASE, Layer.BUILTIN), *overlays, ("bad", "priority: 3\nnodeSelector: {matchLabels: {pool: a3}}\ndefaultClass: nope\n", Layer.FILE))
    assert [p.message for p in validate(broken)] == ["class 'nope' is not defined"]
    broken = docs_of(
        ("base", BASE, Layer.BUILTIN),
        *overlays,
        ("bad", "priority: 3\nnodeSelector: {matchLabels: {pool: a3}}\ndefaultClass: nope\n", Layer.FILE),
    )


def test_a_rebuild_does_not_locate_an_unchanged_document_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Provenance of an unchanged document (the built-in layer, on every reload) is worked out
    once: the rendered document is cached with it and keeps its field locations, so a reload
    locates only the documents that changed. The result is the same as a fresh build's."""
    base = docs_of(("base", BASE, Layer.BUILTIN))
    first = build_policy(
        [*base, *docs_of(("team", "rules:\n  - name: mem-evict\n    for: 30s\n", Layer.FILE))], node()
    )
    located: list[str] = []
    position = Document.position

    def counting(self: Document, path: Any, prefer_key: bool = False) -> Any:
        located.append(self.source)
        return position(self, path, prefer_key)

    monkeypatch.setattr(Document, "position", counting)
    team = docs_of(("team", "rules:\n  - name: mem-evict\n    for: 40s\n", Layer.FILE))
    second = build_policy([*base, *team], node())
    assert "base.yaml" not in located
    assert "team.yaml" in located
    fresh = build_policy([*docs_of(("base", BASE, Layer.BUILTIN)), *team], node())
    assert second.origins == fresh.origins and second.spec == fresh.spec
    assert second.hash == fresh.hash != first.hash
    assert second.rule_index["mem-evict"].sustain == 40.0
