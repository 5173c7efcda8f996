"""Every action kind the policy schema accepts reaches an adapter in `qosd run`.

Issue 15: capabilities were declared and not real: `qosd run` built no resctrl source, and
standalone evictions were reported, not performed. This drives one policy with one rule per action
kind through `qosd run` in Kubernetes mode, as ``build_kube`` wires it, for the few ticks it takes
every wired kind to act (suppress needs a CPU rate, so a second sample), and records what the
daemon's executor handed to its adapters and what each answered.

Real parts: the Kubernetes API is the in-repo emulator (tests/kubeapi) over real HTTP with the
shipped RBAC; cgroups are this machine's real cgroup v1 hierarchy, with the rules' cgroup targets
in a fresh test subtree (tests/realcgroup.py); resctrl is a fake tree with the kernel's layout
(this CPU has no RDT), as the resctrl adapter tests build it, with the rule's group directory
made beforehand as the kernel would on mkdir.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from engine.cli import build_parser
from engine.config.crd import qosd_crds
from engine.daemon.wiring import build_kube
from engine.model.operations import Operation, WriteCgroup
from tests.kubeapi import ApiServer
from tests.realcgroup import real_subtree
from tests.test_kube_daemon import NODE, daemon_args, pod, populate, rbac_rules, wait_for
from tests.test_resctrl_adapter import make_tree

PAGE = os.sysconf("SC_PAGE_SIZE")
SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / "qospolicy.schema.json"


def policy(app: str) -> str:
    """One rule per action kind, each named after it; ``app`` is the real test cgroup."""
    return f"""\
apiVersion: qosd.io/v1alpha1
kind: QoSPolicy
metadata: {{name: reach}}
spec:
  classes:
    - name: be
      match: [{{labels: {{qos: be}}}}]
      cpu: {{policy: reclaimed}}
    - name: ls
      match: [{{labels: {{qos: ls}}}}]
      cpu: {{policy: shared}}
  reclaim:
    enabled: true
    cpu: {{policy: request, reclaimThresholdPercent: 100, publishAs: example.com/batch-cpu}}
  rules:
    - name: evict
      then: {{evict: {{victims: {{classes: [be]}}, maxPerRound: 1, killer: delete}}}}
    - name: suppress
      # cfsQuota: from an unset quota (-1) any amount is a write; a cpuset on an idle machine
      # would equal the one the cgroup holds, and the planner writes nothing for it
      then: {{suppress: {{class: be, cgroup: {app}, policy: cfsQuota}}}}
    - name: setCgroup
      then: {{setCgroup: {{target: {{path: {app}}}, values: {{cpu.shares: 512}}}}}}
    - name: setResctrl
      then: {{setResctrl: {{class: be, group: reach, l3Percent: [0, 50]}}}}
    - name: memoryGuard
      then: {{memoryGuard: {{cgroup: {app}}}}}
    - name: publish
      then: {{publish: {{resource: cpu}}}}
    - name: taint
      then: {{taint: {{key: qosd.io/reach, effect: NoSchedule}}}}
    - name: condition
      then: {{condition: {{type: QosdReach, reason: Reach, message: reached}}}}
    - name: notify
      then: {{notify: {{reason: Reach, message: reached}}}}
