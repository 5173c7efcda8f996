"""The value-format table (engine/cgroups/files.py VALUE_FORMATS): what validate lets through for
a file must translate to the host file of either cgroup version, in a format that file takes.
The real kernel judges the same values in tests/test_validate_then_run_properties.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.cgroups.files import VALUE_FORMATS, to_host, value_problem

# Current host values of a fresh cgroup, per version (what to_host reads before translating).
CURRENT = {
    1: {"cpu.cfs_quota_us": "-1", "cpu.cfs_period_us": "100000", "cpu.shares": "1024"},
    2: {"cpu.max": "max 100000", "cpu.weight": "100"},
}

candidates = st.one_of(
    st.sampled_from([w for f in VALUE_FORMATS.values() for w in f.words]),
    st.integers(min_value=-(2**64), max_value=2**64).map(str),
    st.sampled_from(
        ["0", "1", "2", "999", "1000", "10000", "262144", "1000000", str(2**44 - 1), str(2**63 - 1)]
    ),
    st.sampled_from(["0-1", "0,2-3", "3-1", "", "max 100000", "50000 100000", "max 999", "1e3", " 1"]),
)


@settings(max_examples=600, deadline=None)
@given(file=st.sampled_from(sorted(VALUE_FORMATS)), text=candidates)
def test_a_value_the_table_accepts_translates_to_both_versions(file: str, text: str) -> None:
    if value_problem(file, text) is not None:
        return
    for version in (1, 2):
        for host_file, host_text in to_host(file, text, version, CURRENT[version]):
            assert value_problem(host_file, host_text) is None, (file, text, version, host_file, host_text)


@pytest.mark.parametrize(
    ("file", "text", "version", "expected"),
    [
        ("cpu.cfs_quota_us", "max", 1, [("cpu.cfs_quota_us", "-1")]),  # was written as "max": EINVAL
        ("cpu.cfs_quota_us", "max", 2, [("cpu.max", "max 100000")]),  # was a TranslationError
        ("cpu.cfs_quota_us", "-1", 2, [("cpu.max", "max 100000")]),
        ("memory.limit_in_bytes", "max", 1, [("memory.limit_in_bytes", "-1")]),  # v1 reads only -1
        ("memory.limit_in_bytes", "-1", 2, [("memory.max", "max")]),
        ("memory.max", "max", 1, [("memory.limit_in_bytes", "-1")]),
        ("cpu.max", "max", 1, [("cpu.cfs_quota_us", "-1")]),
    ],
)
def test_unlimited_is_spelt_the_way_each_host_file_reads_it(
    file: str, text: str, version: int, expected: list[tuple[str, str]]
) -> None:
    current = {
        **CURRENT[version],
        "cpu.cfs_quota_us": "50000",
        "cpu.max": "50000 100000",
        "memory.max": "1024",
    }
    current["memory.limit_in_bytes"] = "1024"
    assert to_host(file, text, version, current) == expected
