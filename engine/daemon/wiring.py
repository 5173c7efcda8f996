"""Start-up wiring of ``qosd run``, in one place: which node source, which executor and adapters,
which background services (watches, status writers, the rule file watcher), from the parsed flags."""

from __future__ import annotations

import argparse
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from engine.adapters.cgroup import CgroupAdapter
from engine.adapters.evict import StandaloneEvictions
from engine.adapters.evict_journal import EvictionJournal, journal_of
from engine.adapters.executor import Handler, NodeExecutor
from engine.adapters.fsio import open_nofollow
from engine.adapters.recorder import RecordingExecutor
from engine.adapters.resctrl import ResctrlAdapter
from engine.adapters.result import OperationResult
from engine.cgroups.mounts import CgroupUnavailable
from engine.config.errors import UsageError
from engine.config.pipeline import node_labels
from engine.daemon.faults import Throttle
from engine.daemon.logs import configure_logging, log
from engine.daemon.loop import Daemon, DaemonConfig
from engine.daemon.parts import Executor, OperationOutcome
from engine.evaluate.engine import Engine
from engine.model.facts import Snapshot
from engine.model.intents import CgroupIntent
from engine.model.operations import EmitEvent, EvictPod, Operation, WriteCgroup
from engine.plan.planner import WOULD_EVICT
from engine.sources.collector import CollectorOptions, NodeCollector
from engine.sources.files import PinnedReader
from engine.sources.standalone import PatternError, StandaloneSource, standalone_collector
from engine.tick import TickResult

# What a daemon's collector reads how often (docs/standalone.md, "What a tick costs"). Each cgroup
# file qosd manages is re-read at least every OBSERVE_SECONDS (staggered over the ticks) and reported
# as last read or last written in between, so a value changed behind qosd's back is corrected within
# that bound; Koordinator's executor trusts its own last write for 60 s (ResourceForceUpdateSeconds).
# Per-cgroup memory.stat is re-read every MEMORY_SECONDS, a pod's memory.numa_stat (only for a
# numaScoped evict) every NUMA_SECONDS; CPU counters and node files every tick.
OBSERVE_SECONDS = 30.0
MEMORY_SECONDS = 10.0
NUMA_SECONDS = 30.0
REREAD_AFTER = frozenset({"failed", "vanished", "unchanged"})


def daemon_options(interval: float) -> CollectorOptions:
    """The collector options of ``qosd run`` at this tick interval (see OBSERVE_SECONDS)."""
    return CollectorOptions(
        interval=interval,
        observe_every=max(1, round(OBSERVE_SECONDS / interval)),
        memory_every=max(1, round(MEMORY_SECONDS / interval)),
        numa_every=max(1, round(NUMA_SECONDS / max(MEMORY_SECONDS, interval))),
    )


class CollectorSource:
    """The node collector as the daemon's NodeSource: it learns each generation's windows and
    classes, and keeps observing the files the last plan manages (so a steady state writes nothing).
    Writes that succeeded are reported as observed until the file's next re-read; writes that failed,
    found the cgroup gone or found the value already there are re-read at the next tick."""

    def __init__(self, collector: NodeCollector, adapter: CgroupAdapter | None = None):
        self.collector = collector
        self.adapter = adapter
        self._tracked: tuple[tuple[Any, ...], tuple[tuple[str, str], ...]] = ((), ())  # intents, pairs
        collector.prime()

    def collect(self) -> Snapshot:
        return self.collector.collect()

    def adopt(self, engine: Engine) -> None:
        classify = engine.classifier.classify
        self.collector.use_policy(engine.policy, lambda w: classify(w).class_name)

    def observe(self, wanted: Mapping[str, Sequence[str]]) -> Mapping[str, Mapping[str, str]]:
        # The adapter reads the host files of logical names, exactly as it will compare on write
        # (share files by the formula of the generation the collector last adopted).
        if self.adapter is None:
            return {}
        return self.adapter.observe(wanted, self.collector.weight_formula)

    def applied(self, result: TickResult, outcomes: Sequence[OperationOutcome]) -> None:
        intents = result.evaluation.intents
        if intents != self._tracked[0]:  # else the same pairs object: the collector skips them
            pairs = tuple((i.path, i.file) for i in intents if isinstance(i, CgroupIntent))
            self._tracked = (intents, pairs)
        self.collector.track(self._tracked[1])
        for o in outcomes:
            op = getattr(o, "op", None)
            if not isinstance(op, WriteCgroup):
                continue
            if o.status == "applied":
                self.collector.note_written(op.path, op.file, op.value)
            elif o.status in REREAD_AFTER:
                # What the kernel holds is not what was planned against: read it at the next tick
                # instead of waiting for the file's turn in the stagger.
                self.collector.reread(op.path, op.file)


