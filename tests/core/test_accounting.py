"""Exact tests of the lesson's arithmetic (the allocator/accounting/ package) and its CLI.

Every figure is checked against the section of assets/reference_figures.md it comes from
(R1-R6), or the PagedAttention paper (Kwon et al., SOSP 2023) by section.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator import accounting as acc
from allocator.common.errors import FieldError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
R1_LENGTHS = [5, 9, 17]                      # reference figures R1-R2
R4_LENGTHS = [512, 37, 1900, 128, 4]         # reference figure R4


# ---------------------------------------------------------------------------------------------
# R1-R3: three short requests, metadata cost, a shared prefix
# ---------------------------------------------------------------------------------------------

def test_r1_reserve_max_96_slots_65_unused():
    """R1: 5, 9, 17 tokens, 32 reserved each -> 96 slots, 65 unused."""
    tally = acc.reserve_max_slots(R1_LENGTHS, 32)
    assert tally.used_tokens == 31
    assert tally.allocated_slots == 96
    assert tally.unused_slots == 65


@pytest.mark.parametrize("block, slots, unused, blocks", [
    (4, 40, 9, [2, 3, 5]), (8, 48, 17, [1, 2, 3]), (16, 64, 33, [1, 1, 2])])
def test_r1_paged_slots(block, slots, unused, blocks):
    """R1: blocks of 4/8/16 -> 40/48/64 slots, 9/17/33 unused."""
    tally = acc.paged_slots(R1_LENGTHS, block)
    assert tally.allocated_slots == slots
    assert tally.unused_slots == unused
    assert tally.blocks_per_request == blocks
    assert tally.blocks == sum(blocks)


@pytest.mark.parametrize("c, best, cost", [(0, 1, 31), (0.25, 2, 38.25), (1, 4, 50), (4, 8, 72)])
def test_r2_best_block_size_with_metadata_cost(c, best, cost):
    """R2: best block size 1/2/4/8 at c = 0/0.25/1/4, costs 31/38.25/50/72,
    over the tested powers of two 1..32 — and the answer is the same over 1..256."""
    assert acc.best_block_size(R1_LENGTHS, c, acc.R2_CANDIDATES) == (best, cost)
    assert acc.best_block_size(R1_LENGTHS, c) == (best, cost)


def test_r2_block_size_table_rows():
    """R2: the table behind the optimum at c = 1 (one best row)."""
    rows = acc.block_size_table(R1_LENGTHS, 1, acc.R2_CANDIDATES)
    assert [r.block_size for r in rows] == [1, 2, 4, 8, 16, 32]
    assert [r.allocated_slots for r in rows] == [31, 34, 40, 48, 64, 96]
    assert [r.unused_slots for r in rows] == [0, 3, 9, 17, 33, 65]
    assert [r.blocks for r in rows] == [31, 17, 10, 6, 4, 3]
    assert [r.total_cost for r in rows] == [62, 51, 50, 54, 68, 99]
    assert [r.is_best for r in rows] == [False, False, True, False, False, False]


def test_best_block_size_tie_goes_to_smaller_block():
    # one 8-token request at c = 0: sizes 1, 2, 4, 8 all cost 8 slots.
    assert acc.best_block_size([8], 0, [8, 4, 2, 1]) == (1, 8)


def test_r3_prefix_sharing_three_quantities():
    """R3: lengths 20 and 23, 8-token prefix, blocks of 4 -> 44 slots
    separately, 36 shared, 43 logical tokens."""
    ps = acc.prefix_sharing(20, 23, 8, 4)
    assert ps.logical_tokens == 43
    assert ps.slots_unshared == 44
    assert ps.slots_shared == 36
    assert ps.shared_blocks == 2
    assert ps.saved_slots == 8


@pytest.mark.parametrize("prefix, saved", [(0, 0), (3, 0), (4, 4), (7, 4), (8, 8), (11, 8),
                                           (12, 12), (20, 20)])
def test_r3_each_full_prefix_block_saves_four_slots(prefix, saved):
    """R3: each additional complete 4-token prefix block shared saves four
    physical slots; a partly filled prefix block is not shared."""
    ps = acc.prefix_sharing(20, 23, prefix, 4)
    assert ps.saved_slots == saved
    assert ps.slots_shared == 44 - saved
    assert ps.logical_tokens == 43          # sharing never changes the logical count


# ---------------------------------------------------------------------------------------------
# R4: five requests against a 2,048-token maximum
# ---------------------------------------------------------------------------------------------

def test_r4_reserve_max_10240_and_74_8_percent():
    """R4: 5 x 2048 = 10,240 slots; waste 1 - 2581/10240 = 74.8 %."""
    tally = acc.reserve_max_slots(R4_LENGTHS, 2048)
    assert tally.used_tokens == 2581
    assert tally.allocated_slots == 10_240
    assert round(100 * tally.waste_fraction, 1) == 74.8


def test_r4_paged_2608_and_1_0_percent():
    """R4: blocks of 16 -> 2,608 slots, waste 1 - 2581/2608 = 1.0 %."""
    tally = acc.paged_slots(R4_LENGTHS, 16)
    assert tally.blocks_per_request == [32, 3, 119, 8, 1]
    assert tally.allocated_per_request == [512, 48, 1904, 128, 16]
    assert tally.unused_per_request == [0, 11, 4, 0, 12]
    assert tally.allocated_slots == 2608
    assert round(100 * tally.waste_fraction, 1) == 1.0


def test_r4_pool_of_40960_slots_fits_20_vs_78():
    """R4: floor(40960 / (10240/5)) = 20, floor(40960 / (2608/5)) = 78,
    about 3.9x."""
    cap = acc.slot_pool_capacity(R4_LENGTHS, 2048, 16, 40_960)
    assert cap.fit_reserve == 20
    assert cap.fit_paged == 78
    assert round(cap.paged_gain, 1) == 3.9
    assert cap.reserved_bytes == 2048               # bytes_per_token = 1: "bytes" are slots
    assert cap.paged_slots == pytest.approx(2608 / 5)


# ---------------------------------------------------------------------------------------------
# R5-R6: bytes and capacity (and Kwon et al. 2023)
# ---------------------------------------------------------------------------------------------

def test_r5_kv_bytes_per_token_7b_fp16_is_512_kib():
    """R5: "512 KB" per token for a 7B fp16 model = 512 KiB (binary)."""
    bpt = acc.PRESETS["7b-fp16"].bytes_per_token
    assert bpt == acc.kv_bytes_per_token(32, 32, 128, 2) == 524_288 == 512 * acc.KIB
    assert acc.format_bytes(bpt) == "512 KiB"


def test_r6_llama3_70b_320_kib_and_640_mib():
    """R6: Llama 3 70B is 320 KiB per slot; 2048 slots = 640 MiB."""
    bpt = acc.PRESETS["llama3-70b"].bytes_per_token
    assert bpt == 80 * 8 * 128 * 2 * 2 == 320 * acc.KIB
    assert 2048 * bpt == 640 * acc.MIB
    assert acc.format_bytes(2048 * bpt) == "640 MiB"


def test_opt13b_800_kib_per_token():
    """Kwon et al. 2023 (PagedAttention): OPT-13B 800 KB per token = 819,200 bytes = 800 KiB."""
    bpt = acc.PRESETS["opt-13b"].bytes_per_token
    assert bpt == 819_200 == 800 * acc.KIB
    assert acc.format_bytes(bpt) == "800 KiB"


def test_r5_capacity_figures():
    """R5: 1 GB (= 1 GiB) per 2048-token reservation; 66 GB free -> 66
    sequences; 350 tokens used = 175 MB (= 175 MiB), 83 % waste; paged at 16: 22 blocks = 352
    slots, 2 wasted (against 1698 reserved and unused); 384 sequences paged; twice the memory
    gives 132 under reserve-max."""
    cap = acc.capacity(acc.PRESETS["7b-fp16"].bytes_per_token, 66 * acc.GIB, 2048, 350, 16)
    assert cap.reserved_bytes == acc.GIB
    assert cap.fit_reserve == 66
    assert cap.used_bytes == 175 * acc.MIB
    assert round(100 * cap.waste_fraction_reserve) == 83
    assert cap.reserved_slots - cap.mean_tokens == 1698
    assert cap.paged_blocks == 22
    assert cap.paged_slots == 352
    assert cap.paged_unused_slots == 2
    assert cap.paged_bytes == 176 * acc.MIB
    # 66 GiB / (352 slots x 512 KiB) = 67584 MiB / 176 MiB = 384 exactly.
    assert cap.fit_paged == 384
    assert cap.fit_reserve_double == 132
    assert cap.fit_paged_double == 768


def test_r5_reservation_ignores_actual_length():
    """R5: the card holds 66 whether requests average 2048 or 350."""
    bpt = acc.PRESETS["7b-fp16"].bytes_per_token
    for mean in (2048, 350, 1):
        assert acc.capacity(bpt, 66 * acc.GIB, 2048, mean, 16).fit_reserve == 66
    curve = acc.fit_curve(bpt, 66 * acc.GIB, 2048, 16, [2048, 350, 16])
    assert curve["fit_reserve"].tolist() == [66, 66, 66]
    assert curve["fit_paged"].tolist() == [66, 384, 8448]


def test_reserve_max_capacity_matches_capacity():
    fixed = acc.reserve_max_capacity(512 * acc.KIB, 66 * acc.GIB, 2048)
    assert fixed == {"reserved_slots": 2048, "reserved_bytes": acc.GIB, "fit_reserve": 66,
                     "fit_reserve_double": 132}


def test_capacity_with_list_of_lengths_in_bytes():
    """A list form in real bytes: R4's requests at 7B fp16 rates in 20 GiB."""
    bpt = 512 * acc.KIB
    cap = acc.capacity(bpt, 20 * acc.GIB, 2048, R4_LENGTHS, 16)
    assert cap.fit_reserve == 20
    assert cap.fit_paged == (20 * acc.GIB * 5) // (2608 * bpt) == 78
    assert cap.mean_tokens == pytest.approx(2581 / 5)


