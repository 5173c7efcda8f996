"""cgroup knob values: a number, "max", a percent of the pod's request/limit or node allocatable, or an
expression, turned into the string a cgroup file takes; and the small CPU/OOM conversions behind them.

Percent and expression knobs are in the unit of the file's resource: memory files take bytes, CPU
files take cores. Cores become what each CPU file holds the way the kubelet and koordlet compute it:
quota and burst in microseconds per 100 ms period, cpu.shares as MilliCPUToShares (1024 per core,
clamped to the kernel's [2, 262144]) and cpu.weight as those shares through a shares -> weight
formula (``engine.cgroups.weight``). Expressions are compiled once per policy generation in the
template sandbox and see ``pod`` (requests, limits, name, namespace, labels, annotations, priority),
``node``, ``container`` (name, requests, limits: the container whose own cgroup the value is for;
undefined for a pod or path cgroup) and ``current`` (the file's current value in the knob's unit,
none when unknown or unlimited; ``engine.features.class_knobs.current`` says where it comes from).
``deadBandPercent`` and ``maxGrowthPercent`` beside ``expr`` or ``percent`` bound a computed value
relative to ``current``: that is what turns an expression into a stepped controller.

The conversions are pure functions so that the anchors' own numbers can be checked against them
(tests/test_knobs.py): milli-CPU -> shares/quota, CPU burst
as Koordinator and Katalyst compute it, Katalyst's OOM priority bands, and cpu.idle.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from functools import cache
from typing import Any, Literal, Protocol

from jinja2 import TemplateSyntaxError, meta

from engine.cgroups.files import host_files
from engine.cgroups.weight import (
    DEFAULT_WEIGHT_FORMULA,
    SHARES_DEFAULT,
    SHARES_MIN,
    WEIGHT_FORMULAS,
    WeightFormula,
    clamp_shares,
    shares_to_weight,
)
from engine.config.policy import OomPriority
from engine.config.render import ENV, RenderError, bounded_expression
from engine.config.render import weight as template_weight
from engine.model.facts import Container, Workload

PERIOD_US = 100_000
MIN_QUOTA_US = 1_000  # the kernel rejects a CFS quota under 1 ms



class KnobFn(Protocol):
    """A compiled knob: (pod, node facts, the container whose own cgroup it is for, the file's
    current value in the knob's unit) -> the file's text, or None when it cannot apply."""

    def __call__(
        self,
        w: Workload | None,
        node: Mapping[str, Any],
        container: Container | None = None,
        current: float | None = None,
        /,
    ) -> str | None: ...


def const_knob(text: str) -> KnobFn:
    """A knob that always gives ``text``."""

    def constant(
        w: Workload | None, node: Mapping[str, Any], container: Container | None = None,
        current: float | None = None, /,
    ) -> str | None:
        return text

    return constant


def resource_of(file: str) -> str:
    return "memory" if file.startswith("memory.") else "cpu"


# --- milli-CPU -> shares / quota ----------------------------------------------------------------


def milli_cpu_to_shares(milli: int) -> int:
    """The kubelet's MilliCPUToShares (Koordinator's batch resource hook uses the same): 1024 shares
    per core, integer division; no request (<= 0) gets the minimum 2, the kernel range [2, 262144]
    bounds the rest."""
    if milli <= 0:
        return SHARES_MIN
    return clamp_shares(milli * SHARES_DEFAULT // 1000)


def milli_cpu_to_quota(milli: int) -> int:
    """The kubelet's MilliCPUToQuota at a 100 ms period: <= 0 means no limit (-1, "max" on v2); a
    positive limit is raised to 1000 us because the kernel rejects anything smaller."""
    quota = milli * PERIOD_US // 1000
    if quota <= 0:
        return -1
    return max(quota, MIN_QUOTA_US)


def cores_to_milli(cores: float) -> int:
    """Cores as milli-CPU, rounded up like a Kubernetes quantity's MilliValue. Rounding to 1e-6 first
    drops float noise (0.1 * 1000 is 100.00000000000001, which must stay 100)."""
    return math.ceil(round(cores * 1000, 6))


def _cores_to_us(cores: float) -> int:
    """Cores as microseconds per 100 ms period, rounded up, after the same float-noise rounding."""
    return math.ceil(round(cores * PERIOD_US, 6))


# --- CPU burst --------------------------------------------------------------------------------

# The burst file on each cgroup version, from the one v1 <-> v2 table.
BURST_FILES = frozenset(host_files("cpu.cfs_burst_us", version)[0] for version in (1, 2))

KoordBurstPolicy = Literal["none", "cpuBurstOnly", "cfsQuotaBurstOnly", "auto"]
KatalystBurstPolicy = Literal["default", "closed", "static", "dynamic"]


def burst_file(cgroup_version: int) -> str:
    """The burst file's name: cpu.cfs_burst_us on cgroup v1, cpu.max.burst on v2 (both in us)."""
    if cgroup_version not in (1, 2):
        raise ValueError(f"cgroup version {cgroup_version!r} is not 1 or 2")
    return host_files("cpu.cfs_burst_us", cgroup_version)[0]


