"""Every number the lesson states comes from the result shown beside it (the lesson-truth issue).

For a grid of scenarios -- the default; block sizes 1, 64 and 256; a shared 256-token prompt;
swap preemption; trickle arrivals; the Azure trace; degenerate ones -- the headline cards, the
details table, every lesson reveal, the handout's table and take-aways and the exported
animation's caption are generated, every number is pulled out of their text, and each must be
one the simulation result (or the scenario's own settings) produces. Literature figures the
texts quote are listed explicitly, with their source.
"""
import os
import re

import pytest

from allocator.cost.best import seconds_source
from allocator.engine.scenario import Scenario, block_size_sweep, build_workload, run_scenario
from allocator.viz.claims.explainer import details_rows, headline, lesson_key_steps, reveal
from allocator.common.formats import seconds, shown_difference
from allocator.workloads.trace import AZURE_ATTRIBUTION
from allocator.viz.export.handout import handout_rows, takeaways
from allocator.viz.export.html import animation_caption
from tests.conftest import ROOT, read_metrics_csv

GRID = {
    "default": Scenario(),
    "block 1": Scenario(block_size=1),
    "block 64": Scenario(block_size=64),
    "block 256": Scenario(block_size=256),
    "shared prompt 256": Scenario(shared_prefix=256),
    "swap": Scenario(preemption="swap"),
    "reserve-pow2": Scenario(policy="pow2"),
    "reserve-oracle, swap at block 1": Scenario(policy="oracle", preemption="swap", block_size=1),
    "trickle": Scenario(arrival="trickle", arrival_rate=0.05),
    "azure-conv": Scenario(workload="azure-conv"),
    "sharegpt-opt, pow2 buddy": Scenario(workload="sharegpt-opt", policy="pow2", placement="buddy"),
    "nothing waits": Scenario(total_slots=1 << 20),
    "everything rejected": Scenario(shared_prefix=2048),
    "sliding window 64 (v1 rules)": Scenario(rules="v1", sliding_window=64),
}

#: Figures the texts quote from the literature (not from the simulation), with their source.
LITERATURE = {
    "20", "40",   # "20-40 % of KV memory holding tokens": Kwon et al., PagedAttention, SOSP 2023, section 1
    "2", "4",     # "2-4x higher throughput with paging": the same paper's evaluation
    "7.2",        # "the PagedAttention paper (section 7.2)": where it says tiny blocks slow its kernel (issue 40)
}

NUMBER = re.compile(r"(?<![\w.])\d+(?:,\d{3})*(?:\.\d+)?")


def _forms(value) -> set[str]:
    """Every way the texts print a number: as a count, with 1-4 decimals, as a percentage."""
    if value is None or isinstance(value, (str, bool, list, dict)):
        return set()
    value = abs(value)                      # texts print signs separately ("+5.1", "-2,084")
    out = set()
    if float(value).is_integer():
        out |= {f"{int(value):,}", str(int(value))}
    for d in (1, 2, 3, 4):
        out.add(f"{value:,.{d}f}")
    if -1 <= value <= 1:
        for d in (0, 1):
            out.add(f"{100 * value:.{d}f}")
        out.add(f"{100 * value:.2g}")
    out.add(f"{value:.2g}")
    out.add(f"{value:g}")
    return out