def test_units_are_binary():
    assert acc.format_bytes(acc.GIB) == "1 GiB"
    assert acc.format_bytes(175 * acc.MIB) == "175 MiB"
    assert acc.format_bytes(1536) == "1.5 KiB"
    assert acc.format_bytes(1000) == "1,000 bytes"
    assert acc.format_bytes(acc.GIB, "MiB") == "1,024 MiB"
    assert acc.gib_to_bytes(66) == 66 * 2 ** 30
    assert acc.bytes_in_units(acc.MIB) == {"bytes": acc.MIB, "KiB": 1024.0, "MiB": 1.0,
                                           "GiB": 1 / 1024}


# ---------------------------------------------------------------------------------------------
# Errors: every bad input is a FieldError with the input's .field (and .index for a list entry)
# ---------------------------------------------------------------------------------------------

NAN, INF = float("nan"), float("inf")

#: (call, field, index, exact message) for every bad-input path of the accounting package.
BAD_INPUTS = [
    # units
    (lambda: acc.format_bytes(1, "kB"), "unit", None,
     "unit = 'kB' must be one of bytes, KiB, MiB, GiB"),
    # slots: the lengths list and its entries
    (lambda: acc.validate_lengths(None), "lengths", None,
     "lengths must be a list of whole numbers of tokens"),
    (lambda: acc.validate_lengths("5,9"), "lengths", None,
     "lengths must be a list of whole numbers of tokens"),
    (lambda: acc.validate_lengths(5), "lengths", None,
     "lengths must be a list of whole numbers of tokens"),
    (lambda: acc.paged_slots([], 4), "lengths", None,
     "lengths is empty: give at least one request length (tokens)"),
    (lambda: acc.paged_slots([5, -9], 4), "lengths", 1, "lengths[1] = -9 must be at least 1"),
    (lambda: acc.paged_slots([5, 9, 0], 4), "lengths", 2, "lengths[2] = 0 must be at least 1"),
    (lambda: acc.paged_slots([5, 2.5], 4), "lengths", 1, "lengths[1] = 2.5 is not a whole number"),
    (lambda: acc.paged_slots([5, INF], 4), "lengths", 1, "lengths[1] = inf is not a whole number"),
    (lambda: acc.paged_slots([5, None], 4), "lengths", 1,
     "lengths[1] is empty: enter a whole number (at least 1)"),
    (lambda: acc.paged_slots([NAN], 4), "lengths", 0,
     "lengths[0] is empty: enter a whole number (at least 1)"),
    (lambda: acc.paged_slots([5, "x"], 4), "lengths", 1, "lengths[1] = 'x' is not a number"),
    (lambda: acc.paged_slots([5, True], 4), "lengths", 1, "lengths[1] = true is not a number"),
    (lambda: acc.validate_lengths([1, 0], "share"), "share", 1, "share[1] = 0 must be at least 1"),
    (lambda: acc.parse_lengths(""), "lengths", None,
     "lengths is empty: give at least one request length (tokens)"),
    (lambda: acc.parse_lengths("5,,17"), "lengths", 1,
     "lengths[1] is empty: enter a whole number (at least 1)"),
    (lambda: acc.parse_lengths("5,abc"), "lengths", 1, "lengths[1] = 'abc' is not a number"),
    (lambda: acc.parse_lengths("5,9,2.5"), "lengths", 2, "lengths[2] = 2.5 is not a whole number"),
    (lambda: acc.parse_lengths("4,x", "candidates"), "candidates", 1,
     "candidates[1] = 'x' is not a number"),
    (lambda: acc.paged_slots([5, 9], 0), "block_size", None, "block_size = 0 must be at least 1"),
    (lambda: acc.paged_slots([5, 9], 1.5), "block_size", None,
     "block_size = 1.5 is not a whole number"),
    (lambda: acc.reserve_max_slots([5, 9, 40], 32), "lengths", 2,
     "lengths[2] = 40 is above the reserve maximum (32 slots): raise reserve or shorten the "
     "request"),
    (lambda: acc.reserve_max_slots([5], 0), "reserve", None, "reserve = 0 must be at least 1"),
    (lambda: acc.reserve_max_slots([5], "x"), "reserve", None, "reserve = 'x' is not a number"),
    # block size and its metadata cost
    (lambda: acc.block_size_table([5], -1), "metadata_cost", None,
     "metadata_cost = -1 must not be negative"),
    (lambda: acc.block_size_table([5], NAN), "metadata_cost", None,
     "metadata_cost = nan is not a finite number"),
    (lambda: acc.block_size_table([5], INF), "metadata_cost", None,
     "metadata_cost = inf is not a finite number"),
    (lambda: acc.best_block_size([5], "c"), "metadata_cost", None,
     "metadata_cost = 'c' is not a number"),
    (lambda: acc.block_size_table([5], 1, None), "candidates", None,
     "candidates must be a list of block sizes (slots per block)"),
    (lambda: acc.block_size_table([5], 1, []), "candidates", None,
     "candidates is empty: give at least one block size (slots per block)"),
    (lambda: acc.block_size_table([5], 1, [4, 0]), "candidates", 1,
     "candidates[1] = 0 must be at least 1"),
    (lambda: acc.validate_candidates([4, 2.5]), "candidates", 1,
     "candidates[1] = 2.5 is not a whole number"),
    # prefix sharing
    (lambda: acc.prefix_sharing(20, 23, 24, 4), "prefix_tokens", None,
     "prefix_tokens = 24 is longer than the shorter request (20 tokens)"),
    (lambda: acc.prefix_sharing(20, 23, -1, 4), "prefix_tokens", None,
     "prefix_tokens = -1 must be at least 0"),
    (lambda: acc.prefix_sharing(0, 23, 8, 4), "length_a", None, "length_a = 0 must be at least 1"),
    (lambda: acc.prefix_sharing(20, 2.5, 8, 4), "length_b", None,
     "length_b = 2.5 is not a whole number"),
    (lambda: acc.prefix_sharing(20, 23, 8, 0), "block_size", None,
     "block_size = 0 must be at least 1"),
    # bytes per token and presets
    (lambda: acc.kv_bytes_per_token(0, 8, 128, 2), "layers", None, "layers = 0 must be at least 1"),
    (lambda: acc.kv_bytes_per_token(80, 0, 128, 2), "kv_heads", None,
     "kv_heads = 0 must be at least 1"),
    (lambda: acc.kv_bytes_per_token(80, 8, None, 2), "head_dim", None,
     "head_dim is empty: enter a whole number (at least 1)"),
    (lambda: acc.kv_bytes_per_token(80, 8, 128, 0), "bytes_per_element", None,
     "bytes_per_element = 0 must be at least 1"),
    (lambda: acc.model_config("gpt-9"), "model", None,
     "model = 'gpt-9' is not a preset; choose one of 7b-fp16, llama3-8b, llama3-70b, opt-13b"),
    (lambda: acc.model_config(["7b-fp16"]), "model", None,
     "model = ['7b-fp16'] is not a preset; choose one of 7b-fp16, llama3-8b, llama3-70b, opt-13b"),
    # capacity
    (lambda: acc.gib_to_bytes(-1), "free_gib", None, "free_gib = -1 must not be negative"),
    (lambda: acc.gib_to_bytes(INF), "free_gib", None, "free_gib = inf is not a finite number"),
    (lambda: acc.gib_to_bytes("x", "memory"), "memory", None, "memory = 'x' is not a number"),
    (lambda: acc.gib_to_bytes(1e300), "free_gib", None,        # past one PiB (LIMITS["free_gib"])
     "free_gib = 1e+300 must be at most 1,048,576"),
    (lambda: acc.reserve_max_capacity(0, 100, 2048), "bytes_per_token", None,
     "bytes_per_token = 0 must be at least 1"),
    (lambda: acc.reserve_max_capacity(1, -1, 2048), "free_bytes", None,
     "free_bytes = -1 must be at least 0"),
    (lambda: acc.reserve_max_capacity(1, 100, 0), "max_context", None,
     "max_context = 0 must be at least 1"),
    (lambda: acc.capacity(0, 100, 2048, 350, 16), "bytes_per_token", None,
     "bytes_per_token = 0 must be at least 1"),
    (lambda: acc.capacity(1, -1, 2048, 350, 16), "free_bytes", None,
     "free_bytes = -1 must be at least 0"),
    (lambda: acc.capacity(1, 100, 0, 350, 16), "max_context", None,
     "max_context = 0 must be at least 1"),
    (lambda: acc.capacity(1, 100, 2048, 3000, 16), "mean_tokens", None,
     "mean_tokens = 3000 is above max_context (2048 tokens): no sequence can use more than it "
     "reserves"),
    (lambda: acc.capacity(1, 100, 2048, 3000.0, 16), "mean_tokens", None,
     "mean_tokens = 3000.0 is above max_context (2048 tokens): no sequence can use more than "
     "it reserves"),
    (lambda: acc.capacity(1, 100, 2048, 0, 16), "mean_tokens", None,
     "mean_tokens = 0 must be more than 0"),
    (lambda: acc.capacity(1, 100, 2048, -3.0, 16), "mean_tokens", None,
     "mean_tokens = -3.0 must not be negative"),
    (lambda: acc.capacity(1, 100, 2048, NAN, 16), "mean_tokens", None,
     "mean_tokens = nan is not a finite number"),
    (lambda: acc.capacity(1, 100, 2048, None, 16), "mean_tokens", None,
     "mean_tokens = None is not a number"),
    (lambda: acc.capacity(1, 100, 2048, True, 16), "mean_tokens", None,
     "mean_tokens = True is not a number"),
    (lambda: acc.capacity(1, 100, 2048, 350, 0), "block_size", None,
     "block_size = 0 must be at least 1"),
    (lambda: acc.capacity(1, 100, 2048, [5, 9], 0), "block_size", None,
     "block_size = 0 must be at least 1"),
    (lambda: acc.capacity(1, 100, 2048, [5, 3000], 16), "lengths", 1,
     "lengths[1] = 3000 is above max_context (2048 tokens)"),
    (lambda: acc.capacity(1, 100, 2048, [5, 0], 16), "lengths", 1,
     "lengths[1] = 0 must be at least 1"),
    (lambda: acc.capacity(1, 100, 2048, "350", 16), "lengths", None,
     "lengths must be a list of whole numbers of tokens"),
    (lambda: acc.slot_pool_capacity([5], 2048, 16, -1), "pool_slots", None,
     "pool_slots = -1 must be at least 0"),
    (lambda: acc.slot_pool_capacity(None, 2048, 16, 100), "lengths", None,
     "lengths must be a list of whole numbers of tokens"),
    (lambda: acc.slot_pool_capacity([5, 4096], 2048, 16, 100), "lengths", 1,
     "lengths[1] = 4096 is above max_context (2048 tokens)"),
    (lambda: acc.fit_curve(0, 100, 2048, 16, [350]), "bytes_per_token", None,
     "bytes_per_token = 0 must be at least 1"),
    (lambda: acc.fit_curve(1, 100, 2048, 0, [350]), "block_size", None,
     "block_size = 0 must be at least 1"),
    (lambda: acc.fit_curve(1, 100, 2048, 16, []), "mean_tokens", None, "mean_tokens is empty"),
    (lambda: acc.fit_curve(1, 100, 2048, 16, [350, 0, 3000]), "mean_tokens", 1,
     "mean_tokens must lie in (0, max_context = 2048]"),
    (lambda: acc.fit_curve(1, 100, 2048, 16, [350, NAN]), "mean_tokens", 1,
     "mean_tokens must lie in (0, max_context = 2048]"),
    (lambda: acc.fit_curve(1, 100, 2048, 16, ["x"]), "mean_tokens", None,
     "mean_tokens must be an array of numbers (tokens)"),
    # the account() report
    (lambda: acc.account([5, 9], 0, 1), "reserve", None, "reserve = 0 must be at least 1"),
    (lambda: acc.account([5, 9], 32, 1, block_size=0), "block_size", None,
     "block_size = 0 must be at least 1"),
    (lambda: acc.account([5, 9], 32, 1, pool_slots=-5), "pool_slots", None,
     "pool_slots = -5 must be at least 0"),
    (lambda: acc.account([5, 9], 32, 1, sharing=(20, 23, 30, 4)), "prefix_tokens", None,
     "prefix_tokens = 30 is longer than the shorter request (20 tokens)"),
]


