"""The fuzz harness (bench/fuzz): its oracle and worker pool on inputs whose class is known, and a
short fixed-seed budget over every real surface that must find nothing (issue 14's target:
0 crashes, 0 hangs, 0 unlocated errors, no input above 256 MB peak RSS).

The harness's own tests use fake surfaces registered in SURFACES before the workers fork: an input
that hangs, kills its worker, exhausts the address-space limit, or raises from a frame the oracle
must name. The budget test feeds real mutated inputs to qosd's entry points.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.fuzz.mutate import QUANTITIES, Mutated
from bench.fuzz.oracle import (
    CRASH,
    ENGINE_DIR,
    HANG,
    LOCATED,
    OK,
    UNLOCATED,
    AcceptedButFailed,
    classify_exception,
    classify_problems,
)
from bench.fuzz.runner import Fuzzer, execute, generate, summary_table
from bench.fuzz.surfaces import SURFACES, Env, Surface, WorkloadsSurface
from engine.config.errors import Location, PolicyError, Problem, UsageError

# ---------------------------------------------------------------- the oracle


def located(line: int, column: int, source: str = "team.yaml", path: str = "$.spec") -> Problem:
    return Problem(Location(source, line, column, path), "bad value")


@pytest.mark.parametrize(
    ("problems", "fault_line", "expected"),
    [
        ([], None, OK),
        ([located(3, 5)], None, LOCATED),
        ([located(3, 5), located(9, 1)], None, LOCATED),
        # a custom resource: no line, a JSON path
        ([located(0, 0, "QoSPolicy/site", "$.spec.rules[0].when")], None, LOCATED),
        # a file position missing: no line
        ([located(0, 0, "team.yaml", "$")], None, UNLOCATED),
        # one located and one not: the unlocated one decides
        ([located(3, 5), located(0, 0, "team.yaml", "$")], None, UNLOCATED),
        # a bad byte put on line 7, the error at 1:1 (issue 14, defect 9)
        ([located(1, 1)], 7, UNLOCATED),
        ([located(1, 1)], 1, LOCATED),
        ([located(7, 3)], 7, LOCATED),
    ],
)
def test_problems_are_classified_by_their_location(
    problems: list[Problem], fault_line: int | None, expected: str
) -> None:
    assert classify_problems(problems, "rules", fault_line).cls == expected


def _raise_in_engine(exc: BaseException) -> None:
    """Raise ``exc`` from a frame whose file is inside the engine package (as a defect would)."""
    namespace: dict[str, object] = {}
    code = compile("def broken(exc):\n    raise exc\n", os.path.join(ENGINE_DIR, "fuzzprobe.py"), "exec")
    exec(code, namespace)
    namespace["broken"](exc)  # type: ignore[operator]


def test_an_exception_escaping_the_engine_is_a_crash_named_by_its_innermost_engine_frame() -> None:
    with pytest.raises(KeyError) as info:
        _raise_in_engine(KeyError("heldSince"))
    outcome = classify_exception(info.value, "state")
    assert outcome.cls == CRASH
    assert outcome.signature == "state | KeyError | engine/fuzzprobe.py:broken"
    assert "heldSince" in outcome.detail


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (PolicyError([located(4, 2)]), LOCATED),
        (PolicyError([located(0, 0, "t.yaml", "$")]), UNLOCATED),
        (UsageError("--interval 1: not a duration"), UNLOCATED),
        (AcceptedButFailed("accepted, then an operation failed", "cpuset.cpus: bad"), CRASH),
        (MemoryError(), CRASH),
        (RecursionError("maximum recursion depth exceeded"), CRASH),
    ],
)
def test_exceptions_are_classified(exc: BaseException, expected: str) -> None:
    assert classify_exception(exc, "rules").cls == expected


def test_a_validated_input_whose_operation_fails_is_a_crash(tmp_path: Path) -> None:
    """The run-time half of the oracle: the real cgroup adapter, a failed operation is reported."""
    from engine.model.operations import WriteCgroup

    env = Env()
    try:
        op = WriteCgroup("kubepods/../../escape", "cpu.shares", "2", "r")
        outcomes = env.executor.apply([op])
        assert outcomes[0].status == "failed"
        assert not (env.cgroot.parent / "escape").exists()
    finally:
        env.close()


# ---------------------------------------------------------------- the pool, on fake surfaces

BEHAVIOURS = ("ok", "located", "unlocated", "raise", "kill", "memory", "big", "hang")


class FakeSurface(Surface):
    """Each input names what it does; the pool must classify, survive and measure it."""

    name = "fake"
    suffix = ".txt"

    def load_seeds(self) -> list:  # type: ignore[type-arg]
        return []

    def generate(self, rng: random.Random) -> Mutated:
        return Mutated(rng.choice(BEHAVIOURS).encode(), "fake", [])

    def run(self, env: Env, path: Path) -> str | None:
        what = path.read_text()
        if what == "located":
            raise PolicyError([located(2, 3, str(path))])
        if what == "unlocated":
            raise PolicyError([located(0, 0, str(path), "$")])
        if what == "raise":
            _raise_in_engine(ValueError("boom"))
        if what == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if what == "memory":
            bytearray(4 << 30)  # above the worker's address-space limit
        if what == "big":
            block = bytearray(300 << 20)
            block[::4096] = b"x" * len(block[::4096])  # touch every page: resident
        if what == "hang":
            time.sleep(60)
        return None


@pytest.fixture
def fake_surface() -> Iterator[None]:
    SURFACES["fake"] = FakeSurface
    try:
        yield
    finally:
        del SURFACES["fake"]


def test_the_pool_classifies_survives_and_measures_every_kind_of_input(
    fake_surface: None, tmp_path: Path
) -> None:
    n, seed = 16, 19  # seed 19 draws every behaviour, one hang among them
    expected = Counter(generate(FakeSurface(), seed, i).data.decode() for i in range(n))
    assert all(expected[b] for b in BEHAVIOURS), expected
    # The hang limit is generous: the 300 MB input must not count as a hang on a loaded machine.
    fuzzer = Fuzzer(["fake"], seed=seed, workers=2, hang_seconds=4.0, minimize=False, tmp=tmp_path)
    report = fuzzer.run(inputs_per_surface=n)
    counts = report.stats["fake"].counts
    assert report.stats["fake"].inputs == n
    assert counts[OK] == expected["ok"] + expected["big"]
    assert counts[LOCATED] == expected["located"]
    assert counts[UNLOCATED] == expected["unlocated"]
    assert counts[HANG] == expected["hang"]
    assert counts[CRASH] == expected["raise"] + expected["kill"] + expected["memory"]
    signatures = {f.signature: f for f in report.findings}
    assert "fake | ValueError | engine/fuzzprobe.py:broken" in signatures
    assert "fake | worker died | signal 9" in signatures
    assert "fake | MemoryError | test_fuzz.py:run" in signatures
    hang = next(f for f in report.findings if f.cls == HANG)
    assert hang.signature == "fake | HANG | test_fuzz.py:run"  # the frame it was stuck in
    assert signatures["fake | worker died | signal 9"].data == b"kill"  # regenerated reproducer
    # peak RSS of the 300 MB input, measured per input (not the worker's lifetime maximum)
    assert report.stats["fake"].worst_rss_kb > 300 * 1024
    assert generate(FakeSurface(), seed, report.worst[2]).data == b"big"


# ---------------------------------------------------------------- qosd under a short budget


def test_short_fuzz_budget_finds_no_crash_hang_unlocated_error_or_memory_blowup(tmp_path: Path) -> None:
    """60 inputs per surface (seed 1). Issue 14's target, which the long run records in
    bench/RESULTS.md; the known defects of issue 14 make this fail until they are fixed."""
    # forkserver: a worker forked from this test process would count the process's own RSS, which
    # grows with the suite (about 250 MB late in a full run), in every input's peak.
    fuzzer = Fuzzer(
        list(SURFACES), seed=1, workers=2, minimize=False, tmp=tmp_path, start_method="forkserver"
    )
    report = fuzzer.run(inputs_per_surface=60)
    bad = [f for f in report.findings if f.cls in (CRASH, HANG, UNLOCATED)]
    lines = [f"{f.cls} x{f.count}: {f.signature} (first: {f.steps})" for f in bad]
    worst_mb = report.worst[0] / 1024
    assert not bad and worst_mb < 256, (
        summary_table(report) + f"\nworst peak RSS {worst_mb:.0f} MB: {report.worst[3]}\n" + "\n".join(lines)
    )


# ---------------------------------------------------------------- hypothesis: quantities

# Kubernetes quantity syntax (and its near misses): sign, digits, fraction, exponent, suffix.
QUANTITY = st.one_of(
    st.sampled_from(QUANTITIES),
    st.builds(
        lambda sign, mant, frac, exp, suffix: f"{sign}{mant}{frac}{exp}{suffix}",
        st.sampled_from(["", "-", "+"]),
        st.integers(0, 10**40).map(str),
        st.sampled_from(["", ".", ".5", ".0000001"]),
        st.one_of(st.just(""), st.integers(-(10**7), 10**7).map(lambda e: f"e{e}")),
        st.sampled_from(
            ["", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u"]
        ),
    ),
)


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    e = Env()
    yield e
    e.close()


@settings(
    max_examples=40,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(cpu=QUANTITY, memory=QUANTITY)
def test_any_quantity_in_a_workloads_file_is_accepted_and_runs_or_is_rejected_with_a_location(
    env: Env, cpu: str, memory: str
) -> None:
    doc = {
        "apiVersion": "qosd.io/v1alpha1",
        "kind": "StandaloneWorkloads",
        "workloads": [{"path": "qosd-demo/probe", "qos": "LS", "requests": {"cpu": cpu, "memory": memory}}],
    }
    m = Mutated(json.dumps(doc).encode(), "hypothesis")  # JSON: the quantity stays a quoted string
    outcome, _ = execute(env, WorkloadsSurface(), m)
    assert outcome.cls in (OK, LOCATED), f"{outcome.signature}\n{outcome.detail}"


@pytest.mark.parametrize("limit", [5.0, 10.0, 2.5])
def test_results_section_states_the_runs_own_hang_limit(limit: float) -> None:
    """The recorded section once said "a hang is more than 5 s" for a run made with --timeout 10:
    the text must give the limit the run used, or the record misstates what "0 hangs" means."""
    from bench.fuzz.__main__ import results_section
    from bench.fuzz.runner import Report

    report = Report(1, 2, 60.0, {}, [], (0, "", -1, ""), limit)
    text = results_section(report, "python -m bench.fuzz")
    assert f"a hang is more than {limit:g} s for one input" in text
