"""From rule sources to a Policy: load -> render -> validate -> merge -> compile.

This is the only entry point other parts use. ``build_policy`` makes the generation for one node
(the daemon, ``qosd render``); ``validate`` checks documents for every kind of node their selectors
can tell apart (``qosd validate``). Both raise or return located problems, never tracebacks.
"""

from __future__ import annotations

import gc
import itertools
import json
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

from engine.config.compile import check_and_compile, document_problems
from engine.config.errors import Location, PolicyError, Problem, UsageError, Variant, unique_problems
from engine.config.load import (
    MAX_FILE_BYTES,
    Document,
    JsonPath,
    Layer,
    Marks,
    decode_utf8,
    expand_paths,
    nesting_problem,
    parse_documents,
    read_file,
    too_deep,
)
from engine.config.merge import Merged, Rendered, Unanchored, conflicts, merge
from engine.config.policy import Policy
from engine.config.refused import unhidden, withhold, withhold_whole
from engine.config.render import is_template, render_document
from engine.config.schema_check import schema_problems
from engine.config.selector import NODE_NAME_LABEL, document_selector, matches, selector_problems
from engine.config.unset import has_unset, unset_problems
from engine.features.rules.conditions import unknown_fact_problems
from engine.model.node import NodeInfo
from engine.resources import API_VERSION, bundled_policy_files, data_dir
from engine.resources import PROFILE_LABEL as PROFILE_LABEL  # where the pipeline's users have found it

MAX_VARIANTS = 64
STDIN = "-"  # a PATH of "-" is standard input, as for kubectl apply -f -
STDIN_NAME = "<stdin>"

REFERENCE_NODE = NodeInfo(
    name="validate-reference",
    labels={},
    capacity={"cpu": 16.0, "memory": float(64 << 30)},
    cpus=16,
    numa_count=2,
    sockets=2,
    memory=64 << 30,
    cpu_ids=frozenset(range(16)),
)


@contextmanager
def gc_paused() -> Iterator[None]:
    """A build allocates many small containers that all live until it ends; letting the cyclic
    collector scan them over and over costs up to half of a large build, and finds nothing."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def load_documents(paths: Iterable[Path], builtin: bool = True) -> list[Document]:
    """Read the built-in layer (unless disabled) and the given files/directories.

    Every file is read even when an earlier one fails, so all parse errors come out in one run.
    """
    docs, problems = read_documents(paths, builtin)
    if problems:
        raise PolicyError(problems)
    return docs


def read_documents(paths: Iterable[Path], builtin: bool = True) -> tuple[list[Document], list[Problem]]:
    """The documents of every file that could be read, and the problems of those that could not
    (``qosd validate`` goes on checking the readable ones). ``-`` is standard input."""
    with gc_paused():
        return _load_documents(paths, builtin)


def _load_documents(paths: Iterable[Path], builtin: bool) -> tuple[list[Document], list[Problem]]:
    paths = list(paths)
    stdin = [p for p in paths if str(p) == STDIN]
    files, problems = expand_paths([p for p in paths if str(p) != STDIN])
    docs: list[Document] = []
    given = {f.resolve() for f in files}
    if builtin:
        root = data_dir("rules")
        for f in bundled_policy_files():
            if f.resolve() not in given:
                docs.extend(_read(f, Layer.BUILTIN, problems, f"builtin:rules/{f.relative_to(root)}"))
    for f in files:
        docs.extend(_read(f, Layer.FILE, problems))
    if stdin:
        docs.extend(_read_stdin(problems))
    return docs, problems


def _read(path: Path, layer: Layer, problems: list[Problem], display: str | None = None) -> list[Document]:
    try:
        return read_file(path, layer, display)
    except PolicyError as exc:
        problems.extend(exc.problems)
        return []


def _read_stdin(problems: list[Problem]) -> list[Document]:
    """Rule documents piped in (``kubectl get qosp x -o yaml | qosd validate -``), located as
    ``<stdin>:line:col``. Read once, however often ``-`` is named."""
    raw = sys.stdin.buffer.read(MAX_FILE_BYTES + 1)
    if len(raw) > MAX_FILE_BYTES:
        problems.append(
            Problem(
                Location(STDIN_NAME, 0, 0),
                f"standard input is larger than {MAX_FILE_BYTES >> 20} MiB, more than qosd reads as rules",
            )
        )
        return []
    try:
        return parse_documents(decode_utf8(raw, STDIN_NAME), STDIN_NAME, Layer.FILE)
    except PolicyError as exc:
        problems.extend(exc.problems)
        return []


def document_from_object(obj: Mapping[str, Any], layer: Layer = Layer.CR) -> Document:
    """A QoSPolicy custom resource (as the API returns it) as a document located by CR name + JSON path."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    name = str(meta.get("name", "?")) if isinstance(meta, Mapping) else "?"
    data = {k: v for k, v in obj.items() if k != "status"}
    return Document(f"QoSPolicy/{name}", 0, data, Marks(), layer)


