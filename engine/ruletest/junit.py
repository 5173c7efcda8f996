"""``qosd test --junit FILE``: the results as a JUnit XML report, the format CI systems (GitLab,
Jenkins, GitHub test reporters) show per test case.

One ``testsuite`` per RuleTest suite, one ``testcase`` per case. A failed case carries ``failure``,
a case whose policy could not be built ``error``, an expected failure (xfail) is ``skipped`` with its
reason, and an xfail that passed is a ``failure``: the marker must go. Suites that could not be read
at all become one ``testsuite`` named ``qosd test`` whose cases are the located problems, so a CI
page shows why nothing ran.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from engine.config.errors import Problem
from engine.ruletest.runner import CaseResult
from engine.ruletest.summary import reason


def _details(r: CaseResult) -> str:
    lines = [f"{r.location}: case {r.name}"]
    if r.anchor is not None:
        lines.append(f"anchor: {r.anchor}")
    for f in r.failures:
        where = f"{f.location}: " if f.location.line else ""
        lines.append(f"{where}{f.step + ': ' if f.step else ''}{f.message}")
        lines.extend(f"  {n}" for n in f.notes)
    lines.extend(p.format() for p in r.problems)
    return "\n".join(lines)


def _case(parent: ET.Element, r: CaseResult) -> None:
    case = ET.SubElement(
        parent,
        "testcase",
        {"name": r.name, "classname": r.suite, "file": r.source, "line": str(r.location.line or 0)},
    )
    if r.anchor is not None:
        props = ET.SubElement(case, "properties")
        for key, value in r.anchor.to_dict().items():
            if value is not None:
                ET.SubElement(props, "property", {"name": f"anchor.{key}", "value": value})
    if r.status == "fail" or r.status == "xpass":
        ET.SubElement(case, "failure", {"message": reason(r), "type": r.status}).text = _details(r)
    elif r.status == "error":
        ET.SubElement(case, "error", {"message": reason(r), "type": "error"}).text = _details(r)
    elif r.status == "xfail":
        ET.SubElement(case, "skipped", {"message": reason(r)}).text = _details(r)


def _totals(element: ET.Element, results: Sequence[CaseResult]) -> None:
    element.set("tests", str(len(results)))
    element.set("failures", str(sum(r.status in ("fail", "xpass") for r in results)))
    element.set("errors", str(sum(r.status == "error" for r in results)))
    element.set("skipped", str(sum(r.status == "xfail" for r in results)))


def junit_xml(results: Sequence[CaseResult]) -> ET.ElementTree:
    root = ET.Element("testsuites", {"name": "qosd test"})
    _totals(root, results)
    groups: dict[tuple[str, str], list[CaseResult]] = {}
    for r in results:
        groups.setdefault((r.source, r.suite), []).append(r)
    for (source, suite), rs in groups.items():
        element = ET.SubElement(root, "testsuite", {"name": suite, "file": source})
        _totals(element, rs)
        for r in rs:
            _case(element, r)
    return ET.ElementTree(root)


def junit_problems(problems: Sequence[Problem]) -> ET.ElementTree:
    """The report when the suites themselves are malformed: each located problem an errored case."""
    root = ET.Element("testsuites", {"name": "qosd test", "tests": str(len(problems))})
    root.set("failures", "0")
    root.set("errors", str(len(problems)))
    root.set("skipped", "0")
    suite = ET.SubElement(root, "testsuite", {"name": "qosd test", "tests": str(len(problems))})
    suite.set("failures", "0")
    suite.set("errors", str(len(problems)))
    suite.set("skipped", "0")
    for p in problems:
        case = ET.SubElement(
            suite,
            "testcase",
            {"name": str(p.location), "classname": "suite files", "file": p.location.source},
        )
        ET.SubElement(case, "error", {"message": p.message, "type": "invalid suite"}).text = p.format()
    return ET.ElementTree(root)


def write_junit(tree: ET.ElementTree, path: Path) -> None:
    ET.indent(tree)
    tree.write(path, encoding="utf-8", xml_declaration=True)
