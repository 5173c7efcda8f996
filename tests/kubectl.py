"""The real kubectl against the API-server emulator: a harness other tests reuse.

No kube-apiserver runs on the build machines, but kubectl does (DESIGN.md, "Real parts"). So the
commands the README tells a platform engineer to type are run as typed: the ``kubectl`` binary, in a
subprocess, with ``KUBECONFIG`` pointing at an emulator (tests/kubeapi) that serves HTTPS with a
throwaway CA, because client-go sends a kubeconfig's token only over TLS. Everything kubectl does on
the way (aggregated discovery, the RESTMapper's short names and categories, OpenAPI v3 for ``explain``
and field validation, client-side apply's three-way patches, Table output) is exercised for real; a
test asserts what a person would read (stdout, stderr, exit code) and what the server then holds.

Usage::

    pytestmark = pytest.mark.kubectl          # tests/realparts.py: a skip fails CI where kubectl exists

    def test_x(kubectl: Kubectl) -> None:       # one emulator + kubeconfig per test module (conftest.py)
        kubectl("apply", "-k", "examples/deploy")            # raises KubectlFailed on a non-zero exit
        out = kubectl("get", "qosp", check=False)            # Result(args, rc, stdout, stderr)
        kubectl.shell("kubectl get qosns $(kubectl get nodes -o name | cut -d/ -f2)")   # README lines
        kubectl.server.put({...})                             # set up what controllers would write
        roll_out_daemonset(kubectl.server, "qosd-system", "qosd")   # ... e.g. a finished rollout

Commands run in the repository root (so README paths work) with a per-module discovery and OpenAPI
cache directory (``KUBECACHEDIR``) and nothing inherited from the user's own kubeconfig. The fixture
skips, with the reason, only when the machine has no working kubectl (``realparts.kubectl_missing``).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.kubeapi import ApiServer
from tests.realparts import kubectl_missing

Json = dict[str, Any]
REPO = Path(__file__).resolve().parent.parent
# One kubectl command may wait on the server (``delete --wait``); none should take this long.
TIMEOUT = 60.0


@dataclass(frozen=True)
class Result:
    """One finished kubectl command."""

    args: tuple[str, ...]
    rc: int
    stdout: str
    stderr: str

    @property
    def command(self) -> str:
        if self.args[:1] == ("sh",):
            return self.args[1]
        return shlex.join(["kubectl", *self.args])

    def json(self) -> Any:
        return json.loads(self.stdout)


class KubectlFailed(AssertionError):
    """A command a test expected to succeed exited non-zero; the message holds what kubectl said."""

    def __init__(self, result: Result) -> None:
        super().__init__(
            f"`{result.command}` exited {result.rc}\n--- stdout\n{result.stdout}--- stderr\n{result.stderr}"
        )
        self.result = result


class Kubectl:
    """Runs the real kubectl against ``server`` (started with ``tls=True``)."""

    def __init__(self, server: ApiServer, workdir: Path, binary: str, cwd: Path = REPO) -> None:
        self.server = server
        self.binary = binary
        self.cwd = cwd
        self.kubeconfig = server.kubeconfig(workdir / "kubeconfig")
        self.cache_dir = workdir / "kube-cache"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "KUBECTL_"))}
        self.env.update({"KUBECONFIG": str(self.kubeconfig), "KUBECACHEDIR": str(self.cache_dir)})

    def __call__(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = TIMEOUT
    ) -> Result:
        """Run ``kubectl <args>``; with ``check`` a non-zero exit raises KubectlFailed."""
        done = subprocess.run(
            [self.binary, *args],
            input=input,
            capture_output=True,
            text=True,
            cwd=self.cwd,
            env=self.env,
            timeout=timeout,
        )
        result = Result(tuple(args), done.returncode, done.stdout, done.stderr)
        if check and result.rc != 0:
            raise KubectlFailed(result)
        return result

    def shell(self, script: str, *, check: bool = True, timeout: float = TIMEOUT) -> Result:
        """Run a shell command line (``bash -euo pipefail -c``) with this kubeconfig, as a README's
        ``$(kubectl ...)`` substitutions and pipes need; ``args`` of the Result is ("sh", script)."""
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            capture_output=True,
            text=True,
            cwd=self.cwd,
            env=self.env,
            timeout=timeout,
        )
        result = Result(("sh", script), done.returncode, done.stdout, done.stderr)
        if check and result.rc != 0:
            raise KubectlFailed(result)
        return result

    def json(self, *args: str) -> Any:
        """``kubectl <args> -o json``, parsed."""
        return self(*args, "-o", "json").json()

    def forget_discovery(self) -> None:
        """Drop kubectl's discovery and OpenAPI cache, as a new machine would have none."""
        shutil.rmtree(self.cache_dir, ignore_errors=True)


def roll_out_daemonset(server: ApiServer, namespace: str, name: str) -> Json:
    """Stand in for the DaemonSet controller and the kubelets once every pod of a rollout is up:
    the emulator runs no controllers, so a DaemonSet's status stays the zero status the API server
    writes on create and ``kubectl rollout status`` waits forever. This writes the status a
    finished rollout has (pkg/controller/daemon updateDaemonSetStatus): one scheduled, updated,
    ready and available pod per node the pod template's nodeSelector matches, the generation
    observed. Tolerations and affinity are not evaluated. Returns the stored DaemonSet."""
    ds = server.get("apps/v1", "DaemonSet", name, namespace)
    if ds is None:
        raise AssertionError(f"no DaemonSet {namespace}/{name} to roll out")
    selector = ds["spec"]["template"]["spec"].get("nodeSelector") or {}
    nodes = [
        n
        for n in server.list("v1", "Node")
        if all((n["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())
    ]
    count = len(nodes)
    ds["status"] = {
        "observedGeneration": ds["metadata"].get("generation", 1),
        "desiredNumberScheduled": count,
        "currentNumberScheduled": count,
        "updatedNumberScheduled": count,
        "numberReady": count,
        "numberAvailable": count,
        "numberMisscheduled": 0,
    }
    return server.put(ds)


@contextmanager
def kubectl_against_emulator(workdir: Path) -> Iterator[Kubectl]:
    """A started TLS emulator and a Kubectl for it; skips (with the reason) without kubectl."""
    why = kubectl_missing()
    if why is not None:
        pytest.skip(f"the real kubectl is needed: {why}")
    binary = shutil.which("kubectl")
    assert binary is not None
    server = ApiServer(tls=True)
    server.start()
    try:
        yield Kubectl(server, workdir, binary)
    finally:
        server.stop()
