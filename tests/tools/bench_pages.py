"""Issue 24's browser targets for ``make bench``: every page, the explainer's slider and Play, the
Throughput and Kernel pages, measured in headless Chromium against a real server (``python app.py``,
started by ``tests.browser.test_browser.serve_app``), and the suite's own wall time.

Sections (registered in ``tests/tools/bench.py``):
    pages       every page in the sidebar: first chart within 3 s of navigation, server up 60 s
    explainerbrowser  block-size drag to redrawn maps <= 1.5 s for every block size; Play >= 10 frames/s
    throughputbrowser the default sweep <= 10 s cold (fresh server, first visit), each control change
                <= 5 s, a progress bar on anything longer than 2 s
    kernelbrowser     the Kernel page loads <= 3 s (server up 60 s); its default sweep shows a moving
                progress bar, meets the estimate it states and stays under 60 s
    suite       ``make test`` (``python -m pytest -q tests``) <= 10 minutes

Every wait is bounded. Without Chromium (or Playwright) a section prints "skipped" and counts nothing;
a section that fails to run prints the error and counts one missed target.
"""
from __future__ import annotations

import os
import re
import statistics
import subprocess
import time

from tests.tools.browser_timing import (UP_S, VIEWPORT, browser_session, fresh_visit, page_clock, run_section,
                                        settled, sidebar_links, state, visit, wait_up, watch)

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# ---------------------------------------------------------------------------------- every page

def bench_pages(rounds: int = 3, target_s: float = 3.0, fresh: int = 3) -> list[bool]:
    """Every page in the sidebar, server up 60 s: seconds from navigation to the first drawn chart
    (a page whose first screen holds no chart: to the page settled, and the row says so). First the
    app's URL is opened in a fresh browser (the default page, the explainer: what a student does),
    ``fresh`` times, each in a new browser context (its own empty cache and renderer process): the
    figure is their median, and the note gives each, since one load on a 2-core machine that also
    runs the server reads anywhere in a band about a second wide. Then every page is clicked in the
    sidebar in turn, ``rounds`` times. A page's first click is the figure (a lecturer switching page
    mid-lecture); later clicks are shown beside it. Last, two info rows (:func:`floor_rows`): the
    same fresh-browser load of a bare Streamlit page with one chart, what Streamlit and Plotly cost
    on their own before the first chart of any page."""
    title = f"every page in headless Chromium, server up {UP_S:.0f} s (first visit; s)"

    def body(rows, met):
        visits = {}
        with browser_session("bench-pages") as (base, page, up, _):
            wait_up(up)
            opened = visit(page, lambda: page.goto(base + "/"), "")
            loads = [opened]
            for _ in range(fresh - 1):                 # more fresh browsers: new contexts, new renderers
                loads.append(fresh_visit(page.context.browser, base + "/"))
            links = sidebar_links(page, base)
            h1 = opened["h1"]
            for rnd in range(rounds):
                for href, _name in links[1:] + links[:1]:       # the explainer is showing: it comes last
                    link = page.locator(f'[data-testid="stSidebarNav"] a[href="{href}"], '
                                        f'[data-testid="stSidebarNav"] a[href="{href}/"]').first
                    seen = visit(page, link.click, h1)
                    h1 = seen["h1"]
                    visits.setdefault(href, []).append(seen)

            def row(name, seen, later, how_opened):
                on_screen = "chart" in seen and seen["first_top"] is not None and seen["first_top"] < VIEWPORT["height"]
                key = "chart" if on_screen else "done"
                ok = seen[key] <= target_s
                met.append(ok)
                again = [v[key] for v in later]
                how = "first chart" if on_screen else (
                    "no chart on the first screen: page settled" if "chart" in seen else "no chart: page settled")
                note = (f"later {statistics.median(again):.2f} (max {max(again):.2f}); " if again else "") + \
                    f"settled {seen['done']:.2f}"
                rows.append([f"{how_opened} {name}: {how}", f"{seen[key]:.2f}", f"<= {target_s:g}", ok, note])

            typical = dict(opened)                     # the medians of the fresh loads, mark by mark
            for mark in ("chart", "done"):
                if all(mark in v for v in loads):
                    typical[mark] = statistics.median(v[mark] for v in loads)
            row(links[0][1], typical, [], f"app URL in a fresh browser (median of {len(loads)}) ->")
            shown = "chart" if "first chart" in rows[-1][0] else "done"      # the mark the row reports
            rows[-1][-1] = "each " + ", ".join(f"{v[shown]:.2f}" for v in loads) + "; " + rows[-1][-1]
            for href, name in links:
                row(name, visits[href][0], visits[href][1:], "click ->")
            floor_rows(page.context.browser, fresh, rows)

    return run_section("pages", title, body)


