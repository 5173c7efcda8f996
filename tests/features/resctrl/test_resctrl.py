"""resctrl: L3 masks, MB values, schemata text and CLOSID planning (koordinator.md §3.6, katalyst.md
§6.3, ecosystem.md §5.1), checked against the anchors' own test numbers.

Koordinator anchors (koordinator-sh/koordinator):
* ``pkg/koordlet/qosmanager/plugins/resctrl/resctrl_reconcile_test.go``: ``Test_calculateCatL3Schemata``
  (drives ``system.CalculateCatL3MaskValue``) and ``Test_calculateMbaPercentForGroup``.
* ``pkg/koordlet/util/system/resctrl_test.go``: ``TestResctrlSchemataRaw``, ``TestCheckResctrlSchemataValid``.
* ``pkg/koordlet/resourceexecutor/resctrl_updater_test.go``: ``TestNewResctrlL3SchemataResource``,
  ``TestNewResctrlMbSchemataResource``, ``TestNewResctrlSchemataResource``.
Katalyst anchor (kubewharf/katalyst-core): ``pkg/agent/qrm-plugins/mb/plan/types_test.go``
(``TestCCDPlan_ToSchemataInstruction``) and ``mb/allocator/resctrl_allocator.go`` (reset value).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.features.resctrl.strategy import (
    Capabilities,
    GroupRequest,
    ResctrlError,
    changed_lines,
    diff_schemata,
    format_line,
    l3_cbm,
    l3_cbm_union,
    mba_amd,
    mba_amd_from_mbps,
    mba_intel,
    mba_value,
    parse_schemata,
    plan_groups,
)
from engine.model.facts import ResctrlInfo

# ---------------------------------------------------------------- L3 CBM


@pytest.mark.parametrize(
    ("cbm", "start", "end", "want"),
    [
        (0xFF, 0, 100, "ff"),  # "calculate l3 schemata correctly"
        (0x3FF, 10, 80, "fe"),  # "... correctly 1"
        (0x7FF, 10, 50, "3c"),  # "... correctly 2"
        (0x3FF, 0, 30, "7"),  # "... correctly 3"
        (0x3FF, 10, 85, "1fe"),  # "... correctly 4"
        (0x7FF, 0, 30, "f"),  # the worked example in CalculateCatL3MaskValue's comment
        ("7ff", 0, 100, "7ff"),  # cbm as read from info/L3/cbm_mask
        ("0x000fffff", 0, 35, "7f"),  # 20 ways: ⌈7⌉ = 7 bits
    ],
)
def test_l3_mask_matches_koordinator(cbm: int | str, start: int, end: int, want: str) -> None:
    """Test_calculateCatL3Schemata, the successful rows."""
    got = l3_cbm(cbm, start, end)
    assert got.mask == want
    assert got.value == int(want, 16)
    assert got.notes == ()


@pytest.mark.parametrize(
    ("cbm", "start", "end", "message"),
    [
        (0, 0, 0, "illegal cbm_mask 0"),  # "do not panic but throw an error for empty input"
        (0x101, 0, 100, "illegal cbm_mask 101"),  # "cbm value is invalid"
        (4, 0, 100, "illegal cbm_mask 4"),  # "cbm value is invalid 1"
        (0xFF, -10, 100, "illegal L3 range [-10, 100]"),  # "percent value is invalid"
        (0xFF, 30, 30, "illegal L3 range [30, 30]"),  # "percent value is invalid 1"
        (0xFF, 0, 101, "illegal L3 range"),  # own: end above 100
        ("zz", 0, 100, "not hexadecimal"),  # own: unreadable cbm_mask
        (0xFF, float("nan"), 100, "finite"),  # own: NaN from a bad template
    ],
)
def test_l3_mask_errors(cbm: int | str, start: float, end: float, message: str) -> None:
    """Test_calculateCatL3Schemata, the wantErr rows, plus own edge cases."""
    with pytest.raises(ResctrlError, match=message.replace("[", r"\[").replace("]", r"\]")):
        l3_cbm(cbm, start, end)


@pytest.mark.parametrize(
    ("cbm", "start", "end", "min_bits", "want", "note"),
    [
        # 11 ways, [0, 10] -> ⌈1.1⌉ = 2 ways; min 4 widens upward.
        (0x7FF, 0, 10, 4, "f", "widened upward"),
        # 11 ways, [95, 100] -> ways [11, 11): empty; min 2 at the top widens downward to [9, 11).
        (0x7FF, 95, 100, 2, "600", "widened downward"),
        # 10 ways, [1, 5] -> ways [1, 1): empty even with min_cbm_bits 1.
        (0x3FF, 1, 5, 1, "2", "widened upward"),
        # min_cbm_bits 0 (some AMD parts) still gives at least one way.
        (0x3FF, 1, 5, 0, "2", "widened upward"),
        # already wide enough: unchanged, no note.
        (0x7FF, 10, 50, 2, "3c", ""),
    ],
)
def test_min_cbm_bits(cbm: int, start: int, end: int, min_bits: int, want: str, note: str) -> None:
    got = l3_cbm(cbm, start, end, min_cbm_bits=min_bits)
    assert got.mask == want
    assert (note in " ".join(got.notes)) if note else got.notes == ()


def test_min_cbm_bits_above_ways_is_an_error() -> None:
    with pytest.raises(ResctrlError, match="min_cbm_bits 12 exceeds the 11 ways"):
        l3_cbm(0x7FF, 0, 100, min_cbm_bits=12)


def test_union_of_ranges() -> None:
    # [0, 20] + [60, 80] of 10 ways = ways [0, 2) and [6, 8): two runs.
    with pytest.raises(ResctrlError, match=r"c3 with 2 separate runs.*sparse_masks"):
        l3_cbm_union(0x3FF, [(0, 20), (60, 80)])
    sparse = l3_cbm_union(0x3FF, [(0, 20), (60, 80)], sparse_masks=True)
    assert (sparse.mask, sparse.runs) == ("c3", ((0, 2), (6, 8)))
    # Overlapping ranges merge into one run and need no sparse support.
    merged = l3_cbm_union(0x3FF, [(0, 30), (20, 50)])
    assert (merged.mask, merged.runs) == ("1f", ((0, 5),))
    with pytest.raises(ResctrlError, match="no L3 ranges"):
        l3_cbm_union(0x3FF, [])


def _go_reference(cbm: int, start: int, end: int) -> int:
    """CalculateCatL3MaskValue as written in Go (float64 ceil)."""
    ways = float(cbm.bit_length())
    start_way = math.ceil(ways * float(start) / 100)
    end_way = math.ceil(ways * float(end) / 100)
    return (1 << end_way) - (1 << start_way)


percent_ranges = st.tuples(st.integers(0, 100), st.integers(0, 100)).filter(lambda r: r[0] < r[1])


@settings(max_examples=400, deadline=None)
@given(ways=st.integers(1, 32), data=st.data(), rng=percent_ranges)
def test_cbm_properties(ways: int, data: st.DataObject, rng: tuple[int, int]) -> None:
    """Always inside cbm_mask, contiguous, at least min_cbm_bits (and 1) set; and whenever the range
    is already wide enough, exactly Koordinator's value."""
    cbm = (1 << ways) - 1
    min_bits = data.draw(st.integers(0, ways))
    got = l3_cbm(cbm, *rng, min_cbm_bits=min_bits)
    assert got.value & ~cbm == 0
    shifted = got.value >> ((got.value & -got.value).bit_length() - 1)
    assert shifted & (shifted + 1) == 0  # one block of 1 bits
    assert bin(got.value).count("1") >= max(min_bits, 1)
    reference = _go_reference(cbm, *rng)
    if bin(reference).count("1") >= max(min_bits, 1):
        assert got.value == reference and got.notes == ()


