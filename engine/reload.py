"""One reload path for every rule source: files, QoSPolicy custom resources and the node itself.

Whatever triggers it (a file watcher event, a CR watch event, the node's labels changing, the first
tick), a reload is the same steps under one lock: read the layers (built-in, files, CRs) ->
render -> validate -> merge -> compile -> swap the engine reference. A generation that fails any
step is rejected as a whole and the one in effect keeps running; the failure is reported with its
locations (file:line:col, or QoSPolicy/<name> and JSON path) to the log, the metrics and every
listener (the node status writer and the Event recorder in Kubernetes mode).

Why reloads run in the triggering thread and not in the tick: the target is p99 <= 100 ms from a
file save (or a CR update) to the new generation in effect, and a tick runs only once a second. The
tick picks up the current engine at its start (one reference read), so a swap is atomic between
ticks. An engine that was replaced is closed by the tick thread once it no longer uses it (the
durable backend's worker process must not die under a running evaluation).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from engine.config.errors import PolicyError, Problem
from engine.config.load import Document, yaml_files_under
from engine.config.pipeline import applies_to, build_policy, gc_paused, load_documents
from engine.evaluate.engine import Engine
from engine.model.node import NodeInfo

log = logging.getLogger("qosd")


class PolicyLayer(Protocol):
    """The QoSPolicy custom resources this node knows (engine.sources.policies)."""

    def documents(self) -> Sequence[Document]:
        """Every QoSPolicy as a document (CR layer), in name order; the same objects while unchanged."""
        ...

    def generations(self) -> Mapping[str, int]:
        """QoSPolicy name -> metadata.generation of the documents() just returned."""
        ...


@dataclass(frozen=True)
class ReloadOutcome:
    """What one reload attempt did. ``policies`` are the QoSPolicy CRs (name, metadata.generation)
    that select this node and went into the attempt; ``files`` the rule files read."""

    result: str  # loaded | unchanged | failed
    generation: int  # the generation in effect after the attempt
    policy_hash: str | None  # the hash in effect after the attempt
    source: str  # what triggered it: start, file, crd, node
    time: float
    error: str | None = None
    problems: tuple[Problem, ...] = ()
    policies: tuple[tuple[str, int], ...] = ()
    files: tuple[str, ...] = ()
    attempted_hash: str | None = None  # the hash of the rejected or loaded policy, when it compiled


Listener = Callable[[ReloadOutcome], None]


def rule_files(paths: Sequence[Path]) -> Iterator[Path]:
    """The files a rules path expands to, exactly as the loader reads them (load.yaml_files_under
    skips a ConfigMap volume's hidden ``..data`` and ``..<timestamp>`` copies)."""
    for p in paths:
        if p.is_dir():
            yield from yaml_files_under(p)
        else:
            yield p


def fingerprint(paths: Sequence[Path]) -> tuple[tuple[str, int, int, int], ...]:
    """Cheap change detection: a stat per rule file, no read. A missing file is part of the print."""
    out = []
    for f in rule_files(paths):
        try:
            st = f.stat()
            out.append((str(f), st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            out.append((str(f), -1, -1, -1))
    return tuple(out)


def node_key(node: NodeInfo) -> tuple[Any, ...]:
    """What of the node a policy can depend on: selectors read labels, templates read sizes."""
    return (node.name, tuple(sorted(node.labels.items())), node.cpus, node.numa_count, node.memory)


@dataclass
class ReloadConfig:
    files: tuple[Path, ...] = ()
    builtin: bool = True
    backend: str = "python"
    labels: Mapping[str, str] = field(default_factory=dict)  # fixed extra labels (--label, --profile)
    stat_files: bool = True  # re-stat rule files every tick (off when a file watcher reports changes)


class Reloader:
    """The policy generation in effect and the one way to replace it (see the module docstring)."""

    def __init__(
        self,
        config: ReloadConfig,
        *,
        policies: PolicyLayer | None = None,
        labels: Callable[[], Mapping[str, str]] | None = None,
        on_reload: Callable[[str, str], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.policies = policies
        self.labels = labels  # live node labels (the Node object in Kubernetes mode)
        self.on_reload = on_reload  # (source, result) for metrics
        self.clock = clock
        self.listeners: list[Listener] = []
        self.engine: Engine | None = None
        self.generation = 0
        self.last_error: str | None = None
        self.last_outcome: ReloadOutcome | None = None
        self._lock = threading.Lock()
        self._node: NodeInfo | None = None  # the last node seen, with live labels applied
        self._key: Any = None  # (file fingerprint, node key) of the last attempt
        self._pending: str | None = None  # a trigger that came before the first node
        self._retired: list[Engine] = []

    # -- triggers

    def observe_node(self, node: NodeInfo) -> ReloadOutcome | None:
        """The tick's view of the node; reloads when the node (or, without a watcher, a rule file)
        changed since the last attempt, or when a trigger arrived before the first tick."""
        node = self._labelled(node)
        with self._lock:
            self._node = node
            prints = fingerprint(self.config.files) if self.config.stat_files else ()
            key = (prints, node_key(node))
            if key == self._key and self._pending is None:
                return None
            source = self._pending or ("start" if self._key is None else self._what_changed(key))
            self._pending = None
            return self._reload(source, key)

    def request(self, source: str) -> ReloadOutcome | None:
        """A watcher saw a change: reload now, in the caller's thread. Before the first tick (no node
        known yet) the request is remembered and served by the first observe_node."""
        with self._lock:
            if self._node is None:
                self._pending = self._pending or source
                return None
            node = self._labelled(self._node)
            self._node = node
            prints = fingerprint(self.config.files) if self.config.stat_files else ()
            return self._reload(source, (prints, node_key(node)))

    def _labelled(self, node: NodeInfo) -> NodeInfo:
        extra: dict[str, str] = {}
        if self.labels is not None:
            extra.update(self.labels())
        extra.update(self.config.labels)
        return node.with_labels(extra) if extra else node

    def _what_changed(self, key: Any) -> str:
        return "file" if self._key is not None and key[0] != self._key[0] else "node"

    # -- the reload itself (lock held)

    def _reload(self, source: str, key: Any) -> ReloadOutcome:
        # No cyclic collection until the new generation is in effect and reported: a reload
        # allocates thousands of objects that all live, and a full collection in the middle
        # would only delay the swap (it runs at the next allocation after this).
        with gc_paused():
            return self._reload_paused(source, key)

    def _reload_paused(self, source: str, key: Any) -> ReloadOutcome:
        assert self._node is not None
        node = self._node
        self._key = key  # a failing generation is reported once, not re-tried every tick
        now = self.clock()
        files = tuple(str(f) for f in rule_files(self.config.files))
        crs: Sequence[Document] = self.policies.documents() if self.policies is not None else ()
        gens = self.policies.generations() if self.policies is not None else {}
        selected = tuple(
            (d.source.removeprefix("QoSPolicy/"), gens.get(d.source.removeprefix("QoSPolicy/"), 0))
            for d in crs
            if applies_to(d, node.labels)
        )
        try:
            docs = load_documents(self.config.files, builtin=self.config.builtin)
            policy = build_policy([*docs, *crs], node)
        except PolicyError as exc:
            return self._rejected(source, now, exc, selected, files)
        if self.engine is not None and policy.hash == self.engine.policy.hash:
            self.last_error = None
            return self._outcome("unchanged", source, now, selected, files, policy.hash)
        engine = Engine(policy, generation=self.generation + 1, backend=self.config.backend)
        if self.engine is not None:
            self._retired.append(self.engine)
        self.engine = engine
        self.generation += 1
        self.last_error = None
        log.info(
            "policy generation loaded",
            extra={
                "fields": {
                    "generation": self.generation,
                    "hash": policy.hash[:12],
                    "rules": len(policy.rules),
                    "trigger": source,
                    "policies": [f"{n}@{g}" for n, g in selected],
                }
            },
        )
        return self._outcome("loaded", source, now, selected, files, policy.hash)

    def _rejected(
        self,
        source: str,
        now: float,
        exc: PolicyError,
        selected: tuple[tuple[str, int], ...],
        files: tuple[str, ...],
    ) -> ReloadOutcome:
        self.last_error = exc.format()
        kept = self.engine.policy.hash[:12] if self.engine else "none"
        log.error(
            "policy rejected; keeping the last good generation",
            extra={
                "fields": {
                    "generation": self.generation,
                    "kept": kept,
                    "trigger": source,
                    "problems": self.last_error,
                }
            },
        )
        return self._outcome(
            "failed", source, now, selected, files, None, error=self.last_error, problems=tuple(exc.problems)
        )

    def _outcome(
        self,
        result: str,
        source: str,
        now: float,
        selected: tuple[tuple[str, int], ...],
        files: tuple[str, ...],
        attempted: str | None,
        error: str | None = None,
        problems: tuple[Problem, ...] = (),
    ) -> ReloadOutcome:
        outcome = ReloadOutcome(
            result,
            self.generation,
            self.engine.policy.hash if self.engine else None,
            source,
            now,
            error,
            problems,
            selected,
            files,
            attempted,
        )
        self.last_outcome = outcome
        if self.on_reload is not None:
            self.on_reload(source, result)
        for listener in self.listeners:
            try:
                listener(outcome)
            except Exception:  # a status writer's bug must not break reloading
                log.exception("reload listener failed", extra={"fields": {"listener": repr(listener)}})
        return outcome

    # -- for the tick thread

    def retire(self) -> None:
        """Close the engines replaced since the last call; the tick thread calls it between ticks."""
        with self._lock:
            retired, self._retired = self._retired, []
        for engine in retired:
            engine.backend.close()

    def close(self) -> None:
        self.retire()
        if self.engine is not None:
            self.engine.backend.close()
