"""A link that gives a parameter twice (``/?block_size=16&block_size=32``, a link edited by hand) is
read as Streamlit reads it, the last value, and the page says so instead of silently dropping one."""
from __future__ import annotations

from streamlit.testing.v1 import AppTest

from pages._ui.url_params import MAX_MESSAGES, repeated_params
from tests.conftest import APP_PATH, seen
from tests.pages.test_unknown_params import _notes, _open


def test_each_repeated_parameter_is_named_with_its_values_and_the_one_read():
    assert repeated_params({"block_size": ["16", "32"], "seed": ["3"]}) == [
        "URL parameter block_size is given 2 times ('16', '32'); only the last, '32', is read."]
    many = repeated_params({"seed": [str(i) for i in range(7)]})[0]
    assert "given 7 times ('0', '1', '2', '3', …); only the last, '6', is read." in many
    assert len(repeated_params({f"p{i}": ["1", "2"] for i in range(20)})) == MAX_MESSAGES
    assert repeated_params({"seed": ["3"]}) == []


def _warnings(at) -> list[str]:
    return [seen(w.value) for w in at.warning]


def test_the_explainer_reads_the_last_value_and_says_so():
    at = AppTest.from_file(APP_PATH, default_timeout=120)
    at.query_params["block_size"] = ["16", "32"]
    at.run()
    assert not at.exception
    assert at.session_state["block_size"] == 32
    assert "URL parameter block_size is given 2 times ('16', '32'); only the last, '32', is read." in _warnings(at)


def test_another_page_names_a_repeated_presentation_switch():
    """Run as app.py runs a page other than the explainer (``test_unknown_params._open``)."""
    at = _open("pages/capacity.py", {"present": ["false", "true"]})
    assert ("URL parameter present is given 2 times ('false', 'true'); only the last, 'true', is read."
            in _notes(at))
    assert at.session_state["present"] is True and at.query_params["present"] == "true"
