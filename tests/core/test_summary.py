"""The typed run summary (allocator.engine.summary), the metric-name registry (allocator.common.metric_names),
the one formatter module (allocator.common.formats) and the scenario's workload kinds."""
from __future__ import annotations

import json
from dataclasses import fields

import pytest

from allocator.memory.paged import PagedAllocator
from allocator.memory.reserve_max import ReserveMaxAllocator
from allocator.workloads.requests import classroom_40
from allocator.engine.simulate import simulate
from allocator.common.formats import format_bytes, format_bytes_decimal, pct, pct_fixed, plural, rate, ratio, seconds
from allocator.common.metric_names import STEP_UNITS, SUMMARY_METRICS
from allocator.engine.scenario import Scenario, SweepRow, block_size_sweep, workload_kind
from allocator.engine.summary import PREFIX_FIELDS, RunSummary
from allocator.common.errors import FieldError


@pytest.fixture(scope="module")
def runs():
    w = classroom_40()
    return {"rm": simulate(w, ReserveMaxAllocator(2048, w.max_new_tokens), record_snapshots=False),
            "paged": simulate(w, PagedAllocator(2048, 16), record_snapshots=False),
            "roomy": simulate(w, PagedAllocator(1 << 16, 16), record_snapshots=False)}


def test_the_summary_is_typed_and_its_dict_is_the_json(runs):
    s = runs["paged"].summary
    assert isinstance(s, RunSummary)
    d = s.to_dict()
    assert list(d) == list(s) and dict(s) == d and len(s) == len(d)
    assert d["steps"] == s.steps == runs["paged"].steps and s["peak_running"] == s.peak_running
    assert not set(PREFIX_FIELDS) & set(d) and "prefix_caching" not in d     # only with a prefix cache
    assert json.loads(json.dumps(d)) == d
    with pytest.raises(KeyError):
        s["prefix_cache_hit_rate"]


def test_the_busy_or_all_fallback_lives_in_one_place(runs):
    busy, idle = runs["paged"].summary, runs["roomy"].summary
    assert busy.waited and busy.sustained_running == busy.mean_running_busy
    assert busy.sustained_utilization == busy.mean_utilization_busy
    assert busy.sustained_memory_shares == busy.memory_shares_busy
    # 65,536 slots: nothing ever waits, so the busy figures do not exist and the fallback takes all steps
    assert not idle.waited and idle.mean_running_busy is None and idle.busy_steps == 0
    assert idle.sustained_running == idle.mean_running > 0
    assert idle.sustained_utilization == idle.mean_utilization > 0
    assert idle.sustained_memory_shares == idle.memory_shares


def test_every_figure_has_one_name_unit_and_meaning():
    names = [f.name for f in fields(RunSummary) if f.name != "prefix_caching"]
    assert set(names) == set(SUMMARY_METRICS)
    assert all(m.label and m.meaning for m in SUMMARY_METRICS.values())
    labels = [m.label for m in SUMMARY_METRICS.values()]
    assert len(labels) == len(set(labels))                 # one name per number, and one number per name
    assert SUMMARY_METRICS["mean_running_busy"].term == "sustained batch"


def test_the_cards_and_the_details_table_read_the_registry(runs):
    from allocator.viz.claims.explainer import details_rows, headline
    results = {"reserve_max": runs["rm"], "paged": runs["paged"]}
    cards = [c["label"] for c in headline(results)["paged"]["cards"]]
    assert cards == [SUMMARY_METRICS[k].label for k in ("mean_running_busy", "mean_utilization_busy", "steps")]
    measures = {r["measure"]: r["what it means"] for r in details_rows(results, 0.0)}
    for key in ("peak_running", "mean_running", "preemptions", "swapped_blocks"):
        assert measures[SUMMARY_METRICS[key].label] == SUMMARY_METRICS[key].meaning


def test_every_engine_metric_has_a_unit():
    from allocator.engine.result import METRICS
    assert set(METRICS) <= set(STEP_UNITS)


