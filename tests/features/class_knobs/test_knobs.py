"""CPU/OOM knob conversions, checked against the anchors' own numbers.

Each table names the upstream test whose cases it re-expresses; the numbers are theirs, the tests are
ours. Where qosd deliberately differs (out-of-range input is clamped, not rejected) the case says so.
"""

from __future__ import annotations

from types import MappingProxyType

import pytest

from engine.cgroups.weight import WeightFormula
from engine.config.pipeline import REFERENCE_NODE, build_policy, load_documents
from engine.config.policy import OomPriority, QoSClass
from engine.features.class_knobs import knobs
from engine.features.class_knobs.knobs import (
    SPECIAL_OOM_PRIORITIES,
    align_oom_priority,
    burst_file,
    compile_knob,
    container_burst_us,
    cores_to_milli,
    cpu_idle_value,
    katalyst_burst_us,
    milli_cpu_to_quota,
    milli_cpu_to_shares,
    pod_burst_us,
)
from engine.model.facts import Container, Workload

# --- milli-CPU -> shares / quota ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("milli", "shares", "quota"),
    [
        (500, 512, 50000),
        (1500, 1536, 150000),
        (1000, 1024, 100000),
        (0, 2, -1),
        (1, 2, 1000),  # 1 share and 100 us: both raised to the kernel minimum
        (9, 9, 1000),
        (10, 10, 1000),
        (11, 11, 1100),
        (-5, 2, -1),
        (300_000, 262144, 30_000_000),  # shares capped, quota is not
    ],
)
def test_milli_cpu_conversions(milli: int, shares: int, quota: int) -> None:
    """koordinator pkg/koordlet/runtimehooks/hooks/batchresource/batch_resource_test.go
    Test_plugin_SetPodResources and Test_plugin_SetContainerResources: batch-cpu 500 -> shares
    1024*500/1000 and quota 100000*500/1000, 1500 -> quota 150000, 1000 -> 1024 shares, no request ->
    shares 2, no limit -> quota -1. The rest pin MilliCPUToShares/MilliCPUToQuota's bounds."""
    assert milli_cpu_to_shares(milli) == shares
    assert milli_cpu_to_quota(milli) == quota


@pytest.mark.parametrize(("cores", "milli"), [(0.1, 100), (0.3, 300), (2.5, 2500), (0.0005, 1), (0.0, 0)])
def test_cores_to_milli_rounds_up_without_float_noise(cores: float, milli: int) -> None:
    """Like a quantity's MilliValue: sub-milli rounds up, but 0.1 * 1000 = 100.00000000000001 stays 100."""
    assert cores_to_milli(cores) == milli


# --- CPU burst --------------------------------------------------------------------------------


def _containers(*limits: float | None) -> tuple[Container, ...]:
    return tuple(
        Container(f"c{i}", limits={} if limit is None else {"cpu": limit}) for i, limit in enumerate(limits)
    )


@pytest.mark.parametrize(
    ("limits", "percent", "policy", "per_container", "pod"),
    [
        ((5.0, 3.0), 1000, "auto", [5_000_000, 3_000_000], 8_000_000),  # apply-by-default-burst-config
        ((5.0, 3.0), 500, "auto", [2_500_000, 1_500_000], 4_000_000),  # apply-by-specified-burst-config
        ((5.0, 3.0), 500, "cfsQuotaBurstOnly", [0, 0], 0),  # apply-by-disabled-burst-config
        ((None, None), 1000, "auto", [0, 0], 0),  # apply-by-unlimited-container
        ((5.0, None), 1000, "cpuBurstOnly", [5_000_000, 0], 5_000_000),
        ((5.0,), 1000, "none", [0], 0),
        ((0.3,), 1000, "cpuBurstOnly", [300_000], 300_000),  # 0.3 * 10 * 1e5 is 300000.00000000006
        ((2.0,), -50, "auto", [0], 0),
    ],
)
def test_koordinator_cpu_burst(
    limits: tuple[float | None, ...],
    percent: float,
    policy: knobs.KoordBurstPolicy,
    per_container: list[int],
    pod: int,
) -> None:
    """koordinator pkg/koordlet/qosmanager/plugins/cpuburst/cpu_burst_test.go
    TestCPUBurst_applyCPUBurst: limits of 5 and 3 cores at the default 1000% give 5*10*100000 and
    3*10*100000 and the pod their sum; 500% halves them; a policy without cpu burst or a container
    without a limit gives 0."""
    containers = _containers(*limits)
    assert [container_burst_us(c.limits.get("cpu"), percent, policy) for c in containers] == per_container
    assert pod_burst_us(containers, percent, policy) == pod


