"""The daemon's HTTP endpoints: ``/metrics`` (prometheus-client), ``/healthz`` (the loop is alive),
``/readyz`` (a policy is loaded and a tick completed), on one port."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from engine.config.errors import UsageError

Check = Callable[[], tuple[bool, str]]


class _Server6(ThreadingHTTPServer):
    """For an IPv6 host (``--listen=[fd00::5]:9464``: a pod's IP in an IPv6 cluster)."""

    address_family = socket.AF_INET6


def serve(listen: str, registry: CollectorRegistry, healthy: Check, ready: Check) -> ThreadingHTTPServer:
    """Start the HTTP endpoints in a background thread; the server's ``server_address`` is the
    address bound (the port, when asked for :0)."""
    host, _, port = listen.rpartition(":")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif self.path in ("/healthz", "/readyz"):
                ok, why = healthy() if self.path == "/healthz" else ready()
                self._send(200 if ok else 503, (("ok: " if ok else "not ok: ") + why + "\n").encode())
            else:
                self._send(404, b"not found; try /metrics, /healthz or /readyz\n")

        def _send(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return  # scrapes every few seconds would drown the JSON log

    bind = host.strip("[]") or "0.0.0.0"
    try:
        server = (_Server6 if ":" in bind else ThreadingHTTPServer)((bind, int(port)), Handler)
    except (OSError, OverflowError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(
            f"--listen {listen}: cannot serve /metrics, /healthz and /readyz there: {why}"
        ) from None
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="qosd-http", daemon=True).start()
    return server
