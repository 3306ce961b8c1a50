"""The sliding-window scenario's sentence quotes its own run (issue 41), and the page shows it.

``allocator.viz.claims.explainer.window_text`` states the window, the blocks released, the peak
blocks a decoding sequence held beside the rule's bound, and the prefill peak: each number must be
one of the run's (``SimulationResult.window``) or the scenario's block size.
"""
import os

import pytest
from streamlit.testing.v1 import AppTest

from allocator.__main__ import main
from allocator.cli.simulate import WINDOW_SECONDS_NOTE
from allocator.cost.best import best_cost_model
from allocator.cost.timing import price
from allocator.engine.scenario import (Scenario, build_workload, full_attention_figures, full_attention_run,
                                       run_scenario)
from allocator.memory.sliding_window import window_block_bound
from allocator.viz.claims.explainer import (headline, scheduler_rules_text, window_comparison, window_split,
                                            window_text)
from allocator.viz.export.handout import handout_html, takeaways
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


def _priced(sc, results, full):
    from pages._ui.cache import DEFAULT_GPU, DEFAULT_MODEL

    cost = best_cost_model(DEFAULT_GPU, DEFAULT_MODEL)
    timings = {k: price(r, cost, idle_step_s=1 / sc.steps_per_second) for k, r in results.items()}
    return timings, price(full, cost, idle_step_s=1 / sc.steps_per_second)


@pytest.mark.parametrize("sc", SCENARIOS, ids=lambda sc: f"window{sc.sliding_window}-groups{sc.full_groups}")
def test_paging_alone_beside_the_window_quotes_both_runs(sc):
    """Fresh-user report item 1: beside the cards, what paging gives with full attention under the
    same rules, and how much of the paged card's gain is the window's, every number from the runs."""
    results = run_scenario(sc, record_snapshots=False)
    full_run = full_attention_run(sc)
    full = full_attention_figures(full_run, results["paged"])
    timings, full_timing = _priced(sc, results, full_run)
    text = window_comparison(results, full, timings, full_timing)
    split = window_split(results, full)
    rm = results["reserve_max"].summary
    allowed = _forms(sc.sliding_window)
    for v in [*full.values(), rm.mean_running_busy, rm.mean_running, full_timing.summary["makespan_s"],
              timings["paged"].summary["makespan_s"]]:
        allowed |= _forms(v)
    if split is not None:
        allowed |= {str(abs(split[k])) for k in ("by_window", "by_paging", "total")}
    assert set(_numbers(text)) <= allowed, set(_numbers(text)) - allowed
    assert f"runs **{full['mean_running']:.1f}** sequences" in text
    assert f"window it runs {full['window_mean_running']:.1f}" in text
    assert "for the windowed layers an overestimate" in text            # the windowed run's seconds
    # the split uses the figures as shown: its parts add up, and its total is the paged card's delta
    assert split is not None and split["by_window"] + split["by_paging"] == split["total"]
    card = headline(results, timings)["paged"]["cards"][0]
    assert card["value"] == split["window"] and card["delta"] == f"{split['total']:+}"
    assert f"of {split['total']:+} sequences ({split['window']} against {split['reserve']})" in text
    assert (split["share"] == "most") == (2 * split["by_window"] > split["total"])
    assert window_comparison(run_scenario(Scenario(), record_snapshots=False), full) == ""


def test_handout_says_the_window_makes_most_of_the_difference():
    sc = SCENARIOS[0]
    workload = build_workload(sc)
    results = run_scenario(sc, workload, record_snapshots=False)
    full = full_attention_figures(full_attention_run(sc, workload), results["paged"])
    split = window_split(results, full)
    assert split["share"] == "most"                     # 64 tokens: the window, not paging, makes the gain
    said = (f"the window accounts for most of the difference ({full['window_mean_running']:.1f} sequences while "
            f"requests waited when paged with the window; {full['mean_running']:.1f} paged with full attention")
    assert any(said in t for t in takeaways(results, full))
    assert said in handout_html(sc, results, workload).replace("&#x27;", "'")
    assert not any("full attention" in t for t in takeaways(run_scenario(Scenario(), record_snapshots=False)))


def test_export_html_handout_with_a_window_names_paging_alone(tmp_path):
    """``export-html --handout`` builds the same handout: with a window it quotes the full-attention run."""
    out, hand = tmp_path / "lesson.html", tmp_path / "handout.html"
    assert main(["export-html", "--rules", "v1", "--sliding-window", "64", "-o", str(out), "--handout", str(hand)]) == 0
    sc = SCENARIOS[0]
    workload = build_workload(sc)
    results = run_scenario(sc, workload, record_snapshots=False)
    full = full_attention_figures(full_attention_run(sc, workload), results["paged"])
    assert f"{full['mean_running']:.1f} paged with full attention" in hand.read_text(encoding="utf-8")


def test_cli_seconds_with_a_window_carry_the_caveat(capsys):
    """Fresh-user report item 2: the page's caveat on windowed seconds, in the CLI's text."""
    assert main(["simulate", "--rules", "v1", "--sliding-window", "64", "--gpu", "a100-40gb"]) == 0
    out = capsys.readouterr().out
    assert WINDOW_SECONDS_NOTE in out and "overestimate" in WINDOW_SECONDS_NOTE
    assert out.index("seconds priced on") < out.index(WINDOW_SECONDS_NOTE)
    assert main(["simulate", "--rules", "v1", "--gpu", "a100-40gb"]) == 0
    assert WINDOW_SECONDS_NOTE not in capsys.readouterr().out


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
    sc = Scenario(rules="v1", sliding_window=64)             # paging alone, beside the cards
    results = run_scenario(sc, record_snapshots=False)
    full_run = full_attention_run(sc)
    full = full_attention_figures(full_run, results["paged"])
    assert window_comparison(results, full, *_priced(sc, results, full_run)) in [i.value for i in at.info]


def test_page_refuses_a_window_with_swap_by_name():
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=240)
    at.query_params["sliding_window"] = "64"
    at.query_params["preemption"] = "swap"
    at.run()
    assert not at.exception
    assert any("recompute only" in e.value for e in at.error)