@settings(max_examples=300, deadline=None)
@given(
    ways=st.integers(1, 32),
    data=st.data(),
    ranges=st.lists(percent_ranges, min_size=1, max_size=4),
    sparse=st.booleans(),
)
def test_cbm_union_properties(
    ways: int, data: st.DataObject, ranges: list[tuple[int, int]], sparse: bool
) -> None:
    """Union masks: inside cbm_mask, each run at least min_cbm_bits, contiguous unless sparse."""
    cbm = (1 << ways) - 1
    min_bits = data.draw(st.integers(0, ways))
    try:
        got = l3_cbm_union(cbm, ranges, min_cbm_bits=min_bits, sparse_masks=sparse)
    except ResctrlError as err:
        assert not sparse and "separate runs" in str(err)
        return
    assert got.value & ~cbm == 0
    assert sparse or len(got.runs) == 1
    assert all(end - start >= max(min_bits, 1) for start, end in got.runs)
    assert sum(end - start for start, end in got.runs) == bin(got.value).count("1")


# ---------------------------------------------------------------- MB


@pytest.mark.parametrize(
    ("vendor", "percent", "want"),
    [
        ("intel", 85, 90),  # "mbPercent value is invalid, not multiple of 10"
        ("intel", 80, 80),  # "mbPercent value is valid on intel"
        ("amd", 80, int(0.8 * 160)),  # "mbPercent value is valid on amd" = 128
        ("amd", 100, 2048),  # "mbPercent value is unlimited on amd"
        ("amd", 33, 52),  # own: int(160 × 33 / 100) = int(52.8)
    ],
)
def test_mba_matches_koordinator(vendor: str, percent: int, want: int) -> None:
    """Test_calculateMbaPercentForGroup, the rows that write a value."""
    caps = Capabilities(num_closids=16, vendor=vendor, cache_ids=(0,), mb_domains=(0,))
    assert mba_value(percent, caps).value == want


