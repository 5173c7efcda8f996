"""The ``qosd run`` command line: its flags, parsed and bounded here; engine.daemon.wiring builds the
daemon from them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.argtypes import (
    add_profile,
    add_rule_paths,
    cgroup_pattern,
    duration,
    integer,
    lazy,
    listen_address,
)


def add_parser(sub: Any) -> None:
    """Register ``run`` on the ``qosd`` subcommand parser."""
    r = sub.add_parser(
        "run",
        help="run the node daemon: observe, evaluate and enforce every tick",
        description=(
            "The node daemon. Kubernetes mode in a pod (or with --kubeconfig): the workloads are the pods "
            "of this node, the policy the built-in layer, the rule files and every QoSPolicy whose "
            "nodeSelector matches the node (docs/kubernetes.md). Standalone mode (--standalone, or outside "
            "a pod): the cgroups under --cgroup-root that --root patterns or the --workloads file select "
            "are the workloads (docs/standalone.md)."
        ),
    )
    add_rule_paths(r, "rule files or directories, over the built-in layer; re-read when they change")
    r.add_argument("--no-builtin", action="store_true", help="leave out the built-in default layer")
    add_profile(r)
    r.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra node label (repeatable): selects policies by nodeSelector",
    )
    r.add_argument(
        "--interval",
        type=duration(0.01, 3600.0),
        default="1s",
        help="tick period, a duration from 10ms to 1h (default 1s)",
    )
    r.add_argument("--once", action="store_true", help="run one tick and exit")
    r.add_argument("--dry-run", action="store_true", help="decide and log, change nothing")
    r.add_argument(
        "--eviction-burst",
        type=integer(0, 10000),
        default=3,
        help="evictions per tick across all rules (default 3)",
    )
    r.add_argument(
        "--backend",
        choices=("python", "durable"),
        default="python",
        help="condition evaluator (default python; durable: the durable-rules worker)",
    )
    r.add_argument(
        "--cgroup-root",
        type=Path,
        default=Path("/sys/fs/cgroup"),
        help="where the cgroup hierarchy is mounted; every write stays under it (default /sys/fs/cgroup)",
    )
    r.add_argument(
        "--resctrl-root",
        type=Path,
        default=Path("/sys/fs/resctrl"),
        help="where resctrl is mounted; without it, RDT actions are skipped (default /sys/fs/resctrl)",
    )
    r.add_argument("--workloads", type=Path, help="standalone workloads file (schemas/workloads.schema.json)")
    r.add_argument(
        "--root",
        action="append",
        default=[],
        type=cgroup_pattern,
        metavar="PATTERN",
        help="cgroup pattern whose matches are workloads (repeatable; default qosd*/*)",
    )
    r.add_argument("--state-file", type=Path, help="engine state, written before each tick's operations")
    r.add_argument("--audit-log", type=Path, help="append one Evaluation per deciding tick (JSON Lines)")
    r.add_argument(
        "--listen",
        type=listen_address,
        default=":9464",
        help="host:port of /metrics, /healthz, /readyz ('' = off)",
    )
    r.add_argument(
        "--log-level",
        default="info",
        choices=("debug", "info", "warning", "error"),
        help="least severe JSON log line written to stderr (default info)",
    )
    r.add_argument(
        "--no-watch",
        action="store_true",
        help="do not watch rule files (they are then re-checked every tick)",
    )
    r.add_argument(
        "--reload-debounce",
        type=duration(0.0, 60.0),
        default="50ms",
        help="quiet time after a rule file event, up to 1m (default 50ms; none for a ConfigMap ..data swap)",
    )
    k = r.add_argument_group(
        "Kubernetes mode",
        "on by default in a pod (KUBERNETES_SERVICE_HOST) or with --kubeconfig; see docs/kubernetes.md",
    )
    k.add_argument("--standalone", action="store_true", help="never talk to Kubernetes, even in a pod")
    k.add_argument("--kubeconfig", type=Path, help="kubeconfig file (default: in-cluster configuration)")
    k.add_argument("--node-name", help="this node's name (default $NODE_NAME)")
    k.add_argument(
        "--namespace", help="namespace of the policy-status Lease (default $POD_NAMESPACE, else qosd-system)"
    )
    k.add_argument(
        "--cgroup-driver",
        choices=("auto", "cgroupfs", "systemd"),
        default="auto",
        help="the kubelet's cgroup driver (auto: look for kubepods.slice, then kubepods)",
    )
    k.add_argument(
        "--no-policy-status",
        dest="policy_status",
        action="store_false",
        help="do not stand for election as the writer of QoSPolicy status",
    )
    k.add_argument(
        "--sync-timeout",
        type=duration(0.0, 3600.0),
        default="60s",
        help="longest wait for the first lists at start, up to 1h (default 60s)",
    )
    r.set_defaults(func=lazy("engine.daemon.wiring", "cmd_run"))
