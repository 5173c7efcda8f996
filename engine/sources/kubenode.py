"""This node's own Node object, kept current by a watch: its labels (policy nodeSelectors and
templates), its allocatable resources and annotations (the facts of every tick: kubelet's and the
annotation's reservation in the batch-resource formulas), its UID (owner of status objects and
Events).

A Reflector over ``/api/v1/nodes?fieldSelector=metadata.name=<node>``, as koordlet's node informer
does. The Node object changes often (the kubelet's status updates, qosd's own extended resources),
but policies select on labels only, so ``on_labels`` fires only when the labels differ from the
last ones seen, including the first time they are known. ``on_change`` fires on every change.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from kubernetes import client

from engine.kube.objects import resource_list, str_map
from engine.kube.reflector import Json, Reflector

log = logging.getLogger("qosd")

_EMPTY_LABELS: Mapping[str, str] = MappingProxyType({})
_EMPTY_RESOURCES: Mapping[str, float] = MappingProxyType({})
_Derived = tuple[int, Mapping[str, str], Mapping[str, float], Mapping[str, str]]


class NodeWatch:
    """The latest Node object of ``node_name``; readable from any thread without locking."""

    def __init__(
        self,
        api_client: client.ApiClient,
        node_name: str,
        *,
        on_labels: Callable[[], None] | None = None,
        on_change: Callable[[], None] | None = None,
        **options: Any,
    ) -> None:
        if not node_name:
            raise ValueError("the node watch needs this node's name (NODE_NAME)")
        self.node_name = node_name
        self.on_labels = on_labels
        self.on_change = on_change
        self.reflector = Reflector(
            "node",
            client.CoreV1Api(api_client).list_node,
            field_selector=f"metadata.name={node_name}",
            on_change=self._changed,
            **options,
        )
        self._present = threading.Event()
        self._lock = threading.Lock()
        # (reflector version, labels, allocatable, annotations), derived once per version
        self._derived: _Derived = (-1, _EMPTY_LABELS, _EMPTY_RESOURCES, _EMPTY_LABELS)
        self._notified_labels: Mapping[str, str] | None = None
        self._bad_quantities: set[str] = set()

    # -- lifecycle (engine.daemon.parts.Service)

    def start(self) -> None:
        self.reflector.start()

    def stop(self) -> None:
        self.reflector.stop()

    def wait_synced(self, timeout: float | None = None) -> bool:
        """Whether the first list is in and named this node (koordlet's HasSynced: a list that
        found no such Node is not a usable view). Waits at most ``timeout`` seconds in all."""
        if timeout is None:
            return self.reflector.wait_synced(None) and self._present.wait(None)
        end = time.monotonic() + timeout
        if not self.reflector.wait_synced(timeout):
            return False
        return self._present.wait(max(0.0, end - time.monotonic()))

    # -- reading

    @property
    def version(self) -> int:
        """Moves whenever the Node object changes."""
        return self.reflector.version

    def node(self) -> Json | None:
        """The latest Node object (the API's JSON; do not modify it), None when unknown."""
        return self.reflector.get(self.node_name)

    def uid(self) -> str | None:
        node = self.node()
        uid = (node.get("metadata") or {}).get("uid") if node is not None else None
        return str(uid) if uid else None

    def labels(self) -> Mapping[str, str]:
        return self._derive()[1]

    def allocatable(self) -> Mapping[str, float]:
        """``status.allocatable`` in base units (cores, bytes, counts); an entry that does not parse
        is left out (and logged once)."""
        return self._derive()[2]

    def annotations(self) -> Mapping[str, str]:
        """``metadata.annotations`` (the facts' node.annotations: Koordinator's
        node.koordinator.sh/reservation is read from there)."""
        return self._derive()[3]

    def _derive(self) -> _Derived:
        view = self.reflector.view()
        derived = self._derived
        if derived[0] == view.version:
            return derived
        with self._lock:
            if self._derived[0] == view.version:
                return self._derived
            node = view.items.get(self.node_name)
            labels: Mapping[str, str] = _EMPTY_LABELS
            allocatable: Mapping[str, float] = _EMPTY_RESOURCES
            annotations: Mapping[str, str] = _EMPTY_LABELS
            if node is not None:
                meta = node.get("metadata") or {}
                labels = str_map(meta.get("labels"))
                annotations = str_map(meta.get("annotations"))
                allocatable = self._allocatable((node.get("status") or {}).get("allocatable"))
            self._derived = (view.version, labels, allocatable, annotations)
            return self._derived

    def _allocatable(self, raw: Any) -> Mapping[str, float]:
        problems: list[str] = []
        out = resource_list(raw, "status.allocatable", problems)
        for problem in problems:
            if problem not in self._bad_quantities:  # once per distinct problem, not per change
                self._bad_quantities.add(problem)
                log.warning(
                    "node allocatable entry does not parse",
                    extra={"fields": {"node": self.node_name, "error": problem}},
                )
        return out

    # -- the reflector's callback (its thread)

    def _changed(self) -> None:
        node = self.node()
        if node is not None:
            self._present.set()
        labels = self.labels()
        labels_changed = self._notified_labels is None or dict(labels) != dict(self._notified_labels)
        if node is not None and labels_changed:
            self._notified_labels = labels
            self._call(self.on_labels, "on_labels")
        self._call(self.on_change, "on_change")

    def _call(self, callback: Callable[[], None] | None, what: str) -> None:
        if callback is None:
            return
        try:
            callback()
        except Exception:  # a consumer's bug must not stop the watch
            log.exception(
                "node watch callback failed", extra={"fields": {"node": self.node_name, "callback": what}}
            )
