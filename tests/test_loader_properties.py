"""Property tests: whatever YAML a user writes, the rule pipeline answers with located problems.

(a) random YAML-ish text, (b) random mutations of the bundled policies, (c) determinism. The only
exception allowed out of ``load_documents`` + ``validate`` (+ ``build_policy``) is ``PolicyError``,
and every problem names the file and a line.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import resource
import subprocess
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from engine.config.errors import PolicyError, Problem
from engine.config.load import parse_documents, read_file
from engine.config.pipeline import REFERENCE_NODE, build_policy, load_documents, validate
from engine.model.factnames import registry
from engine.model.node import NodeInfo
from engine.resources import bundled_policy_files

REPO = Path(__file__).resolve().parent.parent
RULES = REPO / "rules"
T = TypeVar("T")

# Used when rules/ holds no policy yet: a realistic document touching every section.
INLINE_POLICY = """\
apiVersion: qosd.io/v1alpha1
kind: QoSPolicy
metadata: {name: colocation-default}
spec:
  priority: 0
  nodeSelector: {matchLabels: {qosd.io/colocation: "true"}}
  mode: enforce
  classes:
    - name: dedicated_cores
      match:
        - annotations: {katalyst.kubewharf.io/qos_level: dedicated_cores}
        - labels: {koordinator.sh/qosClass: LSE}
      cpu: {policy: exclusive, requires: [numa_binding]}
      protected: true
    - name: shared_cores
      match: [{annotations: {katalyst.kubewharf.io/qos_level: shared_cores}}]
      cpu: {policy: shared, pool: share}
    - name: reclaimed_cores
      match: [{annotations: {katalyst.kubewharf.io/qos_level: reclaimed_cores}}, {labels: {koordinator.sh/qosClass: BE}}]
      cpu: {policy: reclaimed, pool: reclaim, shares: 2, idle: true}
      resctrl: {l3Percent: [0, 30], mbPercent: 100}
  enhancements:
    - name: numa_binding
      from: {jsonAnnotation: katalyst.kubewharf.io/memory_enhancement, key: numa_binding}
      equals: "true"
      appliesTo: [dedicated_cores, shared_cores]
  pools:
    - {name: reserve, cpus: {count: 2}}
    - {name: share, size: {fromRequests: 1.0, min: 4}}
    - {name: reclaim, size: {remainder: true, min: "{{ [4, node.numa_count] | max }}"}}
  reclaim:
    cpu: {policy: usage, reclaimThresholdPercent: 60, publishAs: resource.katalyst.kubewharf.io/reclaimed_millicpu}
    memory: {policy: usage, reclaimThresholdPercent: 65, publishAs: resource.katalyst.kubewharf.io/reclaimed_memory}
    degradeAfter: 15m
  rules:
    - name: be-memory-evict
      when: {all: [{node.memory.usage_percent: {gte: 70}}, {class.reclaimed_cores.pods: {gt: 0}}]}
      for: 0s
      then:
        evict: {victims: {classes: [reclaimed_cores]}, orderBy: [priority, -memory.usage],
                release: {lowerPercent: 68}, cooldown: 4s, maxPerRound: 3}
    - name: be-cpu-suppress
      when: {node.cpu.usage_percent: {gte: 65, window: 1m, agg: avg, hysteresis: 5}}
      clearWhen: {node.cpu.usage_percent: {lt: 55}}
      then: {suppress: {class: reclaimed_cores, policy: cpuset, thresholdPercent: 65}}
