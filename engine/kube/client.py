"""The official ``kubernetes`` client, configured once, and the names of what qosd reads and writes.

qosd talks to the API through the generated typed APIs (CoreV1Api, PolicyV1Api, CustomObjectsApi,
CoordinationV1Api) with ``_preload_content=False`` where it wants plain JSON: building the client's
model objects for every pod of a node costs more than the rest of a tick.
"""

from __future__ import annotations

import os
import random
import threading
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client, config

GROUP = "qosd.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
POLICY_KIND = "QoSPolicy"
POLICY_PLURAL = "qospolicies"
NODE_STATUS_KIND = "QoSNodeStatus"
NODE_STATUS_PLURAL = "qosnodestatuses"
COMPONENT = "qosd"  # Event source / reportingController, field manager
REPORTING_CONTROLLER = "qosd.io/node-agent"

# Seconds: connect, read. A read timeout longer than a watch's server-side timeout would make a
# silently dead connection (a NAT dropping state) hang the watch for the full TCP keepalive.
REQUEST_TIMEOUT = (5.0, 30.0)
WATCH_TIMEOUT_SECONDS = 240  # server-side; the client then re-watches from the last resourceVersion


def load_api_client(kubeconfig: Path | None = None, context: str | None = None) -> client.ApiClient:
    """An ApiClient from a kubeconfig (given, or $KUBECONFIG / ~/.kube/config), or in-cluster when
    running in a pod with no kubeconfig given. Raises ``config.ConfigException`` with the client's
    own message when neither works."""
    cfg = client.Configuration()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=cfg)
    else:
        config.load_kube_config(
            config_file=str(kubeconfig) if kubeconfig else None,
            context=context,
            client_configuration=cfg,
        )
    return client.ApiClient(configuration=cfg)


@dataclass
class Backoff:
    """Exponential backoff with "equal jitter": after the n-th consecutive failure wait between half
    and all of min(cap, base * 2^n). The jitter spreads a thousand daemons that lost the API server at
    the same moment; the floor keeps one from hammering it with near-zero waits."""

    base: float = 0.2
    cap: float = 30.0
    failures: int = 0
    rng: random.Random = field(default_factory=random.Random)

    def next_delay(self) -> float:
        ceiling = min(self.cap, self.base * (2.0 ** self.failures))
        self.failures += 1
        return self.rng.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.failures = 0

    def sleep(self, stop: threading.Event) -> bool:
        """Wait the next delay; True when ``stop`` was set meanwhile."""
        return stop.wait(self.next_delay())
