"""Quantities and durations out of bounds are located problems in every document qosd reads
(issue 14, defect 2): ``reservedForAllocate: "1e9999999"`` printed a decimal.Overflow traceback,
``"1e400"`` validated and then failed every tick with ``cannot convert float infinity to integer``.

The bounds live in engine/model/units.py; engine/config/unitcheck.py finds every value a schema types
as a quantity or a duration. The tests here prove that the walk reaches every such field of the
policy schema (against tests/data/every-unit.yaml, which must set each of them), that a bad value in
any one of them is reported at its own line, column and JSON path, and, through the command line,
that each kind of document (policy, workloads, facts, trace, RuleTest) exits 1 with a located
message and no traceback.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.config.load import JsonPath, Layer, json_path, parse_documents
from engine.config.pipeline import load_documents, validate
from engine.config.unitcheck import UNIT_DEFS, schema_file, unit_values
from engine.model.units import duration_seconds, parse_quantity
from tests.qosdcli import qosd_in_process

ROOT = Path(__file__).resolve().parent.parent
EVERY_UNIT = ROOT / "tests" / "data" / "every-unit.yaml"
BAD = {parse_quantity: "1e9999999", duration_seconds: "99999999999h"}
LOCATED = re.compile(r"^\S+:\d+:\d+: error: ", re.M)

Pattern = tuple[str, ...]


def schema_unit_fields(
    document: dict[str, Any], node: Any, path: Pattern, seen: frozenset[str]
) -> Iterator[Pattern]:
    """Every place in the policy schema that refers to a unit definition, as a path pattern ("*" for
    an array item or a free-form key), written independently of unitcheck's walk."""
    if not isinstance(node, dict):
        return
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        if name in UNIT_DEFS:
            yield path
            return
        if name not in seen:
            yield from schema_unit_fields(document, document["$defs"][name], path, seen | {name})
    for key, sub in (node.get("properties") or {}).items():
        yield from schema_unit_fields(document, sub, (*path, key), seen)
    if isinstance(node.get("additionalProperties"), dict):
        yield from schema_unit_fields(document, node["additionalProperties"], (*path, "*"), seen)
    if isinstance(node.get("items"), dict):
        yield from schema_unit_fields(document, node["items"], (*path, "*"), seen)
    for keyword in ("oneOf", "anyOf", "allOf"):
        for branch in node.get(keyword) or ():
            yield from schema_unit_fields(document, branch, path, seen)


def matches(pattern: Pattern, path: JsonPath) -> bool:
    return len(pattern) == len(path) and all(p in ("*", str(q)) for p, q in zip(pattern, path, strict=True))


# Unit fields the schema accepts but compile refuses whatever their value, so a valid fixture cannot
# hold them; test_a_field_compile_refuses_is_still_bounded covers them.
NOT_IN_FIXTURE: dict[Pattern, str] = {
    (
        "spec",
        "reclaim",
        "cpu",
        "headroom",
        "utilBased",
        "staticBasedCapacity",
    ): "applies to reclaim.memory only",
}


def fixture_data() -> dict[str, Any]:
    data = yaml.safe_load(EVERY_UNIT.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def found_in_fixture() -> list[tuple[JsonPath, Any]]:
    schema = schema_file("qospolicy.schema.json")
    return [(path, parse) for path, _key, parse, _v in unit_values(schema, fixture_data())]


def test_the_walk_reaches_every_unit_field_of_the_policy_schema() -> None:
    schema = schema_file("qospolicy.schema.json")
    patterns = set(schema_unit_fields(schema, schema, (), frozenset()))
    found = [path for path, _ in found_in_fixture()]
    assert len(patterns) >= 40  # the policy schema had 46 unit fields when this was written
    unmatched = [json_path(p) for p in found if not any(matches(pat, p) for pat in patterns)]
    assert unmatched == []
    uncovered = sorted(
        "/".join(pat) for pat in patterns - set(NOT_IN_FIXTURE) if not any(matches(pat, p) for p in found)
    )
    assert uncovered == [], f"tests/data/every-unit.yaml must set these fields too: {uncovered}"


def test_the_fixture_is_valid() -> None:
    assert validate(load_documents([EVERY_UNIT], builtin=False)) == []


def _set(data: Any, path: JsonPath, value: Any) -> None:
    for part in path[:-1]:
        data = data[part]
    data[path[-1]] = value


@pytest.mark.parametrize(
    ("path", "parse"), found_in_fixture(), ids=lambda v: json_path(v) if isinstance(v, tuple) else ""
)
def test_a_value_out_of_bounds_in_any_unit_field_is_located(path: JsonPath, parse: Any) -> None:
    data = copy.deepcopy(fixture_data())
    _set(data, path, BAD[parse])
    text = json.dumps(data, indent=2)  # JSON is YAML, and keeps "1e9999999" a string
    docs = parse_documents(text, "bad.yaml", Layer.FILE)
    problems = validate(docs)
    assert problems, f"{json_path(path)} = {BAD[parse]!r} validated"
    where = [p for p in problems if p.location.path == json_path(path)]
    assert where and where[0].location.line > 0 and where[0].location.source == "bad.yaml"
    assert re.search("too large|longer than", where[0].message)


@pytest.mark.parametrize("pattern", sorted(NOT_IN_FIXTURE))
def test_a_field_compile_refuses_is_still_bounded(pattern: Pattern) -> None:
    data = copy.deepcopy(fixture_data())
    node = data
    for part in pattern[:-1]:
        node = node.setdefault(part, {})
    node[pattern[-1]] = "1e9999999"
    problems = validate(parse_documents(json.dumps(data, indent=2), "bad.yaml", Layer.FILE))
    assert [p.location.line > 0 for p in problems if p.location.path == json_path(pattern)] == [True]
    assert any("too large" in p.message for p in problems)


# ---------------------------------------------------------------- every document kind, from the CLI


def cli(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """The command line through ``engine.cli.main`` in this interpreter (tests/qosdcli.py), with
    QOSD_DEBUG set as before: a traceback fails the test; ``qosd run``, which sets up a daemon's
    process (signals, the state and audit files), in a child process."""
    if argv[0] != "run":
        return qosd_in_process(*argv, cwd=cwd)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *argv],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        env=env,
        timeout=300,
    )


