"""The publish action's typed spec and its check (the resource must say what to publish it as)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.config.errors import Checker
from engine.config.load import JsonPath


@dataclass(frozen=True)
class PublishSpec:
    """``then: {publish: {resource: cpu|memory}}``, compiled once per generation."""

    resource: str


def compile_spec(raw: Mapping[str, Any]) -> PublishSpec:
    return PublishSpec(str(raw["resource"]))


def check(c: Checker, p: JsonPath, params: Mapping[str, Any]) -> None:
    res = params.get("resource")
    section = (c.spec.get("reclaim") or {}).get(res)
    if not isinstance(section, dict) or not section.get("publishAs"):
        c.add(
            (*p, "resource"),
            f"publish {res!r} needs spec.reclaim.{res}.publishAs",
            "set the extended resource name to publish, e.g. kubernetes.io/batch-cpu",
        )