"""


def bundled_documents() -> list[tuple[str, Any]]:
    """(file name, document) for every YAML document under rules/, read by qosd's own loader (so
    the data is what qosd sees: YAML 1.2 scalars), plus the inline policy above.

    A bundled file that does not parse fails here, at collection: it is shipped, so it is a bug.
    """
    out = [
        (str(path.relative_to(REPO)), d.data)
        for path in sorted(RULES.rglob("*.y*ml"))
        for d in read_file(path)
    ]
    return [*out, ("inline", parse_documents(INLINE_POLICY, "inline")[0].data)]


# The built-in layer validates on its own; the examples are overlays of it (they name its rules).
BUILTIN_SOURCES = frozenset(str(f.relative_to(REPO)) for f in bundled_policy_files()) | {"inline"}
BASE_DOCUMENTS = bundled_documents()


# ------------------------------------------------------------------ assertions


def assert_located(problems: Sequence[Problem], source: str) -> None:
    assert problems, "a PolicyError or a failed validate must carry at least one problem"
    for p in problems:
        assert isinstance(p, Problem)
        assert p.message.strip(), f"empty message at {p.location}"
        assert p.location.source == source, p.format()
        assert p.location.line >= 1, f"problem without a line: {p.format()}"
        assert p.location.column >= 1, f"problem without a column: {p.format()}"


def selected_node(data: Any) -> NodeInfo:
    """REFERENCE_NODE with labels that a document's nodeSelector asks for (so the document applies)."""
    spec = data.get("spec") if isinstance(data, dict) else None
    sel = spec.get("nodeSelector") if isinstance(spec, dict) else None
    labels: dict[str, str] = {}
    if isinstance(sel, dict):
        match = sel.get("matchLabels")
        if isinstance(match, dict):
            labels.update({str(k): str(v) for k, v in match.items()})
        for e in sel.get("matchExpressions") or [] if isinstance(sel.get("matchExpressions"), list) else []:
            if (
                isinstance(e, dict)
                and e.get("operator") == "In"
                and isinstance(e.get("values"), list)
                and e["values"]
            ):
                labels[str(e.get("key"))] = str(e["values"][0])
    return REFERENCE_NODE.with_labels(labels)


def run_pipeline(path: Path, node: NodeInfo | None = None, builtin: bool = False) -> list[Problem]:
    """load + validate (+ build_policy when valid): problems, or [] when a policy came out.

    Any exception other than PolicyError propagates and fails the test. With ``builtin`` the file
    is checked over the built-in layer, as ``qosd validate FILE`` does.
    """
    source = str(path)
    if builtin:
        try:
            docs = load_documents([path], builtin=True)
        except PolicyError as exc:
            return list(exc.problems)
        problems = validate(docs)
        if not problems and node is not None:
            try:
                build_policy(docs, node)
            except PolicyError as exc:
                problems = list(exc.problems)
        return problems
    try:
        docs = load_documents([path], builtin=False)
    except PolicyError as exc:
        assert_located(exc.problems, source)
        return list(exc.problems)
    problems = validate(docs)
    if problems:
        assert_located(problems, source)
        return problems
    if node is None or not docs:
        return []
    try:
        build_policy(docs, node)
    except PolicyError as exc:
        # The one problem that is about the node, not the file: the selector excludes it.
        located = [p for p in exc.problems if not p.message.startswith("no policy document applies")]
        if located:
            assert_located(located, source)
        return list(exc.problems)
    return []


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


# ------------------------------------------------------------------ (a) random YAML text

FRAGMENTS = [
    "\n",
    "\n",
    "\n",
    " ",
    "  ",
    "    ",
    "\t",
    "- ",
    "-",
    ": ",
    ":",
    "key",
    "a",
    "b",
    "name: x",
    "spec",
    "rules",
    "apiVersion: qosd.io/v1alpha1\n",
    "kind: QoSPolicy\n",
    "metadata: {name: x}\n",
    "spec:\n",
    "  rules:\n",
    "  pools:\n    - name: p\n",
    "      cpus: {count: 2}\n",
    "when: {node.memory.usage_percent: {gte: 70}}",
    "{",
    "}",
    "[",
    "]",
    ",",
    "'",
    '"',
    "\\",
    "\\x00",
    "&a ",
    "*a",
    "&b ",
    "*b",
    "&a [*a]",
    "*nope",
    "!!binary aGk=",
    "!!binary ",
    "!!python/object:os.system ",
    "!!python/object/apply:os.system [ls]",
    "!!python/name:os.system",
    "!!str ",
    "!!int ",
    "!!float ",
    "!!map ",
    "!!seq ",
    "!!set ",
    "!!omap ",
    "!!timestamp ",
    "!x ",
    "!<tag:x> ",
    "<<: ",
    "<<: *a\n",
    "<<: [*a, *b]\n",
    "---\n",
    "--- ",
    "...\n",
    "%YAML 1.2\n",
    "%YAML 1.1\n",
    "%TAG !e! tag:e.com,2000:\n",
    "!e!x ",
    "#c",
    "# comment\n",
    "|\n",
    "|-\n",
    ">\n",
    ">-\n",
    "? ",
    "~",
    "null",
    "Null",
    "true",
    "True",
    "off",
    "yes",
    "1e3",
    "1E3",
    "-1",
    "+1",
    "0x1F",
    "0o17",
    "017",
    "1_000",
    "12345",
    "3.14",
    ".5",
    ".inf",
    "-.inf",
    ".nan",
    "2024-01-01",
    "12:30:00",
    "é",
    "日本",
    "\u2028",
    "\u2029",
    "\u0085",
    "\ufeff",
    "\x00",
    "\x07",
    "\x1b",
    "\x7f",
    "\U0001f600",
    "\r\n",
    "\r",
    "{{ node.cpus }}",
    "{{ node.nope }}",
    "{% include '/etc/passwd' %}",
]

