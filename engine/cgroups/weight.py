"""cpu.shares (cgroup v1) <-> cpu.weight (cgroup v2): the kernel's ranges and the two formulas in use.

The one copy of this arithmetic: knob compilation (shares and percents of cores written as
cpu.weight), the value formats (the ranges a setCgroup value is validated against) and the cgroup
adapter (a logical cpu.shares on a v2 host, or cpu.weight on a v1 host) all call these functions.
Which formula applies is the policy's choice; it travels with each write operation
(:class:`engine.model.operations.WriteCgroup`) rather than living in the adapter.

The numbers are checked against the anchors' own tables in tests/cgroups/test_weight.py.
"""

from __future__ import annotations

import math
from typing import Literal, get_args

SHARES_MIN, SHARES_DEFAULT, SHARES_MAX = 2, 1024, 262_144
WEIGHT_MIN, WEIGHT_DEFAULT, WEIGHT_MAX = 1, 100, 10_000

WeightFormula = Literal["linear", "quadratic"]
WEIGHT_FORMULAS: tuple[WeightFormula, ...] = get_args(WeightFormula)
DEFAULT_WEIGHT_FORMULA: WeightFormula = "quadratic"
"""The formula used for cpu.weight when a policy names none (``spec.cgroup.weightFormula``).

"quadratic" because it is what current runtimes (runc >= 1.3.2, crun >= 1.23) write for the pods the
kubelet creates on cgroup v2, and cpu.weight only means something relative to siblings: a weight qosd
writes should sit on the same scale as the runtime's. It also keeps one core (1024 shares) at the v2
default weight of 100, which the linear formula turns into 39. Koordinator's koordlet uses "linear".
"""


def _clamp(value: int, lo: int, hi: int) -> int:
    return min(max(value, lo), hi)


class OutOfRange(ValueError):
    """A share count or weight the kernel does not accept, given to a conversion.

    Koordinator refuses such input (ConvertCPUSharesToWeight, ConvertCPUWeightToShares) rather than
    writing the nearest bound, and so does qosd: shares 0 or a weight of 10001 is a mistake in a rule
    or a computation, and clamping it to 2 or 262144 would write a very different CPU share than the
    one asked for. Validation refuses literal values (located); the planner refuses computed ones
    (reported, the other writes still go ahead)."""


def shares_problem(shares: int) -> str | None:
    """Why a cpu.shares value cannot be written or converted, or None when it can."""
    if SHARES_MIN <= shares <= SHARES_MAX:
        return None
    return f"cpu.shares {shares} is outside the kernel's range [{SHARES_MIN}, {SHARES_MAX}]"


def weight_problem(weight: int) -> str | None:
    """Why a cpu.weight value cannot be written or converted, or None when it can."""
    if WEIGHT_MIN <= weight <= WEIGHT_MAX:
        return None
    return f"cpu.weight {weight} is outside the kernel's range [{WEIGHT_MIN}, {WEIGHT_MAX}]"


def clamp_shares(shares: int) -> int:
    """A share count as the kernel stores it: a cpu.shares write is clamped to [2, 262144]. Used to
    compare what a file holds with what is wanted, never to make up a value to write."""
    return _clamp(shares, SHARES_MIN, SHARES_MAX)


def _quadratic_weight(shares: int) -> int:
    if shares <= SHARES_MIN:
        return WEIGHT_MIN
    if shares >= SHARES_MAX:
        return WEIGHT_MAX
    level = math.log2(shares)
    return math.ceil(10 ** ((level * level + 125 * level) / 612 - 7 / 34))


