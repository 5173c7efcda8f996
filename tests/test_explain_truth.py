"""qosd explain never says more than happened (issue 18, "Output that must be true"): a plan
(``qosd eval``, ``simulate``) is "Chose to ...", an audit record says "Evicted", "Wrote",
"Published" only for what the adapter reported done and "Did not ... Not done (why)" for what it
refused; ``rank r of N`` counts the eligible candidates; counts carry no unit; a note an engine step
wrote is attributed to that step, and no rule may take a step's name."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from engine.cli import main as cli_main
from engine.model.intents import STEP_NAMES

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOTS = ROOT / "examples" / "snapshots"


def eval_doc(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert cli_main(["eval", *argv, "--output", "json"]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def explain(capsys: pytest.CaptureFixture[str], path: Path, *argv: str) -> list[str]:
    assert cli_main(["explain", str(path), *argv]) == 0
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("- ")]


def test_a_plan_is_never_said_as_done(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """eval plans: every sentence of its decisions is "Chose to", "Would have", "Kept" or "Skipped"."""
    for snapshot in ("memory-pressure.yaml", "batch-katalyst-node.yaml", "katalyst-pools-16cpu-4numa.yaml"):
        path = tmp_path / "eval.json"
        path.write_text(json.dumps(eval_doc(capsys, "--facts", str(SNAPSHOTS / snapshot))))
        lines = explain(capsys, path)
        assert lines, snapshot
        for line in lines:
            assert re.match(r"- (Chose to|Would have|Kept|Skipped|Workload|Nothing to do)\b", line), line


def _audit(doc: dict[str, Any], status_of: dict[str, tuple[str, str]], path: Path) -> Path:
    """The eval document as an audit record whose results say what each operation kind came to."""
    results = []
    for op in doc["operations"]:
        status, why = status_of.get(op["kind"], ("applied", ""))
        r: dict[str, Any] = {"operation": op, "status": status, "attempts": 1}
        if why:
            r["error" if status != "applied" else "detail"] = why
        results.append(r)
    path.write_text(json.dumps({**doc, "results": results}) + "\n")
    return path


def test_refused_operations_say_so_with_the_reason(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Standalone mode refuses publishing (no Kubernetes API): the record's sentences say "Did not
    publish ... Not done (skipped: ...)", never "Published"; a failed cgroup write is "Did not write"."""
    doc = eval_doc(capsys, "--facts", str(SNAPSHOTS / "memory-pressure.yaml"))
    kinds = {op["kind"] for op in doc["operations"]}
    assert {"publishNodeResource", "writeCgroup", "evictPod"} <= kinds
    refusal = "standalone mode: no Kubernetes API on this node"
    log = _audit(
        doc,
        {
            "publishNodeResource": ("skipped", refusal),
            "writeCgroup": ("failed", "EINVAL: cpuset.cpus"),
            "evictPod": ("skipped", refusal),
        },
        tmp_path / "audit.jsonl",
    )
    lines = explain(capsys, log)
    publish = [x for x in lines if "kubernetes.io/batch-" in x]
    assert len(publish) == 2
    for line in publish:
        assert line.startswith("- Did not publish kubernetes.io/batch-"), line
        assert line.endswith(f"Not done (skipped: {refusal})."), line
    writes = [x for x in lines if "cpuset.cpus" in x]
    assert writes and all(x.startswith("- Did not write ") and "EINVAL" in x for x in writes)
    assert not [x for x in lines if x.startswith(("- Evicted", "- Published", "- Wrote"))]

    log = _audit(doc, {}, tmp_path / "applied.jsonl")
    lines = explain(capsys, log)
    assert [x for x in lines if x.startswith("- Published kubernetes.io/batch-cpu = ")]
    assert [x for x in lines if x.startswith("- Wrote ")]
    assert len([x for x in lines if x.startswith("- Evicted ")]) == 2


def test_rank_counts_the_eligible_candidates(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """memory-pressure.yaml has five pods, three of them BE (the victims class): rank r of 3."""
    doc = eval_doc(capsys, "--facts", str(SNAPSHOTS / "memory-pressure.yaml"))
    path = tmp_path / "eval.json"
    path.write_text(json.dumps(doc))
    lines = [x for x in explain(capsys, path) if "evict" in x.split(" (")[0]]
    assert [re.search(r"rank (\d+) of (\d+) eligible", x).groups() for x in lines] == [  # type: ignore[union-attr]
        ("1", "3"),
        ("2", "3"),
    ]


def test_counts_carry_no_unit(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The Katalyst headroom inputs count containers: "containers 2", not "containers 2 B" or "2 cores"."""
    doc = eval_doc(capsys, "--facts", str(SNAPSHOTS / "batch-katalyst-node.yaml"))
    path = tmp_path / "eval.json"
    path.write_text(json.dumps(doc))
    publish = [x for x in explain(capsys, path) if "Chose to publish" in x]
    assert len(publish) == 2
    for line in publish:
        assert re.search(r"containers \d+, ", line), line
        assert not re.search(r"containers \d+ (B|cores?)\b", line), line
    assert "capacity 16 cores" in publish[0] and "reservedForAllocate 5.0 GiB" in publish[1]


def test_a_step_note_is_attributed_to_the_step(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The resctrl step's note (resctrl not mounted) and the pool step's writes name the step, not
    a rule called resctrl or pools that the policy does not have."""
    doc = eval_doc(capsys, "--facts", str(SNAPSHOTS / "batch-katalyst-node.yaml"))
    assert any(s["rule"] == "resctrl" for s in doc["skipped"])
    path = tmp_path / "eval.json"
    path.write_text(json.dumps(doc))
    lines = explain(capsys, path)
    assert f"- Skipped by {STEP_NAMES['resctrl']}: resctrl is not mounted" in "\n".join(lines)
    assert not [x for x in lines if "rule resctrl" in x or "rule pools" in x or "rule classes" in x]
    doc = eval_doc(capsys, "--facts", str(SNAPSHOTS / "katalyst-pools-16cpu-4numa.yaml"))
    path.write_text(json.dumps(doc))
    pools = [x for x in explain(capsys, path) if STEP_NAMES["pools"] in x]
    assert pools and all(x.endswith("keeps it so on every tick.") for x in pools)


def test_every_step_name_is_registered() -> None:
    """The names the steps sign with are the registry's (a new step must add its own)."""
    from engine.features.class_knobs import step as class_knobs
    from engine.features.pools import step as pools
    from engine.features.resctrl import step as resctrl

    assert {class_knobs.RULE, pools.RULE, resctrl.RULE} == set(STEP_NAMES)


@pytest.mark.parametrize("name", sorted(STEP_NAMES))
def test_a_rule_may_not_take_a_step_name(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str
) -> None:
    rules = tmp_path / "r.yaml"
    rules.write_text(
        "apiVersion: qosd.io/v1alpha1\nkind: QoSPolicy\nmetadata: {name: x}\nspec:\n  rules:\n"
        f"    - name: {name}\n      then: {{notify: {{reason: X}}}}\n"
    )
    assert cli_main(["validate", str(rules)]) == 1
    said = capsys.readouterr()
    text = said.out + said.err  # diagnostics move to stderr with issue 18's CLI conventions
    assert f"{rules}:6:" in text and f"rule name {name!r} is taken" in text
