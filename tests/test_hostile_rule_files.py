"""Hostile rule files, end to end (issue 14, defects 1 and 9): what an operator runs and what a running
daemon does with them.

``qosd validate FILE`` must exit 1 with one located error line and a hint, no traceback, and
without the memory blow-up, also under a memory limit; a daemon reloading the same file must refuse
it, keep its generation, and not grow. Custom resources, which do not go through the YAML loader,
are held to the same depth limit; and the deepest document that *is* accepted must pass every
recursive walk (render, schema, merge, compile, both evaluators) with room to spare.
"""

from __future__ import annotations

import importlib.util
import os
import re
import resource
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from engine.config.errors import PolicyError
from engine.config.load import MAX_DEPTH, Document
from engine.config.pipeline import (
    REFERENCE_NODE,
    build_policy,
    document_from_object,
    load_documents,
    validate,
)
from engine.evaluate.engine import Engine
from engine.evaluate.state import EngineState
from engine.explain.reader import read_ticks
from engine.reload import ReloadConfig, Reloader
from engine.sources.trace import read_trace
from tests.builders import snapshot
from tests.childproc import PEAK_GROWTH_LIMIT, MiB, needs_fork, run_in_child

ROOT = Path(__file__).resolve().parent.parent
HEAD = "apiVersion: qosd.io/v1alpha1\nkind: QoSPolicy\nmetadata: {name: hostile}\nspec:\n  priority: 1\n"
# Where a template payload sits: line 7, the value of `count` (its opening quote at column 35).
POOL = "  pools:\n    - {name: extra, cpus: {count: %s}}\n"
TEMPLATE_LINE, TEMPLATE_COLUMN = 7, 35


def template_file(expression: str) -> bytes:
    return (HEAD + POOL % f'"{expression}"').encode()


# (id, file content, line, column, words the message must have)
PAYLOADS: list[tuple[str, bytes, int, int, tuple[str, ...]]] = [
    (
        "tojson-6-levels",
        template_file("{{ [[[[[[1]]]]]] | tojson(indent=10000000) | length }}"),
        TEMPLATE_LINE,
        TEMPLATE_COLUMN,
        ("tojson",),
    ),
    (
        "tojson-10-levels",
        template_file("{{ [[[[[[[[[[1]]]]]]]]]] | tojson(indent=10000000) | length }}"),
        TEMPLATE_LINE,
        TEMPLATE_COLUMN,
        ("tojson",),
    ),
    (
        "map-tojson",
        template_file("{{ [[[[[1]]]]]|map('tojson', indent=10000000)|list|length }}"),
        TEMPLATE_LINE,
        TEMPLATE_COLUMN,
        ("tojson",),
    ),
    ("printf", template_file("{{ '%0999999999d' % 1 }}"), TEMPLATE_LINE, TEMPLATE_COLUMN, ("printf",)),
    ("round", template_file("{{ 5|round(-1000000000) }}"), TEMPLATE_LINE, TEMPLATE_COLUMN, ("round",)),
    (
        "many-splits",
        template_file("{{ [" + ", ".join(["('ab '*25000).split()"] * 75) + "]|length }}"),
        TEMPLATE_LINE,
        TEMPLATE_COLUMN,
        ("in all",),
    ),
    ("non-utf8-byte", HEAD.encode() + b"  mode: aud\xffit\n", 6, 12, ("not UTF-8", "0xff")),
    ("control-character", HEAD.encode() + b"  mode: aud\x01it\n", 6, 12, ("U+0001",)),
    # x's mapping is at depth 2; the 63rd "{" (column 6 + 4 * 62) opens depth 64, its key is too deep.
    (
        "500-nested-flow-mappings",
        (HEAD + "  x: " + "{a: " * 500 + "1" + "}" * 500 + "\n").encode(),
        6,
        6 + 4 * (MAX_DEPTH - 2) + 1,
        (f"deeper than {MAX_DEPTH}",),
    ),
]
PAYLOAD_PARAMS = [pytest.param(raw, line, col, words, id=i) for i, raw, line, col, words in PAYLOADS]

# `qosd validate` under a memory limit (issue 14: a MemoryError traceback). It maps ~60 MB; 512 MB
# is ample for any refusal and far below what the unguarded payloads need.
VALIDATE_ADDRESS_SPACE = 512 * MiB
PEAK_RSS_LIMIT = 200 * MiB


