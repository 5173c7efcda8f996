"""QoSPolicy custom resources as the CR layer of the policy, kept current by list+watch.

Every QoSPolicy in the cluster is listed and watched (they are few and cluster-scoped); which of
them apply to this node is decided in the reload path by each document's ``spec.nodeSelector``, so
relabelling a node (a canary rollout) takes effect without re-listing anything.

A reload is requested only when a policy's *content* changed: created, deleted, or a new
``metadata.generation`` (the API server bumps it on spec changes only). Status writes, which the
elected daemon makes to every policy, change the resourceVersion but not the generation, and do
not make every node in the cluster recompile.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubernetes import client

from engine.config.load import Document, Layer
from engine.config.pipeline import document_from_object
from engine.kube.client import GROUP, POLICY_PLURAL, VERSION
from engine.kube.reflector import Reflector

log = logging.getLogger("qosd")

Identity = tuple[str, str, int]  # name, uid, metadata.generation


def _identity(obj: Mapping[str, Any]) -> Identity:
    meta = obj.get("metadata") or {}
    return (str(meta.get("name", "")), str(meta.get("uid", "")), int(meta.get("generation") or 0))


def policy_document(obj: Mapping[str, Any]) -> Document:
    """The CR as a rule document, without the server's metadata and status: only what a file
    holding the same policy would have, so both hash the same and a status write changes nothing."""
    meta = obj.get("metadata") or {}
    return document_from_object(
        {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "metadata": {"name": meta.get("name")},
            **({"spec": obj["spec"]} if "spec" in obj else {}),
        },
        Layer.CR,
    )


class PolicyWatch:
    """The engine.reload.PolicyLayer of a daemon in Kubernetes mode."""

    def __init__(
        self,
        api_client: client.ApiClient,
        on_change: Callable[[], None] | None = None,
        reflector: Reflector | None = None,
    ) -> None:
        api = client.CustomObjectsApi(api_client)
        self.on_change = on_change  # content changed: reload
        self.on_any: Callable[[], None] | None = None  # anything changed, status included
        self.reflector = reflector or Reflector(
            "qospolicies",
            functools.partial(api.list_cluster_custom_object, GROUP, VERSION, POLICY_PLURAL),
            on_change=self._changed,
        )
        self._lock = threading.Lock()
        self._seen: frozenset[Identity] | None = None
        self._built: tuple[int, tuple[Document, ...], dict[str, int]] | None = None
        self._docs: dict[Identity, Document] = {}

    def start(self) -> None:
        self.reflector.start()

    def stop(self) -> None:
        self.reflector.stop()

    def wait_synced(self, timeout: float) -> bool:
        return self.reflector.wait_synced(timeout)

    def objects(self) -> Mapping[str, Mapping[str, Any]]:
        """The QoSPolicy objects as the API last reported them (status included), by name."""
        return self.reflector.items()

    def _changed(self) -> None:
        if self.on_any is not None:
            self.on_any()
        seen = frozenset(_identity(o) for o in self.reflector.items().values())
        with self._lock:
            if seen == self._seen:
                return  # a status write or a metadata change: nothing a policy is built from
            self._seen = seen
        if self.on_change is not None:
            self.on_change()

    # -- engine.reload.PolicyLayer

    def documents(self) -> Sequence[Document]:
        return self._build()[1]

    def generations(self) -> Mapping[str, int]:
        return self._build()[2]

    def _build(self) -> tuple[int, tuple[Document, ...], dict[str, int]]:
        version = self.reflector.version
        with self._lock:
            built = self._built
            if built is not None and built[0] == version:
                return built
            items = self.reflector.items()
            docs: list[Document] = []
            gens: dict[str, int] = {}
            cache: dict[Identity, Document] = {}
            for name in sorted(items):
                obj = items[name]
                ident = _identity(obj)
                doc = self._docs.get(ident) or policy_document(obj)
                cache[ident] = doc
                docs.append(doc)
                gens[name] = ident[2]
            self._docs = cache
            self._built = (version, tuple(docs), gens)
            return self._built
