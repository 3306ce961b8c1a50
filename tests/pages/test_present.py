"""Presentation mode on every page (issue 23 item 13): app.py's shared sidebar draws the toggle,
``?present=true`` turns it on whichever page the URL opens, and every page offers the way back.

AppTest runs a page other than the default one without app.py (``switch_page`` runs the page
file alone), so the other seven pages are checked in Chromium by ``tests/browser/test_browser.py::
test_every_page_presents`` (sidebar hidden, the way back shown, no error, no console error, at
1920x1080 and 1366x768). Here: app.py itself, on the default page.
"""
from streamlit.testing.v1 import AppTest

from tests.conftest import APP_PATH


def _leave_buttons(at):
    return [b for b in at.button if b.label == "Leave presentation mode"]


def test_present_true_in_the_url_presents_and_the_button_leaves():
    at = AppTest.from_file(APP_PATH, default_timeout=120)
    at.query_params["present"] = "true"
    at.run()
    assert not at.exception, at.exception
    assert at.toggle(key="present").value is True
    assert len(_leave_buttons(at)) == 1
    caption = " ".join(c.value for c in at.caption)
    assert "Presentation mode · → / ← step the animation" in caption and "Esc leaves" in caption
    _leave_buttons(at)[0].click().run()
    assert not at.exception and at.toggle(key="present").value is False
    assert not _leave_buttons(at)


def test_the_shared_sidebar_draws_the_toggle_once():
    at = AppTest.from_file(APP_PATH, default_timeout=120)
    at.run()
    assert [t.key for t in at.toggle].count("present") == 1
    assert at.toggle(key="present").value is False
    at.toggle(key="present").set_value(True).run()
    assert not at.exception and len(_leave_buttons(at)) == 1
