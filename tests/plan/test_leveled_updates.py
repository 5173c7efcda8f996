"""Leveled cgroup updates: the order of writes keeps every parent at least as loose as its children
at every step, as Koordinator's resourceexecutor LeveledUpdateBatch does (koordinator.md §5.5).

memory.min and memory.low are protections: a child's is honoured only up to its parent's, so a
parent must never drop below a child, even between two writes. CPU quota and memory limits are
limits: a child above its parent is refused (EINVAL on cgroup v1). Both merge the same way: larger
first top-down, the real value bottom-up, with -1 / max as unlimited. The property test applies
the planned writes one at a time to a tree of kube-QoS, pod and container cgroups and checks the
invariant after each one.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.plan.cgroups import Desired, order_writes

# kubepods -> burstable -> pods -> containers: the depths Koordinator levels (qos, pod, container).
TREE = {
    "kubepods": None,
    "kubepods/burstable": "kubepods",
    "kubepods/burstable/poda": "kubepods/burstable",
    "kubepods/burstable/poda/c1": "kubepods/burstable/poda",
    "kubepods/burstable/poda/c2": "kubepods/burstable/poda",
    "kubepods/burstable/podb": "kubepods/burstable",
    "kubepods/burstable/podb/c1": "kubepods/burstable/podb",
    "kubepods/podg": "kubepods",
}
CHILDREN: dict[str, list[str]] = {}
for _path, _parent in TREE.items():
    if _parent is not None:
        CHILDREN.setdefault(_parent, []).append(_path)

FILES = ("memory.min", "memory.low", "cpu.cfs_quota_us", "memory.high")
UNLIMITED = {"memory.min": None, "memory.low": None, "cpu.cfs_quota_us": "-1", "memory.high": "max"}


def _amount(file: str, text: str) -> float:
    return float("inf") if text in ("-1", "max") else float(text)


def _consistent(file: str, raw: dict[str, int | None]) -> dict[str, str]:
    """Values for every cgroup with each parent >= each child (None: unlimited where the file has
    one), made so bottom-up from arbitrary draws."""
    out: dict[str, float] = {}
    for path in sorted(TREE, key=lambda p: -p.count("/")):
        own = raw[path]
        value = float("inf") if own is None and UNLIMITED[file] else float(own or 0)
        for child in CHILDREN.get(path, []):
            value = max(value, out[child])
        out[path] = value
    unlimited = UNLIMITED[file] or "0"
    return {p: unlimited if v == float("inf") else str(int(v)) for p, v in out.items()}


def _violations(file: str, state: dict[str, str]) -> list[str]:
    return [
        f"{parent} {state[parent]} < {path} {state[path]}"
        for path, parent in TREE.items()
        if parent is not None and _amount(file, state[parent]) < _amount(file, state[path])
    ]


values = st.one_of(st.none(), st.integers(0, 8).map(lambda n: n * 1_000_000))
state = st.fixed_dictionaries({path: values for path in TREE})


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(FILES), state, state)
def test_no_parent_is_ever_tighter_than_a_child(
    file: str, before_raw: dict[str, int | None], after_raw: dict[str, int | None]
) -> None:
    before = _consistent(file, before_raw)
    after = _consistent(file, after_raw)
    observed = {path: {file: value} for path, value in before.items()}
    desired = [Desired(path, file, value) for path, value in after.items()]
    current = dict(before)
    for write in order_writes(desired, observed):
        current[write.path] = write.value
        assert _violations(file, current) == [], f"after writing {write}"
    assert current == after


@pytest.mark.parametrize("file", ["memory.min", "memory.low"])
def test_a_protection_that_decreases_is_written_children_first(file: str) -> None:
    """The issue's case: memory.min/low going down reach the container, then the pod, then the QoS
    directory; going up, the QoS directory first."""
    paths = ["kubepods/burstable", "kubepods/burstable/poda", "kubepods/burstable/poda/c1"]
    high = {p: {file: "4000000"} for p in paths}
    down = [Desired(p, file, "1000000") for p in paths]
    assert [w.path for w in order_writes(down, high)] == list(reversed(paths))
    low = {p: {file: "1000000"} for p in paths}
    up = [Desired(p, file, "4000000") for p in paths]
    assert [w.path for w in order_writes(up, low)] == paths


def test_an_unlimited_quota_goes_to_the_parent_first_and_leaves_it_last() -> None:
    """cfs quota -1 is the loosest value: lifting the limit goes parent first, setting one children
    first (Koordinator's merge: -1 counts as +inf)."""
    paths = ["kubepods/besteffort", "kubepods/besteffort/poda", "kubepods/besteffort/poda/c1"]
    limited = {p: {"cpu.cfs_quota_us": "200000"} for p in paths}
    lift = [Desired(p, "cpu.cfs_quota_us", "-1") for p in paths]
    assert [w.path for w in order_writes(lift, limited)] == paths
    unlimited = {p: {"cpu.cfs_quota_us": "-1"} for p in paths}
    limit = [Desired(p, "cpu.cfs_quota_us", "200000") for p in paths]
    assert [w.path for w in order_writes(limit, unlimited)] == list(reversed(paths))
