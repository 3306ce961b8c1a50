"""Real-browser tests: the app served as ``make run`` serves it (``python app.py``, i.e. ``streamlit
run app.py``) and driven by headless Chromium through Playwright.

What AppTest cannot see: the pages render in a browser without an error box, the sidebar
slider reacts to the keyboard, the Plotly animation plays client-side, the kernel tab's button
runs a sweep end to end, and a shared page link works as the first visit to a cold server.
Screenshots go to ``test-artifacts/`` (gitignored).

Needs Debian's Chromium at /usr/bin/chromium (``apt-get install chromium`` as root; ``.ci/run``
does it). Without it every test here skips. Never run ``playwright install``: this suite drives
the system browser on purpose.

Every wait is bounded; the server is started once per run (``tests/browser/conftest.py``, shared
with the other browser modules; plus one fresh, cold server for the shared-link test) and always
terminated.
"""
from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.conftest import APP_PATH, ROOT

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")   # overridable, e.g. to try the skip path
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
ARTIFACTS = os.path.join(ROOT, "test-artifacts")
SERVER_START_S = 60          # until /_stcore/health answers
PAGE_S = 90                  # one page's script run, first visit included (seconds)
ERROR_SELECTOR = '[data-testid="stException"], [data-testid="stAlertContentError"]'

if not os.path.exists(CHROMIUM):
    pytest.skip(f"{CHROMIUM} not found: browser tests skipped. Enable them with `apt-get install chromium` "
                "as root (.ci/run does this); never `playwright install`.", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (Python package) not installed; "
                               "`make install` installs requirements.txt")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def app_url_paths(hidden: bool = False) -> list[str]:
    """``url_path`` values declared in app.py's navigation, in order (the default page first); pages
    listed with ``visibility="hidden"`` (not in the menu, e.g. /explainer) only when ``hidden``."""
    with open(APP_PATH, encoding="utf-8") as fh:
        calls = re.findall(r"st\.Page\(([^)]*)\)", fh.read())
    return [re.search(r'url_path="([^"]+)"', c).group(1) for c in calls
            if 'url_path="' in c and (hidden or 'visibility="hidden"' not in c)]