def shares_to_weight(shares: int, formula: WeightFormula | None = None) -> int:
    """cgroup v1 cpu.shares as the cgroup v2 cpu.weight that gives the same relative CPU share.

    Two formulas are in use, and a node can run both (one per runtime), so the caller picks by name;
    None means ``DEFAULT_WEIGHT_FORMULA``.

    - ``"linear"``: ``1 + ((shares - 2) * 9999) // 262142``, clamped to [1, 10000]. Kubernetes
      KEP-2254, runc < 1.3.2, crun < 1.23 and Koordinator's koordlet. It maps [2, 262144] onto
      [1, 10000] in a straight line, so the v1 default 1024 becomes 39, not the v2 default 100, and
      every pod the kubelet sizes from requests lands far below unmanaged cgroups (runc#4772).
    - ``"quadratic"``: ``ceil(10 ** ((L*L + 125*L) / 612 - 7/34))`` with ``L = log2(shares)``. runc
      >= 1.3.2 and crun >= 1.23. A quadratic in log space through the three fixed points
      2 -> 1, 1024 -> 100 and 262144 -> 10000, so defaults map to defaults.

    Shares outside [2, 262144] raise :class:`OutOfRange`, as in Koordinator (runc maps 0 to
    "unset"; qosd has no "unset" weight to write, and writing the nearest bound would be a different
    share than the one asked for). Both formulas are monotonic on the range. The quadratic one uses
    floating point like runc does; it hits the fixed points exactly in IEEE doubles.
    """
    bad = shares_problem(shares)
    if bad:
        raise OutOfRange(f"{bad}; it has no cpu.weight")
    chosen = DEFAULT_WEIGHT_FORMULA if formula is None else formula
    if chosen == "linear":
        return _clamp(1 + ((shares - 2) * 9999) // 262142, WEIGHT_MIN, WEIGHT_MAX)
    if chosen == "quadratic":
        return _quadratic_weight(shares)
    raise ValueError(f"unknown cpu.weight formula {formula!r}; one of {', '.join(WEIGHT_FORMULAS)}")


def weight_to_shares(weight: int, formula: WeightFormula | None = None) -> int:
    """cgroup v2 cpu.weight back as cgroup v1 cpu.shares, for reading a v2 node in v1 units.

    Weights outside [1, 10000] raise :class:`OutOfRange`. Neither inverse undoes every rounding, because both
    forward formulas map many share values onto one weight:

    - ``"linear"``: the kubelet's inverse ``(weight - 1) * 262142 // 9999 + 2``, clamped to
      [2, 262144]. It is not even a right inverse: weight 2 -> 28 shares -> weight 1, because both
      directions truncate. Kept as is because it is what Koordinator reads v2 nodes with.
    - ``"quadratic"``: exact as a right inverse, ``shares_to_weight(weight_to_shares(w)) == w`` for
      every w in [1, 10000]: it returns the *largest* share count whose weight is w. Solving the
      quadratic gives ``L = (sqrt(125**2 + 2448 * (log10(w) + 7/34)) - 125) / 2`` and the largest
      such count is ``floor(2**L)`` (1 -> 2, 100 -> 1024, 10000 -> 262144 exactly); a short walk
      against the forward formula absorbs floating-point error. shares -> weight -> shares is lossy:
      1000 shares -> weight 99 -> 1011 shares.
    """
    bad = weight_problem(weight)
    if bad:
        raise OutOfRange(f"{bad}; it has no cpu.shares")
    chosen = DEFAULT_WEIGHT_FORMULA if formula is None else formula
    if chosen == "linear":
        return _clamp((weight - 1) * 262142 // 9999 + 2, SHARES_MIN, SHARES_MAX)
    if chosen == "quadratic":
        level = (math.sqrt(125 * 125 + 2448 * (math.log10(weight) + 7 / 34)) - 125) / 2
        shares = _clamp(math.floor(2**level), SHARES_MIN, SHARES_MAX)
        while shares > SHARES_MIN and _quadratic_weight(shares) > weight:
            shares -= 1
        while shares < SHARES_MAX and _quadratic_weight(shares + 1) <= weight:
            shares += 1
        return shares
    raise ValueError(f"unknown cpu.weight formula {formula!r}; one of {', '.join(WEIGHT_FORMULAS)}")
