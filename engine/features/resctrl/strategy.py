"""resctrl (Intel RDT / AMD PQoS): L3 cache bit masks, memory bandwidth values, schemata text and
the planning of control groups against the node's CLOSIDs.

Everything here is a pure function of the node's capabilities (what ``/sys/fs/resctrl/info/``
says) and the class settings. The adapter reads ``info/`` and the groups' ``schemata``; the planner
calls :func:`changed_lines` so that a steady state writes nothing.

Anchors:

* L3 CBM is Koordinator's ``CalculateCatL3MaskValue`` (``util/system/resctrl.go``): the root
  ``cbm_mask`` must be contiguous low bits, ``ways = bit_length(cbm)``, ``startWay = ⌈ways ×
  start / 100⌉``, ``endWay = ⌈ways × end / 100⌉``, ``mask = (1 << endWay) − (1 << startWay)``,
  lower-case hex without ``0x``. On top of it qosd enforces ``min_cbm_bits`` (the kernel rejects
  a shorter mask with EINVAL) and contiguity unless ``info/L3/sparse_masks`` is 1.
* Intel MBA rounds a percent up to ``bandwidth_gran`` (Koordinator: to 10) and stays in
  ``[min_bandwidth, 100]``. AMD MB values are in 1/8 GB/s units: Koordinator maps a percent onto
  160 units (``AMDCCDMaxMBGbps = 25 × 8 × 0.8``) with 100 % = 2048 (unlimited); Katalyst's ``mb``
  QRM plugin converts MB/s with ``⌈mbps / 125⌉`` and resets to 256000 MB/s (= 2048).
* Schemata lines are written without Koordinator's trailing ``;``: the kernel accepts both, and
  without it a line is what the kernel itself prints and what its documentation shows
  (``L3:0=3;1=c``), so logs and audit records compare with ``cat schemata`` at a glance.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.model.facts import ResctrlInfo

Percent = int | float

CACHE_RESOURCES = frozenset({"L3", "L2", "L3CODE", "L3DATA", "L2CODE", "L2DATA"})  # hex bit masks
BANDWIDTH_RESOURCES = frozenset({"MB", "SMBA"})  # decimal values
ROOT_GROUP = "/"
# Names that live in the resctrl root next to the groups; a group cannot take them.
RESERVED_GROUP_NAMES = frozenset({"info", "mon_groups", "mon_data", "tasks", "cpus", "cpus_list", "schemata"})
_GROUP_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")

AMD_MAX_MB_UNITS = 160  # Koordinator AMDCCDMaxMBGbps = 25 × 8 × 0.8, in 1/8 GB/s units
AMD_UNLIMITED_MB = 2048  # AMD's "no limit" (256 GB/s in 1/8 GB/s units)
AMD_MB_UNIT_MBPS = 1000 // 8  # Katalyst mbUnitAMD: one schemata unit is 1/8 GB/s = 125 MB/s
KATALYST_MB_RESET_MBPS = 256_000  # Katalyst defaultCCDMBValue; converts to 2048


class ResctrlError(ValueError):
    """A resctrl setting that cannot be honoured on this node; the message says what and why."""


@dataclass(frozen=True)
class Capabilities:
    """What ``/sys/fs/resctrl/info/`` offers on this node.

    ``cbm_mask`` empty: no L3 CAT. ``mb_domains`` empty: no MBA. ``num_closids`` 0: resctrl is not
    mounted (or offers no control groups). ``vendor`` is "intel" or "amd" (Koordinator treats every
    non-AMD vendor as Intel)."""

    num_closids: int
    cbm_mask: str = ""
    min_cbm_bits: int = 1
    shareable_bits: str = ""
    sparse_masks: bool = False
    bandwidth_gran: int = 10
    min_bandwidth: int = 10
    delay_linear: bool = True
    vendor: str = "intel"
    cache_ids: tuple[int, ...] = ()
    mb_domains: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.vendor not in ("intel", "amd"):
            raise ResctrlError(
                f"resctrl vendor must be 'intel' or 'amd', got {self.vendor!r}; "
                "use Capabilities.vendor_of() to map /proc/cpuinfo vendor_id"
            )
        if self.num_closids < 0 or self.min_cbm_bits < 0:
            raise ResctrlError(
                f"num_closids ({self.num_closids}) and min_cbm_bits ({self.min_cbm_bits}) cannot be negative"
            )
        if self.bandwidth_gran <= 0:
            raise ResctrlError(f"info/MB/bandwidth_gran must be positive, got {self.bandwidth_gran}")

    @property
    def has_l3(self) -> bool:
        return bool(self.cbm_mask) and bool(self.cache_ids)

    @property
    def has_mb(self) -> bool:
        return bool(self.mb_domains)

    @staticmethod
    def vendor_of(vendor_id: str) -> str:
        """``AuthenticAMD`` -> "amd"; anything else -> "intel", as Koordinator decides."""
        return "amd" if vendor_id.strip().lower() in ("amd", "authenticamd") else "intel"

    @classmethod
    def from_info(cls, info: ResctrlInfo) -> Capabilities:
        """From the snapshot's resctrl facts; an unmounted resctrl has no CLOSIDs to give."""
        if not info.mounted:
            return cls(num_closids=0)
        return cls(
            num_closids=info.num_closids,
            cbm_mask=info.cbm_mask,
            min_cbm_bits=info.min_cbm_bits,
            sparse_masks=info.sparse_masks,
            bandwidth_gran=info.mb_granularity,
            min_bandwidth=info.mb_min,
            delay_linear=info.delay_linear,
            vendor=cls.vendor_of(info.vendor),
            cache_ids=tuple(info.cache_ids),
            mb_domains=tuple(info.mb_domains),
        )