def container_burst_us(
    limit_cores: float | None, burst_percent: float, policy: KoordBurstPolicy = "cpuBurstOnly"
) -> int:
    """Koordinator's static CPU burst for one container: ``int(limit * percent/100 * 100000)``.

    0 when the policy does not burst (only "cpuBurstOnly" and "auto" do; "cfsQuotaBurstOnly" scales
    the quota instead) or the container has no CPU limit: koordlet then writes 0 to reset any burst
    left behind. The product is truncated in the same order koordlet computes it, so float results
    match its integers. A negative percent gives 0 rather than a value the kernel would reject.
    """
    if policy not in ("cpuBurstOnly", "auto") or limit_cores is None or limit_cores <= 0:
        return 0
    return max(int(limit_cores * (burst_percent / 100) * PERIOD_US), 0)


def pod_burst_us(
    containers: Iterable[Container], burst_percent: float, policy: KoordBurstPolicy = "cpuBurstOnly"
) -> int:
    """Koordinator's pod-level burst: the sum of its app containers' bursts. Containers without a CPU
    limit add 0, so unlike the pod's CPU limit this does not become unbounded."""
    return sum(
        container_burst_us(c.limits.get("cpu"), burst_percent, policy) for c in containers if not c.init
    )


def katalyst_burst_us(
    quota_us: int, burst_percent: float, policy: KatalystBurstPolicy = "static"
) -> int | None:
    """Katalyst's cpu burst for one container cgroup from its current CFS quota, or None to leave
    the file alone.

    - "static": ``int(quota * percent / 100)`` with percent clamped to [0, 100] (Katalyst clamps only
      the top; a negative burst is never valid for the kernel). No quota (<= 0, i.e. -1 unlimited)
      gives 0: there is nothing to burst over.
    - "closed": 0. Katalyst forces this policy on reclaimed_cores pods, which the bundled policy
      expresses as the class's ``cpu.burstPolicy: closed``.
    - "default": None; Katalyst does not touch the file unless its dynamic config turns the pod's
      level to "static" (that override is the policy's job, not this function's).
    - "dynamic": None; Katalyst reports it as not supported yet.
    """
    if policy == "closed":
        return 0
    if policy == "static":
        if quota_us <= 0:
            return 0
        return int(quota_us * min(max(burst_percent, 0.0), 100.0) / 100)
    if policy in ("default", "dynamic"):
        return None
    raise ValueError(f"unknown cpu burst policy {policy!r}")


# --- OOM priority -----------------------------------------------------------------------------

IGNORE_OOM_PRIORITY = -300
NEVER_KILL_OOM_PRIORITY = 300

KATALYST_OOM_PASSTHROUGH: frozenset[int] = frozenset({NEVER_KILL_OOM_PRIORITY})
SPECIAL_OOM_PRIORITIES: frozenset[int] = frozenset({IGNORE_OOM_PRIORITY, NEVER_KILL_OOM_PRIORITY})


_GO_ATOI = re.compile(r"[+-]?[0-9]+")


