"""AppTest of the "Prefix cache on a real trace" page (issue 15): every number it quotes comes
from the replay shown beside it, the charts have labelled axes and hover text, the block map's
legend counts the blocks of the snapshot it draws, and the trace's attribution is on the page.

One run at the page's defaults (1,000 requests at block 16, about 20 s); the others use small
windows.
"""
from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

from allocator.viz.maps import MAP_BLOCK_CACHED, MAP_BLOCK_FREE, MAP_BLOCK_PRIVATE, MAP_BLOCK_SHARED, block_picture
from allocator.workloads.mooncake import mooncake_workload, shipped_mooncake
from allocator.studies.prefix_cache import pool_sweep, run, trace_hit_statistic, ttft_comparison
from allocator.cost.best import best_cost_model, seconds_source
from allocator.viz.prefix import BLOCK_LABELS, sweep_table, ttft_summary, window_summary
from tests.conftest import markdown_text, open_page, seen


def _page(state: dict | None = None) -> AppTest:
    return open_page("pages/prefix_cache.py", state, timeout=240)


_markdown = markdown_text


def _charts(at: AppTest) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def _window(offset: int, count: int):
    return mooncake_workload(shipped_mooncake(), offset=offset, count=count, max_new_tokens=2048)


def test_default_page_quotes_its_own_replay():
    at = _page()
    wl = _window(0, 1000)
    sweep = pool_sweep(wl, 16)
    stat, raw = trace_hit_statistic(wl), trace_hit_statistic(wl, engine_rules=False)
    text = _markdown(at)
    assert window_summary(sweep, stat, raw, 0, 1000) in text
    assert "Requests 1–1,000 of the trace" in text and "**21.5 %**" in text        # the trace's own count
    # the table is the sweep, row for row
    table = at.dataframe[0].value
    assert table.equals(sweep_table(sweep))
    assert table["prefill saved (tokens)"].tolist() == [r["prefill_tokens_saved"] for r in sweep.rows]
    # the time-to-first-token sentence is the comparison's, on the default GPU and model
    cost = best_cost_model("h200", "llama3-8b", 4)       # the page's: the roofline, saying why (no profile)
    pool = cost.pool_slots() // 16
    cmp = ttft_comparison(wl, 16, pool, cost)
    assert ttft_summary(cmp, seconds_source(cost), pool, 16) in text
    assert "not measurements" in text
    # three charts, every axis titled, every trace with hover text
    charts = _charts(at)
    assert len(charts) == 3
    for spec in charts:
        layout = spec["layout"]
        if not layout["title"]["text"].startswith("The pool at step"):   # the pool map: cells, no axes
            assert layout["xaxis"]["title"]["text"] and layout["yaxis"]["title"]["text"], layout["title"]
        for trace in spec["data"]:
            assert trace.get("hovertemplate") or trace.get("hoverinfo") == "skip" or trace["x"] == [None]
    hit, _, ttft = charts
    assert hit["layout"]["xaxis"]["title"]["text"].startswith("pool size (slots")
    assert ttft["layout"]["xaxis"]["title"]["text"] == "time to first token (s, datasheet roofline)"
    # 16-slot blocks (one-pass curve: solid where exact, dotted where the model's), with the trace's own
    # 512-slot blocks beside them
    names = [t["name"] for t in hit["data"]]
    assert "16-slot blocks" in names and "512-slot blocks (the trace's size)" in names
    assert f"16-slot blocks: the LRU model's, below {sweep.peak_in_use:,} blocks" in names
    solid = next(t for t in hit["data"] if t["name"] == "16-slot blocks")
    assert min(solid["x"]) >= sweep.peak_in_use * 16
    captions = "\n".join(c.value for c in at.caption)
    assert "**one** replay" in captions and f"({sweep.peak_in_use:,} blocks here)" in captions
    from allocator.studies.prefix_cache import MODEL_TOLERANCE_PP       # the tolerance tests/core/test_prefix_trace.py checks
    assert f"within {MODEL_TOLERANCE_PP:g} percentage points of the model's" in captions
    dashed = next(t for t in hit["data"] if t["name"].startswith("the trace's own count"))
    assert dashed["y"][0] == pytest.approx(100 * stat["token_hit_rate"])
    # attribution and licence
    captions = "\n".join(c.value for c in at.caption)
    assert "Mooncake" in captions and "Apache License 2.0" in captions and "mooncake_LICENSE-APACHE.txt" in captions


def test_block_map_legend_counts_the_blocks_of_the_step_it_draws():
    at = _page({"pc_count": 60, "pc_block": 512, "pc_offset": 3000})
    wl = _window(3000, 60)
    sweep = pool_sweep(wl, 512)
    chosen = next(r["pool_blocks"] for r in sweep.rows if r["fraction"] >= 0.25)
    res = run(wl, 512, chosen, record_snapshots=True)
    step = int(at.select_slider(key=f"pc_step_3000_60_512_{chosen}").value)
    state, _, _ = block_picture(res.snapshots[step], chosen)
    spec = _charts(at)[1]
    assert spec["layout"]["title"]["text"].startswith(f"The pool at step {step}: {chosen:,} blocks of 512 slots")
    legend = {t["name"] for t in spec["data"] if t.get("x") == [None]}
    for k in (MAP_BLOCK_FREE, MAP_BLOCK_CACHED, MAP_BLOCK_PRIVATE, MAP_BLOCK_SHARED):
        assert f"{BLOCK_LABELS[k]} ({int((state == k).sum()):,})" in legend
    # a 512-slot window has no dotted comparison line: it is the trace's own block size
    names = [t["name"] for t in _charts(at)[0]["data"]]
    assert names.count("512-slot blocks") == 1 and not any("trace's size" in n for n in names)


