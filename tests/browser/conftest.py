"""One app server for every browser-test module of a run, and the Chromium fixtures.

Each module used to start its own ``python app.py`` (which also warms the default sweep in the
background, competing with the tests for the two cores); the modules only read the server (each
test opens its own browser context, i.e. its own Streamlit session), so one serves them all. The
shared-link test still starts its own cold server
(``test_browser.test_first_visit_to_a_shared_page_url_on_a_cold_server``): being first is its
point. The helpers (``serve_app``, ``settle``, ...) stay in ``test_browser.py``.
"""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def server():
    """Base URL of the app (``python app.py``) on a free loopback port; terminated after the run."""
    from tests.browser.test_browser import serve_app
    with serve_app() as base:
        yield base


@pytest.fixture(scope="module")
def browser():
    """One headless system Chromium per module (each test opens its own context in it). Not one per
    run: Playwright's sync API keeps its asyncio loop running in this thread while it is started, so
    ``asyncio.run`` in test_load_smoke.py (between the browser modules) would refuse to start; a
    launch takes about a second."""
    from tests.browser.test_browser import CHROMIUM, CHROMIUM_ARGS, sync_api
    pw = sync_api.sync_playwright().start()
    try:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True, timeout=60_000)
        try:
            yield b
        finally:
            b.close()
    finally:
        pw.stop()


@pytest.fixture
def page(browser):
    """A fresh browser context (its own Streamlit session) with a projector-like viewport."""
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    ctx.set_default_timeout(30_000)
    pg = ctx.new_page()
    try:
        yield pg
    finally:
        ctx.close()
