"""A case whose policy must be refused: the anchors' own error cases (a share count of 0, an empty L3
range) are reproduced when qosd refuses the same configuration, and a RuleTest says so with
``refused`` instead of ``expect``.

Each expected entry matches one problem of the refusal by fields (``message``, ``hint``, ``path`` the
JSON path, ``source``, ``line``, ``column``), with the operators of expectations (``contains``,
``matches``, ...). A policy that builds fails the case, as does a refusal without a matching problem.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engine.config.errors import Location, Problem
from engine.ruletest.check import Failure
from engine.ruletest.match import field_results, flow


def check_refused(
    expected: Sequence[Mapping[str, Any]], problems: Sequence[Problem] | None, where: Location
) -> list[Failure]:
    """Failures of a case that expects its policy refused; ``problems`` is None when it was built."""
    if problems is None:
        return [Failure(where, "", "the policy was built, but this case expects it refused (`refused`)")]
    actual = [p.to_dict() for p in problems]
    failures = []
    for want in expected:
        if any(all(r.ok for r in field_results(want, a)) for a in actual):
            continue
        seen = tuple(f"refused with: {a['message']} (at {a['path'] or a['source']})" for a in actual)
        failures.append(Failure(where, "", f"no problem of the refusal matches {flow(want)}", seen))
    return failures