def _selector(doc: Document) -> Any:
    spec = doc.data.get("spec") if isinstance(doc.data, dict) else None
    return document_selector(spec)


def selection_labels(node: NodeInfo) -> Mapping[str, str]:
    """The labels documents are selected by: the node's, with the reserved node-name label (a value
    already there, as in validate's variants, is kept)."""
    if NODE_NAME_LABEL in node.labels:
        return node.labels
    return {**node.labels, NODE_NAME_LABEL: node.name}


def applies_to(doc: Document, labels: Mapping[str, str]) -> bool:
    sel = _selector(doc)
    if not isinstance(sel, dict) or too_deep(sel) is not None:
        return True  # prepare() reports what is wrong with it
    try:
        return matches(sel, labels)
    except (KeyError, TypeError, AttributeError):
        return True  # malformed selector: keep the document so its schema errors are reported


def prepare(doc: Document, node: NodeInfo) -> tuple[Rendered | None, list[Problem]]:
    """Render and schema-check one document for one node, once per template context.

    Documents are cached by content (load.read_file), so a reload re-renders and re-checks only
    documents that changed, and validate's node variants share the work.
    """
    key = _context_key(doc, node)
    cached = doc.prepared.get(key)
    if cached is None:
        cached = doc.prepared[key] = _prepare(doc, node)
        if len(doc.prepared) > 64:
            doc.prepared.pop(next(iter(doc.prepared)))
    rendered, problems = cached
    return rendered, list(problems)


def _context_key(doc: Document, node: NodeInfo) -> str:
    if doc.templated is None:
        doc.templated = _has_template(doc.data)
    if not doc.templated:
        return "static"
    return json.dumps(node.template_context(), sort_keys=True, default=str)


def _prepare(doc: Document, node: NodeInfo) -> tuple[Rendered | None, list[Problem]]:
    problems: list[Problem] = []
    if not isinstance(doc.data, dict):
        return None, [
            Problem(doc.locate(()), "a rule document must be a mapping (apiVersion, kind, metadata, spec)")
        ]
    deep = nesting_problem(doc)  # before the recursive walks below (render, schema, merge, compile)
    if deep is not None:
        return withhold_whole(doc, [deep])
    sel = _selector(doc)
    if _has_template(sel):
        problems.append(
            Problem(
                doc.locate(("spec", "nodeSelector")),
                "nodeSelector cannot use templates",
                "selectors decide which node renders the document",
            )
        )
    spec = doc.data.get("spec")
    if isinstance(spec, dict) and "nodeNames" in spec and "nodeSelector" in spec:
        problems.append(
            Problem(
                doc.locate(("spec", "nodeNames")),
                "a document selects nodes by nodeNames or by nodeSelector, not both",
                "keep nodeNames to pin it to named nodes (it then outranks label-selected documents), "
                "or nodeSelector (Katalyst KCC refuses a config with both, too)",
            )
        )
    data, render_problems = render_document(doc, node.template_context())
    problems.extend(render_problems)
    if render_problems:
        return withhold_whole(doc, problems)
    gaps: list[str] = []
    shape_ok = not problems and not schema_problems(data, doc.locate, partial=gaps)
    if shape_ok:
        # Where the document applies: a selector no node can carry is refused like a templated one.
        problems.extend(selector_problems(data.get("spec"), doc.locate))
    if problems or not shape_ok or unset_problems(data.get("spec") or {}, doc.locate):
        # The semantic checks need a valid shape: they check what is left once the refused values
        # are taken out, so the document's other problems come out in this run (engine/config/refused).
        # ``problems`` so far say where the document applies is unknown: then nothing of it is merged.
        return withhold(doc, data, problems, placement=bool(problems))
    # A document that unsets fields may leave the merged spec without one it requires: check it whole.
    rendered = Rendered(doc, data, incomplete=bool(gaps) or has_unset(data.get("spec") or {}))
    problems.extend(document_problems(rendered))
    return rendered, problems


