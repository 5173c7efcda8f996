"""qosd's CustomResourceDefinitions: ``policy`` generates QoSPolicy's from the JSON Schema that
validates rule files; ``node_status`` is QoSNodeStatus's. The offline structural check of a CRD, which
only the tests use, is tests/crdcheck.py."""

from __future__ import annotations

from typing import Any

from engine.config.crd.node_status import build_node_status_crd
from engine.config.crd.policy import build_crd


def qosd_crds() -> list[dict[str, Any]]:
    """Every CRD qosd serves, in install order: QoSPolicy, then QoSNodeStatus."""
    from engine.resources import load_schema

    return [build_crd(load_schema("policy")), build_node_status_crd()]
