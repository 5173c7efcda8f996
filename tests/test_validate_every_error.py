"""Every independent error of a rule file in one run (issue 18, "Errors you can act on").

A schema error used to hide the semantic errors of the same file (an unknown setCgroup file, an
orderBy key naming no pod fact, an undefined class) until it was fixed. Now the values the schema
refuses are taken out (engine/config/withheld.py) and the rest is checked as usual, without
follow-on errors about what was taken out. The CLI cases run ``qosd validate`` as a user would,
through ``engine.cli.main`` in this interpreter (tests/qosdcli.qosd_in_process: the same parsing,
exit code and two streams, without a second of interpreter start-up per call); the property inserts
k independent errors into k distinct rules of a valid policy and expects k located errors; the
custom-resource and hot-reload paths report the same set.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.config.errors import PolicyError, Problem
from engine.config.load import parse_documents
from engine.config.pipeline import (
    REFERENCE_NODE,
    build_policy,
    document_from_object,
    load_documents,
    validate,
)
from engine.reload import ReloadConfig, Reloader
from tests.conftest import policy_text
from tests.qosdcli import qosd_in_process

CLASSES = """\
classes:
  - name: ls
  - name: be
"""


@dataclass(frozen=True)
class Fault:
    """One way to break one rule: what it does to the rule's text and the message it must cause."""

    name: str
    old: str
    new: str
    message: str


FAULTS = (
    Fault("schema-threshold", "gte: 80", 'gte: "80"', 'expected a number, got the string "80"'),
    Fault("unknown-field", "cooldown: 30s", "cooldown: 30s, colldown: 30s", "unknown field 'colldown'"),
    Fault("bad-action-field", "lowerPercent: 70", 'lowerPercent: "x"', 'expected a number, got the string "x"'),
    Fault("duration-bound", "cooldown: 30s", "cooldown: 99999999h", "99999999h"),
    Fault("unknown-fact", "node.memory.usage_percent", "node.memory.usage_pct", "unknown fact 'node.memory.usage_pct'"),
    Fault("class-ref", "classes: [be]", "classes: [nobody]", "class 'nobody' is not defined"),
    Fault("order-key", "pod.memory.rss_bytes", "pod.memory.rss_bites", "orderBy key 'pod.memory.rss_bites' names no pod fact"),
    Fault("cgroup-file", "cpu.shares", "cpu.sharez", "cgroup file 'cpu.sharez' is neither built in nor declared"),
)  # fmt: skip


def rule(i: int, fault: Fault | None = None) -> str:
    """Rule ``i`` of the valid policy: one line per rule (its faults land on that line), with an
    eviction and a cgroup write so that every fault has something to break."""
    text = (
        f"  - {{name: r{i}, cooldown: 30s, when: {{node.memory.usage_percent: {{gte: 80}}}}, then: ["
        "{evict: {victims: {classes: [be]}, orderBy: [pod.memory.rss_bytes], release: {lowerPercent: 70}}}, "
        "{setCgroup: {target: {class: be}, values: {cpu.shares: 2}}}]}"
    )
    return text.replace(fault.old, fault.new, 1) if fault is not None else text


def policy(faults: dict[int, Fault], rules: int) -> str:
    body = CLASSES + "rules:\n" + "\n".join(rule(i, faults.get(i)) for i in range(rules))
    return policy_text(body)


RULE_LINE = next(n for n, t in enumerate(policy({}, 1).splitlines(), 1) if "{name: r0," in t)  # rule 0


def problems_of(text: str) -> list[Problem]:
    return validate(parse_documents(text, "team.yaml"))


def test_the_valid_policy_is_valid() -> None:
    assert problems_of(policy({}, 4)) == []


@settings(max_examples=30, deadline=None)
@given(
    st.integers(min_value=1, max_value=6).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.dictionaries(st.integers(0, n - 1), st.sampled_from(FAULTS), min_size=1, max_size=n),
        )
    )
)
def test_k_independent_errors_in_distinct_rules_are_k_located_errors(
    case: tuple[int, dict[int, Fault]],
) -> None:
    rules, faults = case
    found = problems_of(policy(faults, rules))
    assert len(found) == len(faults), [p.format() for p in found]
    for p, (i, fault) in zip(found, sorted(faults.items()), strict=True):
        assert p.location.line == RULE_LINE + i, p.format()
        assert p.location.path.startswith(f"$.spec.rules[{i}]"), p.format()
        assert fault.message in p.message, (fault.name, p.format())
    assert found == sorted(found, key=lambda p: p.location)


