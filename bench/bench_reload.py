"""Hot-reload latency: from a change to the new policy generation in effect.

Targets (issue 15): p99 <= 30 ms for a ConfigMap ``..data`` swap, <= 100 ms for an editor save and a
QoSPolicy update. Three paths, each through the parts the daemon wires
(engine.daemon.wiring.build_standalone / build_kube):

- **editor save**: a rule file replaced by an editor's atomic save (write a temp sibling, rename it
  over the file) -> RuleFileWatcher (inotify on the directory, 50 ms debounce, content hash) -> Reloader.
- **ConfigMap swap**: the kubelet's AtomicWriter sequence on a ConfigMap volume (new timestamped
  directory, ``..data_tmp`` symlink renamed over ``..data``) -> the same watcher, which checks at the
  ``..data`` rename without a debounce (the switch is atomic) -> Reloader.
- **CR update**: a QoSPolicy replaced through the official client over HTTP -> the API server's watch
  -> PolicyWatch (list+watch reflector) -> Reloader. The API server is the in-repo emulator
  (tests/kubeapi; no kube-apiserver can run here); its own patch-to-watch-event latency is a few ms.

"In effect" is the moment the Reloader swapped the engine (its listener is called right after),
which is what the next tick uses. Each update changes one threshold, so every update is a real new
generation: the built-in layer plus the edited document is rendered, validated, merged and compiled.
Latencies are wall-clock on a shared 2-core VM, measured in one run.

    python -m bench.bench_reload --updates 200 --write
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench.results import write_section
from engine.config.pipeline import REFERENCE_NODE
from engine.reload import ReloadConfig, Reloader, ReloadOutcome
from engine.sources.rulefiles import RuleFileWatcher

HEAD = "## Hot reload latency (change -> new generation in effect)"
DOC = """\
apiVersion: qosd.io/v1alpha1
kind: QoSPolicy
metadata: {{name: site}}
spec:
  priority: 10
  nodeSelector:
    matchExpressions:
      - {{key: qosd.io/profile, operator: NotIn, values: [koordinator]}}
  reclaim:
    cpu:
      headroom:
        reservedForAllocate: {value}
