"""qosd's fuzz harness (issue 14): mutated rule files, facts snapshots, standalone workloads files,
state files and RuleTest suites through the entry points ``qosd validate``/``eval``/``test``/``run``
call, each input classified OK / LOCATED / UNLOCATED / CRASH / HANG with its peak RSS.

``python -m bench.fuzz --minutes N`` runs long; tests/test_fuzz.py runs a short fixed-seed budget.
"""