#: The bare reference page (tests/tools/bench_floor_page.py): a title and one chart, nothing else.
FLOOR_PAGE = "tests/tools/bench_floor_page.py"


def floor_rows(browser, fresh: int, rows: list) -> None:
    """Info rows under the fresh-browser figure: the same fresh-browser load of a bare Streamlit page
    (a title and one chart), timed the same way, ``fresh`` new contexts each, median shown. With one
    small heatmap it is what Streamlit and Plotly cost in a fresh browser before any page of the lab
    is involved; with the explainer's own maps figure, what the lab's first chart costs on its own.
    The page's server is started here, and the maps are built (one visit) before anything is timed."""
    from tests.browser.test_browser import serve_app
    with serve_app("bench-floor", script=FLOOR_PAGE) as base:
        for query, what in (("", "a title and one small heatmap"),
                            ("?chart=maps", "a title and the explainer's maps figure")):
            loads = []
            for i in range(fresh + 1):       # the first visit (the server builds the figure) is not timed
                seen = fresh_visit(browser, base + "/" + query)
                if i:
                    loads.append(seen["chart"])
            rows.append([f"reference: a bare Streamlit page, {what}, fresh browser (median of {fresh}): first chart",
                         f"{statistics.median(loads):.2f}", "(info)", True,
                         "each " + ", ".join(f"{v:.2f}" for v in loads)])


# ------------------------------------------------------------------------------------ explainer

MAPS = ".st-key-maps"               # the explainer's animated figure (st.plotly_chart key="maps")


