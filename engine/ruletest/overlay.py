"""A case's inline overlay: QoSPolicy documents cut out of the suite document, located in the suite file.

A parity case sets one or two fields over a bundled profile (a threshold, a rule switched on). With
only ``policy.paths`` every such case needed its own file, selected by a node label the anchor test
never had. An inline overlay keeps the setting next to the case; the documents it makes carry the
suite file's marks, so a schema or compile error in it points at the suite's line and column.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.config.load import Document, JsonPath, Layer, Marks
from engine.resources import API_VERSION

# Keys that make an overlay mapping a whole document rather than a bare spec (no spec field is named so).
DOCUMENT_KEYS = frozenset({"apiVersion", "kind", "metadata", "spec"})


def _rerooted(marks: Marks, prefix: JsonPath, into: JsonPath) -> Marks:
    """The marks below ``prefix``, re-keyed under ``into``."""
    n = len(prefix)
    out = Marks()
    for src, dst in ((marks.values, out.values), (marks.keys, out.keys)):
        for path, pos in src.items():
            if path[:n] == prefix:
                dst[(*into, *path[n:])] = pos
    return out


def overlay_documents(
    suite: Document, path: JsonPath, raw: Any, label: str, layer: Layer
) -> tuple[Document, ...]:
    """The QoSPolicy documents of the overlay at ``path`` in ``suite`` (a spec, a document, or a list).

    A bare spec becomes a document named after the case, so ``qosd explain`` and conflict messages
    can name it; a document keeps its own metadata (a missing name is the schema's to report).
    """
    items = list(enumerate(raw)) if isinstance(raw, list) else [(None, raw)]
    docs = []
    for k, item in items:
        where: JsonPath = path if k is None else (*path, k)
        name = label if k is None else f"{label}.{k + 1}"
        if isinstance(item, Mapping) and DOCUMENT_KEYS & set(item):
            data: Any = dict(item)
            marks = _rerooted(suite.marks, where, ())
        else:
            data = {"apiVersion": API_VERSION, "kind": "QoSPolicy", "metadata": {"name": name}, "spec": item}
            marks = _rerooted(suite.marks, where, ("spec",))
            # The synthesized header is located at the overlay itself.
            position = suite.marks.find(where, prefer_key=True)
            marks.values[()] = marks.keys[()] = position
            for key in ("apiVersion", "kind", "metadata", ("metadata", "name")):
                p: JsonPath = key if isinstance(key, tuple) else (key,)
                marks.values[p] = marks.keys[p] = position
        docs.append(Document(suite.source, suite.index, data, marks, layer, suite.path))
    return tuple(docs)
