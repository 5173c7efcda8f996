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

# The node label that selects a bundled profile, and the profiles the built-in layer holds (each
# bundled policy names its profile in metadata.labels; tests/test_cli_conventions.py holds them
# equal). rules/default.yaml (Katalyst) applies to every node not labelled for another profile.
PROFILE_LABEL = "qosd.io/profile"
BUNDLED_PROFILES = ("katalyst", "koordinator")
DEFAULT_PROFILE = "katalyst"
# Older spellings still accepted on the command line (``trace generate --profile default``).
PROFILE_ALIASES = {"default": "katalyst"}

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


# Every JSON Schema qosd ships, by the name ``qosd schema NAME`` serves it under, with what it checks.
SCHEMAS = {
    "policy": "QoSPolicy rule documents",
    "facts": "facts snapshots and the fact names",
    "evaluation": "qosd eval -o json output",
    "ruletest": "RuleTest suites",
    "state": "engine state files",
    "trace": "simulation traces",
    "workloads": "standalone workloads files",
}
_SCHEMA_FILES = {"policy": "qospolicy.schema.json"}


def schema_file(kind: str) -> Path:
    """The file of schema ``kind`` (a key of SCHEMAS)."""
    if kind not in SCHEMAS:
        raise KeyError(f"unknown schema {kind!r}; expected one of {sorted(SCHEMAS)}")
    return data_dir("schemas") / _SCHEMA_FILES.get(kind, f"{kind}.schema.json")


@cache
def load_schema(kind: str) -> dict[str, Any]:
    """A JSON Schema qosd ships: ``policy`` (QoSPolicy documents), ``facts`` (facts snapshots), ..."""
    with schema_file(kind).open(encoding="utf-8") as fh:
        schema: dict[str, Any] = json.load(fh)
    return schema


def bundled_policy_files() -> list[Path]:
    """The built-in defaults layer: rules/default.yaml and rules/profiles/*.yaml (not the examples)."""
    root = data_dir("rules")
    files = [root / "default.yaml"]
    files += sorted((root / "profiles").glob("*.yaml"))
    return [f for f in files if f.is_file()]
