"""Shared helpers: write rule documents to temporary files and run the real pipeline on them."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine.config.errors import Problem
from engine.config.pipeline import load_documents, validate
from tests.kubeapi import ApiServer
from tests.kubectl import Kubectl, kubectl_against_emulator
from tests.realparts import RealParts


def pytest_configure(config: pytest.Config) -> None:
    """Real-part tests (real cgroups, durable_rules, /proc) may not skip where the machine has the
    part: see tests/realparts.py. Registered here so every pytest run of the suite enforces it."""
    if not config.pluginmanager.has_plugin("qosd-real-parts"):
        config.pluginmanager.register(RealParts(), "qosd-real-parts")


# A bug that reaches engine.cli.main fails its test with the traceback instead of becoming exit 70
# (qosd processes the tests start inherit it too; tests of the one-line report unset it).
os.environ["QOSD_DEBUG"] = "1"

HEADER = """\
apiVersion: qosd.io/v1alpha1
kind: QoSPolicy
metadata: {name: %s}
spec:
"""


def policy_text(spec: str, name: str = "t") -> str:
    """A QoSPolicy document whose spec body is ``spec`` (indented under ``spec:``)."""
    return HEADER % name + textwrap.indent(textwrap.dedent(spec).strip("\n"), "  ") + "\n"


@pytest.fixture
def write(tmp_path: Path) -> Callable[..., Path]:
    def _write(text: str, name: str = "policy.yaml") -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    return _write


@pytest.fixture
def problems_of(write: Callable[..., Path]) -> Callable[..., list[Problem]]:
    """Validate text (no built-in layer) and return its problems."""

    def _run(text: str, builtin: bool = False) -> list[Problem]:
        path = write(text)
        return validate(load_documents([path], builtin=builtin))

    return _run


@pytest.fixture
def apiserver() -> Iterator[ApiServer]:
    """A started Kubernetes API-server emulator (tests/kubeapi) serving qosd's CRDs; stopped (every
    watch stream closed, every connection thread joined) at teardown."""
    from engine.config.crd import qosd_crds

    server = ApiServer()
    server.start()
    try:
        for crd in qosd_crds():
            server.install_crd(crd)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def kubectl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kubectl]:
    """The real kubectl against a fresh TLS emulator (tests/kubectl.py), one per test module: its
    state (applied objects, kubectl's discovery cache) carries from test to test within the module.
    Skips, with the reason, only where kubectl is not installed; mark the module
    ``pytest.mark.kubectl`` so that skip fails CI on a machine that has it (tests/realparts.py)."""
    with kubectl_against_emulator(tmp_path_factory.mktemp("kubectl")) as run:
        yield run
