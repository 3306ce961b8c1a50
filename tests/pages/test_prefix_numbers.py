"""The Prefix cache page's window (first request, number of requests) refuses a typed number with
words: Streamlit's own min/max turned the field red and the page never heard of it. The widgets are
drawn from ``pages._ui.url_params.PAGE_RULES`` (the offset's top end narrowed to the shipped trace's
last row) and checked on the server by ``pages._ui.controls.checked_number``, as the Throughput
page's request count is (``test_number_inputs.py``)."""
from __future__ import annotations

import pytest

from allocator.common.limits import LIMITS
from allocator.workloads.mooncake import shipped_mooncake
from pages._ui.prefix_data import DEFAULTS
from pages._ui.url_params import PAGE_RULES, refused_number
from tests.conftest import open_page, seen

OFFSET, COUNT = PAGE_RULES["pc_offset"], PAGE_RULES["pc_count"]
SMALL = {"pc_count": 30, "pc_block": 512, "pc_offset": 3000}
LAST = len(shipped_mooncake()) - 1          # 12,030: the shipped trace's last row


def test_the_rules_lie_inside_the_cores_ranges_and_match_the_page_defaults():
    for rule in (OFFSET, COUNT):
        core = LIMITS[rule.field]
        assert core.contains(rule.low) and core.contains(rule.high) and rule.unit == core.unit
    assert (OFFSET.low, OFFSET.default, OFFSET.button_step) == (0, DEFAULTS["pc_offset"], 100)
    assert (COUNT.low, COUNT.high, COUNT.default, COUNT.button_step) == (10, 2000, DEFAULTS["pc_count"], 100)
    assert OFFSET.up_to(LAST).high == LAST and OFFSET.up_to(None) is OFFSET


@pytest.mark.parametrize("rule, value, high, words", [
    (OFFSET, 20000, LAST, "First request (offset) = 20,000 was not used: it must be a whole number from 0 to "
                          "12,030 (trace rows, from 0)"),
    (OFFSET, -1, LAST, "First request (offset) = -1 was not used: it must be a whole number from 0 to 12,030 "
                       "(trace rows, from 0)"),
    (COUNT, 5, None, "Requests = 5 was not used: it must be a whole number from 10 to 2,000 (requests)"),
    (COUNT, 2001, None, "Requests = 2,001 was not used: it must be a whole number from 10 to 2,000 (requests)"),
    (COUNT, None, None, "Requests is empty: give a whole number from 10 to 2,000 (requests)"),
])
def test_a_refused_window_number_names_the_value_and_the_range(rule, value, high, words):
    label = "First request (offset)" if rule is OFFSET else "Requests"
    assert refused_number(rule, value, label, high) == words


@pytest.mark.parametrize("rule, value", [(OFFSET, 0), (OFFSET, LAST), (COUNT, 10), (COUNT, 2000), (COUNT, 1000)])
def test_the_ends_and_the_defaults_are_taken(rule, value):
    assert refused_number(rule, value, "x", LAST if rule is OFFSET else None) is None


def _window_errors(at) -> list[str]:
    return [seen(e.value) for e in at.error if "was not used" in seen(e.value) or "is empty" in seen(e.value)]


def _summary(at) -> str:
    return next(m.value for m in at.markdown if "of the trace" in m.value)


@pytest.mark.parametrize("key, typed, words", [
    ("pc_offset", LAST + 1, "First request (offset) = 12,031 was not used: it must be a whole number from 0 to "
                            "12,030 (trace rows, from 0); the page keeps 3,000."),
    ("pc_count", 5000, "Requests = 5,000 was not used: it must be a whole number from 10 to 2,000 (requests); "
                       "the page keeps 30."),
    ("pc_count", 9, "Requests = 9 was not used: it must be a whole number from 10 to 2,000 (requests); "
                    "the page keeps 30."),
])
def test_a_typed_number_past_the_range_is_named_and_nothing_on_screen_is_lost(key, typed, words):
    at = open_page("pages/prefix_cache.py", SMALL, timeout=240)
    assert not _window_errors(at)
    summary, charts = _summary(at), len(at.get("plotly_chart"))
    assert "Requests 3,001–3,030 of the trace" in summary
    at.number_input(key=key).set_value(typed).run()
    assert not at.exception, at.exception
    assert _window_errors(at) == [words]
    assert at.number_input(key=key).value == SMALL[key]               # the field shows the value used
    assert _summary(at) == summary and len(at.get("plotly_chart")) == charts == 3   # the same window on screen
    at.run()                                                           # said once, for the change refused
    assert not _window_errors(at)


def test_a_good_typed_number_is_used():
    at = open_page("pages/prefix_cache.py", SMALL, timeout=240)
    at.number_input(key="pc_count").set_value(20).run()
    assert not at.exception and not _window_errors(at)
    assert "Requests 3,001–3,020 of the trace" in _summary(at)


def test_a_window_set_without_the_widget_is_checked_too():
    at = open_page("pages/prefix_cache.py", {**SMALL, "pc_count": 7}, timeout=240)
    assert _window_errors(at) == ["Requests = 7 was not used: it must be a whole number from 10 to 2,000 "
                                  "(requests); the page uses 1,000."]


def test_the_widgets_have_no_browser_range_and_their_help_gives_the_rules():
    at = open_page("pages/prefix_cache.py", SMALL, timeout=240)
    offset, count = at.number_input(key="pc_offset"), at.number_input(key="pc_count")
    for widget in (offset, count):
        assert not widget.proto.has_min and not widget.proto.has_max and widget.proto.step == 100
    assert offset.help.startswith("Allowed: a whole number from 0 to 12,030. Where the window starts in the trace's 12,031")
    assert count.help.startswith("Allowed: a whole number from 10 to 2,000. How many consecutive")
