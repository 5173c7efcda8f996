"""What the kubelet says about itself on this node: its CPU manager policy.

The kubelet checkpoints its CPU manager in ``/var/lib/kubelet/cpu_manager_state`` (JSON with
``policyName``: ``none`` or ``static``, and under static the CPUs each container holds). Under
``static``, Guaranteed pods with whole-CPU requests get exclusive CPUs, idle or not, which a
reclaim policy must not lend (spec.reclaim.<res>.free.heldRequests). The kubelet rewrites the file
by rename, so it is opened anew at each read, and read at most every ``every`` seconds: the policy
changes only with a kubelet restart.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

CPU_MANAGER_STATE = Path("/var/lib/kubelet/cpu_manager_state")
POLICIES = frozenset({"none", "static"})


def cpu_manager_policy(text: str | None) -> str | None:
    """The policyName of a cpu_manager_state checkpoint; None when absent, unreadable or unknown."""
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    name = data.get("policyName") if isinstance(data, dict) else None
    return name if name in POLICIES else None


class CpuManagerState:
    """The node's CPU manager policy from the kubelet's checkpoint, re-read every ``every`` s."""

    def __init__(self, path: Path = CPU_MANAGER_STATE, every: float = 10.0) -> None:
        self.path = path
        self.every = every
        self._at: float | None = None
        self._policy: str | None = None

    def policy(self, now: float, read: Callable[[Path], str | None] | None = None) -> str | None:
        if self._at is None or now - self._at >= self.every:
            self._at = now
            self._policy = cpu_manager_policy((read or _read)(self.path))
        return self._policy


def _read(path: Path) -> str | None:
    try:
        with path.open("rb") as f:
            return f.read(1 << 20).decode("utf-8", errors="replace")
    except OSError:
        return None