# Runs the command under the address-space limit and reports that child's ru_maxrss. A child forked
# from the test process itself would report the test process's RSS too: Linux keeps the pre-exec
# high-water mark in ru_maxrss, and pytest's own RSS grows to about 250 MB late in a full run.
LAUNCHER = """
import resource, subprocess, sys
limit = int(sys.argv[1])
peak = open(sys.argv[2], "w")
code = subprocess.call(
    sys.argv[3:], preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
)
peak.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
peak.close()
sys.exit(code)
"""


def run_validate(path: Path, tmp_path: Path) -> tuple[int, str, int]:
    """``python -m engine.cli validate PATH`` under the memory limit: exit code, its output (stdout,
    then stderr), and its own peak RSS, measured by a small launcher process (see LAUNCHER)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    peak_file = tmp_path / "peak"
    with open(tmp_path / "stderr", "w+") as err, open(tmp_path / "stdout", "w+") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                LAUNCHER,
                str(VALIDATE_ADDRESS_SPACE),
                str(peak_file),
                sys.executable,
                "-m",
                "engine.cli",
                "validate",
                str(path),
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=err,
        )
        try:
            proc.wait(timeout=120)  # a hang guard, not a performance assertion
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read() + err.read(), int(peak_file.read_text() or 0) * 1024


@needs_fork
@pytest.mark.parametrize(("raw", "line", "column", "words"), PAYLOAD_PARAMS)
def test_validate_exits_1_with_one_located_line_and_a_hint(
    tmp_path: Path, raw: bytes, line: int, column: int, words: tuple[str, ...]
) -> None:
    path = tmp_path / "hostile.yaml"
    path.write_bytes(raw)
    code, err, peak = run_validate(path, tmp_path)
    assert "Traceback" not in err and "MemoryError" not in err, err
    assert code == 1, err
    errors = [e for e in err.splitlines() if ": error: " in e]
    assert len(errors) == 1, err
    (first,) = errors
    assert first.startswith(f"{path}:{line}:{column}: error: "), err
    for word in words:
        assert word in first, err
    after = err.splitlines()[err.splitlines().index(first) + 1]
    assert after.startswith("  hint: ") and len(after) > len("  hint: "), err
    assert peak < PEAK_RSS_LIMIT, f"validate peaked at {peak / MiB:.0f} MiB"


# ------------------------------------------------------------------ a running daemon's reload


GOOD = HEAD + "  pools:\n    - {name: extra, cpus: {count: 1}}\n"


def _peak_now() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _reload_then_break(rules_dir: str, hostile: bytes) -> tuple[str, str, int, int, list[str], bool, int]:
    """In a child: a Reloader (the daemon's one reload path) loads a good file, then the file is
    replaced by ``hostile`` and a watcher-triggered reload runs."""
    rules = Path(rules_dir) / "site.yaml"
    rules.write_text(GOOD)
    reloader = Reloader(ReloadConfig(files=(Path(rules_dir),), backend="python"))
    first = reloader.observe_node(REFERENCE_NODE)
    assert first is not None and reloader.engine is not None
    engine = reloader.engine
    before = _peak_now()
    rules.write_bytes(hostile)
    second = reloader.request("file")
    assert second is not None
    grew = _peak_now() - before
    problems = [p.format() for p in second.problems]
    kept = reloader.engine is engine
    reloader.close()
    return first.result, second.result, first.generation, second.generation, problems, kept, grew


@needs_fork
@pytest.mark.parametrize(("raw", "line", "column", "words"), PAYLOAD_PARAMS)
def test_a_reload_of_a_hostile_file_is_refused_and_the_generation_kept(
    tmp_path: Path, raw: bytes, line: int, column: int, words: tuple[str, ...]
) -> None:
    out = run_in_child(_reload_then_break, str(tmp_path), raw)
    assert out.kind == "returned", out.describe()
    loaded, result, gen_before, gen_after, problems, kept, grew = out.value
    assert (loaded, result) == ("loaded", "failed")
    assert gen_after == gen_before == 1 and kept, "the running generation must stay in effect"
    located = [p for p in problems if p.startswith(f"{tmp_path / 'site.yaml'}:{line}:{column}: error: ")]
    assert len(located) == 1, problems
    assert all(w in located[0] for w in words), located[0]
    assert grew < PEAK_GROWTH_LIMIT, f"the refused reload grew the daemon by {grew / MiB:.0f} MiB"


# ------------------------------------------------------------------ custom resources and depth


def nested(levels: int, leaf: Any, key: str = "not") -> Any:
    """``{key: {key: ... leaf}}``, built without recursion so any depth can be made."""
    value = leaf
    for _ in range(levels):
        value = {key: value}
    return value


def deep_cr(levels: int) -> Document:
    return document_from_object(
        {
            "apiVersion": "qosd.io/v1alpha1",
            "kind": "QoSPolicy",
            "metadata": {"name": "deep"},
            "spec": {
                "rules": [
                    {
                        "name": "r",
                        "when": nested(levels, {"node.cpu.usage_percent": {"gte": 1}}),
                        "then": {"notify": {"message": "x"}},
                    }
                ]
            },
        }
    )


@pytest.mark.parametrize("levels", [MAX_DEPTH, 900, 5000, 100_000])
def test_a_custom_resource_nested_too_deep_is_a_located_problem(levels: int) -> None:
    """CRs come as JSON from the API server, not through the YAML loader: the same limit holds,
    before rendering, the schema check or compiling walk them."""
    doc = deep_cr(levels)
    problems = validate([doc])
    assert len(problems) == 1, [p.format() for p in problems]
    (problem,) = problems
    assert problem.location.source == "QoSPolicy/deep"
    assert problem.location.path.startswith("$.spec.rules[0].when.not.not")
    assert f"deeper than {MAX_DEPTH} levels" in problem.message
    with pytest.raises(PolicyError) as info:
        build_policy([*load_documents([]), doc], REFERENCE_NODE)
    assert any(f"deeper than {MAX_DEPTH}" in p.message for p in info.value.problems)


class FakePolicies:
    """engine.reload.PolicyLayer over fixed documents (the CR layer of a daemon in Kubernetes mode)."""

    def __init__(self, docs: Sequence[Document]):
        self.docs = tuple(docs)

    def documents(self) -> Sequence[Document]:
        return self.docs

    def generations(self) -> Mapping[str, int]:
        return {d.source.removeprefix("QoSPolicy/"): 1 for d in self.docs}


def test_a_reload_with_a_deep_custom_resource_is_refused_with_its_path() -> None:
    policies = FakePolicies([])
    reloader = Reloader(ReloadConfig(), policies=policies)
    try:
        assert reloader.observe_node(REFERENCE_NODE) is not None and reloader.generation == 1
        policies.docs = (deep_cr(5000),)
        outcome = reloader.request("crd")
        assert outcome is not None and outcome.result == "failed"
        assert reloader.generation == 1
        assert [p.location.source for p in outcome.problems] == ["QoSPolicy/deep"]
    finally:
        reloader.close()


def deepest_accepted_policy(tmp_path: Path) -> Path:
    """A rule whose condition nests as deep as the loader accepts: ``not`` chains down to a
    comparison whose threshold is at depth MAX_DEPTH (spec=1, rules=2, [0]=3, when=4)."""
    levels = MAX_DEPTH - 4 - 2
    condition = "{not: " * levels + "{node.cpu.usage_percent: {gte: 50}}" + "}" * levels
    path = tmp_path / "deepest.yaml"
    path.write_text(
        HEAD
        + "  rules:\n    - name: deepest\n"
        + f"      when: {condition}\n"
        + "      then: {notify: {message: deepest}}\n"
    )
    return path


def with_headroom(frames: int, fn: Callable[[], Any]) -> Any:
    """``fn()`` with only ``frames`` Python frames left before RecursionError: whatever it walks
    recursively must fit in that, not in the interpreter's whole limit."""
    depth = 0
    frame = sys._getframe()
    while frame is not None:
        depth += 1
        frame = frame.f_back  # type: ignore[assignment]
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + frames)
    try:
        return fn()
    finally:
        sys.setrecursionlimit(old)


