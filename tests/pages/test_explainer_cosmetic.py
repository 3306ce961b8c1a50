"""Two cosmetic fixes, checked on what is drawn: the ▶ Play / ❚❚ Pause buttons carry dark text on a
white fill with a dark border (plotly's default pale text read as disabled on a projector), in the
normal and the projector figure; with the guided lesson on, the Start button's place in the tool
row says where the lesson is instead of leaving a gap between Copy link and Export.
"""
from __future__ import annotations

from allocator.engine.scenario import Scenario, run_scenario
from allocator.viz.explainer_chart import BUTTON_INK, explainer_figure, for_projector
from tests.conftest import open_page


def _luminance(hex_colour: str) -> float:
    """WCAG relative luminance of ``#RRGGBB``."""
    rgb = [int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def test_play_and_pause_are_dark_on_white_in_both_figures():
    fig = explainer_figure(run_scenario(Scenario()), max_frames=8)
    for figure in (fig, for_projector(fig)):
        menu = figure.to_dict()["layout"]["updatemenus"][0]
        assert [b["label"] for b in menu["buttons"]] == ["▶ Play", "❚❚ Pause"]
        assert menu["font"]["color"] == menu["bordercolor"] == BUTTON_INK and menu["bgcolor"] == "#FFFFFF"
        assert menu["borderwidth"] >= 1
        contrast = (1.05) / (_luminance(BUTTON_INK) + 0.05)             # against white
        assert contrast >= 7                                              # WCAG AAA for text
    assert for_projector(fig).to_dict()["layout"]["updatemenus"][0]["font"]["size"] > \
        fig.to_dict()["layout"]["updatemenus"][0]["font"]["size"]


def test_the_lesson_fills_the_start_buttons_place_with_its_step():
    at = open_page("pages/explainer.py", timeout=300)
    assert [b.label for b in at.button if b.label == "Start the guided lesson"]
    next(b for b in at.button if b.label == "Start the guided lesson").click().run()
    assert not at.exception
    assert not [b for b in at.button if b.label == "Start the guided lesson"]
    said = [m.value for m in at.markdown if "**Guided lesson**" in m.value]
    assert said == [":material/school: **Guided lesson**, step 1 of 6"]
    at.button(key="lesson_next").click().run()
    assert [m.value for m in at.markdown if "**Guided lesson**" in m.value] == [
        ":material/school: **Guided lesson**, step 2 of 6"]
