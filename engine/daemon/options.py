"""The ``qosd run`` command line: its flags, parsed and bounded here; engine.daemon.wiring builds the
daemon from them. The flags are data (one table per group) so each is written once, with its bound
and its help."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.argtypes import (
    add_profile,
    add_rule_paths,
    add_tick_flags,
    cgroup_pattern,
    duration,
    integer,
    lazy,
    listen_address,
    quantity,
)

Flag = tuple[tuple[str, ...], dict[str, Any]]
REPEATABLE: dict[str, Any] = {"action": "append", "default": []}

POLICY: tuple[Flag, ...] = (
    (("--no-builtin",), {"action": "store_true", "help": "leave out the built-in default layer"}),
    (
        ("--label",),
        {
            **REPEATABLE,
            "metavar": "KEY=VALUE",
            "help": "extra node label (repeatable): selects policies by nodeSelector",
        },
    ),
)
LOOP: tuple[Flag, ...] = (
    (
        ("--interval",),
        {
            "type": duration(0.01, 3600.0),
            "default": "1s",
            "help": "tick period, a duration from 10ms to 1h (default 1s)",
        },
    ),
    (("--once",), {"action": "store_true", "help": "run one tick and exit (with --dry-run: print its plan)"}),
)
NODE: tuple[Flag, ...] = (
    (
        ("--cgroup-root",),
        {
            "type": Path,
            "default": Path("/sys/fs/cgroup"),
            "help": "where the cgroup hierarchies are mounted (default /sys/fs/cgroup; in a pod, the host's)",
        },
    ),
    (
        ("--resctrl-root",),
        {
            "type": Path,
            "default": Path("/sys/fs/resctrl"),
            "help": "where resctrl is mounted (default /sys/fs/resctrl)",
        },
    ),
    (("--workloads",), {"type": Path, "help": "standalone workloads file (schemas/workloads.schema.json)"}),
    (
        ("--root",),
        {
            **REPEATABLE,
            "type": cgroup_pattern,
            "metavar": "PATTERN",
            "help": "cgroup pattern whose matches are workloads (repeatable; default qosd*/*)",
        },
    ),
)
OUTPUTS: tuple[Flag, ...] = (
    (("--state-file",), {"type": Path, "help": "engine state, written before each tick's operations"}),
    (
        ("--audit-log",),
        {
            "type": Path,
            "help": "append one Evaluation per tick that decides or changes something (JSON Lines)",
        },
    ),
    (
        ("--audit-log-max-bytes",),
        {
            "type": quantity(0, 2**50, "bytes"),
            "default": 64 * 2**20,
            "metavar": "BYTES",
            "help": "rotate the audit log when a record would take it past this size, e.g. 64Mi "
            "(default 64Mi; 0: never)",
        },
    ),
    (
        ("--audit-log-keep",),
        {
            "type": integer(0, 100),
            "default": 3,
            "metavar": "N",
            "help": "rotated audit logs kept (FILE.1 ... FILE.N), 0-100 "
            "(default 3; 0: the log is cut instead)",
        },
    ),
    (
        ("--audit-log-facts",),
        {
            "action": "store_true",
            "help": "record every tick with the facts it was decided on, so `qosd trace record` can "
            "turn the log into a trace (larger: for a recording window)",
        },
    ),
    (
        ("--listen",),
        {
            "type": listen_address,
            "default": "127.0.0.1:9464",
            "help": "host:port of /metrics, /healthz, /readyz (default 127.0.0.1:9464, this host only; "
            "in a pod: --listen=$(POD_IP):9464, where the kubelet's probes and the scraper connect; "
            "'' = off; docs/monitoring.md)",
        },
    ),
    (
        ("--log-level",),
        {
            "default": "info",
            "choices": ("debug", "info", "warning", "error"),
            "help": "least severe log level written",
        },
    ),
    (
        ("--no-watch",),
        {"action": "store_true", "help": "do not watch rule files (they are then re-checked every tick)"},
    ),
    (
        ("--reload-debounce",),
        {
            "type": duration(0.0, 60.0),
            "default": "50ms",
            "help": "quiet time after a rule file event, up to 1m "
            "(default 50ms; none for a ConfigMap ..data swap)",
        },
    ),
)
KUBERNETES: tuple[Flag, ...] = (
    (("--standalone",), {"action": "store_true", "help": "never talk to Kubernetes, even in a pod"}),
    (("--kubeconfig",), {"type": Path, "help": "kubeconfig file (default: in-cluster configuration)"}),
    (("--node-name",), {"help": "this node's name (default $NODE_NAME)"}),
    (
        ("--namespace",),
        {"help": "namespace of the policy-status Lease (default $POD_NAMESPACE, else qosd-system)"},
    ),
    (
        ("--cgroup-driver",),
        {
            "choices": ("auto", "cgroupfs", "systemd"),
            "default": "auto",
            "help": "the kubelet's cgroup driver (auto: look for kubepods.slice, then kubepods)",
        },
    ),
    (
        ("--no-policy-status",),
        {
            "dest": "policy_status",
            "action": "store_false",
            "help": "do not stand for election as the writer of QoSPolicy status",
        },
    ),
    (
        ("--sync-timeout",),
        {
            "type": duration(0.0, 3600.0),
            "default": "60s",
            "help": "longest wait for the first lists at start, up to 1h (default 60s)",
        },
    ),
)


def _add(group: Any, flags: tuple[Flag, ...]) -> None:
    for names, kwargs in flags:
        group.add_argument(*names, **kwargs)


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
    _add(r, POLICY)
    add_profile(r)
    _add(r, LOOP)
    add_tick_flags(r, "decide and log, change nothing (with --once: print the plan to stdout)")
    _add(r, NODE)
    _add(r, OUTPUTS)
    _add(
        r.add_argument_group(
            "Kubernetes mode",
            "on by default in a pod (KUBERNETES_SERVICE_HOST) or with --kubeconfig; see docs/kubernetes.md",
        ),
        KUBERNETES,
    )
    r.set_defaults(func=lazy("engine.daemon.wiring", "cmd_run"))