def _common(
    args: argparse.Namespace, adapter: CgroupAdapter | None = None
) -> tuple[float, dict[str, str], CgroupAdapter]:
    interval: float = args.interval  # parsed and bounded by argparse (engine.argtypes)
    labels = node_labels(args.label, args.profile)
    if adapter is None:
        try:
            # Observed files stay open between ticks (one pread each); see engine/sources/files.py.
            adapter = CgroupAdapter.detect(args.cgroup_root, observe_reader=PinnedReader(open_nofollow))
        except (CgroupUnavailable, OSError) as exc:
            raise UsageError(f"--cgroup-root {args.cgroup_root}: {exc}") from None
    return interval, labels, adapter


def _config(
    args: argparse.Namespace,
    interval: float,
    labels: Mapping[str, str],
    watch: bool,
    mode: str,
    describe: Mapping[str, Any],
) -> DaemonConfig:
    return DaemonConfig(
        rules=tuple(args.rules),
        builtin=not args.no_builtin,
        labels=labels,
        interval=interval,
        once=args.once,
        dry_run=args.dry_run,
        audit=args.enforcement == "audit",
        eviction_burst=args.eviction_burst,
        backend=args.backend,
        state_file=_state_file(args.state_file),
        audit_log=_audit_file(args.audit_log),
        audit_max_bytes=int(args.audit_log_max_bytes),
        audit_keep=args.audit_log_keep,
        audit_facts=args.audit_log_facts,
        listen=args.listen or None,
        stat_files=not watch,
        sync_timeout=args.sync_timeout,
        print_plan=args.once and args.dry_run,
        mode=mode,
        describe={"cgroupRoot": str(args.cgroup_root), **describe},
        # standalone: the Kubernetes operations are refused, evictions excepted (done by signals)
        unavailable={k: STANDALONE_REFUSAL for k in KUBE_OPERATIONS if k != EvictPod.kind}
        if mode == "standalone"
        else {},
    )


def _file_watcher(args: argparse.Namespace, daemon: Daemon) -> None:
    """Hot reload from rule files: the watcher asks the reload path for a new generation."""
    from engine.sources.rulefiles import RuleFileWatcher

    def changed(reason: str) -> None:
        daemon.reloader.request("file")

    watcher = RuleFileWatcher(list(args.rules), changed, debounce=args.reload_debounce)
    daemon.services.append(watcher)


def _watch_files(args: argparse.Namespace) -> bool:
    return bool(args.rules) and not args.once and not args.no_watch


def build_standalone(args: argparse.Namespace) -> Daemon:
    """``qosd run`` without Kubernetes: cgroups under --cgroup-root are the workloads."""
    interval, labels, adapter = _common(args)
    if args.workloads is not None and not args.workloads.is_file():
        raise UsageError(f"--workloads {args.workloads}: no such file")
    # One adapter reads resctrl's facts for every snapshot (dry run too) and applies its operations.
    resctrl = ResctrlAdapter(args.resctrl_root, tasks_of=adapter.tasks)
    try:
        collector = standalone_collector(
            adapter.layout,  # one detection: the collector reads the hierarchy the adapter writes
            args.workloads,
            args.root or None,
            options=daemon_options(interval),
            observe=adapter.observe,
            resctrl=resctrl.info,
        )
    except PatternError as exc:
        raise UsageError(f"--root: {exc}") from None
    except (CgroupUnavailable, OSError) as exc:
        raise UsageError(f"--cgroup-root {args.cgroup_root}: {exc}") from None
    executor: Executor
    if args.dry_run:
        executor = RecordingExecutor()
    elif args.enforcement == "audit":
        # Standalone audit: no Events to send (no API), so nothing at all is executed.
        executor = RecordingExecutor("audit mode (qosd run --mode audit): recorded, not executed")
    else:
        source = collector.source
        if not isinstance(source, StandaloneSource):
            raise TypeError(f"standalone_collector returned a {type(source).__name__} workload source")
        # With a state file, the evictions in progress are journaled beside it, so that a restart
        # during a grace period still sends its SIGKILL (engine.adapters.evict_journal).
        journal = journal_of(args.state_file)
        evictions = StandaloneEvictions(
            collector.cgroup,
            source.cgroup_of,
            journal=EvictionJournal(journal) if journal is not None else None,
        )
        executor = NodeExecutor(
            cgroup=adapter,
            resctrl=resctrl,
            others={
                **{kind: _standalone_refusal for kind in KUBE_OPERATIONS},
                EvictPod.kind: evictions.evict,
            },
            finishing=(evictions,),
        )
    watch = _watch_files(args)
    found = collector.source
    describe: dict[str, Any] = {"workloadsFile": str(args.workloads) if args.workloads else None}
    if isinstance(found, StandaloneSource):
        describe.update(roots=list(found.config.effective_roots), discoveryBase=found.base)
    config = _config(args, interval, labels, watch, "standalone", describe)
    daemon = Daemon(config, CollectorSource(collector, adapter), executor)
    if watch:
        _file_watcher(args, daemon)
    return daemon