SOME_FAULTS = {0: FAULTS[0], 1: FAULTS[7], 2: FAULTS[5], 3: FAULTS[6]}


def test_a_custom_resource_reports_the_same_set_by_name_and_json_path() -> None:
    text = policy(SOME_FAULTS, 4)
    from_file = problems_of(text)
    obj = yaml.safe_load(text)
    cr = validate([document_from_object(obj)])
    assert len(cr) == len(SOME_FAULTS), [p.format() for p in cr]
    assert [(p.location.path, p.message) for p in cr] == [(p.location.path, p.message) for p in from_file]
    assert [str(p.location) for p in cr][:1] == [
        "QoSPolicy/t $.spec.rules[0].when['node.memory.usage_percent'].gte"
    ]
    with pytest.raises(PolicyError) as exc:
        build_policy([document_from_object(obj)], REFERENCE_NODE)
    assert [(p.location.path, p.message) for p in exc.value.problems] == [
        (p.location.path, p.message) for p in cr
    ]


def test_a_hot_reload_reports_the_same_set_and_keeps_the_running_generation(tmp_path: Path) -> None:
    f = tmp_path / "team.yaml"
    f.write_text(policy({}, 4))
    reloader = Reloader(ReloadConfig(files=(f,), builtin=False))
    first = reloader.observe_node(REFERENCE_NODE)
    assert first is not None and first.result == "loaded", first
    f.write_text(policy(SOME_FAULTS, 4))
    outcome = reloader.request("file")
    assert outcome is not None and outcome.result == "failed"
    want = [(p.location.line, p.location.path, p.message) for p in problems_of(policy(SOME_FAULTS, 4))]
    assert [(p.location.line, p.location.path, p.message) for p in outcome.problems] == want
    assert len(want) == len(SOME_FAULTS)
    assert outcome.generation == 1 and reloader.engine is not None


# ---------------------------------------------------------------- qosd validate, as a user runs it

CLI_CASES = [
    pytest.param(
        """
        rules:
          - name: a
            when: {node.memory.usage_percent: {gte: "70"}}
            then: {notify: {}}
          - name: b
            when: {node.cpu.usage_percent: {gte: 70}}
            then: {setCgroup: {target: {class: be}, values: {cpu.sharez: 2}}}
          - name: c
            when: {node.memory.usage_percent: {gte: 90}}
            then: {evict: {victims: {classes: [nobody]}, orderBy: [pod.memory.rss_bites]}}
        """,
        [
            ('"70"', 'expected a number, got the string "70"'),
            ("cpu.sharez", "cgroup file 'cpu.sharez' is neither built in nor declared"),
            ("nobody", "class 'nobody' is not defined"),
            ("rss_bites", "orderBy key 'pod.memory.rss_bites' names no pod fact"),
        ],
        id="schema-beside-cgroup-file-class-and-order-key",
    ),
    pytest.param(
        # A class the schema refuses is still a class: no "class 'mine' is not defined" after it.
        """
        classes:
          - {name: mine, match: 7}
        rules:
          - name: a
            when: {node.memory.usage_percent: {gte: 90}}
            then: {evict: {victims: {classes: [mine]}}}
        """,
        [("match: 7", "expected a list, got the number 7")],
        id="refused-class-is-not-undefined",
    ),
    pytest.param(
        # A refused `when` does not make its clearWhen and samples "need a when".
        """
        rules:
          - name: a
            when: 5
            clearWhen: {node.memory.usage_percent: {lte: 60}}
            samples: {fire: 2, clear: 2}
            then: {notify: {}}
          - name: b
            when: {node.memory.usage_percent: {gte: 90}}
            then: {notify: {reason: 5}}
        """,
        [
            ("when: 5", "expected a mapping, got the number 5"),
            ("reason: 5", "expected a string, got the number 5"),
        ],
        id="refused-when-no-follow-on",
    ),
    pytest.param(
        # A declared cgroup file whose declaration is refused: writing it is not "neither built in
        # nor declared"; a typo of a built-in file next to it still is.
        """
        cgroup:
          files:
            - {name: cpu.foo, values: 12}
        rules:
          - name: a
            when: {node.cpu.usage_percent: {gte: 70}}
            then: {setCgroup: {target: {class: be}, values: {cpu.foo: 2, cpu.sharez: 2}}}
        """,
        [
            ("values: 12", "expected a mapping, got the number 12"),
            ("cpu.sharez", "cgroup file 'cpu.sharez' is neither built in nor declared"),
        ],
        id="refused-declared-file",
    ),
    pytest.param(
        # The reclaim section a publish action reads is refused: the action is not blamed for it.
        """
        reclaim:
          cpu: {policy: usage, publishAs: 5}
        rules:
          - name: a
            when: {node.cpu.usage_percent: {lte: 50}}
            then: {publish: {resource: cpu}}
          - name: b
            for: 99999999h
            when: {node.cpu.usage_percent: {gte: 90}}
            then: {notify: {}}
        """,
        [
            ("publishAs: 5", "expected a string, got the number 5"),
            ("for: 99999999h", "duration '99999999h' is longer than qosd accepts"),
        ],
        id="refused-reclaim-and-a-duration",
    ),
    pytest.param(
        """
        rules:
          - name: a
            when: {node.memory.usage_percent: {gte: 90}}
            cooldown: 99999999h
            then: {notify: {}}
          - name: b
            unset: [then.evict.nothing]
            when: {node.memory.usage_percent: {gte: 90}}
            then: {notify: {reason: 5}}
          - name: c
            when: {node.cpu.usage_percent: {gte: 90}}
            then: {setCgroup: {target: {class: nobody}, values: {cpu.shares: 2}}}
        """,
        [
            ("cooldown: 99999999h", "duration '99999999h' is longer than qosd accepts"),
            ("then.evict.nothing", "then.evict has no field 'nothing' to unset"),
            ("reason: 5", "expected a string, got the number 5"),
            ("nobody", "class 'nobody' is not defined"),
        ],
        id="duration-unset-schema-and-reference",
    ),
]


