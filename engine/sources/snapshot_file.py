"""Facts snapshots from files (JSON or YAML), checked against the facts schema with located errors."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from engine.config.errors import Location, PolicyError, Problem
from engine.config.load import read_file
from engine.model.facts import Snapshot, snapshot_from_dict
from engine.sources.facts_check import facts_problems, with_numbers
from engine.sources.named_files import shown, unusable


def read_facts(path: Path) -> dict[str, Any]:
    """The validated facts document in ``path`` (exactly one YAML/JSON mapping), schema and semantics."""
    why = unusable(path)
    if why:
        raise PolicyError([Problem(Location(shown(str(path), 200), 0, 0), f"the facts file {why}")])
    docs = read_file(path)
    if len(docs) != 1 or not isinstance(docs[0].data, dict):
        raise PolicyError(
            [Problem(Location(str(path), 1, 1), "a facts file holds exactly one YAML or JSON mapping")]
        )
    doc = docs[0]
    problems = facts_problems(doc.data, doc.locate)
    if problems:
        raise PolicyError(problems)
    # A copy: the loader caches documents by content, and a caller that edits its facts (a test
    # patch, a trace step) must not change what the next reader of the same file gets.
    data: dict[str, Any] = copy.deepcopy(with_numbers(doc.data))
    return data


def load_snapshot(path: Path) -> Snapshot:
    return snapshot_from_dict(read_facts(path))
