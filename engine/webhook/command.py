"""``qosd webhook``: build the checker, the QoSPolicy watch and the TLS listener, serve until SIGTERM."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from collections.abc import Sequence
from typing import Any

from engine.config.errors import UsageError
from engine.config.load import Document
from engine.daemon.logs import configure_logging
from engine.webhook.check import PolicyChecker
from engine.webhook.server import serve
from engine.webhook.tls import ServingCert

log = logging.getLogger("qosd")

SYNC_WAIT = 5.0  # seconds a review waits for the first list of QoSPolicies before it fails


class ClusterPolicies:
    """The other QoSPolicies, from a list+watch (engine.sources.policies.PolicyWatch). A review that
    comes before the first list fails (HTTP 500: the configuration's failurePolicy decides) rather
    than checking a policy against an empty cluster."""

    def __init__(self, watch: Any) -> None:
        self.watch = watch

    def __call__(self) -> Sequence[Document]:
        if not self.watch.wait_synced(SYNC_WAIT):
            raise RuntimeError("the QoSPolicy list+watch has not synced yet")
        docs: Sequence[Document] = self.watch.documents()
        return docs

    def ready(self) -> tuple[bool, str]:
        if self.watch.wait_synced(0):
            return True, "QoSPolicies listed and watched"
        return False, "waiting for the first list of QoSPolicies"


def cmd_webhook(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    cert = ServingCert(args.tls_cert_file, args.tls_private_key_file)
    cluster: ClusterPolicies | None = None
    if not args.standalone:
        if args.kubeconfig is None and not os.environ.get("KUBERNETES_SERVICE_HOST"):
            raise UsageError(
                "not in a pod and no --kubeconfig: give one to check policies with the cluster's "
                "QoSPolicies, or --standalone to check them with the files and profiles only"
            )
        from engine.kube.client import load_api_client
        from engine.sources.policies import PolicyWatch

        cluster = ClusterPolicies(PolicyWatch(load_api_client(args.kubeconfig)))
        cluster.watch.start()
    checker = PolicyChecker(args.rules, builtin=not args.no_builtin, cluster=cluster)
    stopping = threading.Event()

    def ready() -> tuple[bool, str]:
        if stopping.is_set():
            return False, "shutting down"
        return cluster.ready() if cluster is not None else (True, "standalone: files and profiles only")

    server = serve(args.listen, cert, checker.check, ready)
    thread = threading.Thread(target=server.serve_forever, name="qosd-webhook", daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    log.info("webhook serving https://%s:%s/validate", host, port)

    def on_signal(signum: int, frame: object) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    stopping.wait()
    log.info("stopping: not ready now, serving for %.1fs more", args.shutdown_delay)
    threading.Event().wait(args.shutdown_delay)
    server.shutdown()
    server.server_close()
    if cluster is not None:
        cluster.watch.stop()
    return 0
