"""``qosd test``: rule unit tests in YAML, in the manner of ``kyverno test`` and gator suites.

A platform team changing a threshold wants to know, before rollout, which pods the new rules would
evict on the nodes they know. A ``RuleTest`` suite pins that down: a policy (rule files, with or
without the bundled layer), facts snapshots, and the decisions expected on them. The suite runs the
one tick code path every mode shares (engine.tick.run_tick), so what passes here is what the daemon
decides. Suites over the bundled profiles double as the parity oracle against Katalyst and
Koordinator: each case says which anchor behaviour it shows.

Expectations match by fields: an expected entry lists only the fields it cares about, and matches
any actual entry whose fields agree (nested mappings, dotted paths such as ``release.target``,
quantities such as ``12Gi``, and operators such as ``{approx: 9Gi, tolerance: 1%}``). A failure
prints the expected entry next to the closest actual entries, field by field, with the suite's
file:line:column, because at 3 a.m. nobody wants to diff JSON by eye.

Exit codes: 0 every case passed, 1 a case failed (or a suite is malformed: located errors), 2 usage
error (a path that does not exist, no suites found).

The parts: ``model`` (suites, cases, steps, expectations, anchors), ``reader`` (suite files: schema
checks, located problems, discovery), ``overlay`` (a case's inline policy overlay, located in the
suite), ``match`` (matching expected values against actual ones), ``check`` (one tick against its
expectations), ``runner`` (running cases through the one tick), ``summary`` (counts, the result
table, rule coverage), ``report`` and ``junit`` (text, JSON, YAML and JUnit output), ``parity`` (the
generated table of docs/parity.md), ``command`` and ``options`` (``qosd test`` and its command line).
"""
