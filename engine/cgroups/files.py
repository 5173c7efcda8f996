"""The one home of cgroup file names and value formats across v1 and v2.

Intents and operations name files the way their rule or strategy thinks of them, in either dialect:
the suppress action writes ``cpu.cfs_quota_us``, memory QoS writes ``memory.max``, a rule may say
``cpu.weight``. The adapter carries such a *logical* file to the *host* file of the hierarchy that
holds the controller, converting the value on the way, and converts what it reads back into the
logical dialect, so the planner compares like with like on any node:

===================== ============================ ===============================================
v1                    v2                           value
===================== ============================ ===============================================
cpu.shares            cpu.weight                   shares <-> weight (cgroups.weight formulas)
cpu.cfs_quota_us      cpu.max (first field)        -1 <-> max
cpu.cfs_period_us     cpu.max (second field)       us
cpu.cfs_burst_us      cpu.max.burst                us
memory.limit_in_bytes memory.max                   -1 <-> max
memory.usage_in_bytes memory.current               bytes (read only)
cpuset.effective_cpus cpuset.cpus.effective        list (read only); likewise the mems
tasks                 cgroup.threads               thread ids
===================== ============================ ===============================================

Every other name (cpuset.cpus, cpuset.mems, cpu.idle, memory.high/low/min, ...) is the same on both;
where a kernel lacks it (memory.high on a v1 kernel without Alibaba Cloud Linux's backport, cpu.idle
before 5.15) the file is simply absent and the adapter reports the write as skipped.

Values are compared *by meaning* (:func:`same`), because the kernel normalises what it stores:
memory limits are rounded down to whole pages and "unlimited" reads back as 9223372036854771712 on
v1, cpusets read back as ranges ("0,1,2" -> "0-2"), shares are clamped to [2, 262144], and any
negative CFS quota is -1. A value the kernel would reject is never normalised away: it is written
and the kernel's EINVAL reported.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from engine.cgroups.weight import (
    SHARES_MAX,
    SHARES_MIN,
    WEIGHT_MAX,
    WEIGHT_MIN,
    WeightFormula,
    clamp_shares,
    shares_problem,
    shares_to_weight,
    weight_problem,
    weight_to_shares,
)
from engine.model.node import NodeInfo
from engine.model.units import format_cpuset, int_or_none, parse_cpuset

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
# A page counter's maximum: LONG_MAX in whole pages, which v1 prints for "unlimited".
UNLIMITED_BYTES = (2**63 - 1) // PAGE_SIZE * PAGE_SIZE

RENAMES: Mapping[tuple[str, ...], str] = {
    # The one table pairing the two versions' names: v1 file(s) -> the v2 file holding them. Every
    # name not listed is the same on both. Values convert as the module docstring's table says.
    ("cpu.shares",): "cpu.weight",
    ("cpu.cfs_quota_us", "cpu.cfs_period_us"): "cpu.max",
    ("cpu.cfs_burst_us",): "cpu.max.burst",
    ("memory.limit_in_bytes",): "memory.max",
    ("memory.usage_in_bytes",): "memory.current",
    ("cpuset.effective_cpus",): "cpuset.cpus.effective",
    ("cpuset.effective_mems",): "cpuset.mems.effective",
    ("tasks",): "cgroup.threads",
}
V1_TO_V2 = {v1s[0]: v2 for v1s, v2 in RENAMES.items() if len(v1s) == 1}
V2_TO_V1 = {v: k for k, v in V1_TO_V2.items()}
# The files whose translation to the other version needs a shares <-> weight formula.
SHARE_FILES = frozenset({"cpu.shares", "cpu.weight"})
CPU_MAX_PARTS = next(v1s for v1s, v2 in RENAMES.items() if v2 == "cpu.max")  # quota, period

CPUSET_FILES = frozenset(
    {
        "cpuset.cpus",
        "cpuset.mems",
        "cpuset.effective_cpus",
        "cpuset.effective_mems",
        "cpuset.cpus.effective",
        "cpuset.mems.effective",
    }
)
V1_MEMORY_LIMITS = frozenset(
    {"memory.limit_in_bytes", "memory.soft_limit_in_bytes", "memory.memsw.limit_in_bytes"}
)
MEMORY_LIMIT_FILES = V1_MEMORY_LIMITS | frozenset(
    {
        "memory.max",
        "memory.high",
        "memory.low",
        "memory.min",
        "memory.swap.max",
    }
)
INTEGER_FILES = frozenset(
    {"cpu.weight", "cpu.idle", "cpu.cfs_period_us", "cpu.cfs_burst_us", "cpu.max.burst", "cpu.weight.nice"}
)
V1_UNLIMITED = "-1"
V2_UNLIMITED = "max"


# ---------------------------------------------------------------- value formats

MIN_CFS_US = 1_000  # the kernel's min_cfs_quota_period (1 ms): shorter quotas and periods are EINVAL
MAX_CFS_PERIOD_US = 1_000_000  # max_cfs_quota_period (1 s)
MAX_CFS_RUNTIME_US = 2**44 - 1  # max_cfs_runtime: a larger quota or burst is EINVAL (about 203 days)
MAX_BYTES = 2**63 - 1  # a page counter's bytes; larger values do not fit the kernel's s64/u64 parse

# Decimal without leading zeros: the kernel reads most of these files with base 0, where "010" is
# octal 8 and "08" is EINVAL.
_INTEGER = re.compile(r"0|-?[1-9][0-9]*")
_CPU_LIST = re.compile(r"[0-9]{1,5}(?:-[0-9]{1,5})?(?:,[0-9]{1,5}(?:-[0-9]{1,5})?)*")


@dataclass(frozen=True)
class ValueFormat:
    """What a logical cgroup file accepts as text: plain ASCII integers in [lo, hi], the listed
    words, or a cpuset list; cpu.max is "<quota|max> [<period>]". ``describe`` says it in words
    for error hints."""

    describe: str
    lo: int = 0
    hi: int = 0
    words: tuple[str, ...] = ()
    kind: str = "integer"  # integer | cpulist | cpu.max | words
    amount: bool = True  # holds an amount of CPU or memory, so a percent of one can size it

    def problem(self, text: str) -> str | None:
        """Why ``text`` is not a valid value, or None when the kernel (and the other cgroup version,
        after :func:`to_host`'s translation) accepts it."""
        if text in self.words:
            return None
        if self.kind == "words":
            return "it is none of the words listed"
        if self.kind == "cpulist":
            return _cpulist_problem(text)
        if self.kind == "cpu.max":
            return _cpu_max_problem(text)
        return _integer_problem(text, self.lo, self.hi)


def _integer_problem(text: str, lo: int, hi: int) -> str | None:
    if not _INTEGER.fullmatch(text):
        return "it is not a plain decimal integer (no sign on 0, no leading zeros)"
    if len(text) > 21 or not lo <= int(text) <= hi:  # more digits than any bound: no huge int()
        return f"it is outside [{lo}, {hi}]"
    return None


def _cpulist_problem(text: str) -> str | None:
    if not text:
        return "an empty list would leave the cgroup with no CPUs or memory nodes"
    if not _CPU_LIST.fullmatch(text):
        return "it is not a list of ids and ranges in ASCII digits, e.g. 0-3,8"
    try:
        parse_cpuset(text)
    except ValueError as exc:
        return str(exc)
    return None


def _cpu_max_problem(text: str) -> str | None:
    fields = text.split(" ")
    if not 1 <= len(fields) <= 2:
        return 'it is not "<quota|max> [<period>]" (one space between)'
    if fields[0] != V2_UNLIMITED:
        bad = _integer_problem(fields[0], MIN_CFS_US, MAX_CFS_RUNTIME_US)
        if bad:
            return f"quota: {bad}"
    if len(fields) == 2:
        bad = _integer_problem(fields[1], MIN_CFS_US, MAX_CFS_PERIOD_US)
        if bad:
            return f"period: {bad}"
    return None


def _ints(lo: int, hi: int, *words: str, what: str = "", amount: bool = True) -> ValueFormat:
    spoken = " or ".join(f'"{w}"' for w in words)
    describe = f"an integer from {lo} to {hi}{what}" + (f", or {spoken}" if spoken else "")
    return ValueFormat(describe, lo, hi, words, amount=amount)


_MEMORY_V2 = _ints(0, MAX_BYTES, V2_UNLIMITED, what=" (bytes)")
_MEMORY_V1 = _ints(0, MAX_BYTES, V1_UNLIMITED, V2_UNLIMITED, what=" (bytes)")
_BOOLEAN = _ints(0, 1, amount=False)
_CPULIST = ValueFormat(
    "a list of ids and ranges such as 0-3,8 (ASCII digits, no spaces)", kind="cpulist", amount=False
)

VALUE_FORMATS: Mapping[str, ValueFormat] = {
    "cpu.shares": _ints(SHARES_MIN, SHARES_MAX),
    "cpu.weight": _ints(WEIGHT_MIN, WEIGHT_MAX),
    "cpu.idle": _BOOLEAN,
    "cpu.cfs_quota_us": ValueFormat(
        f'an integer from {MIN_CFS_US} to {MAX_CFS_RUNTIME_US} (microseconds), or "-1" or "max" (no limit)',
        MIN_CFS_US,
        MAX_CFS_RUNTIME_US,
        (V1_UNLIMITED, V2_UNLIMITED),
    ),
    "cpu.cfs_period_us": _ints(MIN_CFS_US, MAX_CFS_PERIOD_US, what=" (microseconds)"),
    "cpu.max": ValueFormat(
        f'"<quota|max> [<period>]": quota {MIN_CFS_US} to {MAX_CFS_RUNTIME_US} us or max, '
        f"period {MIN_CFS_US} to {MAX_CFS_PERIOD_US} us",
        kind="cpu.max",
    ),
    "cpu.cfs_burst_us": _ints(0, MAX_CFS_RUNTIME_US, what=" (microseconds)"),
    "cpu.max.burst": _ints(0, MAX_CFS_RUNTIME_US, what=" (microseconds)"),
    "cpuset.cpus": _CPULIST,
    "cpuset.mems": _CPULIST,
    "memory.min": _MEMORY_V2,
    "memory.low": _MEMORY_V2,
    "memory.high": _MEMORY_V2,
    "memory.max": _MEMORY_V2,
    "memory.swap.max": _MEMORY_V2,
    "memory.limit_in_bytes": _MEMORY_V1,
    "memory.soft_limit_in_bytes": _MEMORY_V1,
    "memory.memsw.limit_in_bytes": _MEMORY_V1,
    "memory.oom.group": _BOOLEAN,
    "memory.use_priority_oom": _BOOLEAN,
    "memory.priority": _ints(0, 12, amount=False),
    "memory.wmark_ratio": _ints(0, 100, amount=False),
    "memory.wmark_scale_factor": _ints(1, 1000, amount=False),
    "memory.wmark_min_adj": _ints(-25, 50, amount=False),
}
"""The value each writable logical file accepts, in the logical file's own dialect. It is what
``qosd validate`` checks a literal setCgroup value against, so that what validates is what the kernel
takes: the ranges are the kernel's (shares, weight, CFS quota/period/burst, page counters), or
narrower where the kernel would silently change the value (shares outside [2, 262144] are clamped)
or where a value would not survive translation to the other cgroup version."""


def burst_problem(values: Mapping[str, str]) -> str | None:
    """Why the kernel refuses this CFS burst beside this quota, both written together (sched/core.c:
    a burst above the quota, or the two above max_cfs_runtime), or None. ``values`` maps file names
    to the texts to write; a quota that is absent or unlimited (``-1``, ``max``) refuses nothing."""
    quota_text = values.get("cpu.cfs_quota_us") or values.get("cpu.max", "").split(" ")[0]
    burst_text = values.get("cpu.cfs_burst_us") or values.get("cpu.max.burst")
    if burst_text is None or not quota_text.isdigit() or not burst_text.strip().isdigit():
        return None
    quota, burst = int(quota_text), int(burst_text)
    if burst > quota or burst + quota > MAX_CFS_RUNTIME_US:
        return (
            f"CFS burst {burst} us is above the quota {quota} us (or the two exceed {MAX_CFS_RUNTIME_US} us)"
        )
    return None


def value_problem(
    file: str, text: str, node: NodeInfo | None = None, declared: Mapping[str, ValueFormat] | None = None
) -> str | None:
    """Why ``text`` cannot be written to the logical ``file``, or None when it can (or when no
    format is known for the file). ``declared`` adds the formats of the policy's own files
    (engine/cgroups/declared.py). With ``node``, a cpuset must also stay within the node's CPUs
    and NUMA nodes (the kernel refuses any other: EINVAL)."""
    fmt = VALUE_FORMATS.get(file) or (declared.get(file) if declared else None)
    if fmt is None:
        return None
    bad = fmt.problem(text)
    if bad is not None:
        return f"{file} takes {fmt.describe}; {short_value(text)}: {bad}"
    if node is not None and file in ("cpuset.cpus", "cpuset.mems"):
        have = node.cpu_ids if file == "cpuset.cpus" else frozenset(range(node.numa_count))
        outside = sorted(parse_cpuset(text) - have) if have else []
        if outside:
            what = "CPUs" if file == "cpuset.cpus" else "NUMA nodes"
            shown = ", ".join(map(str, outside[:8])) + (", ..." if len(outside) > 8 else "")
            return (
                f"{file} {short_value(text)} names {what} {shown} that node {node.name!r} "
                f"does not have ({format_cpuset(have)})"
            )
    return None


def short_value(text: str) -> str:
    return repr(text) if len(text) <= 40 else repr(text[:37]) + "..."


class TranslationError(ValueError):
    """A value that cannot be carried to the other cgroup version (the message says why)."""


def controller_of(file: str) -> str:
    """The controller a file belongs to; ``""`` for the core files every hierarchy has."""
    if file == "tasks" or file.startswith("cgroup."):
        return ""
    return file.split(".", 1)[0]


def host_files(file: str, version: int) -> tuple[str, ...]:
    """The host files that hold a logical file on a cgroup version, in read order."""
    if version == 1:
        if file == "cpu.max":
            return CPU_MAX_PARTS
        return (V2_TO_V1.get(file, file),)
    if file in CPU_MAX_PARTS:
        return ("cpu.max",)
    return (V1_TO_V2.get(file, file),)


# Two names that are not two writers of one file: on v2 the CFS quota and period are written
# together as cpu.max, which is what asking for both means.
_ONE_WRITE = frozenset({"cpu.cfs_quota_us", "cpu.cfs_period_us"})


def same_host_file(files: Iterable[str]) -> list[tuple[str, str, int, tuple[str, ...]]]:
    """Pairs of ``files`` (one action's) that hold the same host file on a cgroup version (cpu.shares
    and cpu.weight, cpu.max and cpu.cfs_quota_us), with the first such version and the files shared:
    one value would overwrite the other, and which one depends on the node."""
    names = sorted(set(files))
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if {a, b} == _ONE_WRITE:
                continue
            for version in (1, 2):
                shared = tuple(sorted(set(host_files(a, version)) & set(host_files(b, version))))
                if shared:
                    out.append((a, b, version, shared))
                    break
    return out


# ---------------------------------------------------------------- comparing by meaning


def _memory(text: str) -> object:
    t = text.strip()
    if t in (V1_UNLIMITED, V2_UNLIMITED):
        return V2_UNLIMITED
    n = int_or_none(t)
    if n is None or n < 0:
        return t
    if n >= UNLIMITED_BYTES:
        return V2_UNLIMITED
    return n // PAGE_SIZE * PAGE_SIZE


def _cpu_max(text: str) -> tuple[object, int | None]:
    fields = text.split()
    if not fields:
        return ("", None)
    quota: object = fields[0]
    n = int_or_none(fields[0])
    if n is not None:
        quota = V2_UNLIMITED if n < 0 else n
    period = int_or_none(fields[1]) if len(fields) > 1 else None
    return quota, period


def canonical(file: str, text: str) -> object:
    """A host file's value as the kernel means it, for equality only."""
    t = text.strip()
    if file in CPUSET_FILES:
        try:
            return parse_cpuset(t)
        except ValueError:
            return t
    if file in MEMORY_LIMIT_FILES:
        return _memory(t)
    if file == "cpu.shares":
        n = int_or_none(t)
        return t if n is None or n < 0 else clamp_shares(n)
    if file == "cpu.cfs_quota_us":
        n = int_or_none(t)
        return t if n is None else (-1 if n < 0 else n)
    if file == "cpu.max":
        return _cpu_max(t)
    if file in INTEGER_FILES:
        n = int_or_none(t)
        return t if n is None else n
    return t


def same(file: str, current: str | None, desired: str) -> bool:
    """Whether a host file holding ``current`` already holds ``desired``. A one-field cpu.max
    ("50000") sets only the quota, so only the quota is compared."""
    if current is None:
        return False
    if file == "cpu.max":
        have_q, have_p = _cpu_max(current)
        want_q, want_p = _cpu_max(desired)
        return have_q == want_q and (want_p is None or have_p == want_p)
    return canonical(file, current) == canonical(file, desired)


# ---------------------------------------------------------------- logical -> host writes


def _quota_v1(text: str) -> str:
    t = text.strip()
    if t == V2_UNLIMITED:
        return V1_UNLIMITED
    if int_or_none(t) is None:
        raise TranslationError(f"CPU quota {text!r} is not a number of microseconds or 'max'")
    return t


def _ratio(quota: str | None, period: str | None) -> float:
    """The CPU share a (quota, period) pair allows; unlimited counts as 0 because the kernel never
    rejects an unlimited child, only a child above a limited parent."""
    q, p = int_or_none(quota or ""), int_or_none(period or "")
    if q is None or q < 0 or not p:
        return 0.0
    return q / p


def to_host(
    file: str,
    value: str,
    version: int,
    current: Mapping[str, str | None],
    formula: WeightFormula | None = None,
) -> list[tuple[str, str]]:
    """The host writes, in order, that make a logical file hold ``value``; ``[]`` when it already
    does. ``current`` holds the host files of :func:`host_files` (None when unreadable)."""
    wanted = _host_values(file, value, version, current, formula)
    writes = [(f, v) for f, v in wanted if not same(f, current.get(f), v)]
    if version == 1 and file == "cpu.max" and len(writes) == 2:
        # Quota and period change together: of the two intermediate states, go through the one that
        # allows less CPU, so a child never passes its parent's limit mid-change (EINVAL on v1).
        quota_first = _ratio(writes[0][1], current.get("cpu.cfs_period_us"))
        period_first = _ratio(current.get("cpu.cfs_quota_us"), writes[1][1])
        if period_first < quota_first:
            writes.reverse()
    return writes


def _host_values(
    file: str,
    value: str,
    version: int,
    current: Mapping[str, str | None],
    formula: WeightFormula | None,
) -> list[tuple[str, str]]:
    text = value.strip()
    if version == 1:
        if file == "cpu.max":
            fields = text.split()
            if not 1 <= len(fields) <= 2:
                raise TranslationError(f"cpu.max {value!r} is not '<quota|max> [<period>]'")
            out = [("cpu.cfs_quota_us", _quota_v1(fields[0]))]
            if len(fields) == 2:
                if int_or_none(fields[1]) is None:
                    raise TranslationError(f"cpu.max period {fields[1]!r} is not a number of microseconds")
                out.append(("cpu.cfs_period_us", fields[1]))
            return out
        if file == "cpu.weight":
            weight = int_or_none(text)
            if weight is None or not WEIGHT_MIN <= weight <= WEIGHT_MAX:
                raise TranslationError(
                    f"cpu.weight {value!r} is not an integer in [{WEIGHT_MIN}, {WEIGHT_MAX}]; "
                    "cannot convert it to cpu.shares for this cgroup v1 node"
                )
            return [("cpu.shares", str(weight_to_shares(weight, formula)))]
        if file == "memory.max":
            return [("memory.limit_in_bytes", V1_UNLIMITED if text == V2_UNLIMITED else text)]
        if file == "cpu.cfs_quota_us":
            return [(file, _quota_v1(text))]  # "max" is -1 here
        if file in V1_MEMORY_LIMITS and text == V2_UNLIMITED:
            return [(file, V1_UNLIMITED)]  # v1 page counters read only "-1" as unlimited
        return [(V2_TO_V1.get(file, file), text)]
    if file == "cpu.cfs_quota_us":
        n = int_or_none(text)
        if n is None and text != V2_UNLIMITED:
            raise TranslationError(f"cpu.cfs_quota_us {value!r} is not an integer; cannot write cpu.max")
        quota = V2_UNLIMITED if n is None or n < 0 else str(n)
        period = _cpu_max(current.get("cpu.max") or "")[1]
        return [("cpu.max", f"{quota} {period}" if period is not None else quota)]
    if file == "cpu.cfs_period_us":
        if int_or_none(text) is None:
            raise TranslationError(f"cpu.cfs_period_us {value!r} is not an integer; cannot write cpu.max")
        fields = (current.get("cpu.max") or "").split()
        quota_text = fields[0] if fields else V2_UNLIMITED
        return [("cpu.max", f"{quota_text} {text}")]
    if file == "cpu.shares":
        shares = int_or_none(text)
        bad = f"cpu.shares {value!r} is not an integer" if shares is None else shares_problem(shares)
        if bad or shares is None:
            raise TranslationError(f"{bad}; cannot convert it to cpu.weight for this cgroup v2 node")
        return [("cpu.weight", str(shares_to_weight(shares, formula)))]
    if file == "memory.limit_in_bytes":
        return [("memory.max", V2_UNLIMITED if text == V1_UNLIMITED else text)]
    return [(V1_TO_V2.get(file, file), text)]


# ---------------------------------------------------------------- host -> logical reads


def _unlimited_as(text: str, token: str) -> str:
    return token if _memory(text) == V2_UNLIMITED else text


def from_host(
    file: str, version: int, current: Mapping[str, str], formula: WeightFormula | None = None
) -> str | None:
    """A logical file's value from its host files (stripped), in the logical file's dialect; None
    when a host file is missing. Unparsable text is passed through for the planner to see."""
    names = host_files(file, version)
    if len(names) == 1:  # the common case, read for hundreds of cgroups a tick: no lists
        text = current.get(names[0])
        if text is None:
            return None
        raw = [text.strip()]
    else:
        texts = [current.get(f) for f in names]
        if None in texts:
            return None
        raw = [t.strip() for t in texts if t is not None]
    if version == 1:
        if file == "cpu.max":
            q = int_or_none(raw[0])
            return f"{V2_UNLIMITED if q is not None and q < 0 else raw[0]} {raw[1]}"
        if file == "cpu.weight":
            shares = int_or_none(raw[0])
            if shares is None or shares_problem(shares):
                return raw[0]  # not a value the kernel holds: passed through for the planner to see
            return str(shares_to_weight(shares, formula))
        return _plain(file, raw[0])
    if file in CPU_MAX_PARTS:
        fields = raw[0].split()
        if file == "cpu.cfs_quota_us":
            return V1_UNLIMITED if fields and fields[0] == V2_UNLIMITED else (fields[0] if fields else "")
        return fields[1] if len(fields) > 1 else ""
    if file == "cpu.shares":
        weight = int_or_none(raw[0])
        if weight is None or weight_problem(weight):
            return raw[0]
        return str(weight_to_shares(weight, formula))
    return _plain(file, raw[0])


def _plain(file: str, text: str) -> str:
    """Memory limits read "unlimited" in the logical file's own dialect: -1 for the v1 names, max
    for the v2 names (v1 prints a page counter's maximum, which no policy writes)."""
    if file in V1_MEMORY_LIMITS:
        return _unlimited_as(text, V1_UNLIMITED)
    if file in MEMORY_LIMIT_FILES:
        return _unlimited_as(text, V2_UNLIMITED)
    return text
