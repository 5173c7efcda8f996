"""Policies that fight each other (issue 18): ``qosd validate`` warns, ``--strict`` fails.

Each case is an overlay on the bundled profiles, validated as a user would (``qosd validate FILE``
with the built-in layer), and the warnings it must (or must not) produce. The fill levels follow
from the bundled numbers on validate's reference node (64 GiB, 16 CPUs):
- Koordinator publishes batch memory up to reclaimThresholdPercent 65% and batch CPU up to 60%;
- Katalyst's headroom publishes capacity - reservedForAllocate 5Gi = 59 of 64 GiB, 92%.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.cli import main
from engine.config.lints import fill_percent
from engine.config.pipeline import REFERENCE_NODE, build_policy, load_documents
from tests.conftest import policy_text
from tests.qosdcli import qosd_in_process

ROOT = Path(__file__).resolve().parent.parent

KOORD = "nodeSelector: {matchLabels: {qosd.io/profile: koordinator}}"
KATALYST = "nodeSelector: {matchExpressions: [{key: qosd.io/profile, operator: NotIn, values: [koordinator]}]}"
BE_EVICT_60 = "rules: [{name: be-memory-evict, when: {node.memory.usage_percent: {gte: 60}}, then: {evict: {release: {lowerPercent: 58}}}}]"
KATALYST_EVICT_70 = (
    "rules: [{name: rc-evict, when: {node.memory.usage_percent: {gte: 70}},"
    " then: {evict: {victims: {classes: [reclaimed_cores]}, release: {lowerPercent: 65}}}}]"
)
SUPPRESS_55 = "rules: [{name: be-cpu-suppress, then: {suppress: {thresholdPercent: 55}}}]"


def flapping(clear: str, when: str = "gte: 80") -> str:
    return (
        "rules: [{name: hot, when: {node.cpu.usage_percent: {" + when + "}}, clearWhen: "
        "{node.cpu.usage_percent: {" + clear + "}}, then: {taint: {key: example.com/hot, effect: NoSchedule}}}]"
    )


# (case, spec lines of the overlay, the lint expected: a message fragment, or None for no warning)
CASES: list[tuple[str, list[str], str | None]] = [
    ("koordinator evicts at 60 under a 65% publish", [KOORD, BE_EVICT_60], "admit/evict loop"),
    (
        "an eviction of a class that is not reclaimed is no admit/evict loop",
        [KATALYST, KATALYST_EVICT_70.replace("[reclaimed_cores]", "[shared_cores]")],
        None,
    ),
    (
        "koordinator evicts at 60 with the publish lowered to 55",
        [KOORD, "reclaim: {memory: {reclaimThresholdPercent: 55}}", BE_EVICT_60],
        None,
    ),
    (
        "koordinator publish raised to 75 under the bundled 70% eviction",
        [KOORD, "reclaim: {memory: {reclaimThresholdPercent: 75}}"],
        "fill the node to 75%",
    ),
    ("katalyst headroom (92%) under an eviction at 70", [KATALYST, KATALYST_EVICT_70], "fill the node to 92%"),
    (
        "katalyst headroom with 24Gi kept back (62%)",
        [KATALYST, "reclaim: {memory: {headroom: {reservedForAllocate: 24Gi}}}", KATALYST_EVICT_70],
        None,
    ),
    (
        "katalyst eviction at 70 in audit mode evicts nothing",
        [KATALYST, KATALYST_EVICT_70.replace("name: rc-evict,", "name: rc-evict, mode: audit,")],
        None,
    ),
    (
        "publishing switched off",
        [KATALYST, "reclaim: {enabled: false}", KATALYST_EVICT_70],
        None,
    ),
    ("koordinator suppress at 55 under a 60% cpu publish", [KOORD, SUPPRESS_55], "suppress then takes away"),
    (
        "koordinator suppress at 55 with the cpu publish at 50",
        [KOORD, "reclaim: {cpu: {reclaimThresholdPercent: 50}}", SUPPRESS_55],
        None,
    ),
    ("clearWhen lte 85 overlaps when gte 80", [flapping("lte: 85")], "fires, clears on the next tick"),
    ("clearWhen lte 80 meets when gte 80 at 80", [flapping("lte: 80")], "fires, clears on the next tick"),
    ("clearWhen lt 80 is disjoint from gte 80", [flapping("lt: 80")], None),
    ("clearWhen lt 75 is disjoint", [flapping("lt: 75")], None),
    ("clearWhen gte 90 holds inside when gte 80", [flapping("gte: 90")], "fires, clears on the next tick"),
    ("clearWhen on another window is another signal", [flapping("lte: 85, window: 1m")], None),
]


@pytest.mark.parametrize(("case", "spec", "expected"), CASES, ids=[c[0] for c in CASES])
def test_lint_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, spec: list[str], expected: str | None
) -> None:
    f = tmp_path / "overlay.yaml"
    f.write_text(policy_text("\n".join(["priority: 10", *spec]), name="overlay"))
    code = main(["validate", "-o", "json", str(f)])
    report = json.loads(capsys.readouterr().out)
    warnings = [p for p in report["problems"] if p["severity"] == "warning"]
    errors = [p for p in report["problems"] if p["severity"] == "error"]
    assert not errors, errors
    assert code == 0 and report["valid"] is True
    if expected is None:
        assert warnings == [], warnings
    else:
        assert len(warnings) == 1, warnings
        assert expected in warnings[0]["message"], warnings[0]["message"]
        assert warnings[0]["hint"]


def test_strict_turns_warnings_into_errors(tmp_path: Path) -> None:
    f = tmp_path / "overlay.yaml"
    f.write_text(policy_text("\n".join(["priority: 10", KOORD, BE_EVICT_60]), name="overlay"))
    plain = qosd_in_process("validate", str(f))
    strict = qosd_in_process("validate", str(f), "--strict")
    assert plain.returncode == 0, plain.stderr
    assert f"{f}:" in plain.stderr and ": warning: rule 'be-memory-evict' evicts at" in plain.stderr
    assert "on: profile koordinator" in plain.stderr
    assert plain.stdout.startswith("1 warning in ")
    assert strict.returncode == 1
    assert ": error: rule 'be-memory-evict' evicts at" in strict.stderr
    assert strict.stderr.rstrip().endswith("from 3 file(s)") and "1 error in " in strict.stderr


def test_the_bundled_and_example_policies_have_no_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    for paths in ([], ["rules/examples"], ["examples/policies"], ["examples/deploy/base/rules", "examples/deploy/canary-policy.yaml"]):
        code = main(["validate", "--strict", *[str(ROOT / p) for p in paths]])
        _, err = capsys.readouterr()
        assert code == 0, err


@pytest.mark.parametrize(
    ("profile", "resource", "percent"),
    [("koordinator", "memory", 65.0), ("koordinator", "cpu", 60.0), ("katalyst", "memory", 100 * 59 / 64), ("katalyst", "cpu", 75.0)],
)
def test_fill_percent_of_the_bundled_profiles(profile: str, resource: str, percent: float) -> None:
    """Katalyst's cpu headroom keeps reservedForAllocate 4 of 16 cores back: 75%."""
    node = REFERENCE_NODE.with_labels({"qosd.io/profile": profile})
    policy = build_policy(load_documents([]), node)
    res = getattr(policy.reclaim, resource)
    assert fill_percent(res, resource, node) == pytest.approx(percent)