# The deepest accepted document may use at most this many frames in any walk, which leaves more than
# half of Python's default limit (1000) to whatever thread calls the reload.
FRAME_BUDGET = 400
BACKENDS = [
    "python",
    pytest.param(
        "durable",
        marks=[
            pytest.mark.durable,
            pytest.mark.skipif(
                importlib.util.find_spec("durable_rules_engine") is None,
                reason="durable_rules is not importable here (optional extra)",
            ),
        ],
    ),
]


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_deepest_accepted_document_passes_every_walk_with_room_to_spare(
    tmp_path: Path, backend: str
) -> None:
    docs = load_documents([deepest_accepted_policy(tmp_path)])
    assert with_headroom(FRAME_BUDGET, lambda: validate(docs)) == []
    policy = with_headroom(FRAME_BUDGET, lambda: build_policy(docs, REFERENCE_NODE))
    assert [r.name for r in policy.rules if r.name == "deepest"] == ["deepest"]
    engine = with_headroom(FRAME_BUDGET, lambda: Engine(policy, backend=backend))
    try:
        # An odd number of `not`s over usage >= 50: fires at 10 % and not at 90 %.
        levels = MAX_DEPTH - 4 - 2
        for usage, fires in ((10.0, levels % 2 == 1), (90.0, levels % 2 == 0)):
            snap = snapshot(node={"cpu.usage_percent": usage})
            evaluation = with_headroom(FRAME_BUDGET, lambda s=snap: engine.evaluate(s, EngineState()))
            assert ("deepest" in evaluation.fired) == fires, (usage, evaluation.fired)
    finally:
        engine.backend.close()