@pytest.mark.parametrize("percent", [0, 101, -5, float("inf")])
def test_mba_out_of_range(percent: float) -> None:
    """Test_calculateMbaPercentForGroup "not between (0,100]": Koordinator skips, qosd refuses loudly."""
    with pytest.raises(ResctrlError, match=r"MB percent|finite"):
        mba_intel(percent)
    with pytest.raises(ResctrlError):
        mba_amd(percent)


@pytest.mark.parametrize(
    ("percent", "gran", "min_bw", "want"),
    [
        (95, 10, 10, 100),
        (100, 10, 10, 100),
        (5, 10, 10, 10),  # below min_bandwidth
        (5, 1, 10, 10),
        (37, 1, 10, 37),  # gran 1: exact
        (99, 20, 10, 100),  # gran 20: 100
        (71, 30, 10, 90),
        (91, 30, 10, 100),  # 120 capped at 100
        (12.5, 5, 10, 15),
    ],
)
def test_mba_intel_granularity(percent: float, gran: int, min_bw: int, want: int) -> None:
    assert mba_intel(percent, bandwidth_gran=gran, min_bandwidth=min_bw).value == want


@pytest.mark.parametrize(
    ("mbps", "want"), [(4_000, 32), (4_500, 36), (256_000, 2048), (0, 0), (1, 1), (125, 1)]
)
def test_katalyst_amd_units(mbps: int, want: int) -> None:
    """TestCCDPlan_ToSchemataInstruction (4000 -> 32, 4500 -> 36) and the reset value 256000 -> 2048."""
    assert mba_amd_from_mbps(mbps) == want


def test_katalyst_amd_line() -> None:
    """TestCCDPlan_ToSchemataInstruction writes "MB:0=32;2=36;\\n"; qosd writes the same without ';'."""
    assert format_line("MB", {0: mba_amd_from_mbps(4_000), 2: mba_amd_from_mbps(4_500)}) == "MB:0=32;2=36"
    with pytest.raises(ResctrlError):
        mba_amd_from_mbps(-1)