def test_pod_burst_skips_init_containers() -> None:
    containers = (*_containers(2.0), Container("init", limits={"cpu": 4.0}, init=True))
    assert pod_burst_us(containers, 100) == 200_000


@pytest.mark.parametrize(
    ("quota", "percent", "policy", "burst"),
    [
        (200, 100, "static", 200),  # admin default percent 100
        (200, 50, "static", 100),  # static, cpu_burst_percent 50
        (200, 25, "static", 50),  # static, cpu_burst_percent 25
        (200, 100, "closed", 0),  # closed, even with cpu_burst_percent 100
        (200, 100, "default", None),  # no policy: the file is left alone
        (200, 150, "static", 200),  # percent above 100 is clamped to 100
        (200, -10, "static", 0),
        (-1, 50, "static", 0),  # unlimited quota: nothing to burst over
        (100_000, 33.3, "static", 33_299),  # the float product is truncated, as Go's uint64() does
        (200, 50, "dynamic", None),
    ],
)
def test_katalyst_cpu_burst(
    quota: int, percent: float, policy: knobs.KatalystBurstPolicy, burst: int | None
) -> None:
    """katalyst-core pkg/agent/qrm-plugins/cpu/dynamicpolicy/cpuburst/manager_test.go
    TestManagerImpl_UpdateCPUBurst (CpuQuota 200: static 50% -> 100, 25% -> 50, default 100% -> 200,
    closed -> 0, no policy -> untouched) and pkg/util/qos/cpu_enhancement_test.go
    TestGetPodCPUBurstPercentFromCPUEnhancement (150 -> 100)."""
    assert katalyst_burst_us(quota, percent, policy) == burst


def test_katalyst_burst_rejects_unknown_policy() -> None:
    with pytest.raises(ValueError, match="unknown cpu burst policy"):
        katalyst_burst_us(200, 50, "sometimes")  # type: ignore[arg-type]


def test_burst_file_per_cgroup_version() -> None:
    assert (burst_file(1), burst_file(2)) == ("cpu.cfs_burst_us", "cpu.max.burst")
    with pytest.raises(ValueError, match="not 1 or 2"):
        burst_file(3)


# --- OOM priority -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("level", "value", "expected"),
    [
        ("reclaimed_cores", None, -100),
        ("shared_cores", None, 0),
        ("dedicated_cores", None, 100),
        ("system_cores", None, 200),
        ("reclaimed_cores", -50, -50),
        ("reclaimed_cores", -150, -100),
        ("reclaimed_cores", 100, -1),
        ("reclaimed_cores", 300, 300),
        ("shared_cores", 39, 39),
        ("shared_cores", -100, 0),
        ("shared_cores", 210, 99),
        ("shared_cores", 300, 300),
        ("dedicated_cores", 142, 142),
        ("dedicated_cores", -100, 100),
        ("dedicated_cores", 250, 199),
        ("dedicated_cores", 300, 300),
        ("system_cores", 221, 221),
        ("system_cores", 121, 200),
        ("system_cores", 322, 299),
        ("system_cores", 300, 300),
    ],
)
def test_katalyst_align_oom_priority(level: str, value: int | None, expected: int) -> None:
    """katalyst-core pkg/util/qos/oom_priority_test.go TestAlignOOMPriority, through the bands the
    bundled policy gives each class (the path classify takes): defaults per level, in-band values
    kept, below-band to the band's min, at or above the band's max to max - 1, 300 (never kill)
    through unclamped. (Katalyst's unknown-level cases have no counterpart: a pod qosd cannot
    classify gets no OOM priority at all.)"""
    band = _default_policy_classes()[level].oom_priority
    assert align_oom_priority(value, band) == expected


