"""Facts snapshots take Kubernetes quantities wherever they hold an amount, as rules, traces and
RuleTests do (issue 18: `"32Gi" is a string, expected number`); a bad one is refused, located.

Every reader gets numbers: ``qosd eval --facts``, RuleTest inline facts and patches, trace bases and
snapshot samples, ``qosd validate --node``."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine import cli
from engine.config.errors import PolicyError
from engine.model.facts import Snapshot, snapshot_from_dict
from engine.ruletest.options import main as qosd_test
from engine.sources.facts_check import with_numbers
from engine.sources.snapshot_file import read_facts

ROOT = Path(__file__).resolve().parents[1]
BE_CPU = ROOT / "examples" / "snapshots" / "be-cpu-evict.yaml"


def same(a: Snapshot, b: Snapshot) -> bool:
    """Snapshots equal in what they read (Workload compares by identity, so its amounts field by field)."""

    def amounts(s: Snapshot) -> list[Any]:
        return [(w.uid, [(dict(c.requests), dict(c.limits)) for c in w.containers]) for w in s.workloads]

    fields = ("time", "node", "topology", "metrics", "allocatable", "cgroups", "cgroup_version")
    return all(getattr(a, f) == getattr(b, f) for f in fields) and amounts(a) == amounts(b)


def numeric() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(BE_CPU.read_text())
    return data


def at(d: dict[str, Any], path: tuple[Any, ...]) -> Any:
    for p in path:
        d = d[p]
    return d


def put(d: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    at(d, path[:-1])[path[-1]] = value


# (place, JSON path in the snapshot, the number there, the same amount as a quantity)
PLACES: list[tuple[str, tuple[Any, ...], float, str]] = [
    ("node capacity memory", ("node", "capacity", "memory"), 68719476736, "64Gi"),
    ("node capacity cpu", ("node", "capacity", "cpu"), 16, "16000m"),
    ("NUMA memory", ("node", "topology", "numa", 0, "memoryBytes"), 34359738368, "32Gi"),
    ("metric last", ("metrics", "classes", "BE", "cpu", "usage_cores", "last"), 11, "11000m"),
    ("metric window", ("metrics", "classes", "BE", "cpu", "usage_cores", "avg", "60s"), 9.5, "9500m"),
]


@pytest.mark.parametrize(("place", "path", "number", "quantity"), PLACES, ids=[p[0] for p in PLACES])
def test_a_quantity_reads_as_its_number(
    tmp_path: Path, place: str, path: tuple[Any, ...], number: float, quantity: str
) -> None:
    base = numeric()
    assert at(base, path) == number, place
    written = copy.deepcopy(base)
    put(written, path, quantity)
    file = tmp_path / "facts.yaml"
    file.write_text(yaml.safe_dump(written, sort_keys=False))
    read = read_facts(file)
    assert at(read, path) == pytest.approx(number)
    assert same(snapshot_from_dict(read), snapshot_from_dict(base))


def test_requests_limits_and_a_bare_series_as_quantities(tmp_path: Path) -> None:
    base = numeric()
    base["workloads"][0]["containers"] = [{"name": "c", "requests": {"cpu": 0.5, "memory": 2 << 30}}]
    base["metrics"]["node"] = {"memory": {"usage_bytes": 48 << 30}}
    written = copy.deepcopy(base)
    written["workloads"][0]["containers"][0]["requests"] = {"cpu": "500m", "memory": "2Gi"}
    written["metrics"]["node"]["memory"]["usage_bytes"] = "48Gi"
    file = tmp_path / "facts.json"
    file.write_text(json.dumps(written))
    assert same(snapshot_from_dict(read_facts(file)), snapshot_from_dict(base))


@pytest.mark.parametrize(("place", "path", "number", "quantity"), PLACES, ids=[p[0] for p in PLACES])
def test_a_bad_quantity_is_refused_located(
    tmp_path: Path, place: str, path: tuple[Any, ...], number: float, quantity: str
) -> None:
    written = numeric()
    put(written, path, "32Gx")
    file = tmp_path / "facts.json"
    file.write_text(json.dumps(written, indent=1))
    with pytest.raises(PolicyError) as info:
        read_facts(file)
    (problem,) = info.value.problems
    line = next(i for i, t in enumerate(file.read_text().splitlines(), 1) if "32Gx" in t)
    assert (problem.location.source, problem.location.line) == (str(file), line)
    assert '"32Gx" is not valid here: a Kubernetes quantity' in problem.message, place


def test_a_quantity_beyond_8pi_is_refused(tmp_path: Path) -> None:
    written = numeric()
    written["node"]["capacity"]["memory"] = "9Pi"
    file = tmp_path / "facts.json"
    file.write_text(json.dumps(written, indent=1))
    with pytest.raises(PolicyError, match="is too large"):
        read_facts(file)


def test_eval_reads_a_snapshot_written_with_quantities(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The reported case: `"32Gi" is a string, expected number` from `qosd eval --facts`."""
    written = numeric()
    written["node"]["topology"]["numa"][0]["memoryBytes"] = "32Gi"
    written["node"]["capacity"]["memory"] = "64Gi"
    file = tmp_path / "facts.yaml"
    file.write_text(yaml.safe_dump(written, sort_keys=False))
    assert cli.main(["eval", "--facts", str(file), "--output", "json"]) == 0
    with_quantities = json.loads(capsys.readouterr().out)
    assert cli.main(["eval", "--facts", str(BE_CPU), "--output", "json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert with_quantities["intents"] == plain["intents"]


def test_ruletest_inline_facts_and_patches_take_quantities(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    facts = numeric()
    facts["node"]["capacity"]["memory"] = "64Gi"
    # koordinator-cpu-evict.yaml's first case, with the BE usage written as quantities: the same
    # 26400-millicore release and the same two victims.
    suite = {
        "apiVersion": "qosd.io/v1alpha1",
        "kind": "RuleTest",
        "metadata": {"name": "q"},
        "policy": {"paths": [str(ROOT / "examples" / "policies" / "koordinator-cpu-evict.yaml")]},
        "cases": [
            {
                "name": "inline quantities",
                "facts": facts,
                "patch": {"metrics": {"classes": {"BE": {"cpu": {"usage_cores": {"last": "11000m", "avg": {"60s": "9500m"}}}}}}},
                "expect": {
                    "intents": [
                        {"kind": "evict", "target": "batch/be-3-priority10", "release.target": 26400},
                        {"kind": "evict", "target": "batch/be-2-priority100"},
                    ]
                },
            }
        ],
    }
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    assert qosd_test([str(path)]) == 0, capsys.readouterr().out


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d["node"].__setitem__("capacity", {"cpu": "16", "memory": "64Gi"}),
        lambda d: d["node"]["topology"]["numa"][1].__setitem__("memoryBytes", "32Gi"),
    ],
)
def test_with_numbers_leaves_no_string_amount(change: Callable[[dict[str, Any]], None]) -> None:
    data = numeric()
    change(data)
    out = with_numbers(data)
    assert out is not data and out["node"]["capacity"]["memory"] == 68719476736
    assert all(isinstance(n.get("memoryBytes", 0), float | int) for n in out["node"]["topology"]["numa"])
    assert with_numbers(numeric()) == numeric()


def test_a_node_file_takes_quantities(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`qosd validate --node` and `render --node` read a snapshot's node section the same way."""
    node = numeric()["node"]
    node["capacity"] = {"cpu": "16", "memory": "64Gi"}
    file = tmp_path / "node.yaml"
    file.write_text(yaml.safe_dump({"node": node}, sort_keys=False))
    assert cli.main(["validate", "--node", str(file)]) == 0, capsys.readouterr().out
    capsys.readouterr()
    assert cli.main(["render", "--node", str(file), "--output", "json"]) == 0
    with_quantities = json.loads(capsys.readouterr().out)
    file.write_text(yaml.safe_dump({"node": numeric()["node"]}, sort_keys=False))
    assert cli.main(["render", "--node", str(file), "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == with_quantities
