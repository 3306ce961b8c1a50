"""AppTest of the Throughput and latency page: it renders the sweep the core computes, reads its
numbers back, reports bad settings by their control without a traceback, and prices a token's KV
exactly as the Capacity page does for every model preset.

Small sweeps (200 requests, four rates) keep these tests fast; the page's default (1,000 requests
on the default grid) is exercised once.
"""
from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

from allocator import accounting as acc
from allocator.studies.rate_sweep import POLICY_LABELS, with_latency_factor
from allocator.cost.roofline import kv_bytes, timed_model
from allocator.viz.claims.throughput import memory_claim, sweep_headline
from pages._ui.sweep_cache import DEFAULT_KEY, cached_sweep, sweep_key
from tests.conftest import APP_PATH, markdown_text, open_page, seen

SMALL = {"tp_requests": 200, "tp_rates": "0.5, 1, 2, 4"}


def _page(state: dict | None = None) -> AppTest:
    return open_page("pages/throughput.py", state)


_markdown = markdown_text


def test_default_page_shows_the_default_sweep():
    at = _page()
    sweep = with_latency_factor(cached_sweep(DEFAULT_KEY), 5)
    text = _markdown(at)
    assert sweep_headline(sweep) in text
    assert f"{sweep.pool_slots:,} slots" in text and "15,805" in text           # the A100's pool for OPT-13B
    table = at.table[0].value
    assert list(table.index) == [POLICY_LABELS[p] for p in ("max", "pow2", "oracle", "paged")]
    assert table.loc["Paged", "the paper's name"] == "vLLM"
    charts = at.get("plotly_chart")
    assert len(charts) == 5
    for chart in charts:
        spec = json.loads(chart.proto.spec)
        layout = spec["layout"]
        assert layout["xaxis"]["title"]["text"] and layout["yaxis"]["title"]["text"]
        assert all(t.get("hovertemplate") for t in spec["data"])
    assert "The paper's figures" in text and "This model's figures" in text


def test_small_sweep_on_another_gpu_and_model():
    at = _page({**SMALL, "tp_gpu": "h100-sxm", "tp_model": "llama3-8b"})
    sweep = with_latency_factor(cached_sweep(sweep_key("h100-sxm", "llama3-8b", "auto", 200, (0.5, 1.0, 2.0, 4.0), 16)), 5)
    text = _markdown(at)
    assert "Llama 3 8B bf16, GQA on NVIDIA H100 SXM 80GB" in text
    assert sweep_headline(sweep) in text
    at.select_slider(key="tp_at").set_value(4.0).run()
    assert memory_claim(sweep, 4.0) in _markdown(at)
    # the budget slider re-judges the same runs
    at.slider(key="tp_factor").set_value(10).run()
    assert "10 × the" in _markdown(at)


@pytest.mark.parametrize("state, needle", [
    ({"tp_rates": "1, x"}, "Request rates (entry 2) = 'x' is not a number"),
    ({"tp_rates": "1, 1"}, "a rate appears twice"),
    ({"tp_model": "llama3-70b", "tp_gpus": 1}, "use more GPUs or a smaller model"),
])
def test_bad_settings_are_reported_not_raised(state, needle):
    at = _page({**SMALL, **state})
    errors = [seen(e.value) for e in at.error]            # shown as plain text (issue 19)
    assert any(needle in e for e in errors), errors
    assert not at.get("plotly_chart")


@pytest.mark.parametrize("key", sorted(acc.PRESETS))
def test_kv_bytes_per_token_match_the_capacity_page(key):
    """Acceptance: for every model preset, the KV bytes per token the cost model charges are the
    figure the Capacity page shows."""
    at = AppTest.from_file(APP_PATH, default_timeout=60)
    at.switch_page("pages/capacity.py")
    at.run()
    at.selectbox(key="cap_model").set_value(key).run()
    shown = [m.value for m in at.metric if m.label == "KV cache per token"][0]
    model = acc.PRESETS[key]
    assert shown == acc.format_bytes(model.bytes_per_token)
    if model.params:
        assert shown == acc.format_bytes(kv_bytes(timed_model(key), 1))


def test_a_bad_rate_keeps_the_last_good_result_beside_the_error():
    """Issue 23: one bad entry in the rates must not wipe every chart."""
    at = _page(SMALL)
    charts = len(at.get("plotly_chart"))
    assert charts >= 5
    at.session_state["tp_rates"] = "1, x"
    at.run()
    assert not at.exception
    errors = [seen(e.value) for e in at.error]
    assert any("Request rates (entry 2) = 'x' is not a number" in e and "last settings that ran" in e
               for e in errors), errors
    assert len(at.get("plotly_chart")) == charts


