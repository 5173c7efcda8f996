"""Schema errors in words a platform engineer reads at 3 a.m. (issue 18).

jsonschema's own messages read ``5 is not of type 'integer'`` and ``[] should be non-empty``, and the
loader's rewrite said ``5 is a integer, expected string``. Every kind of schema error the loader
reformats says what was expected and what was found, with the right article, and none of them
leaks jsonschema's phrasing. Each row is a policy fragment and the message it must produce.
"""

from __future__ import annotations

import pytest

from engine.config.errors import Problem
from engine.config.load import parse_documents
from engine.config.pipeline import validate
from tests.conftest import policy_text

RULE = "rules: [{name: r, when: {node.memory.usage_percent: {gte: 90}}, then: {notify: {}}}]"

CASES = [
    ("priority: '5'", 'expected an integer, got the string "5"'),
    ("priority: 1.5", "expected an integer, got the number 1.5"),
    ("priority: true", "expected an integer, got the boolean true"),
    ("priority: [1]", "expected an integer, got a list of 1 item"),
    ("priority: {a: 1}", 'expected an integer, got a mapping ({"a": 1})'),
    ("classes: {}", "expected a list, got an empty mapping"),
    ("classes: []\nrules: []\ndefaultClass: 5", "expected a string, got the number 5"),
    ("rules: [{name: r, when: {node.memory.usage_percent: {gte: '90'}}, then: {notify: {}}}]",
     'expected a number, got the string "90"'),
    ("rules: [{name: r, when: {node.memory.usage_percent: {gte: 90}}, then: {notify: {reason: 5}}}]",
     "expected a string, got the number 5"),
    ("rules: [{name: r, when: {node.memory.usage_percent: {gte: 90}}, then: {notify: {reason: null}}}]",
     "expected a string, got nothing (null)"),
    ("rules: [{name: r, samples: {fire: 0, clear: 1}, when: {node.memory.usage_percent: {gte: 90}}, "
     "then: {notify: {}}}]", "0 is less than the minimum of 1"),
    ("rules: [{name: r, samples: {fire: 100001, clear: 1}, when: {node.memory.usage_percent: {gte: 90}}, "
     "then: {notify: {}}}]", "100001 is greater than the maximum of 100000"),
    ("reclaim: {update: {diffThreshold: 0}}", "0 is less than or equal to the minimum of 0 (it must be greater)"),
    ("nodeNames: []", "this list needs at least 1 item; it is empty"),
    ("nodeNames: [a, a]", '"a" appears more than once in this list'),
    ("nodeNames: ['']", "this string must not be empty"),
    ("classes: [{name: c, resctrl: {l3Percent: [1, 2, 3]}}]", "this list takes at most 2 items; it has 3"),
    ("cgroup: {files: [{name: cpu.x, values: {words: [a]}, v1: " + "x" * 256 + "}]}",
     "is longer than 255 characters (256)"),
]  # fmt: skip


def problems(spec: str) -> list[Problem]:
    return validate(parse_documents(policy_text(spec), "p.yaml"))


@pytest.mark.parametrize(("spec", "message"), CASES, ids=[c[1][:40] for c in CASES])
def test_each_schema_error_kind_reads_as_expected_and_found(spec: str, message: str) -> None:
    found = problems(spec)
    assert any(message in p.message for p in found), [p.format() for p in found]


JSONSCHEMA_PHRASES = ("is not of type", "is a integer", "is a array", "should be non-empty", "is too short",
                      "is too long", "has non-unique", "expected integer", "expected number", "expected string",
                      "expected array", "expected object", "None is", "Failed validating")  # fmt: skip


def test_no_message_leaks_jsonschema_phrasing() -> None:
    for spec, _ in CASES:
        for p in problems(spec):
            assert not any(phrase in p.message for phrase in JSONSCHEMA_PHRASES), p.format()
            assert " a integer" not in p.message and " a array" not in p.message, p.format()


def test_a_string_number_still_gets_the_unquote_hint() -> None:
    (p,) = problems("priority: '5'")
    assert p.hint.startswith("write 5 without quotes")


def test_every_unknown_field_of_a_mapping_is_reported() -> None:
    """jsonschema reports an object's extra keys as one error; each is its own located problem."""
    found = problems(RULE + "\nreclaimm: {}\npolicies: {}")
    assert [p.message for p in found] == ["unknown field 'reclaimm'", "unknown field 'policies'"]
    assert found[0].hint == "did you mean 'reclaim'?"
    assert found[0].location.line < found[1].location.line