"""


class Loaded:
    """Reloader listener: wakes the measuring thread when generation ``n`` is in effect."""

    def __init__(self) -> None:
        self.cv = threading.Condition()
        self.at: dict[int, float] = {}

    def __call__(self, outcome: ReloadOutcome) -> None:
        if outcome.result == "loaded":
            with self.cv:
                self.at[outcome.generation] = time.perf_counter()
                self.cv.notify_all()

    def wait(self, generation: int, timeout: float = 10.0) -> float:
        with self.cv:
            if not self.cv.wait_for(lambda: generation in self.at, timeout):
                raise SystemExit(f"generation {generation} never came: the reload path is broken")
            return self.at[generation]


def measure(updates: int, change: Callable[[int], None], reloader: Reloader, loaded: Loaded) -> list[float]:
    out = []
    for i in range(updates):
        time.sleep(0.12)  # past the debounce of the previous change, as separate edits would be
        target = reloader.generation + 1
        t0 = time.perf_counter()
        change(i)
        out.append((loaded.wait(target) - t0) * 1000)
    return out


def file_reloader(rules: Path, loaded: Loaded) -> tuple[Reloader, RuleFileWatcher]:
    reloader = Reloader(ReloadConfig(files=(rules,), stat_files=False))
    reloader.listeners.append(loaded)
    reloader.observe_node(REFERENCE_NODE)
    watcher = RuleFileWatcher([rules], lambda reason: reloader.request("file"))
    watcher.start()
    return reloader, watcher


def editor_saves(updates: int) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        rules = Path(tmp) / "rules"
        rules.mkdir()
        (rules / "site.yaml").write_text(DOC.format(value=5))
        loaded = Loaded()
        reloader, watcher = file_reloader(rules, loaded)

        def save(i: int) -> None:
            temp = rules / ".site.yaml.swp"
            temp.write_text(DOC.format(value=6 + i % 2))
            os.replace(temp, rules / "site.yaml")

        try:
            return measure(updates, save, reloader, loaded)
        finally:
            watcher.stop()
            reloader.close()


def configmap_swaps(updates: int) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        volume = Path(tmp) / "rules"
        volume.mkdir()

        def write(i: int, value: int) -> None:
            ts = volume / f"..2026_11_22_10_00_{i:06d}.{os.getpid()}"
            ts.mkdir()
            (ts / "site.yaml").write_text(DOC.format(value=value))
            old = os.readlink(volume / "..data") if (volume / "..data").is_symlink() else None
            os.symlink(ts.name, volume / "..data_tmp")
            os.rename(volume / "..data_tmp", volume / "..data")
            if not (volume / "site.yaml").is_symlink():
                os.symlink("..data/site.yaml", volume / "site.yaml")
            if old is not None:
                for f in (volume / old).iterdir():
                    f.unlink()
                (volume / old).rmdir()

        write(-1, 5)
        loaded = Loaded()
        reloader, watcher = file_reloader(volume, loaded)
        try:
            return measure(updates, lambda i: write(i, 6 + i % 2), reloader, loaded)
        finally:
            watcher.stop()
            reloader.close()


def cr_updates(updates: int) -> list[float]:
    import yaml
    from kubernetes import client

    from engine.config.crd import qosd_crds
    from engine.kube.client import GROUP, POLICY_PLURAL, VERSION, load_api_client
    from engine.sources.policies import PolicyWatch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.kubeapi import ApiServer

    with ApiServer() as server, tempfile.TemporaryDirectory() as tmp:
        for crd in qosd_crds():
            server.install_crd(crd)
        api = load_api_client(server.kubeconfig(Path(tmp)))
        custom = client.CustomObjectsApi(server.api_client())
        body = yaml.safe_load(DOC.format(value=5))
        custom.create_cluster_custom_object(GROUP, VERSION, POLICY_PLURAL, body)
        loaded = Loaded()
        reloader = Reloader(ReloadConfig(stat_files=False))
        watch = PolicyWatch(api)
        reloader.policies = watch
        reloader.listeners.append(loaded)
        watch.on_change = lambda: reloader.request("crd") and None
        watch.start()
        if not watch.wait_synced(10):
            raise SystemExit("the QoSPolicy watch never synced")
        reloader.observe_node(REFERENCE_NODE)

        def update(i: int) -> None:
            current = custom.get_cluster_custom_object(GROUP, VERSION, POLICY_PLURAL, "site")
            current["spec"]["reclaim"]["cpu"]["headroom"]["reservedForAllocate"] = 6 + i % 2
            custom.replace_cluster_custom_object(GROUP, VERSION, POLICY_PLURAL, "site", current)

        try:
            return measure(updates, update, reloader, loaded)
        finally:
            watch.stop()
            reloader.close()


def summary(name: str, ms: list[float], target: float) -> str:
    q = statistics.quantiles(ms, n=100, method="inclusive")
    return (
        f"| {name} | {len(ms)} | {statistics.median(ms):.1f} | {q[94]:.1f} | {q[98]:.1f} | {max(ms):.1f} | "
        f"{target:g} | {'yes' if q[98] <= target else 'NO'} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument(
        "--write", action="store_true", help=f"replace the section {HEAD!r} of bench/RESULTS.md"
    )
    args = parser.parse_args()
    rows = [
        summary("editor save (rename over the file)", editor_saves(args.updates), 100),
        summary("ConfigMap `..data` swap", configmap_swaps(args.updates), 30),
        summary("QoSPolicy update (HTTP, watch)", cr_updates(args.updates), 100),
    ]
    table = "\n".join(
        [
            "| change | updates | median ms | p95 ms | p99 ms | max ms | p99 target ms | met |",
            "|---|---|---|---|---|---|---|---|",
            *rows,
        ]
    )
    print(table)
    if args.write:
        write_section(
            HEAD,
            f"{HEAD}\n\n`python -m bench.bench_reload --updates {args.updates} --write` "
            f"({time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs). From the write (or the API call) to the "
            "Reloader's swap; an editor save includes the watcher's 50 ms debounce, a ConfigMap swap none. "
            "Each update is a new "
            "generation of the built-in layer plus one edited document.\n\n" + table + "\n",
        )


if __name__ == "__main__":
    main()
