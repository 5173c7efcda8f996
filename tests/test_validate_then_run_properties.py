"""What passes ``qosd validate`` must not fail at run time (issue 14, defects 2, 3 and 6).

Hypothesis generates quantities and durations (strings the schema's patterns admit, plain numbers,
values at and past the bounds) and setCgroup values and targets (numbers, words, lists, templates,
percents and expressions, paths with ``..``, NUL, absolute, empty and non-ASCII parts). Each policy
goes through the validate pipeline. A rejected one must carry located problems; an accepted one is
compiled and run: two ticks with their plans, and for setCgroup every planned write is applied by
the real cgroup adapter, to a temporary tree with the cgroup v2 file names and, where this machine
has a writable cgroup v1 hierarchy, to a real v1 cgroup created under the test. No exception may
escape and no write may fail.
"""

from __future__ import annotations

import itertools
import json
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from engine.adapters.cgroup import CgroupAdapter
from engine.adapters.result import OperationResult
from engine.cgroups.mounts import CgroupLayout
from engine.config.errors import Problem
from engine.config.load import Layer, parse_documents
from engine.config.pipeline import build_policy, validate
from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState
from engine.model.facts import Snapshot
from engine.model.node import NodeInfo
from engine.model.operations import WriteCgroup
from engine.model.units import parse_cpuset
from engine.plan.planner import Guards
from engine.tick import run_tick
from tests.builders import GiB, pod, snapshot
from tests.realcgroup import CONTROLLERS, Subtree, real_subtree, remove_tree
from tests.test_cgroup_adapter_v2 import make_cgroup

BE = {"tier": "be"}

# ---------------------------------------------------------------- quantities and durations

QUANTITY_PATTERN = r"\+?[0-9]{1,20}(\.[0-9]{1,6})?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei|e[0-9]{1,8})?"
DURATION_PATTERN = r"0|([0-9]{1,12}(\.[0-9]{1,4})?(ms|s|m|h)){1,3}"

quantities = st.one_of(
    st.from_regex(QUANTITY_PATTERN, fullmatch=True),
    st.sampled_from(["1e9999999", "1e400", "8Pi", "9Pi", "8Ei", "9223372036854775", "0e999", "500m", "5Gi"]),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
)
durations = st.one_of(
    st.from_regex(DURATION_PATTERN, fullmatch=True),
    st.sampled_from(["8760h", "8760h1ms", "99999999999h", "0", "1ms", "525600m"]),
)


def unit_policy(q: list[Any], d: list[str]) -> str:
    doc = {
        "apiVersion": "qosd.io/v1alpha1",
        "kind": "QoSPolicy",
        "metadata": {"name": "generated"},
        "spec": {
            "classes": [{"name": "be", "match": [{"labels": BE}]}],
            "reclaim": {
                "degradeAfter": d[0],
                "memory": {
                    "policy": "headroom",
                    "publishAs": "kubernetes.io/batch-memory",
                    "min": q[0],
                    "minReport": q[1],
                    "headroom": {"reservedForAllocate": q[2], "fallback": q[3]},
                },
            },
            "rules": [
                {
                    "name": "evict",
                    "when": {"node.memory.usage_percent": {"gte": 10}},
                    "for": d[1],
                    "cooldown": d[2],
                    "then": {
                        "evict": {
                            "victims": {"classes": ["be"]},
                            "release": {"amount": q[4]},
                            "cooldown": d[3],
                        }
                    },
                },
                {"name": "guard", "then": {"memoryGuard": {"minCriticalWatermark": q[5]}}},
                {"name": "publish", "then": {"publish": {"resource": "memory"}}},
            ],
        },
    }
    return as_yaml(doc)


_SURROGATES = re.compile(r"\\u(d[89ab][0-9a-f]{2})\\u(d[c-f][0-9a-f]{2})")


def _astral(m: re.Match[str]) -> str:
    high, low = int(m[1], 16), int(m[2], 16)
    return f"\\U{0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00):08x}"


def as_yaml(doc: Any) -> str:
    """JSON is YAML and keeps a string a string ("1e400"); only a character outside the BMP is
    spelt differently (YAML's \\U0001xxxx instead of JSON's surrogate pair)."""
    return _SURROGATES.sub(_astral, json.dumps(doc, indent=1))


