"""One executor for the daemon: each operation to the adapter of its kind, in the order given.

Order matters across kinds as well as within them (a resctrl group is created before its schemata,
a parent cgroup loosened before its child), so operations are dispatched one at a time rather than
grouped per adapter. An operation whose adapter is not configured on this node (no Kubernetes
client in standalone mode, say) is answered *skipped* with that reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from engine.adapters.cgroup import CgroupAdapter
from engine.adapters.resctrl import RESCTRL_OPS, ResctrlAdapter
from engine.adapters.result import OperationResult
from engine.model.operations import Operation, WriteCgroup

Handler = Callable[[Operation], OperationResult]


class NodeExecutor:
    """``others`` maps an operation kind (``evictPod``, ``setNodeTaint``...) to its handler."""

    def __init__(
        self,
        cgroup: CgroupAdapter | None = None,
        resctrl: ResctrlAdapter | None = None,
        others: Mapping[str, Handler] | None = None,
    ):
        self.cgroup = cgroup
        self.resctrl = resctrl
        self.others = dict(others or {})

    def apply(self, operations: Sequence[Operation]) -> list[OperationResult]:
        return [self.apply_one(op) for op in operations]

    def apply_one(self, op: Operation) -> OperationResult:
        if isinstance(op, WriteCgroup):
            if self.cgroup is None:
                return OperationResult(op, "skipped", "no cgroup adapter configured")
            return self.cgroup.apply_one(op)
        if isinstance(op, RESCTRL_OPS):
            if self.resctrl is None:
                return OperationResult(op, "skipped", "no resctrl adapter configured")
            return self.resctrl.apply_one(op)
        handler = self.others.get(op.kind)
        if handler is None:
            return OperationResult(op, "skipped", f"no adapter for {op.kind} on this node")
        return handler(op)
