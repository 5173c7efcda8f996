"""Kubernetes label selectors: matching, and whether two selectors can meet on one node."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.config.selector import matches, may_overlap


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    e: dict[str, Any] = {"key": key, "operator": op}
    if values:
        e["values"] = list(values)
    return e


def sel(labels: dict[str, str] | None = None, *exprs: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if labels is not None:
        out["matchLabels"] = labels
    if exprs:
        out["matchExpressions"] = list(exprs)
    return out


MATCHES = [
    # selector, labels, expected
    pytest.param(None, {}, True, id="absent-selector"),
    pytest.param({}, {"k": "v"}, True, id="empty-selector"),
    pytest.param(sel({}), {}, True, id="empty-matchLabels"),
    pytest.param(sel({"k": "a"}), {"k": "a"}, True, id="matchLabels-equal"),
    pytest.param(sel({"k": "a"}), {"k": "a", "x": "y"}, True, id="matchLabels-extra-labels"),
    pytest.param(sel({"k": "a"}), {"k": "b"}, False, id="matchLabels-other-value"),
    pytest.param(sel({"k": "a"}), {}, False, id="matchLabels-absent"),
    pytest.param(sel({"k": "a", "j": "b"}), {"k": "a"}, False, id="matchLabels-all-required"),
    pytest.param(sel({"qosd.io/colocation": "true"}), {"qosd.io/colocation": "true"}, True, id="prefixed-key"),
    pytest.param(sel(None, expr("k", "In", "a", "b")), {"k": "b"}, True, id="In-member"),
    pytest.param(sel(None, expr("k", "In", "a", "b")), {"k": "c"}, False, id="In-non-member"),
    pytest.param(sel(None, expr("k", "In", "a")), {}, False, id="In-absent"),
    pytest.param(sel(None, expr("k", "NotIn", "a")), {"k": "b"}, True, id="NotIn-other"),
    pytest.param(sel(None, expr("k", "NotIn", "a")), {"k": "a"}, False, id="NotIn-member"),
    pytest.param(sel(None, expr("k", "NotIn", "a")), {}, True, id="NotIn-absent"),
    pytest.param(sel(None, expr("k", "Exists")), {"k": ""}, True, id="Exists-empty-value"),
    pytest.param(sel(None, expr("k", "Exists")), {"j": "a"}, False, id="Exists-absent"),
    pytest.param(sel(None, expr("k", "DoesNotExist")), {}, True, id="DoesNotExist-absent"),
    pytest.param(sel(None, expr("k", "DoesNotExist")), {"k": "a"}, False, id="DoesNotExist-present"),
    pytest.param(sel(None, expr("n", "Gt", "5")), {"n": "7"}, True, id="Gt-above"),
    pytest.param(sel(None, expr("n", "Gt", "5")), {"n": "5"}, False, id="Gt-equal"),
    pytest.param(sel(None, expr("n", "Gt", "5")), {"n": "abc"}, False, id="Gt-not-a-number"),
    pytest.param(sel(None, expr("n", "Gt", "5")), {}, False, id="Gt-absent"),
    pytest.param(sel(None, expr("n", "Lt", "5")), {"n": "-3"}, True, id="Lt-below"),
    pytest.param(sel(None, expr("n", "Lt", "5")), {"n": "5"}, False, id="Lt-equal"),
    pytest.param(sel(None, expr("n", "Lt", "x")), {"n": "1"}, False, id="Lt-bad-operand"),
    pytest.param(sel({"k": "a"}, expr("j", "Exists")), {"k": "a", "j": "z"}, True, id="labels-and-expressions"),
    pytest.param(sel({"k": "a"}, expr("j", "Exists")), {"k": "a"}, False, id="labels-and-expressions-fail"),
    pytest.param(sel(None, expr("k", "In", "a"), expr("k", "NotIn", "a")), {"k": "a"}, False, id="contradiction"),
]


@pytest.mark.parametrize(("selector", "labels", "expected"), MATCHES)
def test_matches(selector: dict[str, Any] | None, labels: dict[str, str], expected: bool) -> None:
    assert matches(selector, labels) is expected


OVERLAP = [
    pytest.param(sel({"k": "a"}), sel({"k": "b"}), False, id="same-key-different-values"),
    pytest.param(sel({"k": "a"}), sel({"k": "a"}), True, id="same-label"),
    pytest.param(sel(None, expr("k", "Exists")), sel(None, expr("k", "DoesNotExist")), False, id="Exists-vs-DoesNotExist"),
    pytest.param(sel(None, expr("k", "NotIn", "a")), sel({"k": "a"}), False, id="NotIn-vs-matchLabels"),
    pytest.param(sel(None, expr("k", "NotIn", "a")), sel({"k": "b"}), True, id="NotIn-vs-other-value"),
    pytest.param(sel(None, expr("k", "In", "a", "b")), sel(None, expr("k", "In", "b", "c")), True, id="In-sharing-b"),
    pytest.param(sel(None, expr("k", "In", "a")), sel(None, expr("k", "In", "b", "c")), False, id="In-disjoint"),
    pytest.param(sel({"k": "a"}), sel({"j": "b"}), True, id="different-keys"),
    pytest.param({}, sel({"k": "a"}), True, id="empty-vs-any"),
    pytest.param(None, None, True, id="both-absent"),
    pytest.param(sel({"k": "a"}), sel(None, expr("k", "DoesNotExist")), False, id="label-vs-DoesNotExist"),
    pytest.param(sel(None, expr("k", "NotIn", "a")), sel(None, expr("k", "DoesNotExist")), True, id="NotIn-allows-absent"),
    pytest.param(sel(None, expr("k", "NotIn", "a", "b")), sel(None, expr("k", "In", "a", "b")), False, id="NotIn-covers-In"),
    pytest.param(sel(None, expr("k", "NotIn", "a")), sel(None, expr("k", "Exists")), True, id="NotIn-and-Exists"),
    pytest.param(sel(None, expr("k", "In")), sel({}), False, id="In-nothing-is-unsatisfiable"),
    pytest.param(sel({"k": "a", "j": "x"}), sel({"k": "a", "j": "y"}), False, id="second-key-disjoint"),
    pytest.param(sel(None, expr("n", "Gt", "5")), sel(None, expr("n", "Lt", "3")), True, id="Gt-Lt-conservative"),
]


@pytest.mark.parametrize(("a", "b", "expected"), OVERLAP)
def test_may_overlap(a: dict[str, Any] | None, b: dict[str, Any] | None, expected: bool) -> None:
    assert may_overlap(a, b) is expected
    assert may_overlap(b, a) is expected


# ------------------------------------------------------------------ soundness

KEYS = ("k", "j", "n")
VALUES = ("a", "b", "1", "7")
# One more value that selectors never name: the "some other value" a real node might carry.
LABEL_VALUES = (*VALUES, "zz")
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


@st.composite
def expressions(draw: st.DrawFn, with_numeric: bool = True) -> dict[str, Any]:
    op = draw(st.sampled_from(OPERATORS if with_numeric else OPERATORS[:4]))
    key = draw(st.sampled_from(KEYS))
    if op in ("Exists", "DoesNotExist"):
        return expr(key, op)
    if op in ("Gt", "Lt"):
        return expr(key, op, draw(st.sampled_from(("0", "1", "5", "7"))))
    return expr(key, op, *draw(st.lists(st.sampled_from(VALUES), min_size=1, max_size=3)))


def selectors(with_numeric: bool = True) -> st.SearchStrategy[dict[str, Any] | None]:
    return st.one_of(
        st.none(),
        st.builds(
            lambda labels, exprs: sel(labels or None, *exprs),
            st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=2),
            st.lists(expressions(with_numeric), max_size=3),
        ),
    )


label_sets = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(LABEL_VALUES), max_size=len(KEYS))


def every_label_set() -> list[dict[str, str]]:
    """All label sets over KEYS x (absent | LABEL_VALUES): 6**3 = 216 of them."""
    choices = (None, *LABEL_VALUES)
    out = []
    for combo in itertools.product(choices, repeat=len(KEYS)):
        out.append({k: v for k, v in zip(KEYS, combo, strict=True) if v is not None})
    return out


ALL_LABEL_SETS = every_label_set()


@settings(max_examples=400, deadline=None)
@given(selectors(), selectors(), label_sets)
def test_may_overlap_is_sound(a: dict[str, Any] | None, b: dict[str, Any] | None, labels: dict[str, str]) -> None:
    """If some node matches both selectors, they may overlap (no false "disjoint")."""
    if matches(a, labels) and matches(b, labels):
        assert may_overlap(a, b), f"{labels} matches both {a} and {b}"


@settings(max_examples=300, deadline=None)
@given(selectors(), selectors())
def test_may_overlap_is_sound_exhaustively(a: dict[str, Any] | None, b: dict[str, Any] | None) -> None:
    """Same property, checked against every label set of the small alphabet."""
    witness = next((lbl for lbl in ALL_LABEL_SETS if matches(a, lbl) and matches(b, lbl)), None)
    if witness is not None:
        assert may_overlap(a, b), f"{witness} matches both {a} and {b}"


@settings(max_examples=300, deadline=None)
@given(selectors(with_numeric=False), selectors(with_numeric=False))
def test_may_overlap_is_exact_without_gt_lt(a: dict[str, Any] | None, b: dict[str, Any] | None) -> None:
    """Without Gt/Lt the docstring promises an exact answer: disjoint iff no label set matches both."""
    exists = any(matches(a, lbl) and matches(b, lbl) for lbl in ALL_LABEL_SETS)
    assert may_overlap(a, b) is exists


@settings(max_examples=200, deadline=None)
@given(selectors(), selectors())
def test_may_overlap_is_symmetric(a: dict[str, Any] | None, b: dict[str, Any] | None) -> None:
    assert may_overlap(a, b) == may_overlap(b, a)