def assert_located(problems: list[Problem]) -> None:
    for p in problems:
        assert p.location.line > 0 and p.location.path.startswith("$"), p.format()


def tick_twice(docs: list[Any], node: NodeInfo, snap: Snapshot) -> list[Any]:
    """Compile for ``node`` and run two ticks (the second a minute later, with the state of the
    first); the plans' operations."""
    engine = Engine(build_policy(docs, node))
    first = run_tick(engine, snap, EngineState(), Guards())
    second = run_tick(engine, replace(snap, time=snap.time + 60), first.state, Guards())
    return [*first.plan.operations, *second.plan.operations]


valid_quantities = st.one_of(
    st.from_regex(r"[0-9]{1,4}(\.[0-9]{1,3})?(m|k|Ki|M|Mi|G|Gi)?", fullmatch=True),
    st.integers(min_value=0, max_value=2**40),
    st.floats(min_value=0, max_value=1e12),
)
valid_durations = st.from_regex(r"[0-9]{1,3}(ms|s|m)", fullmatch=True)


@st.composite
def unit_values(draw: st.DrawFn) -> tuple[list[Any], list[str]]:
    """Values that are mostly valid, with at most one drawn from the wide strategies, so that about
    half the policies validate and run."""
    q = draw(st.lists(valid_quantities, min_size=6, max_size=6))
    d = draw(st.lists(valid_durations, min_size=4, max_size=4))
    wild = draw(st.integers(min_value=-1, max_value=9))
    if 0 <= wild < 6:
        q[wild] = draw(quantities)
    elif wild >= 6:
        d[wild - 6] = draw(durations)
    return q, d


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=unit_values())
def test_quantities_and_durations_that_validate_run(values: tuple[list[Any], list[str]]) -> None:
    q, d = values
    docs = parse_documents(unit_policy(q, d), "generated.yaml", Layer.FILE)
    snap = snapshot(
        memory=100 * GiB,
        node={"memory.usage_bytes": 90 * GiB, "memory.watermark_scale_factor": 10},
        pods=[pod("a", labels=BE), pod("b")],
        pod_metrics={"a": {"memory.usage_bytes": 8 * GiB}, "b": {"memory.usage_bytes": 1 * GiB}},
    )
    problems = validate(docs, snap.node)
    event("rejected by validate" if problems else "validated")
    if problems:
        assert_located(problems)
        return
    for op in tick_twice(docs, snap.node, snap):
        event(f"planned {op.kind}")


# ---------------------------------------------------------------- setCgroup values and targets

FILES = (
    "cpu.shares",
    "cpu.weight",
    "cpu.idle",
    "cpu.cfs_quota_us",
    "cpu.max",
    "cpu.cfs_burst_us",
    "cpu.max.burst",
    "cpuset.cpus",
    "cpuset.mems",
    "memory.min",
    "memory.low",
    "memory.high",
    "memory.max",
    "memory.limit_in_bytes",
)
BOUNDARIES = [0, 1, 2, 3, 999, 1000, 1001, 10000, 10001, 100000, 262144, 262145, 1000000, 1000001]
BOUNDARIES += [2**44 - 1, 2**44, 2**63 - 1, 2**63, -1, -2]

expressions = st.sampled_from(
    [
        "node.cpus * 1000",
        "'0-1é'",
        "'max'",
        "-3",
        "node.memory_bytes",
        "node.no_such",
        "2 ** 70",
        "pod.requests.memory",
    ]
).map(lambda e: {"expr": e})
knobs = st.one_of(
    st.sampled_from(BOUNDARIES),
    st.integers(min_value=-(2**66), max_value=2**66),
    st.floats(min_value=-1e20, max_value=1e20, allow_nan=False),
    st.sampled_from(
        ["max", "-1", "", " 0 ", "0", "1", "0-1", "0-1é", "0,1", "1-0", "0-3", "٠", "1G", "0x10"]
    ),
    st.sampled_from(["max 100000", "50000 100000", "500 100000", "max 999", "max  100000", "1000 1000"]),
    st.from_regex(r"[0-9 ,max\-]{0,10}", fullmatch=True),
    st.text(max_size=6),
    st.integers(min_value=-5, max_value=300000).map(lambda n: f"{{{{ {n} }}}}"),
    st.builds(
        lambda p, of: {"percent": p, "of": of},
        st.floats(min_value=0, max_value=10000),
        st.sampled_from(["request", "limit", "allocatable"]),
    ),
    expressions,
)
segments = st.one_of(
    st.sampled_from(
        ["kubepods", "besteffort", "pod1", "..", ".", "", "a b", "é", "x\0y", "x\ny", "-", "a.slice"]
    ),
    st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=5),
)
targets = st.lists(segments, min_size=1, max_size=3).map("/".join) | st.sampled_from(
    ["/sys/fs/cgroup/cpu/x", "/kubepods", "kubepods/", "/"]
)