"""


def action_kinds() -> list[str]:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    return list(schema["$defs"]["action"]["properties"])


@pytest.fixture(scope="module")
def reached(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple[str, str, str | None]]]:
    """rule name -> [(operation kind, result status, error)] from a few ticks of `qosd run`."""
    tmp = tmp_path_factory.mktemp("reach")
    api = ApiServer()
    api.start()
    with real_subtree(children=("app",), sleeper="app") as tree:
        for crd in qosd_crds():
            api.install_crd(crd)
        populate(api)
        api.put(pod("batch", "be"))
        make_tree(tmp / "resctrl")
        # The kernel fills a group's directory on mkdir; a plain directory cannot, so the group is
        # there already, with the default group's schemata and no tasks (as test_daemon_resctrl).
        group = tmp / "resctrl" / "reach"
        group.mkdir()
        (group / "schemata").write_text((tmp / "resctrl" / "schemata").read_text())
        (group / "tasks").write_text("")
        token = api.authorize("qosd-sa-token", rbac_rules())
        kubeconfig = api.kubeconfig(tmp / "kubeconfig", token)
        argv = daemon_args(tmp, kubeconfig, NODE, policy(f"{tree.name}/app"), [], tree=Path("/sys/fs/cgroup"))
        args = build_parser().parse_args([*argv, "--listen", ""])
        daemon = build_kube(args)
        seen: dict[str, list[tuple[str, str, str | None]]] = {}
        ticks: list[int] = []
        writes: list[str] = []  # cgroup writes done: all must be inside the test subtree
        guard: list[tuple[str, str, str | None]] = []  # the memory guard's writes: (file, value, status)
        apply = daemon.executor.apply

        def recording(operations: Sequence[Operation]) -> Sequence[Any]:
            outcomes = apply(operations)
            for op, outcome in zip(operations, outcomes, strict=True):
                path = getattr(op, "path", None)
                if path is not None and outcome.status == "applied":
                    writes.append(str(path))
                seen.setdefault(str(getattr(op, "rule", "")), []).append((op.kind, outcome.status, outcome.error))
                if isinstance(op, WriteCgroup) and op.rule == "memoryGuard":
                    guard.append((f"{op.path}/{op.file}", op.value, outcome.status))
            ticks.append(len(operations))
            return outcomes

        daemon.executor.apply = recording  # type: ignore[method-assign]
        loop = threading.Thread(target=daemon.run, name="qosd-under-test", daemon=True)
        loop.start()
        try:
            # suppress needs the node's CPU usage, a rate: it has a value from the second sample on
            wait_for("every action kind", lambda: set(action_kinds()) <= set(seen))
            settled = len(ticks)
            wait_for("three more ticks", lambda: len(ticks) >= settled + 3)
        finally:
            daemon.stop.set()
            loop.join(timeout=15)
        assert not loop.is_alive(), "the daemon did not stop"
        assert [w for w in writes if not w.startswith(tree.name)] == [], "wrote outside the test subtree"
        assert [f"{r.method} {r.path}" for r in api.requests.snapshot() if r.status == 403] == []
        seen["_shares"] = [("", tree.read("cpu", "app", "cpu.shares"), None)]
        seen["_deleted"] = [("", str(api.get("v1", "Pod", "batch", "default") is None), None)]
        schemata = tmp / "resctrl" / "reach" / "schemata"
        seen["_resctrl"] = [("", schemata.read_text() if schemata.exists() else "", None)]
        seen["_guard"] = guard
        seen["_limit"] = [("", tree.read("memory", "app", "memory.limit_in_bytes"), None)]
        numa_stat = tree.read("memory", "app", "memory.numa_stat")
        pages = next(ln for ln in numa_stat.splitlines() if ln.startswith("hierarchical_total="))
        seen["_reclaimed"] = [("", str(int(pages.split()[0].partition("=")[2]) * PAGE), None)]
        meminfo = Path("/proc/meminfo").read_text().split()
        seen["_memtotal"] = [("", str(int(meminfo[meminfo.index("MemTotal:") + 1]) * 1024), None)]
    api.stop()
    return seen


@pytest.mark.parametrize("kind", action_kinds())
def test_each_action_kind_reaches_an_adapter(
    reached: dict[str, list[tuple[str, str, str | None]]], kind: str
) -> None:
    results = reached.get(kind, [])
    assert results, f"rule {kind!r} produced no operation in `qosd run`"
    handled = [(k, s, e) for k, s, e in results if s not in ("skipped",)]
    assert handled, f"no adapter handled the operations of {kind!r}: {results}"
    assert [r for r in results if r[1] == "failed"] == [], results


def test_the_adapters_acted(reached: dict[str, list[tuple[str, str, str | None]]]) -> None:
    """What the adapters did is visible where it was done: the real cgroup file, the API server."""
    assert reached["_shares"][0][1] == "512"
    assert reached["_deleted"][0][1] == "True"
    # l3Percent [0, 50] of the fake tree's 12-way mask fff: the low 6 ways on each cache domain
    assert "L3:0=3f;1=3f" in reached["_resctrl"][0][1].replace(" ", ""), reached["setResctrl"]


def test_the_memory_guard_capped_the_reclaim_root(reached: dict[str, list[tuple[str, str, str | None]]]) -> None:
    """The guard's input is the reclaim root's (here ``app``'s) memory.numa_stat, so it wrote
    memory.limit_in_bytes (v1 has no memory.high) of that cgroup, and the kernel holds its last
    value (page-rounded). limit = reclaimed usage + Σ max(free(n) − crit(n), 0): at least what the
    kernel says the root uses (its process only sleeps), and less than that plus the node's memory.
    Without the collected fact the guard gives no advice and writes nothing."""
    guard = reached["_guard"]
    assert guard, reached.get("memoryGuard")
    assert all(file.endswith("/app/memory.limit_in_bytes") and status == "applied" for file, _, status in guard), guard
    value = int(guard[-1][1])
    assert int(reached["_limit"][0][1]) == value // PAGE * PAGE
    reclaimed = int(reached["_reclaimed"][0][1])
    assert reclaimed <= value < reclaimed + int(reached["_memtotal"][0][1])
