"""The kernel page says what it is doing while it loads torch and Triton, the only slow part of a
first visit (measured: 3.2 s of a 5.3 s first visit to a server still warming its other pages; the
rest of the page renders in 0.3 s)."""
from __future__ import annotations

import contextlib

import streamlit
from streamlit.testing.v1 import AppTest

from tests.conftest import APP_PATH


def test_the_libraries_load_under_a_spinner_that_names_them(monkeypatch):
    spinners = []                                  # (text, whether the backend box was drawn before it closed)
    real = streamlit.spinner

    @contextlib.contextmanager
    def spinner(text="", *args, **kwargs):
        with real(text, *args, **kwargs):
            yield
        spinners.append(text)

    monkeypatch.setattr(streamlit, "spinner", spinner)
    at = AppTest.from_file(APP_PATH, default_timeout=60)
    at.switch_page("pages/kernel.py")
    at.run()
    assert not at.exception, at.exception
    assert spinners and spinners[0].startswith("Loading PyTorch and Triton, the libraries the kernel runs on")
    assert "first visit after the server starts" in spinners[0]
    # the page went on to the backend it loaded, and the spinner is gone (it is not left on screen)
    assert any("Backend for timing:" in m.value for m in at.markdown)
