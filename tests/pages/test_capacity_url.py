"""The Capacity page's controls travel in its URL (issue 41): each one, a good value and a bad one.

A link such as ``/capacity?model=qwen3-32b&kv_cache_dtype=fp8&free_gib=80`` starts the page's
controls; a value a control cannot take is dropped with a plain-text note naming it and the
default used (``pages._ui.url_params.check_capacity_params``); the page writes the values that
differ from the defaults back into its link, so a copied link reopens it as it is. Run as app.py
runs the page (``tests/pages/test_unknown_params._open``).
"""
from __future__ import annotations

import pytest

from pages._ui.url_params import CAPACITY_PARAMS, capacity_url_value, check_capacity_params, page_params
from tests.pages.test_unknown_params import _notes, _open

#: Per URL parameter: a good value (as a link writes it, then as the control holds it) and a bad one
#: with the words its note must contain.
CASES = {
    "model": ("qwen3-32b", "qwen3-32b", "gpt-9", "is not one of 7b-fp16"),
    "kv_cache_dtype": ("fp8", "fp8", "int4", "is not one of auto, fp8; using auto."),
    "free_gib": ("80", 80.0, "-1", "must be a number from 0 to 1,048,576 (GiB); using 66."),
    "max_context": ("4096", 4096, "4096.5", "must be a whole number from 1 to 10,000,000 (tokens); using 2048."),
    "mean_tokens": ("512.5", 512.5, "0", "must be a number more than 0 and at most 10,000,000 (tokens); using 350."),
    "block_size": ("32", 32.0, "2.5", "must be a whole number from 1 to 4,096 (slots per block); using 16."),
    "layers": ("80", 80, "0", "must be a whole number from 1 to 1,024; using 32."),
    "kv_heads": ("4", 4, "abc", "must be a whole number from 1 to 1,024; using 8."),
    "head_dim": ("64", 64, "1e3", "must be a whole number from 1 to 16,384; using 128."),
    "bytes_per_element": ("1", 1, "3", "is not one of 1, 2, 4; using 2."),
    "acceptance_rate": ("0.85", 0.85, "0.33", "must be a number from 0 to 1 in steps of 0.05"),
}


def test_every_control_has_a_case():
    assert set(CASES) == set(CAPACITY_PARAMS)
    assert page_params("capacity") == (*CAPACITY_PARAMS, "present") and page_params("about") == ("present",)


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_parameter_is_checked(name):
    good, value, bad, words = CASES[name]
    key = CAPACITY_PARAMS[name][0]
    accepted, messages = check_capacity_params({name: good})
    assert messages == [] and accepted == {key: value} and type(accepted[key]) is type(value)
    accepted, messages = check_capacity_params({name: bad})
    assert accepted == {} and len(messages) == 1
    assert messages[0].startswith(f"URL parameter {name}='{bad}' ") and words in messages[0], messages
    assert capacity_url_value(name, value) == good                      # written back as read
    assert capacity_url_value(name, CAPACITY_PARAMS[name][1]) is None   # a default stays out of the link


@pytest.mark.parametrize("name", ["model", "free_gib", "block_size", "acceptance_rate", "kv_cache_dtype", "layers"])
def test_the_page_starts_from_the_link_and_names_a_bad_value(name):
    good, value, bad, words = CASES[name]
    key = CAPACITY_PARAMS[name][0]
    params = {name: good}
    if name == "kv_cache_dtype":
        params["model"] = "llama3.1-8b"              # the dtype control is drawn for a config's model
    if name == "layers":
        params["model"] = "custom"
    at = _open("pages/capacity.py", params)
    assert _notes(at) == [] and at.session_state[key] == value
    assert at.query_params[name] == good            # kept in the link
    at = _open("pages/capacity.py", {name: bad})
    notes = _notes(at)
    assert len(notes) == 1 and words in notes[0]
    assert at.session_state[key] == CAPACITY_PARAMS[name][1] and name not in at.query_params


def test_a_control_moved_is_written_to_the_link_and_back_out_at_its_default():
    at = _open("pages/capacity.py", {})
    assert dict(at.query_params) == {}
    at.slider(key="cap_acceptance_rate").set_value(0.5).run()
    assert at.query_params["acceptance_rate"] == "0.5"
    at.slider(key="cap_acceptance_rate").set_value(0.7).run()
    assert "acceptance_rate" not in at.query_params


def test_a_link_gives_the_speculation_table_its_rate():
    at = _open("pages/capacity.py", {"acceptance_rate": "0.9"})
    text = " ".join(c.value for c in at.caption if "lookahead slots" in c.value)
    assert "acceptance rate of 0.9 a step yields 6.13 tokens" in text    # (1 - 0.9**9) / 0.1 = 6.13