# ---------------------------------------------------------------- schemata


@pytest.mark.parametrize(
    ("resource", "domains", "want"),
    [
        ("L3", {0: 0xF}, "L3:0=f"),  # "new l3 schemata": "L3:0=f;\n"
        ("MB", {0: 90}, "MB:0=90"),  # "new mba schemata": "MB:0=90;\n"
        ("L3", {1: 0xFFF, 0: 0xFFF}, "L3:0=fff;1=fff"),  # "new l3 with mba schemata"
        ("MB", {0: 100, 1: 100}, "MB:0=100;1=100"),
        ("L3", {0: 0xFFF, 8: 0xFFF}, "L3:0=fff;8=fff"),  # "non-contiguous cache ids"
        ("MB", {8: 100, 0: 100}, "MB:0=100;8=100"),
        ("L3", {0: "3c", 1: "3c"}, "L3:0=3c;1=3c"),  # TestNewResctrlL3SchemataResource: "L3:0=3c;1=3c;\n"
    ],
)
def test_format_line(resource: str, domains: dict[int, int | str], want: str) -> None:
    """TestResctrlSchemataRaw and resctrl_updater_test.go, minus Koordinator's trailing ';\\n'."""
    assert format_line(resource, domains) == want


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("", {}),  # "check failed when schemata content is empty"
        ("MB:0=100;1=100", {"MB": {0: "100", 1: "100"}}),  # "... missing L3 CAT"
        ("MB:0=100;1=100\nL3:0=fff;1=fff", {"MB": {0: "100", 1: "100"}, "L3": {0: "fff", 1: "fff"}}),
        (
            "    L3:0=ffff;1=ffff;2=ffff;3=ffff;4=ffff\n    MB:0=2048;1=2048;2=2048;3=2048;4=2048",
            {"L3": dict.fromkeys(range(5), "ffff"), "MB": dict.fromkeys(range(5), "2048")},
        ),  # "check successfully when schemata content is valid 1" (AMD)
        ("L3:0=03f;1=03f;\nMB:0= 50;1=100\n", {"L3": {0: "03f", 1: "03f"}, "MB": {0: "50", 1: "100"}}),
        ("garbage\nL3:x=1;0=f\n", {"L3": {0: "f"}}),
    ],
)
def test_parse_schemata(text: str, want: dict[str, dict[int, str]]) -> None:
    """TestCheckResctrlSchemataValid inputs (and kernel padding: zero-padded masks, spaced MB)."""
    assert parse_schemata(text) == want


BE_CURRENT = "    L3:0=f;1=f\n    MB:0=100;1=100"  # testingPrepareResctrlL3CatGroups: BE group


@pytest.mark.parametrize(
    ("current", "desired", "want"),
    [
        # TestNewResctrlSchemataResource test_all_schemata: "L3:0=f;1=f\nMB:0=60;1=60" onto BE.
        (BE_CURRENT, {"L3": "0=f;1=f", "MB": "0=60;1=60"}, ["MB:0=60;1=60"]),
        # TestNewResctrlL3SchemataResource: "3c" on both caches.
        (BE_CURRENT, {"L3": "0=3c;1=3c"}, ["L3:0=3c;1=3c"]),
        # TestNewResctrlMbSchemataResource: "90" on both domains.
        (BE_CURRENT, {"MB": "0=90;1=90"}, ["MB:0=90;1=90"]),
        # test_MB_resource: root holds only MB.
        ("    MB:0=10;1=10", {"MB": "0=20;1=20"}, ["MB:0=20;1=20"]),
        # In sync: nothing to write (a steady state writes nothing).
        (BE_CURRENT, {"L3": "0=f;1=f", "MB": "0=100;1=100"}, []),
        # The kernel reads masks back zero-padded and MB space-padded: still in sync.
        ("L3:0=03f;1=03f\nMB:0= 50;1=100", {"L3": "0=3f;1=3f", "MB": "0=50;1=100"}, []),
        # Only the changed domain is written.
        ("L3:0=03f;1=03f\nMB:0= 50;1=100", {"L3": "0=3f;1=3f", "MB": "0=50;1=50"}, ["MB:1=50"]),
        # A new group (no schemata yet): everything, L3 first; trailing ';' in desired is fine.
        ("", {"MB": "0=100;", "L3": "0=7ff;"}, ["L3:0=7ff", "MB:0=100"]),
        # Lines qosd does not manage are left alone.
        ("L3:0=ff\nSMBA:0=2048", {"L3": "0=ff"}, []),
    ],
)
def test_changed_lines(current: str, desired: dict[str, str], want: list[str]) -> None:
    """resctrl_updater.go UpdateResctrlSchemataFunc skips equal schemata; qosd also narrows to domains."""
    assert changed_lines(current, desired) == want


