"""A hand-written link with a parameter the page does not take (``/capacity?colour=red``) is named
on every page, by one rule, and the page renders with its defaults. Streamlit ignored it without a
word on every page but the explainer.

The rule (``pages._ui.url_params``): one plain-text sentence per such parameter, naming it and its
value, the first ending with the parameters the page takes. The explainer checks its own URL
(``check_params``, ``controls.read_url``); every other page takes only ``present``, and app.py's
shared sidebar names the rest before the page runs (``present.presentation_mode``, told by app.py
which page is running). AppTest runs a page other than the explainer without app.py's sidebar, so
those pages run here under the same two calls app.py makes (:func:`_app`); the wiring in app.py
itself is checked in a browser (``tests/browser/test_ux_browser.py``).
"""
from __future__ import annotations

import os
import re

import pytest
from streamlit.testing.v1 import AppTest

from pages._ui.url_params import PAGE_PARAMS, check_params, explainer_params, page_params, unknown_params
from tests.conftest import APP_PATH, ROOT, seen

#: Every page file app.py's navigation serves, read from app.py (so a new page is tested too).
PAGE_FILES = re.findall(r'st\.Page\("(pages/\w+\.py)"', open(APP_PATH, encoding="utf-8").read())
OTHER_PAGES = [p for p in PAGE_FILES if p != "pages/explainer.py"]
#: Small settings for the pages whose default run is seconds of work (the note comes first anyway).
SMALL = {"pages/throughput.py": {"tp_requests": 200, "tp_rates": "0.5, 1, 2, 4"},
         "pages/prefix_cache.py": {"pc_count": 30, "pc_block": 512, "pc_offset": 3000}}
COLOUR = ("URL parameter colour='red' is not a setting of this page; it was ignored. "
          "The URL parameters this page takes: present.")


def _app(page: str) -> None:
    """What app.py does around a page other than the explainer: the shared sidebar's presentation
    toggle (which names the parameters the page does not take), then the page."""
    import runpy

    from pages._ui.present import presentation_mode
    presentation_mode(own_url=page.endswith("pages/capacity.py"))   # as app.py: the Capacity page checks its own
    runpy.run_path(page, run_name="__main__")


def _open(page: str, params: dict[str, str]) -> AppTest:
    at = AppTest.from_function(_app, args=(os.path.join(ROOT, page),), default_timeout=240)
    for key, value in SMALL.get(page, {}).items():
        at.session_state[key] = value
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception, at.exception
    return at


def _notes(at) -> list[str]:
    return [seen(w.value) for w in at.warning if "URL parameter" in seen(w.value)]


def _titles(at) -> list[str]:
    return [t.value for t in at.title]


def test_app_py_serves_the_pages_tested_here():
    assert "pages/explainer.py" in PAGE_FILES and len(OTHER_PAGES) == 8


def test_the_rule_in_words():
    assert unknown_params({"colour": "red"}) == [COLOUR]
    assert unknown_params({"present": "true"}) == [] and PAGE_PARAMS == ("present",)
    two = unknown_params({"colour": "red", "size": "3", "present": "maybe"})
    assert two == [COLOUR, "URL parameter size='3' is not a setting of this page; it was ignored."]
    # the explainer words it the same way, listing its own parameters (for the workload chosen)
    taken = explainer_params("azure-conv")
    assert taken[:3] == ("workload", "block_size", "slots_azure-conv") and taken[-2:] == ("seconds_axis", "present")
    assert "seed" not in taken and "offset_azure-conv" in taken
    assert check_params({"workload": "azure-conv", "colour": "red"}, list_taken=True)[1] == [
        COLOUR.replace("present.", ", ".join(taken) + ".")]


def test_a_hostile_link_fills_a_few_notes_at_most():
    notes = unknown_params({f"p{i}": "x" * 100 for i in range(1000)})
    assert len(notes) == 6 and notes[-1].startswith("995 more URL parameters were not used either")
    assert notes[0].endswith("The URL parameters this page takes: present.")
    assert sum(map(len, notes)) < 1_000


@pytest.mark.parametrize("page", OTHER_PAGES)
def test_every_other_page_names_the_parameter_once_and_renders_with_its_defaults(page):
    plain = _open(page, {})
    assert not _notes(plain)
    at = _open(page, {"colour": "red"})
    assert _notes(at) == [_colour(page)]
    assert _titles(at) == _titles(plain) and _titles(at)                # the page itself, as without it
    assert len(at.get("plotly_chart")) == len(plain.get("plotly_chart"))
    assert "colour" not in at.query_params                               # dropped from the link
    at.run()                                                             # so it is said once
    assert not _notes(at)


def _colour(page: str) -> str:
    """The note about ``colour=red`` on ``page``: the Capacity page lists its own parameters too."""
    if page == "pages/capacity.py":
        return COLOUR.replace("present.", ", ".join(page_params("capacity")) + ".")
    return COLOUR


def test_present_is_taken_beside_an_unknown_parameter():
    at = _open("pages/capacity.py", {"present": "true", "colour": "red"})
    assert _notes(at) == [_colour("pages/capacity.py")]
    assert at.toggle(key="present").value is True and at.query_params["present"] == "true"


def test_a_bad_present_and_an_unknown_parameter_are_each_named_once():
    at = _open("pages/about.py", {"present": "maybe", "colour": "red"})
    assert _notes(at) == ["URL parameter present='maybe' must be true or false; using false.", COLOUR]


def test_a_hostile_name_stays_plain_text():
    at = _open("pages/about.py", {"**[x](http://e.example)**": "<b>1</b>"})
    notes = [w.value for w in at.warning if "URL parameter" in seen(w.value)]
    assert len(notes) == 1 and "\\*\\*\\[x\\]" in notes[0] and "\\<b" in notes[0]


def test_the_explainer_names_it_once_with_its_own_parameters():
    at = AppTest.from_file(APP_PATH, default_timeout=120)
    at.query_params["colour"] = "red"
    at.run()
    assert not at.exception, at.exception
    assert _notes(at) == [COLOUR.replace("present.", ", ".join(explainer_params("classroom-40")) + ".")]
    assert _titles(at) == ["Reserve for the worst case, or page?"]
    assert "colour" not in at.query_params