# ---------------------------------------------------------------- L3 cache bit masks


@dataclass(frozen=True)
class CbmResult:
    """An L3 mask and how it was reached. ``runs`` are the [start, end) way ranges that are set."""

    mask: str  # lower-case hex, no 0x
    value: int
    ways: int
    runs: tuple[tuple[int, int], ...]
    notes: tuple[str, ...] = ()


def parse_cbm_mask(cbm_mask: str | int) -> int:
    """The root ``info/L3/cbm_mask`` as an int; it must be contiguous low bits (0xff, 0x7ff)."""
    if isinstance(cbm_mask, int):
        value = cbm_mask
    else:
        text = cbm_mask.strip().lower().removeprefix("0x")
        try:
            value = int(text, 16)
        except ValueError:
            raise ResctrlError(f"cbm_mask {cbm_mask!r} is not hexadecimal (expected e.g. '7ff')") from None
    if value <= 0 or value & (value + 1):
        raise ResctrlError(
            f"illegal cbm_mask {value:x}: it must be a contiguous run of low bits such as ff or 7ff "
            "(info/L3/cbm_mask is the 100% mask); L3 percentages cannot be mapped onto it"
        )
    return value


def _runs(value: int) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    bit = 0
    while value >> bit:
        if (value >> bit) & 1:
            start = bit
            while (value >> bit) & 1:
                bit += 1
            out.append((start, bit))
        else:
            bit += 1
    return tuple(out)


def _check_range(start: Percent, end: Percent) -> None:
    for v in (start, end):
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ResctrlError(f"L3 percent must be a finite number, got {v!r}")
    if start < 0 or end > 100 or end <= start:
        raise ResctrlError(
            f"illegal L3 range [{start}, {end}]: need 0 <= start < end <= 100 (percent of the L3 ways)"
        )


def _ways_of(ways: int, start: Percent, end: Percent, need: int, notes: list[str]) -> tuple[int, int]:
    # Fraction keeps ⌈ways × p / 100⌉ exact, as Go's float64 is for integer percents.
    start_way = math.ceil(ways * Fraction(start) / 100)
    end_way = math.ceil(ways * Fraction(end) / 100)
    if end_way - start_way >= need:
        return start_way, end_way
    got = end_way - start_way
    if start_way + need <= ways:
        notes.append(
            f"[{start}%, {end}%] of {ways} ways is {got} way(s), below min_cbm_bits {need}: "
            f"widened upward to ways [{start_way}, {start_way + need})"
        )
        return start_way, start_way + need
    notes.append(
        f"[{start}%, {end}%] of {ways} ways is {got} way(s), below min_cbm_bits {need}, at the top "
        f"of the cache: widened downward to ways [{ways - need}, {ways})"
    )
    return ways - need, ways


