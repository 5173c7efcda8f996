"""Test certificates made at run time (no private key is ever committed): a CA and server
certificates it signs, written as PEM files, with the ``cryptography`` package."""

from __future__ import annotations

import base64
import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@dataclass
class CA:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @classmethod
    def make(cls, common: str = "qosd test CA") -> CA:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(common))
            .issuer_name(_name(common))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
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
        """The base64 of the PEM, as a webhook configuration's caBundle holds it."""
        return base64.b64encode(self.pem).decode("ascii")

    def issue(self, *names: str) -> tuple[bytes, bytes, int]:
        """(certificate PEM, key PEM, serial) for ``names`` (DNS names or IP addresses)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        sans: list[x509.GeneralName] = []
        for n in names:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(n)))
            except ValueError:
                sans.append(x509.DNSName(n))
        serial = x509.random_serial_number()
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(names[0]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(serial)
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key), serial


def write_secret_volume(directory: Path, cert: bytes, key: bytes, stamp: str) -> None:
    """Lay out (or update) ``directory`` as the kubelet lays out a Secret volume: the files in a
    timestamped directory, ``..data`` a symlink to it, swapped atomically by a rename, and
    ``tls.crt``/``tls.key`` symlinks through ``..data``."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"..{stamp}"
    target.mkdir()
    (target / "tls.crt").write_bytes(cert)
    (target / "tls.key").write_bytes(key)
    tmp = directory / "..data_tmp"
    tmp.symlink_to(target.name)
    tmp.replace(directory / "..data")
    for name in ("tls.crt", "tls.key"):
        link = directory / name
        if not link.is_symlink():
            link.symlink_to(f"..data/{name}")
