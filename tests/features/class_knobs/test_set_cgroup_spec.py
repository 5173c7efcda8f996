"""The setCgroup action's typed spec: target, knobs compiled once per generation with the policy's
cpu.weight formula, and the memoryQos block compiled beside them."""

from __future__ import annotations

import pytest

from engine.features.class_knobs.knobs import compile_knob
from engine.features.class_knobs.spec import SetCgroupSpec, compile_spec
from engine.features.memory_qos.spec import MemoryQos


@pytest.mark.parametrize(
    ("target", "fields"),
    [
        pytest.param({"class": "be"}, ("be", None, None), id="class"),
        pytest.param({"pool": "reclaim"}, (None, "reclaim", None), id="pool"),
        pytest.param({"path": "kubepods/besteffort"}, (None, None, "kubepods/besteffort"), id="path"),
    ],
)
def test_target(target: dict[str, str], fields: tuple[str | None, ...]) -> None:
    spec = compile_spec({"target": target, "values": {"cpu.shares": 2}})
    assert (spec.class_name, spec.pool, spec.path) == fields
    assert dict(spec.target) == target


@pytest.mark.parametrize("formula", ["linear", "quadratic"])
def test_knobs_are_compiled_with_the_policy_formula(formula: str) -> None:
    spec = compile_spec({"target": {"class": "be"}, "values": {"cpu.weight": {"shares": 1024}}}, formula)  # type: ignore[arg-type]
    [(file, knob)] = spec.knobs
    assert file == "cpu.weight"
    assert knob(None, {}) == compile_knob("cpu.weight", {"shares": 1024}, weight_formula=formula)(None, {})  # type: ignore[arg-type]


def test_the_formulas_differ_so_the_test_above_can_fail() -> None:
    linear = compile_spec({"target": {"path": "x"}, "values": {"cpu.weight": {"shares": 1024}}}, "linear")
    quadratic = compile_spec({"target": {"path": "x"}, "values": {"cpu.weight": {"shares": 1024}}}, "quadratic")
    assert linear.knobs[0][1](None, {}) != quadratic.knobs[0][1](None, {})


def test_memory_qos_compiled_with_the_spec() -> None:
    spec = compile_spec({"target": {"class": "be"}, "memoryQos": {"minLimitPercent": 50, "wmarkRatio": 95}})
    assert spec.knobs == ()
    assert spec.memory_qos == MemoryQos.of({"minLimitPercent": 50, "wmarkRatio": 95})
    assert spec.memory_qos is not None and spec.memory_qos.files == (("memory.wmark_ratio", "95"),)
    assert isinstance(spec, SetCgroupSpec)