def bench_explainer_browser(play_s: float = 5.0) -> list[bool]:
    """The explainer in a real browser, server up 60 s. Block size: the sidebar slider's thumb is
    focused and moved with ArrowRight from 16 to 256, then ArrowLeft down to 1 (each size's first
    visit is timed; 16, warmed at start-up, on its return), each time until the maps' readout names
    the new block ("Paged (block N)") in a figure that is not stale. Play: ▶ Play on the default
    scenario, frames counted from Plotly's ``plotly_animatingframe`` events for ``play_s`` s."""
    from pages._ui.url_params import BLOCK_SIZES, BLOCK_SIZE_DEFAULT
    title = f"explainer in headless Chromium, server up {UP_S:.0f} s"

    def body(rows, met):
        with browser_session("bench-explainer") as (base, page, up, _):
            wait_up(up)
            page.goto(base + "/")
            watch(page, time.perf_counter(), settled)
            thumb = page.locator(".st-key-block_size").get_by_role("slider")
            pos = BLOCK_SIZES.index(BLOCK_SIZE_DEFAULT)
            moves = [("ArrowRight", i) for i in range(pos + 1, len(BLOCK_SIZES))] + \
                    [("ArrowLeft", i) for i in range(len(BLOCK_SIZES) - 2, -1, -1)]
            times: dict[int, float] = {}
            revisits: dict[int, float] = {}            # block sizes the server has already computed
            for key, i in moves:
                bs = BLOCK_SIZES[i]
                thumb.focus()
                since = page_clock(page)
                t0 = time.perf_counter()
                page.keyboard.press(key)
                seen, _ = watch(page, t0, lambda s: s["ran"] and settled(s) and s["found"], since=since,
                                text=(f"{MAPS} .annotation-text", f"(block {bs})"), marks={"maps": lambda s: s["found"]})
                (revisits if bs in times else times)[bs] = seen["maps"]
            worst = max(times, key=times.get)
            values = list(times.values())
            ok = max(values) <= 1.5
            met.append(ok)
            rows.append(["block-size change to redrawn maps: median over the block sizes (s)",
                         f"{statistics.median(values):.2f}", "(info)", True, ""])
            rows.append([f"block-size change to redrawn maps: worst, block {worst} (s)", f"{times[worst]:.2f}",
                         "<= 1.5", ok, ", ".join(f"{b}: {times[b]:.2f}" for b in BLOCK_SIZES)])
            rows.append(["... back to a block size the server has computed: median, max (s)",
                         f"{statistics.median(revisits.values()):.2f}, {max(revisits.values()):.2f}", "(info)", True,
                         ", ".join(f"{b}: {t:.2f}" for b, t in revisits.items())])
            # Play on the default scenario, from a fresh load
            page.goto(base + "/")
            watch(page, time.perf_counter(), settled)
            page.evaluate("""() => { const gd = document.querySelector('%s .js-plotly-plot');
                window.__frames = []; gd.on('plotly_animatingframe', e => window.__frames.push(performance.now())); }"""
                          % MAPS)
            page.locator(f"{MAPS} .updatemenu-button").first.click()
            time.sleep(play_s)
            frames = page.evaluate("window.__frames")
            page.locator(f"{MAPS} .updatemenu-button").nth(1).click()
            nominal = page.evaluate("""() => { const gd = document.querySelector('%s .js-plotly-plot');
                return 1000 / gd.layout.updatemenus[0].buttons[0].args[1].frame.duration; }""" % MAPS)
            fps = (len(frames) - 1) / ((frames[-1] - frames[0]) / 1000) if len(frames) > 2 else 0.0
            ok = fps >= 10.0
            met.append(ok)
            rows.append([f"Play, default scenario: frames per second over {play_s:g} s", f"{fps:.1f}", ">= 10", ok,
                         f"{len(frames)} frames; the Play button asks for {nominal:.1f}/s"])

    return run_section("explainerbrowser", title, body)


# ----------------------------------------------------------------------------------- throughput

def _select(page, key: str, option: str):
    """Open the select box ``key`` and return the action that picks ``option`` (timed by the caller)."""
    page.locator(f".st-key-{key}").get_by_role("combobox").click()
    return page.get_by_role("option", name=option, exact=True).click


def _arrow(page, key: str):
    """Focus the slider ``key``'s thumb; the action presses ArrowRight (ArrowLeft when it is at its end)."""
    thumb = page.locator(f".st-key-{key}").get_by_role("slider")
    at_end = thumb.evaluate("e => String(e.value ?? e.getAttribute('aria-valuenow')) === "
                            "String(e.max ?? e.getAttribute('aria-valuemax'))")
    thumb.focus()
    return lambda: page.keyboard.press("ArrowLeft" if at_end else "ArrowRight")


def _typed(page, key: str, text: str):
    box = page.locator(f".st-key-{key} input")
    box.fill(text)
    return lambda: box.press("Enter")


def _timed_change(page, prepare) -> dict:
    """Prepare a control change (``prepare()`` returns the final keystroke or click), then time it to
    the rerun finished and drawn; "bar" marks when a progress bar first showed."""
    act = prepare()
    since = page_clock(page)
    t0 = time.perf_counter()
    act()
    seen, _ = watch(page, t0, lambda s: s["ran"] and settled(s), since=since,
                    marks={"bar": lambda s: s["bar"] is not None})
    return seen


