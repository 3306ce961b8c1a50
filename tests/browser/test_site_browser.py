"""The exported static site in a real browser, served by nothing: ``index.html`` opened from disk
(``file://``) in headless Chromium with every other request aborted.

It drags the block-size slider across every value and reads the headline cards back: each must
equal the figure ``python -m allocator simulate --json`` prints for that block size. It plays the
animation, checks the page's JavaScript decoder rebuilds the figure's frames exactly, walks the
guided lesson and opens the arithmetic pages.

Needs Debian's Chromium at /usr/bin/chromium; skips without it (never ``playwright install``).
"""
from __future__ import annotations

import contextlib
import io
import json
import os

import pytest

from allocator.__main__ import main as cli_main
from allocator.engine.scenario import SWEEP_BLOCK_SIZES, Scenario, build_workload, run_both
from allocator.viz.explainer_chart import explainer_figure, explainer_lines_figure, for_projector
from allocator.viz.explainer_chart import LINES_HEIGHT, MAPS_HEIGHT
from allocator.common.formats import pct
from allocator.viz.export.sitecodec import plain_frames

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
if not os.path.exists(CHROMIUM):
    pytest.skip(f"{CHROMIUM} not found: browser tests skipped (apt-get install chromium as root).",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")
WAIT_MS = 60_000


@pytest.fixture(scope="module")
def site_dir(default_site):
    """The default scenario's site, written by ``export-site`` (once a run: tests/conftest.py)."""
    return default_site[0]


@pytest.fixture(scope="module")
def page(site_dir, browser):
    """The site open in Chromium from disk; every request that is not file:// is aborted and kept.
    ``browser``: the module's Chromium (tests/browser/conftest.py)."""
    ctx = browser.new_context(viewport={"width": 1366, "height": 768})
    try:
        pg = ctx.new_page()
        pg.blocked, pg.errors = [], []

        def route(r):
            if r.request.url.startswith("file://"):
                r.continue_()
            else:
                pg.blocked.append(r.request.url)
                r.abort()

        pg.route("**/*", route)
        pg.on("pageerror", lambda e: pg.errors.append(str(e)))
        pg.goto((site_dir / "index.html").as_uri())
        pg.wait_for_selector("body[data-ready]", state="attached", timeout=WAIT_MS)
        yield pg
    finally:
        ctx.close()


def _cli(bs: int) -> dict:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert cli_main(["simulate", "--json", "--block-size", str(bs)]) == 0
    return json.loads(buf.getvalue())


def _expected_cards(summary: dict) -> list[str]:
    """The three cards as the CLI's figures say they must read (mean running, utilisation while
    requests wait, steps to drain)."""
    return [f"{summary['mean_running_busy']:.1f}", pct(summary["mean_utilization_busy"]), f"{summary['steps']:,}"]


def _cards(pg) -> dict:
    return pg.evaluate("""() => Object.fromEntries(['reserve_max', 'paged'].map(k => [k,
        [0, 1, 2].map(i => document.querySelector(`[data-testid="card-${k}-${i}"] .value`).textContent)]))""")


def _wait_ready(pg, bs: int):
    pg.wait_for_function(f"document.body.getAttribute('data-ready').startsWith('{bs}|main|')", timeout=WAIT_MS)


def test_the_slider_dragged_across_every_block_size_shows_the_cli_figures(page):
    box = page.locator("#bs").bounding_box()
    n = len(SWEEP_BLOCK_SIZES)
    assert page.evaluate("document.getElementById('bs').max") == str(n - 1)
    x0, width, y = box["x"] + 8, box["width"] - 16, box["y"] + box["height"] / 2    # the thumb's travel
    page.mouse.move(x0, y)
    page.mouse.down()
    seen = []
    for i, bs in enumerate(SWEEP_BLOCK_SIZES):
        page.mouse.move(x0 + width * i / (n - 1), y, steps=4)
        _wait_ready(page, bs)
        assert page.locator("#bs-out").text_content() == f"{bs} slots"
        cli = _cli(bs)
        cards = _cards(page)
        assert cards["reserve_max"] == _expected_cards(cli["reserve_max"]), bs
        assert cards["paged"] == _expected_cards(cli["paged"]), bs
        title = page.locator('[data-side="paged"] h3').text_content()
        assert title == f"Paged · blocks of {bs}"
        seen.append(bs)
    page.mouse.up()
    assert seen == list(SWEEP_BLOCK_SIZES)
    assert page.blocked == [] and page.errors == []


def test_play_runs_the_animation_and_the_decoder_rebuilds_the_figures_frames(page):
    page.locator("#bs").fill(str(SWEEP_BLOCK_SIZES.index(16)))
    _wait_ready(page, 16)
    assert page.evaluate("KV_PLAYER.current()") == 0
    page.locator("#maps .updatemenu-button").filter(has_text="Play").click()
    page.wait_for_function("KV_PLAYER.current() >= 3", timeout=WAIT_MS)
    readout = page.locator("#maps .annotation-text").first.text_content()
    assert "step" in readout and "step 0:" not in readout          # the readout moved with the frames
    page.locator("#maps .updatemenu-button").filter(has_text="Pause").click()
    page.keyboard.press("Home")                                     # nothing focused that takes keys
    at = page.evaluate("KV_PLAYER.current()")
    page.locator("h2").first.click()
    page.keyboard.press("ArrowRight")
    page.wait_for_function(f"KV_PLAYER.current() === {at + 1}", timeout=WAIT_MS)
    # the page's JavaScript decoder gives back the frames the app's builder drew
    sc = Scenario().checked()
    fig = explainer_figure(run_both(build_workload(sc), sc.slots, 16)).freeze()
    want = plain_frames(fig.to_dict()["frames"])
    got = page.evaluate("""() => { const f = KV_SITE.root.fig.main['16'];
        const r = KV_DECODE.resolve(f, KV_SITE.pool);
        return KV_DECODE.decodeFrames(r.frames, r.frames.template); }""")
    assert len(got) == len(want) > 2
    assert got == json.loads(json.dumps(want))
    # and the lines under the maps are the app's, drawn
    lines = explainer_lines_figure(run_both(build_workload(sc), sc.slots, 16)).to_dict()
    assert page.evaluate("document.getElementById('maps-lines').data.length") == len(lines["data"]) == 4
    assert page.evaluate("""() => KV_DECODE.resolve(KV_SITE.root.fig.main['16'], KV_SITE.pool).lines.data""") == \
        json.loads(json.dumps(lines["data"]))


def test_the_metadata_cost_slider_redraws_the_sweep_and_the_details(page):
    from allocator.viz.claims.explainer import details_rows
    costs = page.evaluate("Array.from({length: +document.getElementById('cost').max + 1}, (_, i) => i)")
    assert len(costs) == 33
    page.locator("#cost").fill("4")                                 # c = 1
    page.wait_for_function("document.getElementById('c-out').textContent === '1'", timeout=WAIT_MS)
    assert "With c = 1 slot equivalents per block" in page.locator("#sweep-text").text_content()
    sc = Scenario().checked()
    bs = int(page.locator("#bs-out").text_content().split()[0])
    want = next(r for r in details_rows(run_both(build_workload(sc), sc.slots, bs, record_snapshots=False), 1.0)
                if r["measure"].startswith("cost per stored token"))
    row = page.locator("#details tr").filter(has_text="cost per stored token").locator("td").all_text_contents()
    assert row == [str(v) for v in want.values()]
    page.locator("#cost").fill("0")


def test_guided_lesson_hides_then_reveals_numbers_of_the_run_on_screen(page):
    page.locator("#lesson-start").click()
    page.wait_for_selector("#lesson h3", timeout=WAIT_MS)
    assert page.locator("#maps-hidden").is_visible() and not page.locator("#cards").is_visible()
    page.locator("#lesson input[type=radio]").first.check()
    page.locator("#lesson-reveal").click()
    text = page.locator('[data-testid="reveal"]').text_content()
    cli = _cli(16)
    assert text.startswith(f"{cli['reserve_max']['peak_running']}.")
    assert f"{cli['reserve_max']['mean_running_busy']:.1f} ran while requests waited" in text
    assert "The class predicted: 3." in text
    # neutral, as the app's st.info: a reveal states what the run did, never green for "right" (issue 40)
    border = page.locator('[data-testid="reveal"]').evaluate("e => getComputedStyle(e).borderLeftColor")
    assert border == "rgb(28, 131, 225)", border
    for _ in range(3):                                 # step 4 moves the slider to 256
        page.locator("#lesson-next").click()
    _wait_ready(page, 256)
    assert page.locator("#bs-out").text_content() == "256 slots"
    page.locator("#lesson-reveal").click()
    util = pct(_cli(256)["paged"]["mean_utilization_busy"])
    assert f"to {util}" in page.locator('[data-testid="reveal"]').text_content()
    page.locator("#lesson-end").click()
    assert not page.locator("#lesson").is_visible()


def test_presentation_mode_enlarges_the_figure_and_escape_leaves(page):
    page.locator("#present").click()
    page.wait_for_function("document.body.getAttribute('data-ready').endsWith('|p')", timeout=WAIT_MS)
    def heights():
        return page.evaluate("[document.getElementById('maps').layout.height, "
                             "document.getElementById('maps-lines').layout.height]")

    sc = Scenario().checked()
    run = run_both(build_workload(sc), sc.slots, sc.block_size)
    present = [for_projector(explainer_figure(run)).to_dict()["layout"]["height"],
               for_projector(explainer_lines_figure(run)).to_dict()["layout"]["height"]]
    assert present[0] > MAPS_HEIGHT and present[1] > LINES_HEIGHT
    assert heights() == present
    page.keyboard.press("Escape")
    page.wait_for_function("document.body.getAttribute('data-ready').endsWith('|n')", timeout=WAIT_MS)
    assert heights() == [MAPS_HEIGHT, LINES_HEIGHT]
    assert page.blocked == [] and page.errors == []


def _thumb_centre_x(pg) -> float:
    """Where the block-size slider's thumb is drawn: the middle of the columns of the slider's
    screenshot that hold the thumb's colour (the palette's blue, #0072B2), in page pixels."""
    import numpy as np
    from PIL import Image
    box = pg.locator("#bs").bounding_box()
    png = pg.screenshot(clip=box)
    rgb = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    blue = (np.abs(rgb - np.array([0, 114, 178])).sum(axis=2) < 60).any(axis=0)
    cols = np.flatnonzero(blue)
    assert cols.size >= 10, "the thumb was not found in the slider's screenshot"
    return box["x"] + (cols[0] + cols[-1] + 1) / 2 * box["width"] / rgb.shape[1]


@pytest.mark.parametrize("width,height", [(1366, 768), (1920, 1080)])
def test_each_block_size_label_sits_under_the_thumb_at_its_value(page, site_dir, width, height):
    """The nine labels under the block-size slider: each label's centre (and its tick's) is within
    3 px of the thumb's centre as drawn at that value, in normal and in presentation mode."""
    pg = page.context.browser.new_page(viewport={"width": width, "height": height})
    try:
        for present in (False, True):
            pg.goto((site_dir / "index.html").as_uri() + ("?present=true" if present else ""))
            pg.wait_for_selector("body[data-ready]", state="attached", timeout=WAIT_MS)
            labels = pg.locator("#bs-labels span")
            assert labels.all_text_contents() == [str(b) for b in SWEEP_BLOCK_SIZES]
            for i, bs in enumerate(SWEEP_BLOCK_SIZES):
                pg.locator("#bs").fill(str(i))
                _wait_ready(pg, bs)
                pg.evaluate("document.activeElement.blur()")
                thumb = _thumb_centre_x(pg)
                lab = labels.nth(i).bounding_box()
                tick = pg.evaluate("""i => { const s = document.querySelectorAll('#bs-labels span')[i];
                    const r = s.getBoundingClientRect(), b = getComputedStyle(s, '::before');
                    return r.left + parseFloat(b.left) + parseFloat(b.width) / 2; }""", i)
                where = f"{width}x{height} {'presentation' if present else 'normal'} block size {bs}"
                assert abs(lab["x"] + lab["width"] / 2 - thumb) <= 3, (where, lab, thumb)
                assert abs(tick - thumb) <= 3, (where, tick, thumb)
    finally:
        pg.close()


def test_the_zip_unzipped_on_a_static_host_is_served_by_another_user(default_site, browser):
    """Issue 40: the app's "Static site (zip)" stored every entry as mode 0600, so unzipped into a
    department's public_html a web server running as another user answered 404 for every file.
    Here the same zip (``site_zip`` over the exported folder's files) is unzipped with Info-ZIP's
    ``unzip``, served by ``python3 -m http.server`` running as ``nobody``, fetched file by file
    and opened in Chromium over http. Needs root (to run as another user), unzip and runuser."""
    import shutil
    import socket
    import subprocess
    import tempfile
    import time
    import urllib.error
    import urllib.request

    from allocator.viz.export.site import site_zip

    if os.geteuid() != 0 or not all(shutil.which(t) for t in ("unzip", "runuser")) \
            or not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs root, unzip, runuser and /usr/bin/python3 to serve the site as another user")
    folder = default_site[0]
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    root = tempfile.mkdtemp(prefix="static-host-", dir="/tmp")
    os.chmod(root, 0o755)                                  # the host's user must reach public_html
    server = None
    try:
        with open(os.path.join(root, "site.zip"), "wb") as fh:
            fh.write(site_zip(files))
        public = os.path.join(root, "public_html")
        subprocess.run(["unzip", "-q", os.path.join(root, "site.zip"), "-d", public], check=True)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = subprocess.Popen(["runuser", "-u", "nobody", "--", "/usr/bin/python3", "-m", "http.server",
                                   str(port), "--bind", "127.0.0.1", "--directory", public],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}/kv-paging-lesson/"
        for _ in range(600):                               # until it listens (it answers or it died)
            try:
                urllib.request.urlopen(base, timeout=10).close()
                break
            except (urllib.error.URLError, ConnectionError):
                assert server.poll() is None, "the static host did not start"
                time.sleep(0.1)
        refused = []
        for name in sorted(files):
            try:
                with urllib.request.urlopen(base + name, timeout=30) as resp:
                    if resp.read() != files[name]:
                        refused.append(f"{name}: other bytes")
            except urllib.error.HTTPError as exc:
                refused.append(f"{name}: HTTP {exc.code}")
        assert not refused, refused[:5]
        ctx = browser.new_context(viewport={"width": 1366, "height": 768})
        try:
            pg = ctx.new_page()
            errors = []
            pg.on("pageerror", lambda e: errors.append(str(e)))
            pg.goto(base + "index.html")
            pg.wait_for_selector("body[data-ready]", state="attached", timeout=WAIT_MS)
            assert pg.locator("#cards").is_visible() and not errors, errors
        finally:
            ctx.close()
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("width,height", [(1366, 768), (1920, 1080)])
def test_no_blank_band_between_the_maps_and_the_line_charts(page, site_dir, width, height):
    """The maps' div had a fixed CSS height of 900 px around a 620 px figure: a blank band of about 280 px
    sat between the maps and the line charts (issue 40). The div is now as tall as its figure, in normal
    and in presentation mode, so the line charts follow the maps' legend directly."""
    pg = page.context.browser.new_page(viewport={"width": width, "height": height})
    try:
        for present in (False, True):
            pg.goto((site_dir / "index.html").as_uri() + ("?present=true" if present else ""))
            pg.wait_for_selector("body[data-ready]", state="attached", timeout=WAIT_MS)
            pg.wait_for_function("document.getElementById('maps').layout !== undefined", timeout=WAIT_MS)
            box = pg.evaluate("""() => { const m = document.getElementById('maps'), l = document.getElementById('maps-lines');
                const svg = m.querySelector('svg.main-svg').getBoundingClientRect();
                return {div: m.getBoundingClientRect().height, fig: m.layout.height, svg_bottom: svg.bottom,
                        lines_top: l.getBoundingClientRect().top}; }""")
            where = f"{width}x{height} {'presentation' if present else 'normal'}"
            assert abs(box["div"] - box["fig"]) <= 1, (where, box)
            assert 0 <= box["lines_top"] - box["svg_bottom"] <= 5, (where, box)
    finally:
        pg.close()