def assert_located(proc: subprocess.CompletedProcess[str], file: Path, fragment: str) -> None:
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    assert "Traceback" not in output, output
    assert LOCATED.search(output), output
    line = next(ln for ln in output.splitlines() if fragment in ln)
    assert line.startswith(f"{file}:"), line


POLICY = """\
apiVersion: qosd.io/v1alpha1
kind: QoSPolicy
metadata: {name: bad-units}
spec:
  reclaim:
    memory:
      policy: headroom
      headroom: {reservedForAllocate: "VALUE"}
"""


@pytest.mark.parametrize("value", ["1e9999999", "1e400", "9" * 400])
def test_validate_locates_an_overflowing_reserved_for_allocate(tmp_path: Path, value: str) -> None:
    """The issue's inputs, exactly: no decimal.Overflow traceback, no infinity that fails every tick."""
    f = tmp_path / "rules.yaml"
    f.write_text(POLICY.replace("VALUE", value))
    proc = cli("validate", "--no-builtin", str(f))
    assert_located(proc, f, "too large")
    assert "$.spec.reclaim.memory.headroom.reservedForAllocate" in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("text", "argv", "fragment", "where"),
    [
        (
            "apiVersion: qosd.io/v1alpha1\nkind: QoSPolicy\nmetadata: {name: d}\nspec:\n"
            "  classes: [{name: be, match: [{labels: {tier: be}}]}]\n"
            "  rules:\n    - name: r\n      for: 99999999999h\n"
            "      then: {evict: {victims: {classes: [be]}, cooldown: 99999h}}\n",
            ("validate", "--no-builtin"),
            "longer than",
            "$.spec.rules[0].for",
        ),
        (  # the standalone workloads file (engine/sources/standalone.py), checked before the first tick
            "apiVersion: qosd.io/v1alpha1\nkind: StandaloneWorkloads\n"
            'workloads:\n  - path: "qosd-x/*"\n    requests: {cpu: "1e400", memory: 1Gi}\n',
            ("run", "--once", "--dry-run", "--workloads"),
            "too large",
            "$.workloads[0].requests.cpu",
        ),
        (  # a Kubernetes Node given as --node (engine/model/node.py node_from_kube)
            'apiVersion: v1\nkind: Node\nmetadata: {name: n}\nstatus:\n  capacity: {cpu: "1e400", memory: 8Gi}\n',
            ("validate", "--node"),
            "too large",
            "$.status.capacity",
        ),
    ],
    ids=["rule durations", "workloads requests", "node capacity"],
)
def test_cli_locates_a_unit_out_of_bounds(
    tmp_path: Path, text: str, argv: tuple[str, ...], fragment: str, where: str
) -> None:
    f = tmp_path / "input.yaml"
    f.write_text(text)
    proc = cli(*argv, str(f))
    assert_located(proc, f, fragment)
    assert where in proc.stdout + proc.stderr


def test_eval_locates_a_facts_window_that_is_too_long(tmp_path: Path) -> None:
    """Facts snapshots key windowed aggregates by duration ("60s"); those keys are bounded too."""
    text = (ROOT / "examples/snapshots/be-cpu-evict.yaml").read_text()
    assert "avg: {60s: 9.5}" in text
    f = tmp_path / "facts.yaml"
    f.write_text(text.replace("avg: {60s: 9.5}", "avg: {99999999999s: 9.5}"))
    proc = cli("eval", "--facts", str(f))
    assert_located(proc, f, "longer than")


def test_simulate_locates_a_trace_step_that_is_too_long(tmp_path: Path) -> None:
    text = (ROOT / "examples/traces/tidal-day.yaml").read_text()
    assert "\nstep: 1m\n" in text
    f = tmp_path / "trace.yaml"
    f.write_text(text.replace("\nstep: 1m\n", "\nstep: 99999999999h\n"))
    proc = cli("simulate", "--trace", str(f), "--no-progress")
    assert_located(proc, f, "longer than")


def test_ruletest_locates_a_step_time_that_is_too_long(tmp_path: Path) -> None:
    text = (ROOT / "examples/tests/batch-resources.yaml").read_text()
    assert "      - at: 60s\n" in text
    suite = tmp_path / "suite.yaml"
    suite.write_text(text.replace("      - at: 60s\n", "      - at: 99999999999h\n", 1))
    (tmp_path.parent / "snapshots").mkdir(exist_ok=True)
    for snap in (ROOT / "examples/snapshots").iterdir():
        (tmp_path.parent / "snapshots" / snap.name).write_text(snap.read_text())
    proc = cli("test", str(suite))
    assert_located(proc, suite, "longer than")