def _has_template(value: Any) -> bool:
    """Iterative: it runs on documents before their depth is checked."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif is_template(v):
            return True
    return False


def build_policy(docs: list[Document], node: NodeInfo) -> Policy:
    """The policy generation for ``node``; raises PolicyError with every problem found.

    A patch with nothing to patch on this node (merge.Unanchored: a rule overlay without ``then``
    whose rule only the other profile defines) is left out: it applies where the entry exists."""
    with gc_paused():
        return _build_policy(docs, node)[0]


def _build_policy(docs: list[Document], node: NodeInfo) -> tuple[Policy, tuple[Unanchored, ...]]:
    problems: list[Problem] = []
    rendered: list[Rendered] = []
    labels = selection_labels(node)
    for doc in docs:
        if not applies_to(doc, labels):
            continue
        r, p = prepare(doc, node)
        problems.extend(p)
        if r is not None:
            rendered.append(r)
    problems.extend(conflicts(rendered, check_selectors=False))
    if not rendered and not problems:
        raise PolicyError(
            [
                Problem(
                    Location(node.name, 0, 0, "$"),
                    f"no policy document applies to node {node.name!r}",
                    "check the documents' nodeSelectors against the node's labels, "
                    "or keep the built-in defaults",
                )
            ]
        )
    if not rendered:
        raise PolicyError(problems)
    # With problems already found, merging and compiling what is left finds the rest in this run
    # (engine/config/refused.py); the checks are kept quiet about what was taken out of a document.
    records = [r.withheld for r in rendered if r.withheld is not None]
    try:
        merged = merge(rendered)
        policy = compile_merged(merged, node)
    except PolicyError as exc:
        raise PolicyError([*problems, *unhidden(exc.problems, records)] or exc.problems) from None
    if problems:
        raise PolicyError(problems)
    return policy, merged.unanchored


def compile_merged(merged: Merged, node: NodeInfo) -> Policy:
    """Compile a merged spec, first schema-checking it in full if some document left gaps.

    Each document was already schema-valid on its own, and unions replace rather than merge, so the
    only way a merged spec can break the schema is a required field that no document supplied; that
    needs a full check only when some document had such a gap.
    """
    if any(r.incomplete for r in merged.documents):
        _check_merged_schema(merged)
    return check_and_compile(merged, node)


def _check_merged_schema(merged: Merged) -> None:
    document = {
        "apiVersion": API_VERSION,
        "kind": "QoSPolicy",
        "metadata": {"name": "merged"},
        "spec": merged.spec,
    }

    def locate(path: JsonPath, prefer_key: bool = False) -> Location:
        return merged.locate(path[1:])  # in the document that wrote it (Merged.locate)

    problems = schema_problems(document, locate)
    if problems:
        raise PolicyError(problems)


def label_variants(docs: list[Document], base: Mapping[str, str]) -> list[dict[str, str]]:
    """Label sets that exercise every distinguishable combination of the documents' selectors."""
    values: dict[str, set[str | None]] = {}
    for doc in docs:
        sel = _selector(doc)
        if not isinstance(sel, dict):
            continue
        for k, v in (
            (sel.get("matchLabels") or {}).items() if isinstance(sel.get("matchLabels"), dict) else ()
        ):
            values.setdefault(k, {None}).add(str(v))
        for expr in (
            sel.get("matchExpressions") or [] if isinstance(sel.get("matchExpressions"), list) else []
        ):
            if isinstance(expr, dict) and isinstance(expr.get("key"), str):
                vals = values.setdefault(expr["key"], {None})
                vals.update(_values(expr))
                if expr.get("operator") in ("Exists", "NotIn", "Gt", "Lt"):
                    vals.add("qosd-validate-other")
    keys = sorted(values)
    total = 1
    for k in keys:
        total *= len(values[k])
    if total > MAX_VARIANTS:
        return []
    variants: list[dict[str, str]] = []
    for combo in itertools.product(
        *(sorted(values[k], key=lambda v: (v is not None, v or "")) for k in keys)
    ):
        labels = dict(base)
        for k, v in zip(keys, combo, strict=True):
            if v is None:
                labels.pop(k, None)
            else:
                labels[k] = v
        variants.append(labels)
    return variants or [dict(base)]


