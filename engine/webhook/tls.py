"""The webhook's serving certificate, from files, reloaded when they change without a restart.

The certificate comes from a mounted Secret (cert-manager or ``kubectl create secret tls``). The
kubelet updates a Secret volume by writing a new timestamped directory and swapping the ``..data``
symlink, so ``tls.crt`` and ``tls.key`` keep their paths and change their target: the files are
``stat``-ed through the symlinks (device, inode, size, mtime) on each new connection, which is cheap,
and a changed pair is loaded into a fresh SSLContext that the following connections use. The
listening socket is never closed, and connections already open keep the context they started with.

A pair that does not load (a key that does not match the certificate, as while a non-atomic writer
has replaced one file and not yet the other) keeps the previous context in service, logged once
per pair seen; it is tried again as soon as either file changes again.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from pathlib import Path

from engine.config.errors import UsageError

log = logging.getLogger("qosd")

Stamp = tuple[tuple[int, int, int, int], ...]


def _stamp(*paths: Path) -> Stamp:
    out = []
    for p in paths:
        try:
            st = os.stat(p)  # follows the ..data symlink
        except OSError:
            out.append((0, 0, -1, 0))
            continue
        out.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


class ServingCert:
    """The current server-side SSLContext for a certificate/key file pair."""

    def __init__(self, cert_file: Path, key_file: Path) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self._lock = threading.Lock()
        self._stamp = _stamp(cert_file, key_file)
        self._failed: Stamp | None = None
        self.reloads = 0  # successful loads after the first (tests, logs)
        try:
            self._context = self._load()
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(
                f"cannot load the serving certificate {cert_file} with key {key_file}: {_why(exc)} "
                "(mount the webhook's TLS Secret there: docs/kubernetes.md, 'Admission')"
            ) from None

    def _load(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(str(self.cert_file), str(self.key_file))
        return ctx

    def context(self) -> ssl.SSLContext:
        """The context for a new connection: reloaded first if the files changed."""
        stamp = _stamp(self.cert_file, self.key_file)
        with self._lock:
            if stamp == self._stamp or stamp == self._failed:
                return self._context
            try:
                ctx = self._load()
            except (OSError, ssl.SSLError) as exc:
                self._failed = stamp
                log.warning(
                    "the serving certificate changed but does not load (%s); still serving the previous "
                    "one, and trying again on the next connection",
                    _why(exc),
                )
                return self._context
            self._context, self._stamp, self._failed = ctx, stamp, None
            self.reloads += 1
            log.info("serving certificate reloaded from %s", self.cert_file)
            return ctx


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        name = f"{exc.filename}: " if exc.filename else ""
        return f"{name}{exc.strerror}"
    return str(exc) or type(exc).__name__
