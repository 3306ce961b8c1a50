"""A number typed past a widget's range is refused with words, not silently.

Streamlit's own min_value/max_value refuse such a number in the browser (the field turns red and
the page never hears of it), so the widgets are drawn from their rule without them and checked on
the server (``pages._ui.url_params.refused_number``, ``pages._ui.controls.checked_number``). The
explainer's sidebar is tested the same way in ``test_url_params.py``; what a browser shows is in
``tests/browser/test_ux_browser.py``.
"""
from __future__ import annotations

import pytest

from pages._ui.url_params import PAGE_RULES, number_rules, refused_number
from tests.conftest import open_page, seen

REQUESTS = PAGE_RULES["tp_requests"]
SMALL = {"tp_requests": 200, "tp_rates": "0.5, 1, 2, 4"}


@pytest.mark.parametrize("value, words", [
    (50000, "Requests per run = 50,000 was not used: it must be a whole number from 100 to 5,000 (requests per run)"),
    (99, "Requests per run = 99 was not used: it must be a whole number from 100 to 5,000"),
    (150.5, "Requests per run = 150.5 was not used: it must be a whole number"),
    (None, "Requests per run is empty: give a whole number from 100 to 5,000"),
])
def test_a_refused_request_count_names_the_value_and_the_range(value, words):
    assert refused_number(REQUESTS, value, "Requests per run").startswith(words)


@pytest.mark.parametrize("value", [100, 5000, 1000, 1000.0])
def test_the_ends_and_the_default_are_taken(value):
    assert refused_number(REQUESTS, value, "Requests per run") is None


def test_the_rule_lies_inside_the_cores_range_and_matches_the_page_default():
    from allocator.common.limits import LIMITS
    core = LIMITS[REQUESTS.field]
    assert core.contains(REQUESTS.low) and core.contains(REQUESTS.high)
    assert (REQUESTS.low, REQUESTS.high, REQUESTS.default) == (100, 5000, 1000)


def test_a_narrower_top_end_and_the_step_grid_are_named():
    offset = number_rules("azure-conv")["offset_azure-conv"]
    assert refused_number(offset, 20000, "First row (offset)", high=19365) == (
        "First row (offset) = 20,000 was not used: it must be a whole number from 0 to 19,365 (trace rows, from 0)")
    assert refused_number(offset, 19365, "First row (offset)", high=19365) is None
    clock = number_rules("azure-conv")["steps_per_second_azure-conv"]
    assert "= 3.3 was not used: it must be a number from 0.5 to 200 in steps of 0.5" in refused_number(clock, 3.3, "x")


def _requests_errors(at) -> list[str]:
    return [seen(e.value) for e in at.error if "Requests per run" in seen(e.value)]


@pytest.mark.parametrize("typed", [50000, 99])
def test_throughput_says_the_typed_count_was_not_used_and_keeps_the_last_one(typed):
    at = open_page("pages/throughput.py", SMALL, timeout=300)
    assert not _requests_errors(at)
    headline = [m.value for m in at.markdown if "sustain" in m.value]
    at.number_input(key="tp_requests").set_value(typed).run()
    assert not at.exception, at.exception
    assert _requests_errors(at) == [f"Requests per run = {typed:,} was not used: it must be a whole number from 100 "
                                    "to 5,000 (requests per run); the page keeps 200."]
    assert at.number_input(key="tp_requests").value == 200          # the field shows what is used
    assert [m.value for m in at.markdown if "sustain" in m.value] == headline    # the same sweep on screen
    at.run()                                                          # said once, for the change that was refused
    assert not _requests_errors(at)


def test_throughput_checks_a_count_set_without_the_widget():
    at = open_page("pages/throughput.py", {**SMALL, "tp_requests": 7}, timeout=300)
    assert _requests_errors(at) == ["Requests per run = 7 was not used: it must be a whole number from 100 to 5,000 "
                                    "(requests per run); the page uses 1,000."]


def test_the_widget_has_no_browser_range_and_its_help_gives_the_rules():
    at = open_page("pages/throughput.py", SMALL, timeout=300)
    widget = at.number_input(key="tp_requests")
    assert not widget.proto.has_min and not widget.proto.has_max
    assert widget.proto.step == REQUESTS.button_step == 100
    assert widget.help.startswith("Allowed: a whole number from 100 to 5,000. Drawn with a fixed seed")
