"""The official ``kubernetes`` client, configured once, and the names of what qosd reads and writes.

qosd talks to the API through the generated typed APIs (CoreV1Api, PolicyV1Api, CustomObjectsApi,
CoordinationV1Api) with ``_preload_content=False`` where it wants plain JSON: building the client's
model objects for every pod of a node costs more than the rest of a tick.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from urllib3.util.retry import Retry

log = logging.getLogger("qosd")

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

SERVICEACCOUNT_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
TOKEN_REREAD_SECONDS = 60.0  # client-go's CachedFileTokenSource period
MAX_RETRY_AFTER = 300.0  # seconds; a longer Retry-After (a misbehaving proxy) is capped

# urllib3 retries connection errors of any request and read errors of idempotent ones (a keep-alive
# connection the server closed meanwhile), but never a status: with its default it would itself
# sleep out a 429's or 503's Retry-After (blocking, unjittered, invisible to qosd) and after three
# turn it into a MaxRetryError that reads like an unreachable server. qosd sees the status and
# waits itself (Backoff with retry_after).
HTTP_RETRIES = Retry(total=3, redirect=0, status=0, status_forcelist=(), respect_retry_after_header=False)


def load_api_client(
    kubeconfig: Path | None = None,
    context: str | None = None,
    *,
    serviceaccount_token: Path = SERVICEACCOUNT_TOKEN,
) -> client.ApiClient:
    """An ApiClient from a kubeconfig (given, or $KUBECONFIG / ~/.kube/config), or in-cluster when
    running in a pod with no kubeconfig given. Raises ``config.ConfigException`` with the client's
    own message when neither works.

    A bearer token read from a file (the projected service-account token in a pod, a kubeconfig
    user's ``tokenFile``) is re-read every minute and right after a 401 (``TokenFile``): the kubelet
    rotates projected tokens, and the official client re-reads the in-cluster one only once a minute
    and a kubeconfig's ``tokenFile`` never."""
    cfg = client.Configuration()
    token_file: Path | None
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.incluster_config.InClusterConfigLoader(
            token_filename=str(serviceaccount_token),
            cert_filename=str(serviceaccount_token.with_name("ca.crt")),
        ).load_and_set(cfg)
        token_file = serviceaccount_token
    else:
        config.load_kube_config(
            config_file=str(kubeconfig) if kubeconfig else None,
            context=context,
            client_configuration=cfg,
        )
        token_file = kubeconfig_token_file(kubeconfig, context)
    cfg.retries = HTTP_RETRIES
    api = client.ApiClient(configuration=cfg)
    if token_file is not None:
        TokenFile(token_file).install(api)
    return api


def kubeconfig_token_file(kubeconfig: Path | None, context: str | None = None) -> Path | None:
    """The ``tokenFile`` of the kubeconfig user the context uses, when it has no inline ``token``
    (an inline token wins, in the official client as in kubectl); relative to the kubeconfig."""
    path = kubeconfig or Path(os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or "~/.kube/config")
    path = path.expanduser()
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        ctx_name = context or doc.get("current-context")
        ctx = next(c["context"] for c in doc.get("contexts") or [] if c.get("name") == ctx_name)
        user = next(u.get("user") or {} for u in doc.get("users") or [] if u.get("name") == ctx.get("user"))
    except (OSError, ValueError, yaml.YAMLError, StopIteration, KeyError, TypeError, AttributeError):
        return None
    if not isinstance(user, dict) or user.get("token") or not user.get("tokenFile"):
        return None
    return (path.parent / str(user["tokenFile"])).resolve()


class TokenFile:
    """A bearer token kept in a file that someone else rotates (the kubelet's projected
    service-account token): re-read every ``period`` seconds and on the next request after a 401.

    Installed as the client's ``refresh_api_key_hook`` (called before every request) and around its
    REST layer (to see 401s). A 401 is not resent here: the caller's own retry (reflector backoff,
    status writer, the next tick) sends it again with the token read afresh. A file that cannot be
    read keeps the last token (the kubelet swaps the ``..data`` symlink; a read may fall between)."""

    def __init__(
        self, path: Path, period: float = TOKEN_REREAD_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.path = path
        self.period = period
        self.clock = clock
        self.reads = 0
        self.unauthorized = 0
        self._token = ""
        self._next = float("-inf")
        self._lock = threading.Lock()

    def install(self, api: client.ApiClient) -> None:
        cfg = api.configuration
        cfg.api_key_prefix.pop("BearerToken", None)
        cfg.refresh_api_key_hook = self._refresh
        self._refresh(cfg)
        rest = api.rest_client
        request = rest.request

        def checked(*args: Any, **kwargs: Any) -> Any:
            response = request(*args, **kwargs)
            if getattr(response, "status", None) == 401:
                self.invalidate()
            return response

        rest.request = checked

    def invalidate(self) -> None:
        """The server refused the token: read the file again before the next request."""
        with self._lock:
            self.unauthorized += 1
            self._next = float("-inf")

    def _refresh(self, cfg: client.Configuration) -> None:
        with self._lock:
            now = self.clock()
            if now >= self._next:
                self._next = now + self.period
                try:
                    token = self.path.read_text(encoding="utf-8").strip()
                except OSError as exc:
                    token = ""
                    log.warning(
                        "cannot re-read the API token file; keeping the token read before",
                        extra={"fields": {"path": str(self.path), "error": str(exc)}},
                    )
                if token:
                    if self._token and token != self._token:
                        log.info(
                            "API token file changed; using the new token",
                            extra={"fields": {"path": str(self.path)}},
                        )
                    self._token = token
                    self.reads += 1
            if self._token:
                cfg.api_key["BearerToken"] = f"Bearer {self._token}"


@dataclass
class Backoff:
    """Exponential backoff with "equal jitter": after the n-th consecutive failure wait between half
    and all of min(cap, base * 2^n). The jitter spreads a thousand daemons that lost the API server at
    the same moment; the floor keeps one from hammering it with near-zero waits."""

    base: float = 0.2
    cap: float = 30.0
    failures: int = 0
    rng: random.Random = field(default_factory=random.Random)

    def next_delay(self, retry_after: float | None = None) -> float:
        """The next wait. ``retry_after``: what the server asked for (a 429's or 503's Retry-After);
        the wait is then never shorter, and spread over up to a fifth more, so that the daemons of
        every node, told the same number of seconds at the same moment, do not all come back
        together."""
        ceiling = min(self.cap, self.base * (2.0 ** self.failures))
        self.failures += 1
        delay = self.rng.uniform(ceiling / 2, ceiling)
        if retry_after is not None and retry_after > 0:
            asked = min(retry_after, MAX_RETRY_AFTER)
            delay = max(delay, asked * self.rng.uniform(1.0, 1.2))
        return delay

    def reset(self) -> None:
        self.failures = 0

    def sleep(self, stop: threading.Event, retry_after: float | None = None) -> bool:
        """Wait the next delay; True when ``stop`` was set meanwhile."""
        return stop.wait(self.next_delay(retry_after))