@pytest.mark.parametrize("call, field, index, message", BAD_INPUTS,
                         ids=[f"{i}-{row[1]}" for i, row in enumerate(BAD_INPUTS)])
def test_bad_input_raises_field_error(call, field, index, message):
    with pytest.raises(FieldError) as info:
        call()
    error = info.value
    assert isinstance(error, ValueError)                     # callers catching ValueError still do
    assert (error.field, error.index) == (field, index)
    assert str(error) == message
    assert error.reworded("Label") == "Label" + message[len(error.subject):]


def test_list_entry_errors_reword_by_row():
    """Pages name a table row, not lengths[i]: entry 2 is the user's row 3."""
    with pytest.raises(FieldError) as info:
        acc.reserve_max_slots([5, 9, 40], 32)
    assert info.value.reworded(f"Row {info.value.index + 1}: length").startswith(
        "Row 3: length = 40 is above the reserve maximum (32 slots)")


junk = st.one_of(st.none(), st.booleans(), st.integers(-10, 5000), st.floats(),
                 st.text(max_size=3), st.lists(st.integers(-3, 3000), max_size=4),
                 st.lists(st.one_of(st.none(), st.floats(), st.text(max_size=2)), max_size=3),
                 st.dictionaries(st.text(max_size=2), st.integers(), max_size=2))