# Katalyst's four built-in bands (pkg/util/qos/oom_priority.go), the anchor the bundled policy matches.
KATALYST_OOM_BANDS: dict[str, OomPriority] = {
    "reclaimed_cores": OomPriority(default=-100, min=-100, max=0),
    "shared_cores": OomPriority(default=0, min=0, max=100),
    "dedicated_cores": OomPriority(default=100, min=100, max=200),
    "system_cores": OomPriority(default=200, min=200, max=300),
}


@pytest.mark.parametrize(
    ("value", "band", "expected"),
    [
        (-300, "reclaimed_cores", -100),  # Katalyst clamps a user's -300 like any other value
        (-300, "system_cores", 200),
        (0, "reclaimed_cores", -1),  # max is exclusive: 0 belongs to shared_cores
        (100, "shared_cores", 99),
        (99, "shared_cores", 99),
        ("42", "shared_cores", 42),
        ("+42", "shared_cores", 42),
        ("-7", "shared_cores", 0),
        ("abc", "dedicated_cores", 100),  # unparsable: the class default
        ("1.5", "dedicated_cores", 100),
        (" 5", "shared_cores", 0),
        ("", "system_cores", 200),
        (True, "shared_cores", 0),
        (2.0, "shared_cores", 0),
        ("300", "shared_cores", 300),
    ],
)
def test_align_oom_priority_bands(value: object, band: str, expected: int) -> None:
    """Clamping, Go's Atoi parsing (sign and digits only) and the class-default fallback."""
    assert align_oom_priority(value, KATALYST_OOM_BANDS[band]) == expected


@pytest.mark.parametrize(("value", "expected"), [(-300, -300), (300, 300), (-299, -100), (0, -1)])
def test_align_oom_priority_with_both_special_values(value: int, expected: int) -> None:
    """A policy that lets users opt a pod out with -300 passes both special values through."""
    assert (
        align_oom_priority(value, KATALYST_OOM_BANDS["reclaimed_cores"], SPECIAL_OOM_PRIORITIES) == expected
    )


@pytest.mark.parametrize(
    ("value", "band", "expected"),
    [
        (-5000, OomPriority(default=7, min=None, max=10), -5000),
        (5000, OomPriority(default=7, min=0, max=None), 5000),
        (10, OomPriority(default=7, min=0, max=10), 9),
        ("junk", OomPriority(default=None, min=0, max=10), None),
        (None, OomPriority(), None),
    ],
)
def test_align_oom_priority_partial_bands(value: object, band: OomPriority, expected: int | None) -> None:
    """A missing bound does not clamp; no default means nothing to write for an unset value."""
    assert align_oom_priority(value, band) == expected


def _default_policy_classes() -> dict[str, QoSClass]:
    policy = build_policy(load_documents([], builtin=True), REFERENCE_NODE)
    return {c.name: c for c in policy.classes}


def test_bundled_policy_bands_are_katalysts() -> None:
    """rules/default.yaml classes[].oomPriority carries Katalyst's bands, so aligning with the policy's
    band gives Katalyst's answers."""
    classes = _default_policy_classes()
    assert {name: classes[name].oom_priority for name in KATALYST_OOM_BANDS} == dict(KATALYST_OOM_BANDS)


# --- cpu.idle ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cpu", "expected"),
    [({"idle": True}, "1"), ({"idle": False}, "0"), ({}, "0"), ({"idle": "true"}, "0"), ({"idle": 1}, "0")],
)
def test_cpu_idle_value(cpu: dict[str, object], expected: str) -> None:
    """Only a literal true makes a group idle; validated YAML gives a bool, anything else is not."""
    assert cpu_idle_value(cpu.get("idle")) == expected


def test_bundled_reclaimed_class_is_idle_and_others_are_not() -> None:
    classes = _default_policy_classes()
    values = {name: cpu_idle_value(cls.cpu.idle) for name, cls in classes.items()}
    assert values == {
        "dedicated_cores": "0",
        "shared_cores": "0",
        "reclaimed_cores": "1",
        "system_cores": "0",
    }


# --- compile_knob wiring ----------------------------------------------------------------------


def _pod(*containers: Container) -> Workload:
    return Workload(uid="p", name="p", containers=containers)


