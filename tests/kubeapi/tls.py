"""Serving the emulator over HTTPS with a throwaway certificate authority.

Why TLS at all: client-go (kubectl) sends a kubeconfig's bearer token or client certificate only over
TLS; against an ``http://`` server it sends no credentials (kubernetes/kubectl#744: the user's
identification is set "only for TLS connections"), and the emulator, like kube-apiserver's secure port,
answers an anonymous request with 401. The official Python client sends the token either way, so the
other tests keep plain HTTP; ``ApiServer(tls=True)`` is for the real kubectl.

The CA and the serving certificate (SAN: the listen address and ``localhost``) are generated in memory
per server: nothing is written outside a temporary directory, and nothing outlives the test.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class ServingCert:
    """PEM bytes of a CA certificate and of a server certificate (with its key) it signed."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    @property
    def ca_data(self) -> str:
        """The CA as a kubeconfig's ``certificate-authority-data`` (base64 of the PEM)."""
        return base64.b64encode(self.ca_pem).decode()

    def server_context(self) -> ssl.SSLContext:
        """A server-side context holding the serving certificate (TLS 1.2+, as kube-apiserver)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        with tempfile.TemporaryDirectory(prefix="kubeapi-tls-") as tmp:
            cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
            cert.write_bytes(self.cert_pem + self.ca_pem)
            key.write_bytes(self.key_pem)
            key.chmod(0o600)
            ctx.load_cert_chain(cert, key)
        return ctx


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _validity() -> tuple[datetime.datetime, datetime.datetime]:
    """From an hour ago (clock skew between the test and the client is irrelevant) for a day."""
    now = datetime.datetime.now(datetime.UTC)
    return now - datetime.timedelta(hours=1), now + datetime.timedelta(days=1)


@dataclass(frozen=True)
class CA:
    """A throwaway certificate authority; ``issue`` signs server certificates with it."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @classmethod
    def make(cls, common_name: str = "kubeapi-emulator-ca") -> CA:
        key = ec.generate_private_key(ec.SECP256R1())
        start, end = _validity()
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(_name(common_name))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert)

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def bundle(self) -> str:
        """Base64 of the PEM: a kubeconfig's ``certificate-authority-data``, a webhook's ``caBundle``."""
        return base64.b64encode(self.pem).decode()

    def issue(self, *names: str, common_name: str = "") -> tuple[bytes, bytes, int]:
        """(certificate PEM, key PEM, serial number) of a server certificate for ``names`` (DNS
        names or IP addresses), signed by this CA."""
        key = ec.generate_private_key(ec.SECP256R1())
        sans: list[x509.GeneralName] = []
        for n in names:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(n)))
            except ValueError:
                sans.append(x509.DNSName(n))
        start, end = _validity()
        serial = x509.random_serial_number()
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name or names[0]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(serial)
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        pem_key = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return cert.public_bytes(serialization.Encoding.PEM), pem_key, serial


def serving_cert(host: str) -> ServingCert:
    """A fresh CA and a certificate for ``host`` (an IP address or a DNS name) and ``localhost``
    signed by it."""
    ca = CA.make()
    cert, key, _ = ca.issue("localhost", host, common_name="kube-apiserver")
    return ServingCert(ca.pem, cert, key)
