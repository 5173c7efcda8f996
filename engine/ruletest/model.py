"""A RuleTest suite as the runner sees it: policy, cases, steps and expectations."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.config.errors import Location
from engine.config.load import Document, JsonPath
from engine.evaluate.state import EngineState
from engine.plan.planner import Guards

SUITE_KIND = "RuleTest"

Locate = Callable[[JsonPath, bool], Location]


# Provenance fields an expected intent may name at its top level, besides the printed intent fields.
PROVENANCE_ALIASES = ("rule", "mode", "item", "items", "source", "conditions", "inputs")

LISTS = ("intents", "operations", "held", "skipped", "workloadIssues", "oomPriorities")


def capitalized(name: str) -> str:
    return name[0].upper() + name[1:]


@dataclass(frozen=True)
class Anchor:
    """The anchor unit test a case ports (``repo``, ``file``, ``function``, ``case``), so a parity
    failure names the Go test to read next to qosd's diff."""

    repo: str
    file: str
    function: str
    case: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"repo": self.repo, "file": self.file, "function": self.function, "case": self.case}

    def __str__(self) -> str:
        return f"{self.repo} {self.file} {self.function}" + (f" case {self.case!r}" if self.case else "")


@dataclass(frozen=True)
class PolicySpec:
    paths: tuple[Path, ...] = ()
    builtin: bool = True
    profile: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    # A case's inline overlay: QoSPolicy documents located in the suite file, layered on top.
    overlay: tuple[Document, ...] = ()
    # The ``policy:`` that chose these (the case's, else the suite's): where a policy that cannot be
    # built for the case's node is reported, since its own problem may name only the node.
    location: Location | None = None


@dataclass(frozen=True)
class Expect:
    data: Mapping[str, Any]
    path: JsonPath


@dataclass(frozen=True)
class Step:
    label: str
    facts: Mapping[str, Any]
    expects: tuple[Expect, ...]


@dataclass(frozen=True)
class Case:
    name: str
    location: Location
    xfail: str | None
    policy: PolicySpec
    guards: Guards
    state: EngineState
    steps: tuple[Step, ...]
    anchor: Anchor | None = None
    # Entries the problems of a refused policy must match (``refused``); None: the policy must build.
    refused: tuple[Mapping[str, Any], ...] | None = None


@dataclass(frozen=True)
class Suite:
    source: str
    name: str
    doc: Document
    cases: tuple[Case, ...]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: mappings merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def prefixed(doc: Document, prefix: JsonPath) -> Locate:
    """A locator for data that sits at ``prefix`` inside ``doc``."""

    def locate(path: JsonPath, prefer_key: bool = False) -> Location:
        return doc.locate((*prefix, *path), prefer_key)

    return locate
