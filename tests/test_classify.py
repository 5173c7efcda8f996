"""Classification and enhancements, with Katalyst's parsing and validity rules (katalyst.md §1.3-1.4)."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest

from engine.config.pipeline import REFERENCE_NODE, build_policy, load_documents
from engine.config.policy import EFFECTS, Effects
from engine.evaluate.classify import Classifier
from tests.builders import pod

MEM = "katalyst.kubewharf.io/memory_enhancement"
CPU = "katalyst.kubewharf.io/cpu_enhancement"
QOS = "katalyst.kubewharf.io/qos_level"


@pytest.fixture(scope="module")
def katalyst() -> Classifier:
    return Classifier(build_policy(load_documents([]), REFERENCE_NODE))


@pytest.fixture(scope="module")
def koordinator() -> Classifier:
    return Classifier(
        build_policy(load_documents([]), REFERENCE_NODE.with_labels({"qosd.io/profile": "koordinator"}))
    )


@pytest.mark.parametrize(
    ("annotations", "labels", "qos", "expected"),
    [
        (
            {QOS: "dedicated_cores", MEM: json.dumps({"numa_binding": "true"})},
            {},
            "Guaranteed",
            "dedicated_cores",
        ),
        ({QOS: "reclaimed_cores"}, {}, "BestEffort", "reclaimed_cores"),
        ({QOS: "system_cores"}, {}, "Burstable", "system_cores"),
        ({}, {}, "Burstable", "shared_cores"),  # no level: Katalyst defaults to shared_cores
        ({}, {"koordinator.sh/qosClass": "BE"}, "BestEffort", "reclaimed_cores"),  # both dialects are read
        (
            {QOS: "shared_cores"},
            {"koordinator.sh/qosClass": "BE"},
            "Burstable",
            "shared_cores",
        ),  # Katalyst wins
    ],
)
def test_katalyst_levels(
    katalyst: Classifier, annotations: dict[str, str], labels: dict[str, str], qos: str, expected: str
) -> None:
    assert katalyst.classify(pod("p", annotations=annotations, labels=labels, qos=qos)).class_name == expected


@pytest.mark.parametrize(
    ("labels", "qos", "priority", "expected"),
    [
        ({"koordinator.sh/qosClass": "LSE"}, "Guaranteed", 9500, "LSE"),
        ({"koordinator.sh/qosClass": "LSR"}, "Guaranteed", 9500, "LSR"),
        ({}, "Guaranteed", 9500, "LSR"),  # Guaranteed without a label -> LSR (QoSClassForGuaranteed)
        ({}, "Burstable", 9500, "LS"),
        ({}, "BestEffort", None, "BE"),
        ({"koordinator.sh/qosClass": "SYSTEM"}, "Burstable", 0, "SYSTEM"),
    ],
)
def test_koordinator_classes(
    koordinator: Classifier, labels: dict[str, str], qos: str, priority: int | None, expected: str
) -> None:
    assert koordinator.classify(pod("p", labels=labels, qos=qos, priority=priority)).class_name == expected


def test_dedicated_without_numa_binding_is_reported_not_fatal(katalyst: Classifier) -> None:
    c = katalyst.classify(pod("p", annotations={QOS: "dedicated_cores"}, qos="Guaranteed"))
    assert c.class_name == "dedicated_cores"
    assert any("requires enhancement numa_binding" in e for e in c.errors)


def test_numa_exclusive_conflicts(katalyst: Classifier) -> None:
    enh = {
        MEM: json.dumps({"numa_binding": "true", "numa_exclusive": "true"}),
        CPU: json.dumps({"full_pcpus_pairing": "true"}),
    }
    c = katalyst.classify(pod("p", annotations={QOS: "dedicated_cores", **enh}, qos="Guaranteed"))
    assert c.enhancements["numa_exclusive"] is True
    assert any("full_pcpus_pairing" in e and "numa_exclusive" in e for e in c.errors)


@pytest.mark.parametrize(
    ("level", "raw", "expected"),
    [
        # OOM priority is clamped into the level's band (katalyst.md §1.3).
        ("reclaimed_cores", "50", -1),
        ("reclaimed_cores", "-150", -100),
        ("shared_cores", "42", 42),
        ("shared_cores", "250", 99),
        ("dedicated_cores", "5", 100),
    ],
)
def test_oom_priority_is_clamped_per_level(katalyst: Classifier, level: str, raw: str, expected: int) -> None:
    ann = {QOS: level, MEM: json.dumps({"oom_priority": raw, "numa_binding": "true"})}
    c = katalyst.classify(pod("p", annotations=ann))
    assert c.effects.oom_priority == expected


def test_unparsable_enhancement_json_is_treated_as_empty(katalyst: Classifier) -> None:
    c = katalyst.classify(pod("p", annotations={QOS: "shared_cores", MEM: "{not json"}))
    assert c.enhancements.get("numa_binding") is None and c.errors == ()


def test_classification_is_cached_per_workload_object(katalyst: Classifier) -> None:
    w = pod("p", annotations={QOS: "reclaimed_cores"})
    assert katalyst.classify(w) is katalyst.classify(w)
    assert katalyst.classify(pod("p", annotations={QOS: "reclaimed_cores"})) is not katalyst.classify(w)


def test_every_effect_the_schema_accepts_has_a_typed_field() -> None:
    """Tick code reads ``Classified.effects`` by field: each ``effect.set`` name the schema accepts
    maps to exactly one field of ``Effects``, and every field is some effect's."""
    schema = json.loads(
        (Path(__file__).resolve().parent.parent / "schemas/qospolicy.schema.json").read_text()
    )
    names = schema["$defs"]["enhancement"]["properties"]["effect"]["properties"]["set"]["enum"]
    assert sorted(EFFECTS) == sorted(names)
    assert sorted(f for f, _types in EFFECTS.values()) == sorted(f.name for f in fields(Effects))


@pytest.mark.parametrize(
    ("values", "field", "want"),
    [
        ({}, "numa_binding", False),
        ({"cpu.numaBinding": True}, "numa_binding", True),
        ({}, "burst_percent", None),
        ({"cpu.burstPercent": 150}, "burst_percent", 150.0),
        ({"oomPriority": 42.0}, "oom_priority", 42),
        ({"cpu.numaNumber": 2}, "numa_number", 2),
        ({"cpu.pool": "dedicated"}, "pool", "dedicated"),
        ({"eviction.rssOveruseThreshold": 1}, "rss_overuse_threshold", 1.0),
    ],
)
def test_effects_are_typed_once(values: dict[str, object], field: str, want: object) -> None:
    got = getattr(Effects.of(values), field)
    assert got == want and type(got) is type(want)