def _parse_oom_priority(value: object) -> int | None:
    """An integer as Go's strconv.Atoi reads one (sign and digits only), or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _GO_ATOI.fullmatch(value):
        return int(value)
    return None


def align_oom_priority(
    value: object, band: OomPriority, passthrough: Collection[int] = KATALYST_OOM_PASSTHROUGH
) -> int | None:
    """A pod's OOM priority inside its class's band, as Katalyst's AlignOOMPriority does it.

    ``band`` is the class's ``oomPriority`` (default, min, max). The upper bound is exclusive, because
    each Katalyst level owns the half-open range up to the next level's default: a value at or above
    max becomes max - 1 (shared_cores [0, 100) turns 210 into 99), a value below min becomes min.
    A missing bound does not clamp.

    ``value`` is the user's setting: None when absent, else an int or the annotation text. Absent or
    unparsable gives the band's default (None if the band has none: nothing to write). Katalyst
    itself skips a pod whose oom_priority does not parse; qosd falls back to the class default so a
    typo cannot leave a pod outside its band.

    Values in ``passthrough`` are returned unclamped. Katalyst's code passes only 300 (never kill):
    a user's -300 is clamped like any other value, and "ignore" (-300) arises only from an extra
    priority calculator plugged into the agent. Pass ``SPECIAL_OOM_PRIORITIES`` to let users
    opt a pod out with -300 as well.
    """
    score = _parse_oom_priority(value)
    if score is None:
        return band.default
    if score in passthrough:
        return score
    if band.min is not None and score < band.min:
        return band.min
    if band.max is not None and score >= band.max:
        return band.max - 1
    return score


# --- cpu.idle ---------------------------------------------------------------------------------


def cpu_idle_value(idle: object) -> str:
    """What to write to cpu.idle for a class's ``cpu`` settings: "1" when ``idle`` is true (SCHED_IDLE
    for the whole group: it runs only when nothing else wants the CPU), "0" for every other class, so
    a pod that leaves a reclaimed class loses the idle state with it.

    The kernel has cpu.idle from 5.15 (v1 cpu controller and v2); the cgroup adapter skips the write
    where the file does not exist. Writes must be ordered: while a group is idle the kernel refuses
    cpu.shares/cpu.weight writes (EINVAL), so shares go before idle=1 and after idle=0. The root
    cgroup cannot be made idle.
    """
    return "1" if idle is True else "0"


# --- knobs ------------------------------------------------------------------------------------


def _render_number(file: str, value: float, formula: WeightFormula | None) -> str | None:
    """A value in the resource's base unit (bytes or cores) as the file's text, or None when a CPU
    limit of zero or less cannot mean anything (writing it would lift the limit instead)."""
    if file.startswith("memory."):
        return str(int(value))
    if file == "cpu.shares":
        return str(milli_cpu_to_shares(cores_to_milli(value)))
    if file == "cpu.weight":
        return str(shares_to_weight(milli_cpu_to_shares(cores_to_milli(value)), formula))
    if file in ("cpu.cfs_quota_us", "cpu.max"):
        if value <= 0:
            return None
        quota = max(_cores_to_us(value), MIN_QUOTA_US)
        return f"{quota} {PERIOD_US}" if file == "cpu.max" else str(quota)
    if file in BURST_FILES:
        return str(max(_cores_to_us(value), 0))
    return _literal(value)


def _literal(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


RELATIVE_KEYS = ("deadBandPercent", "maxGrowthPercent")
MEMO_LIMIT = 8192  # cached results of one expression knob (pods x containers x current values)


@cache
def expression_names(expr: str) -> frozenset[str]:
    """The names an expression reads (``pod``, ``container``, ``node``, ``current``); empty when it
    does not parse (the check reports that)."""
    try:
        return frozenset(meta.find_undeclared_variables(ENV.parse("{{ " + expr + " }}")))
    except TemplateSyntaxError:
        return frozenset()


def knob_reads(knob: Any, name: str) -> bool:
    """Whether ``knob`` reads ``name``: an expression that names it; ``current`` also for a knob
    with a dead band or growth cap, which are relative to the current value."""
    if not isinstance(knob, Mapping):
        return False
    if name == "current" and any(k in knob for k in RELATIVE_KEYS):
        return True
    return "expr" in knob and name in expression_names(str(knob["expr"]))


def relative(value: float, current: float | None, dead_band: float, growth: float | None) -> float:
    """``value`` bounded relative to the current one: raised by at most ``growth`` percent of
    ``current`` and, when within ``dead_band`` percent of ``current``, ``current`` itself (no
    write). Unchanged when the current value is unknown or unlimited (None) or not positive: there is
    nothing to be relative to, so the first value stands."""
    if current is None or current <= 0:
        return value
    if growth is not None:
        value = min(value, current * (1 + growth / 100.0))
    if abs(value - current) <= current * dead_band / 100.0:
        return current
    return value


def current_value(file: str, text: str | None) -> float | None:
    """A file's text in the unit its knobs compute in: cores for CPU quota, burst and shares (1024
    per core; a cpu.weight through the default formula's inverse is not attempted: None), bytes
    for memory files, the number itself otherwise. None when absent, unlimited ("max", -1, the
    v1 page-rounded 2^63) or not a number."""
    if text is None:
        return None
    parts = text.split()
    if not parts or parts[0] in ("max", "-1"):
        return None
    try:
        number = float(parts[0])
    except ValueError:
        return None
    if not math.isfinite(number):
        return None
    if file in ("cpu.max", "cpu.cfs_quota_us") or file in BURST_FILES:
        period = PERIOD_US
        if file == "cpu.max" and len(parts) > 1 and parts[1].isdigit() and int(parts[1]) > 0:
            period = int(parts[1])
        return number / period
    if file == "cpu.shares":
        return number / SHARES_DEFAULT
    if file == "cpu.weight":
        return None
    if file.startswith("memory.") and number >= 2**62:
        return None  # v1's "no limit" is 2^63 rounded down to a page
    return number


def sum_texts(file: str, texts: Iterable[str]) -> str | None:
    """A pod's value as the sum of its containers' values (``{sum: containers}``), in the file's own
    text: numbers add up; any container without a limit ("max", -1) leaves the pod without one, as
    the kubelet leaves a pod's quota unset when one container has no CPU limit; cpu.max keeps the
    first container's period. None when no container gave a value."""
    total = 0
    period: str | None = None
    seen = False
    for text in texts:
        parts = text.split()
        if not parts:
            continue
        if parts[0] in ("max", "-1"):
            return f"max {parts[1] if len(parts) > 1 else PERIOD_US}" if file == "cpu.max" else parts[0]
        if not parts[0].lstrip("-").isdigit():
            return None
        seen = True
        total += int(parts[0])
        if period is None and len(parts) > 1:
            period = parts[1]
    if not seen:
        return None
    return f"{total} {period or PERIOD_US}" if file == "cpu.max" else str(total)


