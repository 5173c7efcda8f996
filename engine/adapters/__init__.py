"""Adapters execute operations on the node (cgroupfs, resctrl, and later the Kubernetes API) and
report one result per operation. They hold no policy and decide nothing."""

from engine.adapters.result import STATUSES, OperationResult, Status

__all__ = ["STATUSES", "OperationResult", "Status"]