def cgroup_policy(target: str, values: dict[str, Any]) -> str:
    doc = {
        "apiVersion": "qosd.io/v1alpha1",
        "kind": "QoSPolicy",
        "metadata": {"name": "generated"},
        "spec": {
            "rules": [{"name": "set", "then": {"setCgroup": {"target": {"path": target}, "values": values}}}]
        },
    }
    return as_yaml(doc)


def writes_of(text: str, node: NodeInfo, make_dirs: Any, adapter: CgroupAdapter) -> list[OperationResult]:
    """Validate; when valid, tick, apply the writes, observe them back, tick again and apply again
    (a steady state must not fail either). The results of every write."""
    docs = parse_documents(text, "generated.yaml", Layer.FILE)
    problems = validate(docs, node)
    event("rejected by validate" if problems else "validated")
    if problems:
        assert_located(problems)
        return []
    engine = Engine(build_policy(docs, node))
    snap = replace(snapshot(cpus=len(node.cpu_ids)), node=node)
    state = EngineState()
    results: list[OperationResult] = []
    for _ in range(2):
        tick = run_tick(engine, snap, state, Guards())
        writes = [op for op in tick.plan.operations if isinstance(op, WriteCgroup)]
        for path in {op.path for op in writes}:
            make_dirs(path)
        results += adapter.apply(writes)
        for r in results:
            event(f"write {r.status}")
        wanted: dict[str, set[str]] = {}
        for op in writes:
            wanted.setdefault(op.path, set()).add(op.file)
        snap = replace(snap, time=snap.time + 1, cgroups=adapter.observe(wanted))
        state = tick.state
    return results


def assert_no_failure(results: list[OperationResult]) -> None:
    failed = [f"{r.op.to_dict()}: {r.error}" for r in results if r.status == "failed"]
    assert failed == []


V2_NODE = NodeInfo(
    "v2-tree", {}, {"cpu": 16.0, "memory": float(64 * GiB)}, 16, 2, 2, 64 * GiB, frozenset(range(16))
)
CFS = st.integers(min_value=1000, max_value=2**44 - 1)
BYTES = st.integers(min_value=0, max_value=2**63 - 1)
percent = st.builds(
    lambda p, of: {"percent": p, "of": of},
    st.floats(min_value=0, max_value=10000),
    st.sampled_from(["request", "limit", "allocatable"]),
)
# What each file plausibly gets (literal values its format takes, percents where it holds an amount),
# or an expression, whose result only the tick can judge.
PLAUSIBLE: dict[str, st.SearchStrategy[Any]] = {
    f: s | expressions
    for f, s in {
        "cpu.shares": st.integers(min_value=2, max_value=262144) | percent,
        "cpu.weight": st.integers(min_value=1, max_value=10000) | percent,
        "cpu.idle": st.sampled_from([0, 1, "0", "1"]),
        "cpu.cfs_quota_us": st.sampled_from([-1, "max"]) | CFS | percent,
        "cpu.max": st.sampled_from(["max", "max 100000"])
        | CFS
        | st.builds("{} {}".format, CFS, st.integers(min_value=1000, max_value=1000000)),
        "cpu.cfs_burst_us": st.integers(min_value=0, max_value=2**44 - 1) | percent,
        "cpu.max.burst": st.integers(min_value=0, max_value=2**44 - 1) | percent,
        "cpuset.cpus": st.sampled_from(["0", "1", "0-1", "0,1", "1-1"]),
        "cpuset.mems": st.sampled_from(["0", "0-0"]),
        "memory.min": BYTES | st.just("max") | percent,
        "memory.low": BYTES | st.just("max") | percent,
        "memory.high": BYTES | st.just("max") | percent,
        "memory.max": BYTES | st.just("max") | percent,
        "memory.limit_in_bytes": BYTES | st.sampled_from(["-1", "max", -1]) | percent,
    }.items()
}
plain_targets = st.lists(
    st.from_regex(r"[a-z0-9][a-z0-9._-]{0,8}", fullmatch=True), min_size=1, max_size=3
).map("/".join)