@pytest.mark.parametrize(("spec", "expected"), CLI_CASES)
def test_qosd_validate_reports_every_error_of_a_file(
    tmp_path: Path, spec: str, expected: list[tuple[str, str]]
) -> None:
    """Text on stderr (file:line:col: error: ...), JSON on stdout with line and path, exit 1, every
    error once, in file order, at the line that holds it."""
    body = textwrap.dedent(spec).strip("\n")
    f = tmp_path / "team.yaml"
    f.write_text(policy_text(body if body.startswith("classes:") else CLASSES + body))
    lines = f.read_text().splitlines()
    want = [(next(n for n, t in enumerate(lines, 1) if marker in t), message) for marker, message in expected]
    text = qosd_in_process("validate", "--no-builtin", str(f))
    assert text.returncode == 1 and text.stdout == "", text.stderr
    heads = [ln for ln in text.stderr.splitlines() if ": error: " in ln]
    assert len(heads) == len(want) and all(h.startswith(f"{f}:") for h in heads), text.stderr
    machine = qosd_in_process("validate", "--no-builtin", "-o", "json", str(f))
    assert machine.returncode == 1
    report = json.loads(machine.stdout)
    found = [(p["line"], p["message"]) for p in report["problems"]]
    assert len(found) == len(want), text.stderr
    for (line, message), (want_line, needle) in zip(found, want, strict=True):
        assert line == want_line and needle in message, text.stderr
    assert [p["line"] for p in report["problems"]] == sorted(p["line"] for p in report["problems"])
    assert all(p["path"].startswith("$.spec.") for p in report["problems"])
    assert report["valid"] is False and report["summary"].startswith(f"{len(want)} error")


@pytest.mark.parametrize(
    "selector",
    [
        "{matchExpressions: [{key: qosd.io/profile, operator: In, values: true}]}",
        "{matchExpressions: [{key: qosd.io/profile, operator: NotIn, values: {a: 1}}]}",
        "{matchExpressions: 5, matchLabels: [1]}",
        "{matchExpressions: [5], matchLabels: {qosd.io/profile: [1]}}",
    ],
)
def test_a_refused_node_selector_is_reported_not_enumerated(selector: str) -> None:
    """Found by the fuzz harness once validate went on past a schema error: the node variants were
    enumerated from a selector whose values the schema refused (``'bool' object is not iterable``)."""
    docs = parse_documents(policy_text(f"nodeSelector: {selector}\n" + CLASSES), "team.yaml")
    found = validate([*load_documents([]), *docs])
    assert found and all(p.location.source == "team.yaml" for p in found), [p.format() for p in found]
    assert all(p.location.path.startswith("$.spec.nodeSelector") for p in found)
