"""The YAML loader: duplicate keys, YAML 1.2 scalars, tags, syntax errors, undecodable bytes, control
characters, nesting and size limits, all located at the line:col of the fault."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.config.errors import PolicyError
from engine.config.load import MAX_DEPTH, MAX_FILE_BYTES, MAX_NODES, parse_documents, read_file


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


def test_non_utf8_file_is_a_located_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"a: caf\xe9\n")
    with pytest.raises(PolicyError) as info:
        read_file(path)
    assert "not UTF-8" in info.value.problems[0].message


# ------------------------------------------------------------------ faults located where they are (issue 14, defect 9)

HEAD = "apiVersion: qosd.io/v1alpha1\nkind: QoSPolicy\nmetadata: {name: t}\nspec:\n  priority: 1\n"


def nested_flow(opener: str, closer: str, levels: int) -> str:
    """``x: {a: {a: ...}}`` (or ``[[...]]``) under spec, on line 6; ``x`` is at depth 2."""
    return HEAD + "  x: " + opener * levels + "1" + closer * levels + "\n"


# The first node deeper than MAX_DEPTH: in "  x: {a: {a: ...", the k-th "{" (at column 6 + 4(k-1))
# opens the mapping at depth k+1, whose key sits one column later at depth k+2.
DEEP_MAPPING_COLUMN = 6 + 4 * (MAX_DEPTH - 2) + 1
# In "  x: [[[...", the k-th "[" (at column 5 + k) is at depth k+1.
DEEP_SEQUENCE_COLUMN = 5 + MAX_DEPTH


def located(problem: Any) -> tuple[str, int, int]:
    return (problem.location.source, problem.location.line, problem.location.column)


@pytest.mark.parametrize(
    ("raw", "line", "column", "words"),
    [
        pytest.param(
            HEAD.encode() + b"  mode: aud\xffit\n", 6, 12, ("not UTF-8", "0xff"), id="byte-later-in-file"
        ),
        pytest.param(b"a: 1\nb: caf\xe9\n", 2, 7, ("not UTF-8", "0xe9"), id="latin1-e-acute"),
        # Columns count characters, as an editor does: two 2-byte characters before the bad byte.
        pytest.param("a: 1\nb: éé".encode() + b" \xc3(\n", 2, 7, ("not UTF-8", "0xc3"), id="after-multibyte"),
        pytest.param(b"a: 1\r\nb: 2\r\nc: \x80\r\n", 3, 4, ("not UTF-8", "0x80"), id="crlf-lines"),
        pytest.param(b"a: 1\nb: \xed\xa0\x80\n", 2, 4, ("not UTF-8", "0xed"), id="encoded-surrogate"),
    ],
)
def test_undecodable_bytes_are_located_at_their_line_and_column(
    tmp_path: Path, raw: bytes, line: int, column: int, words: tuple[str, ...]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(raw)
    with pytest.raises(PolicyError) as info:
        read_file(path)
    (problem,) = info.value.problems
    assert located(problem) == (str(path), line, column), problem.format()
    for word in words:
        assert word in problem.message
    assert "UTF-8" in problem.hint


@pytest.mark.parametrize(
    ("text", "line", "column", "code"),
    [
        pytest.param(HEAD + "  mode: aud\x01it\n", 6, 12, "U+0001", id="plain-scalar"),
        pytest.param(HEAD + '  mode: "aud\x07it"\n', 6, 13, "U+0007", id="inside-double-quotes"),
        pytest.param("a: 1\nb: [x, y\x1b[0m]\n", 2, 9, "U+001B", id="terminal-escape"),
        pytest.param("a: é\x7f\n", 1, 5, "U+007F", id="delete-after-multibyte"),
        pytest.param("a: 1\n# comment \x0c\n", 2, 11, "U+000C", id="form-feed-in-comment"),
        pytest.param("a: x\x85y\x9b\n", 1, 7, "U+009B", id="c1-control"),
        pytest.param("a: \ufffe\n", 1, 4, "U+FFFE", id="noncharacter"),
    ],
)
def test_control_characters_are_located(text: str, line: int, column: int, code: str) -> None:
    with pytest.raises(PolicyError) as info:
        parse_documents(text, "x.yaml")
    (problem,) = info.value.problems
    assert located(problem) == ("x.yaml", line, column), problem.format()
    assert code in problem.message and "not allowed" in problem.message
    assert "escape" in problem.hint


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("\ufeffa: 1\n", id="byte-order-mark"),
        pytest.param("a: 'x\ty'\n", id="tab"),
        pytest.param("a: 1\r\nb: 2\r\n", id="crlf"),
        pytest.param("a: ✓ 日本 \U0001f600\n", id="non-ascii"),
    ],
)
def test_printable_text_is_not_refused(text: str) -> None:
    (doc,) = parse_documents(text, "x.yaml")
    assert doc.data["a"]


@pytest.mark.parametrize(
    ("text", "column"),
    [
        pytest.param(nested_flow("{a: ", "}", 500), DEEP_MAPPING_COLUMN, id="500-flow-mappings"),
        pytest.param(nested_flow("{a: ", "}", 5000), DEEP_MAPPING_COLUMN, id="5000-flow-mappings"),
        pytest.param(nested_flow("[", "]", 500), DEEP_SEQUENCE_COLUMN, id="500-flow-sequences"),
        pytest.param(nested_flow("[", "]", 100_000), DEEP_SEQUENCE_COLUMN, id="100000-flow-sequences"),
        pytest.param(nested_flow("{a: ", "}", MAX_DEPTH), DEEP_MAPPING_COLUMN, id="just-over-the-limit"),
    ],
)
def test_deep_nesting_is_located_at_the_first_node_too_deep(text: str, column: int) -> None:
    with pytest.raises(PolicyError) as info:
        parse_documents(text, "deep.yaml")
    (problem,) = info.value.problems
    assert located(problem) == ("deep.yaml", 6, column), problem.format()
    assert f"deeper than {MAX_DEPTH} levels" in problem.message
    assert problem.hint


def test_block_nesting_is_located_on_its_line() -> None:
    lines = [f"{'  ' * i}k{i}:" for i in range(100)]
    text = "\n".join(lines) + " 1\n"
    with pytest.raises(PolicyError) as info:
        parse_documents(text, "deep.yaml")
    (problem,) = info.value.problems
    # The key k{i} (line i + 1, column 2i + 1) is at depth i + 1: k{MAX_DEPTH} is the first too deep.
    assert located(problem) == ("deep.yaml", MAX_DEPTH + 1, 2 * MAX_DEPTH + 1), problem.format()


def test_nesting_at_the_limit_is_accepted() -> None:
    (doc,) = parse_documents(nested_flow("{a: ", "}", MAX_DEPTH - 3), "deep.yaml")
    value = doc.data["spec"]["x"]
    for _ in range(MAX_DEPTH - 3):
        value = value["a"]
    assert value == 1


def test_aliases_that_nest_too_deep_are_located() -> None:
    """An alias shares its anchor when composed; the nesting appears only when it is expanded."""
    inner = "{a: " * 40 + "1" + "}" * 40
    text = f"base: &b {inner}\nouter: {{{'a: {' * 30}x: *b{'}' * 30}}}\n"
    with pytest.raises(PolicyError) as info:
        parse_documents(text, "alias.yaml")
    (problem,) = info.value.problems
    assert problem.location.line == 1, "the expanded node is the anchor's, on line 1"
    assert f"deeper than {MAX_DEPTH} levels" in problem.message


def test_a_huge_flat_list_is_stopped_at_the_value_over_the_limit() -> None:
    text = "a: [" + "1, " * (MAX_NODES + 10) + "1]\n"
    with pytest.raises(PolicyError) as info:
        parse_documents(text, "flat.yaml")
    (problem,) = info.value.problems
    # The root mapping, the key a and its list are three values; then "1, " per item from column 5.
    assert located(problem) == ("flat.yaml", 1, 5 + 3 * (MAX_NODES - 3)), problem.format()
    assert f"more than {MAX_NODES} values" in problem.message


def test_a_file_larger_than_any_configmap_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "dump.yaml"
    path.write_bytes(b"a: '" + b"x" * MAX_FILE_BYTES + b"'\n")
    with pytest.raises(PolicyError) as info:
        read_file(path)
    (problem,) = info.value.problems
    assert problem.location.source == str(path)
    assert "larger than" in problem.message and "MiB" in problem.message