@st.composite
def set_cgroups(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """A target and values that are mostly plausible, with at most one of them drawn from the wide
    strategies (bad paths, numbers, words, texts, templates, expressions), so that a good share of
    the policies validate and are written."""
    files = draw(st.lists(st.sampled_from(FILES), min_size=1, max_size=4, unique=True))
    values = {f: draw(PLAUSIBLE[f]) for f in files}
    target = draw(plain_targets)
    wild = draw(st.integers(min_value=0, max_value=2 * len(files)))
    if wild < len(files):
        values[files[wild]] = draw(knobs)
    elif wild == len(files):
        target = draw(targets)
    return target, values


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=set_cgroups())
def test_set_cgroup_values_that_validate_are_written_on_a_v2_tree(
    tmp_path: Path, case: tuple[str, dict[str, Any]]
) -> None:
    target, values = case
    root = Path(tempfile.mkdtemp(dir=tmp_path))
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids\n")
    adapter = CgroupAdapter(CgroupLayout.unified_tree(root))

    def make_dirs(path: str) -> None:
        make_cgroup(root, path)

    assert_no_failure(writes_of(cgroup_policy(target, values), V2_NODE, make_dirs, adapter))


@dataclass(frozen=True)
class V1Tree:
    tree: Subtree
    roots: dict[str, Path]
    cpus: str
    mems: str
    node: NodeInfo


@pytest.fixture(scope="module")
def v1() -> Iterator[V1Tree]:
    """A real cgroup v1 subtree for the whole module (skipped, with the reason, where this machine
    has none that is writable)."""
    with real_subtree(children=(), sleeper=None) as tree:
        roots = {c: Path(tree.layout.locate(c)[1]) for c in CONTROLLERS}  # type: ignore[index]
        cpus = (roots["cpuset"] / "cpuset.cpus").read_text().strip()
        mems = (roots["cpuset"] / "cpuset.mems").read_text().strip()
        cpu_ids, mem_ids = parse_cpuset(cpus), parse_cpuset(mems)
        assert mem_ids == frozenset(range(len(mem_ids)))  # validate checks mems against 0..n-1
        node = NodeInfo(
            "this-node", {}, {"cpu": float(len(cpu_ids))}, len(cpu_ids), len(mem_ids), 1, GiB, cpu_ids
        )
        yield V1Tree(tree, roots, cpus, mems, node)


_examples = itertools.count()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=set_cgroups())
def test_set_cgroup_values_that_validate_are_written_to_a_real_v1_cgroup(
    v1: V1Tree, case: tuple[str, dict[str, Any]]
) -> None:
    """The kernel itself judges the values."""
    target, values = case
    tree = v1.tree
    example = f"ex{next(_examples)}"
    tree.mkdir(example, v1.cpus, v1.mems)

    def make_dirs(path: str) -> None:
        # A cgroup the policy names exists with its parent's CPUs and memory nodes, as a v1 cpuset
        # child must (a fresh one is empty).
        parts = Path(path).relative_to(tree.name).parts
        for depth in range(1, len(parts) + 1):
            rel = "/".join(parts[:depth])
            if not tree.dir("cpu", rel).exists():
                tree.mkdir(rel, v1.cpus, v1.mems)

    try:
        results = writes_of(
            cgroup_policy(f"{tree.name}/{example}/{target}", values),
            v1.node,
            make_dirs,
            CgroupAdapter(tree.layout),
        )
    finally:
        for c in CONTROLLERS:
            remove_tree(v1.roots[c] / tree.name / example, v1.roots[c])
    assert_no_failure(results)
