"""Located errors for the rule-language primitives of issue 17: release arithmetic (rounding,
excessPercent, a strict threshold), orderBy over pod facts, class matchers on requests, the free
reclaim policy and declared cgroup files. Each case is one bad line of policy.yaml; the problem
must name it (file, line, column) with a message and a hint an engineer can act on."""

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
pools:
  - {name: reserve, cpus: {count: 2}}
  - {name: reclaim, size: {remainder: true}}
"""
# policy.yaml: 4 header lines, then the spec body from line 5


def check(tmp_path: Path, body: str) -> list[Problem]:
    (tmp_path / "base.yaml").write_text(policy_text(BASE, name="base"), encoding="utf-8")
    (tmp_path / "policy.yaml").write_text(policy_text(body), encoding="utf-8")
    return validate(load_documents([tmp_path], builtin=False))


def evict(when: str, evict_body: str) -> str:
    return f"rules:\n  - name: r\n    when: {when}\n    then:\n      evict: {evict_body}\n"


def reclaim(resource: str, body: str) -> str:
    return f"reclaim:\n  {resource}: {body}\n"


def files(*entries: str) -> str:
    return "cgroup:\n  files:\n" + "".join(f"    - {e}\n" for e in entries)


def set_cgroup(values: str) -> str:
    return f"rules:\n  - name: w\n    then: {{setCgroup: {{target: {{path: kubepods/besteffort}}, values: {{{values}}}}}}}\n"


GT50 = "{node.cpu.usage_percent: {gt: 50}}"
# (id, body, message fragment, hint fragment, line)
BAD = [
    (
        "strict threshold without exact rounding",
        evict(GT50, "{victims: {classes: [be]}, release: {resource: cpu, lowerPercent: 50}}"),
        "release.lowerPercent 50 is not below the trigger threshold node.cpu.usage_percent gt 50",
        "add release.rounding: exact",
        9,
    ),
    (
        "gte threshold is never released to, even exactly",
        evict(
            "{node.cpu.usage_percent: {gte: 50}}",
            "{victims: {classes: [be]}, release: {resource: cpu, lowerPercent: 50, rounding: exact}}",
        ),
        "is not below the trigger threshold node.cpu.usage_percent gte 50",
        "threshold - 2",
        9,
    ),
    (
        "rounding without lowerPercent",
        evict(GT50, "{victims: {classes: [be]}, release: {amount: 2, rounding: exact}}"),
        "release.rounding applies to release.lowerPercent",
        "add lowerPercent",
        9,
    ),
    (
        "excess without a target",
        evict(GT50, "{victims: {classes: [be]}, release: {excessPercent: 10}}"),
        "release.excessPercent scales a release target, but this evict action has none",
        "add release.lowerPercent or release.amount",
        9,
    ),
    (
        "orderBy names no pod fact",
        evict(GT50, "{victims: {classes: [be]}, orderBy: [-pod.memory.rss_byte]}"),
        "orderBy key '-pod.memory.rss_byte' names no pod fact",
        "did you mean 'pod.memory.rss_bytes'?",
        9,
    ),
    (
        "orderBy of a malformed resource key",
        evict(GT50, "{victims: {classes: [be]}, orderBy: [uses(nvidia.com/gpu]}"),
        "uses(nvidia.com/gpu",
        "",
        9,
    ),
    (
        "requests matcher no pod can meet",
        "classes:\n  - name: gpu\n    match: [{requests: {nvidia.com/gpu: {gt: 2, lt: 1}}}]\n",
        "requests of 'nvidia.com/gpu': no request is above 2 and below 1 at once",
        "",
        7,
    ),
    (
        "free policy with a Koordinator margin",
        reclaim("cpu", "{policy: free, reclaimThresholdPercent: 60, publishAs: x/cpu}"),
        "reclaim cpu policy free takes no reclaimThresholdPercent",
        "free.ratio",
        6,
    ),
    (
        "free of the reclaim pool for memory",
        reclaim("memory", "{policy: free, free: {of: reclaimPool}, publishAs: x/mem}"),
        "free.of reclaimPool measures the reclaim pool's CPUs",
        "of: allocatable",
        6,
    ),
    (
        "free parameters under another policy",
        reclaim("cpu", "{policy: usage, free: {ratio: 0.5}, publishAs: x/cpu}"),
        "reclaim cpu has free parameters but policy 'usage'",
        "set policy: free",
        6,
    ),
    (
        "held requests on the reclaim pool",
        reclaim("cpu", "{policy: free, free: {of: reclaimPool, heldRequests: {}}, publishAs: x/cpu}"),
        "free.heldRequests corrects node usage",
        "remove heldRequests",
        6,
    ),
    (
        "declared core file",
        files("{name: cgroup.procs, values: {min: 0, max: 1}}"),
        "cgroup file 'cgroup.procs': core cgroup files move processes",
        "",
        7,
    ),
    (
        "declared built-in file",
        files("{name: cpu.shares, values: {min: 2, max: 262144}}"),
        "cgroup file 'cpu.shares' is built in",
        "declare only files qosd does not know",
        7,
    ),
    (
        "declared under a built-in host name",
        files("{name: cpu.level, v1: cpu.shares, values: {min: 0, max: 9}}"),
        "cgroup file 'cpu.shares' is built in",
        "",
        7,
    ),
    (
        "declared twice",
        files("{name: cpu.qos_level, values: {min: -1, max: 2}}", "{name: cpu.qos_level, values: {min: 0, max: 1}}"),
        "cgroup file 'cpu.qos_level' is declared twice",
        "keep one declaration",
        8,
    ),
    (
        "declared with an empty range",
        files("{name: cpu.qos_level, values: {min: 3, max: 2}}"),
        "values.min 3 is above values.max 2",
        "",
        7,
    ),
    (
        "two declared files on one host file",
        files("{name: cpu.qos_level, values: {min: -1, max: 2}}", "{name: cpu.level, v1: cpu.qos_level, values: {min: 0, max: 1}}"),
        "cgroup v1 file 'cpu.qos_level' is already the host file of 'cpu.qos_level'",
        "",
        8,
    ),
    (
        "setCgroup of a file neither built in nor declared",
        files("{name: cpu.qos_level, values: {min: -1, max: 2}}") + set_cgroup("cpu.qos_levle: -1"),
        "cgroup file 'cpu.qos_levle' is neither built in nor declared",
        "did you mean 'cpu.qos_level'?",
        10,
    ),
    (
        "setCgroup value outside the declared range",
        files("{name: cpu.qos_level, values: {min: -1, max: 2}}") + set_cgroup("cpu.qos_level: 5"),
        "cpu.qos_level takes an integer from -1 to 2; '5': it is outside [-1, 2]",
        "the kernel would refuse it",
        10,
    ),
    (
        "setCgroup of a name no cgroup file has",
        set_cgroup("CPU.Qos: 1"),
        "'CPU.Qos' is not a cgroup file name, <controller>.<file> in lower-case ASCII",
        "",
        7,
    ),
    (
        "setCgroup value not among the declared words",
        files("{name: cpu.mode, values: {words: [on, off]}}") + set_cgroup("cpu.mode: maybe"),
        "cpu.mode takes one of \"on\", \"off\"; 'maybe': it is none of the words listed",
        "",
        10,
    ),
]


@pytest.mark.parametrize(("case", "body", "message", "hint", "line"), BAD, ids=[c[0] for c in BAD])
def test_primitive_errors_are_located(
    tmp_path: Path, case: str, body: str, message: str, hint: str, line: int
) -> None:
    problems = check(tmp_path, body)
    matching = [p for p in problems if message in p.message]
    assert matching, f"{case}: expected {message!r}, got {[p.format() for p in problems]}"
    p = matching[0]
    assert hint in p.hint, p.format()
    assert p.location.source.endswith("policy.yaml") and p.location.line == line, p.format()


GOOD = [
    ("strict threshold released exactly", evict(GT50, "{victims: {classes: [be]}, release: {resource: cpu, lowerPercent: 50, rounding: exact, excessPercent: 10}}")),
    ("order over facts and resources", evict(GT50, "{victims: {classes: [be]}, orderBy: [uses(nvidia.com/gpu), -pod.start_time_seconds, request(kubernetes.io/batch-cpu), -pod.memory.rss_bytes, pod.name]}")),
    ("requests matcher", "classes:\n  - name: gpu\n    match: [{requests: {nvidia.com/gpu: {gte: 1}, cpu: {lte: 500m}}}]\n"),
    ("free policy", reclaim("cpu", "{policy: free, free: {of: capacity, ratio: 0.5, heldRequests: {cpuManagerPolicy: static}, rounding: ceil}, smoothing: {window: 5m, aggregate: weighted}, publishAs: x/cpu}")),
    ("free of the reclaim pool", reclaim("cpu", "{policy: free, free: {of: reclaimPool, reclaimedUsage: include}, publishAs: x/cpu}")),
    ("declared files written", files("{name: cpu.qos_level, values: {min: -1, max: 2}}", "{name: memory.level, v1: memory.qos_level, v2: memory.level, values: {min: -1, max: 0, words: [max]}}") + set_cgroup("cpu.qos_level: -1, memory.level: max")),
]


@pytest.mark.parametrize(("case", "body"), GOOD, ids=[c[0] for c in GOOD])
def test_primitives_that_validate(tmp_path: Path, case: str, body: str) -> None:
    assert [p.format() for p in check(tmp_path, body)] == []


def test_an_overlay_that_changes_the_reclaim_policy_family_replaces_the_section(tmp_path: Path) -> None:
    """The base publishes with Koordinator's usage formula and its margin. An overlay switching to
    maxUsageRequest (same family) keeps the margin and publishAs; one switching to free replaces the
    whole cpu section (the margin would be refused under free), so it states its own publishAs."""
    from engine.config.pipeline import REFERENCE_NODE, build_policy

    base = BASE + "reclaim:\n  cpu: {policy: usage, reclaimThresholdPercent: 60, publishAs: x/cpu, max: 8}\n"
    (tmp_path / "base.yaml").write_text(policy_text(base, name="base"), encoding="utf-8")
    same = policy_text("priority: 5\nreclaim:\n  cpu: {policy: maxUsageRequest}\n", name="same")
    (tmp_path / "same.yaml").write_text(same, encoding="utf-8")
    cpu = build_policy(load_documents([tmp_path], builtin=False), REFERENCE_NODE).reclaim.cpu
    assert cpu is not None and (cpu.policy, cpu.threshold_percent, cpu.publish_as, cpu.max) == (
        "maxUsageRequest",
        60,
        "x/cpu",
        8.0,
    )
    other = policy_text("priority: 6\nreclaim:\n  cpu: {policy: free, publishAs: y/cpu}\n", name="other")
    (tmp_path / "other.yaml").write_text(other, encoding="utf-8")
    cpu = build_policy(load_documents([tmp_path], builtin=False), REFERENCE_NODE).reclaim.cpu
    assert cpu is not None and (cpu.policy, cpu.threshold_percent, cpu.publish_as, cpu.max) == (
        "free",
        None,
        "y/cpu",
        None,
    )