def test_sweep_rows_are_typed(runs):
    rows = block_size_sweep(classroom_40(), 2048, (16, 256), metadata_cost=1.0)
    assert all(isinstance(r, SweepRow) for r in rows)
    assert [r.block_size for r in rows] == [16, 256] and rows[0]["blocks"] == rows[0].blocks == 128
    assert rows[0].peak_running == runs["paged"].summary.peak_running
    assert list(rows[0].to_dict()) == [f.name for f in fields(SweepRow)]


@pytest.mark.parametrize("workload, kind", [
    ("classroom-40", "classroom"), ("azure-conv", "shipped"), ("sharegpt-opt", "shipped"), ("upload", "upload"),
    ("assets/mooncake_conversation_trace.jsonl.gz", "mooncake"), ("x/TRACE.JSONL", "mooncake"),
    ("assets/azure_llm_conv_2023.csv", "csv"), ("trace.csv.gz", "csv")])
def test_a_scenario_decides_its_workload_kind_once(workload, kind):
    sc = Scenario(workload=workload)
    assert workload_kind(workload) == sc.kind == kind
    assert sc.trace_path == (workload if kind in ("csv", "mooncake") else None)


def test_formatters():
    assert (pct(0.314), pct(0.034), pct(0.0012), pct(0), pct(None)) == ("31 %", "3.4 %", "0.12 %", "0 %", "—")
    assert (pct_fixed(0.3142), pct_fixed(0.05), pct_fixed(0.3142, 0)) == ("31.4 %", "5.0 %", "31 %")
    assert (ratio(3.04), ratio(0.253), ratio(38.4)) == ("3.0x", "0.25x", "38x")
    assert (plural(1, "token"), plural(1024, "step"), plural(2, "query", "queries")) == (
        "1 token", "1,024 steps", "2 queries")
    assert (seconds(0.0213), seconds(1.234), seconds(16_600.4), seconds(0), seconds(None)) == (
        "21.3 ms", "1.23 s", "16,600 s", "0 s", "—")
    assert rate(1.8053) == "1.81"
    # binary units for the lesson's sizes (the paper's "800 KB" per OPT-13B token is 800 KiB) ...
    assert (format_bytes(819_200), format_bytes(1 << 30), format_bytes(512)) == ("800 KiB", "1 GiB", "512 bytes")
    assert format_bytes(3 * 1024 ** 2, "KiB") == "3,072 KiB"
    with pytest.raises(FieldError) as err:
        format_bytes(1, "KB")
    assert err.value.field == "unit"
    # ... decimal units for measured working sets
    assert (format_bytes_decimal(67_108_864), format_bytes_decimal(16_384), format_bytes_decimal(512)) == (
        "67.1 MB", "16.4 kB", "512 B")


def test_the_cli_names_each_figure_as_the_screen_does(capsys):
    from allocator.__main__ import main
    assert main(["metrics", "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert list(table) == list(SUMMARY_METRICS)
    assert table["mean_running_busy"] == {"label": "Mean running", "unit": "sequences per step",
                                          "meaning": SUMMARY_METRICS["mean_running_busy"].meaning,
                                          "term": "sustained batch"}
    assert main(["metrics"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(SUMMARY_METRICS) and lines[0].startswith("steps ") and "Steps to drain" in lines[0]


def test_durations_side_by_side_are_written_alike():
    """Seconds keep fixed decimals: a card reading "31.0 s" beside "30.6 s", never "31 s"."""
    from allocator.common.formats import seconds
    assert [seconds(x) for x in (30.98, 30.61, 1.5, 0.0213, 16_600.4)] == [
        "31.0 s", "30.6 s", "1.50 s", "21.3 ms", "16,600 s"]
    # milliseconds too (issue 40: the real-engine page's "33 ms" beside "32.5 ms")
    assert [seconds(x) for x in (0.03300, 0.0325, 0.1, 0.0045, 0.0004)] == [
        "33.0 ms", "32.5 ms", "100 ms", "4.50 ms", "0.4 ms"]