def test_a_document_one_level_deeper_is_refused(tmp_path: Path) -> None:
    """The limit the test above sits at is the loader's: one more level is a located problem."""
    path = deepest_accepted_policy(tmp_path)
    path.write_text(path.read_text().replace("{not: ", "{not: {not: ", 1).replace("}}}\n", "}}}}\n", 1))
    with pytest.raises(PolicyError) as info:
        load_documents([path])
    (problem,) = info.value.problems
    assert problem.location.line == 8 and f"deeper than {MAX_DEPTH}" in problem.message
    assert re.fullmatch(r"\d+", str(problem.location.column))


# ------------------------------------------------------------------ the other files qosd reads


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        pytest.param("[" * 100_000, 1, MAX_DEPTH + 1, id="beyond-the-decoder"),
        pytest.param(
            '{"kind": "Evaluation", "a": ' + "[" * 200 + "]" * 200 + "}", 1, 28 + MAX_DEPTH, id="decoded"
        ),
        pytest.param(
            '{"kind": "Evaluation"}\n{"a": "[[", "b": ' + "[" * 500 + "]" * 500 + "}\n",
            2,
            17 + MAX_DEPTH,
            id="jsonl",
        ),
    ],
)
def test_explain_locates_json_nested_too_deep(tmp_path: Path, text: str, line: int, column: int) -> None:
    """``qosd explain`` reads JSON written by qosd; a hand-edited or hostile one nested a few hundred
    levels deep is a located error, not a RecursionError (from the decoder or the schema check).
    The column is that of the bracket opening level MAX_DEPTH + 1 (the root's bracket is level 1)."""
    path = tmp_path / "eval.json"
    path.write_text(text)
    with pytest.raises(PolicyError) as info:
        read_ticks(path)
    deep = [p for p in info.value.problems if "nests deeper" in p.message]
    assert [(p.location.line, p.location.column) for p in deep] == [(line, column)], info.value.format()


def test_explain_and_traces_locate_undecodable_bytes(tmp_path: Path) -> None:
    ticks = tmp_path / "eval.json"
    ticks.write_bytes(b'{"kind": "Evaluation",\n "x": "caf\xe9"}\n')
    with pytest.raises(PolicyError) as info:
        read_ticks(ticks)
    assert [(p.location.line, p.location.column) for p in info.value.problems] == [(2, 11)]
    trace = tmp_path / "day.jsonl"
    trace.write_bytes(b'{"kind": "Trace"}\n{"t": 1, "x": "\xff"}\n')
    with pytest.raises(PolicyError) as info:
        read_trace(trace)
    assert [(p.location.line, p.location.column) for p in info.value.problems] == [(2, 16)]


def test_a_trace_line_nested_too_deep_is_located(tmp_path: Path) -> None:
    trace = tmp_path / "day.jsonl"
    trace.write_text('{"kind": "Trace"}\n' + '{"t": ' + "[" * 5000 + "]" * 5000 + "}\n")
    with pytest.raises(PolicyError) as info:
        read_trace(trace)
    (problem,) = info.value.problems
    assert (problem.location.line, problem.location.column) == (2, 7 + MAX_DEPTH - 1)
    assert "nests deeper" in problem.message
