"""Timing pages in headless Chromium against a real server, for ``make bench``'s browser sections
(``tests/tools/bench_pages.py``): start ``python app.py`` (``tests.browser.test_browser.serve_app``)
and a browser, read what the page shows (script state, drawn charts, title, progress bar), and poll
until it has settled, with the seconds at which each awaited sign first showed.
"""
from __future__ import annotations

import contextlib
import os
import time

from kernels.sweep.bench import print_table

VIEWPORT = {"width": 1920, "height": 1080}     # a projector
UP_S = 60.0                                    # the server has been up this long before timing
WAIT_S = 240.0                                 # the longest any single wait may take

#: Logs every change of Streamlit's script state with the page's clock, so that a rerun shorter
#: than a poll is still seen to have started and ended.
PROBE_JS = """(() => {
  window.__benchRuns = [];
  const attach = () => {
    const app = document.querySelector('[data-testid="stApp"]');
    if (!app) { setTimeout(attach, 20); return; }
    new MutationObserver(() => window.__benchRuns.push([performance.now(), app.dataset.testScriptState]))
      .observe(app, {attributes: true, attributeFilter: ['data-test-script-state']});
  };
  attach();
})();"""

#: What the main area shows now: charts (drawn, not stale), the page's title, a progress bar.
STATE_JS = """(opts) => {
  const app = document.querySelector('[data-testid="stApp"]');
  const main = document.querySelector('[data-testid="stMain"]');
  const charts = main ? [...main.querySelectorAll('[data-testid="stPlotlyChart"]')] : [];
  const fresh = charts.filter(c => !c.closest('[data-stale="true"]'));
  const drawn = fresh.filter(c => c.querySelector('.js-plotly-plot .main-svg'));
  const h = main && main.querySelector('h1');
  const bar = main && main.querySelector('[data-testid="stProgress"] [role="progressbar"]');
  const runs = (window.__benchRuns || []).filter(r => r[0] >= (opts.since || 0));
  return {
    script: app ? app.dataset.testScriptState : null,
    stale: document.querySelectorAll('[data-stale="true"]').length,
    spinners: document.querySelectorAll('[data-testid="stSpinner"]').length,
    skeletons: document.querySelectorAll('[data-testid="stSkeleton"]').length,
    charts: charts.length, drawn: drawn.length, nodes: main ? main.getElementsByTagName('*').length : 0,
    firstTop: drawn.length ? drawn[0].getBoundingClientRect().top + window.scrollY : null,
    h1: h ? h.innerText.trim() : '',
    bar: bar ? Number(bar.getAttribute('aria-valuenow')) : null,
    ran: runs.some(r => r[1] === 'running') && runs.some(r => r[1] === 'notRunning'),
    found: opts.text ? [...(main ? main.querySelectorAll(opts.text[0]) : [])]
      .filter(e => !e.closest('[data-stale="true"]')).some(e => e.textContent.includes(opts.text[1])) : null,
    now: performance.now(),
  };
}"""


class Skip(Exception):
    """The browser tools are not here: the section prints "skipped" and counts nothing."""


def _tools():
    """(sync_playwright, serve_app, CHROMIUM, CHROMIUM_ARGS), or Skip naming what is missing."""
    try:
        import pytest
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        raise Skip(f"playwright not installed: {exc}") from exc
    try:
        from tests.browser.test_browser import CHROMIUM, CHROMIUM_ARGS, serve_app
    except pytest.skip.Exception as exc:        # the module skips itself without Chromium
        raise Skip(str(exc)) from exc
    return sync_playwright, serve_app, CHROMIUM, CHROMIUM_ARGS


@contextlib.contextmanager
def browser_session(log_name: str):
    """A fresh ``python app.py`` server and one Chromium page (1920x1080, with the script-state
    probe): yields (base URL, page, monotonic time the server answered its health check, seconds
    from spawning the server to that answer)."""
    sync_playwright, serve_app, chromium, args = _tools()
    spawned = time.monotonic()
    with serve_app(log_name) as base:
        up = time.monotonic()
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=args, timeout=60_000)
            try:
                ctx = browser.new_context(viewport=VIEWPORT)
                ctx.set_default_timeout(WAIT_S * 1000)
                ctx.add_init_script(PROBE_JS)
                yield base, ctx.new_page(), up, up - spawned
            finally:
                browser.close()


def wait_up(up: float, up_s: float = UP_S) -> None:
    """Sleep until the server has been up ``up_s`` seconds (the issue's condition for timing a page)."""
    time.sleep(max(0.0, up_s - (time.monotonic() - up)))