# Deep, but never near the depth where libyaml's composer overflows the C stack (about 30k levels on
# an 8 MiB stack; see the segfault test): every level costs a character, and texts are capped.
MAX_TEXT = 12_000
DEEP = st.one_of(
    st.integers(1, 2000).map(lambda n: "[" * n),
    st.integers(1, 2000).map(lambda n: "[" * n + "]" * n),
    st.integers(1, 1000).map(lambda n: "{a: " * n + "}" * n),
    st.integers(1, 100).map(lambda n: "".join(" " * i + "- \n" for i in range(0, 2 * n, 2))),
    st.integers(1, 100).map(lambda n: "".join(" " * i + f"k{i}:\n" for i in range(n))),
    st.integers(1, 500).map(lambda n: "- " * n + "x\n"),
)
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
PIECES = st.one_of(st.sampled_from(FRAGMENTS), TEXT, DEEP)
yaml_text = st.lists(PIECES, max_size=40).map(lambda pieces: "".join(pieces)[:MAX_TEXT])


@st.composite
def spliced_policy(draw: st.DrawFn) -> str:
    """The inline policy with fragments spliced in at random offsets: mostly-valid documents."""
    text = INLINE_POLICY
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.one_of(st.sampled_from(FRAGMENTS), TEXT)) + text[at:]
    return text


def write_text(workdir: Path, text: str) -> Path:
    path = workdir / "fuzz.yaml"
    path.write_bytes(text.encode("utf-8"))
    return path


@settings(max_examples=250, deadline=None)
@given(text=yaml_text)
@example(text="a: &a [*a]")
@example(text="a: &a {<<: *a}")
@example(text="? [a]\n: b\n")
@example(text="<<: 5\n")
@example(text="a: !!binary aGk=\n")
@example(text="\ufeff---\n...\n---\n")
@example(text="[" * 1999)
@example(text="!!float ")
@example(text="a: !!int abc\n")
@example(text="a: !!float 1.2.3\n")
def test_random_yaml_text_gives_only_located_policy_errors(workdir: Path, text: str) -> None:
    run_pipeline(write_text(workdir, text))


@settings(max_examples=60, deadline=None)
@given(text=spliced_policy())
def test_spliced_policy_text_gives_only_located_policy_errors(workdir: Path, text: str) -> None:
    run_pipeline(write_text(workdir, text), selected_node(None))


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("a: 1" + "0" * 5000 + "\n", id="5001-digit-int"),
        pytest.param("spec:\n  priority: " + "9" * 4301 + "\n", id="4301-digit-priority"),
        pytest.param("a: 1." + "0" * 5000 + "\n", id="5000-digit-float"),
        pytest.param("a: 0x" + "f" * 5000 + "\n", id="5000-digit-hex"),
    ],
)
def test_huge_number_literal_is_a_located_problem(workdir: Path, text: str) -> None:
    """Found by this file: int() of >4300 digits used to escape parse_documents as ValueError."""
    problems = run_pipeline(write_text(workdir, text))
    assert problems


