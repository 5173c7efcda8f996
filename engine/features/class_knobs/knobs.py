"""cgroup knob values: a number, "max", a percent of the pod's request/limit or node allocatable, or an
expression, turned into the string a cgroup file takes; and the small CPU/OOM conversions behind them.

Percent and expression knobs are in the unit of the file's resource: memory files take bytes, CPU
files take cores. Cores become what each CPU file holds the way the kubelet and koordlet compute it:
quota and burst in microseconds per 100 ms period, cpu.shares as MilliCPUToShares (1024 per core,
clamped to the kernel's [2, 262144]) and cpu.weight as those shares through a shares -> weight
formula (``engine.cgroups.weight``). Expressions are compiled once per policy generation in the
template sandbox and see ``pod`` (requests, limits, name, namespace, labels, annotations, priority)
and ``node``.

The conversions are pure functions so that the anchors' own numbers can be checked against them
(tests/test_knobs.py): milli-CPU -> shares/quota, CPU burst
as Koordinator and Katalyst compute it, Katalyst's OOM priority bands, and cpu.idle.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, Literal

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
from engine.config.render import RenderError, bounded_expression
from engine.config.render import weight as template_weight
from engine.model.facts import Container, Workload

PERIOD_US = 100_000
MIN_QUOTA_US = 1_000  # the kernel rejects a CFS quota under 1 ms

KnobFn = Callable[[Workload | None, Mapping[str, Any]], str | None]


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


def compile_knob(file: str, knob: Any, *, weight_formula: WeightFormula | None = None) -> KnobFn:
    """A function (pod, node facts) -> file text, or None when the knob cannot apply to that pod.

    Literal numbers and strings are written as given (a cpu.weight of 100 is a weight). ``{shares: N}``
    is a CPU share count: as is for cpu.shares, converted for cpu.weight. Percents and expressions
    yield cores for CPU files and go through the kubelet conversions; cpu.weight then through
    ``weight_formula`` (None: ``DEFAULT_WEIGHT_FORMULA`` at compile time). A burst file given as a
    percent of the limit is Koordinator's cpuBurstPercent, summed per container (``pod_burst_us``).
    """
    formula: WeightFormula = DEFAULT_WEIGHT_FORMULA if weight_formula is None else weight_formula
    if formula not in WEIGHT_FORMULAS:
        raise ValueError(f"unknown cpu.weight formula {formula!r}; one of {', '.join(WEIGHT_FORMULAS)}")
    if isinstance(knob, bool):
        text = "1" if knob else "0"
        return lambda _w, _n: text
    if isinstance(knob, int):
        literal = str(knob)  # exact: 9223372036854775807 as a float would round up past 2**63 - 1
        return lambda _w, _n: literal
    if isinstance(knob, float):
        literal = _literal(knob)
        return lambda _w, _n: literal
    if isinstance(knob, str):
        return lambda _w, _n: knob
    if "shares" in knob:
        # Out of [2, 262144] raises OutOfRange for cpu.weight (validation refuses it first, located)
        # and is written as given for cpu.shares, where the planner refuses it.
        shares = int(knob["shares"])
        text = str(shares_to_weight(shares, formula) if file == "cpu.weight" else shares)
        return lambda _w, _n: text
    if "percent" in knob:
        percent, of = float(knob["percent"]), str(knob["of"])
        resource = resource_of(file)
        koord_burst = of == "limit" and file in BURST_FILES

        def percent_of(w: Workload | None, node: Mapping[str, Any]) -> str | None:
            if of == "allocatable":
                base = node.get(f"{resource}.allocatable_{'bytes' if resource == 'memory' else 'cores'}")
            elif w is None:
                return None
            elif koord_burst:
                return str(pod_burst_us(w.containers, percent))
            else:
                base = w.request(resource) if of == "request" else w.limit(resource)
            if not base:
                return None
            return _render_number(file, float(base) * percent / 100.0, formula)

        return percent_of
    expression = bounded_expression(str(knob["expr"]))  # the limits of rule templates, per call

    def evaluate(w: Workload | None, node: Mapping[str, Any]) -> str | None:
        context = {"node": dict(node), "pod": _pod_context(w) if w is not None else {}}
        try:
            value = expression(**context)
            template_weight(value)
            # Turning the result into text is part of it: str() of an undefined attribute
            # (node.no_such_fact) raises UndefinedError only here.
            if isinstance(value, bool) or not isinstance(value, int | float):
                return None if value is None else str(value)
            return _render_number(file, float(value), formula)
        except Exception as exc:  # a bad expression must not stop the tick
            # The cause is kept: validation tells a limit (SecurityError) from a pod-dependent failure.
            raise RenderError(f"expression {knob['expr']!r} failed: {exc}") from exc

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
