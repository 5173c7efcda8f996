"""Per-NUMA cgroup memory from ``memory.numa_stat``: the parser, the collector's two facts, and
the real kernel file.

Issue 15: the memory guard's ``numa.memory.reclaimed_usage_bytes`` and the NUMA victim filter's
pod ``numa.<id>.memory_usage_bytes`` were declared and never collected, so in ``qosd run`` the
guard gave no advice and every candidate stayed. The samples below are in the kernel's formats
(v1: ``mem_cgroup_numa_stat_show``, pages; v2: ``memory_numa_stat_show``, bytes). The collector
tests use a temporary tree with the kernel's file names; the last test reads a real v1 cgroup.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.config.pipeline import build_policy, load_documents
from engine.sources.cgroupfs import NUMA_LINES, parse_numa_stat
from engine.sources.collector import NodeCollector
from engine.sources.standalone import StandaloneConfig, StandaloneSource
from tests.builders import snapshot
from tests.realcgroup import real_subtree
from tests.test_collectors import PAGE, Clock, layout_of, procfs_tree, sysfs_tree, v1_cgroup, v1_root, write

V1_TWO_NODES = """\
total=300 N0=100 N1=200
file=120 N0=20 N1=100
anon=180 N0=80 N1=100
unevictable=0 N0=0 N1=0
hierarchical_total=1300 N0=600 N1=700
hierarchical_file=500 N0=100 N1=400
hierarchical_anon=800 N0=500 N1=300
hierarchical_unevictable=0 N0=0 N1=0
"""
V2_TWO_NODES = """\
anon N0=4096000 N1=8192
file N0=1000 N1=2000
kernel_stack N0=16384 N1=0
shmem N0=0 N1=0
file_mapped N0=500 N1=0
"""

CASES = [
    # (name, text, version, expected bytes per node)
    ("v1 hierarchical_total in pages", V1_TWO_NODES, 1, {0: 600 * PAGE, 1: 700 * PAGE}),
    ("v2 anon + file in bytes", V2_TWO_NODES, 2, {0: 4096000 + 1000, 1: 8192 + 2000}),
    ("missing file", None, 1, {}),
    ("missing file v2", None, 2, {}),
    ("empty file", "", 2, {}),
    ("v1 without the hierarchical line (no guess)", "total=3 N0=3\nanon=3 N0=3\n", 1, {}),
    ("v2 without the file line (no guess)", "anon N0=4096\n", 2, {}),
    (
        "unexpected lines and tokens are ignored",
        "weird line\nhierarchical_total=9 N0=4 X=1 N1=5 Nx=3\nfoo=1 N0=1\n",
        1,
        {0: 4 * PAGE, 1: 5 * PAGE},
    ),
    ("v1 node without a value", "hierarchical_total=9 N0= N1=9\n", 1, {1: 9 * PAGE}),
    ("v2 node with a value in one line only", "anon N0=10 N1=20\nfile N0=1\n", 2, {0: 11}),
    ("v2 node with a malformed value", "anon N0=10 N1=-5\nfile N0=1 N1=2\n", 2, {0: 11}),
]


@pytest.mark.parametrize(("name", "text", "version", "expected"), CASES, ids=[c[0] for c in CASES])
def test_parse_numa_stat(name: str, text: str | None, version: int, expected: dict[int, int]) -> None:
    assert parse_numa_stat(text, version, PAGE) == expected


GUARD_AND_NUMA_EVICT = """\
apiVersion: qosd.io/v1alpha1
kind: QoSPolicy
metadata: {name: numa}
spec:
  classes:
    - name: be
      match: [{labels: {qos: be}}]
  rules:
    - name: guard
      then: {memoryGuard: {cgroup: kubepods/besteffort}}
    - name: numa-evict
      when: {numa.memory.free_bytes: {lt: 1}}
      then: {evict: {victims: {classes: [be], numaScoped: true, minNumaUsageRatio: 0.001}}}