def compile_knob(file: str, knob: Any, *, weight_formula: WeightFormula | None = None) -> KnobFn:
    """A function (pod, node facts, container, current) -> file text, or None when the knob cannot
    apply to that pod (or container).

    Literal numbers and strings are written as given (a cpu.weight of 100 is a weight). ``{shares: N}``
    is a CPU share count: as is for cpu.shares, converted for cpu.weight. Percents and expressions
    yield cores for CPU files and go through the kubelet conversions; cpu.weight then through
    ``weight_formula`` (None: ``DEFAULT_WEIGHT_FORMULA`` at compile time). A percent is of the
    container's own request or limit when a container is given, else of the pod's. A burst file
    given as a percent of the limit is Koordinator's cpuBurstPercent: a container's own, or the
    pod's sum over its containers (``pod_burst_us``). ``deadBandPercent`` / ``maxGrowthPercent``
    bound a percent's or expression's number relative to ``current`` (``relative``).
    """
    formula: WeightFormula = DEFAULT_WEIGHT_FORMULA if weight_formula is None else weight_formula
    if formula not in WEIGHT_FORMULAS:
        raise ValueError(f"unknown cpu.weight formula {formula!r}; one of {', '.join(WEIGHT_FORMULAS)}")
    if isinstance(knob, bool):
        return const_knob("1" if knob else "0")
    if isinstance(knob, int):
        return const_knob(str(knob))  # exact: 9223372036854775807 as a float would round up past 2**63 - 1
    if isinstance(knob, float):
        return const_knob(_literal(knob))
    if isinstance(knob, str):
        return const_knob(knob)
    if "shares" in knob:
        # Out of [2, 262144] raises OutOfRange for cpu.weight (validation refuses it first, located)
        # and is written as given for cpu.shares, where the planner refuses it.
        shares = int(knob["shares"])
        return const_knob(str(shares_to_weight(shares, formula) if file == "cpu.weight" else shares))
    dead_band = float(knob.get("deadBandPercent", 0.0))
    growth = float(knob["maxGrowthPercent"]) if "maxGrowthPercent" in knob else None

    def number(value: float, current: float | None) -> str | None:
        return _render_number(file, relative(value, current, dead_band, growth), formula)

    if "percent" in knob:
        percent, of = float(knob["percent"]), str(knob["of"])
        resource = resource_of(file)
        koord_burst = of == "limit" and file in BURST_FILES

        def percent_of(
            w: Workload | None, node: Mapping[str, Any], ctr: Container | None = None,
            current: float | None = None, /,
        ) -> str | None:
            base: Any
            if of == "allocatable":
                base = node.get(f"{resource}.allocatable_{'bytes' if resource == 'memory' else 'cores'}")
            elif w is None:
                return None
            elif koord_burst:
                us = (
                    container_burst_us(ctr.limits.get("cpu"), percent)
                    if ctr is not None
                    else pod_burst_us(w.containers, percent)
                )
                return number(us / PERIOD_US, current)
            elif ctr is not None:
                base = (ctr.requests if of == "request" else ctr.limits).get(resource)
            else:
                base = w.request(resource) if of == "request" else w.limit(resource)
            if not base:
                return None
            return number(float(base) * percent / 100.0, current)

        return percent_of
    expr = str(knob["expr"])
    expression = bounded_expression(expr)  # the limits of rule templates, per call
    # An expression that does not read node facts gives the same text for the same pod object,
    # container and current value: a steady state (a controller at its floor or limit) then costs a
    # dict lookup per container instead of a sandboxed template call (~50 us idle, 200 us loaded).
    # Sources reuse unchanged pod objects between ticks; the cache is dropped when it grows past
    # MEMO_LIMIT (pods come and go) and with the generation that compiled it.
    memo: dict[tuple[Any, ...], str | None] | None = None if "node" in expression_names(expr) else {}

    def evaluate(
        w: Workload | None, node: Mapping[str, Any], ctr: Container | None = None,
        current: float | None = None, /,
    ) -> str | None:
        if memo is None:
            return compute(w, node, ctr, current)
        key = (w, ctr.name if ctr is not None else None, current)
        if key in memo:
            return memo[key]
        if len(memo) >= MEMO_LIMIT:
            memo.clear()
        text = memo[key] = compute(w, node, ctr, current)
        return text

    def compute(
        w: Workload | None, node: Mapping[str, Any], ctr: Container | None, current: float | None
    ) -> str | None:
        context: dict[str, Any] = {
            "node": dict(node),
            "pod": _pod_context(w) if w is not None else {},
            "current": current,
        }
        if ctr is not None:
            context["container"] = _container_context(ctr)
        try:
            value = expression(**context)
            template_weight(value)
            # Turning the result into text is part of it: str() of an undefined attribute
            # (node.no_such_fact) raises UndefinedError only here.
            if isinstance(value, bool) or not isinstance(value, int | float):
                return None if value is None else str(value)
            return number(float(value), current)
        except Exception as exc:  # a bad expression must not stop the tick
            # The cause is kept: validation tells a limit (SecurityError) from a pod-dependent failure.
            raise RenderError(f"expression {expr!r} failed: {exc}") from exc

    return evaluate


def _pod_context(w: Workload) -> dict[str, Any]:
    return {
        "name": w.name,
        "namespace": w.namespace,
        "labels": dict(w.labels),
        "annotations": dict(w.annotations),
        "priority": w.priority,
        "requests": {"cpu": w.request("cpu"), "memory": w.request("memory")},
        "limits": {"cpu": w.limit("cpu"), "memory": w.limit("memory")},
    }


def _container_context(c: Container) -> dict[str, Any]:
    """A container as its knob expressions see it: its own requests and limits (none when unset)."""
    return {
        "name": c.name,
        "requests": {"cpu": c.requests.get("cpu", 0.0), "memory": c.requests.get("memory", 0.0)},
        "limits": {"cpu": c.limits.get("cpu"), "memory": c.limits.get("memory")},
    }


def main_container(
    containers: Sequence[Container], annotations: Mapping[str, str], key: str | None
) -> str | None:
    """The name of a pod's main container: the one its annotation ``key`` names, else its first app
    container (Katalyst's GetMainContainer). A named container the pod does not have is still the
    answer, so no container matches it. None for a pod without app containers."""
    named = annotations.get(key, "") if key else ""
    if named:
        return named
    return next((c.name for c in containers if not c.init), None)
