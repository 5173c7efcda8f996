"""The qosd command line: exit codes (0 clean, 1 invalid, 2 usage), JSON output, render, schema."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from engine.cli import main
from tests.conftest import policy_text

GOOD = policy_text(
    """
    classes:
      - name: be
        match: [{labels: {q: be}}]
    rules:
      - name: r
        when: {node.memory.usage_percent: {gte: 70}}
        then: {evict: {victims: {classes: [be]}, release: {lowerPercent: 68}}}
    """
)
BAD = policy_text(
    """
    rules:
      - name: r
        when: {node.memory.usage_pct: {gte: "70"}}
        then: {notify: {}}
    """
)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_validate_clean_file_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "good.yaml").write_text(GOOD)
    code, out, _ = run(capsys, "validate", "--no-builtin", str(tmp_path))
    assert code == 0
    assert "valid: 1 document(s) from 1 file(s)" in out


def test_validate_invalid_file_exits_1_with_located_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    code, out, err = run(capsys, "validate", "--no-builtin", str(path))
    assert code == 1 and out == ""
    assert f'{path}:7:43: error: expected a number, got the string "70"' in err
    assert err.rstrip().endswith("2 errors in 1 document(s) from 1 file(s)")


def test_validate_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    code, out, _ = run(capsys, "validate", "--no-builtin", "--output", "json", str(path))
    report = json.loads(out)
    assert code == 1 and report["valid"] is False
    problem, typo = sorted(report["problems"], key=lambda p: p["column"], reverse=True)
    assert typo["message"] == "unknown fact 'node.memory.usage_pct'"
    assert (problem["line"], problem["column"], problem["path"]) == (
        7,
        43,
        "$.spec.rules[0].when['node.memory.usage_pct'].gte",
    )
    assert "without quotes" in problem["hint"]


def test_parse_errors_in_json_mode_are_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text("a: 1\na: 2\n")
    code, out, _ = run(capsys, "validate", "--output", "json", str(path))
    assert code == 1
    assert json.loads(out)["problems"][0]["message"] == "duplicate key 'a'"


@pytest.mark.parametrize(
    "argv",
    [
        ["validate", "/definitely/not/here.yaml"],
        ["render", "--node", "/definitely/not/node.yaml"],
        ["render", "--label", "novalue"],
        ["schema", "policy", "--names"],
    ],
)
def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2, err


def test_argparse_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["validate", "--output", "xml"])
    assert info.value.code == 2


def test_render_for_a_node_file_with_origins(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(GOOD)
    node = tmp_path / "node.yaml"
    node.write_text(
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1, labels: {zone: a}}\n"
        "status: {capacity: {cpu: '8', memory: 32Gi}}\n"
    )
    code, out, _ = run(capsys, "render", "--no-builtin", "--node", str(node), "--show-origin", str(policy))
    assert code == 0
    assert "name: effective-n1" in out
    assert f"gte: 70  # {policy}:10:47" in out
    assert yaml.safe_load(out)["spec"]["rules"][0]["name"] == "r"


def test_render_json_carries_the_origin_map(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(GOOD)
    code, out, _ = run(capsys, "render", "--no-builtin", "--output", "json", "--show-origin", str(policy))
    doc = json.loads(out)
    assert code == 0
    assert doc["origins"]["$.spec.rules[0].then.evict.release.lowerPercent"] == f"{policy}:11:72"
    assert len(doc["metadata"]["annotations"]["qosd.io/hash"]) == 64


def test_render_of_a_facts_snapshot_node_checks_the_facts_schema(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node = tmp_path / "facts.yaml"
    node.write_text("node:\n  name: n1\n  topology:\n    cpus: [{id: 0, core: 0, socket: 0, numa: '0'}]\n")
    code, _, err = run(capsys, "render", "--node", str(node))
    assert code == 1
    assert f'{node}:4:46: error: expected an integer, got the string "0"' in err


def test_schema_and_fact_names(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "schema", "facts", "--names")
    assert code == 0
    assert "node.memory.usage_percent" in out and "class.*.cpu.satisfaction" in out
    code, out, _ = run(capsys, "schema", "policy")
    assert json.loads(out)["title"] == "QoSPolicy"


def test_console_entry_point_runs_as_a_module() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "engine.cli", "--version"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0 and proc.stdout.startswith("qosd ")


def test_render_for_a_facts_snapshot_uses_its_topology(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Templates see the node's topology sizes, derived from the snapshot's CPU list."""
    policy = tmp_path / "p.yaml"
    policy.write_text(
        policy_text(
            """
            pools:
              - {name: reclaim, size: {remainder: true, min: "{{ [4, node.numa_count * 3] | max }}"}}
              - {name: reserve, cpus: {count: "{{ node.sockets }}"}}
            """
        )
    )
    cpus = ", ".join(f"{{id: {i}, core: {i // 2}, socket: {i // 4}, numa: {i // 2}}}" for i in range(8))
    node = tmp_path / "facts.yaml"
    node.write_text(f"node:\n  name: n8\n  capacity: {{cpu: 8, memory: 34359738368}}\n  topology:\n    cpus: [{cpus}]\n")
    code, out, err = run(capsys, "render", "--no-builtin", "--node", str(node), "--output", "json", str(policy))
    assert code == 0, err
    pools = {p["name"]: p for p in json.loads(out)["spec"]["pools"]}
    assert pools["reclaim"]["size"]["min"] == 12  # 4 NUMA nodes
    assert pools["reserve"]["cpus"]["count"] == 2  # 2 sockets