def build_kube(args: argparse.Namespace, adapter: CgroupAdapter | None = None) -> Daemon:
    """``qosd run`` on a Kubernetes node: pods of this node (watched) are the workloads, QoSPolicy
    resources and rule files are the policy, evictions and node resources go through the API, and
    the node's QoSNodeStatus (and, when elected, every QoSPolicy's status) report what runs."""
    from kubernetes.config import ConfigException

    from engine.adapters.kube import KubeOperations
    from engine.cgroups.paths import detect_driver
    from engine.kube.client import load_api_client
    from engine.kube.events import EventRecorder
    from engine.kube.reflector import ReflectorCollector
    from engine.kube.status import NodeStatusWriter, PolicyStatusAggregator, PolicyStatusController
    from engine.sources.kubenode import NodeWatch
    from engine.sources.kubepods import KubePodSource, pod_reflector
    from engine.sources.policies import PolicyWatch

    node_name = args.node_name or os.environ.get("NODE_NAME", "")
    if not node_name:
        raise UsageError(
            "Kubernetes mode needs the node's name: set NODE_NAME (the DaemonSet sets it from "
            "spec.nodeName through the downward API) or pass --node-name"
        )
    interval, labels, adapter = _common(args, adapter)
    try:
        api = load_api_client(args.kubeconfig)
    except Exception as exc:
        # The client's loader reports a malformed file with whatever its parsing hit (ConfigException,
        # TypeError for a file that is not a mapping, YAML errors): all mean "not a usable kubeconfig".
        where = f"--kubeconfig {args.kubeconfig}" if args.kubeconfig else "in-cluster / $KUBECONFIG"
        why = str(exc) if isinstance(exc, ConfigException | OSError) else f"{type(exc).__name__}: {exc}"
        raise UsageError(f"cannot configure the Kubernetes client ({where}): {why}") from None
    fs = adapter.layout  # one detection: the collector reads the hierarchy the adapter writes
    driver = args.cgroup_driver
    if driver == "auto":
        driver = detect_driver(fs.dir("", "cpu").rstrip("/")) or "systemd"
    node = NodeWatch(api, node_name)
    pods = KubePodSource(pod_reflector(api, node_name), driver)
    resctrl = ResctrlAdapter(args.resctrl_root, tasks_of=adapter.tasks)
    collector = NodeCollector(
        pods,
        fs,
        node_name=node_name,
        node_object=node,
        options=daemon_options(interval),
        observe=adapter.observe,
        resctrl=resctrl.info,
    )
    events = EventRecorder(api, host=node_name)
    policies = PolicyWatch(api)
    executor: Executor
    if args.dry_run:
        executor = RecordingExecutor()
    elif args.enforcement == "audit":
        # The planner holds every write in audit mode; the executor can do nothing but send Events
        # either, so audit being side-effect free is a property of the wiring too.
        kube_ops = KubeOperations(api, node_name, events, node.node)
        executor = NodeExecutor(others={EmitEvent.kind: audit_events(kube_ops.handlers()[EmitEvent.kind])})
    else:
        kube_ops = KubeOperations(api, node_name, events, node.node)
        executor = NodeExecutor(
            cgroup=adapter,
            resctrl=resctrl,
            others=kube_ops.handlers(),
        )
    watch = _watch_files(args)
    daemon = Daemon(
        _config(args, interval, labels, watch, "kubernetes", {"node": node_name, "cgroupDriver": driver}),
        CollectorSource(collector, adapter),
        executor,
        policies=policies,
        labels=node.labels,
        services=[node, pods.reflector, policies],
        synced=[
            ("node", node.wait_synced),
            ("pods", pods.reflector.wait_synced),
            ("qospolicies", policies.wait_synced),
        ],
    )
    reloader = daemon.reloader
    reflectors = [node.reflector, pods.reflector, policies.reflector]
    daemon.metrics.registry.register(ReflectorCollector(reflectors))
    daemon.readiness.extend(r.problem for r in reflectors)

    def crd_changed() -> None:
        reloader.request("crd")

    def labels_changed() -> None:
        reloader.request("node")

    policies.on_change = crd_changed
    node.on_labels = labels_changed
    status = NodeStatusWriter(api, node_name, events, node_uid=node.uid)
    daemon.reloader.listeners.append(status)
    daemon.services.extend([status, events])
    if args.policy_status:
        aggregator = PolicyStatusAggregator(
            api, policies.objects, policies.documents, lambda: {}, events=events, builtin=not args.no_builtin
        )
        controller = PolicyStatusController(
            api,
            aggregator,
            lambda poke: _node_status_reflector(api, poke, aggregator),
            namespace=args.namespace or os.environ.get("POD_NAMESPACE", "") or "qosd-system",
            identity=node_name,
        )
        policies.on_any = controller.poke
        daemon.services.append(controller)
    if watch:
        _file_watcher(args, daemon)
    return daemon