def test_moving_the_step_slider_redraws_the_map_at_that_step():
    at = _page({"pc_count": 60, "pc_block": 512, "pc_offset": 3000})
    slider = at.get("select_slider")[-1]
    steps = slider.options
    target = steps[len(steps) // 3]
    slider.set_value(int(target) if str(target).isdigit() else target).run()
    assert not at.exception
    assert _charts(at)[1]["layout"]["title"]["text"].startswith(f"The pool at step {target}:")


def test_a_window_past_the_end_of_the_trace_is_cut_and_says_so():
    n = len(shipped_mooncake())
    at = _page({"pc_offset": n - 20, "pc_count": 1000, "pc_block": 512})
    text = _markdown(at)
    assert f"Requests {n - 19:,}–{n:,} of the trace (only 20 requests remain from this offset" in text
    assert not at.error
    # one request: no pool comparison with itself, no "slowest tenth" of one
    at = _page({"pc_offset": n - 1, "pc_count": 10, "pc_block": 512})
    text = _markdown(at)
    assert "only 1 request remains" in text and "pool size cannot change anything here" in text
    assert "too few requests for a slowest tenth" in text and "slowest tenth " not in text.replace(
        "for a slowest tenth", "")


def test_a_model_that_does_not_fit_is_reported_beside_the_gpu_controls():
    at = _page({"pc_count": 30, "pc_block": 512, "pc_offset": 3000, "pc_model": "llama3-70b", "pc_gpus": 1})
    assert len(at.error) == 1
    message = seen(at.error[0].value)              # plain text (pages._ui.errors)
    assert message.startswith("Llama 3 70B bf16, GQA does not fit 1 × NVIDIA H200") and "gpus =" not in message
    # everything above the time section still renders
    assert len(_charts(at)) == 2 and "Requests 3,001–3,030 of the trace" in _markdown(at)


def test_the_cached_colour_is_told_apart_in_the_legend_and_the_caption():
    at = _page({"pc_count": 60, "pc_block": 512, "pc_offset": 3000})
    captions = "\n".join(c.value for c in at.caption)
    assert "Purple blocks belong to no running request" in captions
    spec = _charts(at)[1]
    colours = [t["marker"]["color"] for t in spec["data"] if t.get("x") == [None]]
    assert len(set(colours)) == 4


def test_waits_read_in_minutes_and_hours_when_long():
    from allocator.viz.prefix import duration

    assert [duration(x) for x in (0.5713, 1.9, 119.0, 600.0, 8478.78)] == ["571 ms", "1.90 s", "119 s", "10 min",
                                                                            "2.4 h"]


def test_a_grouped_cell_is_pink_when_any_of_its_blocks_is_shared():
    from allocator.viz.prefix import MAX_MAP_CELLS, block_map_figure

    n = MAX_MAP_CELLS * 3                           # three blocks per cell
    snap = ((1, 32, (0, 1, 2)), (2, 32, (2, 4)), (0, 0, (6, 7, 8)))
    fig = block_map_figure(snap, n, 5, 16)
    flat = [v for row in fig.data[0].z for v in row]
    # cell 0 holds blocks 0-2: two private, one shared -> shared; cell 1 (3-5): one private of three
    # -> free (most of them); cell 2 (6-8): all cached
    assert flat[:3] == [MAP_BLOCK_SHARED, MAP_BLOCK_FREE, MAP_BLOCK_CACHED]
    text = [v for row in fig.data[0].text for v in row]
    assert text[0].startswith("blocks 0–2: 0 free, 0 cached, 2 private, 1 shared")
    assert "pink if any is shared" in fig.layout.title.text


def test_a_new_block_size_keeps_the_pool_chosen_as_a_fraction():
    """The pool slider offers the same fractions of the distinct prompt blocks at every block size;
    a student's choice is kept when the block size changes (a new user saw it jump back to 0.25x)."""
    def pool_slider():
        return next(s for s in at.get("select_slider") if s.label == "Pool for the map below")

    def fraction(label):                  # "124,928 slots = 244 blocks (0.19× the distinct prompt blocks)"
        return label.split("(")[1].split("×")[0]

    at = _page({"pc_count": 60, "pc_block": 512, "pc_offset": 3000})
    largest = pool_slider().options[-1]
    pool_slider().set_value(int(largest.split("= ")[1].split()[0].replace(",", ""))).run()
    assert not at.exception and pool_slider().format_func(pool_slider().value) == largest
    at.select_slider(key="pc_block").set_value(256).run()
    assert not at.exception
    now = pool_slider()
    assert now.format_func(now.value) == now.options[-1] and fraction(now.options[-1]) == fraction(largest)


def test_the_pool_slider_counts_slots_like_the_charts_axis():
    """The slider counted blocks while the hit-rate chart's axis counts slots (issue 40): its labels now
    lead with slots, the axis's unit, and give the blocks of the map below after an equals sign."""
    at = _page({"pc_count": 60, "pc_block": 512, "pc_offset": 3000})
    slider = next(s for s in at.get("select_slider") if s.label == "Pool for the map below")
    for label in slider.options:
        slots, blocks = label.split(" slots = ")
        assert int(slots.replace(",", "")) == 512 * int(blocks.split()[0].replace(",", "")), label
    spec = next(json.loads(c.proto.spec) for c in at.get("plotly_chart") if c.key == "pc_hits")
    assert spec["layout"]["xaxis"]["title"]["text"].startswith("pool size (slots")