@settings(max_examples=150, deadline=None)
@given(args=st.tuples(junk, junk, junk, junk, junk))
def test_any_rejected_input_is_a_field_error(args):
    """Whatever junk reaches the public functions, what they raise is a FieldError."""
    a, b, c, d, e = args
    calls = [lambda: acc.paged_slots(a, b), lambda: acc.reserve_max_slots(a, b),
             lambda: acc.block_size_table(a, b, c), lambda: acc.prefix_sharing(a, b, c, d),
             lambda: acc.kv_bytes_per_token(a, b, c, d), lambda: acc.gib_to_bytes(a),
             lambda: acc.capacity(a, b, c, d, e), lambda: acc.slot_pool_capacity(a, b, c, d),
             lambda: acc.fit_curve(a, b, c, d, e), lambda: acc.account(a, b, c, d, e),
             lambda: acc.validate_lengths(a), lambda: acc.validate_candidates(a),
             lambda: acc.reserve_max_capacity(a, b, c)]
    for call in calls:
        try:
            call()
        except FieldError as exc:
            assert exc.field and str(exc).startswith(exc.subject)


def test_integral_floats_are_accepted():
    # a table editor hands back 5.0, not 5
    assert acc.paged_slots([5.0, np.float64(9), np.int64(17)], 4).allocated_slots == 40
    assert acc.parse_lengths(" 5, 9 ,17.0") == [5, 9, 17]


