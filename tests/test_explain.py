"""qosd explain: the sentences for the shipped examples (enforce, audit, held, skipped, pending
credit, windowed and NUMA conditions, workload issues), filters, the three input forms, and
located errors for garbled input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.cli import main as cli_main
from engine.explain import reader
from engine.explain.options import main
from engine.model.units import human_bytes, num

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOTS = ROOT / "examples" / "snapshots"
CANARY = ROOT / "rules" / "examples" / "canary-audit.yaml"


def evaluate(capsys: pytest.CaptureFixture[str], tmp_path: Path, *argv: str, name: str = "eval.json") -> Path:
    """`qosd eval ... --output json` written to a file, as an on-call engineer would save it."""
    assert cli_main(["eval", *argv, "--output", "json"]) == 0
    path = tmp_path / name
    path.write_text(capsys.readouterr().out)
    return path


def explain(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def ref(doc: dict[str, Any], rule: str) -> str:
    """How a sentence names a rule: name, source file:line:col and policy hash, read from the doc
    so bundled-rule edits elsewhere do not break these tests."""
    intent = next(i for i in doc["intents"] if i["provenance"]["rule"] == rule)
    return f"rule {rule} ({intent['provenance']['source']}, policy {doc['policy']['hash'][:12]})"


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


# ---------------------------------------------------------------- the shipped examples


def test_memory_pressure_eviction_in_words(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = evaluate(capsys, tmp_path, "--facts", str(SNAPSHOTS / "memory-pressure.yaml"))
    doc = load(path)
    code, out, _ = explain(capsys, str(path))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith(
        f"Tick at 2023-11-14 22:13:20 UTC (t=1700000000), policy {doc['policy']['hash'][:12]} generation 0: "
    )
    r = ref(doc, "be-memory-evict")
    assert (
        f"- Chose to evict batch/etl-small (class BE, rank 1 of 3 eligible by priority 5000, memory.usage 1.0 GiB, name etl-small) "
        f"because {r} saw node.memory.usage_percent = 82% >= 70%; it releases down to 68%: "
        "68719476736 * (82 - 68) / 100 = 9.0 GiB, 0 already pending; this eviction brings released to 1.0 GiB."
    ) in lines
    assert (
        f"- Chose to evict batch/spark-exec-1 (class BE, rank 2 of 3 eligible by priority 5500, memory.usage 12.0 GiB, "
        f"name spark-exec-1) because {r} saw node.memory.usage_percent = 82% >= 70%; it releases down to 68%: "
        "68719476736 * (82 - 68) / 100 = 9.0 GiB, 0 already pending; this eviction brings released to 13.0 GiB "
        "(target met)."
    ) in lines
    # Every skipped rule of the tick is said, with its reason.
    for s in doc["skipped"]:
        assert f"- Skipped rule {s['rule']}: {s['reason']}." in lines


def test_audit_mode_says_would_have(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = evaluate(
        capsys, tmp_path, "--facts", str(SNAPSHOTS / "canary-be-memory.yaml"), "--rules", str(CANARY)
    )
    doc = load(path)
    code, out, _ = explain(capsys, str(path), "--rule", "be-memory-evict")
    assert code == 0
    assert (
        f"- Would have evicted batch/spark-big (class BE, rank 1 of 2 eligible by priority 5500, memory.usage 6.0 GiB, "
        f"name spark-big) because {ref(doc, 'be-memory-evict')} saw node.memory.usage_percent = 75% >= 70%; "
        "it releases down to 68%: 68719476736 * (75 - 68) / 100 = 4.5 GiB, 0 already pending; "
        "this eviction brings released to 6.0 GiB (target met). Held: audit mode: reported, not executed."
    ) in out.splitlines()
    assert "- Evicted" not in out


def test_held_by_the_eviction_burst(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = evaluate(
        capsys, tmp_path, "--facts", str(SNAPSHOTS / "memory-pressure.yaml"), "--eviction-burst", "1"
    )
    code, out, _ = explain(capsys, str(path), "--rule", "be-memory-evict")
    assert code == 0
    lines = [line for line in out.splitlines() if line.startswith("- ")]
    assert lines[0].startswith("- Chose to evict batch/etl-small (")
    assert lines[1].startswith("- Would have evicted batch/spark-exec-1 (")
    assert lines[1].endswith(
        "this eviction brings released to 13.0 GiB (target met). Held: eviction burst of 1 per tick reached."
    )


def test_dry_run_and_skipped_cooldown(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = evaluate(capsys, tmp_path, "--facts", str(SNAPSHOTS / "memory-pressure.yaml"), "--dry-run")
    doc = load(path)
    doc["skipped"] = [{"rule": "be-memory-evict", "reason": "cooldown: 2s of 4s left"}]
    path.write_text(json.dumps(doc))
    code, out, _ = explain(capsys, str(path), "--rule", "be-memory-evict")
    assert code == 0
    assert "Held: dry run: reported, not executed." in out
    assert "- Skipped rule be-memory-evict: cooldown: 2s of 4s left." in out.splitlines()


def test_pending_release_credit(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = evaluate(capsys, tmp_path, "--facts", str(SNAPSHOTS / "be-memory-terminating.yaml"))
    code, out, _ = explain(capsys, str(path), "--target", "batch/spark-exec-b")
    assert code == 0
    assert (
        "it releases down to 68%: 68719476736 * (80 - 68) / 100 = 7.7 GiB, 4.0 GiB already pending; "
        "this eviction brings released to 8.0 GiB (target met)."
    ) in out


def test_system_memory_pressure_and_taint(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # The engine computes node.memory.pressure from workload PSI held 15s; the saved state says since when.
    state = tmp_path / "state.json"
    state.write_text(
        json.dumps(
            {
                "heldSince": {},
                "latched": [],
                "lastFired": {},
                "firedAt": {},
                "evicting": {},
                "pressure": {"psiSince": 1699999985},
            }
        )
    )
    facts = str(SNAPSHOTS / "system-memory-psi-pressure.yaml")
    path = evaluate(capsys, tmp_path, "--facts", facts, "--state", str(state))
    doc = load(path)
    code, out, _ = explain(capsys, str(path))
    assert code == 0
    assert (
        f"- Chose to evict batch/etl (class reclaimed_cores, rank 1 of 3 eligible by class eviction priority 0, priority 50, "
        f"memory.usage 1.0 GiB, grace period 1s) because {ref(doc, 'system-memory-pressure-reclaimed')} saw "
        "node.memory.pressure = reclaimed_eviction; it has no release target, so it "
        "evicts its top-ranked candidates up to its per-round limit."
    ) in out.splitlines()
    assert (
        "- Chose to taint the node with node.katalyst.kubewharf.io/MemoryPressure:NoSchedule because "
        f"{ref(doc, 'system-memory-pressure-taint')} saw node.memory.pressure = reclaimed_eviction != noop"
    ) in out


def test_numa_scoped_rule_names_the_numa_node(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = evaluate(capsys, tmp_path, "--facts", str(SNAPSHOTS / "numa-watermark-pressure.yaml"))
    code, out, _ = explain(capsys, str(path), "--target", "etl")
    assert code == 0
    assert (
        "on NUMA node 0 saw numa.memory.watermark_pressure = reclaimed_eviction;"
    ) in out
    assert "grace period 1s" in out


def test_protected_class_overlay_and_own_grace(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    overlay = ROOT / "rules" / "examples" / "named-cpuset-pool.yaml"
    path = evaluate(
        capsys, tmp_path, "--facts", str(SNAPSHOTS / "protected-class.yaml"), "--rules", str(overlay)
    )
    code, out, _ = explain(capsys, str(path), "--rule", "numa-memory-pressure")
    assert code == 0
    assert (
        "- Chose to evict shop/web (class shared_cores, rank 1 of 1 eligible by class eviction priority 100, priority 1000"
        in out
    )
    assert "the pod's own grace period" in out
    assert "db/kv" not in out


def test_workload_issues(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    facts = yaml.safe_load((SNAPSHOTS / "quiet-node.yaml").read_text())
    for w in facts["workloads"]:
        w.get("annotations", {}).pop("katalyst.kubewharf.io/memory_enhancement", None)
    snapshot = tmp_path / "facts.yaml"
    snapshot.write_text(yaml.safe_dump(facts))
    path = evaluate(capsys, tmp_path, "--facts", str(snapshot))
    code, out, _ = explain(capsys, str(path), "--target", "db/kv")
    assert code == 0
    assert (
        "- Workload db/kv (uid dc-1, class dedicated_cores) breaks its class or enhancement rules: "
        "class dedicated_cores requires enhancement numa_binding"
    ) in out


def test_quiet_tick_and_filters_without_match(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = evaluate(capsys, tmp_path, "--facts", str(SNAPSHOTS / "quiet-node.yaml"))
    code, out, _ = explain(capsys, str(path), "--rule", "be-memory-evict")
    assert code == 0 and out == "No decision in this file involves rule be-memory-evict.\n"
    code, out, _ = explain(capsys, str(path), "--target", "batch/nope", "--rule", "x")
    assert out == "No decision in this file involves rule x and target batch/nope.\n"
    doc = load(path)
    # quiet-node has no resctrl, so its tick carries one "resctrl ... not mounted" note: clear it too.
    doc["intents"], doc["operations"], doc["fired"], doc["skipped"] = [], [], [], []
    path.write_text(json.dumps(doc))
    code, out, _ = explain(capsys, str(path))
    assert out.splitlines()[1] == "- Nothing to do: no rule acted and none was skipped."


# ---------------------------------------------------------------- input forms


def test_audit_log_and_simulation(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    first = load(evaluate(capsys, tmp_path, "--facts", str(SNAPSHOTS / "memory-pressure.yaml")))
    second = load(
        evaluate(
            capsys, tmp_path, "--facts", str(SNAPSHOTS / "canary-be-memory.yaml"), "--rules", str(CANARY)
        )
    )
    log = tmp_path / "audit.jsonl"
    log.write_text(json.dumps(first) + "\n\n" + json.dumps(second) + "\n")
    code, out, _ = explain(capsys, str(log), "--rule", "be-memory-evict")
    assert code == 0
    blocks = out.split("\n\n")
    assert blocks[0].startswith(f"[{log}:1] Tick at")
    assert blocks[1].startswith(f"[{log}:3] Tick at")
    assert (
        "- Chose to evict batch/spark-exec-1" in blocks[0]
        and "- Would have evicted batch/spark-big" in blocks[1]
    )

    sim = tmp_path / "sim.json"
    sim.write_text(
        json.dumps({"apiVersion": "qosd.io/v1alpha1", "kind": "Simulation", "ticks": [first, second]})
    )
    code, out, _ = explain(capsys, str(sim), "--target", "spark-big")
    assert code == 0
    assert out.count("Tick at") == 1 and "Would have evicted batch/spark-big" in out
    code, out, _ = explain(capsys, str(sim), "--output", "json")
    report = json.loads(out)
    assert report["kind"] == "Explanation" and [t["origin"] for t in report["ticks"]] == [
        f"{sim} ticks[0]",
        f"{sim} ticks[1]",
    ]
    decision = next(d for d in report["ticks"][1]["decisions"] if d["kind"] == "evict")
    assert decision == {
        "kind": "evict",
        "rule": "be-memory-evict",
        "target": "batch/spark-big",
        "held": "audit mode: reported, not executed",
        "audit": True,
        "text": decision["text"],
    }


def test_a_one_line_simulation_is_read_with_one_parse(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`qosd simulate -o json` writes a day as one line of megabytes: explain parses it once, not
    once to ask whether it is a JSON line and again as the document."""
    first = load(evaluate(capsys, tmp_path, "--facts", str(SNAPSHOTS / "memory-pressure.yaml")))
    sim = tmp_path / "sim.json"
    sim.write_text(json.dumps({"apiVersion": "qosd.io/v1alpha1", "kind": "Simulation", "ticks": [first]}))
    parsed: list[int] = []
    real = reader.json_loads_bounded

    def counting(text: str, **kwargs: Any) -> Any:
        parsed.append(len(text))
        return real(text, **kwargs)

    monkeypatch.setattr(reader, "json_loads_bounded", counting)
    code, out, _ = explain(capsys, str(sim), "--rule", "be-memory-evict")
    assert code == 0 and "- Chose to evict batch/spark-exec-1" in out
    assert parsed == [len(sim.read_text())]


