"""What a submitted QoSPolicy is validated against, and which problems are the submission's own.

A node builds its policy from three layers (engine.reload): the bundled profiles, the rule files of
the ``qosd-rules`` ConfigMap, and every QoSPolicy whose selector matches it. What passes the webhook
must not fail on a node, so the submitted policy is checked *together with* the layers it will be
merged with, exactly as ``qosd validate`` checks documents (every node variant the selectors tell
apart, each named in the problems it has):

- the bundled profiles (unless ``--no-builtin``, as for the daemon);
- the rule files given on the command line (the same ConfigMap the DaemonSet mounts);
- the other QoSPolicies in the cluster, as the webhook's own watch last saw them (an UPDATE
  replaces the stored version of the same name; the submitted object is the new one).

Only the problems the submission brings are its to fix: the same check runs without it (the
*baseline*, cached until a layer changes), and a problem found with and without it (a broken rule
file, an older policy that got in before the webhook did) does not refuse an unrelated policy.
A policy or file that is invalid without the submission (alone, or with the others: two stored
policies in conflict) is left out of both runs and named in a warning: it fails on its nodes
whatever the submission says, and its errors would stop validate before the checks across
documents, hiding the submission's own.

Not covered, and said in docs/kubernetes.md: templates render against validate's reference node
(16 CPUs, 2 NUMA nodes, 64 GiB), so a template that fails only for a real node's facts is still
caught on that node (which keeps its last good policy and reports it in status and Events).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.config.errors import Location, Problem
from engine.config.lints import lint
from engine.config.load import Document, Layer
from engine.config.pipeline import read_documents, validate
from engine.sources.policies import policy_document

ClusterPolicies = Callable[[], Sequence[Document]]
Key = tuple[Location, str]


def _key(p: Problem) -> Key:
    return (p.location, p.message)


@dataclass(frozen=True)
class Verdict:
    """The submission's problems: ``errors`` refuse it, ``warnings`` (lints, and the layers left
    out) are returned with an admission. ``checked`` counts the documents it was checked with."""

    errors: tuple[Problem, ...]
    warnings: tuple[Problem, ...]
    checked: int


@dataclass
class _Baseline:
    docs: list[Document]  # the layers, without the documents that are invalid without the submission
    left_out: list[Problem]  # one warning per document left out
    errors: set[Key] = field(default_factory=set)  # what is still wrong without the submission
    warnings: set[Key] = field(default_factory=set)


class PolicyChecker:
    """Checks QoSPolicy objects (as the API server sends them) against the layers of a node's policy.

    One check at a time: validate caches its rendered documents on them (pipeline.prepare), and
    admission requests are few. ``cluster`` returns the QoSPolicies the webhook knows, as documents
    (engine.sources.policies.PolicyWatch.documents), or is None outside a cluster.
    """

    def __init__(
        self, rule_paths: Sequence[Path] = (), *, builtin: bool = True, cluster: ClusterPolicies | None = None
    ) -> None:
        self.rule_paths = list(rule_paths)
        self.builtin = builtin
        self.cluster = cluster
        self._lock = threading.Lock()
        self._baseline: tuple[list[Document], _Baseline] | None = None

    def check(self, obj: Mapping[str, Any]) -> Verdict:
        submitted = policy_document(obj)
        with self._lock:
            layers, unread = read_documents(self.rule_paths, builtin=self.builtin)
            others = [d for d in (self.cluster() if self.cluster else ()) if d.name != submitted.name]
            base = self._baseline_for([*layers, *others])
            docs = [*base.docs, submitted]
            problems = validate(docs)
            errors = [p for p in problems if p.severity == "error" and _key(p) not in base.errors]
            warnings = [*base.left_out, *unread]
            if not any(p.severity == "error" for p in problems):
                warnings += [p for p in lint(docs) if _key(p) not in base.warnings]
            return Verdict(tuple(errors), tuple(w for w in warnings if w not in errors), len(docs))

    def _baseline_for(self, docs: list[Document]) -> _Baseline:
        """The layers' own problems, computed once per set of documents (the file cache and the
        policy watch hand out the same Document objects while nothing changed)."""
        cached = self._baseline
        if cached is not None and _same(cached[0], docs):
            return cached[1]
        base = _healthy(docs)
        if not base.errors:
            base.warnings = {_key(p) for p in lint(base.docs)}
        self._baseline = (docs, base)
        return base


def _same(a: list[Document], b: list[Document]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


MAX_ROUNDS = 3  # of leaving out documents that fail together (a conflict between two stored policies)


def _healthy(docs: list[Document]) -> _Baseline:
    """``docs`` less the QoSPolicies and files that are invalid without the submission (a bundled
    profile is never left out: it ships tested). Each document is first checked alone (validate's
    ``documents_only``), then the rest together, since validate stops before its checks across
    documents when one is broken and would then miss the submission's own problems."""
    left_out: list[Problem] = []
    errors = [p for p in validate(docs, documents_only=True) if p.severity == "error"]
    kept = _leave_out(docs, errors, left_out)
    for _ in range(MAX_ROUNDS):
        errors = [p for p in validate(kept) if p.severity == "error"]
        fewer = _leave_out(kept, errors, left_out)
        if len(fewer) == len(kept):
            break
        kept = fewer
    else:
        errors = [p for p in validate(kept) if p.severity == "error"]
    return _Baseline(kept, left_out, {_key(p) for p in errors})


def _leave_out(docs: list[Document], errors: list[Problem], left_out: list[Problem]) -> list[Document]:
    """The documents no error is located in (or related to), with one warning per source left out."""
    counts: dict[str, int] = {}
    for p in errors:
        for source in {p.location.source, *(r.source for r in p.related)}:
            counts[source] = counts.get(source, 0) + 1
    kept: list[Document] = []
    for doc in docs:
        if doc.source not in counts or doc.layer is Layer.BUILTIN:
            kept.append(doc)
            continue
        if any(w.location.source == doc.source for w in left_out):
            continue  # a file of several documents: one warning
        count = counts[doc.source]
        left_out.append(
            Problem(
                Location(doc.source, 0, 0),
                f"{doc.source} is invalid already ({count} error{'s' if count != 1 else ''}) and was left "
                "out of this check; the nodes it applies to keep their last good policy until it is fixed",
                f"read its Valid condition (kubectl describe qosp {doc.name})"
                if doc.is_cr
                else f"run `qosd validate {doc.source}`",
                severity="warning",
            )
        )
    return kept
