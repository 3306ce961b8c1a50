"""The sliding-window scenario's sentence quotes its own run (issue 41), and the page shows it.

``allocator.viz.claims.explainer.window_text`` states the window, the blocks released, the peak
blocks a decoding sequence held beside the rule's bound, and the prefill peak: each number must be
one of the run's (``SimulationResult.window``) or the scenario's block size.
"""
import os

import pytest
from streamlit.testing.v1 import AppTest

from allocator.engine.scenario import Scenario, run_scenario
from allocator.memory.sliding_window import window_block_bound
from allocator.viz.claims.explainer import scheduler_rules_text, window_text
from tests.conftest import ROOT
from tests.pages.test_claims import _forms, _numbers

SCENARIOS = [Scenario(rules="v1", sliding_window=64), Scenario(rules="v1", sliding_window=100, block_size=32),
             Scenario(rules="v1", sliding_window=128, full_groups=1, total_slots=4096)]


@pytest.mark.parametrize("sc", SCENARIOS, ids=lambda sc: f"window{sc.sliding_window}-groups{sc.full_groups}")
def test_window_sentence_quotes_its_run(sc):
    results = run_scenario(sc, record_snapshots=False)
    w = results["paged"].window
    text = window_text(results)
    allowed = {"1"} | _forms(sc.block_size)             # "ceil(W / block) + 1"
    for v in w.values():
        allowed |= _forms(v)
    assert set(_numbers(text)) <= allowed, set(_numbers(text)) - allowed
    assert f"at most {w['peak_decode_window_blocks']} blocks" in text
    assert w["peak_decode_window_blocks"] <= w["bound_blocks"] == window_block_bound(sc.sliding_window, sc.block_size)
    assert f"released {w['released_blocks']:,} blocks" in text
    assert window_text(run_scenario(Scenario(), record_snapshots=False)) == ""


def test_rules_caption_says_which_side_runs_v1():
    assert "vLLM v1's rules" in scheduler_rules_text(window=True)
    assert scheduler_rules_text().startswith("Scheduler rules here: the classroom engine's")


def test_page_shows_the_window_scenario_from_the_url():
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=240)
    at.query_params["sliding_window"] = "64"
    at.run()
    assert not at.exception and not at.error
    expected = window_text(run_scenario(Scenario(rules="v1", sliding_window=64), record_snapshots=False))
    assert expected in [i.value for i in at.info]
    assert at.number_input(key="sliding_window").value == 64


def test_page_refuses_a_window_with_swap_by_name():
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=240)
    at.query_params["sliding_window"] = "64"
    at.query_params["preemption"] = "swap"
    at.run()
    assert not at.exception
    assert any("recompute only" in e.value for e in at.error)
