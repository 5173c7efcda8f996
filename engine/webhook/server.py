"""The webhook's HTTPS endpoints: ``POST /validate`` (AdmissionReview), ``GET /healthz`` and ``/readyz``.

One port for all three: the kubelet's probes speak HTTPS without verifying the certificate, and the
API server reaches ``/validate`` through the Service. Each connection is wrapped with the TLS
context current when it was accepted (engine.webhook.tls), so a renewed certificate is served
without closing the listener. The TLS handshake runs in the connection's own thread with a
timeout, so a client that connects and says nothing cannot stall the others.
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from engine.config.errors import UsageError
from engine.webhook.check import Verdict
from engine.webhook.review import BadReview, review
from engine.webhook.tls import ServingCert

log = logging.getLogger("qosd")

MAX_BODY = 6 << 20  # an AdmissionReview carries object and oldObject, each up to the API's 3 MiB
IO_TIMEOUT = 30.0  # seconds for the handshake and each read; the API server's own limit is <= 30 s
Check = Callable[[Mapping[str, Any]], Verdict]
Ready = Callable[[], tuple[bool, str]]


class WebhookServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], cert: ServingCert, check: Check, ready: Ready) -> None:
        self.cert = cert
        self.check = check
        self.ready = ready
        super().__init__(address, _Handler)

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = self.socket.accept()
        try:
            wrapped = self.cert.context().wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        except (OSError, ValueError):
            sock.close()
            raise
        return wrapped, addr

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that fails the handshake or hangs up is not a server error: one debug line."""
        log.debug("webhook connection from %s ended with an error", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # the API server keeps connections to webhooks alive
    timeout = IO_TIMEOUT
    server: WebhookServer

    def setup(self) -> None:
        conn = self.request
        conn.settimeout(IO_TIMEOUT)
        if isinstance(conn, ssl.SSLSocket):
            conn.do_handshake()
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:
        return  # probes every few seconds would drown the log; decisions are logged below

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            self._text(200, "ok\n")
        elif path == "/readyz":
            ok, why = self.server.ready()
            self._text(200 if ok else 503, ("ok: " if ok else "not ready: ") + why + "\n")
        elif path == "/validate":
            self._text(405, "POST an admission.k8s.io/v1 AdmissionReview to /validate\n", {"Allow": "POST"})
        else:
            self._text(404, "not found; the webhook serves POST /validate, GET /healthz and GET /readyz\n")

    def do_POST(self) -> None:
        if self.path.split("?", 1)[0] != "/validate":
            self._text(404, "not found; POST AdmissionReviews to /validate\n")
            return
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self._text(411, "a Content-Length is required\n")
            return
        if int(length) > MAX_BODY:
            self.close_connection = True  # the body is not read
            self._text(413, f"an AdmissionReview is at most {MAX_BODY >> 20} MiB\n")
            return
        raw = self.rfile.read(int(length))
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        try:
            if ctype != "application/json":
                raise BadReview(f"Content-Type must be application/json, not {ctype or 'missing'!r}")
            try:
                body = json.loads(raw)
            except ValueError as exc:
                raise BadReview(f"the body is not JSON: {exc}") from None
            answer = review(body, self.server.check)
        except BadReview as exc:
            self._text(400, f"bad AdmissionReview: {exc}\n")
            return
        except Exception:  # a bug: the API server applies the configuration's failurePolicy
            log.exception("the webhook failed to check an AdmissionReview")
            self._text(500, "qosd webhook internal error; see its log\n")
            return
        _log_decision(body, answer)
        self._send(200, json.dumps(answer).encode(), "application/json")

    def _text(self, code: int, text: str, headers: Mapping[str, str] | None = None) -> None:
        self._send(code, text.encode(), "text/plain; charset=utf-8", headers)

    def _send(self, code: int, data: bytes, ctype: str, headers: Mapping[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)


def _log_decision(body: Mapping[str, Any], answer: Mapping[str, Any]) -> None:
    request, response = body["request"], answer["response"]
    user = (request.get("userInfo") or {}).get("username", "?")
    name = request.get("name") or ((request.get("object") or {}).get("metadata") or {}).get("name", "?")
    if response["allowed"]:
        log.debug("allowed %s %s by %s (uid %s)", request["operation"], name, user, request["uid"])
    else:
        log.info(
            "denied %s of QoSPolicy %s by %s (uid %s): %s",
            request["operation"],
            name,
            user,
            request["uid"],
            response["status"]["message"].splitlines()[0],
        )


def serve(listen: str, cert: ServingCert, check: Check, ready: Ready) -> WebhookServer:
    """Bind ``listen`` (host:port; ':8443' for every interface). The caller runs serve_forever."""
    host, _, port = listen.rpartition(":")
    try:
        server = WebhookServer((host.strip("[]") or "0.0.0.0", int(port)), cert, check, ready)
    except (OSError, OverflowError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"--listen {listen}: cannot serve the webhook there: {why}") from None
    return server