def _cpu_pod(request: float, limit: float | None = None) -> Workload:
    limits = MappingProxyType({} if limit is None else {"cpu": limit})
    return _pod(Container("main", requests=MappingProxyType({"cpu": request}), limits=limits))


@pytest.mark.parametrize(
    ("file", "knob", "formula", "cores", "expected"),
    [
        ("cpu.weight", {"percent": 100, "of": "request"}, "quadratic", 1.0, "100"),
        ("cpu.weight", {"percent": 100, "of": "request"}, "linear", 1.0, "39"),
        ("cpu.weight", {"percent": 50, "of": "request"}, "quadratic", 1.0, "59"),  # 512 shares
        ("cpu.weight", {"percent": 100, "of": "request"}, "quadratic", 0.1, "17"),  # 102 shares
        ("cpu.weight", {"expr": "pod.requests.cpu * 2"}, "quadratic", 1.0, "174"),
        ("cpu.weight", {"expr": "pod.requests.cpu * 2"}, "linear", 1.0, "79"),
        ("cpu.weight", {"shares": 1024}, "quadratic", 1.0, "100"),
        ("cpu.weight", {"shares": 2}, "linear", 1.0, "1"),
        ("cpu.weight", 100, "linear", 1.0, "100"),  # a literal is already a weight
        ("cpu.shares", {"shares": 1024}, "quadratic", 1.0, "1024"),
        ("cpu.shares", {"percent": 100, "of": "request"}, "quadratic", 300.0, "262144"),
        ("cpu.shares", {"percent": 100, "of": "request"}, "quadratic", 0.1, "102"),
    ],
)
def test_compile_knob_cpu_weight_and_shares(
    file: str, knob: object, formula: WeightFormula, cores: float, expected: str
) -> None:
    """Cores and shares reach cpu.weight through the chosen formula; cores reach cpu.shares through
    MilliCPUToShares with its kernel bounds."""
    assert compile_knob(file, knob, weight_formula=formula)(_cpu_pod(cores), {}) == expected


def test_compile_knob_uses_the_module_default_formula(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a formula, the module default is read when the knob is compiled."""
    knob = {"percent": 100, "of": "request"}
    assert compile_knob("cpu.weight", knob)(_cpu_pod(1.0), {}) == "100"
    monkeypatch.setattr(knobs, "DEFAULT_WEIGHT_FORMULA", "linear")
    assert compile_knob("cpu.weight", knob)(_cpu_pod(1.0), {}) == "39"


def test_compile_knob_refuses_an_unknown_formula() -> None:
    with pytest.raises(ValueError, match=r"unknown cpu\.weight formula"):
        compile_knob("cpu.weight", 100, weight_formula="systemd")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("file", "value", "expected"),
    [
        ("cpu.cfs_quota_us", "0.3", "30000"),  # not 30001 from 0.3 * 100000 = 30000.000000000004
        ("cpu.cfs_quota_us", "0.005", "1000"),  # the kernel minimum
        ("cpu.cfs_quota_us", "0", None),  # no limit of zero: writing -1 would lift it
        ("cpu.cfs_quota_us", "-2", None),
        ("cpu.max", "0.3", "30000 100000"),
        ("cpu.max", "0", None),
        ("cpu.cfs_burst_us", "0.3", "30000"),
        ("cpu.max.burst", "-1", "0"),
    ],
)
def test_compile_knob_cpu_microseconds(file: str, value: str, expected: str | None) -> None:
    assert compile_knob(file, {"expr": value})(None, {}) == expected


@pytest.mark.parametrize("file", ["cpu.cfs_burst_us", "cpu.max.burst"])
def test_compile_knob_burst_percent_of_limit_is_koordinators(file: str) -> None:
    """A burst knob as a percent of the limit is cpuBurstPercent: per container, unlimited ones add 0
    (TestCPUBurst_applyCPUBurst's pod with 5 and 3 cores at 1000%)."""
    knob = compile_knob(file, {"percent": 1000, "of": "limit"})
    limited = _pod(*_containers(5.0, 3.0))
    assert knob(limited, {}) == "8000000"
    assert knob(_pod(*_containers(5.0, None)), {}) == "5000000"
    assert knob(_pod(*_containers(None)), {}) == "0"
    assert knob(None, {}) is None
