"""The fuzzed surfaces: where seeds come from, how one input is generated, and the entry points it
goes through — the same functions ``qosd validate``/``eval``/``test``/``run --once`` call.

A target returns normally when qosd accepted the input *and* it ran: a validated policy is built for
the node that validated it, evaluated for one tick on example snapshots, and its plan applied to a
scratch cgroup v1 tree through the real cgroup adapter (files created as a kernel would offer them,
in a private temporary directory). A rejection is the entry point's own exception (``PolicyError``,
``UsageError``); anything else, or a failure after acceptance (:class:`AcceptedButFailed`), is a crash.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import errno
import hashlib
import io
import json
import logging
import os
import random
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from bench.fuzz.mutate import Mutated, collect_keys, mutate
from bench.fuzz.oracle import AcceptedButFailed, OtherEntry
from engine.adapters.cgroup import CgroupAdapter
from engine.adapters.executor import NodeExecutor
from engine.adapters.result import OperationResult
from engine.cgroups.files import controller_of, host_files
from engine.cgroups.mounts import V1_CONTROLLERS, CgroupLayout
from engine.cli import build_parser
from engine.config.errors import PolicyError
from engine.config.load import Document, Layer
from engine.config.pipeline import REFERENCE_NODE, build_policy, load_documents, validate
from engine.config.policy import Policy
from engine.daemon.audit import audit_record
from engine.daemon.state_file import load_state, save_state
from engine.daemon.wiring import KUBE_OPERATIONS
from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState
from engine.model.facts import Snapshot
from engine.model.node import NodeInfo
from engine.model.operations import Operation, WriteCgroup
from engine.plan.planner import Guards
from engine.ruletest import reader as ruletest_reader
from engine.ruletest import runner as ruletest_runner
from engine.sources.snapshot_file import load_snapshot
from engine.sources.standalone import StandaloneSource, load_workloads
from engine.tick import TickResult, run_tick

ROOT = Path(__file__).resolve().parents[2]
KOORD = {"qosd.io/profile": "koordinator"}
# Example snapshots whose node is validate's reference node (16 CPUs, 2 sockets, 2 NUMA, 64 GiB):
# a policy that validated is evaluated on exactly the node it was validated for.
RULE_SNAPSHOTS = ("quiet-node.yaml", "memory-pressure.yaml", "be-cpu-evict.yaml", "rss-overuse-pressure.yaml")
STATE_SNAPSHOTS = ("memory-pressure.yaml", "be-memory-terminating.yaml", "rss-overuse-pressure.yaml")
WORKLOAD_CGROUPS = (
    "qosd-demo/probe",
    "qosd-demo/batch-1",
    "qosd-demo/batch-2",
    "qosd-demo/db",
    "qosd-web/api",
)


@dataclasses.dataclass
class Seed:
    name: str
    text: str
    docs: list[Any]


def _seed(path: Path, name: str | None = None) -> Seed:
    text = path.read_text(encoding="utf-8")
    return Seed(name or str(path.relative_to(ROOT)), text, list(yaml.safe_load_all(text)))


# ---------------------------------------------------------------- the worker's scratch node


class Env:
    """Per-worker scratch space: a copy of examples/ and rules/ (suites reference files relative to
    themselves), a scratch cgroup v1 tree for the adapter, and what is built once per worker."""

    def __init__(self, base: Path | None = None) -> None:
        # Under the run's directory when there is one: a worker killed for a hang leaves its
        # scratch space behind, and the run removes it with its own.
        self.tmp = Path(tempfile.mkdtemp(prefix="qosd-fuzz-", dir=base))
        self.inputs = self.tmp / "in"
        self.inputs.mkdir()
        self._copied = False
        self.cgroot = self.tmp / "cg"
        controllers = sorted(V1_CONTROLLERS)
        for c in controllers:
            (self.cgroot / c).mkdir(parents=True)
        self.layout = CgroupLayout.v1_tree(self.cgroot, controllers)
        self.executor = NodeExecutor(
            cgroup=CgroupAdapter(self.layout),
            resctrl=None,
            others={k: _refuse for k in KUBE_OPERATIONS},
        )
        self._snapshots: dict[str, Snapshot] = {}
        self._policies: dict[str, Policy] = {}
        self._builtin: list[Document] | None = None
        self._wfs: CgroupLayout | None = None

    def close(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def examples_copy(self) -> Path:
        if not self._copied:
            shutil.copytree(ROOT / "examples", self.tmp / "examples", symlinks=True)
            shutil.copytree(ROOT / "rules", self.tmp / "rules", symlinks=True)
            shutil.copytree(ROOT / "schemas", self.tmp / "schemas", symlinks=True)
            self._copied = True
        return self.tmp

    def snapshot(self, name: str) -> Snapshot:
        if name not in self._snapshots:
            self._snapshots[name] = with_cgroups(load_snapshot(ROOT / "examples" / "snapshots" / name))
        return self._snapshots[name]

    def builtin(self) -> list[Document]:
        if self._builtin is None:
            self._builtin = load_documents([])
        return list(self._builtin)

    def builtin_policy(self, node: NodeInfo) -> Policy:
        key = json.dumps([node.name, sorted(node.labels.items()), node.cpus, node.memory], default=str)
        if key not in self._policies:
            if len(self._policies) > 32:
                self._policies.clear()
            self._policies[key] = build_policy(self.builtin(), node)
        return self._policies[key]

    def workload_fs(self) -> CgroupLayout:
        """A v1 tree the standalone source discovers workloads in (what ``qosd run`` walks)."""
        if self._wfs is None:
            root = self.tmp / "wcg"
            controllers = ("cpu", "cpuacct", "cpuset", "memory")
            for ctl in controllers:
                for rel in WORKLOAD_CGROUPS:
                    (root / ctl / rel).mkdir(parents=True, exist_ok=True)
            self._wfs = CgroupLayout.v1_tree(root, controllers)
        return self._wfs

    # -- running what was accepted

    def tick(self, policy: Policy, snap: Snapshot, state: EngineState | None = None) -> TickResult:
        """One tick as the daemon runs it, the plan applied to the scratch tree; a failed operation
        or an exception after acceptance is a crash."""
        engine = Engine(policy, backend="python")
        try:
            result = run_tick(engine, snap, state or EngineState(), Guards())
        finally:
            engine.backend.close()
        ops = list(result.plan.operations)
        impossible = self._prepare(ops)
        outcomes = self.executor.apply(ops)
        for i, (op, outcome) in enumerate(zip(ops, outcomes, strict=True)):
            if outcome.status == "failed" and i not in impossible:
                where = f"{op.kind} {getattr(op, 'path', '')} {getattr(op, 'file', '')}".strip()
                raise AcceptedButFailed("accepted, then an operation failed", f"{where}: {outcome.error}")
        record = audit_record(result, outcomes)
        json.dumps(record, default=str)
        # What --state-file would hold, read back as a restarted daemon reads it.
        EngineState.from_dict(json.loads(json.dumps(result.state.to_dict())))
        return result

    def _prepare(self, ops: Sequence[Operation]) -> set[int]:
        """Create the cgroup directories and files the operations address, as the kernel offers
        them (a cgroup exists, its files exist). Never outside the scratch tree. Returns the
        operations whose cgroup no filesystem could hold (a path component over 255 bytes from an
        observed uid): their failure is the scratch node's, not qosd's."""
        base = str(self.cgroot)
        impossible: set[int] = set()
        for i, op in enumerate(ops):
            if not isinstance(op, WriteCgroup):
                continue
            try:
                controller = controller_of(op.file) or "cpu"
                if controller not in self.layout.v1:
                    continue
                directory = os.path.normpath(os.path.join(base, controller, op.path.strip("/")))
                if not directory.startswith(base + os.sep) or "\x00" in op.file or "/" in op.file:
                    continue
                try:
                    os.makedirs(directory, exist_ok=True)
                except OSError as exc:
                    if exc.errno == errno.ENAMETOOLONG:
                        impossible.add(i)
                    continue
                for name in host_files(op.file, 1):
                    target = os.path.join(directory, name)
                    if not os.path.lexists(target):
                        with open(target, "w", encoding="ascii") as fh:
                            fh.write("100000\n" if name == "cpu.cfs_period_us" else "0\n")
            except (OSError, ValueError, UnicodeError):
                continue
        return impossible


def with_cgroups(snap: Snapshot) -> Snapshot:
    """Every workload with a cgroup, as on a node (the kubelet's cgroupfs layout): the example
    snapshots leave them out, and setCgroup rules act only on workloads that have one. The
    components come from a digest of the uid and the container's position, as the kubelet names
    them by uid and container id: a fuzzed uid or container name ("../x", 400 digits) must not
    become a path no kubelet would create."""
    tiers = {"Guaranteed": "", "Burstable": "burstable/", "BestEffort": "besteffort/"}
    out = []
    for w in snap.workloads:
        if w.cgroup_path:
            out.append(w)
            continue
        digest = hashlib.sha1(w.uid.encode("utf-8", "surrogateescape")).hexdigest()[:16]
        pod = f"kubepods/{tiers.get(w.kube_qos, '')}pod{digest}"
        containers = tuple(
            c if c.cgroup_path else dataclasses.replace(c, cgroup_path=f"{pod}/c{i}")
            for i, c in enumerate(w.containers)
        )
        out.append(dataclasses.replace(w, cgroup_path=pod, containers=containers))
    return dataclasses.replace(snap, workloads=tuple(out))


def _refuse(op: Operation) -> OperationResult:
    return OperationResult(op, "skipped", "fuzz: no Kubernetes API")


# ---------------------------------------------------------------- surfaces


class Surface:
    """One kind of input. ``generate`` is deterministic in ``rng``; ``run`` raises on rejection."""

    name = ""
    suffix = ".yaml"
    json_output = False
    amplify = True  # list amplification (x100, x1000): off where input size is legitimately work

    def __init__(self) -> None:
        self._seeds: list[Seed] | None = None
        self._keys: list[str] = []

    def seeds(self) -> list[Seed]:
        if self._seeds is None:
            self._seeds = self.load_seeds()
            self._keys = collect_keys([d for s in self._seeds for d in s.docs])
        return self._seeds

    def load_seeds(self) -> list[Seed]:
        raise NotImplementedError

    def generate(self, rng: random.Random) -> Mutated:
        seed = rng.choice(self.seeds())
        return mutate(
            rng,
            seed.name,
            seed.text,
            self.prepare_docs(rng, seed),
            self._keys,
            json_output=self.json_output,
            amplify=self.amplify,
        )

    def prepare_docs(self, rng: random.Random, seed: Seed) -> list[Any]:
        return seed.docs

    def input_path(self, env: Env, m: Mutated) -> Path:
        return env.inputs / f"input{self.suffix}"

    def run(self, env: Env, path: Path) -> str | None:
        """Feed the file at ``path`` to qosd. Returns None (accepted and ran) or a rejection note
        for a rejection that is not an exception (a state file set aside with a warning)."""
        raise NotImplementedError

    def command(self, path: str) -> str:
        return f"python -m bench.fuzz --surface {self.name} --replay {path}"


class RulesSurface(Surface):
    """Rule files: ``qosd validate FILE`` (with the built-in layer), then, when valid, the policy
    for the reference node (with and without the profile label and the labels the file selects)
    evaluated for one tick on two example snapshots and applied."""

    name = "rules"

    def load_seeds(self) -> list[Seed]:
        files = sorted((ROOT / "rules").rglob("*.yaml")) + sorted(
            (ROOT / "examples" / "policies").glob("*.yaml")
        )
        files += [
            ROOT / "examples/deploy/base/rules/site.yaml",
            ROOT / "examples/deploy/canary-policy.yaml",
            ROOT / "examples/snapshots/batch-overlays.yaml",
        ]
        return [_seed(f) for f in files]

    def run(self, env: Env, path: Path) -> str | None:
        docs = load_documents([path])
        problems = validate(docs)
        if problems:
            raise PolicyError(problems)
        label_sets: list[dict[str, str]] = [{}, dict(KOORD)]
        for d in docs:
            if d.layer != Layer.FILE or not isinstance(d.data, dict):
                continue
            spec = d.data.get("spec")
            sel = spec.get("nodeSelector") if isinstance(spec, dict) else None
            match = sel.get("matchLabels") if isinstance(sel, dict) else None
            if isinstance(match, dict) and all(isinstance(v, str) for v in match.values()):
                labels = {str(k): v for k, v in match.items()}
                if labels not in label_sets and len(label_sets) < 4:
                    label_sets.append(labels)
        rng = random.Random(path.read_bytes())
        for labels in label_sets:
            node = REFERENCE_NODE.with_labels(labels)
            try:
                policy = build_policy(docs, node)
            except PolicyError as exc:
                raise AcceptedButFailed(
                    "validated, then rejected for a node it was validated for",
                    f"labels {labels}: {exc.problems[0].format()}",
                ) from None
            for name in (RULE_SNAPSHOTS[0], rng.choice(RULE_SNAPSHOTS[1:])):
                env.tick(policy, dataclasses.replace(env.snapshot(name), node=node))
        return None

    def command(self, path: str) -> str:
        return f"qosd validate {path}  # then, if valid: python -m bench.fuzz --surface rules --replay {path}"


class FactsSurface(Surface):
    """Facts snapshots: ``qosd eval --facts FILE`` with the built-in policy, plan applied."""

    name = "facts"

    def load_seeds(self) -> list[Seed]:
        out = []
        for f in sorted((ROOT / "examples" / "snapshots").glob("*.yaml")):
            seed = _seed(f)
            if (
                len(seed.docs) == 1
                and isinstance(seed.docs[0], dict)
                and seed.docs[0].get("kind") == "FactsSnapshot"
            ):
                out.append(seed)
        return out

    def run(self, env: Env, path: Path) -> str | None:
        snap = with_cgroups(load_snapshot(path))
        try:
            policy = env.builtin_policy(snap.node)
        except PolicyError as exc:
            raise AcceptedButFailed(
                "facts accepted, then the built-in policy failed for their node", exc.problems[0].format()
            ) from None
        env.tick(policy, snap)
        return None

    def command(self, path: str) -> str:
        return f"qosd eval --facts {path}"


STANDALONE_DOC = re.compile(
    r"```yaml\n(apiVersion: qosd.io/v1alpha1\nkind: StandaloneWorkloads\n.*?)```", re.S
)


class WorkloadsSurface(Surface):
    """Standalone workloads files (``qosd run --workloads FILE``): loaded, the workloads discovered
    in a scratch cgroup tree, the built-in policy for the file's node labels evaluated on them."""

    name = "workloads"

    def load_seeds(self) -> list[Seed]:
        text = (ROOT / "docs" / "standalone.md").read_text(encoding="utf-8")
        seeds = [
            Seed(f"docs/standalone.md#{i}", m, list(yaml.safe_load_all(m)))
            for i, m in enumerate(STANDALONE_DOC.findall(text))
        ]
        extra = {
            "apiVersion": "qosd.io/v1alpha1",
            "kind": "StandaloneWorkloads",
            "node": {"name": "fuzz-host", "labels": {"qosd.io/profile": "koordinator"}},
            "roots": ["qosd-demo/*", "qosd-web/*"],
            "workloads": [
                {
                    "path": "qosd-demo/probe",
                    "qos": "LS",
                    "priority": 9000,
                    "requests": {"cpu": "1", "memory": "1Gi"},
                    "limits": {"cpu": "2", "memory": "2Gi"},
                },
                {
                    "path": "qosd-demo/batch-*",
                    "name": "batch-{base}",
                    "qos": "BE",
                    "requests": {"cpu": "500m", "memory": "512Mi"},
                },
                {
                    "path": "qosd-web/api",
                    "qos": "LSR",
                    "requests": {"cpu": "2", "memory": "4Gi"},
                    "limits": {"cpu": "2", "memory": "4Gi"},
                },
            ],
        }
        text2 = yaml.safe_dump(extra, sort_keys=False)
        seeds.append(Seed("fuzz:koordinator-workloads", text2, [extra]))
        return seeds

    def run(self, env: Env, path: Path) -> str | None:
        fs = env.workload_fs()
        config = load_workloads(path, fs)  # as qosd run does: patterns checked against the cgroup root
        source = StandaloneSource(fs, config)
        workloads = source.workloads()
        base = env.snapshot("quiet-node.yaml")
        node = REFERENCE_NODE.with_labels(dict(config.node_labels))
        try:
            policy = env.builtin_policy(node)
        except PolicyError as exc:
            raise AcceptedButFailed(
                "workloads accepted, then the built-in policy failed for their node", exc.problems[0].format()
            ) from None
        env.tick(policy, dataclasses.replace(base, node=node, workloads=tuple(workloads)))
        return None

    def command(self, path: str) -> str:
        return (
            f"qosd run --once --dry-run --listen '' --workloads {path}"
            f"  # or: python -m bench.fuzz --surface workloads --replay {path}"
        )


class StateSurface(Surface):
    """State files: ``qosd run --state-file FILE`` (load_state, then a tick carrying that state,
    then the state saved and read back) and ``qosd eval --state FILE`` (EngineState.from_dict of
    the JSON). A file load_state sets aside with a warning naming it counts as LOCATED."""

    name = "state"
    suffix = ".json"
    json_output = True

    def load_seeds(self) -> list[Seed]:
        seeds: list[Seed] = []
        env = Env()
        try:
            for name in STATE_SNAPSHOTS:
                snap = env.snapshot(name)
                policy = env.builtin_policy(snap.node)
                state = EngineState()
                for step in range(3):
                    s = dataclasses.replace(snap, time=snap.time + 10.0 * step)
                    engine = Engine(policy)
                    try:
                        state = run_tick(engine, s, state, Guards()).state
                    finally:
                        engine.backend.close()
                doc = {
                    "apiVersion": "qosd.io/v1alpha1",
                    "kind": "EngineState",
                    "time": snap.time + 20,
                    "generation": 1,
                    "state": state.to_dict(),
                }
                seeds.append(Seed(f"state-after:{name}", json.dumps(doc), [doc]))
                seeds.append(Seed(f"eval-state:{name}", json.dumps(state.to_dict()), [state.to_dict()]))
        finally:
            env.close()
        for i, raw in enumerate(("null", "[]", "{}", '{"state": {}}', '{"state": {"heldSince": {"r": 1}}}')):
            seeds.append(Seed(f"shape:{i}", raw, [json.loads(raw)]))
        return seeds

    def run(self, env: Env, path: Path) -> str | None:
        note: list[str] = []
        handler = _Capture(note)
        logger = logging.getLogger("engine.daemon")
        logger.addHandler(handler)
        # load_state moves a corrupt file aside: qosd eval --state reads its own copy of the input
        eval_copy = env.inputs / "eval-state.json"
        shutil.copyfile(path, eval_copy)
        try:
            state = load_state(path)
        finally:
            logger.removeHandler(handler)
        snap = env.snapshot(STATE_SNAPSHOTS[0])
        env.tick(env.builtin_policy(snap.node), snap, state)
        save_state(env.inputs / "saved-state.json", state, 1, snap.time)
        load_state(env.inputs / "saved-state.json")
        # qosd eval --state FILE: the command itself, its output discarded.
        args = build_parser().parse_args(
            [
                "eval",
                "--facts",
                str(ROOT / "examples" / "snapshots" / STATE_SNAPSHOTS[0]),
                "--state",
                str(eval_copy),
                "--output",
                "json",
            ]
        )
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                args.func(args)
        except Exception as exc:  # PolicyError / UsageError are classified as rejections, as cli.main
            raise OtherEntry("eval --state", exc) from exc
        return note[0] if note else None


class _Capture(logging.Handler):
    def __init__(self, sink: list[str]):
        super().__init__(logging.WARNING)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        fields: Mapping[str, Any] = getattr(record, "fields", {}) or {}
        if fields.get("path"):
            self.sink.append(f"{record.getMessage()} ({fields.get('path')}: {fields.get('error')})")


class RuleTestSurface(Surface):
    """RuleTest suites (``qosd test FILE``): suites trimmed to 1-3 cases, written beside the shipped
    ones in a copy of examples/ so their relative references resolve."""

    name = "ruletest"
    amplify = False  # a suite of 1000 cases is 1000 evaluations, not a fault

    def load_seeds(self) -> list[Seed]:
        return [_seed(f) for f in sorted((ROOT / "examples" / "tests").glob("*.yaml"))]

    def prepare_docs(self, rng: random.Random, seed: Seed) -> list[Any]:
        docs = copy.deepcopy(seed.docs)
        for d in docs:
            if isinstance(d, dict) and isinstance(d.get("cases"), list) and len(d["cases"]) > 3:
                k = rng.randint(1, 3)
                start = rng.randrange(len(d["cases"]) - k + 1)
                d["cases"] = d["cases"][start : start + k]
        return docs

    def input_path(self, env: Env, m: Mutated) -> Path:
        return env.examples_copy() / "examples" / "tests" / f"fuzz-input{self.suffix}"

    def run(self, env: Env, path: Path) -> str | None:
        suites = ruletest_reader.load_suites([path])
        results = ruletest_runner.run(suites)
        problems = [p for r in results if r.status == "error" for p in r.problems]
        if problems:
            raise PolicyError(problems)
        return None

    def command(self, path: str) -> str:
        return f"qosd test {path}  # placed in examples/tests/ of a checkout"


SURFACES: dict[str, Callable[[], Surface]] = {
    "rules": RulesSurface,
    "facts": FactsSurface,
    "workloads": WorkloadsSurface,
    "state": StateSurface,
    "ruletest": RuleTestSurface,
}
