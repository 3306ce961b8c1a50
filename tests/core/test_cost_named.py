"""The best cost model on every page that shows seconds, named beside every seconds figure (issue 40).

* :func:`allocator.cost.best.best_cost_model` picks the operator profile where the lab holds one for
  the GPU, model (matched by layer shapes) and GPU count, else the roofline, and says why;
* its seconds are the profile's own (step by step and over a whole run);
* every seconds figure the explainer, Throughput and Prefix cache pages draw names the model that
  produced it, under either kind (the claims' sentences, table cells, chart axes);
* Figure 12 names a point slower than the next higher rate's, with the spread over seeds.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from allocator.cost.best import ProfiledCostModel, best_cost_model, profile_model_for, seconds_source
from allocator.cost.calibration import REPLAY_MODELS
from allocator.cost.profile import ProfileCost, ProfileGridWarning
from allocator.cost.roofline import GPUS, cost_model, timed_model
from allocator.cost.timing import price
from allocator.engine.scenario import Scenario, run_scenario

PROFILED = ("rtx-4090", "llama3-8b")          # the one page preset pair a shipped bundle profiles
ROOFLINE = ("a100-40gb", "opt-13b")           # the pages' default: no bundle


def test_the_choice_and_its_reason():
    prof = best_cost_model(*PROFILED)
    assert isinstance(prof, ProfiledCostModel) and prof.kind == "profile"
    assert "operator profile measured on NVIDIA GeForce RTX 4090" in prof.priced_by
    assert "Llama 3.1 8B" in prof.priced_by            # the bundle's model, named as what was measured
    roof = best_cost_model(*ROOFLINE)
    assert roof.kind == "roofline" and "no operator profile of OPT-13B" in roof.why
    assert "datasheet roofline" in seconds_source(roof) and roof.why in seconds_source(roof)
    two = best_cost_model(*PROFILED, 2)                 # the RTX 4090 bundle has tp 1 only
    assert two.kind == "roofline" and "not measured at 2 GPUs" in two.why
    forced = best_cost_model(*PROFILED, choice="roofline")
    assert forced.kind == "roofline" and forced.why == ""
    # matched by shape, never by name: Llama 3 8B shares Llama 3.1 8B's layers; OPT-13B shares none
    assert profile_model_for(timed_model("llama3-8b")) is REPLAY_MODELS["llama-3.1-8b"]
    assert profile_model_for(timed_model("opt-13b")) is None
    # the pool stays the roofline's memory arithmetic
    assert prof.pool_slots() == cost_model(*PROFILED).pool_slots()


def test_profile_seconds_are_the_profiles():
    prof = best_cost_model(*PROFILED)
    ref = ProfileCost(GPUS["rtx-4090"], REPLAY_MODELS["llama-3.1-8b"], 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ProfileGridWarning)
        for args in ((0, 0, 30, 30 * 500), (512, 512 * 513 // 2, 0, 0), (100, 15000, 20, 8000)):
            assert prof.step_seconds(*args, 0) == pytest.approx(ref.step_seconds(*args))
            assert prof.for_blocks(16).step_seconds(*args, 0) == pytest.approx(ref.step_seconds(*args))
        # swaps are priced as the roofline prices them (the profile holds none)
        assert prof.step_seconds(0, 0, 30, 15000, 4, 16) - prof.step_seconds(0, 0, 30, 15000, 0, 16) == \
            pytest.approx(cost_model(*PROFILED).swap_seconds(4, 16))
    # a whole run on the step clock: each busy record is the profile's step, the terms add up
    sc = Scenario(preemption="swap")
    res = run_scenario(sc, record_snapshots=False)["paged"]
    t = price(res, prof, idle_step_s=1 / sc.canonical().steps_per_second)
    s = t.summary
    assert s["cost_model"] == "profile" and s["compute_limited_s"] == 0 and s["memory_limited_s"] == 0
    assert s["operators_s"] > 0 and s["compute_bound_share"] is None
    assert s["operators_s"] + s["overhead_s"] + s["swap_s"] + s["idle_s"] == pytest.approx(s["makespan_s"])
    m = res.metrics
    i = int(np.flatnonzero(m["prefill_tokens"] > 0)[0])
    want = ref.step_seconds(m["prefill_tokens"][i], m["prefill_pairs"][i], m["running"][i] - m["admitted"][i],
                            m["decode_pairs"][i])
    assert t.seconds[i] == pytest.approx(want + t.terms["swap_s"][i])
    assert price(res, best_cost_model(*ROOFLINE)).summary["cost_model"] == "roofline"


@pytest.mark.parametrize("pair", [PROFILED, ROOFLINE])
def test_explainer_names_the_model_beside_every_seconds_figure(pair):
    from allocator.viz.claims.explainer import details_rows, headline
    from allocator.viz.explainer_chart import explainer_figure, explainer_lines_figure
    cost = best_cost_model(*pair)
    sc = Scenario()
    results = run_scenario(sc)
    timings = {k: price(r, cost, idle_step_s=1 / sc.canonical().steps_per_second) for k, r in results.items()}
    head = headline(results, timings)
    for key in results:
        assert head[key]["time"]                                  # the card quotes seconds ...
        assert seconds_source(cost) in head[key]["line"]         # ... and its line names their model
    rows = details_rows(results, 0.0, timings)
    timed = {"seconds to drain", "throughput (output tokens/s)", "time to first token, median / 99th percentile",
             "time per output token, median", "normalised latency (s/token)"}
    assert timed <= {r["measure"] for r in rows}
    for r in rows:
        if r["measure"] in timed:
            assert cost.short_name in r["what it means"] or seconds_source(cost) in r["what it means"], r
    assert seconds_source(cost) in next(r for r in rows if r["measure"] == "seconds to drain")["what it means"]
    assert "datasheet" in next(r for r in rows if r["measure"].startswith("swap copies"))["what it means"]
    lines = explainer_lines_figure(results, timings=timings)
    assert cost.short_name in lines.layout.xaxis.title.text and cost.short_name in lines.layout.xaxis2.title.text
    maps = explainer_figure(results, timings=timings, max_frames=4)
    assert cost.short_name in maps.layout.sliders[0].currentvalue.prefix


@pytest.mark.parametrize("pair", [PROFILED, ROOFLINE])
def test_throughput_names_the_model_beside_every_seconds_figure(pair):
    from allocator.studies.rate_sweep import rate_sweep
    from allocator.viz.claims.throughput import latency_claim, sweep_headline, time_split_claim, time_split_rows
    from allocator.viz.throughput import cdf_figure, latency_figure, throughput_figure
    cost = best_cost_model(*pair)
    sweep = rate_sweep(cost, "1, 4", requests=40, policies=("max", "paged"))
    assert seconds_source(cost) in sweep_headline(sweep)
    at = sweep.rates[0]
    assert cost.short_name in latency_claim(sweep, at) and cost.short_name in time_split_claim(sweep, at)
    rows = time_split_rows(sweep, at)
    seconds_cols = [c for c in rows[0] if c not in ("allocator", "preemptions", "idle")]
    assert all(cost.short_name in c or "datasheet" in c for c in seconds_cols)
    s = sweep.points[("paged", at)]
    work = s["operators_s"] if cost.kind == "profile" else s["memory_limited_s"] + s["compute_limited_s"]
    assert work + s["overhead_s"] + s["swap_s"] + s["idle_s"] == pytest.approx(s["makespan_s"])
    for fig in (latency_figure(sweep), throughput_figure(sweep)):
        assert cost.short_name in fig.layout.yaxis.title.text
    for metric in ("ttft_s", "tpot_s"):
        assert cost.short_name in cdf_figure(sweep, at, metric).layout.xaxis.title.text


def test_prefix_cache_names_the_model():
    from allocator.viz.prefix import ttft_figure, ttft_summary
    cmp = {k: {"ttft_s": [0.1, 0.2], "summary": {"prefix_cache_hit_rate": 0.5, "prefill_tokens_saved": 10}}
           for k in ("with", "without")}
    for pair in (PROFILED, ROOFLINE):
        cost = best_cost_model(*pair)
        assert ttft_summary(cmp, seconds_source(cost), 10, 16).startswith(seconds_source(cost))
        fig = ttft_figure(cmp, cost.short_name)
        assert cost.short_name in fig.layout.xaxis.title.text and cost.short_name in fig.layout.title.text


def test_pages_never_price_seconds_with_the_bare_roofline():
    """Find every place the kind can occur: no page helper builds a cost model other than through
    best_cost_model, and no page or claim writes ``cost.label`` beside seconds without the source."""
    import os
    import re
    from tests.conftest import ROOT
    bare = []
    for folder in ("pages", os.path.join("allocator", "viz")):
        for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
            for f in files:
                # the real-engine page (and its replay helpers) names its own two cost models in each table
                if not f.endswith(".py") or f in ("replay.py", "real_engine.py"):
                    continue
                text = open(os.path.join(dirpath, f), encoding="utf-8").read()
                rel = os.path.relpath(os.path.join(dirpath, f), ROOT)
                if re.search(r"\bcost_model\(", text):
                    bare.append(f"{rel}: cost_model(")
                for line in text.splitlines():
                    if re.search(r"\bcost\.label\b", line) and "chosen automatically" not in line \
                            and "short_name" not in line:
                        bare.append(f"{rel}: {line.strip()}")
    assert bare == []


def test_fig12_names_a_point_out_of_line_with_the_seeds():
    from allocator.studies.paper import Replication, spread
    from allocator.viz.claims.paper import fig12_out_of_line
    from allocator.viz.paper import fig12_figure
    rep = Replication(scale={"scale": 1.0})
    pts = [(0.2, 0.032), (0.4, 0.030), (0.5, 0.088)]
    for s in ("max", "pow2", "oracle", "paged"):
        rep.fig12[s] = [{"paper_rate": r, "rate": r, "normalized_latency_s_per_token": v, "finished": 1,
                         "mean_running": 1.0, "beyond_artifact": False} for r, v in pts] if s == "max" else \
            [{"paper_rate": 1.0, "rate": 1.0, "normalized_latency_s_per_token": 0.02, "finished": 1,
              "mean_running": 1.0, "beyond_artifact": False}]
        rep.sustained[s] = {"rate": None, "bound": "below", "low": None, "high": None}
    rep.budget_s_per_token = 0.1
    text = fig12_out_of_line(rep)
    assert "Orca (Max)'s line is slower at 0.2 requests/s (0.0320 s/token) than at 0.4 (0.0300)" in text
    assert "seeds" not in text                                # no spread computed: none claimed
    rep.fig12_spread = {"max": [spread([0.032, 0.020, 0.021]), spread([0.030, 0.060, 0.025]),
                                spread([0.088, 0.09, 0.07])],
                        **{s: [spread([0.02, 0.02, 0.02])] for s in ("pow2", "oracle", "paged")}}
    text = fig12_out_of_line(rep)
    assert "Over 3 seeds the means are 0.0243 and 0.0383 s/token" in text and "the dip is that draw's" in text
    rep.fig12_spread["max"][1] = spread([0.030, 0.010, 0.011])
    assert "the mean falls too" in fig12_out_of_line(rep)
    fig = fig12_figure(rep)
    assert any((t.name or "").startswith("bar: range over 3 arrival seeds (line: seed 0)") for t in fig.data)
    trace = next(t for t in fig.data if t.name and t.name.startswith("Orca (Max)"))
    assert list(trace.error_y.array) == pytest.approx([0.0, 0.0, 0.09 - 0.088])
    assert list(trace.error_y.arrayminus) == pytest.approx([0.032 - 0.020, 0.030 - 0.010, 0.088 - 0.07])


def test_the_latency_budget_is_priced_by_the_same_model():
    """The sustained-rate budget (a multiple of a request served alone) comes from the model that prices
    the sweep's steps: under the profile, each request's prefill and decodes priced by the profile."""
    from allocator.studies.rate_sweep import unloaded_latency
    from allocator.workloads.poisson import poisson_workload
    from allocator.workloads.requests import Workload
    prof = best_cost_model(*PROFILED)
    w = poisson_workload(1.0, 6, seed=3, max_context=prof.model.max_context, max_new_tokens=300)
    want = sum((prof.profile_seconds(r.prompt_len, r.prompt_len * (r.prompt_len + 1) // 2, 0, 0)
                + sum(prof.profile_seconds(0, 0, 1, r.prompt_len + 1 + k) for k in range(1, r.output_len)))
               / r.output_len for r in w.requests) / len(w)
    assert unloaded_latency(w, prof) == pytest.approx(want, rel=1e-12)
    roof = unloaded_latency(Workload(w.name, w.requests, w.max_new_tokens), cost_model(*PROFILED))
    assert roof != pytest.approx(want, rel=1e-3)           # the two models differ: the choice matters