def state(page, since: float = 0.0, text: tuple | None = None) -> dict:
    return page.evaluate(STATE_JS, {"since": since, "text": list(text) if text else None})


def settled(s: dict) -> bool:
    """The script has finished and the browser has drawn what it sent (nothing stale, no spinner,
    no placeholder of an element still loading, every chart drawn)."""
    return (s["script"] == "notRunning" and not s["stale"] and not s["spinners"] and not s["skeletons"]
            and s["drawn"] == s["charts"]
            and bool(s["h1"]))


def watch(page, t0: float, done, since: float = 0.0, text: tuple | None = None, marks=None,
          timeout_s: float = WAIT_S, interval: float = 0.05, quiet_s: float = 0.5, each=None) -> tuple[dict, dict]:
    """Poll the page every ``interval`` s until ``done(state)`` has held, with nothing on the page
    changing, for ``quiet_s`` s (Streamlit reports its script finished before the browser has drawn
    the last of what it sent). Returns (marks, last state): marks maps each name in ``marks``
    ({name: predicate}) to the seconds after ``t0`` (a ``time.perf_counter()`` reading) at which its
    predicate first held, and "done" to when the final, quiet state was first seen; ``each(seconds,
    state)`` is called with every state read. Raises TimeoutError after ``timeout_s``."""
    seen, marks, stable, stable_at = {}, dict(marks or {}), None, None
    while True:
        s = state(page, since, text)
        now = time.perf_counter() - t0
        if each is not None:
            each(now, s)
        for name, pred in marks.items():
            if name not in seen and pred(s):
                seen[name] = now
        key = {k: v for k, v in s.items() if k != "now"}
        if done(s) and key == stable:
            if now - stable_at >= quiet_s:
                seen["done"] = stable_at
                return seen, s
        elif done(s):
            stable, stable_at = key, now
        else:
            stable = None
        if now > timeout_s:
            raise TimeoutError(f"no answer within {timeout_s:.0f} s (script {s['script']}, a rerun seen {s['ran']}, "
                               f"charts drawn {s['drawn']} of {s['charts']}, title {s['h1'][:40]!r})")
        time.sleep(interval)


def page_clock(page) -> float:
    return page.evaluate("performance.now()")


def sidebar_links(page, base: str) -> list[tuple[str, str]]:
    """(href, link text) of every page in the sidebar, in order."""
    links = page.locator('[data-testid="stSidebarNav"] a')
    return [(h.rstrip("/"), t.strip()) for h, t in
            links.evaluate_all("els => els.map(e => [e.href, e.innerText.trim().split('\\n').pop()])")]


def visit(page, go, old_h1: str) -> dict:
    """Run ``go()`` (a click or a page load) and time the new page: its title, its first drawn chart,
    the whole page settled. Returns seconds per mark, the new title and where the first chart sits."""
    t0 = time.perf_counter()
    go()
    new = lambda s: s["h1"] and s["h1"] != old_h1     # noqa: E731
    seen, s = watch(page, t0, lambda s: new(s) and settled(s),
                    marks={"title": new, "chart": lambda s: new(s) and s["drawn"] > 0})
    seen["h1"], seen["first_top"] = s["h1"], s["firstTop"]
    return seen


def fresh_visit(browser, url: str) -> dict:
    """:func:`visit` of ``url`` in a new browser context (its own empty cache and renderer process,
    with the script-state probe, at ``VIEWPORT``), closed afterwards: a fresh browser's first load."""
    ctx = browser.new_context(viewport=VIEWPORT)
    try:
        ctx.add_init_script(PROBE_JS)
        page = ctx.new_page()
        return visit(page, lambda: page.goto(url), "")
    finally:
        ctx.close()


def run_section(section: str, title: str, body) -> list[bool]:
    """Run one section: ``body(rows, met)`` appends table rows (measure, value, target, met, note) and
    met flags. Skip prints "skipped" and counts nothing; any other failure keeps the rows measured
    before it, adds the error and counts one miss. The title ends with this machine's load (other
    work slows every browser figure)."""
    rows, met = [], []
    try:
        body(rows, met)
    except Skip as exc:
        rows, met = [[section, "skipped", str(exc)[:120], "-", ""]], []
    except BaseException as exc:                     # pytest.fail (server did not start) is a BaseException
        if isinstance(exc, KeyboardInterrupt):
            raise
        rows.append([f"{section} stopped here", "error", f"{type(exc).__name__}: {str(exc).splitlines()[0][:150]}",
                     False, ""])
        met.append(False)
    load = os.getloadavg()[0]
    print_table(f"{title} [load average {load:.1f} on {os.cpu_count()} CPUs at the end]",
                ["measure", "value", "target", "met", "note"], rows)
    return met
