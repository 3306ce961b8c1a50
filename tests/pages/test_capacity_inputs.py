"""Capacity page input handling: a block size that is not whole is refused (an int field truncated
2.5 to 2 in the browser), refused values are written like the page's figures (thousands
separators, no spurious ``.0``), one wording where figures cannot be worked out, the paged card's
heading follows its result, and the log-scale chart has y tick labels even for two flat lines.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from allocator import accounting as acc
from allocator.viz.arithmetic import curve_figure, log_ticks
from allocator.viz.claims.capacity import even_numbers, paged_card_heading
from tests.pages.test_pages_arithmetic import _column_holding, _errors, _metrics, _page

KIB = 1024
PAGE = "pages/capacity.py"


@pytest.mark.parametrize("text, even", [
    ("Block size = 1000000 must be at most 4,096", "Block size = 1,000,000 must be at most 4,096"),
    ("Free memory (GiB) = -1.0 must not be negative", "Free memory (GiB) = -1 must not be negative"),
    ("Mean tokens used = 5000.0 is above max context (2048 tokens)",
     "Mean tokens used = 5,000 is above max context (2,048 tokens)"),
    ("Block size = 2.5 is not a whole number", "Block size = 2.5 is not a whole number"),
    ("R5 says 512 KiB at fp16, 12.50 GiB", "R5 says 512 KiB at fp16, 12.5 GiB"),
])
def test_even_numbers(text, even):
    assert even_numbers(text) == even


@pytest.mark.parametrize("key, value, control_error", [
    ("cap_block_size", 2.5, "Block size = 2.5 is not a whole number."),
    ("cap_block_size", 1000000.0, "Block size = 1,000,000 must be at most 4,096."),
    ("cap_free_gib", -1.0, "Free memory (GiB) = -1 must not be negative."),
    ("cap_mean_tokens", 5000.0, "Mean tokens used = 5,000 is above max context (2,048 tokens)"),
])
def test_a_refused_value_is_named_by_its_control_in_even_numbers(key, value, control_error):
    at = _page(PAGE)
    at.number_input(key=key).set_value(value).run()
    assert not at.exception
    errors = _errors(_column_holding(at, "number_input", key))
    assert any(e.startswith(control_error) for e in errors), errors
    assert "Sequences, paged" not in _metrics(at)                      # not a figure from 2 for 2.5
    infos = {i.value for i in at.info}
    assert infos == {"Fix the value marked above to see these figures."}   # one wording, both sections


def test_a_whole_block_size_typed_as_a_float_is_used():
    at = _page(PAGE)
    at.number_input(key="cap_block_size").set_value(256.0).run()
    assert not at.error
    assert _metrics(at)["Blocks per sequence"] == ("2", "= 512 slots, 162 empty")


def test_the_paged_heading_claims_a_fix_only_when_paging_fits_more():
    better = acc.capacity(512 * KIB, 66 << 30, 2048, 350, 16)
    assert better.fit_paged > better.fit_reserve
    assert paged_card_heading(better) == "**Fix the allocator** (page the cache, same memory)"
    worse = acc.capacity(512 * KIB, 66 << 30, 2048, 350, 4096)
    assert (worse.fit_paged, worse.fit_reserve) == (33, 66)
    assert paged_card_heading(worse) == ("**Page the cache** (same memory): worse at this block size, "
                                         "33 sequences against reserve-max's 66")
    same = acc.capacity(512 * KIB, 66 << 30, 2048, 2048, 2048)
    assert same.fit_paged == same.fit_reserve
    assert "no gain" in paged_card_heading(same) and f"{same.fit_paged:,} sequences" in paged_card_heading(same)


def test_the_page_heads_the_paged_card_from_its_result():
    at = _page(PAGE)
    assert any(m.value.startswith("**Fix the allocator**") for m in at.markdown)
    at.number_input(key="cap_block_size").set_value(4096.0).run()
    heads = [m.value for m in at.markdown if m.value.startswith("**Page the cache**")]
    assert heads == ["**Page the cache** (same memory): worse at this block size, "
                     "33 sequences against reserve-max's 66"]
    assert not any("Fix the allocator" in m.value for m in at.markdown)


def test_flat_lines_on_the_log_chart_still_have_y_tick_labels():
    cap = acc.capacity(512 * KIB, 16 << 30, 2048, 175, 4096)            # both lines flat: 8 and 16
    yaxis = curve_figure(cap).layout.yaxis
    assert yaxis.type == "log" and len(yaxis.tickvals) >= 2
    assert min(yaxis.tickvals) <= cap.fit_paged and max(yaxis.tickvals) >= cap.fit_reserve
    assert list(yaxis.ticktext) == [f"{t:,g}" for t in yaxis.tickvals]
    lo, hi = yaxis.range
    assert lo < np.log10(min(yaxis.tickvals)) and hi > np.log10(max(yaxis.tickvals))


def test_a_wide_log_axis_keeps_1_2_5_ticks():
    ticks = log_ticks(np.array([3.0, 40.0, 700.0]))
    assert ticks["tickvals"] == [2, 5, 10, 20, 50, 100, 200, 500, 1000]       # the data bracketed by labels
    assert ticks["ticktext"][-1] == "1,000" and ticks["range"][0] < np.log10(2) and ticks["range"][1] > 3
    # issue 40: the flat reserve-max line (66 sequences) sat below the lowest label (100)
    ticks = log_ticks(np.array([66.0, 384.0]))
    assert ticks["tickvals"][0] <= 66 and ticks["tickvals"][-1] >= 384
    assert 10 ** ticks["range"][0] < 66 and 10 ** ticks["range"][1] > 384
    at = _page(PAGE)
    spec = json.loads(at.get("plotly_chart")[1].proto.spec)
    assert spec["layout"]["yaxis"]["tickvals"]
