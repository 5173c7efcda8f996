"""Where the bundled schemas and policies live, in a source checkout and in an installed wheel.

The repository keeps them at the top level (``schemas/``, ``rules/``) so editors and reviewers find
them; the wheel carries the same files under ``engine/_data``. Everything that needs them asks here.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

# The apiVersion of every document qosd reads or writes (policies, facts, traces, records).
API_VERSION = "qosd.io/v1alpha1"

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """Directory ``schemas`` or ``rules``: the installed copy if present, else the checkout's."""
    installed = _PACKAGE / "_data" / name
    if installed.is_dir():
        return installed
    checkout = _PACKAGE.parent / name
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(f"qosd data directory {name!r} not found under {installed} or {checkout}")


@cache
def load_schema(kind: str) -> dict[str, Any]:
    """The JSON Schema ``policy`` (QoSPolicy documents) or ``facts`` (facts snapshots)."""
    files = {"policy": "qospolicy.schema.json", "facts": "facts.schema.json"}
    if kind not in files:
        raise KeyError(f"unknown schema {kind!r}; expected one of {sorted(files)}")
    with (data_dir("schemas") / files[kind]).open(encoding="utf-8") as fh:
        schema: dict[str, Any] = json.load(fh)
    return schema


def bundled_policy_files() -> list[Path]:
    """The built-in defaults layer: rules/default.yaml and rules/profiles/*.yaml (not the examples)."""
    root = data_dir("rules")
    files = [root / "default.yaml"]
    files += sorted((root / "profiles").glob("*.yaml"))
    return [f for f in files if f.is_file()]
