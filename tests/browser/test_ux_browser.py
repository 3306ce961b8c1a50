"""What only a browser shows of the small UX fixes (issue: the things a previous session left alone):
the animation starts on the first screen and the guided lesson's step row is centred on one line,
a number typed past a widget's range is refused with words (not silently), and ``?present=maybe``
is named on a page other than the explainer (AppTest runs those pages without app.py's shared
sidebar), as is a parameter a page does not take, and the Prefix cache page refuses a window typed
past its range. The run's one server (tests/browser/conftest.py).
"""
from __future__ import annotations

import pytest

# server (the run's one app server), browser: tests/browser/conftest.py
from tests.browser.test_browser import console_errors, errors, settle, shot


def _centre_y(locator) -> float:
    box = locator.bounding_box()
    return box["y"] + box["height"] / 2


@pytest.mark.parametrize("width, height, present", [(1920, 1080, True), (1366, 768, True),
                                                    (1920, 1080, False), (1366, 768, False)])
def test_the_first_screen_then_the_lesson_step_row(server, browser, width, height, present):
    """Three checks of one page, in the order a teacher meets them (they were three tests, each of
    which loaded the explainer first; now one load per size and mode):

    1. The animation starts on the first screen (the lesson-truth issue, finding 8), before the lesson
       starts: a projector at 1920x1080 and a laptop at 1366x768: in presentation mode the Play
       control and the memory maps are in the first viewport; in normal mode at 1920x1080 at least
       Play and the top of the maps are (not asserted in normal mode at 1366x768). Presenting, the
       home page also passes test_browser's ``test_every_page_presents`` checks here (issue 23 item
       13: no sidebar, the way back shown, no error, no console error), which visits the other pages.
    2. The lesson's step row, once started: the step count and End the lesson sat top-aligned beside
       (normal) or stacked under (presenting) the Previous / Next buttons, so the row looked
       off-centre; now each row shares one centre line.
    Both sizes and modes: the maps and the lines are drawn with the margins they were given.
    3. Presenting at 1366x768 (issue 23 item 18): the lesson box pushed the maps below the fold
       while step 2 says "watch the left map"; now at step 2 Play and the top of the maps show.
    """
    ctx = browser.new_context(viewport={"width": width, "height": height})
    pg = ctx.new_page()
    mode = "present" if present else "normal"
    console = console_errors(pg)
    try:
        pg.goto(server + ("/?present=true" if present else "/"), wait_until="domcontentloaded")
        settle(pg)
        if present:                                                         # test_every_page_presents' home
            shot(pg, f"present_home_{width}x{height}")
            assert not errors(pg), errors(pg)
            assert pg.get_by_role("button", name="Leave presentation mode").is_visible()
            assert not pg.locator('section[data-testid="stSidebar"]').is_visible()
            assert not console, console
        if present or (width, height) == (1920, 1080):                     # 1. the first screen
            play = pg.locator(".js-plotly-plot .updatemenu-button").first.bounding_box()
            maps = pg.locator(".js-plotly-plot .heatmaplayer").first.bounding_box()
            shot(pg, f"first_screen_{mode}_{width}x{height}")
            assert play and 0 <= play["y"] and play["y"] + play["height"] <= height, play
            assert maps and maps["y"] < height - 60, maps                      # the top of the maps shows
            if present:
                assert maps["y"] + maps["height"] <= height, maps              # all of the maps show
            # the slider's own tick labels are hidden (they ran into one another); the step is its readout
            label = pg.locator(".js-plotly-plot .slider-label").first.text_content()
            assert label.strip() == "engine step 0"
            assert not errors(pg), errors(pg)
        # the maps and the lines come with the margins Plotly settles on (allocator.viz.explainer_chart
        # MARGINS): had Plotly grown one, it would have drawn the whole figure twice (issue 24)
        margins = pg.evaluate("""() => [...document.querySelectorAll('[data-testid="stPlotlyChart"] .js-plotly-plot')]
            .slice(0, 2).map(gd => { const m = gd.layout.margin, s = gd._fullLayout._size;
                                     return [[m.l, m.r, m.t, m.b], [s.l, s.r, s.t, s.b]]; })""")
        assert len(margins) == 2 and all(given == drawn for given, drawn in margins), margins

        pg.get_by_role("button", name="Start the guided lesson").click()      # 2. the step row
        settle(pg)
        shot(pg, f"lesson_steps_{width}x{height}_{mode}")
        prev, nxt = pg.get_by_role("button", name="◀ Previous"), pg.get_by_role("button", name="Next ▶")
        count, end = pg.get_by_text("Step 1 of 6", exact=True), pg.get_by_role("button", name="End the lesson")
        assert abs(_centre_y(prev) - _centre_y(nxt)) < 1
        assert abs(_centre_y(count) - _centre_y(end)) <= 2               # the count and End: one line
        if present:                                                      # under the buttons, in their columns
            assert _centre_y(count) > _centre_y(prev) + 20
            assert abs(count.bounding_box()["x"] - prev.bounding_box()["x"]) <= 2
            assert abs(end.bounding_box()["x"] - nxt.bounding_box()["x"]) <= 2
        else:                                                            # all four on the buttons' line
            assert abs(_centre_y(count) - _centre_y(prev)) <= 2
        assert not errors(pg), errors(pg)

        if present and (width, height) == (1366, 768):                      # 3. step 2, presented
            nxt.click()                                                     # step 2: watch the waste
            settle(pg)
            assert "Watch the waste" in pg.content()
            play = pg.locator(".js-plotly-plot .updatemenu-button").first.bounding_box()
            maps = pg.locator(".js-plotly-plot .heatmaplayer").first.bounding_box()
            shot(pg, "present_lesson_step2_1366x768")
            assert play and play["y"] + play["height"] <= 768, play
            assert maps and maps["y"] < 768 - 150, maps                 # a good part of the maps shows
            assert not errors(pg), errors(pg)
    finally:
        ctx.close()