# ---------------------------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------------------------

lengths_st = st.lists(st.integers(1, 5000), min_size=1, max_size=30)


@settings(max_examples=60, deadline=None)
@given(lengths=lengths_st, block=st.integers(1, 300))
def test_paging_tail_is_under_one_block(lengths, block):
    tally = acc.paged_slots(lengths, block)
    assert tally.allocated_slots >= tally.used_tokens == sum(lengths)
    assert all(0 <= u < block for u in tally.unused_per_request)
    assert all(a % block == 0 for a in tally.allocated_per_request)


@settings(max_examples=60, deadline=None)
@given(lengths=lengths_st, c=st.floats(0, 20, allow_nan=False))
def test_best_block_size_is_minimal(lengths, c):
    rows = acc.block_size_table(lengths, c)
    best_size, best_cost = acc.best_block_size(lengths, c)
    assert sum(r.is_best for r in rows) == 1
    assert all(best_cost <= r.total_cost for r in rows)
    assert best_size in acc.DEFAULT_CANDIDATES


@settings(max_examples=60, deadline=None)
@given(a=st.integers(1, 500), b=st.integers(1, 500), block=st.integers(1, 64), data=st.data())
def test_prefix_sharing_keeps_quantities_apart(a, b, block, data):
    prefix = data.draw(st.integers(0, min(a, b)))
    ps = acc.prefix_sharing(a, b, prefix, block)
    assert ps.logical_tokens == a + b
    assert ps.slots_unshared == acc.paged_slots([a, b], block).allocated_slots
    assert ps.slots_shared == ps.slots_unshared - (prefix // block) * block
    # distinct physical slots still hold every distinct token (prefix stored once at most)
    assert ps.slots_shared >= a + b - prefix


@settings(max_examples=60, deadline=None)
@given(k=st.integers(0, 8), mean=st.integers(1, 4096), bpt=st.integers(1, 10 ** 6),
       free=st.integers(0, 10 ** 12))
def test_paging_never_fits_fewer_when_blocks_divide_the_context(k, mean, bpt, free):
    block = 2 ** k
    cap = acc.capacity(bpt, free, 4096, mean, block)
    assert cap.fit_paged >= cap.fit_reserve
    assert cap.fit_reserve_double >= 2 * cap.fit_reserve
    assert cap.paged_unused_slots < block


# ---------------------------------------------------------------------------------------------
# CLI: python -m allocator account / capacity
# ---------------------------------------------------------------------------------------------

def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "allocator", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_cli_account_example_command():
    """R1-R3 via the CLI: 96 / 65, 40 / 9 in blocks of 4, best 4 at c = 1 (50),
    prefix sharing 43 / 44 / 36; R4's pool default gives the pool line."""
    out = _cli("account", "--lengths", "5,9,17", "--reserve", "32", "--metadata-cost", "1",
               "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["reserve_max"]["allocated_slots"] == 96
    assert data["reserve_max"]["unused_slots"] == 65
    assert data["paged"]["block_size"] == 4
    assert data["paged"]["allocated_slots"] == 40
    assert data["paged"]["unused_slots"] == 9
    assert data["best"] == {"block_size": 4, "total_cost": 50}
    assert [r["block_size"] for r in data["block_sizes"]] == [1, 2, 4, 8, 16, 32]
    assert [r["allocated_slots"] for r in data["block_sizes"]] == [31, 34, 40, 48, 64, 96]
    ps = data["prefix_sharing"]
    assert (ps["logical_tokens"], ps["slots_unshared"], ps["slots_shared"]) == (43, 44, 36)



def test_cli_account_old_flag_names_are_aliases(capsys):
    """``--page-size`` / ``--share-page-size`` (the flags' older names) give the same JSON as
    ``--block-size`` / ``--share-block-size``: blocks of 8 -> 48 slots (R1), shared blocks of 2."""
    from allocator.__main__ import main
    base = ["account", "--lengths", "5,9,17", "--reserve", "32", "--json"]
    assert main(base + ["--block-size", "8", "--share-block-size", "2"]) == 0
    new = json.loads(capsys.readouterr().out)
    assert main(base + ["--page-size", "8", "--share-page-size", "2"]) == 0
    old = json.loads(capsys.readouterr().out)
    assert old == new
    assert (new["paged"]["block_size"], new["paged"]["allocated_slots"]) == (8, 48)
    assert new["prefix_sharing"]["block_size"] == 2

def test_cli_capacity_example_command():
    """R5 via the CLI: 512 KiB, 1 GiB, 66, 83 %, 22 blocks = 352 slots,
    384 paged, 132 with twice the memory."""
    out = _cli("capacity", "--model", "7b-fp16", "--free-gib", "66", "--max-context", "2048",
               "--mean-tokens", "350", "--block-size", "16", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["bytes_per_token"] == 512 * 1024
    assert data["units"]["bytes_per_token"]["KiB"] == 512
    assert data["units"]["reserved_bytes"]["GiB"] == 1
    assert data["fit_reserve"] == 66
    assert round(100 * data["waste_fraction_reserve"]) == 83
    assert (data["paged_blocks"], data["paged_slots"], data["paged_unused_slots"]) == (22, 352, 2)
    assert data["fit_paged"] == 384
    assert data["fit_reserve_double"] == 132


def test_cli_text_output_and_presets():
    from allocator.__main__ import main
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["capacity", "--model", "llama3-70b", "--free-gib", "66", "--max-context",
                     "2048", "--mean-tokens", "350"]) == 0
    text = buf.getvalue()
    assert "320 KiB" in text and "640 MiB reserved" in text
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["account", "--lengths", "512,37,1900,128,4", "--reserve", "2048",
                     "--block-size", "16"]) == 0
    text = buf.getvalue()
    assert "10240 slots allocated" in text and "74.8 % waste" in text
    assert "2608 slots" in text and "1.0 % waste" in text
    assert "fits 20 requests reserve-max vs 78 paged (3.9x)" in text


@pytest.mark.parametrize("argv, field", [
    (["account", "--lengths", "5,-9,17", "--reserve", "32"], "--lengths item 2 = -9"),
    (["account", "--lengths", "5,9,40", "--reserve", "32"], "--lengths item 3 = 40"),
    (["account", "--lengths", "5,9,17", "--reserve", "32", "--block-size", "0"], "--block-size 0"),
    (["account", "--lengths", "5,9,17", "--reserve", "32", "--page-size", "0"], "--page-size 0"),  # alias, as typed
    (["capacity", "--free-gib", "66", "--max-context", "2048", "--mean-tokens", "350",
      "--block-size", "0"], "--block-size 0"),
    (["capacity", "--free-gib", "66", "--max-context", "2048"], "--mean-tokens is missing"),
    (["capacity", "--free-gib", "-1", "--max-context", "2048", "--mean-tokens", "3"], "--free-gib -1"),
])
def test_cli_bad_input_exit_2_naming_field(argv, field, capsys):
    from allocator.__main__ import main
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {field}"), err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv, field, index", [
    (["account", "--lengths", "5,9,17", "--reserve", "32", "--share", "20,23"], "share", None),
    (["account", "--lengths", "5,9,17", "--reserve", "32", "--share", "20,x,8"], "share", 1),
    (["account", "--lengths", "5,9,17", "--reserve", "32", "--candidates", "4,0"],
     "candidates", 1),
    (["account", "--lengths", "5,9,40", "--reserve", "32"], "lengths", 2),
    (["capacity", "--free-gib", "66", "--max-context", "2048", "--mean-tokens", "3",
      "--layers", "32", "--kv-heads", "8"], "head_dim", None),
    (["capacity", "--free-gib", "66", "--max-context", "2048", "--lengths", "5,9999"],
     "lengths", 1),
])
def test_cli_bad_input_is_a_field_error(argv, field, index):
    """The sub-commands raise FieldError too (``__main__`` prints it and exits 2)."""
    from allocator.__main__ import build_parser
    args = build_parser().parse_args(argv)
    with pytest.raises(FieldError) as info:
        args.func(args)
    assert (info.value.field, info.value.index) == (field, index)