@contextlib.contextmanager
def serve_app(log_name: str = "streamlit-server", script: str | None = None):
    """Start ``python app.py`` (as ``make run`` does) on a free loopback port, wait until
    /_stcore/health answers, yield the base URL, and always terminate the server's process group.
    The server's output goes to test-artifacts/``log_name``.log. Given ``script`` (a path from the
    repository root), serve that script instead, with ``python -m streamlit run`` (the bench's bare
    reference page, tests/tools/bench_floor_page.py)."""
    port = free_port()
    os.makedirs(ARTIFACTS, exist_ok=True)
    log_path = os.path.join(ARTIFACTS, f"{log_name}.log")
    log = open(log_path, "w", encoding="utf-8")
    proc = subprocess.Popen(
        # ``python app.py`` is ``streamlit run app.py`` with Streamlit's legacy pages/ handling off
        # (see app.py), the way ``make run`` starts it
        [sys.executable, *(["-m", "streamlit", "run", script] if script else [APP_PATH]), "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1",
         "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            if proc.poll() is not None:
                log.flush()
                with open(log_path, encoding="utf-8") as fh:
                    pytest.fail(f"streamlit exited with {proc.returncode}:\n{fh.read()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"streamlit did not answer /_stcore/health within {SERVER_START_S} s")
            time.sleep(0.3)
        yield base
    finally:
        # the server runs in its own session: end exactly that process group
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()


# server, browser and page: tests/browser/conftest.py (one server and one Chromium for the run)


# ------------------------------------------------------------------------------------ helpers

STATE_JS = """() => {
    const app = document.querySelector('[data-testid="stApp"]');
    const main = document.querySelector('[data-testid="stMain"]');
    const charts = [...document.querySelectorAll('[data-testid="stPlotlyChart"]')];
    const h = document.querySelector('[data-testid="stMain"] h1');
    return {
        script: app ? app.dataset.testScriptState : null,
        connection: app ? app.dataset.testConnectionState : null,
        stale: document.querySelectorAll('[data-stale="true"]').length,
        spinners: document.querySelectorAll('[data-testid="stSpinner"]').length,
        // an element whose code is still loading (Streamlit's lazy fallback): on a busy machine a
        // page can stay unchanged for over a second with a button still a grey placeholder
        skeletons: document.querySelectorAll('[data-testid="stSkeleton"]').length,
        charts: charts.length,
        drawn: charts.filter(c => c.querySelector('.js-plotly-plot .main-svg')).length,
        nodes: main ? main.getElementsByTagName('*').length : 0,
        title: h ? h.innerText : '',
    };
}"""


def settle(pg, old_title: str | None = None, timeout_s: float = PAGE_S, quiet_s: float = 1.0) -> str:
    """Wait until the page is done: script not running, connected, nothing stale, no spinner, no
    element still loading its code (a skeleton), every Plotly chart drawn, a title other than
    ``old_title``, and the DOM unchanged for ``quiet_s`` seconds of a responsive main thread (a poll
    that takes longer than 0.3 s restarts the quiet time: the browser is still digesting a large
    message). Returns the page title (h1).

    Streamlit flips its script state to "notRunning" before the browser has rendered every element
    of a large run, so the script state alone is not enough.
    """
    deadline = time.monotonic() + timeout_s
    last, quiet_since = None, None
    while True:
        t0 = time.monotonic()
        st = pg.evaluate(STATE_JS)
        slow = time.monotonic() - t0 > 0.3
        done = (st["script"] == "notRunning" and st["connection"] in (None, "CONNECTED") and not st["stale"]
                and not st["spinners"] and not st["skeletons"] and st["drawn"] == st["charts"] and st["title"]
                and st["title"] != old_title)
        if done and st == last and not slow:
            if quiet_since is not None and time.monotonic() - quiet_since >= quiet_s:
                return st["title"]
            quiet_since = quiet_since or time.monotonic()
        else:
            quiet_since = None
        last = st
        if time.monotonic() > deadline:
            shot(pg, "unsettled")
            pytest.fail(f"{pg.url} did not settle within {timeout_s:.0f} s; last state {st} "
                        f"(screenshot test-artifacts/unsettled.png)")
        time.sleep(0.2)


def console_errors(pg) -> list[str]:
    """A list that fills with ``pg``'s uncaught exceptions and console errors from now on, except a
    resource this offline machine cannot fetch (web fonts, telemetry), which is no error of the app."""
    console: list[str] = []
    pg.on("pageerror", lambda exc: console.append(f"pageerror: {exc}"))
    pg.on("console", lambda msg: console.append(msg.text)
          if msg.type == "error" and not msg.text.startswith("Failed to load resource") else None)
    return console


def errors(pg) -> list[str]:
    """Texts of every exception / error box on the page."""
    return pg.locator(ERROR_SELECTOR).all_inner_texts()


def metric_values(pg, label: str) -> list[str]:
    """Values of every st.metric whose label is ``label``, in page order."""
    out = []
    for m in pg.locator('[data-testid="stMetric"]').all():
        if m.locator('[data-testid="stMetricLabel"]').inner_text().strip() == label:
            out.append(m.locator('[data-testid="stMetricValue"]').inner_text().strip())
    return out


def shot(pg, name: str, locator=None) -> None:
    """Save a PNG of the viewport (or of ``locator``) as test-artifacts/``name``.png."""
    path = os.path.join(ARTIFACTS, f"{name}.png")
    (locator if locator is not None else pg).screenshot(path=path)


def wait_until(fn, timeout_s: float, what: str, interval: float = 0.25):
    """Poll ``fn()`` until it returns a truthy value; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(interval)


def wait_while_progressing(pg, text: str, stall_s: float, cap_s: float = 1800) -> None:
    """Wait until ``text`` is visible on ``pg`` while the page's progress bars keep moving: fail when
    their text has not changed for ``stall_s`` seconds (the server stopped working for this page), or
    after ``cap_s`` in all. A long server computation (the paper replication's runs) then takes as
    long as the machine's load makes it, instead of racing a fixed clock."""
    bars = pg.locator('[data-testid="stProgress"]')
    start = changed = time.monotonic()
    last = None
    while not pg.get_by_text(text).first.is_visible():
        now = bars.all_inner_texts()
        if now != last:
            last, changed = now, time.monotonic()
        if time.monotonic() - changed > stall_s:
            shot(pg, "stalled")
            pytest.fail(f"waiting for {text!r}: the progress ({last}) did not move for {stall_s:.0f} s")
        if time.monotonic() - start > cap_s:
            pytest.fail(f"waiting for {text!r}: still not shown after {cap_s:.0f} s (progress: {last})")
        time.sleep(0.5)


# -------------------------------------------------------------------------------------- tests

def test_every_page_loads_without_an_error(server, page):
    """Every page of the sidebar renders without an error box, each under its own title, and asks no
    other host for anything. On the home page first (this used to be a test of its own that loaded
    it again): the block-size slider reacts to the keyboard and the paged side's metrics follow."""
    from urllib.parse import urlparse

    # an offline classroom reaches nothing but the lab's server: no page asks another host for anything
    # (the tab's material-symbol icon was fetched from a font server on every load)
    outside = []
    page.on("request", lambda r: outside.append(r.url) if r.url.startswith(("http:", "https:"))
            and urlparse(r.url).hostname not in ("127.0.0.1", "localhost") else None)
    page.goto(server + "/", wait_until="domcontentloaded")
    title = settle(page)
    assert not errors(page), errors(page)
    shot(page, "page_home")
    links = page.locator('[data-testid="stSidebarNav"] a')
    hrefs = [h.rstrip("/") for h in links.evaluate_all("els => els.map(e => e.href)")]
    paths = app_url_paths()
    # the default page lives at "/", every other page at its url_path
    expected = [server] + [f"{server}/{p}" for p in paths[1:]]
    assert sorted(hrefs) == sorted(expected), (hrefs, paths)
    _block_size_slider_changes_paged_utilisation(page)
    seen = {server: title}
    for href in hrefs[1:]:
        name = href.rsplit("/", 1)[-1]
        page.locator(f'[data-testid="stSidebarNav"] a[href="{href}"]').click()
        page.wait_for_url(href, timeout=30_000)
        title = settle(page, old_title=title)
        errs = errors(page)
        shot(page, f"page_{name}")
        assert not errs, f"{name}: {errs}"
        seen[href] = title
    assert len(set(seen.values())) == len(seen), seen         # each page shows its own title
    assert not outside, sorted(set(outside))


def _block_size_slider_changes_paged_utilisation(page):
    """On the explainer as loaded: ArrowRight on the block-size slider moves it 16 -> 24 and the paged
    side's metrics become those of the core's run at 24; reserve-max does not move."""
    from allocator.engine.scenario import Scenario, run_scenario
    from allocator.common.formats import pct

    before = metric_values(page, "Mean utilisation")
    assert len(before) == 2, before                            # reserve-max, paged
    slider = page.locator('[data-testid="stSlider"]').filter(has_text="Block size (slots per block)")
    # react-aria renders an <input type=range> (implicit role), older builds a div[role=slider]
    thumb = slider.get_by_role("slider")
    assert thumb.get_attribute("aria-valuetext") == "16"
    thumb.focus()
    page.keyboard.press("ArrowRight")                          # 16 -> 24, the next option
    expected = run_scenario(Scenario(block_size=24), record_snapshots=False)
    want = pct(expected['paged'].summary['mean_utilization_busy'])
    wait_until(lambda: metric_values(page, "Mean utilisation")[1:] == [want], PAGE_S,
               f"the paged Utilisation metric to read {want} at block size 24 (was {before[1]})")
    settle(page)
    after = metric_values(page, "Mean utilisation")
    assert thumb.get_attribute("aria-valuetext") == "24"
    assert after[0] == before[0] and after[1] != before[1], (before, after)   # reserve-max does not move
    assert (metric_values(page, "Mean running")[1]
            == f"{expected['paged'].summary['mean_running_busy']:.1f}")
    assert not errors(page), errors(page)
    shot(page, "explainer_block_24")


def test_play_button_advances_the_animation_and_play_and_pause_log_no_console_error(server, browser):
    """▶ Play moves the animation off engine step 0 and ❚❚ Pause stops it (in the browser only).

    On the same page (these were three tests, each of which loaded it first): issue 23 item 18,
    ▶ Play then Pause logged "pageerror: undefined" (Plotly rejects an interrupted animation's
    promise with no reason); nothing may reach the console. Then ▶ Play again and space: the key
    handler follows Plotly's own animation events, so space after ▶ Play pauses it (a helper found
    it kept playing, because the handler only counted its own presses: it has seen none here
    either)."""
    ctx = browser.new_context(viewport={"width": 1366, "height": 768})
    ctx.set_default_timeout(30_000)
    page = ctx.new_page()
    console = console_errors(page)
    try:
        page.goto(server + "/", wait_until="domcontentloaded")
        settle(page)
        plot = page.locator(".js-plotly-plot").filter(has=page.locator(".updatemenu-button")).first
        plot.wait_for(timeout=30_000)
        label = plot.locator("text.slider-label").first
        assert label.text_content().strip() == "engine step 0"
        plot.locator(".updatemenu-button").first.click()           # ▶ Play
        moved = wait_until(lambda: (t := label.text_content().strip()) != "engine step 0" and t, 20,
                           "the animation to leave engine step 0")
        assert re.fullmatch(r"engine step \d+", moved), moved
        time.sleep(1.0)
        plot.locator(".updatemenu-button").nth(1).click()          # ❚❚ Pause
        later = label.text_content().strip()
        assert int(later.split()[-1]) >= int(moved.split()[-1]) > 0
        shot(page, "explainer_playing", plot)
        assert not errors(page)
        time.sleep(1.0)
        assert not console, console

        paused = label.text_content().strip()
        plot.locator(".updatemenu-button").first.click()           # ▶ Play again, then space
        wait_until(lambda: label.text_content().strip() != paused, 20, "the animation to start again")
        page.locator("h1").first.click()                           # focus the page, not a widget
        page.keyboard.press(" ")
        time.sleep(0.6)
        stopped = label.text_content().strip()
        time.sleep(1.5)
        assert label.text_content().strip() == stopped, "space did not pause the animation started by ▶ Play"
    finally:
        ctx.close()


def test_throughput_page_draws_the_default_sweep_then_the_paper_replication_in_one_click(server, page):
    """The rate sweep's page in a real browser: five charts drawn, the headline and the sustained
    rates from the sweep the core computes (the default one, warmed at start-up).

    Then, on the same page (the two used to be separate tests that each loaded it first): issue 21,
    one click draws the paper's three figures beside this model's: every chart renders, no error box
    and nothing on the console, and the replication's paragraphs are there (the load rule, Figures 2,
    13 over the ten seeds, and 12, the departures). That their numbers are the core's is checked
    where the replication is computed once a run: the AppTest
    tests/pages/test_page_throughput.py::test_paper_replication_one_click asserts every paragraph
    of ``paper_replication_texts(spread_for())`` on the page after the same click, and
    tests/pages/test_claims.py::test_paper_replication_texts_quote_the_replication that those
    paragraphs quote the replication's values. Computing ``spread_for()`` here again, after the
    server had, doubled the slowest test of the serial browser worker (310 s at load 5)."""
    from allocator.studies.paper import FIG13_SEEDS
    from allocator.studies.rate_sweep import with_latency_factor
    from allocator.viz.claims.throughput import sustained_text
    from pages._ui.sweep_cache import DEFAULT_KEY, cached_sweep

    console = console_errors(page)
    page.goto(server + "/throughput", wait_until="domcontentloaded")
    settle(page, timeout_s=PAGE_S + 60)
    assert not errors(page), errors(page)
    assert page.locator('[data-testid="stPlotlyChart"]').count() == 5
    sweep = with_latency_factor(cached_sweep(DEFAULT_KEY), 5)
    body = page.locator('[data-testid="stMain"]').inner_text()
    assert f"paged allocation sustains {sustained_text(sweep.sustained['paged'])}" in body
    assert "The paper's figures" in body and "This model's figures" in body
    shot(page, "throughput_page")

    page.get_by_role("button", name=re.compile("Run the paper replication")).click()
    # as long as its runs keep advancing (210 s in all was too short at load 7)
    wait_while_progressing(page, "Where this model departs", stall_s=PAGE_S + 120)
    settle(page, timeout_s=PAGE_S + 60)
    assert not errors(page), errors(page)
    # the number of charts after the click: 8 (issue 21's three figures beside the sweep's five)
    charts = page.locator('[data-testid="stPlotlyChart"]')
    assert charts.count() == 8
    for i in range(charts.count()):         # drawn, not an empty frame: Plotly's SVG with its traces
        assert charts.nth(i).locator(".main-svg").count() >= 1, i
        assert charts.nth(i).locator("g.trace").count() >= 1, i
    body = page.locator('[data-testid="stMain"]').inner_text()
    assert "The paper replication: its figures and this model's" in body
    assert "Same relative load, not the same clock." in body
    for paragraph in ("Figure 2. One trace of", "Figure 13. Mean requests batched per step at",
                      f"over {len(FIG13_SEEDS)} arrival seeds", "Figure 12. Each system at the rates",
                      "Where this model departs from the paper's system"):
        assert paragraph in body, paragraph
    assert not console, console
    page.get_by_text("Figure 13.").scroll_into_view_if_needed()
    shot(page, "throughput_paper_replication")


def test_kernel_tab_runs_a_tiny_sweep_on_cpu(server, page):
    page.goto(server + "/kernel", wait_until="domcontentloaded")
    settle(page)
    assert not errors(page), errors(page)
    radio = page.locator('[data-testid="stRadio"]').filter(has_text="tiny")
    radio.locator("label").filter(has_text=re.compile(r"^\s*tiny")).first.click()
    wait_until(lambda: radio.locator("input[type=radio]:checked").count() == 1 and
               "tiny" in radio.locator("label:has(input:checked)").inner_text(), 30, "the tiny shape to be selected")
    settle(page)
    page.get_by_role("button", name="Run sweep").click()
    # the live result names its shape; recorded GPU results (if shipped) never use the tiny one
    page.get_by_text("2 sequences × 64 tokens").first.wait_for(timeout=PAGE_S * 1000)
    settle(page)
    table = page.locator('[data-testid="stDataFrame"]').first
    assert page.locator(".js-plotly-plot").count() >= 3       # latency, overhead, two costs
    assert not errors(page), errors(page)
    table.scroll_into_view_if_needed()
    shot(page, "kernel_sweep")


def test_first_visit_to_a_shared_page_url_on_a_cold_server(page):
    """A shared link (/accounting) is the very first request a freshly started server sees.

    With Streamlit's legacy handling of a ``pages/`` folder still on, that first visit would run
    the page file alone with every module in ``pages/`` listed as a page; ``python app.py`` turns
    it off before the server starts. The page must render under app.py's own navigation.
    """
    with serve_app("streamlit-cold-server") as base:
        page.goto(base + "/accounting", wait_until="domcontentloaded")     # nothing visited before
        title = settle(page)
        shot(page, "cold_first_visit_accounting")
        assert title == "Slot accounting", title
        assert page.url.rstrip("/") == base + "/accounting", page.url
        assert not errors(page), errors(page)
        hrefs = page.locator('[data-testid="stSidebarNav"] a').evaluate_all("els => els.map(e => e.href)")
        paths = app_url_paths()
        assert sorted(h.rstrip("/") for h in hrefs) == sorted([base] + [f"{base}/{p}" for p in paths[1:]]), hrefs


# The animation on the first screen, and a presented lesson step keeping Play and the maps on screen:
# tests/browser/test_ux_browser.py::test_the_first_screen_then_the_lesson_step_row (one page load with
# the lesson step row's checks).


def test_every_page_presents(server, browser):
    """Issue 23 item 13: ``?present=true`` is honoured on every page (no sidebar, the way back shown,
    no error, no console error) at a projector's and a laptop's size; item 14: /explainer opens the
    explainer instead of "Page not found". The home page (``/?present=true``) gets these checks in
    test_ux_browser.py::test_the_first_screen_then_the_lesson_step_row, which loads it at both
    sizes anyway (one load each instead of two)."""
    paths = app_url_paths()[1:]
    for width, height in ((1920, 1080), (1366, 768)):
        ctx = browser.new_context(viewport={"width": width, "height": height})
        pg = ctx.new_page()
        console = console_errors(pg)
        try:
            for path in paths:
                pg.goto(f"{server}/{path}?present=true", wait_until="domcontentloaded")
                settle(pg)
                shot(pg, f"present_{path}_{width}x{height}")
                assert not errors(pg), (path, errors(pg))
                assert pg.get_by_role("button", name="Leave presentation mode").is_visible(), path
                assert not pg.locator('section[data-testid="stSidebar"]').is_visible(), path
            pg.goto(f"{server}/explainer?block_size=64", wait_until="domcontentloaded")
            settle(pg)
            assert "Page not found" not in pg.content()
            assert pg.locator("h1").first.text_content().startswith("Reserve for the worst case")
            assert not errors(pg), errors(pg)
            assert not console, console
        finally:
            ctx.close()
