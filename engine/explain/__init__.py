"""``qosd explain``: why each decision was made, in words, from recorded Evaluation documents.

An on-call engineer holds an eviction, a taint or a published resource and needs to know which rule
did it, where that rule is written, what it saw and what arithmetic chose the victim. Intents carry
all of that as provenance; this module only reads it back. It never re-evaluates anything: the
recorded document is the truth about what happened, even if the rules have changed since.

Input is one of (see docs/outputs.md):

- an Evaluation document (``qosd eval --output json``),
- a Simulation document (``qosd simulate --output json``: ``kind: Simulation``, Evaluations under
  ``ticks``),
- an audit log: JSON Lines, one Evaluation document per tick.

Every document is checked against schemas/evaluation.schema.json first, so garbled or truncated
input is a located error (file:line:column and JSON path), never a traceback or a wrong sentence.

The parts: ``reader`` (the three input forms, schema-checked, located errors), ``pairing`` (what the
planner held back and what the adapters reported, per intent), ``provenance`` (what a rule saw
and where it is written), one wording module per decision kind (``evict``, ``node`` for taints,
conditions, events and published resources, ``cgroup``), ``decisions`` (one tick's sentences,
filtered by rule or target), ``report`` (text and JSON output), ``command`` and ``options``
(``qosd explain`` and its command line). Amounts are formatted by engine.model.units, as every
other command formats them.
"""