def test_paper_replication_one_click():
    """Issue 21: one click runs the paper's configuration and shows its figures beside the paper's:
    every paragraph of ``paper_replication_texts(spread_for())`` (Figure 13 over its ten seeds) on
    the page, word for word. The browser test of the same click
    (tests/browser/test_browser.py::test_throughput_page_draws_the_default_sweep_then_the_paper_replication_in_one_click)
    leaves these numbers to this test and checks what only a browser sees."""
    from allocator.viz.claims.paper import paper_replication_texts
    from allocator.studies.paper import spread_for

    at = _page(SMALL)
    at.button(key="tp_paper_run").click().run(timeout=600)
    assert not at.exception
    text = _markdown(at)
    rep = spread_for()             # memoised: the replication the click computed, with its spread
    texts = paper_replication_texts(rep)
    for key in ("fig2", "fig13", "fig12"):
        assert texts[key] in text
    assert texts["load"] in [i.value for i in at.info]
    for d in texts["departures"]:
        assert d in text
    assert len(at.get("plotly_chart")) >= 8
    table = at.table[0].value
    assert "Figure 13: mean batched requests, vLLM" in list(table.index)
    assert all(v.startswith(("yes (", "no (", "— (")) for v in table["within tolerance"])
    # issue 38: Figure 13 over ten seeds in the table; the section 7 ablations one more click away
    assert "10 seeds" in table.loc["Figure 13: mean batched requests, vLLM", "this model"]
    at.button(key="tp_paper_abl").click().run(timeout=600)
    assert not at.exception
    from allocator.cost.kernel_block import kernel_block_factors
    from allocator.studies.ablations import ablations_for
    from allocator.viz.claims.paper import ablation_texts

    text = _markdown(at) + " ".join(i.value for i in at.info)
    for t in ablation_texts(ablations_for(kernel_block_factors())).values():
        assert t in text
    assert len(at.get("plotly_chart")) >= 10
    # issue 38: Figure 15 (sharing) one more click away, its sentences and table from the same study
    at.button(key="tp_paper_fig15").click().run(timeout=600)
    assert not at.exception
    from allocator.studies.sharing import figure15_for
    from allocator.viz.claims.sharing import sharing_rows, sharing_texts

    f15 = figure15_for(rep.scale["scale"])
    text = _markdown(at)
    t15 = sharing_texts(f15)
    for key in ("setup", "fig15", "beam_model"):
        assert t15[key] in text
    assert all(w in text for w in t15["why"].values())
    table15 = at.table[1].value
    assert list(table15["this model"]) == [r["this model"] for r in sharing_rows(f15)]
    assert len(at.get("plotly_chart")) >= 12
    # issue 38: Figure 14 (latency with several sequences, on ShareGPT) one more click away
    at.button(key="tp_paper_fig14").click().run(timeout=900)
    assert not at.exception
    from allocator.studies.sampling_latency import figure14_for
    from allocator.viz.claims.sampling_latency import fig14_rows, fig14_texts

    f14 = figure14_for(rep.scale["scale"])
    text = _markdown(at)
    t14 = fig14_texts(f14)
    for key in ("setup", "fig14", "paper", "why"):
        assert t14[key] in text, key
    table14 = at.table[2].value
    assert list(table14.index) == [r["measure"] for r in fig14_rows(f14)]
    assert len(at.get("plotly_chart")) >= 14


def test_the_explainers_block_size_slider_links_to_the_block_size_ablation():
    """Issue 38: "why 16?" near the lesson's block-size slider, linked to the Figure 18b result."""
    from tests.conftest import ROOT

    import os

    explainer = open(os.path.join(ROOT, "pages", "explainer.py"), encoding="utf-8").read()
    throughput = open(os.path.join(ROOT, "pages", "throughput.py"), encoding="utf-8").read()
    # a page link, not a Markdown link in a caption (captions are held to plain text: test_injection)
    assert "Why blocks of 16?" in explainer and 'page_link("pages/throughput.py"' in explainer
    assert 'anchor="paper-block-size"' in throughput


def test_own_sweep_on_the_papers_sharegpt_lengths():
    at = _page({**SMALL, "tp_workload": "sharegpt-opt"})
    sweep = with_latency_factor(cached_sweep(sweep_key("a100-40gb", "opt-13b", "auto", 200, (0.5, 1.0, 2.0, 4.0), 16,
                                                       "sharegpt-opt")), 5)
    assert sweep.workload == "sharegpt-opt" and sweep.max_new_tokens == 2048
    text = _markdown(at)
    assert sweep_headline(sweep) in text
    assert "ShareGPT lengths (the PagedAttention paper's)" in text


def test_rates_far_apart_show_a_bracket_not_an_interpolated_rate():
    """A new user typed 0.1, 0.2, 500: the page said paged sustains 167.37 requests/s, 1.1x reserve-max.
    The table and headline now give the bracket the crossing lies in, and no ratio."""
    at = _page({"tp_requests": 200, "tp_rates": "0.1, 0.2, 500"})
    assert not at.exception
    sweep = with_latency_factor(cached_sweep(sweep_key("a100-40gb", "opt-13b", "auto", 200, (0.1, 0.2, 500.0), 16,
                                                       "azure-conv")), 5)
    assert sweep.sustained["paged"]["bound"] == "between"
    text = _markdown(at)
    assert sweep_headline(sweep) in text and "between 0.2 and 500 requests/s" in text and "167" not in text
    table = at.table[0].value
    assert table.loc["Paged", "sustained rate"].startswith("between 0.2 and 500 requests/s")
    assert set(table["paged sustains (× this rate)"]) <= {"—", "not comparable"}


def test_the_placeholder_word_auto_means_the_default_rates():
    """The rates box shows "auto" as its placeholder; typing that word gives the default sweep,
    the same as leaving the box empty, not a "not a number" refusal."""
    empty = open_page("pages/throughput.py")
    typed = open_page("pages/throughput.py", {"tp_rates": " Auto "})
    assert not typed.error
    assert [m.value for m in typed.metric] == [m.value for m in empty.metric]
    assert markdown_text(typed) == markdown_text(empty)
