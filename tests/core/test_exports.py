"""Classroom exports: per-step CSV, the offline HTML animation, the handout, and ``export-html``."""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from allocator.__main__ import main
from allocator.workloads.requests import Request, Workload
from allocator.engine.scenario import Scenario, build_workload, run_both, run_scenario
from allocator.viz.explainer_chart import explainer_figure
from allocator.viz.export.handout import handout_html, handout_rows, takeaways
from allocator.viz.export.html import KINDS, METRIC_UNITS, metrics_csv, standalone_html
from tests.conftest import ROOT, read_metrics_csv


@pytest.fixture(scope="module")
def run():
    sc = Scenario(workload="classroom-40", block_size=16)
    workload = build_workload(sc)
    return sc, workload, run_scenario(sc, workload)


def test_csv_one_row_per_step_with_the_core_values(run):
    _, _, results = run
    df = pd.read_csv(io.StringIO(metrics_csv(results)))
    n = max(r.steps for r in results.values())
    assert len(df) == n and df["step"].tolist() == list(range(n))
    # units are in the header names, columns are prefixed by allocator kind
    assert "paged used_slots (slots)" in df.columns
    assert "reserve_max utilization (fraction of pool)" in df.columns
    assert "paged units (blocks in use)" in df.columns and "reserve_max units (reservations in use)" in df.columns
    from allocator.engine.result import METRICS
    assert list(df.columns[:2]) == ["step", "steps covered"] and (df["steps covered"] == 1).all()
    assert len(df.columns) == 2 + len(KINDS) * len(METRICS)
    assert not [c for c in df.columns if "see allocator.engine.simulate" in c]      # every metric has its unit
    for kind in KINDS:
        res = results[kind]
        m = res.metrics
        k = res.steps
        for name, col in (("used_slots", f"{kind} used_slots (slots)"),
                          ("running", f"{kind} running (sequences)"),
                          ("internal_fragmentation", f"{kind} internal_fragmentation (slots)"),
                          ("preemptions", f"{kind} preemptions (sequences this step)")):
            assert (df[col].iloc[:k].to_numpy() == m[name]).all(), col
            assert df[col].iloc[k:].isna().all()          # nothing invented after the run drained
        util = df[f"{kind} utilization (fraction of pool)"].iloc[:k].to_numpy()
        assert np.array_equal(util, m["utilization"])     # full precision, reads back exactly
        assert df[f"{kind} preemptions (sequences this step)"].sum() == res.summary.preemptions
    # the shorter run (paged drains first on classroom-40) leaves blanks, not zeros
    assert results["paged"].steps < n


def test_csv_writes_an_idle_gap_as_one_row():
    """Two requests a million steps apart: the CSV has one row for the whole gap, not a million."""
    w = Workload("gap", (Request(1, 10, 5, 0), Request(2, 20, 3, 1_000_000)), max_new_tokens=5)
    results = run_both(w, 64, 4)
    df = pd.read_csv(io.StringIO(metrics_csv(results)))
    assert len(df) <= 20 and int(df["steps covered"].sum()) == max(r.steps for r in results.values())
    gap = df[df["steps covered"] > 1].iloc[0]
    assert gap["step"] == 5 and gap["steps covered"] == 999_995
    assert gap["paged running (sequences)"] == 0 and gap["paged finished (requests)"] == 1


def test_every_engine_metric_has_a_unit():
    from allocator.engine.result import METRICS
    assert set(METRICS) <= set(METRIC_UNITS), set(METRICS) - set(METRIC_UNITS)


def test_csv_rejects_a_half_result(run):
    _, _, results = run
    with pytest.raises(ValueError, match="reserve_max"):
        metrics_csv({"paged": results["paged"]})