EXPLICIT_NUMBER_TAGS = [
    "a: !!int abc\n",
    "a: !!float x\n",
    "a: !!int\n",
    "a: !!float 1.2.3\n",
    "a: !!int 0xZZ\n",
]


@pytest.mark.parametrize("text", EXPLICIT_NUMBER_TAGS, ids=[t.strip() for t in EXPLICIT_NUMBER_TAGS])
def test_explicit_number_tags_on_non_numbers_are_located(text: str) -> None:
    """Found by the fuzzer: int("abc") / float("") used to escape as ValueError."""
    with pytest.raises(PolicyError) as info:
        parse_documents(text, "x.yaml")
    (problem,) = info.value.problems
    assert (problem.location.source, problem.location.line, problem.location.column) == ("x.yaml", 1, 4)


@pytest.mark.parametrize("text", EXPLICIT_NUMBER_TAGS, ids=[t.strip() for t in EXPLICIT_NUMBER_TAGS])
def test_explicit_number_tags_on_non_numbers_are_not_called_too_large(text: str) -> None:
    with pytest.raises(PolicyError) as info:
        parse_documents(text, "x.yaml")
    (problem,) = info.value.problems
    assert "too large" not in problem.message


@pytest.mark.parametrize(
    "template",
    [
        pytest.param("{{ " + " * ".join(["10**1000"] * 5) + " }}", id="int-product"),
        pytest.param("{{ ('9' * 4300)|int + ('9' * 4300)|int }}", id="int-from-text-sum"),
        pytest.param("{{ node.__class__ }}", id="sandbox-refusal"),
        pytest.param(
            "{{ 1e999 }}",
            id="constant-inf",
        ),
        pytest.param(
            "{{ [1][5] or 2 }}",
            id="constant-folding-undefined",
        ),
        pytest.param(
            "{{ 4 if (1).__class__ else 2 }}",
            id="constant-folding-security",
        ),
    ],
)
def test_bad_template_values_are_located_problems(workdir: Path, template: str) -> None:
    text = INLINE_POLICY.replace("{{ [4, node.numa_count] | max }}", template)
    assert template in text
    problems = run_pipeline(write_text(workdir, text), selected_node(yaml.safe_load(text)))
    assert [p.location.path for p in problems] == ["$.spec.pools[2].size.min"]


DEEP_NESTING_SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from engine.config.errors import PolicyError
    from engine.config.pipeline import load_documents
    try:
        load_documents([Path(sys.argv[1])], builtin=False)
    except PolicyError as exc:
        print(exc.problems[0].message)
    """
)


SEGFAULT = ()
N = 100_000


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("[" * N + "]" * N, id="closed-flow-sequences"),
        pytest.param("a: " + "[" * N, id="unclosed-flow-sequences"),
        pytest.param("{a: " * N, id="flow-mappings"),
        pytest.param("- " * N + "x\n", id="inline-block-sequences", marks=SEGFAULT),
        pytest.param("? " * N + "x\n", id="nested-complex-keys", marks=SEGFAULT),
        pytest.param(
            "x: it's\ny: " + "[" * N + "]" * N + "\n", id="apostrophe-hides-brackets", marks=SEGFAULT
        ),
        pytest.param('x: say "hi\ny: ' + "[" * N + "]" * N + "\n", id="quote-hides-brackets", marks=SEGFAULT),
        pytest.param("x: a#b\ny: " + "[" * N + "]" * N + "\n", id="hash-inside-scalar"),
    ],
)
def test_very_deep_nesting_is_refused_without_crashing(tmp_path: Path, text: str) -> None:
    """Runs in a child process: a segfault here would otherwise take pytest down with it."""
    path = tmp_path / "deep.yaml"
    path.write_text(text, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-c", DEEP_NESTING_SCRIPT, str(path)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=_default_stack,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-500:]}"
    assert proc.stdout.strip(), "expected a located problem about the nesting"


def _default_stack() -> None:
    """The usual 8 MiB main-thread stack, so the outcome does not depend on the caller's ulimit -s."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    limit = 8 << 20
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_STACK, (limit, hard))