def allowed_numbers(sc: Scenario, results: dict, rows: list[dict], timings: dict | None = None) -> set[str]:
    """Numbers a text about this run may contain: the results', the scenario's, their ratios and,
    when the runs were priced, their timing summaries (seconds also as ms) and the cost model's name."""
    nums = set(LITERATURE)
    for t in (timings or {}).values():
        nums |= set(NUMBER.findall(seconds_source(t.cost)))     # "OPT-13B", "A100 40GB", "vLLM 0.19" are names
        for v in t.summary.values():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                nums |= _forms(v) | _forms(v * 1000) | {f"{v:.3g}", f"{v * 1000:.3g}", f"{v:,.0f}",
                                                        f"{v * 1000:.1f}", f"{v * 1000:.2f}"}
        for k in timings:
            d = abs(t.summary["makespan_s"] - timings[k].summary["makespan_s"])
            nums |= _forms(d) | _forms(d * 1000) | {f"{d:.3g}", f"{d * 1000:.3g}", f"{d:,.0f}"}
    for v in (sc.slots, sc.block_size, sc.max_new, sc.shared_prefix, sc.metadata_cost, 16, 256, sc.slots // 256,
              sc.slots // sc.block_size):
        nums |= _forms(v)
    for res in results.values():
        s = res.summary
        for v in s.values():
            nums |= _forms(v)
        for v in (res.window or {}).values():                # a sliding-window run's own figures
            nums |= _forms(v)
        for shares in (s["memory_shares_busy"], s["memory_shares"]):     # the pool's six shares
            for v in (shares or {}).values():
                nums |= _forms(v)
            if shares:
                nums |= _forms(sum(shares.values()))
        nums |= _forms(len(s["rejected"]))
        for step in lesson_key_steps(results):
            if step < res.steps:
                for name in res.metrics:
                    nums |= _forms(res.value_at(name, step))
        nums |= _forms(res.cost_per_token(sc.metadata_cost, busy=True)) | _forms(res.cost_per_token(sc.metadata_cost, busy=False))
        if res.summary["finished"] and res.summary["mean_running_busy"] is None:
            for name in ("internal_fragmentation", "external_fragmentation", "duplicate_slots"):
                nums |= _forms(res.mean(res.metrics[name] / res.total_slots))
    for res in results.values():
        if res.summary["finished"]:
            nums |= _forms(round(float(res.requests["output_len"].mean())))   # "answers averaged 231"
        m = res.metrics
        empty = m["step"][(m["used_slots"] == 0) & (m["waiting"] > 0)]     # "reads 0 % at step 890 and 5 other"
        if len(empty):
            nums |= _forms(int(empty[0])) | _forms(len(empty) - 1)
    r, p = results["reserve_max"].summary, results["paged"].summary
    if r["mean_running_busy"] and p["mean_running_busy"]:
        nums |= _forms(p["mean_running_busy"] / r["mean_running_busy"])
        nums |= _forms(p["mean_running_busy"] - r["mean_running_busy"])
    for a, b in ((p["steps"], r["steps"]),):
        nums |= _forms(a - b)
    if r["mean_utilization_busy"] is not None and p["mean_utilization_busy"] is not None:
        nums |= _forms(round((p["mean_utilization_busy"] - r["mean_utilization_busy"]) * 100))
    for row in rows:
        for v in row.values():
            nums |= _forms(v)
    nums |= _shown_differences(results, timings)
    if results["paged"].window is not None:          # the full-attention run beside a windowed one
        from allocator.engine.scenario import full_attention_figures, full_attention_run
        full = full_attention_figures(full_attention_run(sc), results["paged"])
        for v in full.values():
            nums |= _forms(v)
        nums |= _shown_differences({"full": full["mean_running"], "window": full["window_mean_running"],
                                    "reserve": r["mean_running_busy"] if full["waited"] else r["mean_running"]})
    return nums


def _shown_differences(results: dict, timings: dict | None = None) -> set[str]:
    """Differences of two figures as displayed (a delta beside rounded figures is their difference):
    mean running to one decimal, utilisation as pct, seconds as ``seconds``; ``results`` may also
    map names to plain sequence counts."""
    from allocator.common.formats import pct

    def running(v):
        s = getattr(v, "summary", None)
        return v if s is None else s["mean_running_busy"] if s["mean_running_busy"] is not None else s["mean_running"]

    shown = [[f"{running(v):.1f}" for v in results.values() if running(v) is not None]]
    shown.append([pct(v.summary["mean_utilization_busy"]) for v in results.values()
                  if getattr(v, "summary", None) is not None and v.summary["mean_utilization_busy"] is not None])
    shown.append([seconds(t.summary["makespan_s"]) for t in (timings or {}).values()])
    out = set()
    for texts in shown:
        for a in texts:
            for b in texts:
                d = abs(shown_difference(a, b))
                out |= {f"{d:,}", f"{d.scaleb(3):,.0f}", f"{d.scaleb(3):,.1f}", f"{d.scaleb(3):,.2f}"} | _forms(float(d))
    return out


def _numbers(text: str) -> list[str]:
    text = re.sub(r"r\d+", "", text)                      # request names such as r12
    return [n.lstrip("-+") for n in NUMBER.findall(text)]


@pytest.fixture(scope="module", params=list(GRID))
def case(request):
    sc = GRID[request.param]
    results = run_scenario(sc, record_snapshots=False)
    rows = block_size_sweep(build_workload(sc), sc.slots, (1, 16, 256), sc.metadata_cost, sc.preemption)
    return request.param, sc, results, rows


def _timings(sc, results):
    from allocator.cost.roofline import cost_model
    from allocator.cost.timing import price

    cost = cost_model("a100-40gb", "opt-13b")
    return {k: price(r, cost, idle_step_s=1 / sc.steps_per_second) for k, r in results.items()}


def test_headline_cards_and_details_quote_the_result(case):
    name, sc, results, rows = case
    timings = _timings(sc, results)
    allowed = allowed_numbers(sc, results, rows, timings)
    cards = headline(results, timings)
    for key, panel in cards.items():
        s = results[key].summary
        values = {c["label"]: c["value"] for c in panel["cards"]}
        running = s["mean_running_busy"] if s["mean_running_busy"] is not None else s["mean_running"]
        if s["finished"]:
            assert values["Mean running"] == f"{running:.1f}", name
            assert values["Steps to drain"] == f"{s['steps']:,}", name
        else:                                  # nothing ran: a dash, as in the details table
            assert set(values.values()) == {"—"}, (name, values)
        for card in panel["cards"]:            # no "+0.0": a delta is shown only for a difference
            assert card["delta"] is None or card["delta"].strip("+−-0.,pts ") != "", (name, card)
        texts = [panel["line"], panel["time"], *(c["value"] for c in panel["cards"]),
                 *(c["help"] for c in panel["cards"]), *(c["delta"] or "" for c in panel["cards"])]
        for text in texts:
            for n in _numbers(text):
                assert n in allowed, (name, key, n, text)
        assert "batch" not in panel["line"] or "sustained" in panel["line"]
        if s["finished"]:
            # a model's figure is called the model's (a new user read these seconds as measured)
            assert panel["time"].startswith(f"Modelled: **{seconds(timings[key].summary['makespan_s'])}** to drain"), name
            assert "Seconds are modelled, not measured" in panel["line"], name
            assert seconds_source(timings[key].cost) in panel["line"], name       # which model, named
    for row in details_rows(results, sc.metadata_cost, timings):
        for column in (results["reserve_max"].label.lower(), "paged"):
            for n in _numbers(row[column]):
                assert n in allowed, (name, row["measure"], n, row[column])


def test_lesson_reveals_quote_the_result(case):
    name, sc, results, rows = case
    allowed = allowed_numbers(sc, results, rows)
    for step in ("reserve", "waste", "paged", "big_blocks", "prefix"):
        text = reveal(step, results, slots=sc.slots, max_new=sc.max_new, sweep_rows=rows)
        for n in _numbers(text):
            assert n in allowed, (name, step, n, text)


def test_handout_and_caption_quote_the_result(case):
    name, sc, results, rows = case
    allowed = allowed_numbers(sc, results, rows)
    workload = build_workload(sc)
    for label, a, b in handout_rows(results):
        for n in _numbers(a) + _numbers(b):
            assert n in allowed, (name, label, n)
    for text in takeaways(results):
        assert "the batch" not in text, text                  # a peak is never called "the batch"
        for n in _numbers(text):
            assert n in allowed, (name, n, text)
    caption = animation_caption(sc, workload, results)
    allowed |= {f"{len(workload):,}", f"{workload.max_new_tokens:,}"}
    for n in _numbers(caption):
        assert n in allowed, (name, n, caption)


def test_the_check_can_fail():
    """A hard-coded number that no result produces is caught."""
    sc = GRID["default"]
    results = run_scenario(sc, record_snapshots=False)
    allowed = allowed_numbers(sc, results, [])
    assert "three" not in allowed and "7777" not in allowed
    assert all(n in allowed for n in _numbers(reveal("waste", results, slots=sc.slots, max_new=sc.max_new)))
    assert not all(n in allowed for n in _numbers("the paged side ran 7777 sequences"))


# --------------------------------------------------------------------------------------------
# The Throughput and latency page: every number its sentences and tables quote comes from the
# rate sweep beside them (or is the paper's, from allocator.studies.rate_sweep.PAPER)
# --------------------------------------------------------------------------------------------

SWEEP_GRID = {
    "A100 OPT-13B": ("a100-40gb", "opt-13b", (0.5, 1.0, 2.0, 4.0)),            # steps of 2x: brackets
    "A100 OPT-13B, fine grid": ("a100-40gb", "opt-13b", (0.9, 1.05, 1.2, 1.4, 1.6, 1.8, 2.0, 2.3)),
    "L4 7B, every rate sustained": ("l4", "7b-fp16", (0.01, 0.02)),
    "H200 Llama 3 70B, nothing sustained": ("h200", "llama3-70b", (20.0, 40.0)),
}


def sweep_allowed(sweep) -> set[str]:
    """Numbers a text about this sweep may contain."""
    from allocator.studies.rate_sweep import PAPER

    nums = set()
    for n in NUMBER.findall(sweep.cost.label + PAPER["setup"]):  # "OPT-13B", "A100 40GB" are names
        nums.add(n)
    nums |= {"99", "2"}                                         # "99th percentile", "Figure 2"
    for v in (sweep.requests, sweep.pool_slots, sweep.latency_factor, sweep.unloaded_s_per_token,
              sweep.budget_s_per_token, sweep.mean_prompt, sweep.mean_output, sweep.max_new_tokens, *sweep.rates):
        nums |= _forms(v) | {f"{v:,.0f}"}
    nums |= _forms((sweep.mean_prompt + sweep.mean_output) / (sweep.mean_prompt + sweep.max_new_tokens))
    for s in sweep.sustained.values():
        nums |= _forms(s["rate"]) | _forms(s.get("low")) | _forms(s.get("high"))
    for a in sweep.policies:
        for b in sweep.policies:
            r = sweep.ratio(a, b) if a != b else None
            if r:
                nums |= _forms(r["value"]) | _forms(r.get("low")) | _forms(r.get("high"))
    for point in sweep.points.values():
        for key, v in point.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                nums |= _forms(v) | _forms(v * 1000)          # seconds also print as ms
                nums |= {f"{v:.3g}", f"{v * 1000:.3g}", f"{v:,.0f}"}
    for v in (*PAPER["token_state_share"].values(), *PAPER["rate_ratio_vs_oracle"], *PAPER["rate_ratio_vs_max"],
              *PAPER["batch_ratio_opt13b"].values(), 13, 66, 175):
        nums |= _forms(v)
    return nums


@pytest.fixture(scope="module", params=list(SWEEP_GRID))
def sweep_case(request):
    from allocator.studies.rate_sweep import rate_sweep
    from allocator.cost.roofline import cost_model

    gpu, model, rates = SWEEP_GRID[request.param]
    return request.param, rate_sweep(cost_model(gpu, model), rates, requests=150)


def test_throughput_page_texts_quote_the_sweep(sweep_case):
    from allocator.viz.claims.throughput import (latency_claim, memory_claim, paper_comparison,
                                                 sustained_rows, sweep_headline, time_split_claim)

    name, sweep = sweep_case
    allowed = sweep_allowed(sweep)
    texts = [sweep_headline(sweep), *paper_comparison(sweep).values()]
    for row in sustained_rows(sweep):
        texts += [row["sustained rate"], row["paged sustains (× this rate)"]]
    for at in sweep.rates:
        texts += [memory_claim(sweep, at), latency_claim(sweep, at), time_split_claim(sweep, at)]
    for text in texts:
        for n in _numbers(text):
            assert n in allowed, (name, n, text)
    paper = paper_comparison(sweep)["paper"]
    assert "paper" in paper and "1.7–2.7" in paper and "2.7–8" in paper
    assert "This model" in paper_comparison(sweep)["model"]


def test_throughput_headline_handles_bounds(sweep_case):
    from allocator.viz.claims.throughput import sweep_headline

    name, sweep = sweep_case
    text = sweep_headline(sweep)
    s = sweep.sustained["paged"]
    if s["bound"] == "above":
        assert "at least" in text and "never over the budget" in text, text
    elif s["bound"] == "below":
        assert "below the lowest rate" in text and "no ratio" in text, text
    elif s["bound"] == "between":
        assert f"between {s['low']:g} and {s['high']:g} requests/s" in text and "too far apart" in text, text
    else:
        assert f"{s['rate']:.2f} requests/s" in text


def test_paper_replication_texts_quote_the_replication():
    """Issue 21: every number in the paper replication's sentences comes from the replication shown
    beside them (allocator.studies.paper.Replication) or from the paper's quoted figures."""
    from allocator.studies.paper import PAPER_FIGURES, SYSTEMS
    from allocator.viz.claims.paper import paper_replication_texts

    from allocator.studies.paper import spread_for

    rep = spread_for()                                     # the replication with Figure 13's spread, as on screen
    p = PAPER_FIGURES
    allowed = set()
    values = [rep.scale["ours"], rep.scale["paper"], rep.scale["scale"], rep.budget_s_per_token,
              rep.unloaded_s_per_token, 5, *p["fig2"]["window_s"], p["fig2"]["duration_s"], p["fig2"]["rate"],
              p["fig13"]["rate"], p["fig12"]["duration_s"], *p["fig12"]["range_vs_oracle"], *p["fig12"]["range_vs_max"],
              p["fig12"]["batch_ratio_vs_oracle"], p["fig12"]["batch_ratio_vs_max"],
              *p["fig2"]["token_states"].values(), *p["fig2"]["max_split"].values(), *p["fig13"]["batch"].values(),
              13, 66, 175, 100, 40, 2, 12]                 # model names (OPT-13B, 66B, 175B; A100-40GB), Figures 2, 12, 13
    for s in SYSTEMS:
        values += [pt["paper_rate"] for pt in rep.fig12[s]]
        values += [*(v for k, v in rep.fig2[s].items() if k not in ("steps", "artifact")), rep.fig13[s],
                   100 * (rep.fig13[s] / p["fig13"]["batch"][s] - 1), rep.sustained[s]["rate"]]
    for other in ("oracle", "max"):
        r = rep.ratio(other)
        if r:
            values += [r["value"], r.get("low"), r.get("high")]
    from allocator.studies.paper import SATURATION_REQUESTS
    values += [SATURATION_REQUESTS, rep.sustained["paged"]["rate"] * rep.scale["scale"]]   # vLLM's knee, our clock
    from allocator.studies.paper import PAPER_MAX_BATCHED_TOKENS, PAPER_MAX_NUM_SEQS
    values += [PAPER_MAX_BATCHED_TOKENS, PAPER_MAX_NUM_SEQS, 2023]          # the 2023 server's caps
    # issue 38: the paper's full Orca splits, the artifact's shares (and the lab's), the spreads, both load
    # rules, the OPT-13B ratios (the paper's and ours), the largest Figure 2 gap, the artifact's 1.5 requests/s
    values += [v for split in p["fig2"]["splits"].values() for v in split.values()]
    values += [p["fig13"]["artifact_rate"], p["fig12"]["curve_ratio_vs_oracle_opt13b"]]
    for s in SYSTEMS:
        values += list(v for k, v in rep.fig2[s]["artifact"].items())
        for rule in rep.fig13_spread.values():
            sp = rule[s]
            values += [sp["mean"], sp["std"], sp["min"], sp["max"], len(sp["values"]),
                       100 * (sp["mean"] / p["fig13"]["batch"][s] - 1)]
    for info in rep.load_rules().values():
        values += [info["scale"], info["ours"], info["paper"]]
    values += [rep.fig13_mean("paged") / rep.fig13_mean(o) for o in ("oracle", "max")]
    # issue 40: Figure 12's points, its spread over seeds, and the seeds' count, quoted for a point out of line
    for s in SYSTEMS:
        values += [pt["normalized_latency_s_per_token"] for pt in rep.fig12[s]]
        for sp in rep.fig12_spread.get(s, ()):
            values += [sp["mean"], sp["min"], sp["max"], len(sp["values"])]
    values += [rep.seed]
    keys = ("token_states", "reservation", "internal", "external")
    values += [100 * max(abs(rep.fig2[s]["artifact"][k] - {"token_states": p["fig2"]["token_states"][s], **split}[k])
                         for s, split in p["fig2"]["splits"].items() for k in keys)]
    for v in values:
        allowed |= _forms(v) | {f"{v:.2f}" if v is not None else "", f"{v:g}" if v is not None else "",
                                f"{v:.4f}" if v is not None else ""}
    from allocator.viz.claims.paper import fig12_note

    texts = paper_replication_texts(rep)
    for text in [texts["load"], texts["fig2"], texts["fig13"], texts["fig12"], *texts["departures"], fig12_note(rep)]:
        for n in _numbers(text):
            assert n in allowed, (n, text)


def test_sweep_that_reached_no_limit_says_so_plainly():
    """Issue 23 item 17: "sustains at least 4.00 requests/s ... That is no ratio to reserve-max can be
    stated" contradicted itself; with no allocator over budget the headline says the sweep reached no
    limit, and which rates to add."""
    from allocator.studies.rate_sweep import rate_sweep
    from allocator.cost.roofline import cost_model
    from allocator.viz.claims.throughput import sweep_headline

    sweep = rate_sweep(cost_model("l4", "7b-fp16"), (0.01, 0.02), requests=150)
    assert all(s["bound"] == "above" for s in sweep.sustained.values())
    text = sweep_headline(sweep)
    assert "did not reach any allocator's limit" in text and "above 0.02 requests/s" in text
    assert "That is no ratio" not in text and "That is" not in text


def test_cards_do_not_compare_unequal_work():
    """Issue 23 item 9: with max_new_tokens 2000 reserve-max rejects 25 of 40; paged serves all 40.
    The cards then show no differences, and the line under them says why."""
    sc = Scenario(max_new_tokens=2000)
    results = run_scenario(sc, record_snapshots=False)
    r, p = results["reserve_max"].summary, results["paged"].summary
    assert len(r["rejected"]) == 25 and p["finished"] == 40
    panel = headline(results)["paged"]
    assert all(c["delta"] is None for c in panel["cards"])
    assert f"served {r['finished']:,} and rejected 25, paged served 40" in panel["line"]
    same = headline(run_scenario(Scenario(), record_snapshots=False))["paged"]
    assert any(c["delta"] for c in same["cards"])            # equal work: the differences are shown


def test_texts_read_as_sentences():
    """Issue 23 item 17 and 2, 11: no double full stop, no "1 ... were", no "at peak" for FLOP/s, and
    the handout does not deny the seconds the explainer prices."""
    bad = re.compile(r"\.\.(?!\.)|\b1 (?:request|sequence|block|step|token|preemption) (?:were|are|have)\b"
                     r"|\bat peak\b|does not turn it into seconds")
    for sc in (Scenario(), Scenario(preemption="swap"), Scenario(shared_prefix=256), Scenario(block_size=256)):
        results = run_scenario(sc, record_snapshots=False)
        rows = block_size_sweep(build_workload(sc), sc.slots, (1, 16, 256), sc.metadata_cost, sc.preemption)
        texts = [reveal(step, results, slots=sc.slots, max_new=sc.max_new, sweep_rows=rows)
                 for step in ("reserve", "waste", "paged", "big_blocks", "prefix")]
        texts += takeaways(results)
        timings = _timings(sc, results)
        for panel in headline(results, timings).values():
            texts += [panel["line"], panel["time"]]
        texts += [row["what it means"] for row in details_rows(results, sc.metadata_cost, timings)]
        for text in texts:
            assert not bad.search(text), text


# --------------------------------------------------------------------------------------------
# Pages and exports as a reader meets them: every number on the rendered explainer and About
# pages, in the whole handout, in the CSV header and in the standalone HTML's caption and frame
# readouts comes from the run beside it (or is a listed literature / reference figure).
# --------------------------------------------------------------------------------------------

#: Names and dates that contain digits but are no figures ("Llama 3 70B", "SOSP 2023", a date).
NAMES = re.compile(r"Llama \d+(?: \d+B)?|\b\d+B\b|\b(?:SOSP|MLSys|OSDI) \d{4}\b|\d{4}-\d{2}-\d{2}|\bsm_\d+\b"
                   r"|\bRTX \d+\b|\b[AHL]\d+\b|\bOPT-\d+B\b|\bport \d+\b|:\d{4}\b|\bFigure \d+\b|\bsection \d+(?:\.\d+)?\b"
                   r"|\bCC-BY \d\.\d\b|\bLicense \d\.\d\b|Apache-\d\.\d|\b\d+(?:th)? percentile\b|Before \d{4}")


def _page_texts(at) -> list[str]:
    """Every text a reader sees on an AppTest page: markdown, captions, alerts, titles, metric
    labels, values and deltas, and st.table cells (st.dataframe of inputs is not a claim)."""
    texts = []
    for kind in ("markdown", "caption", "info", "success", "warning", "error", "title", "header", "subheader"):
        texts += [e.value for e in at.get(kind)]
    texts += [f"{m.label} {m.value} {m.delta or ''}" for m in at.metric]
    for t in at.table:
        texts += [str(v) for v in t.value.reset_index().values.ravel()]
    return texts


def _unquoted(texts, allowed) -> dict:
    bad = {}
    for text in texts:
        for n in _numbers(NAMES.sub(" ", text)):
            if n not in allowed:
                bad.setdefault(n, text[:160])
    return bad


def _workload_numbers(workload) -> set[str]:
    nums = set()
    for v in (workload.params or {}).values() if isinstance(getattr(workload, "params", None), dict) else ():
        for x in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(x, (int, float)) and not isinstance(x, bool):
                nums |= _forms(x)
    prompts = [r.prompt_len for r in workload.requests]
    outputs = [r.output_len for r in workload.requests]
    for xs in (prompts, outputs):
        nums |= _forms(min(xs)) | _forms(max(xs)) | {f"{sum(xs) / len(xs):,.0f}"}
    for r in workload.requests:                             # a rejection names prompt and reservation
        nums |= _forms(r.prompt_len) | _forms(r.prompt_len + workload.max_new_tokens)
    return nums | _forms(len(workload)) | _forms(workload.max_new_tokens)


#: Figures of the explainer's fixed explanations: 255 = 256 - 1 (the most a 256-slot last block can
#: leave empty); 2023, the year paging arrived (Kwon et al., SOSP 2023).
EXPLAINER_STATIC = {"255", "2023"}

PAGE_GRID = {
    "default": ({}, Scenario()),
    "shared prompt 256, swap": ({"shared_prefix": "256", "preemption": "swap"},
                                Scenario(shared_prefix=256, preemption="swap")),
    "max_new_tokens 2000 (unequal work)": ({"max_new_classroom-40": "2000"}, Scenario(max_new_tokens=2000)),
}


@pytest.mark.parametrize("case", list(PAGE_GRID))
def test_the_explainer_page_quotes_the_run_on_screen(case):
    from allocator.viz.claims.explainer import scheduler_rules_text
    from streamlit.testing.v1 import AppTest

    from allocator.engine.scenario import SWEEP_BLOCK_SIZES
    from tests.conftest import APP_PATH

    params, sc = PAGE_GRID[case]
    at = AppTest.from_file(APP_PATH, default_timeout=120)
    for k, v in params.items():
        at.query_params[k] = v
    at.session_state["workload_open"] = True    # the workload panel is built only while open: check it too
    at.run()
    assert not at.exception, at.exception
    results = run_scenario(sc, record_snapshots=False)
    assert [m.value for m in at.metric if m.label == "Steps to drain"] == \
        [f"{results[k].summary['steps']:,}" for k in ("reserve_max", "paged")], case     # the page ran sc
    rows = block_size_sweep(build_workload(sc), sc.slots, SWEEP_BLOCK_SIZES, sc.metadata_cost, sc.preemption)
    from allocator.engine.v1 import V1_DEFAULT_MAX_NUM_BATCHED_TOKENS, V1_DEFAULT_MAX_NUM_SEQS
    allowed = (allowed_numbers(sc, results, rows, _timings(sc, results)) | _workload_numbers(build_workload(sc))
               | EXPLAINER_STATIC | _forms(V1_DEFAULT_MAX_NUM_SEQS) | _forms(V1_DEFAULT_MAX_NUM_BATCHED_TOKENS))
    # issue 22: the page says which scheduler rules it runs (the classroom engine's, not vLLM v1's)
    assert scheduler_rules_text() in [c.value for c in at.caption], case
    for r in rows:                                          # the sweep's own figures (its table and summary)
        for v in r.values():
            nums = _forms(v) if not isinstance(v, bool) else set()
            allowed |= nums | (_forms(v * 100) if isinstance(v, float) else set())
    assert not _unquoted(_page_texts(at), allowed), (case, _unquoted(_page_texts(at), allowed))


#: Figures the About page quotes from the literature and the reference explainers, with their
#: source (each is also in its sources table).
ABOUT_STATIC = {
    "20", "40", "60", "80",                 # PagedAttention SOSP 2023 section 1: 20-40 % used, 60-80 % wasted
    "2", "4",                               # the same paper: 2-4x throughput
    "20.4", "26.8", "38.2", "96.3",         # its Figure 2: token-state shares of Orca Max / Pow2 / Oracle, vLLM
    "1.7", "2.7", "8",                      # its section 6.2 rate ratios (issue 21 owns their attribution)
    "5", "9", "17", "32", "96", "65", "8", "48", "64", "33",  # R1: 5, 9, 17 tokens reserved 32 ...
    "1", "0", "0.25", "4", "50", "72",      # R2: best block size per metadata cost
    "23", "44", "36", "43",                 # R3: lengths 20 and 23 sharing 8 tokens, blocks of 4
    "512", "37", "1900", "128", "2048", "10,240", "74.8", "2,608", "1.0", "40,960", "78", "3.9",  # R4
    "66", "350", "83", "22", "352", "384", "320",   # R5, R6: 7B fp16 capacity, Llama 3 70B per slot
    "19,366", "12,031", "36.6",             # the shipped traces' sizes, the Mooncake repeated-block share
    "2", "5",                               # the cost model's stated assumptions: 2 ms per step, 5 µs per copy
    "8501", "125", "150", "2,000", "30",    # classroom notes: port, browser zoom, trace window, seconds
    "7", "1.0",
    "2023",                                 # pre-2023 engines; the paper's year (SOSP 2023)
}


def test_the_about_page_quotes_the_default_run():
    from streamlit.testing.v1 import AppTest

    from allocator.viz.claims.explainer import about_default_run, classroom_tip
    from tests.conftest import APP_PATH

    at = AppTest.from_file(APP_PATH, default_timeout=120)
    at.switch_page("pages/about.py")
    at.run()
    assert not at.exception, at.exception
    sc = Scenario()
    results = run_scenario(sc, record_snapshots=False)
    sources = at.table[1].value.reset_index()
    assert about_default_run(results, sc.slots) in list(sources["figure"])
    text = "\n".join(m.value for m in at.markdown)
    assert classroom_tip(results) in text
    # issue 23 item 1: a peak of 30 was called what the paged side "runs"
    assert not re.search(r"about (?:thirty|30)|about 3 running", text + " ".join(sources["figure"]))
    p = results["paged"].summary
    assert f"{p['mean_running_busy']:.1f} on average while requests wait" in classroom_tip(results)
    texts = _page_texts(at)                                   # st.table cells included
    from allocator.workloads.mooncake import MOONCAKE_ATTRIBUTION

    allowed = allowed_numbers(sc, results, []) | ABOUT_STATIC          # + the data citations' own numbers
    allowed |= set(NUMBER.findall(AZURE_ATTRIBUTION + MOONCAKE_ATTRIBUTION))
    from allocator.studies.paper import PAPER_FIGURES
    from allocator.workloads.sharegpt import SHAREGPT_ATTRIBUTION
    from pages.about import CALIBRATION_SOURCE
    # the ShareGPT lengths' citation (artifact "sosp-ae-39") and their filtered count and means;
    # the calibration paragraph (tests/pages/test_replay_page.py ties each of its figures to the replay)
    from allocator.workloads.sharegpt import sharegpt_lengths
    pairs = sharegpt_lengths()
    allowed |= set(NUMBER.findall(SHAREGPT_ATTRIBUTION + CALIBRATION_SOURCE)) | {"39"} | _forms(len(pairs))
    allowed |= {f"{pairs['prompt_tokens'].mean():.1f}", f"{pairs['output_tokens'].mean():.1f}"}
    allowed |= {"13", "300", "3.1", "6000"}   # fig12-13b-sharegpt.sh; the run's 300 requests, Llama-3.1, RTX PRO 6000
    fig12 = PAPER_FIGURES["fig12"]
    allowed |= _forms(fig12["batch_ratio_vs_oracle"]) | _forms(fig12["batch_ratio_vs_max"])   # OPT-13B's 2.2x, 4.3x
    # issue 38: Figure 13's bars, the 2023 caps, the sections and figures named (6.2, 7.2, 7.3; 18b, 19)
    from allocator.studies.paper import PAPER_MAX_BATCHED_TOKENS, PAPER_MAX_NUM_SEQS
    for v in [*PAPER_FIGURES["fig13"]["batch"].values(), PAPER_FIGURES["fig13"]["rate"], PAPER_MAX_BATCHED_TOKENS,
              PAPER_MAX_NUM_SEQS, 6.2, 7.2, 7.3, 2, 12, 13, 18, 19, 16, 64, 128]:
        allowed |= _forms(v)
    from allocator.studies.sharing import PAPER_FIG15       # issue 38: Figure 15's ranges, as the paper's
    for dataset in ("sharegpt", "alpaca"):
        for lo, hi in PAPER_FIG15[dataset].values():
            allowed |= {f"{100 * lo:.1f}", f"{100 * hi:.1f}"}
    allowed |= {str(w) for w in PAPER_FIG15["widths"]} | {"4.4", "6.3", "14", "15"}
    from allocator.studies.sampling_latency import PAPER_FIG14     # issue 38: Figure 14's statement, as the paper's
    for v in PAPER_FIG14["oracle_improvement"].values():
        allowed |= _forms(v)
    from allocator.studies.ablations import PAPER_ABLATIONS
    assert PAPER_ABLATIONS["fig18b"]["best_block_sizes"] == (16, 128)
    assert PAPER_ABLATIONS["fig19"]["comparable_block_sizes"] == (16, 64)
    from allocator.accounting.models import PRESETS
    from allocator.common.formats import format_bytes
    for name in ("7b-fp16", "llama3-70b"):
        allowed |= set(NUMBER.findall(format_bytes(PRESETS[name].bytes_per_token)))
    assert not _unquoted(texts, allowed), _unquoted(texts, allowed)


def test_the_whole_handout_quotes_the_run():
    import html as html_lib

    from allocator.accounting.models import PRESETS
    from allocator.common.formats import format_bytes
    from allocator.viz.export.handout import handout_html

    for sc in (Scenario(), Scenario(shared_prefix=256, preemption="swap"), Scenario(workload="azure-conv"),
               Scenario(rules="v1", sliding_window=64)):
        results = run_scenario(sc, record_snapshots=False)
        workload = build_workload(sc)
        doc = handout_html(sc, results, workload)
        text = re.sub(r"<[^>]+>", " ", re.sub(r"<style.*?</style>", " ", doc, flags=re.S))
        text = html_lib.unescape(text)
        allowed = allowed_numbers(sc, results, []) | _workload_numbers(workload) | _forms(sc.seed or 25)
        allowed |= {"20", "40"}                                 # the paper's 20-40 %
        for name in ("7b-fp16", "llama3-70b"):
            allowed |= set(NUMBER.findall(format_bytes(PRESETS[name].bytes_per_token)))
        if sc.workload != "classroom-40":
            allowed |= _forms(sc.offset + 1) | _forms(sc.offset + sc.count) | _forms(sc.steps_per_second)
            allowed |= set(NUMBER.findall(AZURE_ATTRIBUTION))
        assert not _unquoted([text], allowed), (sc, _unquoted([text], allowed))


def test_the_csv_header_names_engine_metrics_and_the_shares_partition_the_pool():


    from allocator.engine.result import METRICS
    from allocator.engine.shares import SHARES
    from allocator.viz.export.html import METRIC_UNITS, metrics_csv

    sc = Scenario(shared_prefix=256)
    results = run_scenario(sc, record_snapshots=False)
    df = read_metrics_csv(metrics_csv(results, sc, build_workload(sc)))[0]
    pattern = re.compile(r"(reserve_max|paged) (\w+) \((.+)\)")
    for col in df.columns[2:]:
        kind, metric, unit = pattern.fullmatch(col).groups()
        assert metric in METRICS and (unit == METRIC_UNITS[metric] or metric == "units"), col
    for kind, res in results.items():
        cols = [f"{kind} {name} (slots)" for _, name, _, _ in SHARES]
        rows = df[cols].dropna()
        assert len(rows) and (rows.sum(axis=1) == res.total_slots).all(), kind   # the six shares: the pool


def test_the_standalone_html_caption_and_frames_quote_the_run():
    from allocator.viz.explainer_chart import explainer_figure
    from allocator.viz.export.html import animation_html

    sc = Scenario(shared_prefix=256)
    results = run_scenario(sc)
    workload = build_workload(sc)
    fig = explainer_figure(results)
    doc = animation_html(sc, workload, results, fig)
    caption = re.search(r"<p style=\"margin: 0 0 4px 0[^>]*>(.*?)</p>", doc).group(1)
    allowed = allowed_numbers(sc, results, []) | _workload_numbers(workload)
    assert not _unquoted([caption], allowed), caption
    for frame in fig.frames[:: max(1, len(fig.frames) // 12)]:
        step = int(frame.name)
        nums = _forms(step)
        for res in results.values():
            nums |= _forms(res.steps) | _forms(res.block_size or 0) | _forms(len(res.rejected))
            if step < res.steps:
                r = res.record_index(step)
                for name, values in res.metrics.items():
                    nums |= _forms(values[r]) | _forms(values[r] / res.total_slots)
                nums |= _forms(int((res.metrics["preemptions"][:r + 1] * res.metrics["span"][:r + 1]).sum()))
                nums |= _forms(int(res.metrics["step"][r] + res.metrics["span"][r]))
            else:
                nums |= _forms(int(res.metrics["finished"][-1]))
        texts = [a.text for a in frame.layout.annotations or () if a.text]
        assert texts and not _unquoted(texts, nums), (step, _unquoted(texts, nums))


def _json_numbers(obj, out: set) -> set:
    """Every number in a JSON value, in every printed form (fractions also as percentages)."""
    if isinstance(obj, dict):
        for v in obj.values():
            _json_numbers(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _json_numbers(v, out)
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        out |= _forms(obj) | _forms(obj * 100)
    elif isinstance(obj, str):
        out |= set(NUMBER.findall(obj))
    return out


def _cli_json(argv: list[str]) -> dict:
    import contextlib
    import io
    import json

    from allocator.__main__ import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(argv) == 0
    return json.loads(buf.getvalue())


def _open(page_file: str):
    from tests.conftest import open_page

    return open_page(page_file)


#: Reference figures the arithmetic pages quote as the references' own worked answers
#: (assets/reference_figures.md R2: the best block size per metadata cost; the paper's 800 KB per
#: token for OPT-13B as an example of binary units).
ARITHMETIC_STATIC = {"0.25", "38.25", "72", "800", "819,200"}


def test_the_accounting_page_quotes_what_the_cli_computes():
    """Slot accounting: every number on the page is the CLI's for the same inputs (the page and
    ``python -m allocator account`` call the same functions), a widget's value, or a seed's own."""
    at = _open("pages/accounting.py")
    ss = at.session_state
    lengths = "5,9,17"
    assert [int(v) for v in at.dataframe[0].value.iloc[:, 0].dropna() if str(v).strip()] == [5, 9, 17]
    j = _cli_json(["account", "--lengths", lengths, "--reserve", str(ss["acc_reserve"]),
                   "--metadata-cost", str(at.slider(key="acc_metadata_cost").value),
                   "--block-size", str(at.slider(key="acc_block_size").value), "--pool-slots", str(ss["acc_pool"]),
                   "--share", f"{ss['acc_share_a']},{ss['acc_share_b']},{ss['acc_share_prefix']}",
                   "--share-block-size", str(ss["acc_share_block"]), "--json"])
    allowed = _json_numbers(j, set()) | ARITHMETIC_STATIC
    for v in (ss["acc_reserve"], ss["acc_pool"], at.slider(key="acc_metadata_cost").value,
              at.select_slider(key="acc_cand_max").value, 1, 3):      # sizes 1-32; section 3
        allowed |= _forms(v)
    assert not _unquoted(_page_texts(at), allowed), _unquoted(_page_texts(at), allowed)


def test_the_capacity_page_quotes_what_the_cli_computes():
    at = _open("pages/capacity.py")
    ss = at.session_state
    j = _cli_json(["capacity", "--model", ss["cap_model"], "--free-gib", f"{ss['cap_free_gib']:g}",
                   "--max-context", str(ss["cap_max_context"]), "--mean-tokens", f"{ss['cap_mean_tokens']:g}",
                   "--block-size", str(ss["cap_block_size"]),
                   "--acceptance-rate", f"{ss['cap_acceptance_rate']:g}", "--json"])   # the speculation rows
    allowed = _json_numbers(j, set()) | ARITHMETIC_STATIC
    from allocator.accounting.models import PRESETS

    model = PRESETS[ss["cap_model"]]
    for v in (ss["cap_free_gib"], ss["cap_max_context"], ss["cap_mean_tokens"], ss["cap_block_size"],
              *(getattr(model, f) for f in ("layers", "kv_heads", "head_dim", "bytes_per_element")), 1, 2, 1024):
        allowed |= _forms(v)                                  # "2 (K and V)", "1 KiB = 1,024 bytes"
    assert not _unquoted(_page_texts(at), allowed), _unquoted(_page_texts(at), allowed)


def test_the_block_tables_page_quotes_its_pool():
    """Block tables & sharing: every number is the demo pool's (block ids, counts, refcounts, its
    size) after a fork, or a reference's section."""
    at = _open("pages/block_tables.py")
    demo = at.session_state["bt_demo"]
    mgr = demo.mgr
    allowed = {"4.4", "4.5"}                                 # the paper's sections 4.4, 4.5
    for v in range(max(mgr.num_blocks, mgr.block_size, 16) + 1):
        allowed |= _forms(v)                                  # block ids, slots in a block, host blocks
    counts = mgr.slot_counts()
    for v in vars(counts).values():
        allowed |= _forms(v)
    values = {m.label: m.value for m in at.metric}
    assert values["Logical tokens"] == f"{counts.logical_tokens:,}"
    assert values["Distinct physical slots"] == f"{counts.physical_slots:,}"
    assert not _unquoted(_page_texts(at), allowed), _unquoted(_page_texts(at), allowed)


def _object_numbers(obj, out: set, depth: int = 0) -> set:
    """Numbers of a dataclass-like object's fields (nested; strings read for their numbers), in
    every printed form, with byte and FLOP figures also in G, T, GiB and per-cent forms."""
    if depth > 3:
        return out
    if isinstance(obj, (int, float)) and not isinstance(obj, bool):
        out |= _forms(obj) | _forms(obj * 100) | _forms(obj * 1000)
        for scale in (1e9, 1e12, 2**30, 2**20):
            out |= _forms(obj / scale) | {f"{obj / scale:,.0f}", f"{obj / scale:.2f}"}
    elif isinstance(obj, str):
        out |= set(NUMBER.findall(obj))
    elif hasattr(obj, "__dict__") or hasattr(obj, "__dataclass_fields__"):
        names = list(getattr(obj, "__dataclass_fields__", None) or vars(obj))
        names += [n for n, a in vars(type(obj)).items() if isinstance(a, property)]
        for name in names:
            _object_numbers(getattr(obj, name, None), out, depth + 1)
    return out


def test_the_throughput_page_quotes_its_sweep():
    """Throughput and latency: every number on the page is the sweep's, the cost model's (GPU
    datasheet, model shape, stated assumptions) or the paper's (allocator.studies.rate_sweep.PAPER)."""
    from allocator.studies.rate_sweep import with_latency_factor
    from pages._ui.sweep_cache import cached_sweep, sweep_key
    from tests.conftest import open_page

    at = open_page("pages/throughput.py", {"tp_requests": 200, "tp_rates": "0.5, 1, 2, 4"})
    sweep = with_latency_factor(cached_sweep(sweep_key("a100-40gb", "opt-13b", "auto", 200, (0.5, 1.0, 2.0, 4.0), 16)),
                                5)
    from allocator.cost.roofline import describe

    allowed = sweep_allowed(sweep) | _object_numbers(sweep.cost, set())
    allowed |= {n for row in describe(sweep.cost) for v in row.values() for n in NUMBER.findall(str(v))}
    allowed |= {"2023", "2024", "800", "819,200", "10", "0.9", "1", "2", "4", "80"}   # paper years; binary-unit
    # example; vLLM's 10 % reserve (gpu_memory_utilization 0.9); 2 x FLOPs, K and V; per-layer copies
    allowed |= _forms(sweep.cost.model.layers * 2)
    from allocator.studies.paper import PAPER_POOL_SLOTS
    allowed |= _forms(PAPER_POOL_SLOTS) | {"39"}             # the preset's pool (Table 1); artifact "sosp-ae-39"
    bad = _unquoted(_page_texts(at), allowed)
    assert not bad, bad


def test_a_sweep_over_a_coarse_grid_quotes_brackets_not_interpolations():
    """A new user typed 0.1, 0.2, 500 on the Throughput page: the headline said paged sustains 167.37
    requests/s, 1.1x reserve-max (the default grid gives 1.81). Across a step wider than 1.5x the
    sustained rate is the bracket of the two rates typed, and no ratio is quoted that the brackets
    cannot support."""
    from allocator.studies.rate_sweep import rate_sweep
    from allocator.cost.roofline import cost_model
    from allocator.viz.claims.throughput import paper_comparison, sustained_rows, sweep_headline

    sweep = rate_sweep(cost_model("a100-40gb", "opt-13b"), (0.1, 0.2, 500), requests=150)
    assert sweep.sustained["paged"] == {"rate": None, "bound": "between", "low": 0.2, "high": 500.0}
    text = sweep_headline(sweep)
    assert "between 0.2 and 500 requests/s" in text and "167" not in text
    assert "That is" not in text and "no ratio" in text, text
    assert all(row["paged sustains (× this rate)"] in ("—", "not comparable") for row in sustained_rows(sweep))
    assert "x the rate" not in paper_comparison(sweep)["model"]
    # every number the texts print is a rate typed, a setting or a measured value (no interpolation)
    allowed = sweep_allowed(sweep)
    for t in [text, paper_comparison(sweep)["model"], *(r["sustained rate"] for r in sustained_rows(sweep))]:
        for n in _numbers(t):
            assert n in allowed, (n, t)


def test_ablation_texts_quote_the_ablations():
    """Issue 38: every number in the section 7 sentences (Figures 18b, 19a, 19b) comes from the
    ablations shown beside them or from the paper's stated ranges (allocator.studies.ablations)."""
    from allocator.cost.kernel_block import kernel_block_factors
    from allocator.studies.ablations import E2E_DURATION_S, E2E_RATE, PAPER_ABLATIONS, ablations
    from allocator.viz.claims.paper import ablation_texts

    abl = ablations(kernel_block_factors(), scale=1.6558, seeds=(0,), block_sizes=(1, 16, 32, 64, 256))
    m = abl.micro
    values = [abl.rate, abl.scale, E2E_RATE, E2E_DURATION_S, len(abl.seeds), m["tokens"], m["transfers_per_block"],
              1e6 * m["transfer_latency_s"], m["crossover"], 1e3 * m["recompute_s"], 10,
              *(1e3 * v for v in m["swap_out_in_s"]), *(1e3 * v for v in m["swap_no_latency_s"]),
              *m["block_sizes"], *PAPER_ABLATIONS["fig18b"]["best_block_sizes"],
              *PAPER_ABLATIONS["fig19"]["comparable_block_sizes"], 7, 2, 18, 19,     # sections 7.2, 7.3; Figures
              *abl.kernel["factor"].values(), *(100 * (f - 1) for f in abl.kernel["factor"].values())]
    for mode in abl.e2e.values():
        for sp in mode.values():
            values += [sp["mean"], sp["std"]]
    r = abl.swap_over_recompute()
    values += list(r.values()) + [100 * (max(r[b] for b in (16, 32, 64)) - 1)]
    allowed = set()
    for v in values:
        allowed |= _forms(v) | {f"{v:.2f}" if v is not None else "", f"{v:g}" if v is not None else ""}
    allowed |= {"2023", "7.2", "7.3"}                        # the paper's year; its sections 7.2, 7.3
    texts = ablation_texts(abl)
    for text in texts.values():
        for n in _numbers(text):
            assert n in allowed, (n, text)
    assert ("prediction" in texts["kernel"]) == (abl.kernel["source"] == "prediction")
    best = abl.best()
    assert f"are {best[0]} to {best[-1]}" in texts["fig18b"]


def test_paper_replication_names_its_three_rates_and_its_traces():
    """The paper replication's burst saturation rate (the load scale), Figure 12's knees (sustained
    rates under the latency budget) and the Throughput page's own sweep are named apart; the traces'
    lengths agree between the sentences; the figures are called simulated, not measured."""
    from allocator.studies.paper import PAPER_FIGURES, SATURATION_REQUESTS
    from allocator.studies.paper import replication_for as paper_replication
    from allocator.viz.claims.paper import paper_replication_texts

    rep = paper_replication()
    t = paper_replication_texts(rep)
    sc = rep.scale
    assert f"burst saturation rate" in t["load"] and f"{SATURATION_REQUESTS:,} of the paper's requests" in t["load"]
    assert f"{sc['ours']:.2f} requests/s" in t["load"] and "not a sustained rate" in t["load"]
    assert "measured" not in t["load"] and "simulated" in t["load"]
    knee = rep.sustained["paged"]["rate"]
    assert f"vLLM's knee is {knee * sc['scale']:.2f} requests/s" in t["fig12"]
    assert "knee" in t["fig12"] and "latency budget" in t["fig12"] and "rate sweep" in t["fig12"]
    f2, f12 = PAPER_FIGURES["fig2"], PAPER_FIGURES["fig12"]
    assert f"One trace of {f2['duration_s']:g} s of arrivals" in t["fig2"]
    assert f"{f12['duration_s']:g} s of arrivals per rate" in t["fig12"]
    trace = next(d for d in t["departures"] if "quick mode" in d)
    assert f"Figure 12 runs {f12['duration_s']:g} s" in trace
    assert f"Figures 2 and 13 one {f2['duration_s']:g} s" in trace
    # the Orca splits: the paper's labelled as the paper's, in the artifact's categories, in the order named
    theirs = t["fig2"].split("**the paper**")[-1]
    assert "token states / reservation / internal / external and other" in t["fig2"]
    for s, split in PAPER_FIGURES["fig2"]["splits"].items():
        four = [PAPER_FIGURES["fig2"]["token_states"][s], *(split[k] for k in ("reservation", "internal", "external"))]
        assert " / ".join(f"{100 * v:.1f} %" for v in four) in theirs, (s, theirs)
    assert "rounding" in t["fig2"] and "external" in t["fig2"]


def test_the_split_row_prints_its_numbers_in_the_order_of_its_words():
    """The targets row listed "internal > reservation > external" beside "13.3 / 57.4 / 9.1 %" (another
    order): each share is now printed after its own word, largest first."""
    import re

    from allocator.studies.paper import PAPER_FIGURES
    from allocator.studies.paper import replication_for as paper_replication

    rep = paper_replication()
    row = next(r for r in rep.targets() if "largest first" in r["measure"])
    for cell, split in ((row["ours"], rep.fig2["max"]["artifact"]), (row["paper"], PAPER_FIGURES["fig2"]["max_split"])):
        pairs = re.findall(r"(reservation|internal|external) (\d+\.\d) %", cell)
        assert [k for k, _ in pairs] == sorted(("reservation", "internal", "external"), key=lambda k: -split[k])
        assert [float(v) for _, v in pairs] == [round(100 * split[k], 1) for k, _ in pairs]
        assert [float(v) for _, v in pairs] == sorted((float(v) for _, v in pairs), reverse=True), cell


def test_the_kernel_page_quotes_its_records():
    """Issue 23: every number the kernel page says before anything runs comes from what it shows:
    the compile records (Triton 3.9 and 3.6), the prediction tables and the H200 figures of
    ``kernels.sweep.predict``, the correctness check's case, the sweep's shape, budget and limits, and the
    explainer's scenario for the memory side."""
    import torch

    from kernels import compile_check, gpu_check
    from kernels.sweep import predict
    from kernels.sweep import run as ks
    from kernels.sweep.data import CPU_SHAPE
    from kernels.attention.paged_attention import CHECK_CASE
    from tests.conftest import open_page

    at = open_page("pages/kernel.py")
    allowed: set[str] = set()
    for report in (compile_check.load_report(), compile_check.load_report(compile_check.TRITON36_OUT)):
        if report is not None:
            _json_numbers(report, allowed)
            for r in report["results"]:                        # shared memory in KiB, as the facts say
                if r.get("shared_bytes") is not None:
                    allowed |= _forms(r["shared_bytes"] / 1024) | {f"{r['shared_bytes'] / 1024:.0f}"}
            _json_numbers(compile_check.facts_text(report), allowed)
    h, hkv, d = gpu_check.TIMING_HEADS
    for n, t in gpu_check.TIMING_SHAPES:
        allowed |= _forms(n) | _forms(t)
        rows = predict.prediction_table(compile_check.load_report(), n, t, h, hkv, d, "bf16")
        for row in rows:
            _object_numbers(row, allowed)
            allowed |= _forms(round(100 * row["fraction_of_nominal"]))
        from kernels.sweep.figures import prediction_frame         # the tables' cells, as the page shows them
        for v in prediction_frame(rows).to_numpy().ravel():
            allowed |= {str(v)} | ({f"{v:g}", f"{v:.1f}"} if isinstance(v, (int, float)) else set())
    gpu = predict.H200
    allowed |= (_forms(gpu.sms) | {f"{gpu.nominal_Bps / 1e12:.1f}", f"{gpu.copy_Bps / 1e12:.1f}",
                                   f"{predict.ASSUMED_LATENCY_S * 1e6:.1f}"} | _forms(h) | _forms(hkv) | _forms(d))
    _json_numbers({k: list(v) if isinstance(v, tuple) else v for k, v in CHECK_CASE.items()}, allowed)
    allowed |= _forms(len(CHECK_CASE["seq_lens"]))
    _object_numbers(CPU_SHAPE, allowed)
    allowed |= (_forms(ks.DEFAULT_BUDGET_S) | _forms(ks.HARD_LIMIT_S) | _forms(round(ks.CONFIDENCE * 100))
                | {str(b) for b in ks.DEFAULT_BLOCK_SIZES} | _forms(torch.get_num_threads()))
    sc = Scenario()
    allowed |= _forms(sc.slots) | {"40"}                      # the explainer's pool; "classroom-40"
    allowed |= {"3.9", "3.6", "90"}                           # Triton versions; sm_90
    bad = _unquoted(_page_texts(at), allowed)
    assert not bad, bad


def test_swap_mode_says_why_it_recomputed():
    """In swap mode a preemption is recomputed only when the host pool has no room for it: the
    explainer's time line says so beside the recomputed tokens it quotes (found by a new user on
    a 1,024-slot pool, where swap quietly recomputed 713 tokens)."""
    from allocator.cost.roofline import cost_model
    from allocator.cost.timing import price
    from allocator.viz.claims.explainer import time_line

    res = run_scenario(Scenario(total_slots=1024, preemption="swap"), record_snapshots=False)["paged"]
    assert res.summary.recomputed_tokens > 0 and res.summary.swapped_blocks > 0
    line = time_line(res, price(res, cost_model()))
    assert f"recomputing {res.summary.recomputed_tokens:,} tokens" in line
    assert "the host pool had no room for" in line
    plain = run_scenario(Scenario(total_slots=1024), record_snapshots=False)["paged"]
    assert "host pool" not in time_line(plain, price(plain, cost_model()))


# --- durations on screen come from a measurement or are not given (issue 40) -------------------------

#: A promised duration: "about 20 s", "half a minute", "30 seconds", "takes a minute", "under a second".
PROMISED_DURATION = re.compile(r"half a minute|\babout \d+(\.\d+)? ?(s|sec|seconds|minutes?)\b|\b\d+ seconds\b"
                               r"|\btakes? (about )?(a|one) minute|\bunder (about )?(a|one) (second|minute)\b", re.I)


def _shown_strings(rel: str):
    """(line, text) of every string literal in a file that is not a docstring: what a page can show."""
    import ast
    with open(os.path.join(ROOT, rel), encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_no_page_promises_a_duration_it_did_not_measure():
    """The About page promised half a minute for the Prefix cache page (4.9 s measured) and the export
    toggle about 20 s for the static site (55 s measured): a fixed duration in the text goes stale
    with every machine. Durations on screen come from a measurement (formatted from it) or are not
    given; this scans every string a page or a figure builder can show, and the static site's files."""
    files = [os.path.relpath(os.path.join(d, f), ROOT) for top in ("pages", os.path.join("allocator", "viz"))
             for d, _, fs in os.walk(os.path.join(ROOT, top)) for f in fs if f.endswith(".py")] + ["app.py"]
    found = [f"{rel}:{line}: {text[:120]!r}" for rel in files for line, text in _shown_strings(rel)
             if PROMISED_DURATION.search(text)]
    static = os.path.join(ROOT, "allocator", "viz", "export", "site_static")
    for name in os.listdir(static):
        with open(os.path.join(static, name), encoding="utf-8") as fh:
            found += [f"site_static/{name}: {m.group(0)!r}" for m in PROMISED_DURATION.finditer(fh.read())]
    assert not found, "\n".join(found)
    assert PROMISED_DURATION.search("Prepare the static site (about 20 s)")         # the rule sees the old texts
    assert PROMISED_DURATION.search("its first view takes about half a minute")


def test_no_page_sends_a_student_to_a_repository_file_for_the_lesson():
    """Issue 40: the lesson's reference figures are named as the lesson's (R1-R9), never by the path of
    the file in the repository, which a student in a browser cannot open."""
    files = [os.path.relpath(os.path.join(d, f), ROOT) for top in ("pages", os.path.join("allocator", "viz"))
             for d, _, fs in os.walk(os.path.join(ROOT, top)) for f in fs if f.endswith(".py")]
    found = [f"{rel}:{line}" for rel in files for line, text in _shown_strings(rel) if "reference_figures" in text]
    assert not found, found


def test_no_page_calls_a_peak_an_instant():
    """Issue 40: reserve-max's peak was called "one instant" on cards, details, handout, site and
    glossary while it ran most of the run; how long a peak lasted is computed from the run
    (``RunSummary.peak_running_steps``), never assumed. No shown string says instant."""
    files = [os.path.relpath(os.path.join(d, f), ROOT) for top in ("pages", "allocator")
             for d, _, fs in os.walk(os.path.join(ROOT, top)) for f in fs if f.endswith(".py")]
    found = [f"{rel}:{line}" for rel in files for line, text in _shown_strings(rel)
             if re.search(r"\b(one|single|an?) instants?\b", text)]
    assert not found, found


# --- who says tiny blocks cost kernel time (issue 40) ------------------------------------------------

#: The old claims: the lesson sent the class to the kernel page for a cost in time that page does not show.
KERNEL_TIME_CLAIM = re.compile(r"kernel tab|chases? (one|more) pointers?|a cost in time|price paging pays in the kernel",
                               re.I)


def test_tiny_blocks_costing_kernel_time_is_said_to_be_the_papers_claim():
    """The lesson, the explainer, the About page and the handout said tiny blocks cost kernel time and
    pointed at the kernel page, which on this machine measures no such cost (CPU: lost in noise; H200:
    a prediction within 1 %; no GPU result ships). Every such sentence now says who says it: the
    PagedAttention paper (section 7.2) for its own kernel. Scans every string a page, a figure builder
    or the static site can show for the old wording, and checks the shared sentence is where the
    lesson, the guided lesson's challenges, the static site and the handout say it."""
    from allocator.viz.export.markup import markdown_html
    from allocator.viz.lesson import CHALLENGES
    from allocator.viz.texts import TINY_BLOCKS_TIME, TINY_BLOCKS_TIME_SHORT

    files = [os.path.relpath(os.path.join(d, f), ROOT) for top in ("pages", os.path.join("allocator", "viz"))
             for d, _, fs in os.walk(os.path.join(ROOT, top)) for f in fs if f.endswith(".py")]
    found = [f"{rel}:{line}: {text[:100]!r}" for rel in files for line, text in _shown_strings(rel)
             if KERNEL_TIME_CLAIM.search(text)]
    static = os.path.join(ROOT, "allocator", "viz", "export", "site_static")
    for name in os.listdir(static):
        with open(os.path.join(static, name), encoding="utf-8") as fh:
            found += [f"site_static/{name}: {m.group(0)!r}" for m in KERNEL_TIME_CLAIM.finditer(fh.read())]
    assert not found, "\n".join(found)
    assert KERNEL_TIME_CLAIM.search("a cost in time, not memory (see the live kernel tab)")   # the old text
    for text in (TINY_BLOCKS_TIME, TINY_BLOCKS_TIME_SHORT):
        assert "PagedAttention paper (section 7.2)" in text and "its own" in text
        assert "predict" in text and "GPU" in text
    assert "measure" in TINY_BLOCKS_TIME and "noise" in TINY_BLOCKS_TIME
    assert any(TINY_BLOCKS_TIME in a for _, a in CHALLENGES)
    # the static site renders CHALLENGES through markdown_html (allocator.viz.export.site)
    assert any("PagedAttention paper (section 7.2)" in markdown_html(a) for _, a in CHALLENGES)
    results = run_scenario(Scenario(), record_snapshots=False)
    assert any(TINY_BLOCKS_TIME_SHORT in t for t in takeaways(results))


def test_the_tiny_blocks_sentence_holds_for_what_ships():
    """TINY_BLOCKS_TIME says no GPU measurement ships and that the H200 prediction puts paged within 1 %
    of contiguous at every block size: both are checked against the assets, so a shipped GPU result or a
    new compile record makes this fail until the sentence is rewritten."""
    from kernels import compile_check, gpu_check
    from kernels.sweep import predict
    from kernels.sweep.data import load_recorded

    assert load_recorded() == [] and not os.path.exists(os.path.join(ROOT, "assets", gpu_check.RESULT_NAME))
    h, hkv, d = gpu_check.TIMING_HEADS
    overheads = [row["predicted_overhead"] for n, t in gpu_check.TIMING_SHAPES
                 for row in predict.prediction_table(compile_check.load_report(), n, t, h, hkv, d, "bf16")
                 if row["block_size"] is not None]
    assert overheads and all(1.0 <= x < 1.01 for x in overheads), overheads


# --- small ones (issue 40): hover precision, units, the idle-memory text, the readout -----------------

#: A hover format with false precision: d3's "g" (six significant figures, trailing zeros kept: "54.0000"),
#: four or more fixed decimals, or seconds with three ("at most 4.946 s"); durations go through formats.seconds.
FALSE_PRECISION = re.compile(r"%\{\{?[^}]*:g\}|%\{\{?[^}]*:[^}]*\.[4-9]f\}|%\{\{?[^}]*:\.3f\}\}? ?(s|ms)\b"
                             r"|\{[a-z_]+:\.[3-9]f\} s/token<")


def test_no_hover_text_prints_false_precision():
    files = [os.path.relpath(os.path.join(d, f), ROOT) for top in (os.path.join("allocator", "viz"),)
             for d, _, fs in os.walk(os.path.join(ROOT, top)) for f in fs if f.endswith(".py")
             and f not in ("paper.py",)] + [os.path.join("kernels", "sweep", "figures.py")]
    found = []
    for rel in files:
        with open(os.path.join(ROOT, rel), encoding="utf-8") as fh:
            src = fh.read()
        found += [f"{rel}: {m.group(0)!r}" for m in FALSE_PRECISION.finditer(src)]
    assert not found, "\n".join(found)
    for old in ('"total cost %{y:g}"', '"at most %{x:.4f} s"', '"median %{y:.3f} ms"', 'f"budget {budget:.3f} s/token<'):
        assert FALSE_PRECISION.search(old), old                 # the rule sees the old formats
    from allocator import accounting as acc
    from allocator.viz.arithmetic import cost_figure
    rows = acc.block_size_table([5, 9, 17], 1.0)
    fig = cost_figure(rows, 31, 1.0)
    total = next(t for t in fig.data if t.name == "total cost")
    assert list(total.customdata) == [f"{r.total_cost:,g}" for r in rows] and "%{customdata}" in total.hovertemplate


def test_the_kernel_prediction_table_names_its_units():
    from kernels.sweep.figures import prediction_headers
    short = {k: v[0] for k, v in prediction_headers("NVIDIA H200", 132, 4800.0).items()}
    assert "KiB" in short["K/V in flight per SM (KiB)"], short


def test_where_idle_memory_goes_matches_the_maps_colours():
    texts = [t for _, t in _shown_strings("pages/explainer.py")]
    joined = " ".join(texts)
    assert "third kind" not in joined and "Both sit idle" not in joined
    assert "six shares" in joined and "duplicate copies** (brown)" in joined


def test_the_frame_readout_gives_the_duplicate_share_with_a_shared_prompt():
    from allocator.common.formats import pct
    from allocator.viz.explainer_chart import _frame_text
    results = run_scenario(Scenario(shared_prefix=256))
    for res in results.values():
        r = res.record_index(5)
        text = _frame_text(res, 5)
        assert f"duplicate copies {pct(res.metrics['duplicate_slots'][r] / res.total_slots)}" in text, text
    assert "duplicate" not in _frame_text(run_scenario(Scenario())["paged"], 5)


def test_one_ratio_reads_one_way_in_the_table_and_the_sentences():
    """Issue 40: the same ratio was printed 2.05x in the replication's targets table and 2.0x in its
    sentence. Every ratio cell of the table is written as the sentences write it (formats.ratio)."""
    from allocator.common.formats import ratio
    from allocator.studies.paper import replication_for
    from allocator.viz.claims.paper import paper_replication_texts

    rep = replication_for()
    rows = [r for r in rep.targets() if "vLLM /" in r["measure"] and r["ours"] != "n/a"]
    assert len(rows) >= 4
    words = " ".join(v if isinstance(v, str) else " ".join(map(str, v)) for v in paper_replication_texts(rep).values())
    batch = rep.fig13_mean("paged") / rep.fig13_mean("oracle")
    cell = next(r["ours"] for r in rows if r["measure"] == "OPT-13B: batched requests, vLLM / Orca (Oracle)")
    assert cell == ratio(batch) and ratio(batch) in words
    for r in rows:
        assert re.fullmatch(r"(\w+ )?\d+(\.\d)?x|\d+(\.\d)?x-\d+(\.\d)?x|\d+x|0\.\d+x", r["ours"]), r