def test_diff_schemata_unparsable_current_value_counts_as_changed() -> None:
    assert diff_schemata({"L3": {0: "zz"}}, {"L3": {0: "f"}}) == {"L3": {0: "f"}}
    assert diff_schemata({"X": {0: "a"}}, {"X": {0: "a "}}) == {}


# ---------------------------------------------------------------- group planning

INTEL = Capabilities(num_closids=16, cbm_mask="7ff", cache_ids=(0, 1), mb_domains=(0, 1))


def test_koordinator_default_groups() -> None:
    """koordinator.md §2.2 resctrlQOS defaults: LSR/LS 0–100 / 100, BE 0–30 / 100, on 0x7ff ×2 caches."""
    plan = plan_groups(
        [
            GroupRequest("LSR", (0, 100), 100, "LSR"),
            GroupRequest("LSR", (0, 100), 100, "LSE"),  # LSE maps onto the LSR group
            GroupRequest("LS", (0, 100), 100, "LS"),
            GroupRequest("BE", (0, 30), 100, "BE"),
        ],
        INTEL,
    )
    assert plan.rejected == () and plan.error() == ""
    assert [g.group for g in plan.groups] == ["LSR", "LS", "BE"]
    assert plan.by_name["LSR"].sources == ("LSR", "LSE")
    assert dict(plan.by_name["BE"].schemata) == {"L3": "0=f;1=f", "MB": "0=100;1=100"}
    assert dict(plan.by_name["LS"].schemata) == {"L3": "0=7ff;1=7ff", "MB": "0=100;1=100"}
    assert plan.capacity == 15


def test_groups_beyond_closids_are_reported_not_fatal() -> None:
    caps = Capabilities(num_closids=4, cbm_mask="ff", cache_ids=(0,), mb_domains=(0,))
    plan = plan_groups(
        [GroupRequest(g, (0, 50), None, f"class-{g}") for g in ("a", "b", "c", "d")],
        caps,
        existing={"foreign"},
    )
    assert plan.capacity == 2
    assert [g.group for g in plan.groups] == ["a", "b"]
    assert [r.group for r in plan.rejected] == ["c", "d"]
    assert "no CLOSID left: num_closids=4" in plan.rejected[0].reason
    assert "foreign" in plan.rejected[0].reason
    assert "resctrl group c (class-c)" in plan.error()


def test_existing_groups_keep_their_closid() -> None:
    caps = Capabilities(num_closids=3, cbm_mask="ff", cache_ids=(0,))
    plan = plan_groups(
        [GroupRequest("new1", (0, 50)), GroupRequest("old", (0, 50)), GroupRequest("new2", (0, 50))],
        caps,
        existing={"old"},
    )
    assert [g.group for g in plan.groups] == ["new1", "old"]
    assert [r.group for r in plan.rejected] == ["new2"]


