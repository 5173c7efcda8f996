"""Pools' typed spec (``spec.pools``), compiled once per generation, and their semantic checks:
a pool is static or dynamic, static cpusets fit the node and do not overlap, one remainder pool."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.config.errors import Checker, Location, short
from engine.config.load import JsonPath
from engine.model.units import parse_cpuset


@dataclass(frozen=True)
class Pool:
    """One ``spec.pools`` entry: static (a cpu list or count) or dynamic (sized by one mode each tick),
    with its NUMA placement, HT policy and CPU order."""

    name: str
    kind: str | None
    static_cpus: frozenset[int] | None
    static_count: int | None
    from_requests: float | None
    remainder: bool
    per_container: bool
    min: int | None
    max: int | None
    min_per_numa: bool
    min_numa_ratio: float | None
    template: bool
    placement: str | None
    per_numa: bool
    ht_policy: str | None
    order: str
    origin: Location
    ramp_up: float | None = None  # seconds a new unbound container runs on the ramp-up cpuset


def compile_pool(c: Checker, i: int, raw: dict[str, Any]) -> Pool | None:
    """One pool, with the checks that need only it and the node (CPUs it names exist, its size is
    one mode and not inverted)."""
    base: JsonPath = ("pools", i)
    name = raw["name"]
    cpus = raw.get("cpus")
    size = raw.get("size")
    kind = raw.get("kind")
    if cpus is None and size is None:
        c.add(
            base,
            f"pool {name!r} has neither cpus (static) nor size (dynamic)",
            "add cpus: {count: 2} or size: {fromRequests: 1.0}",
        )
    if cpus is not None and size is not None:
        c.add((*base, "size"), f"pool {name!r} has both static cpus and a dynamic size", "keep one of them")
    static: frozenset[int] | None = None
    count: int | None = None
    if cpus is not None:
        if "list" in cpus:
            try:
                static = parse_cpuset(cpus["list"])
            except ValueError as exc:
                c.add((*base, "cpus", "list"), str(exc))
            else:
                outside = sorted(static - c.node.cpu_ids) if c.node.cpu_ids else []
                if outside:
                    c.add(
                        (*base, "cpus", "list"),
                        f"pool {name!r} names CPUs {short(outside)} that node {c.node.name!r} does not have "
                        f"({c.node.cpus} CPUs)",
                        "use a nodeSelector to target nodes that have them, or a count",
                    )
        else:
            count = cpus.get("count")
            if count is not None and count > c.node.cpus:
                c.add(
                    (*base, "cpus", "count"),
                    f"pool {name!r} wants {count} CPUs but node {c.node.name!r} has {c.node.cpus}",
                )
    size = size or {}
    modes = [k for k in ("fromRequests", "remainder", "perContainer") if size.get(k) not in (None, False)]
    if raw.get("size") is not None and len(modes) != 1:
        c.add(
            (*base, "size"),
            "a dynamic pool is sized by exactly one of fromRequests, remainder, perContainer "
            f"(got {modes or 'none'})",
        )
    lo, hi = size.get("min"), size.get("max")
    if lo is not None and hi is not None and lo > hi:
        c.add((*base, "size"), f"pool {name!r} has min {lo} above max {hi}")
    for key in ("minPerNuma", "minNumaRatio"):
        if size.get(key) and (lo is None or not size.get("remainder")):
            c.add(
                (*base, "size", key),
                f"pool {name!r}: {key} sets the remainder pool's min per NUMA node, "
                + ("but the pool has no min" if lo is None else "but this pool is not the remainder pool"),
                "use it on the reclaim pool beside remainder: true and a min, e.g. {remainder: true, min: 1, "
                "minPerNuma: true} for one CPU on every NUMA node",
            )
    if size.get("minPerNuma") and size.get("minNumaRatio") is not None:
        c.add(
            (*base, "size", "minNumaRatio"),
            f"pool {name!r} has both minPerNuma (min split over the NUMA nodes) and minNumaRatio "
            "(min on every NUMA node, raised to the ratio of its CPUs)",
            "keep one: Katalyst uses the ratio when numaMinReclaimedResourceRatioForAllocate is set, "
            "else the split",
        )
    numa = raw.get("numa") or {}
    if raw.get("template") and static is not None:
        c.add((*base, "template"), "a template pool cannot have a static cpu list", "use a count or a size")
    return Pool(
        name=name,
        kind=kind,
        static_cpus=static,
        static_count=count,
        from_requests=size.get("fromRequests"),
        remainder=bool(size.get("remainder", False)),
        per_container=bool(size.get("perContainer", False)),
        min=lo,
        max=hi,
        min_per_numa=bool(size.get("minPerNuma", False)),
        min_numa_ratio=size.get("minNumaRatio"),
        template=bool(raw.get("template", False)),
        placement=numa.get("placement"),
        per_numa=bool(numa.get("perNuma", False)),
        ht_policy=(raw.get("ht") or {}).get("policy"),
        order=str(raw.get("order", "lowFirst")),
        origin=c.loc(base),
        ramp_up=c.duration((*base, "rampUp"), raw.get("rampUp")),
    )


def check_pools(c: Checker, pools: list[Pool | None]) -> None:
    """The checks across pools: static cpusets must not overlap nor together exceed the node, and
    at most one pool takes the remainder."""
    index = {p.name: i for i, p in enumerate(pools) if p is not None}
    claimed: dict[int, str] = {}
    static_total = 0
    over = False
    for p in pools:
        if p is None:
            continue
        if p.static_cpus:
            for cpu in sorted(p.static_cpus):
                if cpu in claimed:
                    other = claimed[cpu]
                    c.add(
                        ("pools", index[p.name], "cpus", "list"),
                        f"static pools {other!r} and {p.name!r} both claim CPU {cpu}",
                        "static cpusets must not overlap; shrink one of them",
                        related=(c.loc(("pools", index[other], "cpus", "list")),),
                    )
                    break
                claimed[cpu] = p.name
        static_total += len(p.static_cpus or ()) + (p.static_count or 0)
        if static_total > c.node.cpus and not over:
            over = True
            c.add(
                ("pools", index[p.name], "cpus"),
                f"static pools take {static_total} CPUs up to {p.name!r} "
                f"but node {c.node.name!r} has {c.node.cpus}",
                "reduce the static pools or target larger nodes with a nodeSelector",
            )
    remainders = [p.name for p in pools if p is not None and p.remainder]
    if len(remainders) > 1:
        c.add(
            ("pools", index[remainders[1]], "size", "remainder"),
            f"only one pool can take the remainder; {', '.join(remainders)} all do",
        )