def validate(
    docs: list[Document],
    node: NodeInfo | None = None,
    notes: list[Problem] | None = None,
    documents_only: bool = False,
) -> list[Problem]:
    """Every problem in ``docs``: per document, and for each node variant their selectors distinguish.

    Without a node, templates render against REFERENCE_NODE (16 CPUs, 2 sockets, 2 NUMA, 64 GiB) with
    the variant's labels. If the selectors distinguish more than MAX_VARIANTS label sets, each
    document is checked on a node its own selector selects, together with whatever else applies there.
    A problem that only some variants have names them (``Problem.variants``). ``documents_only``
    checks each document alone (what validate can still say when some file could not be read: a
    reference into the unreadable file would otherwise be reported as missing).

    A patch (an entry without a field complete entries need) that patches nothing on every variant
    its document applies to is a problem; one that patches nothing on some variants only is a note
    (appended to ``notes`` when given) naming those variants, since it does its work elsewhere.
    """
    with gc_paused():
        return _validate(docs, node, notes, documents_only)


def _validate(
    docs: list[Document], node: NodeInfo | None, notes: list[Problem] | None, documents_only: bool
) -> list[Problem]:
    base_node = node or REFERENCE_NODE
    problems: list[Problem] = []
    rendered_all: list[Rendered] = []
    for doc in docs:
        r, p = prepare(doc, base_node)
        problems.extend(p)
        if r is not None:
            rendered_all.append(r)
    if documents_only:  # what one document says alone: its shape (above) and its fact names
        for r in rendered_all:
            problems.extend(unknown_fact_problems(r.data, r.locate))
        return unique_problems(problems)
    if node is None:
        problems.extend(conflicts(rendered_all, check_selectors=True))
    else:
        labels = selection_labels(node)
        problems.extend(
            conflicts([r for r in rendered_all if applies_to(r.doc, labels)], check_selectors=False)
        )
    found: list[Problem] = list(problems)  # each document's own, and the conflicts between them
    checked: set[Variant] = set()
    patches = _Patches(docs)
    for v in node_variants(docs, node):
        checked.add(v.variant)
        try:
            with gc_paused():
                _, unanchored = _build_policy(v.docs, v.node)
        except PolicyError as exc:
            found.extend(replace(p, variants=(v.variant,)) for p in exc.problems)
            continue
        patches.record(v.labels, v.indices, unanchored)
    missed, noted = patches.judge(single_node=node is not None)
    if notes is not None:
        notes.extend(noted)
    return join_variants([*found, *missed], checked)


def join_variants(found: Iterable[Problem], checked: set[Variant]) -> list[Problem]:
    """``found`` with each problem once, naming the variants it was found on; a problem that every
    checked variant has is a problem of the documents, not of a kind of node, and names none."""
    return unique_problems(
        replace(p, variants=()) if len(checked) == 1 or set(p.variants) == checked else p
        for p in unique_problems(found)
    )


class NodeVariant(NamedTuple):
    """One kind of node validate builds the policy for."""

    variant: Variant  # its name: the distinguishing labels and the bundled profile
    node: NodeInfo
    docs: list[Document]  # the documents that apply there
    labels: dict[str, str]
    indices: tuple[int, ...]  # their positions in the documents validated


def node_variants(docs: list[Document], node: NodeInfo | None = None) -> Iterator[NodeVariant]:
    """Each kind of node the documents' selectors tell apart (``node`` alone when given). Label sets
    that select the same documents are one variant."""
    base_node = node or REFERENCE_NODE
    variants = (
        [dict(selection_labels(node))] if node is not None else label_variants(docs, base_node.labels)
    )
    if not variants:
        variants = [dict(base_node.labels)] + [_satisfying(d, base_node.labels) for d in docs]
    keys = sorted({k for d in docs for k in _selector_keys(d)})
    seen: set[tuple[int, ...]] = set()
    for labels in variants:
        applicable = tuple(i for i, d in enumerate(docs) if applies_to(d, labels))
        if applicable in seen or not applicable:
            continue
        seen.add(applicable)
        chosen = [docs[i] for i in applicable]
        variant = Variant(tuple((k, labels.get(k)) for k in keys), _profile_of(chosen))
        node_of = base_node.with_labels(labels) if node is None else node
        yield NodeVariant(variant, node_of, chosen, labels, applicable)