def _need_bits(ways: int, min_cbm_bits: int) -> int:
    if min_cbm_bits > ways:
        raise ResctrlError(
            f"min_cbm_bits {min_cbm_bits} exceeds the {ways} ways of cbm_mask; info/L3 is inconsistent"
        )
    # A zero mask is legal on some AMD parts (min_cbm_bits 0) but means "no cache at all", which no
    # percent range asks for: at least one way.
    return max(min_cbm_bits, 1)


def l3_cbm(cbm_mask: str | int, start: Percent, end: Percent, *, min_cbm_bits: int = 1) -> CbmResult:
    """The L3 mask for ``[start, end]`` percent of the ways (Koordinator's CalculateCatL3MaskValue),
    widened to ``min_cbm_bits`` when the range is too narrow (upward, or downward at the top)."""
    cbm = parse_cbm_mask(cbm_mask)
    _check_range(start, end)
    ways = cbm.bit_length()
    notes: list[str] = []
    lo, hi = _ways_of(ways, start, end, _need_bits(ways, min_cbm_bits), notes)
    value = (1 << hi) - (1 << lo)
    return CbmResult(f"{value:x}", value, ways, ((lo, hi),), tuple(notes))


def l3_cbm_union(
    cbm_mask: str | int,
    ranges: Sequence[tuple[Percent, Percent]],
    *,
    min_cbm_bits: int = 1,
    sparse_masks: bool = False,
) -> CbmResult:
    """The L3 mask covering several percent ranges (each widened to ``min_cbm_bits``).

    Ranges that overlap or touch merge into one run. Separate runs need ``sparse_masks``: Intel
    hardware requires the 1 bits in one block, and the kernel refuses such a write with
    "mask has non-consecutive 1-bits"; better to say so here, before a write fails every tick."""
    if not ranges:
        raise ResctrlError("no L3 ranges given; a class asking for L3 needs at least one [start, end]")
    cbm = parse_cbm_mask(cbm_mask)
    ways = cbm.bit_length()
    need = _need_bits(ways, min_cbm_bits)
    notes: list[str] = []
    value = 0
    for start, end in ranges:
        _check_range(start, end)
        lo, hi = _ways_of(ways, start, end, need, notes)
        value |= (1 << hi) - (1 << lo)
    runs = _runs(value)
    if len(runs) > 1 and not sparse_masks:
        spans = ", ".join(f"[{s}%, {e}%]" for s, e in ranges)
        raise ResctrlError(
            f"L3 ranges {spans} give mask {value:x} with {len(runs)} separate runs of ways, but this node "
            "requires contiguous cache masks (info/L3/sparse_masks is 0 or absent); use one range or "
            "ranges that overlap"
        )
    return CbmResult(f"{value:x}", value, ways, runs, tuple(notes))


# ---------------------------------------------------------------- memory bandwidth


@dataclass(frozen=True)
class MbaResult:
    """An MB schemata value: a percent (Intel) or 1/8 GB/s units (AMD)."""

    value: int
    unit: str  # "percent" | "amd_1/8GBps"
    notes: tuple[str, ...] = ()


def _check_mb_percent(percent: Percent) -> None:
    if isinstance(percent, bool) or not isinstance(percent, int | float) or not math.isfinite(percent):
        raise ResctrlError(f"MB percent must be a finite number, got {percent!r}")
    if not 0 < percent <= 100:
        raise ResctrlError(
            f"MB percent {percent} is outside (0, 100]; Koordinator leaves MB untouched for such values, "
            "qosd refuses them so the mistake is visible"
        )


def mba_intel(percent: Percent, *, bandwidth_gran: int = 10, min_bandwidth: int = 10) -> MbaResult:
    """Intel MBA: the percent rounded up to a multiple of ``bandwidth_gran``, within
    ``[min_bandwidth, 100]``.

    This is the value the kernel stores (it rejects below ``min_bandwidth`` and rounds up to the
    granularity itself), so writing it reads back unchanged and the next tick diffs clean. With the
    usual gran 10 / min 10 it equals Koordinator's ``p%10 != 0 -> p/10*10+10``."""
    _check_mb_percent(percent)
    if bandwidth_gran <= 0:
        raise ResctrlError(f"info/MB/bandwidth_gran must be positive, got {bandwidth_gran}")
    notes: list[str] = []
    p = Fraction(percent)
    if p < min_bandwidth:
        notes.append(f"{percent}% is below min_bandwidth {min_bandwidth}%: raised to {min_bandwidth}%")
        p = Fraction(min_bandwidth)
    value = math.ceil(p / bandwidth_gran) * bandwidth_gran
    if value != p:
        notes.append(f"{p}% rounded up to {value}% (bandwidth_gran {bandwidth_gran})")
    if value > 100:
        notes.append(f"{value}% capped at 100%")
        value = 100
    return MbaResult(value, "percent", tuple(notes))