# ------------------------------------------------------------------ (b) mutations of bundled policies


class Chooser:
    """Where mutations get their randomness: hypothesis draws, or a seeded Random."""

    def __init__(self, draw: Callable[[st.SearchStrategy[Any]], Any] | None = None, seed: int = 0):
        self._draw = draw
        self._rng = random.Random(seed)

    def choice(self, seq: Sequence[T]) -> T:
        if self._draw is not None:
            return self._draw(st.sampled_from(list(seq)))  # type: ignore[no-any-return]
        return self._rng.choice(list(seq))

    def integer(self, lo: int, hi: int) -> int:
        if self._draw is not None:
            return self._draw(st.integers(lo, hi))  # type: ignore[no-any-return]
        return self._rng.randint(lo, hi)


TEMPLATES = [
    "{{ node.nope }}",
    "{{ nope }}",
    "{{ 1/0 }}",
    "{{ node.cpus }}",
    "{{ [4, node.numa_count] | max }}",
    "{{ node.cpus * 0.5 }}",
    "{{ 10 ** 100000 }}",
    "{{ node.__class__ }}",
    "{% include '/etc/passwd' %}",
    "{{ node.labels }}",
    "{{ [1, 2] }}",
    "{{ {'a': 1} }}",
    "{{ none }}",
    "{{ 'x' ~ node.name }}",
    "pool-{{ node.name }}",
    "{{ range(10**9)|list }}",
    "{{ node.cpus > 4 }}",
    "{{ x.y }",
]
REPLACEMENTS: list[Any] = [
    "95",
    "70%",
    " 80 ",
    "",
    "abc",
    "é",
    "x" * 300,
    "true",
    "null",
    "~",
    "1h",
    "0s",
    "-5m",
    "2Gi",
    "500m",
    "0-3",
    "3-1",
    "max",
    "In",
    "NotIn",
    "Exists",
    "gte",
    "dedicated_cores",
    "reclaimed_cores",
    "reclaim",
    "share",
    "node.memory.usage_percent",
    [],
    [1, "a"],
    [None],
    {},
    {"x": 1},
    {"name": "x"},
    None,
    True,
    False,
    10**30,
    -(10**30),
    -1,
    0,
    1,
    2,
    100,
    101,
    1.5,
    -0.5,
    1e300,
    math.inf,
    -math.inf,
    math.nan,
    *TEMPLATES,
]
KEY_NAMES = [
    "name",
    "enabled",
    "spec",
    "metadata",
    "classes",
    "pools",
    "rules",
    "when",
    "then",
    "clearWhen",
    "for",
    "cooldown",
    "match",
    "cpu",
    "memory",
    "size",
    "cpus",
    "count",
    "list",
    "min",
    "max",
    "remainder",
    "priority",
    "nodeSelector",
    "matchLabels",
    "matchExpressions",
    "mode",
    "evict",
    "suppress",
    "victims",
    "classes ",
    "Name",
    "nope",
    "all",
    "any",
    "not",
    "gte",
    "lt",
    "in",
    "exists",
    "window",
    "agg",
    "hysteresis",
    "",
    "node.memory.usage_percent",
    "<<",
    "__class__",
    "{{ node.cpus }}",
]
BOGUS_FACTS = [
    "node.nope",
    "node.memory.usage",
    "node.memory",
    "node",
    "class.nope.cpu.usage_cores",
    "class.reclaimed_cores.cpu.usage_cores",
    "class.x",
    "pod.class",
    "numa.id",
    "container.name",
    "pod.kube_qos",
    "Node.cpus",
    "node.cpu.usage_percent.extra",
]
OPS = ["eq", "ne", "lt", "lte", "gt", "gte", "in", "exists", "window", "agg", "hysteresis", "between", "=="]
FACT_NAMES = registry().names()

Path_ = tuple[Any, ...]


