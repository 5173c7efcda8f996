"""A directory laid out as the kubelet lays out a Secret volume, for the webhook's certificate tests."""

from __future__ import annotations

from pathlib import Path


def write_secret_volume(directory: Path, cert: bytes, key: bytes, stamp: str) -> None:
    """Lay out (or update) ``directory`` as the kubelet does: the files in a timestamped directory,
    ``..data`` a symlink to it, swapped atomically by a rename, and ``tls.crt``/``tls.key`` symlinks
    through ``..data``."""
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