def test_standalone_html_is_offline_and_carries_the_frames(run):
    _, _, results = run
    fig = explainer_figure(results)
    doc = standalone_html(fig, title="Lesson <1>", caption="forty requests")
    assert doc.lstrip().lower().startswith("<!doctype html>") and doc.rstrip().endswith("</html>")
    assert "<title>Lesson &lt;1&gt;</title>" in doc
    # plotly.js inline, nothing fetched from the network
    assert not re.search(r"<script[^>]*\bsrc\s*=", doc, re.I)
    assert "plotly.js" in doc.lower() and len(doc) > 3_000_000
    # every frame travels in the file, and the Play button is there
    assert "addFrames" in doc
    for f in (fig.frames[0], fig.frames[len(fig.frames) // 2], fig.frames[-1]):
        assert f'"name":"{f.name}"' in doc
    assert "▶ Play" in doc or "\\u25b6 Play" in doc
    assert "PagedAttention" in doc                        # attribution footer
    with pytest.raises(ValueError, match="Figure"):
        standalone_html({"data": []})


def test_handout_lists_both_allocators_and_takeaways(run):
    sc, workload, results = run
    doc = handout_html(sc, results, workload)
    assert "<script" not in doc.lower() and "http://" not in doc
    rm, pg = results["reserve_max"].summary, results["paged"].summary
    rows = {r[0]: r[1:] for r in handout_rows(results)}
    assert rows["Running while requests wait (mean sequences per step)"] == (
        f"{rm.mean_running_busy:,.2f}", f"{pg.mean_running_busy:,.2f}")
    assert rows["Peak running (sequences, and how many steps ran it)"] == (
        f"{rm.peak_running} for {rm.peak_running_steps:,} steps (first at step {rm.peak_running_step:,})",
        f"{pg.peak_running} for {pg.peak_running_steps:,} steps (first at step {pg.peak_running_step:,})")
    assert "the batch" not in doc and "x the batch" not in " ".join(takeaways(results))
    assert rows["Steps to drain (engine steps)"] == (f"{rm.steps:,}", f"{pg.steps:,}")
    assert f"{100 * pg.mean_utilization_busy:.0f} %" in doc
    points = takeaways(results)
    assert 3 <= len(points) <= 4
    assert all(p.replace("'", "&#x27;") in doc for p in points)
    assert "classroom-40" in doc and "block size 16" in doc.lower()


def test_cli_export_html_writes_the_files(tmp_path, capsys):
    out, hand, csv = tmp_path / "lesson.html", tmp_path / "handout.html", tmp_path / "m.csv"
    rc = main(["export-html", "--workload", "classroom-40", "--block-size", "16", "-o", str(out),
               "--handout", str(hand), "--csv", str(csv), "--json"])
    assert rc == 0
    info = json.loads(capsys.readouterr().out)
    assert info["written"]["html"]["path"] == str(out) and info["written"]["html"]["frames"] >= 30
    assert info["scenario"]["block_size"] == 16
    doc = out.read_text(encoding="utf-8")
    assert "addFrames" in doc and not re.search(r"<script[^>]*\bsrc\s*=", doc, re.I)
    assert "Peak running" in hand.read_text(encoding="utf-8")
    assert len(read_metrics_csv(csv)[0]) == info["written"]["csv"]["rows"]


def test_cli_export_html_swap_scenario(tmp_path, capsys):
    hand = tmp_path / "h.html"
    rc = main(["export-html", "--preemption", "swap", "--block-size", "32", "-o", str(tmp_path / "s.html"),
               "--handout", str(hand)])
    assert rc == 0 and "wrote" in capsys.readouterr().out
    text = hand.read_text(encoding="utf-8")
    assert "swap to host memory" in text and "block 32" in text


def test_cli_export_runs_what_it_records_prefix_caching(tmp_path, capsys):
    """An export that records ``prefix_caching: true`` simulates with the prefix cache: its CSV's
    hits add up to ``simulate``'s prefill saved for the same window (it once ran without the cache)."""
    trace = os.path.join(ROOT, "assets", "mooncake_conversation_trace.jsonl.gz")
    window = ["--trace", trace, "--offset", "100", "--count", "20", "--prefix-caching"]
    assert main(["simulate", *window, "--json"]) == 0
    saved = json.loads(capsys.readouterr().out)["paged"]["prefill_tokens_saved"]
    csv = tmp_path / "m.csv"
    assert main(["export-html", *window, "-o", str(tmp_path / "a.html"), "--csv", str(csv), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["scenario"]["prefix_caching"] is True
    hits = read_metrics_csv(csv)[0]["paged prefix_hit_tokens (tokens this step)"].sum()
    assert saved > 0 and hits == saved


def test_cli_export_html_bad_block_size_exits_2(tmp_path):
    out = tmp_path / "x.html"
    proc = subprocess.run([sys.executable, "-m", "allocator", "export-html", "--block-size", "0", "-o", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: --block-size 0 must be a whole number from 1 to 4,096 (slots per block)"
    assert "Traceback" not in proc.stderr and not out.exists()


def test_cli_export_html_missing_directory_exits_2(tmp_path, capsys):
    rc = main(["export-html", "-o", str(tmp_path / "no" / "such" / "x.html")])
    assert rc == 2
    assert "output directory does not exist" in capsys.readouterr().err


def test_cli_export_shares_simulate_options():
    """export-html inherits every scenario option of simulate (one definition, no drift)."""
    from allocator.__main__ import build_parser
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    sim = {o for a in sub.choices["simulate"]._actions for o in a.option_strings}
    exp = {o for a in sub.choices["export-html"]._actions for o in a.option_strings}
    assert sim <= exp and {"-o", "--out", "--handout", "--csv"} <= exp


def test_every_export_names_its_scenario(run, tmp_path, capsys):
    from allocator.viz.export.html import scenario_slug, scenario_summary
    sc, workload, results = run
    text = metrics_csv(results, sc, workload)
    assert text.splitlines()[1].endswith(f',"KV Cache Paging Lab: {scenario_summary(sc, workload)}"')  # one cell
    assert scenario_summary(sc, workload).startswith("classroom-40, 2,048 slots, block size 16, max_new_tokens 600")
    df, named = read_metrics_csv(text)                    # plain pd.read_csv: no comment line to skip
    assert list(df.columns[:2]) == ["step", "steps covered"] and named == f"KV Cache Paging Lab: {scenario_summary(sc, workload)}"
    assert list(df.columns) == list(pd.read_csv(io.StringIO(metrics_csv(results))).columns)
    assert scenario_slug(sc) == "classroom-40_2048slots_block16_maxnew600_seed25"
    assert scenario_slug(Scenario(shared_prefix=256, preemption="swap", metadata_cost=0.25)) == (
        "classroom-40_2048slots_block16_maxnew600_seed25_prefix256_swap_c0p25")
    doc = handout_html(sc, results, workload)
    assert f"Scenario: {scenario_summary(sc, workload)}." in doc


def test_the_handout_quotes_bytes_per_slot_from_the_capacity_presets(run):
    from allocator.accounting.models import PRESETS
    from allocator.common.formats import format_bytes
    sc, workload, results = run
    doc = handout_html(sc, results, workload)
    big = PRESETS["llama3-70b"]
    assert f"{format_bytes(big.bytes_per_token)} for Llama 3 70B in {big.dtype}" in doc
    assert "320 KiB for Llama 3 70B in bf16" in doc and " KB" not in doc and "fp16, 512 KB" not in doc


def test_the_handout_says_how_long_each_peak_lasted(run):
    """Issue 40: the handout called both peaks "single instants"; on the default lesson reserve-max runs
    its peak of 3 in 2,005 of its 3,642 steps (the exported CSV's running column agrees). Each peak's
    duration is counted from the run's own records."""
    _, _, results = run
    text = " ".join(takeaways(results))
    held = {}
    for k, res in results.items():
        m = res.metrics
        held[k] = int(m["span"][m["running"] == m["running"].max()].sum())
        assert held[k] == res.summary.peak_running_steps
    r, p = results["reserve_max"].summary, results["paged"].summary
    assert (r.peak_running, held["reserve_max"], r.steps) == (3, 2005, 3642)
    assert (f"The peaks: 3 under reserve-max, held for 2,005 of the run's 3,642 steps (first at step 0), and "
            f"{p.peak_running} paged, held for {held['paged']:,} of the run's {p.steps:,} steps (first at step 0).") in text
    assert "instant" not in text


def test_a_pow2_export_is_named_and_summarised_as_pow2(tmp_path, capsys):
    """A pow2 (or buddy, or prefix-cached) export never shares a file name or a summary line with
    the reserve-max export of the same workload (it once did: only workload, pool and block size
    went into the name), and the files it writes say which reservation ran on the left."""
    from allocator.viz.export.html import scenario_slug, scenario_summary
    base = Scenario()
    variants = [Scenario(policy="pow2"), Scenario(policy="oracle"), Scenario(placement="buddy"),
                Scenario(policy="pow2", placement="buddy"), Scenario(shared_prefix=256, prefix_caching=True),
                Scenario(shared_prefix=256)]
    slugs = {scenario_slug(sc) for sc in [base, *variants]}
    summaries = {scenario_summary(sc) for sc in [base, *variants]}
    assert len(slugs) == len(summaries) == 1 + len(variants)
    assert scenario_slug(Scenario(policy="pow2")) == "classroom-40_2048slots_block16_maxnew600_seed25_reserve-pow2"
    assert "reserve-pow2 reservations" in scenario_summary(Scenario(policy="pow2"))
    assert "reserve-" not in scenario_summary(base) and "reserve-" not in scenario_slug(base)
    # the paged side under vLLM v1's scheduler (and its two caps) is named too: it runs other steps
    v1 = [Scenario(rules="v1"), Scenario(rules="v1", max_num_seqs=8), Scenario(rules="v1", max_num_batched_tokens=512)]
    assert len({scenario_slug(sc) for sc in [base, *v1]}) == len({scenario_summary(sc) for sc in [base, *v1]}) == 4
    assert scenario_slug(v1[1]) == "classroom-40_2048slots_block16_maxnew600_seed25_v1-seqs8-tokens2048"
    assert "vLLM v1 rules (max_num_seqs 8, max_num_batched_tokens 2,048)" in scenario_summary(v1[1])
    assert "v1" not in scenario_summary(base) and "v1" not in scenario_slug(base)
    # the CLI export: the CSV's scenario line, the handout and the animation's title all say pow2
    out, hand, csv = tmp_path / "a.html", tmp_path / "h.html", tmp_path / "m.csv"
    assert main(["export-html", "--policy", "pow2", "-o", str(out), "--handout", str(hand), "--csv", str(csv)]) == 0
    capsys.readouterr()
    assert "reserve-pow2 reservations" in read_metrics_csv(csv)[1]
    assert "reserve-pow2 reservations" in hand.read_text(encoding="utf-8")
    assert "left: reserve-pow2)" in out.read_text(encoding="utf-8")


def test_export_site_refuses_a_pool_it_cannot_draw_up_front(tmp_path, capsys):
    """Issue 42: ``export-site --slots 1073741824`` passed 5.9 GiB where export-html refuses the same
    pool at once; the site draws the pool slot by slot too, so the same bound holds before any work."""
    from allocator.__main__ import main
    for command in (["export-site", str(tmp_path / "site")], ["export-html", "--out", str(tmp_path / "a.html")]):
        assert main([*command, "--slots", "1073741824"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --slots 1073741824 must be a whole number from 1 to 4,194,304"), err
        assert "slots: a pool drawn slot by slot" in err
    assert os.listdir(tmp_path) == []