def test_simulation_without_ticks(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "sim.json"
    path.write_text('{"apiVersion": "qosd.io/v1alpha1", "kind": "Simulation", "ticks": []}')
    code, out, _ = explain(capsys, str(path))
    assert code == 0
    assert out == "This file holds no per-tick Evaluation documents: there is nothing to explain.\n"


# ---------------------------------------------------------------- garbled input


def test_truncated_json_is_located(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = evaluate(capsys, tmp_path, "--facts", str(SNAPSHOTS / "memory-pressure.yaml"))
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:40]) + "\n")
    code, out, err = explain(capsys, str(path))
    assert code == 1 and out == ""
    assert f"{path}:41:1: error: not valid JSON" in err
    assert "was the file cut short or edited by hand?" in err


def test_schema_errors_are_located(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = evaluate(capsys, tmp_path, "--facts", str(SNAPSHOTS / "memory-pressure.yaml"))
    text = path.read_text()
    path.write_text(text.replace('"rank": 2,', '"rank": "two",', 1))
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if '"rank": "two"' in t)
    code, _, err = explain(capsys, str(path))
    assert code == 1
    index = next(i for i, x in enumerate(json.loads(text)["intents"]) if x.get("rank") == 2)
    assert f'{path}:{line}:15: error: expected an integer, got the string "two" (at $.intents[{index}].rank)' in err