@pytest.mark.parametrize("path, title", [("capacity", "Capacity"), ("about", "About this lab")])
def test_present_maybe_is_named_on_a_page_other_than_the_explainer(server, browser, path, title):
    ctx = browser.new_context(viewport={"width": 1366, "height": 768})
    pg = ctx.new_page()
    try:
        pg.goto(f"{server}/{path}?present=maybe", wait_until="domcontentloaded")
        assert settle(pg).startswith(title)
        shot(pg, f"present_maybe_{path}")
        notes = pg.locator('[data-testid="stAlertContentWarning"]').all_inner_texts()
        assert [n.split("\n")[-1] for n in notes if "present=" in n] == [        # the icon's name first
            "URL parameter present='maybe' must be true or false; using false."], notes
        assert pg.locator('section[data-testid="stSidebar"]').is_visible()          # not presenting
        assert not pg.get_by_role("button", name="Leave presentation mode").count()
        assert "present=" not in pg.url
        assert not errors(pg), errors(pg)
    finally:
        ctx.close()


def _typed_past_range(browser, url: str, label: str, alert_has: str, shot_name: str, message: str):
    """Type a value past its range into the number input ``label`` at ``url`` (1366x768), check the
    one error says ``message`` and the field shows the value kept (1000); returns the page, open."""
    ctx = browser.new_context(viewport={"width": 1366, "height": 768})
    try:
        pg = ctx.new_page()
        pg.goto(url, wait_until="domcontentloaded")
        settle(pg)
        box = pg.get_by_label(label, exact=True)
        box.fill(message.split(" = ")[1].split(" ")[0].replace(",", ""))     # the value the message names
        box.press("Enter")
        settle(pg, old_title="")
        alert = pg.locator('[data-testid="stAlertContentError"]').filter(has_text=alert_has)
        alert.first.scroll_into_view_if_needed()
        shot(pg, shot_name)
        assert alert.first.inner_text().split("\n")[-1] == message
        assert box.input_value() == "1000"
        assert pg.locator('[data-testid="stException"]').count() == 0
    except BaseException:
        ctx.close()
        raise
    return ctx, pg