def _profile_of(docs: list[Document]) -> str | None:
    """The bundled profile among ``docs`` (its ``metadata.labels`` name it), if one applies."""
    for doc in docs:
        if doc.layer is Layer.BUILTIN and isinstance(doc.data, dict):
            meta = doc.data.get("metadata")
            labels = meta.get("labels") if isinstance(meta, dict) else None
            name = labels.get(PROFILE_LABEL) if isinstance(labels, dict) else None
            if isinstance(name, str):
                return name
    return None


class _Patches:
    """Where each patch found something to patch, across validate's node variants."""

    def __init__(self, docs: list[Document]):
        self.docs = docs
        self.keys = sorted({k for d in docs for k in _selector_keys(d)})
        self.missed: dict[Location, tuple[Unanchored, list[str]]] = {}
        self.seen: list[tuple[set[str], set[Location]]] = []

    def record(
        self, labels: Mapping[str, str], applicable: tuple[int, ...], unanchored: tuple[Unanchored, ...]
    ) -> None:
        names = {self.docs[i].name for i in applicable}
        self.seen.append((names, {u.location for u in unanchored}))
        for u in unanchored:
            self.missed.setdefault(u.location, (u, []))[1].append(self._variant(labels))

    def _variant(self, labels: Mapping[str, str]) -> str:
        parts = [f"{k}={labels[k]}" if k in labels else f"no {k} label" for k in self.keys]
        return "nodes with " + ", ".join(parts) if parts else "every node"

    def judge(self, single_node: bool) -> tuple[list[Problem], list[Problem]]:
        problems: list[Problem] = []
        notes: list[Problem] = []
        for where, (u, variants) in self.missed.items():
            anchored = any(set(u.documents) & names and where not in missed for names, missed in self.seen)
            fields = " and ".join(f"`{f}`" for f in u.missing)
            if anchored or single_node:
                notes.append(
                    Problem(
                        where,
                        f"{u.describe()} patches nothing on {'; '.join(variants)}: no document there "
                        "defines it, so this patch is left out there",
                        "a partial entry applies only where a lower layer defines the entry; give the "
                        "document a nodeSelector to say so explicitly",
                    )
                )
                continue
            problems.append(
                Problem(
                    where,
                    f"{u.describe()} has no {fields}, and no document defines a complete "
                    f"{u.describe().split()[0]} of that name on any node this document applies to",
                    u.hint
                    or f"define it here with {fields}, or name an entry a lower layer defines "
                    "(a partial entry only patches one)",
                )
            )
        return problems, notes


def _selector_keys(doc: Document) -> list[str]:
    sel = _selector(doc)
    if not isinstance(sel, dict):
        return []
    keys = list(sel.get("matchLabels") or {}) if isinstance(sel.get("matchLabels"), dict) else []
    for expr in sel.get("matchExpressions") or [] if isinstance(sel.get("matchExpressions"), list) else []:
        if isinstance(expr, dict) and isinstance(expr.get("key"), str):
            keys.append(expr["key"])
    return [str(k) for k in keys]


def _values(expr: Mapping[str, Any]) -> list[str]:
    """A match expression's values; none when the schema refused them (validate still enumerates
    node variants for the rest of the documents, and reports the selector where it is written)."""
    values = expr.get("values")
    return [str(v) for v in values] if isinstance(values, list) else []


def _satisfying(doc: Document, base: Mapping[str, str]) -> dict[str, str]:
    """Labels of a node that ``doc``'s selector selects (the fallback when variants are too many)."""
    labels = dict(base)
    sel = _selector(doc)
    if not isinstance(sel, dict):
        return labels
    match = sel.get("matchLabels")
    if isinstance(match, dict):
        labels.update({str(k): str(v) for k, v in match.items()})
    exprs = sel.get("matchExpressions")
    for expr in exprs if isinstance(exprs, list) else ():
        if not isinstance(expr, dict) or not isinstance(expr.get("key"), str):
            continue
        values = _values(expr)
        op = expr.get("operator")
        if op == "In" and values:
            labels[expr["key"]] = values[0]
        elif op == "Exists":
            labels.setdefault(expr["key"], "qosd-validate-other")
        elif op in ("NotIn", "DoesNotExist"):
            labels.pop(expr["key"], None)
    return labels


def node_labels(items: Iterable[str], profile: str | None = None) -> dict[str, str]:
    """Extra node labels from ``--label key=value`` options, plus the profile label if one is named."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--label expects key=value, got {item!r}")
        out[key] = value
    if profile:
        out[PROFILE_LABEL] = profile
    return out