def all_paths(value: Any, path: Path_ = ()) -> list[tuple[Path_, Any]]:
    out = [(path, value)]
    if isinstance(value, dict):
        for k, v in value.items():
            out.extend(all_paths(v, (*path, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(all_paths(v, (*path, i)))
    return out


def get_at(doc: Any, path: Path_) -> Any:
    for p in path:
        doc = doc[p]
    return doc


def set_at(doc: Any, path: Path_, value: Any) -> Any:
    if not path:
        return value
    get_at(doc, path[:-1])[path[-1]] = value
    return doc


def _delete(doc: Any, ch: Chooser) -> Any:
    paths = [p for p, _ in all_paths(doc) if p]
    if not paths:
        return doc
    path = ch.choice(paths)
    del get_at(doc, path[:-1])[path[-1]]
    return doc


def _replace(doc: Any, ch: Chooser) -> Any:
    path = ch.choice([p for p, _ in all_paths(doc)])
    return set_at(doc, path, copy.deepcopy(ch.choice(REPLACEMENTS)))


def _template(doc: Any, ch: Chooser) -> Any:
    paths = [p for p, v in all_paths(doc) if p and not isinstance(v, dict | list)]
    if not paths:
        return doc
    return set_at(doc, ch.choice(paths), ch.choice(TEMPLATES))


def _rename(doc: Any, ch: Chooser) -> Any:
    paths = [p for p, _ in all_paths(doc) if p and isinstance(p[-1], str)]
    if not paths:
        return doc
    path = ch.choice(paths)
    parent = get_at(doc, path[:-1])
    new = ch.choice([*KEY_NAMES, path[-1] + "s", path[-1].upper()])
    # Keep the key's position, as an edit in a text editor would.
    items = [(new if k == path[-1] else k, v) for k, v in parent.items()]
    parent.clear()
    parent.update(items)
    return doc


def _duplicate(doc: Any, ch: Chooser) -> Any:
    paths = [p for p, _ in all_paths(doc) if p and isinstance(p[-1], int)]
    if not paths:
        return doc
    path = ch.choice(paths)
    parent = get_at(doc, path[:-1])
    parent.insert(ch.integer(0, len(parent)), copy.deepcopy(parent[path[-1]]))
    return doc


def _add_key(doc: Any, ch: Chooser) -> Any:
    paths = [p for p, v in all_paths(doc) if isinstance(v, dict)]
    if not paths:
        return doc
    get_at(doc, ch.choice(paths))[ch.choice(KEY_NAMES)] = copy.deepcopy(ch.choice(REPLACEMENTS))
    return doc


def _fact(doc: Any, ch: Chooser) -> Any:
    """Put a (possibly unknown, possibly mistyped) fact comparison into some rule's condition."""
    fact = ch.choice([ch.choice(FACT_NAMES), ch.choice(BOGUS_FACTS)])
    op = ch.choice(OPS)
    operand = copy.deepcopy(
        ch.choice([70, 0.5, -1, True, "BE", "70", ["a", 1], None, "5m", "avg", *TEMPLATES[:4]])
    )
    comparison = {fact: {op: operand}}
    paths = all_paths(doc)
    lists = [p for p, v in paths if p and p[-1] in ("all", "any") and isinstance(v, list)]
    conds = [p for p, v in paths if p and p[-1] in ("when", "clearWhen", "not") and isinstance(v, dict)]
    rules = [p for p, v in paths if len(p) >= 2 and p[-2] == "rules" and isinstance(v, dict)]
    where = ch.choice(["list", "cond", "rule"])
    if where == "list" and lists:
        get_at(doc, ch.choice(lists)).append(comparison)
    elif where == "cond" and conds:
        get_at(doc, ch.choice(conds))[fact] = comparison[fact]
    elif rules:
        get_at(doc, ch.choice(rules))[ch.choice(["when", "clearWhen"])] = comparison
    return doc


MUTATIONS: dict[str, Callable[[Any, Chooser], Any]] = {
    "delete": _delete,
    "replace": _replace,
    "template": _template,
    "rename": _rename,
    "duplicate": _duplicate,
    "add-key": _add_key,
    "fact": _fact,
}


def mutate(doc: Any, ch: Chooser, rounds: int) -> Any:
    doc = copy.deepcopy(doc)
    for _ in range(rounds):
        doc = MUTATIONS[ch.choice(sorted(MUTATIONS))](doc, ch)
    return doc


def dump(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=100)


@st.composite
def mutated_documents(draw: st.DrawFn) -> tuple[str, Any]:
    source, doc = draw(st.sampled_from(BASE_DOCUMENTS))
    ch = Chooser(draw)
    return source, mutate(doc, ch, draw(st.integers(1, 3)))


def test_there_is_something_to_mutate() -> None:
    assert BASE_DOCUMENTS
    for source, doc in BASE_DOCUMENTS:
        assert isinstance(doc, dict), source
        assert len(all_paths(doc)) > 10, source


@settings(max_examples=150, deadline=None)
@given(case=mutated_documents())
def test_mutated_policies_give_only_located_policy_errors(workdir: Path, case: tuple[str, Any]) -> None:
    _source, doc = case
    path = write_text(workdir, dump(doc))
    run_pipeline(path, selected_node(doc))


@pytest.mark.parametrize(("source", "doc"), BASE_DOCUMENTS, ids=[s for s, _ in BASE_DOCUMENTS])
def test_unmutated_policies_round_trip_through_the_pipeline(workdir: Path, source: str, doc: Any) -> None:
    """The baseline the mutations start from: dumped back, each document loads, validates and
    compiles without a single problem (a bundled profile on its own, an example over the built-in
    layer), so a shipped file with e.g. ``priority: "not-a-number"`` fails here."""
    path = write_text(workdir, dump(doc))
    problems = run_pipeline(path, selected_node(doc), builtin=source not in BUILTIN_SOURCES)
    assert problems == [], f"{source} ({doc.get('metadata')}):\n" + "\n".join(p.format() for p in problems)


# ------------------------------------------------------------------ (c) determinism


def problem_key(problems: Sequence[Problem]) -> list[str]:
    return [json.dumps(p.to_dict(), sort_keys=True) for p in problems]


@settings(max_examples=40, deadline=None)
@given(case=mutated_documents())
def test_validate_is_deterministic(workdir: Path, case: tuple[str, Any]) -> None:
    _source, doc = case
    path = write_text(workdir, dump(doc))
    outcomes = []
    for _ in range(2):
        try:
            docs = load_documents([path], builtin=False)
        except PolicyError as exc:
            outcomes.append(("load", problem_key(exc.problems)))
            continue
        outcomes.append(("validate", problem_key(validate(docs))))
        outcomes.append(("validate-again", problem_key(validate(docs))))
    assert outcomes[0][1] == outcomes[-1][1]
    assert all(o[1] == outcomes[0][1] for o in outcomes)


@settings(max_examples=40, deadline=None)
@given(text=yaml_text)
def test_parse_errors_are_deterministic(text: str) -> None:
    def once() -> list[str]:
        try:
            return [repr(d.data) for d in parse_documents(text, "x.yaml")]
        except PolicyError as exc:
            return problem_key(exc.problems)

    assert once() == once()


HASHSEED_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from engine.config.errors import PolicyError
    from engine.config.pipeline import load_documents, validate
    out = []
    for name in sys.argv[1:]:
        try:
            problems = validate(load_documents([Path(name)], builtin=False))
        except PolicyError as exc:
            problems = exc.problems
        out.append([p.to_dict() for p in problems])
    print(json.dumps(out, sort_keys=True))
    """
)


def test_validate_does_not_depend_on_hash_seed(tmp_path: Path) -> None:
    """Set and dict order must not leak into problems: two processes, two hash seeds, same output."""
    files = []
    for i in range(24):
        _source, doc = BASE_DOCUMENTS[i % len(BASE_DOCUMENTS)]
        path = tmp_path / f"m{i:02d}.yaml"
        path.write_text(dump(mutate(doc, Chooser(seed=i), 1 + i % 3)), encoding="utf-8")
        files.append(str(path))
    outputs = []
    for seed in ("1", "2"):
        proc = subprocess.run(
            [sys.executable, "-c", HASHSEED_SCRIPT, *files],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        outputs.append(json.loads(proc.stdout))
    assert any(outputs[0]), "the mutated corpus should contain some invalid documents"
    assert outputs[0] == outputs[1]