def mba_amd(percent: Percent) -> MbaResult:
    """AMD MB as Koordinator writes it: 100 % -> 2048 (unlimited), else ``int(160 × p / 100)``
    units of 1/8 GB/s (160 units = 20 GB/s, measured on EPYC Milan with a 0.8 discount)."""
    _check_mb_percent(percent)
    if percent == 100:
        return MbaResult(AMD_UNLIMITED_MB, "amd_1/8GBps", ("100% is unlimited on AMD: 2048",))
    value = int(AMD_MAX_MB_UNITS * Fraction(percent) / 100)
    return MbaResult(value, "amd_1/8GBps", (f"{percent}% of {AMD_MAX_MB_UNITS} units = {value}",))


def mba_amd_from_mbps(mbps: int) -> int:
    """AMD MB as Katalyst's ``mb`` QRM plugin writes it: MB/s rounded up to 1/8 GB/s units,
    ``(mbps + 124) / 125``; its reset value 256000 MB/s gives 2048 (unlimited)."""
    if isinstance(mbps, bool) or not isinstance(mbps, int) or mbps < 0:
        raise ResctrlError(f"memory bandwidth must be a non-negative integer MB/s, got {mbps!r}")
    return (mbps + AMD_MB_UNIT_MBPS - 1) // AMD_MB_UNIT_MBPS


def mba_value(percent: Percent, caps: Capabilities) -> MbaResult:
    """The MB value for a percent on this node's vendor (Koordinator's calculateMbaPercentForGroup)."""
    if caps.vendor == "amd":
        return mba_amd(percent)
    return mba_intel(percent, bandwidth_gran=caps.bandwidth_gran, min_bandwidth=caps.min_bandwidth)


# ---------------------------------------------------------------- schemata text


def parse_domains(text: str) -> dict[int, str]:
    """``"0=7ff;1= 50"`` -> ``{0: "7ff", 1: "50"}``. Entries without ``id=value`` are skipped, as
    Koordinator skips them (a trailing ``;`` leaves an empty one)."""
    out: dict[int, str] = {}
    for item in text.split(";"):
        key, sep, value = item.partition("=")
        if not sep:
            continue
        try:
            out[int(key.strip())] = value.strip()
        except ValueError:
            continue
    return out


