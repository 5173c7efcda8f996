"""Every schema and semantic check, fed a bad document: the message and its line:col are asserted.

Each case is a small spec body in policy.yaml; a second document, base.yaml, supplies the classes and
pools the case does not care about (entries merge across documents by name). The header is 4 lines,
so spec body line N is file line N + 4.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.config.errors import Problem
from engine.config.pipeline import load_documents, validate
from tests.conftest import policy_text

BASE = """\
classes:
  - name: be
    match: [{labels: {q: be}}]
    cpu: {policy: reclaimed, pool: reclaim}
  - name: sys
    protected: true
    match: [{labels: {q: sys}}]
pools:
  - {name: reserve, cpus: {count: 2}}
  - {name: reclaim, size: {remainder: true}}
"""


def doc(extra: str) -> str:
    return policy_text(extra or "priority: 1\n")


def check(tmp_path: Path, extra: str) -> list[Problem]:
    (tmp_path / "base.yaml").write_text(policy_text(BASE, name="base"), encoding="utf-8")
    (tmp_path / "policy.yaml").write_text(doc(extra), encoding="utf-8")
    return validate(load_documents([tmp_path], builtin=False))


# (case id, spec body appended to BASE, expected message fragment, expected hint fragment, line, col)
CASES = [
    # ---- schema
    (
        "unknown field",
        "rules:\n  - name: r\n    when: {all: [{node.memory.usage_percent: {gte: 70}}]}\n    then: {notify: {}}\n    fro: 10s\n",
        "unknown field 'fro'",
        "did you mean 'for'?",
        9,
        7,
    ),
    (
        "missing name",
        "rules:\n  - then: {notify: {}}\n",
        "missing required field 'name'",
        "entries merge",
        6,
        7,
    ),
    (
        "threshold as string",
        "rules:\n  - name: r\n    when: {node.memory.usage_percent: {gte: '90'}}\n    then: {notify: {}}\n",
        'expected a number, got the string "90"',
        "write 90 without quotes",
        7,
        47,
    ),
    ("enum typo", "mode: audt\n", '"audt" is not one of enforce, audit', "did you mean 'audit'?", 5, 9),
    (
        "bad duration",
        "rules:\n  - name: r\n    for: 10 minutes\n    then: {notify: {}}\n",
        "is not valid here: A Go-style duration",
        "",
        7,
        12,
    ),
    (
        "two actions in one item",
        "rules:\n  - name: r\n    then: [{notify: {}, taint: {key: k, effect: NoSchedule}}]\n",
        "only one of notify, taint may be given here",
        "split them",
        7,
        14,
    ),
    (
        "bad condition key",
        "rules:\n  - name: r\n    when: {All: [{node.memory.usage_percent: {gte: 1}}]}\n    then: {notify: {}}\n",
        "'All' is neither all/any/not nor a fact name",
        "qosd schema facts --names",
        7,
        14,
    ),
    (
        "percent out of range",
        "rules:\n  - name: r\n    then: {suppress: {class: be, thresholdPercent: 150}}\n",
        "150 is greater than the maximum of 100",
        "",
        7,
        54,
    ),
    (
        "boolean as number",
        "classes:\n  - name: x\n    evictionPriority: true\n",
        "expected an integer, got the boolean true",
        "true/false is not a number",
        7,
        25,
    ),
    (
        "bad cpuset list",
        "pools:\n  - {name: p, cpus: {list: '0-3;5'}}\n",
        "is not valid here: A cpuset list",
        "",
        6,
        30,
    ),
    # ---- references
    (
        "default class missing",
        "defaultClass: bee\n",
        "class 'bee' is not defined",
        "did you mean 'be'?",
        5,
        17,
    ),
    (
        "class pool missing",
        "classes:\n  - name: x\n    cpu: {pool: shar}\n",
        "pool 'shar' is not defined",
        "defined pools: reserve, reclaim",
        7,
        19,
    ),
    (
        "class requires missing enhancement",
        "classes:\n  - name: x\n    cpu: {requires: [numa_bind]}\n",
        "enhancement 'numa_bind' is not defined",
        "",
        7,
        24,
    ),
    (
        "evict victim class missing",
        "rules:\n  - name: r\n    then: {evict: {victims: {classes: [bee]}}}\n",
        "class 'bee' is not defined",
        "did you mean 'be'?",
        7,
        42,
    ),
    (
        "suppress class missing",
        "rules:\n  - name: r\n    then: {suppress: {class: nope}}\n",
        "class 'nope' is not defined",
        "",
        7,
        32,
    ),
    (
        "setCgroup pool missing",
        "rules:\n  - name: r\n    then: {setCgroup: {target: {pool: nope}, values: {cpu.shares: 2}}}\n",
        "pool 'nope' is not defined",
        "",
        7,
        41,
    ),
    ("before missing", "classes:\n  - name: x\n    before: nope\n", "class 'nope' is not defined", "", 7, 15),
    (
        "class fact for missing class",
        "rules:\n  - name: r\n    when: {class.nope.cpu.satisfaction: {lt: 0.5}}\n    then: {notify: {}}\n",
        "refers to class 'nope', which no document defines",
        "classes defined: be, sys",
        7,
        14,
    ),
    # ---- facts and operators
    (
        "unknown fact",
        "rules:\n  - name: r\n    when: {node.memory.usage_pct: {gte: 70}}\n    then: {notify: {}}\n",
        "unknown fact 'node.memory.usage_pct'",
        "did you mean 'node.memory.usage_percent'",
        7,
        14,
    ),
    (
        "string fact with order op",
        "rules:\n  - name: r\n    when: {pod.class: {gt: 3}}\n    then: {notify: {}}\n",
        "'pod.class' is a string; gt only applies to numeric facts",
        "use eq, ne or in",
        7,
        30,
    ),
    (
        "numeric fact compared with a string",
        "rules:\n  - name: r\n    when: {pod.priority: {in: ['100']}}\n    then: {notify: {}}\n",
        "'pod.priority' is a number but in compares it with \"100\"",
        "without quotes",
        7,
        29,
    ),
    (
        "enum fact with impossible value",
        "rules:\n  - name: r\n    when: {pod.kube_qos: {eq: Gold}}\n    then: {notify: {}}\n",
        "\"Gold\" is never a value of 'pod.kube_qos'",
        "Guaranteed",
        7,
        33,
    ),
    (
        "window on a non-series fact",
        "rules:\n  - name: r\n    when: {pod.priority: {gt: 1, window: 5m}}\n    then: {notify: {}}\n",
        "has no windowed aggregates",
        "drop window/agg",
        7,
        44,
    ),
    (
        "agg without window",
        "rules:\n  - name: r\n    when: {node.cpu.usage_percent: {gt: 1, agg: max}}\n    then: {notify: {}}\n",
        "agg 'max' needs a window",
        "window: 5m",
        7,
        51,
    ),
    (
        "hysteresis without order op",
        "rules:\n  - name: r\n    when: {node.cpu.usage_percent: {eq: 1, hysteresis: 2}}\n    then: {notify: {}}\n",
        "hysteresis needs exactly one of lt, lte, gt, gte",
        "",
        7,
        58,
    ),
    (
        "mixed scopes",
        "rules:\n  - name: r\n    when: {all: [{numa.memory.free_bytes: {lt: 1}}, {pod.memory.rss_bytes: {gt: 1}}]}\n    then: {notify: {}}\n",
        "mixes per-numa and per-pod facts",
        "split it into two rules",
        7,
        7,
    ),
    (
        "clearWhen without when",
        "rules:\n  - name: r\n    clearWhen: {node.cpu.usage_percent: {lt: 1}}\n    then: {notify: {}}\n",
        "clearWhen needs a when",
        "",
        7,
        7,
    ),
    # ---- classes
    (
        "empty l3 range",
        "classes:\n  - name: x\n    resctrl: {l3Percent: [40, 10]}\n",
        "l3Percent [40, 10] is empty",
        "lowest 30%",
        7,
        17,
    ),
    (
        "shares and weight",
        "classes:\n  - name: x\n    cpu: {shares: 2, weight: 10}\n",
        "either cpu.shares or cpu.weight",
        "",
        7,
        7,
    ),
    (
        "bad knob expression",
        "classes:\n  - name: x\n    memory: {high: {expr: 'pod.requests.memory * factor'}}\n",
        "uses unknown name(s) factor",
        "pod, container, node and current",
        7,
        29,
    ),
    (
        "knob expression syntax",
        "classes:\n  - name: x\n    memory: {high: {expr: 'pod.requests.memory *'}}\n",
        "does not parse",
        "",
        7,
        29,
    ),
    (
        "oom range empty",
        "classes:\n  - name: x\n    oomPriority: {min: 10, max: 0}\n",
        "oomPriority range [10, 0) is empty",
        "",
        7,
        7,
    ),
    (
        "oom default outside",
        "classes:\n  - name: x\n    oomPriority: {min: 0, max: 100, default: 100}\n",
        "oomPriority default 100 is outside [0, 100)",
        "",
        7,
        48,
    ),
    (
        "duplicate class in one document",
        "classes:\n  - name: x\n  - name: x\n",
        "class 'x' is defined twice in this document",
        "unique name",
        7,
        13,
    ),
    # ---- enhancements
    (
        "requires and conflicts",
        "enhancements:\n  - {name: a, requires: [b], conflictsWith: [b]}\n  - {name: b}\n",
        "both requires and conflicts with b",
        "no workload",
        6,
        32,
    ),
    (
        "requires itself",
        "enhancements:\n  - {name: a, requires: [a]}\n",
        "lists itself in requires",
        "",
        6,
        28,
    ),
    (
        "requires not applicable",
        "enhancements:\n  - {name: a, appliesTo: [be, sys], requires: [b]}\n  - {name: b, appliesTo: [be]}\n",
        "applies to sys but requires 'b', which does not apply there",
        "widen appliesTo",
        6,
        50,
    ),
    (
        "requires a conflicting enhancement",
        "enhancements:\n  - {name: a, requires: [b]}\n  - {name: b, conflictsWith: [a]}\n",
        "requires 'b', but 'b' conflicts with 'a'",
        "",
        6,
        28,
    ),
    (
        "appliesTo missing class",
        "enhancements:\n  - {name: a, appliesTo: [nope]}\n",
        "class 'nope' is not defined",
        "",
        6,
        29,
    ),
    (
        "class requires enhancement that does not apply",
        "classes:\n  - name: sys2\n    cpu: {requires: [a]}\nenhancements:\n  - {name: a, appliesTo: [be]}\n",
        "class 'sys2' requires enhancement 'a', which does not apply to it",
        "add 'sys2' to the appliesTo",
        7,
        24,
    ),
    (
        "json key without jsonAnnotation",
        "enhancements:\n  - {name: a, from: {label: x, key: y}}\n",
        "key only applies to jsonAnnotation",
        "",
        6,
        39,
    ),
    (
        "jsonAnnotation without key",
        "enhancements:\n  - {name: a, from: {jsonAnnotation: x}}\n",
        "jsonAnnotation needs the key",
        "key: numa_binding",
        6,
        17,
    ),
    (
        "two source kinds",
        "enhancements:\n  - {name: a, from: {label: x, annotation: y}}\n",
        "exactly one of label, annotation, jsonAnnotation",
        "",
        6,
        17,
    ),
    (
        "range on a bool",
        "enhancements:\n  - {name: a, type: bool, range: [0, 1]}\n",
        "range only applies to number or integer",
        "",
        6,
        29,
    ),
    (
        "effect type mismatch",
        "enhancements:\n  - {name: a, type: string, effect: {set: cpu.numaBinding}}\n",
        "cpu.numaBinding takes a bool, but enhancement 'a' yields a string",
        "type: bool",
        6,
        45,
    ),
    (
        "effect value mismatch",
        "enhancements:\n  - {name: a, effect: {set: oomPriority, value: high}}\n",
        'oomPriority takes an integer or number, not "high"',
        "",
        6,
        51,
    ),
    (
        "equals on a number",
        "enhancements:\n  - {name: a, type: number, equals: 'yes'}\n",
        "equals only applies to bool enhancements",
        "",
        6,
        39,
    ),
    (
        "values on a bool",
        "enhancements:\n  - {name: a, type: bool, values: [x]}\n",
        "values only applies to string enhancements",
        "",
        6,
        29,
    ),
    (
        "empty range",
        "enhancements:\n  - {name: a, type: number, range: [5, 1]}\n",
        "range [5, 1] is empty",
        "",
        6,
        31,
    ),
    # ---- pools
    (
        "overlapping static cpus",
        "pools:\n  - {name: a, cpus: {list: '0-3'}}\n  - {name: b, cpus: {list: '3-5'}}\n",
        "static pools 'a' and 'b' both claim CPU 3",
        "must not overlap",
        7,
        30,
    ),
    (
        "cpus beyond the node",
        "pools:\n  - {name: a, cpus: {list: '14-17'}}\n",
        "names CPUs [16, 17] that node",
        "nodeSelector",
        6,
        30,
    ),
    (
        "static count beyond the node",
        "pools:\n  - {name: a, cpus: {count: 20}}\n",
        "wants 20 CPUs but node",
        "",
        6,
        31,
    ),
    (
        "static total beyond the node",
        "pools:\n  - {name: a, cpus: {count: 9}}\n  - {name: b, cpus: {count: 9}}\n",
        "static pools take 20 CPUs up to 'b'",
        "",
        7,
        17,
    ),
    (
        "pool without size",
        "pools:\n  - {name: a}\n",
        "pool 'a' has neither cpus (static) nor size (dynamic)",
        "",
        6,
        7,
    ),
    (
        "pool with both",
        "pools:\n  - {name: a, cpus: {count: 1}, size: {remainder: true}}\n",
        "has both static cpus and a dynamic size",
        "",
        6,
        35,
    ),
    (
        "pool with two size modes",
        "pools:\n  - {name: a, size: {remainder: true, fromRequests: 1.0}}\n",
        "exactly one of fromRequests, remainder",
        "",
        6,
        17,
    ),
    (
        "pool min above max",
        "pools:\n  - {name: a, size: {fromRequests: 1.0, min: 8, max: 4}}\n",
        "has min 8 above max 4",
        "",
        6,
        17,
    ),
    (
        "two remainder pools",
        "pools:\n  - {name: a, size: {remainder: true}}\n",
        "only one pool can take the remainder",
        "",
        6,
        35,
    ),
    (
        "template pool with a static list",
        "pools:\n  - {name: a, template: true, cpus: {list: '0-1'}}\n",
        "a template pool cannot have a static cpu list",
        "use a count",
        6,
        27,
    ),
    # ---- reclaim and actions
    (
        "reclaim min above max",
        "reclaim:\n  cpu: {min: 8, max: 4}\n",
        "reclaim cpu min 8 is above max 4",
        "",
        6,
        16,
    ),
    (
        "reclaim steps reversed",
        "reclaim:\n  memory: {smoothing: {minStep: 5Gi, maxStep: 300Mi}}\n",
        'smoothing minStep "5Gi" is above maxStep',
        "",
        6,
        35,
    ),
    (
        "publish without publishAs",
        "rules:\n  - name: r\n    then: {publish: {resource: cpu}}\n",
        "publish 'cpu' needs spec.reclaim.cpu.publishAs",
        "",
        7,
        34,
    ),
    (
        "protected victim",
        "rules:\n  - name: r\n    then: {evict: {victims: {classes: [sys]}}}\n",
        "class 'sys' is protected",
        "protected: false",
        7,
        42,
    ),
    (
        "release above threshold",
        "rules:\n  - name: r\n    when: {node.memory.usage_percent: {gte: 70}}\n    then: {evict: {release: {lowerPercent: 70}}}\n",
        "release.lowerPercent 70 is not below the trigger threshold",
        "e.g. 68",
        8,
        46,
    ),
    (
        "empty setResctrl",
        "rules:\n  - name: r\n    then: {setResctrl: {mbPercent: 50}}\n",
        "setResctrl needs a class or a group",
        "",
        7,
        14,
    ),
    (
        "setCgroup class missing",
        "rules:\n  - name: r\n    then: {setCgroup: {target: {class: nope}, values: {cpu.shares: 2}}}\n",
        "class 'nope' is not defined",
        "",
        7,
        42,
    ),
    (
        "setResctrl class missing",
        "rules:\n  - name: r\n    then: {setResctrl: {class: nope, mbPercent: 50}}\n",
        "class 'nope' is not defined",
        "",
        7,
        34,
    ),
    (
        "setResctrl empty l3 range",
        "rules:\n  - name: r\n    then: {setResctrl: {group: g, l3Percent: [50, 50]}}\n",
        "l3Percent [50, 50] is empty",
        "",
        7,
        37,
    ),
    (
        "comparison without operator",
        "rules:\n  - name: r\n    when: {node.cpu.usage_percent: {window: 5m}}\n    then: {notify: {}}\n",
        "condition on 'node.cpu.usage_percent' has no operator",
        "use one of eq",
        7,
        14,
    ),
    (
        "string fact compared with a number",
        "rules:\n  - name: r\n    when: {pod.class: {eq: 3}}\n    then: {notify: {}}\n",
        "'pod.class' is a string but eq compares it with 3",
        "",
        7,
        30,
    ),
]


@pytest.mark.parametrize(
    ("case", "extra", "message", "hint", "line", "col"), CASES, ids=[c[0] for c in CASES]
)
def test_check_reports_message_and_position(
    tmp_path: Path, case: str, extra: str, message: str, hint: str, line: int, col: int
) -> None:
    problems = check(tmp_path, extra)
    matching = [p for p in problems if message in p.message]
    assert matching, f"{case}: expected {message!r}, got {[p.format() for p in problems]}"
    p = matching[0]
    assert hint in p.hint
    assert (p.location.line, p.location.column) == (line, col), p.format()
    assert p.location.source.endswith("policy.yaml")


def test_base_document_is_clean(tmp_path: Path) -> None:
    """The cases above fail because of their own lines, not because BASE is broken."""
    assert check(tmp_path, "") == []


def test_every_problem_of_a_file_is_reported_in_one_run(tmp_path: Path) -> None:
    extra = (
        "defaultClass: bee\n"
        "rules:\n"
        "  - name: r\n"
        "    when: {all: [{node.memory.usage_pct: {gte: 70}}, {pod.class: {gt: 3}}]}\n"
        "    then: {suppress: {class: nope}}\n"
    )
    messages = {p.message for p in check(tmp_path, extra)}
    assert {
        "class 'bee' is not defined",
        "unknown fact 'node.memory.usage_pct'",
        "class 'nope' is not defined",
    } <= messages
    assert any("gt only applies to numeric facts" in m for m in messages)


# ---- setCgroup values and targets (issue 14, defects 3 and 6): what validates must be writable.
# Each case is one setCgroup on line 7 of policy.yaml; the problem must point at the value (or the
# target path) itself.


def set_cgroup(target: str, values: str) -> str:
    return f"rules:\n  - name: r\n    then: {{setCgroup: {{target: {{path: {target}}}, values: {{{values}}}}}}}\n"


BAD_VALUES = [
    ("cpuset.cpus", '"0-1é"', "not a list of ids and ranges in ASCII digits"),
    ("cpuset.cpus", '"٠-١"', "not a list of ids and ranges in ASCII digits"),
    ("cpuset.cpus", '"0 - 1"', "not a list of ids and ranges in ASCII digits"),
    ("cpuset.cpus", '"3-1"', "runs backwards"),
    ("cpuset.cpus", '"0-99"', "names CPUs 16, 17, 18"),
    ("cpuset.mems", '"0-3"', "names NUMA nodes 2, 3 that"),
    ("cpuset.mems", '""', "an empty list"),
    ("cpu.shares", "1", "'1': it is outside [2, 262144]"),
    ("cpu.shares", "300000", "'300000': it is outside [2, 262144]"),
    ("cpu.shares", "max", "it is not a plain decimal integer"),
    ("cpu.shares", "2.5", "it is not a plain decimal integer"),
    ("cpu.shares", '"08"', "no leading zeros"),  # the kernel reads base 0: EINVAL (property test)
    ("memory.max", '"010"', "no leading zeros"),  # octal 8 bytes to the kernel
    ("memory.max", '"-0"', "no sign on 0"),
    ("cpu.weight", "20000", "'20000': it is outside [1, 10000]"),
    ("cpu.weight", "0", "'0': it is outside [1, 10000]"),
    ("cpu.idle", "2", "'2': it is outside [0, 1]"),
    ("cpu.idle", "max", "it is not a plain decimal integer"),
    ("cpu.cfs_quota_us", "500", "'500': it is outside [1000, 17592186044415]"),
    ("cpu.cfs_quota_us", "-2", "'-2': it is outside [1000"),
    ("cpu.cfs_quota_us", "1.0e+20", "outside [1000, 17592186044415]"),
    ("cpu.max", '"500 100000"', "'500 100000': quota: it is outside [1000"),
    ("cpu.max", '"max 2000000"', "period: it is outside [1000, 1000000]"),
    ("cpu.max", '"max  100000"', 'not "<quota|max> [<period>]"'),
    ("cpu.max", '"-1"', "'-1': quota: it is outside"),
    ("cpu.max.burst", "-1", "'-1': it is outside [0, 17592186044415]"),
    ("cpu.cfs_burst_us", "max", "it is not a plain decimal integer"),
    ("memory.max", "1.5", "it is not a plain decimal integer"),
    ("memory.max", '"-1"', "'-1': it is outside [0, 9223372036854775807]"),
    ("memory.max", '"1G"', "it is not a plain decimal integer"),
    ("memory.high", "-5", "'-5': it is outside [0, 9223372036854775807]"),
    ("memory.limit_in_bytes", '"1e400"', "it is not a plain decimal integer"),
    ("memory.limit_in_bytes", "1.0e+19", "outside [0, 9223372036854775807]"),
    ("memory.min", '"{{ 2 ** 70 }}"', "does not fit in 64 bits"),  # rendered first (render.py's own bound)
    ("cpu.shares", '"{{ 1 }}"', "'1': it is outside [2, 262144]"),  # checked after rendering
]


@pytest.mark.parametrize(("file", "value", "message"), BAD_VALUES, ids=[f"{f}={v}" for f, v, _ in BAD_VALUES])
def test_set_cgroup_value_the_kernel_refuses_is_located(
    tmp_path: Path, file: str, value: str, message: str
) -> None:
    extra = set_cgroup("kubepods/besteffort", f"{file}: {value}")
    problems = check(tmp_path, extra)
    matching = [p for p in problems if message in p.message]
    assert matching, f"expected {message!r}, got {[p.format() for p in problems]}"
    line = (tmp_path / "policy.yaml").read_text(encoding="utf-8").splitlines()[6]
    assert (matching[0].location.line, matching[0].location.column) == (7, line.index(value) + 1)
    assert matching[0].location.path.endswith(f".values['{file}']")


BAD_TARGETS = [
    ('"../etc"', "'.' or '..' component"),
    ('"a/../../b"', "'.' or '..' component"),
    ('"a/./b"', "'.' or '..' component"),
    ('"/sys/fs/cgroup/cpu/x"', "the path is absolute"),
    ('"/kubepods"', "the path is absolute"),
    ('"a\\0b"', "NUL byte"),
    ('"a//b"', "empty component"),
    ('"a/b/"', "empty component"),
    ('""', "the path is empty"),
    ('"a\\tb"', "control character"),
    ('"a\\nb"', "control character"),
    ('"' + "x" * 256 + '"', "longer than 255 bytes"),
]


@pytest.mark.parametrize(("target", "message"), BAD_TARGETS, ids=[t for t, _ in BAD_TARGETS])
def test_set_cgroup_target_outside_a_plain_relative_path_is_located(
    tmp_path: Path, target: str, message: str
) -> None:
    extra = set_cgroup(target, "cpu.shares: 2")
    problems = check(tmp_path, extra)
    matching = [p for p in problems if message in p.message]
    assert matching, f"expected {message!r}, got {[p.format() for p in problems]}"
    line = (tmp_path / "policy.yaml").read_text(encoding="utf-8").splitlines()[6]
    assert (matching[0].location.line, matching[0].location.column) == (7, line.index(target) + 1)
    assert matching[0].location.path.endswith(".setCgroup.target.path")


GOOD_VALUES = [
    "cpu.shares: 2",
    "cpu.shares: 262144",
    "cpu.weight: 1",
    "cpu.weight: 10000",
    "cpu.idle: 1",
    "cpu.max: max",
    'cpu.max: "max 100000"',
    'cpu.max: "50000 100000"',
    "cpu.max: 50000",
    "cpu.cfs_quota_us: -1",
    "cpu.cfs_quota_us: max",
    "cpu.cfs_quota_us: 1000",
    "cpu.cfs_burst_us: 0",
    "cpu.max.burst: 20000",
    'cpuset.cpus: "0-3,8-15"',
    'cpuset.cpus: "0-1 "',  # written stripped
    'cpuset.mems: "0-1"',
    "memory.max: max",
    "memory.max: 0",
    "memory.high: 1073741824",
    "memory.limit_in_bytes: -1",
    "memory.limit_in_bytes: max",
    "memory.limit_in_bytes: 9223372036854775807",
    "memory.low: {percent: 80, of: request}",
    'memory.min: {expr: "pod.requests.memory * 0.5"}',
    'cpu.weight: "{{ 50 * 2 }}"',
]


@pytest.mark.parametrize("values", GOOD_VALUES)
def test_set_cgroup_values_the_kernel_takes_validate(tmp_path: Path, values: str) -> None:
    assert check(tmp_path, set_cgroup('"kubepods/besteffort"', values)) == []


@pytest.mark.parametrize(
    "target", ["kubepods", "kubepods/besteffort/pod1", '"qosd demo/é-batch"', "a.b/c..d/...x"]
)
def test_set_cgroup_plain_relative_targets_validate(tmp_path: Path, target: str) -> None:
    assert check(tmp_path, set_cgroup(target, "cpu.shares: 2")) == []


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            "cpu.cfs_quota_us: 10000, cpu.cfs_burst_us: 20000",
            "CFS burst 20000 us is above the quota 10000 us",
        ),
        ('cpu.max: "5000 100000", cpu.max.burst: 5001', "CFS burst 5001 us is above the quota 5000 us"),
        ("cpu.idle: 1, cpu.shares: 2", "together with cpu.shares"),
        ("cpu.idle: 1, cpu.weight: 1", "together with cpu.weight"),
        ('cpu.idle: 1, cpu.shares: {expr: "node.cpus * 1000"}', "together with cpu.shares"),  # property test
        ('cpu.idle: {expr: "1"}, cpu.weight: 100', "together with cpu.weight"),
        # two names of one host file (found by the validate-then-run property test, session 10)
        (
            'cpu.max: "50000 100000", cpu.cfs_quota_us: -1',
            "cpu.cfs_quota_us and cpu.max both set cpu.cfs_quota_us",
        ),
        (
            "cpu.max: max, cpu.cfs_period_us: 100000",
            "cpu.cfs_period_us and cpu.max both set cpu.cfs_period_us",
        ),
        ("cpu.shares: 2, cpu.weight: 1", "cpu.shares and cpu.weight both set cpu.shares on cgroup v1"),
        ("cpu.cfs_burst_us: 1000, cpu.max.burst: 1000", "both set cpu.cfs_burst_us on cgroup v1"),
        ("memory.limit_in_bytes: 1Gi, memory.max: 2Gi", "both set memory.limit_in_bytes on cgroup v1"),
    ],
)
def test_set_cgroup_values_the_kernel_refuses_together_are_located(
    tmp_path: Path, values: str, message: str
) -> None:
    problems = check(tmp_path, set_cgroup("kubepods/besteffort", values))
    assert [p.location.path for p in problems if message in p.message] == [
        "$.spec.rules[0].then.setCgroup.values"
    ], [p.format() for p in problems]


@pytest.mark.parametrize(
    "values",
    [
        "cpu.cfs_quota_us: 10000, cpu.cfs_burst_us: 10000",
        "cpu.max: max, cpu.max.burst: 5000",
        "cpu.idle: 0, cpu.shares: 2",
        "cpu.cfs_quota_us: 10000, cpu.cfs_period_us: 100000",  # one cpu.max write on v2
    ],
)
def test_set_cgroup_values_the_kernel_takes_together_validate(tmp_path: Path, values: str) -> None:
    assert check(tmp_path, set_cgroup("kubepods/besteffort", values)) == []


@pytest.mark.parametrize("file", ["cpuset.cpus", "cpuset.mems", "cpu.idle"])
def test_a_percent_of_a_resource_cannot_size_a_file_that_holds_no_amount(tmp_path: Path, file: str) -> None:
    problems = check(tmp_path, set_cgroup("kubepods/besteffort", f"{file}: {{percent: 50, of: request}}"))
    assert [p.location.path for p in problems if "does not hold an amount" in p.message] == [
        f"$.spec.rules[0].then.setCgroup.values['{file}'].percent"
    ]


@pytest.mark.parametrize(
    ("action", "where"),
    [
        ("{memoryGuard: {cgroup: ../kubepods}}", "$.spec.rules[0].then.memoryGuard.cgroup"),
        (
            "{suppress: {class: be, policy: cpuset, cgroup: /sys/fs/cgroup/cpu/kubepods}}",
            "$.spec.rules[0].then.suppress.cgroup",
        ),
    ],
)
def test_other_actions_cgroup_paths_are_checked_like_set_cgroup_targets(
    tmp_path: Path, action: str, where: str
) -> None:
    problems = check(tmp_path, f"rules:\n  - name: r\n    then: {action}\n")
    assert [p.location.path for p in problems if "cgroup" in p.message and "path" in p.message] == [where]


@pytest.mark.parametrize(
    ("knob", "where", "message"),
    [
        ("cpu: {cfsQuota: 500}", "cpu.cfsQuota", "cpu.cfs_quota_us takes"),
        ("cpu: {burst: -1}", "cpu.burst", "cpu.cfs_burst_us takes"),
        ("memory: {high: 1.5}", "memory.high", "it is not a plain decimal integer"),
        ("memory: {limit: -2}", "memory.limit", "memory.limit_in_bytes takes"),
        ("memory: {min: max, low: 1.0e+19}", "memory.low", "outside [0, 9223372036854775807]"),
    ],
)
def test_class_knob_literals_are_checked_like_set_cgroup_values(
    tmp_path: Path, knob: str, where: str, message: str
) -> None:
    problems = check(tmp_path, f"classes:\n  - name: be\n    {knob}\n")
    assert [p.location.path for p in problems if message in p.message] == [f"$.spec.classes[0].{where}"], [
        p.format() for p in problems
    ]


@pytest.mark.parametrize(
    ("knob", "where", "message"),
    [
        # koordinator cgroup2_test.go: ConvertCPUSharesToWeight("0") and ConvertCPUWeightToShares(0,
        # 10001, -1) are errors; qosd used to clamp them and write weight 1 or shares 2 / 262144.
        ("cpu: {shares: 0}", "cpu.shares", "cpu.shares 0 is outside the kernel's range [2, 262144]"),
        ("cpu: {shares: 1}", "cpu.shares", "cpu.shares 1 is outside the kernel's range [2, 262144]"),
        ("cpu: {shares: 262145}", "cpu.shares", "cpu.shares 262145 is outside the kernel's range"),
        ("cpu: {weight: 0}", "cpu.weight", "cpu.weight 0 is outside the kernel's range [1, 10000]"),
        ("cpu: {weight: 10001}", "cpu.weight", "cpu.weight 10001 is outside the kernel's range [1, 10000]"),
        ("cpu: {weight: -1}", "cpu.weight", "cpu.weight -1 is outside the kernel's range [1, 10000]"),
        ("cpu: {shares: 1024.5}", "cpu.shares", "cpu.shares 1024.5 is not a whole number"),
    ],
)
def test_class_shares_and_weight_out_of_range_are_refused_not_clamped(
    tmp_path: Path, knob: str, where: str, message: str
) -> None:
    problems = check(tmp_path, f"classes:\n  - name: be\n    {knob}\n")
    assert [p.location.path for p in problems if message in p.message] == [f"$.spec.classes[0].{where}"], [
        p.format() for p in problems
    ]


@pytest.mark.parametrize(
    "knob", ["cpu: {shares: 2}", "cpu: {shares: 262144}", "cpu: {weight: 1}", "cpu: {weight: 10000}"]
)
def test_class_shares_and_weight_at_the_bounds_validate(tmp_path: Path, knob: str) -> None:
    assert check(tmp_path, f"classes:\n  - name: be\n    {knob}\n") == []