def test_root_group_uses_closid_zero() -> None:
    caps = Capabilities(num_closids=2, cbm_mask="ff", cache_ids=(0,))
    plan = plan_groups(
        [GroupRequest("/", (0, 100)), GroupRequest("a", (0, 50)), GroupRequest("b", (0, 50))], caps
    )
    assert [g.group for g in plan.groups] == ["/", "a"]
    assert [r.group for r in plan.rejected] == ["b"]


@pytest.mark.parametrize(
    ("request_", "reason"),
    [
        (GroupRequest("../etc", (0, 50)), "not a plain directory name"),
        (GroupRequest("info", (0, 50)), "reserved"),
        (GroupRequest("", (0, 50)), "not a plain directory name"),
        (GroupRequest("bad", (50, 10)), "illegal L3 range"),
        (GroupRequest("bad", None, 0), "outside (0, 100]"),
    ],
)
def test_bad_groups_are_rejected_alone(request_: GroupRequest, reason: str) -> None:
    plan = plan_groups([request_, GroupRequest("good", (0, 30), 50)], INTEL)
    assert [g.group for g in plan.groups] == ["good"]
    assert len(plan.rejected) == 1 and reason in plan.rejected[0].reason


def test_conflicting_settings_for_one_group() -> None:
    plan = plan_groups(
        [GroupRequest("BE", (0, 30), 100, "be"), GroupRequest("BE", (0, 50), 100, "batch")], INTEL
    )
    assert [g.sources for g in plan.groups] == [("be",)]
    assert "conflicts with be" in plan.rejected[0].reason and "batch" in plan.rejected[0].reason


def test_not_mounted_rejects_everything() -> None:
    plan = plan_groups([GroupRequest("BE", (0, 30))], Capabilities.from_info(ResctrlInfo(mounted=False)))
    assert plan.groups == () and "not mounted" in plan.rejected[0].reason


def test_degrades_to_what_the_node_offers() -> None:
    no_mb = Capabilities(num_closids=8, cbm_mask="ff", cache_ids=(0,))
    plan = plan_groups([GroupRequest("BE", (0, 30), 50)], no_mb)
    assert dict(plan.groups[0].schemata) == {"L3": "0=7"}
    assert any("MBA is not offered" in n for n in plan.groups[0].notes)
    no_l3 = Capabilities(num_closids=8, mb_domains=(0, 1))
    plan = plan_groups([GroupRequest("BE", (0, 30), 45)], no_l3)
    assert dict(plan.groups[0].schemata) == {"MB": "0=50;1=50"}
    assert any("L3 CAT is not offered" in n for n in plan.groups[0].notes)


def test_amd_and_shareable_bits() -> None:
    caps = Capabilities(
        num_closids=16,
        cbm_mask="ffff",
        shareable_bits="c000",
        vendor="amd",
        cache_ids=(0, 8),
        mb_domains=(0, 8),
    )
    plan = plan_groups([GroupRequest("BE", (50, 100), 80)], caps)
    group = plan.groups[0]
    assert dict(group.schemata) == {"L3": "0=ff00;8=ff00", "MB": "0=128;8=128"}
    assert any("shareable_bits c000" in n for n in group.notes)


def test_capabilities_from_snapshot_info() -> None:
    info = ResctrlInfo(
        mounted=True,
        cbm_mask="7ff",
        min_cbm_bits=2,
        num_closids=15,
        mb_granularity=10,
        mb_min=10,
        vendor="AuthenticAMD",
        cache_ids=(0, 1),
        mb_domains=(0, 1),
        sparse_masks=True,
    )
    caps = Capabilities.from_info(info)
    assert (caps.vendor, caps.num_closids, caps.min_cbm_bits, caps.sparse_masks) == ("amd", 15, 2, True)
    assert caps.has_l3 and caps.has_mb
    with pytest.raises(ResctrlError, match="vendor"):
        Capabilities(num_closids=1, vendor="GenuineIntel")