"""
NEITHER = """\
apiVersion: qosd.io/v1alpha1
kind: QoSPolicy
metadata: {name: plain}
spec:
  rules:
    - name: evict
      when: {node.memory.free_bytes: {lt: 1}}
      then: {evict: {victims: {maxPriority: 0}}}
"""


def policy_of(tmp_path: Path, text: str) -> object:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    return build_policy(load_documents([path], builtin=False), snapshot().node)


def fake_node(tmp_path: Path) -> tuple[Path, NodeCollector]:
    """A v1 tree with two workloads and the reclaim root, each with a memory.numa_stat."""
    cg = v1_root(tmp_path)
    for rel in ("qosd-demo/a", "qosd-demo/b"):
        v1_cgroup(cg, rel, 0)
        write(cg, f"memory/{rel}/memory.numa_stat", V1_TWO_NODES)
    write(cg, "memory/kubepods/besteffort/memory.numa_stat", V1_TWO_NODES.replace("=600", "=6000"))
    fs = layout_of(cg)
    clock = Clock()
    collector = NodeCollector(
        StandaloneSource(fs, StandaloneConfig()),
        fs,
        procfs=procfs_tree(tmp_path),
        sysfs=sysfs_tree(tmp_path),
        clock=clock,
        monotonic=clock,
        page_size=PAGE,
    )
    return cg, collector


def test_the_collector_gives_both_facts_when_the_policy_reads_them(tmp_path: Path) -> None:
    _, collector = fake_node(tmp_path)
    collector.use_policy(policy_of(tmp_path, GUARD_AND_NUMA_EVICT))  # type: ignore[arg-type]
    snap = collector.collect()
    assert {nid: f.get("memory.reclaimed_usage_bytes") for nid, f in snap.metrics.numa.items()} == {
        0: float(6000 * PAGE),
        1: float(700 * PAGE),
    }
    for uid in ("qosd-demo/a", "qosd-demo/b"):
        pod = snap.metrics.pods[uid]
        assert (pod["numa.0.memory_usage_bytes"], pod["numa.1.memory_usage_bytes"]) == (
            600 * PAGE,
            700 * PAGE,
        )


def test_without_such_rules_neither_fact_is_collected(tmp_path: Path) -> None:
    _, collector = fake_node(tmp_path)
    collector.use_policy(policy_of(tmp_path, NEITHER))  # type: ignore[arg-type]
    snap = collector.collect()
    assert all("memory.reclaimed_usage_bytes" not in f for f in snap.metrics.numa.values())
    assert all(not any(k.startswith("numa.") for k in f) for f in snap.metrics.pods.values())


def test_a_missing_numa_stat_gives_no_fact(tmp_path: Path) -> None:
    cg, collector = fake_node(tmp_path)
    (cg / "memory/kubepods/besteffort/memory.numa_stat").unlink()
    (cg / "memory/qosd-demo/a/memory.numa_stat").unlink()
    collector.use_policy(policy_of(tmp_path, GUARD_AND_NUMA_EVICT))  # type: ignore[arg-type]
    snap = collector.collect()
    assert all("memory.reclaimed_usage_bytes" not in f for f in snap.metrics.numa.values())
    assert "numa.0.memory_usage_bytes" not in snap.metrics.pods["qosd-demo/a"]
    assert snap.metrics.pods["qosd-demo/b"]["numa.0.memory_usage_bytes"] == 600 * PAGE


def test_a_real_v1_cgroup_numa_stat_adds_up_to_the_kernels_total(tmp_path: Path) -> None:
    """A process in a fresh test cgroup (``app``) touches 32 MiB and waits. The collector's per-node
    bytes add up to the kernel's hierarchical_total= line times the page size, read right after
    from the same file: for ``app`` as the reclaim root, and for the subtree's top as the pod (the
    standalone source's workload), whose only process is in its child."""
    touch = "import sys,time; b=bytearray(32<<20); b[::4096]=b'x'*len(b[::4096]); print(1,flush=True); sys.stdin.read()"
    with real_subtree(children=("app",), sleeper=None) as tree:
        proc = tree.spawn("app", [sys.executable, "-c", touch], stdin=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"1"
        rel = f"{tree.name}/app"
        source = StandaloneSource(tree.layout, StandaloneConfig(roots=(tree.name,)))
        collector = NodeCollector(source, tree.layout)
        guard = GUARD_AND_NUMA_EVICT.replace("kubepods/besteffort", rel)
        collector.use_policy(policy_of(tmp_path, guard))  # type: ignore[arg-type]
        snap = collector.collect()

        def kernel_total(rel_dir: str) -> int:
            text = tree.read("memory", rel_dir, "memory.numa_stat")
            line = next(ln for ln in text.splitlines() if ln.startswith("hierarchical_total="))
            return int(line.split()[0].partition("=")[2]) * os.sysconf("SC_PAGE_SIZE")

        # the reclaim root: the process's own cgroup
        total = kernel_total("app")
        assert total >= 32 << 20
        reclaimed = [f.get("memory.reclaimed_usage_bytes") for f in snap.metrics.numa.values()]
        assert None not in reclaimed and sum(reclaimed) == total  # type: ignore[arg-type]
        # the pod: the subtree's top, whose process is in its child (so only hierarchical_ counts it)
        pod = snap.metrics.pods[tree.name]
        per_pod = [v for k, v in pod.items() if k.startswith("numa.") and k.endswith(".memory_usage_bytes")]
        assert len(per_pod) == len(snap.metrics.numa) and sum(per_pod) == kernel_total("") >= total


def _reference_numa_stat(text: str | None, version: int, page_size: int) -> dict[int, int]:
    """The plain reading the fast parser must agree with: split every line, take the first line of
    each wanted name, sum its N<id>= tokens; a node missing from a line or malformed is left out."""
    if text is None:
        return {}
    wanted = NUMA_LINES[version]
    sep = "=" if version == 1 else " "
    lines: dict[str, str] = {}
    for line in text.split("\n"):
        name, _, rest = line.partition(sep)
        lines.setdefault(name, rest)
    if any(name not in lines for name in wanted):
        return {}
    per_line = []
    bad: set[int] = set()
    for name in wanted:
        values = {}
        for token in lines[name].split():
            node, eq, value = token.partition("=")
            if eq and node[:1] == "N" and node[1:].isdigit():
                if value.isdigit():
                    values[int(node[1:])] = int(value)
                else:
                    bad.add(int(node[1:]))
        per_line.append(values)
    common = set.intersection(*(set(v) for v in per_line))
    bad |= set.union(*(set(v) for v in per_line)) - common
    unit = page_size if version == 1 else 1
    return {nid: sum(v[nid] for v in per_line) * unit for nid in common if nid not in bad}


_NAMES = st.sampled_from(
    ["total", "file", "anon", "hierarchical_total", "hierarchical_file", "file_mapped", "kernel_stack", "x"]
)
_TOKENS = st.one_of(
    st.builds(lambda n, v: f"N{n}={v}", st.integers(0, 3), st.integers(0, 10**6)),
    st.sampled_from(["N1=", "N0=-3", "Nx=1", "X=2", "N2=abc"]),
)


@settings(max_examples=300, deadline=None)
@given(
    version=st.sampled_from([1, 2]),
    lines=st.lists(st.tuples(_NAMES, st.lists(_TOKENS, max_size=4)), max_size=8),
)
def test_parse_numa_stat_agrees_with_a_plain_reading(
    version: int, lines: list[tuple[str, list[str]]]
) -> None:
    """The parser finds its lines with str.find (it runs for every pod on its memory turn); whatever
    the lines and their order, it must give what splitting every line gives."""
    sep = "=" if version == 1 else " "
    text = "".join(f"{name}{sep}{' '.join(tokens)}\n" for name, tokens in lines)
    assert parse_numa_stat(text, version, PAGE) == _reference_numa_stat(text, version, PAGE)