def test_bad_audit_log_lines_are_located(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    doc = load(evaluate(capsys, tmp_path, "--facts", str(SNAPSHOTS / "memory-pressure.yaml")))
    broken = json.loads(json.dumps(doc))
    broken["held"] = [{"target": "x"}]
    log = tmp_path / "audit.jsonl"
    log.write_text(json.dumps(doc) + "\n" + json.dumps(broken) + '\n{"kind": "Evalu\n')
    code, _, err = explain(capsys, str(log))
    assert code == 1
    assert f"{log}:2:" in err and "missing required field 'kind' (at $.held[0])" in err
    assert f"{log}:3:10: error: not valid JSON: Unterminated string" in err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", ":1:1: error: file is empty: there is nothing to explain"),
        ('{"kind": "Simulation"}', ":1:1: error: a Simulation document lists its Evaluations under `ticks`"),
        (
            '{"kind": "Report"}',
            ":1:2: error: expected an Evaluation or a Simulation document, got kind 'Report'",
        ),
        (
            "[1, 2]",
            ":1:1: error: expected an Evaluation or a Simulation document, got a document without `kind`",
        ),
        ('{"kind": "Simulation", "ticks": [{"kind": "Nope"}]}', ":1:35: error: expected an Evaluation"),
    ],
)
def test_unknown_documents_are_located(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "input.json"
    path.write_text(text)
    code, _, err = explain(capsys, str(path))
    assert code == 1
    assert f"{path}{message}" in err, err


def test_a_facts_snapshot_gets_a_hint(capsys: pytest.CaptureFixture[str]) -> None:
    path = SNAPSHOTS / "quiet-node.yaml"
    code, _, err = explain(capsys, str(path))
    assert code == 1
    assert (
        f"{path}:6:1: error: expected an Evaluation or a Simulation document, got kind 'FactsSnapshot'" in err
    )
    assert "hint: this is a facts snapshot; evaluate it first: qosd eval --facts FILE --output json" in err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = explain(capsys, str(tmp_path / "missing.json"))
    assert code == 2 and "does not exist" in err
    code, _, err = explain(capsys, str(tmp_path))
    assert code == 2 and "is a directory" in err


def test_invalid_input_in_json_mode(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{")
    code, out, _ = explain(capsys, str(path), "--output", "json")
    assert code == 1 and json.loads(out)["problems"][0]["line"] == 1


# ---------------------------------------------------------------- units


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0 B"),
        (512, "512 B"),
        (1536, "1.5 KiB"),
        (9620726743.04, "9.0 GiB"),
        (68719476, "65.5 MiB"),
        (-(1 << 30), "-1.0 GiB"),
    ],
)
def test_human_bytes(value: float, text: str) -> None:
    assert human_bytes(value) == text


def test_num_never_uses_exponents() -> None:
    assert [num(v) for v in (82, 82.0, 0.5, 9620726743.04, 1e-7, True)] == [
        "82",
        "82",
        "0.5",
        "9620726743.04",
        "0",
        "True",
    ]


# ---------------------------------------------------------------- cgroup intents

BURST_OVERLAY = """\
apiVersion: qosd.io/v1alpha1
kind: QoSPolicy
metadata: {name: burst-on}
spec:
  priority: 10
  nodeSelector: {matchLabels: {qosd.io/profile: koordinator}}
  rules:
    - {name: cpu-burst, enabled: true}
"""


def cgroup_inputs(tmp_path: Path, observed: dict[str, dict[str, str]] | None = None) -> tuple[Path, Path]:
    """memory-pressure with cgroup paths on its pods (and observed cgroup values), plus an overlay
    that switches on Koordinator's cpu-burst (cpu.cfs_burst_us = 1000% of the CPU limit)."""
    facts = yaml.safe_load((SNAPSHOTS / "memory-pressure.yaml").read_text())
    for w in facts["workloads"]:
        w["cgroupPath"] = f"kubepods/burstable/pod{w['uid']}"
        for c in w["containers"]:  # the burst is per container, the pod's is their sum
            c["cgroupPath"] = f"{w['cgroupPath']}/{c['name']}"
    if observed:
        facts["cgroups"] = observed
    snapshot = tmp_path / "facts.yaml"
    snapshot.write_text(yaml.safe_dump(facts))
    overlay = tmp_path / "burst.yaml"
    overlay.write_text(BURST_OVERLAY)
    return snapshot, overlay


def test_cgroup_writes_and_values_already_in_place(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    snapshot, overlay = cgroup_inputs(tmp_path)
    path = evaluate(capsys, tmp_path, "--facts", str(snapshot), "--rules", str(overlay))
    doc = load(path)
    code, out, _ = explain(capsys, str(path), "--target", "frontend")
    assert code == 0
    assert (
        "- Chose to write 4000000 to kubepods/burstable/podls-1/cpu.cfs_burst_us (pod shop/frontend) because "
        f"{ref(doc, 'cpu-burst')} has no condition (it acts every tick)."
    ) in out.splitlines()

    snapshot, overlay = cgroup_inputs(
        tmp_path, {"kubepods/burstable/podls-1": {"cpu.cfs_burst_us": "4000000"}}
    )
    path = evaluate(capsys, tmp_path, "--facts", str(snapshot), "--rules", str(overlay))
    code, out, _ = explain(capsys, str(path), "--rule", "cpu-burst")
    assert code == 0
    assert (
        "- Kept kubepods/burstable/podls-1/cpu.cfs_burst_us (pod shop/frontend) at 4000000 "
        "(it already holds that value; nothing written)"
    ) in out


# ---------------------------------------------------------------- what the adapters reported


def _result(op: dict[str, Any], status: str, **extra: str) -> dict[str, Any]:
    return {"operation": op, "status": status, "attempts": 1, **extra}


@pytest.mark.parametrize(
    ("status", "extra", "said"),
    [
        ("applied", {"detail": "evicted"}, "- Evicted batch/etl-small ("),
        ("started", {"detail": "SIGTERM sent to 3 process(es)"}, "- Started evicting batch/etl-small ("),
        ("failed", {"error": "survived SIGKILL"}, "- Did not evict batch/etl-small ("),
        ("skipped", {"error": "standalone mode: no Kubernetes API"}, "- Did not evict batch/etl-small ("),
        ("deferred", {"error": "a PodDisruptionBudget"}, "- Did not evict batch/etl-small ("),
        (
            "unchanged",
            {"detail": "no process in cgroup batch/etl-small"},
            "- Chose to evict batch/etl-small (",
        ),
    ],
)
def test_an_audit_record_says_evicted_only_for_what_the_adapter_did(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, status: str, extra: dict[str, str], said: str
) -> None:
    """An audit record carries the adapters' results: "Evicted" only for an eviction reported
    applied; a started one says it is in progress; anything else says it was not done and why."""
    doc = load(evaluate(capsys, tmp_path, "--facts", str(SNAPSHOTS / "memory-pressure.yaml")))
    doc["results"] = [
        _result(op, status if op.get("name") == "etl-small" else "applied", **extra) for op in doc["operations"]
    ]
    log = tmp_path / "audit.jsonl"
    log.write_text(json.dumps(doc) + "\n")
    code, out, _ = explain(capsys, str(log), "--target", "batch/etl-small")
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("- "))
    assert line.startswith(said), line
    if status != "applied":
        assert "Evicted" not in out
        assert next(iter(extra.values())) in line


def test_an_eviction_finished_after_its_tick_is_explained_from_its_own_record(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A standalone eviction ends ticks after it started: the record of that moment has no intent,
    only the result, and says whether the processes are gone."""
    from engine.adapters.result import OperationResult
    from engine.daemon.audit import finished_record
    from engine.evaluate.engine import Engine
    from engine.evaluate.state import EngineState
    from engine.model.operations import EvictPod
    from tests.builders import policy

    op = EvictPod("batch/etl", "batch", "etl", 30, "memory pressure", "numa-memory-pressure")
    gone = OperationResult(
        op, "applied", None, 1, "evicted batch/etl (cgroup batch/etl): its 3 process(es) are gone"
    )
    stuck = OperationResult(
        EvictPod("batch/k", "batch", "k", 30, "r", "numa-memory-pressure"),
        "failed",
        "1 process(es) still there",
    )
    log = tmp_path / "audit.jsonl"
    engine = Engine(policy("classes:\n  - name: be\n    match: [{labels: {tier: be}}]\n"), generation=3)
    log.write_text(json.dumps(finished_record([gone, stuck], EngineState(), engine, 1.7e9)) + "\n")
    code, out, _ = explain(capsys, str(log))
    assert code == 0, out
    assert (
        "- Evicted batch/etl (rule numa-memory-pressure, started in an earlier tick): evicted batch/etl "
        "(cgroup batch/etl): its 3 process(es) are gone." in out
    )
    assert (
        "- Did not evict batch/k (rule numa-memory-pressure, started in an earlier tick): failed: "
        "1 process(es) still there." in out
    )