def bench_throughput_browser(cold_s: float = 10.0, change_s: float = 5.0, bar_s: float = 2.0) -> list[bool]:
    """The Throughput page on a fresh server: the first visit right after the server answers (the
    default sweep, which the server starts computing in the background at start-up, is then still
    running or just done), then, server up 60 s, each control changed once in turn (settings add up:
    each change is a sweep not computed before), timed to the page redrawn."""
    from allocator.accounting.models import PRESETS
    from allocator.workloads.poisson import SWEEP_WORKLOADS
    from allocator.cost.roofline import GPUS
    title = "throughput page in headless Chromium (fresh server; s)"

    def body(rows, met):
        with browser_session("bench-throughput") as (base, page, up, start_s):
            rows.append(["server start (spawn to health check), info", f"{start_s:.2f}", "(info)", True, ""])
            t0 = time.perf_counter()
            page.goto(base + "/throughput")
            seen, _ = watch(page, t0, lambda s: s["drawn"] > 0 and settled(s),
                            marks={"chart": lambda s: s["drawn"] > 0, "bar": lambda s: s["bar"] is not None})
            ok = seen["chart"] <= cold_s
            met.append(ok)
            bar = f"progress bar at {seen['bar']:.2f}" if "bar" in seen else "no progress bar"
            rows.append(["cold first visit: default sweep to first chart", f"{seen['chart']:.2f}", f"<= {cold_s:g}",
                         ok, f"{bar}; settled {seen['done']:.2f}"])
            text = page.locator('[data-testid="stMain"]').inner_text()
            says = re.search(r"precomput|pre-comput|in advance|at start-?up|when the server start|warmed", text, re.I)
            rows.append(["the page says its default sweep is precomputed", "yes" if says else "no", "(info)", True,
                         f"'{says.group(0)}'" if says else "a cached default counts only if the page says so"])
            wait_up(up)
            changes = [
                ("GPU -> H100", lambda: _select(page, "tp_gpu", GPUS["h100-sxm"].label)),
                ("model -> Llama 3 8B", lambda: _select(page, "tp_model", PRESETS["llama3-8b"].short)),
                ("GPUs -> 2", lambda: _select(page, "tp_gpus", "2")),
                ("block size 16 -> 32 (ArrowRight)", lambda: _arrow(page, "tp_block")),
                ("request rates -> 0.5, 1, 2, 4, 8, 16, 32, 64", lambda: _typed(page, "tp_rates", "0.5, 1, 2, 4, 8, 16, 32, 64")),
                ("requests per run 1,000 -> 1,100 (+)",
                 lambda: page.locator(".st-key-tp_requests [data-testid='stNumberInputStepUp']").click),
                ("lengths -> ShareGPT", lambda: _select(page, "tp_workload", SWEEP_WORKLOADS["sharegpt-opt"])),
                ("latency budget 5 -> 6 (ArrowRight)", lambda: _arrow(page, "tp_factor")),
                ("request rate up close, one step (arrow key)", lambda: _arrow(page, "tp_at")),
            ]
            bars_ok = []
            for label, prepare in changes:
                seen = _timed_change(page, prepare)
                ok = seen["done"] <= change_s
                met.append(ok)
                bar_ok = seen["done"] <= bar_s or ("bar" in seen and seen["bar"] <= bar_s)
                bars_ok.append(bar_ok)
                bar = f"progress bar at {seen['bar']:.2f}" if "bar" in seen else "no progress bar"
                rows.append([f"change {label}", f"{seen['done']:.2f}", f"<= {change_s:g}", ok, bar])
            ok = all(bars_ok)
            met.append(ok)
            rows.append([f"progress bar within {bar_s:g} s on every change longer than {bar_s:g} s",
                         f"{sum(bars_ok)} of {len(bars_ok)}", "all", ok, ""])

    return run_section("throughputbrowser", title, body)


# --------------------------------------------------------------------------------------- kernel

#: The Kernel page's caption after a sweep: the seconds it took and the figure it stated beforehand
#: ("at most N" for a budgeted sweep: kernels/sweep/plan.py); the row compares the two as shown.
TOOK_RE = re.compile(r"Took (\d+) s against an estimate of (?:at most )?(\d+) s")


