"""``?present=`` with a value the toggle cannot read is named on every page, once, and the page
renders with presentation mode off. Streamlit's bound toggle dropped such a value without a word,
even on the explainer, whose own URL check never saw it (the toggle runs first). The other pages
run under app.py only in a browser: ``tests/browser/test_ux_browser.py`` checks one of them."""
from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from pages._ui.url_params import check_boolean, check_params
from tests.conftest import APP_PATH, seen


@pytest.mark.parametrize("raw, expected", [("true", True), ("TRUE", True), ("False", False)])
def test_true_and_false_in_any_case_are_taken(raw, expected):
    assert check_boolean("present", raw) == (expected, None)


@pytest.mark.parametrize("raw, shown", [("maybe", "'maybe'"), ("1", "'1'"), ("", "''"),
                                        ("x" * 60, "'" + "x" * 38 + "…")])
def test_any_other_value_is_named_with_the_values_it_takes_and_the_default(raw, shown):
    value, message = check_boolean("present", raw)
    assert value is False
    assert message == f"URL parameter present={shown} must be true or false; using false."
    # the explainer's own check words seconds_axis the same way (one rule)
    assert check_params({"seconds_axis": raw})[1] == [message.replace("present=", "seconds_axis=")]


def test_present_maybe_is_named_once_and_the_page_renders_unpresented():
    at = AppTest.from_file(APP_PATH, default_timeout=120)
    at.query_params["present"] = "maybe"
    at.run()
    assert not at.exception, at.exception
    notes = [seen(w.value) for w in at.warning if "present=" in seen(w.value)]
    assert notes == ["URL parameter present='maybe' must be true or false; using false."]
    assert at.toggle(key="present").value is False
    assert not [b for b in at.button if b.label == "Leave presentation mode"]
    assert at.title and at.title[0].value.startswith("Reserve for the worst case")
    assert "present" not in at.query_params
    at.run()                                                   # said once: the link no longer carries it
    assert not [w for w in at.warning if "present=" in seen(w.value)]


def test_user_text_in_the_note_stays_plain_text():
    at = AppTest.from_file(APP_PATH, default_timeout=120)
    at.query_params["present"] = "**[x](http://e.example)**"
    at.run()
    notes = [w.value for w in at.warning if "present=" in seen(w.value)]
    assert len(notes) == 1 and "\\*\\*\\[x\\]" in notes[0]     # escaped: no bold, no link