def parse_schemata(text: str) -> dict[str, dict[int, str]]:
    """A ``schemata`` file -> {resource: {domain id: value}}.

    The kernel pads resource names and values for alignment (``"    L3:0=7ff;1=7ff"``,
    ``"MB:0= 50;1=100"``), so both are stripped. Lines that are not ``name:domains`` are skipped."""
    out: dict[str, dict[int, str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        name, sep, rest = line.partition(":")
        if not sep or not name.strip() or ":" in rest:
            continue
        out[name.strip()] = parse_domains(rest)
    return out


def _canonical(resource: str, value: str) -> int | str:
    """Values compare by meaning: the kernel reads L3 back zero-padded ("03f") and MB space-padded."""
    try:
        if resource in CACHE_RESOURCES:
            return int(value, 16)
        if resource in BANDWIDTH_RESOURCES:
            return int(value, 10)
    except ValueError:
        pass
    return value.strip()


def format_value(resource: str, value: int | str) -> str:
    if isinstance(value, str):
        return value
    return f"{value:x}" if resource in CACHE_RESOURCES else str(value)


def format_domains(resource: str, domains: Mapping[int, int | str]) -> str:
    """``{0: 15, 1: 15}`` for L3 -> ``"0=f;1=f"`` (ids ascending, no trailing ``;``)."""
    return ";".join(f"{i}={format_value(resource, domains[i])}" for i in sorted(domains))


def format_line(resource: str, domains: Mapping[int, int | str]) -> str:
    """One schemata line, e.g. ``"L3:0=f;1=f"`` or ``"MB:0=100;1=100"``; the adapter adds the newline."""
    if not domains:
        raise ResctrlError(f"schemata line {resource} needs at least one domain")
    return f"{resource}:{format_domains(resource, domains)}"


def diff_schemata(
    current: Mapping[str, Mapping[int, str]], desired: Mapping[str, Mapping[int, str]]
) -> dict[str, dict[int, str]]:
    """The resources and domains of ``desired`` whose value differs from ``current`` (by meaning).

    Domains that are absent from ``desired`` are left alone: the kernel keeps a domain's value
    unless a write names it, so writing only what changed is both minimal and safe."""
    out: dict[str, dict[int, str]] = {}
    for resource in desired:
        have = current.get(resource, {})
        changed = {
            dom: value
            for dom, value in desired[resource].items()
            if dom not in have or _canonical(resource, have[dom]) != _canonical(resource, value)
        }
        if changed:
            out[resource] = changed
    return out


def changed_lines(current_text: str, desired: Mapping[str, str]) -> list[str]:
    """The schemata lines to write so that a group holding ``current_text`` holds ``desired``.

    ``desired`` maps a resource to its domains text (``{"L3": "0=ff;1=ff", "MB": "0=100;1=100"}``).
    Returns one line per resource with a changed domain, naming only the changed domains, in a
    stable order (L3-type resources first, then MB, then the rest by name): ``[]`` when in sync."""
    want = {resource: parse_domains(text) for resource, text in desired.items()}
    delta = diff_schemata(parse_schemata(current_text), want)
    order = sorted(delta, key=lambda r: (r not in CACHE_RESOURCES, r not in BANDWIDTH_RESOURCES, r))
    return [format_line(r, delta[r]) for r in order]


def schemata_for(caps: Capabilities, l3: CbmResult | None, mb: MbaResult | None) -> dict[str, str]:
    """The desired schemata of a group: the same L3 mask on every cache id, the same MB value on
    every MB domain (as both anchors do)."""
    out: dict[str, str] = {}
    if l3 is not None and caps.cache_ids:
        out["L3"] = format_domains("L3", dict.fromkeys(caps.cache_ids, l3.value))
    if mb is not None and caps.mb_domains:
        out["MB"] = format_domains("MB", dict.fromkeys(caps.mb_domains, mb.value))
    return out


# ---------------------------------------------------------------- group planning


@dataclass(frozen=True)
class GroupRequest:
    """What a class asks of resctrl. ``source`` names the class, for messages."""

    group: str
    l3_percent: tuple[Percent, Percent] | None = None
    mb_percent: Percent | None = None
    source: str = ""


@dataclass(frozen=True)
class PlannedGroup:
    group: str
    schemata: Mapping[str, str]  # resource -> "0=ff;1=ff"
    l3: CbmResult | None
    mb: MbaResult | None
    sources: tuple[str, ...]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class RejectedGroup:
    group: str
    sources: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class GroupPlan:
    """Groups that fit and groups that do not; one bad or surplus group never sinks the others."""

    groups: tuple[PlannedGroup, ...]
    rejected: tuple[RejectedGroup, ...] = ()
    capacity: int = 0  # groups qosd may hold: num_closids − 1 (root) − groups it does not manage
    by_name: Mapping[str, PlannedGroup] = field(default_factory=lambda: MappingProxyType({}))

    def error(self) -> str:
        """All rejections in one message, or "" when every group fits."""
        return "; ".join(
            f"resctrl group {r.group} ({', '.join(r.sources)}): {r.reason}" for r in self.rejected
        )


def _group_name_problem(name: str) -> str:
    if name == ROOT_GROUP:
        return ""
    if not _GROUP_NAME.match(name) or name in (".", ".."):
        return (
            f"group name {name!r} is not a plain directory name (letters, digits, '_', '-', '.'; "
            f"'{ROOT_GROUP}' for the root group)"
        )
    if name in RESERVED_GROUP_NAMES:
        return f"group name {name!r} is reserved by the resctrl filesystem"
    return ""


def _settings(r: GroupRequest) -> tuple[tuple[Percent, ...] | None, Percent | None]:
    # 30 == 30.0, so int and float spellings of one setting merge.
    return (None if r.l3_percent is None else tuple(r.l3_percent)), r.mb_percent


def _compute(name: str, req: GroupRequest, sources: tuple[str, ...], caps: Capabilities) -> PlannedGroup:
    notes: list[str] = []
    l3: CbmResult | None = None
    mb: MbaResult | None = None
    if req.l3_percent is not None:
        if caps.has_l3:
            l3 = l3_cbm(caps.cbm_mask, *req.l3_percent, min_cbm_bits=caps.min_cbm_bits)
            notes.extend(l3.notes)
            if caps.shareable_bits:
                shared = l3.value & int(caps.shareable_bits, 16)
                if shared:
                    notes.append(
                        f"L3 mask {l3.mask} overlaps shareable_bits {caps.shareable_bits} (ways {shared:x} "
                        "may also be used by devices or other agents)"
                    )
        else:
            notes.append("L3 CAT is not offered on this node (no info/L3 or no cache ids): L3 not set")
    if req.mb_percent is not None:
        if caps.has_mb:
            mb = mba_value(req.mb_percent, caps)
            notes.extend(mb.notes)
        else:
            notes.append("MBA is not offered on this node (no info/MB): MB not set")
    return PlannedGroup(name, MappingProxyType(schemata_for(caps, l3, mb)), l3, mb, sources, tuple(notes))


def plan_groups(
    requests: Sequence[GroupRequest], caps: Capabilities, existing: Collection[str] = ()
) -> GroupPlan:
    """Assign the requested groups to the node's CLOSIDs.

    The root group holds CLOSID 0, and every other control group on the node (``existing``, also
    those qosd does not manage) holds one more, so at most ``num_closids − 1 − foreign`` groups
    fit. Groups that already exist keep their place; new ones are taken in request order (class
    order, i.e. precedence). Requests for the same group merge when their settings agree and
    conflict otherwise. Each group that cannot be honoured is reported with its reason."""
    order: list[str] = []
    merged: dict[str, GroupRequest] = {}
    sources: dict[str, list[str]] = {}
    rejected: list[RejectedGroup] = []
    for req in requests:
        src = req.source or req.group
        problem = _group_name_problem(req.group)
        if problem:
            rejected.append(RejectedGroup(req.group, (src,), problem))
            continue
        first = merged.get(req.group)
        if first is None:
            merged[req.group] = req
            sources[req.group] = [src]
            order.append(req.group)
        elif _settings(first) == _settings(req):
            sources[req.group].append(src)
        else:
            rejected.append(
                RejectedGroup(
                    req.group,
                    (src,),
                    f"conflicts with {', '.join(sources[req.group])}: one group has one schemata, but "
                    f"{src} asks l3Percent={req.l3_percent} mbPercent={req.mb_percent} and "
                    f"{sources[req.group][0]} asks l3Percent={first.l3_percent} mbPercent={first.mb_percent}",
                )
            )
    if caps.num_closids <= 0:
        reason = "resctrl is not mounted on this node (or info/ reports no CLOSIDs)"
        rejected.extend(RejectedGroup(g, tuple(sources[g]), reason) for g in order)
        return GroupPlan((), tuple(rejected), 0)

    computed: dict[str, PlannedGroup] = {}
    for g in order:
        try:
            computed[g] = _compute(g, merged[g], tuple(sources[g]), caps)
        except ResctrlError as err:
            rejected.append(RejectedGroup(g, tuple(sources[g]), str(err)))

    existing_set = set(existing) - {ROOT_GROUP}
    foreign = sorted(existing_set - set(order))
    capacity = max(caps.num_closids - 1 - len(foreign), 0)
    candidates = [g for g in order if g in computed]
    ranked = [g for g in candidates if g == ROOT_GROUP or g in existing_set] + [
        g for g in candidates if g != ROOT_GROUP and g not in existing_set
    ]
    fitted: list[str] = []
    used = 0
    for g in ranked:
        if g == ROOT_GROUP:
            fitted.append(g)
            continue
        if used < capacity:
            fitted.append(g)
            used += 1
            continue
        held = (
            f", {len(foreign)} held by groups qosd does not manage ({', '.join(foreign)})" if foreign else ""
        )
        taken = [f for f in fitted if f != ROOT_GROUP]
        rejected.append(
            RejectedGroup(
                g,
                computed[g].sources,
                f"no CLOSID left: num_closids={caps.num_closids}, CLOSID 0 is the root group{held}, "
                f"{len(taken)} taken by {', '.join(taken) or 'nothing'}; merge classes into fewer groups "
                "or free CLOSIDs (CDP halves them)",
            )
        )
    groups = tuple(computed[g] for g in order if g in fitted)
    return GroupPlan(groups, tuple(rejected), capacity, MappingProxyType({p.group: p for p in groups}))
