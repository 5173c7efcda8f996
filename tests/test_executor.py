"""One operation that raises never stops the others (issue 14, defect 3, run-time half).

Whatever an adapter raises for one operation becomes a *failed* result naming the exception, and the
operations after it are still handed to their adapters, in order. Table-driven over the exception
types seen in the field (UnicodeEncodeError from a value that slipped past validation, OSErrors the
adapter did not classify, ValueError, KeyError, a plain bug) and over every adapter slot.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from engine.adapters.cgroup import CgroupAdapter
from engine.adapters.executor import NodeExecutor
from engine.adapters.fsio import BadValue, FileIO, encode_value
from engine.adapters.resctrl import ResctrlAdapter
from engine.adapters.result import OperationResult
from engine.cgroups.mounts import CgroupLayout
from engine.model.operations import EvictPod, Operation, WriteCgroup, WriteSchemata

RAISED: list[tuple[str, BaseException]] = [
    ("unicode", UnicodeEncodeError("ascii", "0-1\u00e9", 3, 4, "ordinal not in range(128)")),
    ("oserror", OSError(errno.EIO, "Input/output error")),
    ("valueerror", ValueError("invalid literal for int() with base 10: 'x'")),
    ("keyerror", KeyError("cpu.max")),
    ("bug", RuntimeError("adapter bug")),
    ("no-message", ZeroDivisionError()),
]


class Raising:
    """An adapter (cgroup, resctrl or a handler) that raises for ops marked ``boom`` and records the rest."""

    def __init__(self, exc: BaseException):
        self.exc = exc
        self.applied: list[Operation] = []

    def apply_one(self, op: Operation) -> OperationResult:
        if "boom" in repr(op):
            raise self.exc
        self.applied.append(op)
        return OperationResult(op, "applied")

    def __call__(self, op: Operation) -> OperationResult:
        return self.apply_one(op)


def plan() -> list[Operation]:
    return [
        WriteCgroup("g/a", "cpu.shares", "2", "r"),
        WriteCgroup("g/boom", "cpuset.cpus", "0-1\u00e9", "r"),
        WriteCgroup("g/a", "memory.limit_in_bytes", "268435456", "r"),
        WriteSchemata("boom", "L3:0=f", "r"),
        WriteSchemata("be", "L3:0=3", "r"),
        EvictPod("uid-boom", "ns", "boom", None, "memory pressure", "r"),
        EvictPod("uid-2", "ns", "ok", None, "memory pressure", "r"),
    ]


@pytest.mark.parametrize(("name", "exc"), RAISED, ids=[n for n, _ in RAISED])
def test_an_exception_from_any_adapter_fails_its_operation_only(name: str, exc: BaseException) -> None:
    cgroup, resctrl, kube = Raising(exc), Raising(exc), Raising(exc)
    executor = NodeExecutor(cgroup=cgroup, resctrl=resctrl, others={"evictPod": kube})  # type: ignore[arg-type]
    ops = plan()
    results = executor.apply(ops)
    assert [r.op for r in results] == ops
    statuses = ["failed" if "boom" in repr(op) else "applied" for op in ops]
    assert [r.status for r in results] == statuses
    for r in results:
        if r.status == "failed":
            assert r.error is not None and type(exc).__name__ in r.error and r.op.kind in r.error
    # Every operation after a failing one reached its adapter, in order.
    assert cgroup.applied == [ops[0], ops[2]]
    assert resctrl.applied == [ops[4]] and kube.applied == [ops[6]]


@pytest.mark.parametrize(
    ("text", "why"),
    [("0-1\u00e9", "is not ASCII"), ("1\u200b", "is not ASCII"), ("0\x001", "NUL byte"), ("\U0001f600", "is not ASCII")],
)
def test_a_value_no_kernel_file_can_hold_is_refused_before_the_file_is_opened(
    tmp_path: Path, text: str, why: str
) -> None:
    target = tmp_path / "cpuset.cpus"
    target.write_text("0-3\n")
    with pytest.raises(BadValue, match=why):
        encode_value(text, str(target))
    with pytest.raises(BadValue, match=why):
        FileIO().write(str(target), text)
    assert target.read_text() == "0-3\n"  # not truncated by an open(O_TRUNC) before the refusal


def test_the_cgroup_adapter_reports_a_non_ascii_value_as_failed_and_writes_nothing(tmp_path: Path) -> None:
    """A v1-shaped temp tree: the adapter answers failed with the file and the offending character,
    and the next operation of the same adapter is written."""
    root = tmp_path / "cg"
    for ctl in ("cpuset", "memory"):
        (root / ctl / "g").mkdir(parents=True)
    (root / "cpuset" / "g" / "cpuset.cpus").write_text("0-3\n")
    (root / "memory" / "g" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    root = root.resolve()
    layout = CgroupLayout(str(root), "v1", {"cpuset": str(root / "cpuset"), "memory": str(root / "memory")})
    executor = NodeExecutor(cgroup=CgroupAdapter(layout), resctrl=ResctrlAdapter(tmp_path / "no-resctrl"))
    bad = WriteCgroup("g", "cpuset.cpus", "0-1\u00e9", "r")
    good = WriteCgroup("g", "memory.limit_in_bytes", "268435456", "r")
    first, second = executor.apply([bad, good])
    assert first.status == "failed" and first.attempts == 0
    assert first.error is not None and "'\u00e9' at offset 3 is not ASCII" in first.error
    assert "cpuset.cpus" in first.error
    assert (root / "cpuset" / "g" / "cpuset.cpus").read_text() == "0-3\n"
    assert second.status == "applied", second.error
    assert (root / "memory" / "g" / "memory.limit_in_bytes").read_text() == "268435456"
