"""The ``qosd webhook`` command line; engine.webhook.command runs it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.argtypes import add_rule_paths, duration, lazy, listen_address

TLS_DIR = Path("/etc/qosd/webhook-tls")  # where examples/deploy/components/webhook mounts the Secret


def add_parser(sub: Any) -> None:
    """Register ``webhook`` on the ``qosd`` subcommand parser."""
    w = sub.add_parser(
        "webhook",
        help="serve the validating admission webhook for QoSPolicy (HTTPS: /validate, /healthz, /readyz)",
        description=(
            "Refuse a QoSPolicy that `qosd validate` would refuse, when it is created or updated. Each "
            "policy is checked with the bundled profiles, the rule files given here (the daemon's "
            "ConfigMap) and the other QoSPolicies of the cluster, on every node variant their selectors "
            "tell apart; a denial carries the located problems (docs/kubernetes.md, 'Admission')."
        ),
    )
    add_rule_paths(w, "the daemon's rule files or directories (its ConfigMap), checked with each policy")
    w.add_argument(
        "--no-builtin", action="store_true", help="leave out the built-in layer (as the daemon's flag)"
    )
    w.add_argument(
        "--listen",
        type=listen_address,
        default=":8443",
        help="host:port of the HTTPS endpoints (default :8443)",
    )
    w.add_argument(
        "--tls-cert-file",
        type=Path,
        default=TLS_DIR / "tls.crt",
        help=f"serving certificate (PEM, with its chain), reloaded when it changes "
        f"(default {TLS_DIR}/tls.crt)",
    )
    w.add_argument(
        "--tls-private-key-file",
        type=Path,
        default=TLS_DIR / "tls.key",
        help=f"its private key (PEM) (default {TLS_DIR}/tls.key)",
    )
    w.add_argument("--kubeconfig", type=Path, help="kubeconfig file (default: in-cluster configuration)")
    w.add_argument(
        "--standalone",
        action="store_true",
        help="do not watch the cluster's QoSPolicies: check each policy with the files and profiles only",
    )
    w.add_argument(
        "--shutdown-delay",
        type=duration(0.0, 300.0),
        default="5s",
        help="on SIGTERM, report not ready and keep serving this long, so the Service stops sending "
        "requests before the listener closes (default 5s)",
    )
    w.add_argument(
        "--log-level",
        default="info",
        choices=("debug", "info", "warning", "error"),
        help="least severe level",
    )
    w.set_defaults(func=lazy("engine.webhook.command", "cmd_webhook"))
