"""Cgroup files a policy declares beyond the built-in list (``spec.cgroup.files``).

Some kernels carry files no upstream kernel has: ``cpu.qos_level`` and ``memory.qos_level`` of
openEuler-style distributions, Alibaba Cloud Linux's memory watermark files, a vendor's knob. A
platform team declares such a file with its name on each cgroup version and the values it takes:

    cgroup:
      files:
        - {name: cpu.qos_level, values: {min: -1, max: 2}}
        - {name: memory.swappiness, v2: memory.swappiness, values: {min: 0, max: 100}}

and then writes it like any built-in file (``setCgroup: {values: {cpu.qos_level: -1}}``). The
declaration is checked like the built-in table (engine/cgroups/files.py): the name is one plain
file name under a controller, never a core file (``cgroup.procs``, ``tasks``, ``release_agent``...
would move processes or run programs), never a built-in name (whose format qosd already knows);
a literal value is checked against the declared values at validate, an expression's result at
each tick. The write goes through the same adapter, confined to the cgroup root like any other;
the file name is translated to the node's cgroup version here, so the adapter holds no policy.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from engine.cgroups.files import RENAMES, VALUE_FORMATS, ValueFormat

if TYPE_CHECKING:
    from engine.config.errors import Checker
    from engine.config.load import JsonPath

# <controller>.<name>: ASCII, no '/', no leading or trailing dot (the schema says the same)
FILE_NAME = re.compile(r"[a-z][a-z0-9_]*\.[a-z0-9_.]*[a-z0-9_]")
# Files that change membership or run programs, whatever a kernel calls them.
CORE_PREFIXES = ("cgroup.",)
CORE_FILES = frozenset({"tasks", "release_agent", "notify_on_release", "cgroup.procs", "cgroup.threads"})
KNOWN = frozenset(VALUE_FORMATS) | frozenset(n for v1s, v2 in RENAMES.items() for n in (*v1s, v2))
INT64 = 2**63 - 1


@dataclass(frozen=True)
class DeclaredFile:
    """One declared file: its logical ``name``, its host names per cgroup version and its format."""

    name: str
    v1: str
    v2: str
    format: ValueFormat

    def host(self, version: int | None) -> str:
        """The file to write on a cgroup version; the logical name when the version is unknown."""
        if version == 1:
            return self.v1
        if version == 2:
            return self.v2
        return self.name


@dataclass(frozen=True)
class DeclaredFiles:
    """A policy generation's declared files by logical name, and their formats for value checks."""

    files: Mapping[str, DeclaredFile] = field(default_factory=lambda: MappingProxyType({}))

    @cached_property
    def formats(self) -> Mapping[str, ValueFormat]:
        return MappingProxyType({n: d.format for n, d in self.files.items()})

    def host(self, file: str, version: int | None) -> str:
        """The name to write for a logical file on a cgroup version (built-in names pass through:
        the adapter translates those)."""
        declared = self.files.get(file)
        return file if declared is None else declared.host(version)


NO_FILES = DeclaredFiles()


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a declared cgroup file, or None."""
    if not FILE_NAME.fullmatch(name):
        return "it is not a file name of the form <controller>.<name> (lower-case ASCII, digits, _ and .)"
    if name in CORE_FILES or name.startswith(CORE_PREFIXES):
        return "core cgroup files move processes or change the hierarchy; qosd never writes them"
    return None


def _format(values: Mapping[str, Any]) -> ValueFormat:
    words = tuple(str(w) for w in values.get("words") or ())
    if "min" in values or "max" in values:
        lo, hi = int(values.get("min", -INT64)), int(values.get("max", INT64))
        spoken = " or ".join(f'"{w}"' for w in words)
        describe = f"an integer from {lo} to {hi}" + (f", or {spoken}" if spoken else "")
        return ValueFormat(describe, lo, hi, words, amount=False)
    describe = "one of " + ", ".join(f'"{w}"' for w in words)
    return ValueFormat(describe, words=words, kind="words", amount=False)


def compile_files(c: Checker, raw: Mapping[str, Any]) -> DeclaredFiles:
    """``spec.cgroup.files``, checked: usable names, no built-in or repeated name, a non-empty range."""
    out: dict[str, DeclaredFile] = {}
    hosts: dict[tuple[int, str], str] = {}
    for i, entry in enumerate(raw.get("files") or ()):
        base: JsonPath = ("cgroup", "files", i)
        name = str(entry["name"])
        v1, v2 = str(entry.get("v1", name)), str(entry.get("v2", name))
        values = entry.get("values") or {}
        bad = False
        for key, text in (("name", name), ("v1", v1), ("v2", v2)):
            if key != "name" and key not in entry:
                continue  # the name itself, checked once
            why = name_problem(text)
            if why:
                c.add((*base, key), f"cgroup file {text!r}: {why}")
                bad = True
            elif text in KNOWN:
                c.add(
                    (*base, key),
                    f"cgroup file {text!r} is built in: qosd knows its names and values already",
                    "write it in setCgroup directly; declare only files qosd does not know",
                )
                bad = True
        if name in out:
            c.add((*base, "name"), f"cgroup file {name!r} is declared twice", "keep one declaration")
            bad = True
        for version, host in ((1, v1), (2, v2)):
            other = hosts.get((version, host))
            if other is not None and other != name:
                c.add(
                    (*base, f"v{version}"),
                    f"cgroup v{version} file {host!r} is already the host file of {other!r}",
                )
                bad = True
        if "min" in values and "max" in values and int(values["min"]) > int(values["max"]):
            c.add((*base, "values", "min"), f"values.min {values['min']} is above values.max {values['max']}")
            bad = True
        if bad:
            continue
        hosts[(1, v1)] = hosts[(2, v2)] = name
        out[name] = DeclaredFile(name, v1, v2, _format(values))
    return DeclaredFiles(MappingProxyType(out))