def bench_kernel_browser(target_s: float = 3.0, rounds: int = 3) -> list[bool]:
    """The Kernel page, server up 60 s: its first visit (clicked from About; later visits beside
    it), then its default (realistic) sweep: the progress bar's value read every 0.25 s, the sweep's
    wall time, and the time it took against the estimate the page states."""
    from kernels.sweep.run import DEFAULT_BUDGET_S
    title = f"kernel page in headless Chromium, server up {UP_S:.0f} s"

    def body(rows, met):
        with browser_session("bench-kernel") as (base, page, up, _):
            page.goto(base + "/about")
            watch(page, time.perf_counter(), settled)
            wait_up(up)
            visits = []
            for _ in range(rounds):
                h1 = state(page)["h1"]
                visits.append(visit(page, page.locator('[data-testid="stSidebarNav"] a[href$="/kernel"]').click, h1))
                if len(visits) < rounds:
                    h1 = visits[-1]["h1"]
                    visit(page, page.locator('[data-testid="stSidebarNav"] a[href$="/about"]').click, h1)
            key = "chart" if "chart" in visits[0] and visits[0]["first_top"] < VIEWPORT["height"] else "done"
            ok = visits[0][key] <= target_s
            met.append(ok)
            later = [v[key] for v in visits[1:]]
            rows.append([f"About -> Kernel, first visit: {'first chart' if key == 'chart' else 'page settled'}",
                         f"{visits[0][key]:.2f}", f"<= {target_s:g}", ok,
                         f"later {statistics.median(later):.2f}" if later else ""])
            series = []
            since = page_clock(page)
            t0 = time.perf_counter()
            page.get_by_role("button", name="Run sweep").click()
            seen, _ = watch(page, t0, lambda s: s["ran"] and settled(s), since=since, interval=0.25,
                            marks={"bar": lambda s: s["bar"] is not None}, each=lambda t, s: series.append((t, s["bar"])))
            values = [(t, v) for t, v in series if v is not None]
            changes = [t for (t, v), (_, w) in zip(values[1:], values[:-1]) if v != w]
            stall = max((b - a for a, b in zip([values[0][0]] + changes, changes + [values[-1][0]])), default=0.0) \
                if values else float("inf")
            for label, value, target, ok in [
                    ("sweep: progress bar shown after (s)", seen.get("bar", float("inf")), 2.0, seen.get("bar", 99) <= 2),
                    ("sweep: longest stretch without the bar moving (s)", stall, 10.0, stall <= 10.0),
                    ("sweep: wall time, click to charts drawn (s)", seen["done"], 60.0, seen["done"] <= 60.0)]:
                met.append(ok)
                rows.append([label, f"{value:.2f}", f"<= {target:g}", ok,
                             f"{len(set(v for _, v in values))} distinct bar values" if "moving" in label else ""])
            took = TOOK_RE.search(page.locator('[data-testid="stMain"]').inner_text())
            if took:
                spent, est = (int(g) for g in took.groups())
                ok = spent <= est
                met.append(ok)
                rows.append(["sweep: the time it took against the estimate it states (s)", f"{spent} / {est}",
                             "<= its estimate", ok, f"budget {DEFAULT_BUDGET_S:g} s"])
            else:
                rows.append(["sweep: the time it took against its estimate", "not shown", "(info)", True, ""])

    return run_section("kernelbrowser", title, body)


# ---------------------------------------------------------------------------------------- suite

def bench_suite(limit_s: float = 600.0) -> list[bool]:
    """``make test`` itself (the Makefile's pytest command, two workers, from this .venv), wall time
    against 10 minutes. Runs the whole suite: name sections (``make bench`` is ``python -m
    tests.tools.bench [sections]``) to leave it out."""
    title = "make test, wall time on this machine"

    def body(rows, met):
        t = time.perf_counter()
        try:
            out = subprocess.run(["make", "-s", "test"], cwd=_ROOT, capture_output=True, text=True,
                                 timeout=2 * limit_s)
            elapsed, rc = time.perf_counter() - t, out.returncode
            summary = (out.stdout.strip().splitlines() or ["(no output)"])[-1]
        except subprocess.TimeoutExpired:
            elapsed, rc, summary = time.perf_counter() - t, None, f"stopped after {2 * limit_s:.0f} s"
        ok = rc is not None and elapsed <= limit_s
        met.append(ok)
        rows.append(["wall time of the whole suite (s)", f"{elapsed:.0f}", f"<= {limit_s:.0f}", ok,
                     f"pytest: {summary[:100]}"])

    return run_section("suite", title, body)