def _node_status_reflector(api: Any, poke: Callable[[], None], aggregator: Any) -> Any:
    """A started reflector of every QoSNodeStatus, wired as the aggregator's input (leader only)."""
    import functools

    from kubernetes import client

    from engine.kube.client import GROUP, NODE_STATUS_PLURAL, VERSION
    from engine.kube.reflector import Reflector

    reflector = Reflector(
        "qosnodestatuses",
        functools.partial(
            client.CustomObjectsApi(api).list_cluster_custom_object, GROUP, VERSION, NODE_STATUS_PLURAL
        ),
        on_change=poke,
    )
    aggregator.node_statuses = reflector.items
    reflector.start()
    return reflector


# A pod audit mode would evict stays, so the same decision comes back every round: its WouldEvict
# Event is sent at most this often (one spam-filter token comes back every 5 minutes: more would
# use up the Node's Event budget and silence its other Events, such as PolicyRejected).
AUDIT_EVENT_SECONDS = 300.0


def audit_events(emit: Handler, clock: Callable[[], float] = time.monotonic) -> Handler:
    """``emit`` with repeated WouldEvict Events (same pod, same rule) held back for AUDIT_EVENT_SECONDS."""
    throttle = Throttle(AUDIT_EVENT_SECONDS, clock)

    def run(op: Operation) -> OperationResult:
        if isinstance(op, EmitEvent) and op.reason == WOULD_EVICT and throttle.admit(op.message) is None:
            why = f"audit mode: the same WouldEvict Event was sent less than {AUDIT_EVENT_SECONDS:g}s ago"
            return OperationResult(op, "skipped", why)
        return emit(op)

    return run


KUBE_OPERATIONS = ("evictPod", "setNodeTaint", "setNodeCondition", "emitEvent", "publishNodeResource")


STANDALONE_REFUSAL = "standalone mode: no Kubernetes API on this node"


def _standalone_refusal(op: Operation) -> OperationResult:
    return OperationResult(op, "skipped", STANDALONE_REFUSAL)


def _state_file(path: Path | None) -> Path | None:
    """--state-file: a regular file (or none yet) in a directory qosd can write, created if missing.
    The file is replaced atomically each tick, so anything else there (a directory, /dev/null) is
    refused at start rather than replaced."""
    if path is None:
        return None
    if path.exists() and not path.is_file():
        raise UsageError(
            f"--state-file {path}: not a regular file; qosd replaces this file atomically on every "
            "tick, so name a file of its own (e.g. /var/lib/qosd/state.json)"
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--state-file {path}: cannot create {path.parent}: {exc.strerror}") from None
    _writable_dir("--state-file", path)
    return path


def _audit_file(path: Path | None) -> Path | None:
    """--audit-log: a file (or device) records can be appended to, in an existing directory. A
    write that fails later (a full disk) is counted and reported, not fatal (AuditLog)."""
    if path is None:
        return None
    if path.is_dir():
        raise UsageError(f"--audit-log {path}: is a directory; name the JSON Lines file to append to")
    if not path.exists():
        if not path.parent.is_dir():
            raise UsageError(f"--audit-log {path}: the directory {path.parent} does not exist")
        _writable_dir("--audit-log", path)
    elif not os.access(path, os.W_OK):
        raise UsageError(f"--audit-log {path}: not writable")
    return path


def _writable_dir(flag: str, path: Path) -> None:
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {path}: cannot write in {path.parent} (read-only or no permission)")


def kube_mode(args: argparse.Namespace) -> bool:
    """Kubernetes mode when asked (--kubeconfig) or when running in a pod; --standalone forces it off."""
    if args.standalone:
        return False
    return args.kubeconfig is not None or bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def _starting(signum: int, _frame: FrameType | None) -> None:
    log.info(
        "signal during start-up ignored: the first tick loads the rule files",
        extra={"fields": {"signal": signal.Signals(signum).name}},
    )


def cmd_run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    # Until the loop installs its handlers, SIGHUP and SIGUSR1 would kill a daemon still starting.
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGHUP, signal.SIGUSR1):
            signal.signal(signum, _starting)
    daemon = build_kube(args) if kube_mode(args) else build_standalone(args)
    return daemon.run()