def test_a_request_count_typed_past_its_range_is_refused_with_words(server, browser):
    """Typing 50000 into Requests per run used to turn the field red and do nothing else: the
    browser kept the value from the page, and nothing said why. Now the page names the range and
    that the value was not used, and the field shows the value the sweep uses."""
    ctx, _ = _typed_past_range(
        browser, f"{server}/throughput", "Requests per run", "Requests per run", "throughput_requests_50000_1366x768",
        "Requests per run = 50,000 was not used: it must be a whole number from 100 to 5,000 (requests per run); "
        "the page keeps 1,000.")
    ctx.close()


def _link_notes(pg) -> list[str]:
    """The text of every warning about a URL parameter (the icon's name comes first in inner_text)."""
    return [n.split("\n")[-1] for n in pg.locator('[data-testid="stAlertContentWarning"]').all_inner_texts()
            if "URL parameter" in n]


@pytest.mark.parametrize("path, title, taken", [
    ("capacity", "Capacity", "model, kv_cache_dtype, free_gib, max_context, mean_tokens, block_size, layers, "
                             "kv_heads, head_dim, bytes_per_element, acceptance_rate, present"),
    ("explainer", "Reserve for the worst case", "workload, block_size, slots_classroom-40, max_new_classroom-40, "
                                                "shared_prefix, metadata_cost, sliding_window, seed, arrival_rate, arrival, "
                                                "preemption, policy, placement, gpu, model, seconds_axis, present"),
])
def test_a_parameter_a_page_does_not_take_is_named_once(server, browser, path, title, taken):
    """``/capacity?colour=red`` was ignored without a word (app.py's shared sidebar names it now);
    ``/explainer`` forwards its query to the explainer, whose own check names it: once, not twice."""
    ctx = browser.new_context(viewport={"width": 1366, "height": 768})
    pg = ctx.new_page()
    try:
        pg.goto(f"{server}/{path}?colour=red", wait_until="domcontentloaded")
        assert settle(pg).startswith(title)
        shot(pg, f"unknown_param_{path}")
        assert _link_notes(pg) == ["URL parameter colour='red' is not a setting of this page; it was ignored. "
                                   f"The URL parameters this page takes: {taken}."]
        assert "colour=" not in pg.url
        assert pg.locator('[data-testid="stSidebar"]').is_visible()
        assert not errors(pg), errors(pg)
    finally:
        ctx.close()


def test_the_explainers_own_parameters_do_not_follow_a_click_to_another_page(server, browser):
    """The explainer writes its settings into the URL; a click on another page in the sidebar must
    not carry them there and have them named as parameters that page does not take."""
    ctx = browser.new_context(viewport={"width": 1366, "height": 768})
    pg = ctx.new_page()
    try:
        pg.goto(f"{server}/?block_size=32", wait_until="domcontentloaded")
        old = settle(pg)
        assert "workload=" in pg.url and "block_size=32" in pg.url
        pg.locator('[data-testid="stSidebarNav"]').get_by_role("link", name="Capacity").click()
        assert settle(pg, old_title=old).startswith("Capacity")
        assert not _link_notes(pg) and "workload=" not in pg.url
        assert not errors(pg), errors(pg)
    finally:
        ctx.close()


def test_a_window_size_typed_past_its_range_is_refused_with_words(server, browser):
    """Prefix cache page: typing 5000 requests turned the field red and did nothing else."""
    ctx, pg = _typed_past_range(
        browser, f"{server}/prefix-cache", "Requests", "Requests =", "prefix_requests_5000_1366x768",
        "Requests = 5,000 was not used: it must be a whole number from 10 to 2,000 (requests); the page keeps 1,000.")
    try:
        assert pg.get_by_text("Requests 1–1,000 of the trace").count() >= 1         # the window still shown
        assert len(errors(pg)) == 1                                               # that one only
    finally:
        ctx.close()
