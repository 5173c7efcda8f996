"""A document with schema errors: the rest of it, checked for meaning in the same run.

``pipeline.prepare`` hands a document here when its shape is wrong (or a quantity, a duration or an
``unset`` path is). What the schema refuses is taken out (engine/config/withheld.py); what is left
is merged and compiled with the other documents like any other, so that an unknown cgroup file,
an orderBy key or a class reference elsewhere in the file is reported beside the schema errors, not
after they are fixed. The document never becomes a policy: its problems stand.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from engine.config.compile import document_problems
from engine.config.errors import Location, Problem
from engine.config.load import Document, JsonPath
from engine.config.merge import Rendered, entry_required
from engine.config.schema_check import refused_paths, validation_problems, validator
from engine.config.unitcheck import unit_findings
from engine.config.unset import policy_schema, unset_findings
from engine.config.withheld import Split, Withheld, split, withheld
from engine.features.rules.conditions import unknown_fact_problems


def withhold(
    doc: Document, data: dict[str, Any], problems: list[Problem], placement: bool
) -> tuple[Rendered, list[Problem]]:
    """``problems`` (found before the schema check), the document's schema problems and those of
    the rest of ``data``, with the rest as a Rendered document to merge for the checks across
    documents. ``placement``: where the document applies is itself wrong (a templated
    nodeSelector), so nothing of it is merged."""
    shape = split(data, refused_paths, entry_required, taken=[()] if placement else ())
    found = [*problems, *validation_problems(validator("policy"), data, doc.locate, partial=[])]
    if shape.data is not None:
        # Quantities, durations and unset paths are checked on a valid shape: on what is left.
        spec = shape.data.get("spec")
        later = [
            *unit_findings(policy_schema(), shape.data, _Locator(doc, shape)),
            *unset_findings(spec if isinstance(spec, dict) else {}, _Locator(doc, shape)),
        ]
        found.extend(p for _, p in later)
        if later:
            back = [shape.original(path) for path, _ in later]
            shape = split(data, refused_paths, entry_required, [*shape.taken, *back])
    found.extend(unknown_fact_problems(data, doc.locate, within=shape.taken))
    record = withheld(doc, data, shape)
    if shape.data is None:
        return Rendered(doc, {}, withheld=record), found
    rendered = Rendered(doc, shape.data, incomplete=True, withheld=record, split=shape)
    found.extend(document_problems(rendered))
    return rendered, found


def withhold_whole(doc: Document, problems: list[Problem]) -> tuple[Rendered, list[Problem]]:
    """``problems`` of a document none of which can be merged (it does not render, or nests too
    deeply to walk), as a document that defines nothing but whose entries are not "undefined"."""
    return Rendered(doc, {}, withheld=withheld(doc, doc.data, Split(None, ((),)))), problems


class _Locator:
    """Where a path of what is left (``shape.data``) is in the document."""

    def __init__(self, doc: Document, shape: Split) -> None:
        self.doc = doc
        self.shape = shape

    def __call__(self, path: JsonPath, prefer_key: bool = False) -> Location:
        return self.doc.locate(self.shape.original(path), prefer_key)


def unhidden(problems: Iterable[Problem], records: Sequence[Withheld]) -> list[Problem]:
    """``problems`` of a merged policy without those about values taken out of some document."""
    return [p for p in problems if not any(w.covers(p.location) for w in records)]
