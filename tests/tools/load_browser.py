"""The load test's real browsers (``tests/tools/load.py --browsers K``): headless Chromium contexts doing a
student's full visible flow on the explainer, at a chosen niceness on this shared machine."""
from __future__ import annotations

import asyncio
import os
import time

from tests.tools.load_server import BLOCK_KEY, _tree_pids

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


async def browser_session(browser, i: int, base: str, deadline: float, stagger_s: float) -> dict:
    """One real Chromium context: load, ArrowRight on the block-size slider, ▶ Play.

    Returns:
        {"kind": "browser", "id", "load_s", "change_s", "play_s", "errors", "ok"}: seconds to the
        drawn chart (``.js-plotly-plot .main-svg``), to the headline metrics changing after
        ArrowRight, and from pressing Play to the step label leaving "engine step 0".
    """
    out = {"kind": "browser", "id": i, "load_s": None, "change_s": None, "play_s": None, "errors": [],
           "ok": False}
    await asyncio.sleep(stagger_s)
    ctx = await browser.new_context(viewport={"width": 1280, "height": 900})

    def left_ms() -> float:
        return max(1000.0, (deadline - time.monotonic()) * 1000)

    try:
        pg = await ctx.new_page()
        t0 = time.monotonic()
        await pg.goto(base + "/", timeout=left_ms(), wait_until="domcontentloaded")
        chart = pg.locator('[data-testid="stPlotlyChart"] .js-plotly-plot').filter(
            has=pg.locator(".updatemenu-button")).first
        await chart.locator(".main-svg").first.wait_for(timeout=left_ms())
        out["load_s"] = time.monotonic() - t0
        values = pg.locator('[data-testid="stMetricValue"]')
        await values.nth(1).wait_for(timeout=left_ms())
        before = "|".join(await values.all_inner_texts())
        thumb = pg.locator(f".st-key-{BLOCK_KEY}").get_by_role("slider")
        await thumb.focus(timeout=left_ms())
        t1 = time.monotonic()
        await pg.keyboard.press("ArrowRight")
        await pg.wait_for_function(
            """(old) => { const v = [...document.querySelectorAll('[data-testid="stMetricValue"]')]
                 .map(m => m.innerText).join('|');
                 return v.length > 0 && v !== old; }""", arg=before, timeout=left_ms(), polling=250)
        await chart.locator(".main-svg").first.wait_for(timeout=left_ms())
        out["change_s"] = time.monotonic() - t1
        label = chart.locator("text.slider-label").first
        t2 = time.monotonic()
        await chart.locator(".updatemenu-button").first.click(timeout=left_ms())
        await pg.wait_for_function(
            """() => { const p = [...document.querySelectorAll('.js-plotly-plot')]
                 .find(e => e.querySelector('.updatemenu-button'));
                 const t = p && p.querySelector('text.slider-label');
                 return t && t.textContent.trim() !== 'engine step 0'; }""", timeout=left_ms(), polling=250)
        out["play_s"] = time.monotonic() - t2
        await label.text_content()
        errs = await pg.locator('[data-testid="stException"], [data-testid="stAlertContentError"]').all_inner_texts()
        out["errors"] += [f"error box: {e[:200]}" for e in errs]
    except Exception as exc:
        out["errors"].append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
    finally:
        try:
            await ctx.close()
        except Exception:
            pass
    out["ok"] = not out["errors"]
    return out


def renice_chromium(nice: int) -> int:
    """Set every thread of every Chromium process under this one to niceness ``nice`` (at least);
    the number of threads changed. Chromium sets its own threads' priorities (as root it raises
    some to -8), so a ``nice`` wrapper at launch does not hold: :func:`keep_chromium_niced` repeats
    this while the sessions run."""
    changed = 0
    for pid in _tree_pids(os.getpid())[1:]:
        try:
            with open(f"/proc/{pid}/comm") as fh:
                if not fh.read().startswith("chrom"):
                    continue
            for tid in os.listdir(f"/proc/{pid}/task"):
                if os.getpriority(os.PRIO_PROCESS, int(tid)) < nice:
                    os.setpriority(os.PRIO_PROCESS, int(tid), nice)
                    changed += 1
        except OSError:                              # a process or thread that just ended
            pass
    return changed


async def keep_chromium_niced(nice: int, stop: asyncio.Event, every_s: float = 0.25) -> None:
    """:func:`renice_chromium` every ``every_s`` seconds until ``stop`` is set."""
    while not stop.is_set():
        renice_chromium(nice)
        try:
            await asyncio.wait_for(stop.wait(), every_s)
        except asyncio.TimeoutError:
            pass


async def launch_browser(k: int):
    """(playwright, browser) with Chromium started, or (None, None) when ``k``
    is 0 or Chromium is missing. Started before the clock runs, so Chromium's own start-up is not
    counted as load."""
    if k <= 0:
        return None, None
    if not os.path.exists(CHROMIUM):
        print(f"note: {CHROMIUM} missing, browser sessions skipped (apt-get install chromium as root)")
        return None, None
    from playwright.async_api import async_playwright
    pw = await async_playwright().start()
    try:
        b = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True, timeout=60_000)
    except Exception:
        await pw.stop()
        raise
    return pw, b


async def run_browsers(browser, k: int, base: str, deadline: float, stagger: float) -> list[dict]:
    """``k`` Chromium contexts of ``browser``, concurrently; [] when there is no browser."""
    if browser is None:
        return []
    return list(await asyncio.gather(*[browser_session(browser, i, base, deadline, stagger * i / max(1, k))
                                       for i in range(k)]))


