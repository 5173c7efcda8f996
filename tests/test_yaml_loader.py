"""The YAML loader: duplicate keys, YAML 1.2 scalars, tags, syntax errors, all located at line:col."""

from __future__ import annotations

import pytest

from engine.config.errors import PolicyError
from engine.config.load import parse_documents


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: off\nb: yes\nc: NO\n", {"a": "off", "b": "yes", "c": "NO"}),
        ("a: true\nb: False\n", {"a": True, "b": False}),
        ("a: 1e3\nb: 1.5\nc: -2\n", {"a": 1000.0, "b": 1.5, "c": -2}),
        ("a: 017\nb: 0x1f\nc: 0o17\n", {"a": 17, "b": 31, "c": 15}),
        ("a: 2024-01-01\n", {"a": "2024-01-01"}),
        ("a: ~\nb: null\n", {"a": None, "b": None}),
        ("a: '70'\nb: \"80\"\n", {"a": "70", "b": "80"}),
        ("base: &b {x: 1, y: 2}\nc: {<<: *b, y: 3}\n", {"base": {"x": 1, "y": 2}, "c": {"x": 1, "y": 3}}),
    ],
)
def test_scalars_follow_yaml_core_schema(text: str, expected: dict[str, object]) -> None:
    """YAML 1.1's surprises (off -> False, 1e3 -> str, 017 -> 15, dates) do not reach rules."""
    (doc,) = parse_documents(text, "x.yaml")
    assert doc.data == expected


@pytest.mark.parametrize(
    ("text", "message", "line", "col"),
    [
        ("a: 1\na: 2\n", "duplicate key 'a'", 2, 1),
        ("spec:\n  rules:\n    - name: x\n      name: y\n", "duplicate key 'name'", 4, 7),
        ("a: [1, 2\nb: 3\n", "YAML syntax error", 2, 2),
        ("a:\n\t- 1\n", "YAML syntax error", 2, 1),
        ("a: !!binary aGk=\n", "YAML tag tag:yaml.org,2002:binary is not allowed", 1, 4),
        ("a: !!python/object:os.system {}\n", "tag:yaml.org,2002:python/object:os.system", 1, 4),
        ("a: .nan\n", "'.nan' is not a finite number", 1, 4),
        ("a: -.inf\n", "'-.inf' is not a finite number", 1, 4),
        ("? [1, 2]\n: x\n", "mapping keys must be plain strings", 1, 3),
        ("a: {<<: [1]}\n", "a merge key (<<) must refer to a mapping", 1, 10),
    ],
)
def test_bad_yaml_is_located(text: str, message: str, line: int, col: int) -> None:
    with pytest.raises(PolicyError) as info:
        parse_documents(text, "x.yaml")
    problem = info.value.problems[0]
    assert message in problem.message
    assert (problem.location.source, problem.location.line, problem.location.column) == ("x.yaml", line, col)


def test_all_problems_of_a_file_are_reported_together() -> None:
    with pytest.raises(PolicyError) as info:
        parse_documents("a: 1\na: 2\n---\nb: .nan\nc: !!set {}\n", "x.yaml")
    assert [p.location.line for p in info.value.problems] == [2, 4, 5]


def test_alias_bomb_is_refused_not_expanded() -> None:
    """A billion-laughs document is refused with a located error instead of eating memory."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        prev = f"*a{i - 1}"
        lines.append(f"a{i}: &a{i} [{', '.join([prev] * 10)}]")
    with pytest.raises(PolicyError) as info:
        parse_documents("\n".join(lines) + "\n", "bomb.yaml")
    assert "more than" in info.value.problems[0].message


def test_deep_nesting_is_refused() -> None:
    with pytest.raises(PolicyError) as info:
        parse_documents("a: " + "[" * 100 + "]" * 100 + "\n", "deep.yaml")
    assert "deeper than" in info.value.problems[0].message


def test_marks_point_at_keys_and_values() -> None:
    (doc,) = parse_documents("spec:\n  rules:\n    - name: r1\n      for: 30s\n", "x.yaml")
    assert doc.marks.values[("spec", "rules", 0, "for")] == (4, 12)
    assert doc.marks.keys[("spec", "rules", 0, "for")] == (4, 7)
    assert doc.locate(("spec", "rules", 0, "missing")).line == 3


def test_empty_documents_are_skipped() -> None:
    docs = parse_documents("---\n---\na: 1\n---\n", "x.yaml")
    assert [d.data for d in docs] == [{"a": 1}]


def test_non_utf8_file_is_a_located_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from engine.config.load import read_file

    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"a: caf\xe9\n")
    with pytest.raises(PolicyError) as info:
        read_file(path)
    assert "not UTF-8" in info.value.problems[0].message
