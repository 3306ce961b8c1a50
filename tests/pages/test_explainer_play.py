"""The explainer's ▶ Play rate (issue 24: at least 10 frames per second on the default scenario,
measured in a browser by ``make bench``'s ``explainerbrowser`` section) and what each frame carries."""
import os

from allocator.engine.scenario import Scenario, run_scenario
from allocator.viz.explainer_chart import PLAY_FRAME_MS, explainer_figure, for_projector
from tests.conftest import ROOT


def test_play_asks_for_at_least_ten_frames_per_second_and_the_keys_play_alike():
    fig = explainer_figure(run_scenario(Scenario(), record_snapshots=True))
    for figure in (fig, for_projector(fig.freeze())):
        play, pause = figure.to_dict()["layout"]["updatemenus"][0]["buttons"]
        assert play["label"] == "▶ Play" and pause["label"] == "❚❚ Pause"
        # a frame every PLAY_FRAME_MS at most (80 ms: every 5th refresh of a 60 Hz screen, 12 frames/s)
        assert play["args"][1]["frame"] == {"duration": PLAY_FRAME_MS, "redraw": True}
    assert 1000 / PLAY_FRAME_MS >= 10
    # space (presentation keys) starts the same animation at the same rate
    with open(os.path.join(ROOT, "pages", "_ui", "present.py"), encoding="utf-8") as fh:
        keys = fh.read()
    assert f"w.Plotly.animate(gd, null, {{frame: {{duration: {PLAY_FRAME_MS}, redraw: true}}" in keys


def test_owner_ids_travel_as_one_byte_each_while_they_fit():
    """Forty requests: every frame's hover ids are one byte per cell (the figure the browser parses on
    each block-size change is a quarter smaller); test_explainer checks they decode to the core's owners."""
    fig = explainer_figure(run_scenario(Scenario(), record_snapshots=True)).freeze().to_dict()
    dtypes = {(t["z"]["dtype"], t["customdata"]["dtype"]) for f in fig["frames"] for t in f["data"]}
    assert dtypes == {("i1", "u1")}


def test_a_frozen_figure_names_its_content_so_plotly_redraws_only_a_changed_one():
    """FrozenFigure.freeze's datarevision: the same figure twice has the same one (Plotly then skips
    recomputing Streamlit's second hand-over of it), any change gives another (a block size, the
    projector's layout), so a changed figure is always drawn afresh."""
    run = run_scenario(Scenario(), record_snapshots=True)
    first, again = (explainer_figure(run).freeze().to_dict() for _ in range(2))
    rev = first["layout"]["datarevision"]
    assert isinstance(rev, str) and len(rev) == 16 and again["layout"]["datarevision"] == rev
    other = explainer_figure(run_scenario(Scenario(block_size=32), record_snapshots=True)).freeze().to_dict()
    projector = for_projector(explainer_figure(run).freeze()).to_dict()
    assert len({rev, other["layout"]["datarevision"], projector["layout"]["datarevision"]}) == 3
