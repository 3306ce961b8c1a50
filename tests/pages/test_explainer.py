"""Memory-map frames, the animated figure, and the explainer page (AppTest)."""
import base64
import json
from types import SimpleNamespace

import math

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from allocator.viz.maps import EMPTY, FREE, TOKEN
from allocator.viz.maps import cell_states, frame_steps, grid_shape, slot_states, slots_per_cell
from allocator.engine.scenario import Scenario, run_scenario
from allocator.viz.explainer_chart import explainer_figure, explainer_lines_figure, time_frames
from allocator.viz.frozen import figure_json_bytes
from allocator.viz.sweep_chart import sweep_figure
from allocator.cost.roofline import cost_model
from allocator.cost.timing import price
from allocator.viz.claims.explainer import lesson_key_steps, reveal
from allocator.common.formats import pct, seconds
from tests.conftest import APP_PATH, metric


def decode(spec):
    """A plotly typed-array spec (dtype, bdata, shape) back to numpy."""
    arr = np.frombuffer(base64.b64decode(spec["bdata"]), dtype=np.dtype(spec["dtype"]))
    return arr.reshape([int(n) for n in spec["shape"].split(",")]) if "shape" in spec else arr


def test_frame_steps_and_cells():
    dense = SimpleNamespace(metrics={"step": np.arange(10), "span": np.ones(10, int)}, snapshot_stride=1)
    assert frame_steps([dense], 4).tolist() == [0, 3, 6, 9]
    assert frame_steps([dense], 100).tolist() == list(range(10))
    # frames are spread over records, not over steps: a long idle gap costs one frame
    gappy = SimpleNamespace(metrics={"step": np.array([0, 1, 2, 5, 1_000_000, 1_000_001]),
                                     "span": np.array([1, 1, 3, 999_995, 1, 1])}, snapshot_stride=1)
    assert frame_steps([gappy], 6).tolist() == [0, 1, 2, 5, 1_000_000, 1_000_001]
    assert frame_steps([dense, gappy], 100).tolist() == list(range(10)) + [1_000_000, 1_000_001]
    # only steps every result has a picture of (multiples of the largest snapshot stride)
    thinned = SimpleNamespace(metrics={"step": np.arange(10), "span": np.ones(10, int)}, snapshot_stride=4)
    assert frame_steps([dense, thinned], 100).tolist() == [0, 4, 8]
    # an idle gap is a frame even when evenly spaced picks would step over it
    long = SimpleNamespace(metrics={"step": np.array(list(range(100)) + [1_000_000]),
                                    "span": np.array([1] * 99 + [999_901, 1])}, snapshot_stride=1)
    assert 99 in frame_steps([long], 10).tolist() and len(frame_steps([long], 10)) <= 11
    assert slots_per_cell(2048) == 1 and slots_per_cell(8192) == 4 and slots_per_cell(2049) == 2
    assert grid_shape(2048) == (32, 64)


def test_cells_group_slots_by_majority():
    res = run_scenario(Scenario(workload="azure-conv"))["paged"]
    owner, state = slot_states(res, 50)
    c_owner, c_state = cell_states(res, 50, 4)
    assert len(c_state) == 2048
    for i in (0, 100, 700, 2047):
        block = state[4 * i: 4 * i + 4]
        values, counts = np.unique(block, return_counts=True)
        assert counts.max() == (block == c_state[i]).sum()
        if c_state[i] in (TOKEN, EMPTY):
            assert c_owner[i] in owner[4 * i: 4 * i + 4]
        else:
            assert c_owner[i] == -1
    # after the run drains, the map is empty
    c_owner, c_state = cell_states(res, res.steps + 5, 4)
    assert (c_state == FREE).all() and (c_owner == -1).all()


@pytest.mark.parametrize("sc", [Scenario(), Scenario(workload="azure-conv"), Scenario(total_slots=3000, block_size=24)])
def test_figure_fits_its_payload_and_animates(sc):
    results = run_scenario(sc)
    fig = explainer_figure(results)
    size = figure_json_bytes(fig)
    assert size <= 3_000_000
    assert len(fig.frames) >= 30
    steps = [int(f.name) for f in fig.frames]
    assert steps[0] == 0 and steps[-1] == max(r.steps for r in results.values()) - 1
    # per-frame readouts name the figures the core computed for that step
    rm = results["reserve_max"]
    mid = fig.frames[len(fig.frames) // 3]
    step = int(mid.name)
    text = mid.layout.annotations[0].text
    if step < rm.steps:
        assert f"{int(rm.value_at('running', step))} computed a token ·" in text
        assert f"{pct(float(rm.value_at('utilization', step)))} of slots hold a token" in text
    # the animated figure holds the maps only (each frame of Play redraws the whole figure): two
    # heatmaps and the colour legend's marker-only entries, no line and no axis beyond the maps'
    spec = json.loads(fig.to_json())
    assert [t["type"] for t in spec["data"][:2]] == ["heatmap", "heatmap"]
    assert all(t["type"] == "scatter" and t["mode"] == "markers" and t["x"] == [None] for t in spec["data"][2:])
    assert not any(k.startswith(("xaxis3", "yaxis3")) for k in spec["layout"])
    assert all("shapes" not in f["layout"] for f in spec["frames"])
    # the lines under the maps: each record's value from its first step, to the end of the run
    lines = json.loads(explainer_lines_figure(results).to_json())
    assert lines["layout"]["xaxis"]["title"]["text"] == "engine step"
    assert lines["layout"]["yaxis"]["title"]["text"] == "slots holding a token (%)"
    assert lines["layout"]["yaxis2"]["title"]["text"] == "sequences running"
    util = next(t for t in lines["data"] if t["name"] == f"{rm.label}: utilisation")
    running = next(t for t in lines["data"] if t["name"] == f"{rm.label}: running")
    assert list(decode(util["x"])) == list(rm.metrics["step"]) + [rm.steps]
    assert np.allclose(decode(util["y"])[:-1], rm.metrics["utilization"] * 100)
    assert list(decode(running["y"])[:-1]) == list(rm.metrics["running"])
    assert "frames" not in lines


def test_figure_cells_match_slot_states():
    results = run_scenario(Scenario())
    fig = explainer_figure(results)
    frame = fig.frames[5]
    step = int(frame.name)
    owner, state = slot_states(results["paged"], step)
    z = decode(frame.data[1].z).ravel()
    held_by = decode(frame.data[1].customdata).ravel()
    assert ((z == 0) == (state == FREE)).all()
    assert ((z == 2) == (state == EMPTY)).all()
    # hover names the owning request (0 = none): exactly the core's owner per slot
    assert (held_by == np.maximum(owner, 0)).all()
    assert (held_by[state == TOKEN] >= 1).all()


def _row(b, waited=True):
    busy = 0.9 if waited else None
    return {"block_size": b, "waited": waited, "mean_utilization_busy": busy, "mean_utilization": 0.5,
            "peak_running": 3, "steps": 9, "preemptions": 0, "cost_per_token_busy": busy and 1.0,
            "cost_per_token": 1.2, "mean_total_cost_busy": busy and 10.0, "mean_total_cost": 12.0}


def test_sweep_figure_marks_current_block_size():
    reserve = {"mean_utilization_busy": 0.3, "mean_utilization": 0.2, "mean_running_busy": 2.5, "finished": 40}
    fig = sweep_figure([_row(b) for b in (1, 16, 256)], 16, 0.5, reserve)
    current = [sh for sh in fig.layout.shapes if sh.x0 == sh.x1 == 16]
    label = [a for a in fig.layout.annotations if a.text == "slider: 16"]
    assert current and label and label[0].x == pytest.approx(math.log10(16))      # log axis: log10 units
    lo, hi = fig.layout.xaxis.range                       # the axis spans the sweep, not 10^16
    assert 10 ** lo < 1 and 256 < 10 ** hi < 512
    assert fig.layout.xaxis.title.text.startswith("block size")
    util, line = fig.data[0], fig.data[1]
    assert list(util.y) == [90.0] * 3 and list(line.y) == [30.0] * 2 and "while requests wait" in util.name


@pytest.mark.parametrize("costs", [[1.0, 1.0, 1.0], [1.0, 1.03, 1.2, 2.1], [2.63], [0.4, 0.5], [30.0, 41.0],
                                   [1.0, 1.0, 1.0, 1.01, 1.02, 1.05, 1.1, 1.25, 1.5]])
def test_sweep_chart_legend_and_cost_axis_read_cleanly(costs):
    """Issue 23 item 16: no two legend entries look alike, the cost axis ticks are round (not 0.33 /
    0.66 / 1.33), and the cost curve never sits on a gridline (the left axis draws one every fifth)."""
    rows = [dict(_row(2 ** i), cost_per_token_busy=c) for i, c in enumerate(costs)]
    reserve = {"mean_utilization_busy": 0.3, "mean_utilization": 0.2, "mean_running_busy": 2.5, "finished": 40}
    fig = sweep_figure(rows, 2, 0.5, reserve)
    looks = [(t.line.color, t.line.dash, t.mode) for t in fig.data if t.showlegend is not False]
    assert len(set(looks)) == len(looks) and len({t.name for t in fig.data}) == len(fig.data)
    y2 = fig.layout.yaxis2
    lo, top = y2.range
    assert lo == 0 and top >= 1.1 * max(costs) and y2.dtick == top / 5
    assert fig.layout.yaxis.range == (0, 100) and fig.layout.yaxis.dtick == 20
    ticks = [y2.dtick * k for k in range(6)]
    assert all(float(format(t, y2.tickformat)) == pytest.approx(t) for t in ticks)       # printed exactly
    assert all(round(y2.dtick / 10 ** math.floor(math.log10(y2.dtick)), 6) in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8)
               for _ in [0])                                                              # a round step
    assert top <= 3.3 * max(costs)                                # the curve keeps its height
    near = [c for c in costs if min(abs(c - t) for t in ticks) < 0.025 * top]
    assert len(near) <= len(costs) // 3, (near, ticks)            # it does not run along a gridline


def test_sweep_figure_never_mixes_two_kinds_of_average():
    """When some block size never made a request wait, every point and the reserve-max line are
    all-step means (helper report: 47 % over all steps next to a 29 % waiting-time reserve line)."""
    reserve = {"mean_utilization_busy": 0.3, "mean_utilization": 0.2, "mean_running_busy": 2.5, "finished": 40}
    fig = sweep_figure([_row(1, waited=False), _row(16), _row(256)], 16, 0.5, reserve)
    util, line = fig.data[0], fig.data[1]
    assert list(util.y) == [50.0] * 3 and list(line.y) == [20.0] * 2
    assert "over all steps" in util.name and "over all steps" in line.name


# --- the page -----------------------------------------------------------------------------------

@pytest.fixture
def app():
    at = AppTest.from_file(APP_PATH, default_timeout=60)
    at.run()
    assert not at.exception
    return at


def test_page_renders_the_core_figures(app):
    res = run_scenario(Scenario(), record_snapshots=False)
    rm, pg = res["reserve_max"].summary, res["paged"].summary
    assert metric(app, "Mean running") == [f"{rm['mean_running_busy']:.1f}",
                                                          f"{pg['mean_running_busy']:.1f}"]
    assert metric(app, "Mean utilisation")[1] == pct(pg["mean_utilization_busy"])
    assert metric(app, "Steps to drain")[0] == f"{rm['steps']:,}"
    # the peak is named as a peak, with how long the run held it (issue 40: reserve-max's peak is most
    # of the run, 2,005 of 3,642 steps, not "one instant"), and never as "the batch"
    lines = [c.value for c in app.caption if "Peak:" in c.value]
    assert (rm["peak_running_steps"], rm["steps"], pg["peak_running_steps"]) == (2005, 3642, 4)
    assert [line[:line.index(").") + 2] for line in lines] == [
        f"Means over the {rm['busy_steps']:,} steps when requests waited. Peak: {rm['peak_running']} "
        f"running at once, held for 2,005 of the run's 3,642 steps (first at step {rm['peak_running_step']:,}).",
        f"Means over the {pg['busy_steps']:,} steps when requests waited. Peak: {pg['peak_running']} "
        f"running at once, held for 4 of the run's {pg['steps']:,} steps (first at step {pg['peak_running_step']:,})."]
    # then the seconds on the default GPU and model (the paper's: OPT-13B on an A100 40GB)
    cost = cost_model("a100-40gb", "opt-13b")
    t = {k: price(r, cost).summary for k, r in res.items()}
    times = [m.value for m in app.markdown if "to drain" in m.value]
    assert [x.split(" to drain")[0] for x in times] == [f":material/timer: Modelled: **{seconds(t[k]['makespan_s'])}**"
                                                       for k in ("reserve_max", "paged")]
    assert f"**{t['paged']['throughput_tokens_per_s']:,.0f}** output tokens/s" in times[1]
    assert ("Seconds are modelled, not measured on this run (\"Checked against a real engine\" shows how far such "
            "figures are from a real run): OPT-13B fp16 on NVIDIA A100 40GB; seconds from the datasheet roofline (a "
            "model from datasheet peaks, not a measurement); the lab holds no operator profile of OPT-13B fp16; "
            "recomputing") in lines[1]
    assert [c.key for c in app.get("plotly_chart")] == ["maps", "maps_lines", "sweep"]


def test_recompute_and_swap_differ_in_seconds(app):
    """Acceptance: recompute and swap run the same steps, and the headline shows them apart in time."""
    def paged_time():
        return ([m.value for m in app.markdown if "to drain" in m.value][1]
                + [c.value for c in app.caption if "Peak:" in c.value][1])

    steps = metric(app, "Steps to drain")[1]
    recompute = paged_time()
    app.radio(key="preemption").set_value("swap").run()
    assert not app.exception
    assert metric(app, "Steps to drain")[1] == steps
    swap = paged_time()
    assert swap.split(" to drain")[0] != recompute.split(" to drain")[0]
    assert "swapping" in swap and "copies over the host link" in swap
    app.radio(key="preemption").set_value("recompute").run()


def test_seconds_axis_toggle(app):
    def specs():
        return {c.key: json.loads(c.proto.spec) for c in app.get("plotly_chart")}

    app.toggle(key="seconds_axis").set_value(True).run()
    assert not app.exception
    spec = specs()
    assert spec["maps_lines"]["layout"]["xaxis"]["title"]["text"].startswith("time (s)")
    assert spec["maps"]["layout"]["sliders"][0]["currentvalue"]["prefix"] == "time (datasheet roofline) "
    assert "(datasheet roofline)" in spec["maps_lines"]["layout"]["xaxis"]["title"]["text"]
    assert spec["maps"]["frames"][0]["name"] == "0.0000"
    app.selectbox(key="gpu").set_value("h200").run()
    assert "H200" in specs()["maps_lines"]["layout"]["xaxis"]["title"]["text"]
    # presenting, the projector's figures follow the clock too (they were cached per scenario only)
    app.session_state["present"] = True
    app.run()
    spec = specs()
    assert "H200" in spec["maps_lines"]["layout"]["xaxis"]["title"]["text"]
    assert spec["maps"]["frames"][0]["name"] == "0.0000"
    app.toggle(key="seconds_axis").set_value(False).run()
    spec = specs()
    assert spec["maps_lines"]["layout"]["xaxis"]["title"]["text"] == "engine step"
    assert spec["maps"]["frames"][0]["name"] == "0"
    app.session_state["present"] = False
    app.run()
    app.selectbox(key="gpu").set_value("a100-40gb").run()
    assert specs()["maps_lines"]["layout"]["xaxis"]["title"]["text"] == "engine step"


def test_block_size_slider_changes_the_paged_side(app):
    before = metric(app, "Mean utilisation")[1]
    app.select_slider(key="block_size").set_value(256).run()
    assert not app.exception
    res = run_scenario(Scenario(block_size=256), record_snapshots=False)["paged"].summary
    assert metric(app, "Mean utilisation")[1] == pct(res["mean_utilization_busy"]) != before
    assert metric(app, "Mean running")[1] == f"{res['mean_running_busy']:.1f}"


def test_trace_workload_on_the_page(app):
    app.selectbox(key="workload").set_value("azure-conv").run()
    app.session_state["workload_open"] = True       # open the workload panel (the data's citation)
    app.run()
    assert not app.exception
    res = run_scenario(Scenario(workload="azure-conv"), record_snapshots=False)
    assert metric(app, "Steps to drain")[1] == f"{res['paged'].summary['steps']:,}"
    assert any("Splitwise" in c.value for c in app.caption)


def test_sharegpt_workload_with_buddy_placement_on_the_page(app):
    """Issue 21: the paper's lengths and its buddy-placed Orca baseline on the explainer."""
    app.selectbox(key="workload").set_value("sharegpt-opt").run()
    app.radio(key="policy").set_value("oracle").run()
    app.radio(key="placement").set_value("buddy").run()
    app.session_state["workload_open"] = True       # open the workload panel (the data's citation)
    app.run()
    assert not app.exception
    res = run_scenario(Scenario(workload="sharegpt-opt", policy="oracle", placement="buddy"), record_snapshots=False)
    assert res["reserve_max"].label == "Reserve-oracle (buddy)"
    assert metric(app, "Steps to drain")[0] == f"{res['reserve_max'].summary['steps']:,}"
    text = "\n".join(m.value for m in app.markdown)
    assert "reserve-oracle (buddy)" in text and "rounded up to 16 × a power of two" in text
    assert any("Kwon" in c.value for c in app.caption)


def test_impossible_pool_keeps_the_page_alive(app):
    app.number_input(key="slots_classroom-40").set_value(64).run()
    assert not app.exception
    # 64 slots cannot hold any 600-token reservation: every request is rejected, with reasons
    assert any("can never fit" in w.value for w in app.warning)


def test_shared_prefix_and_swap_on_the_page(app):
    app.number_input(key="shared_prefix").set_value(256).run()
    app.radio(key="preemption").set_value("swap").run()
    assert not app.exception
    res = run_scenario(Scenario(shared_prefix=256, preemption="swap"), record_snapshots=False)["paged"].summary
    table = details(app)
    assert table["logical tokens, at their peak"] == f"{res['peak_logical_tokens']:,}"
    assert table["distinct tokens at that step"] == f"{res['used_slots_at_peak_logical']:,}"
    assert table["swapped blocks"] == f"{res['swapped_blocks']:,}"
    assert res["peak_logical_tokens"] > res["used_slots_at_peak_logical"] and res["swapped_blocks"] > 0


def details(at, column="paged"):
    """The explainer's details table (a plain st.table indexed by measure) as {measure: value in ``column``}."""
    df = next(t.value for t in at.table if t.value.index.name == "measure")
    return dict(zip(df.index, df[column]))


def test_details_table_reads_the_core(app):
    res = run_scenario(Scenario(), record_snapshots=False)
    for column, key in (("reserve-max", "reserve_max"), ("paged", "paged")):
        table = details(app, column)
        s = res[key].summary
        assert table["tokens per step"] == f"{s['mean_tokens_per_step']:.2f}"
        assert table["preemptions"] == f"{s['preemptions']:,}"
        assert table["cost per stored token (c = 0)"] == f"{res[key].cost_per_token(0):.3f}"
    # paging stores more tokens per slot paid for: its cost per stored token is lower
    assert res["paged"].cost_per_token(0) < res["reserve_max"].cost_per_token(0)


def test_guided_lesson_moves_the_controls_and_reveals_core_numbers(app):
    next(b for b in app.button if b.label == "Start the guided lesson").click().run()
    for _ in range(3):
        app.button(key="lesson_next").click().run()
    assert not app.exception
    assert app.select_slider(key="block_size").value == 256            # step 4 set the slider
    app.radio(key="lesson_guess_3").set_value("down").run()
    app.toggle(key="lesson_reveal_3").set_value(True).run()
    res = run_scenario(Scenario(block_size=256), record_snapshots=False)["paged"].summary
    at16 = run_scenario(Scenario(block_size=16), record_snapshots=False)["paged"].summary
    shown = " ".join(s.value for s in app.info)
    assert (f"**Down**, to {pct(res['mean_utilization_busy'])} from {pct(at16['mean_utilization_busy'])}" in shown
            and "The class predicted: *down*" in shown)
    app.button(key="lesson_next").click().run()                      # step 5: shared prompt
    assert app.number_input(key="shared_prefix").value == 256
    assert app.select_slider(key="block_size").value == 16


def test_a_question_hides_its_answer_until_revealed(app):
    """Step 1 asks how many run at once: the cards and the maps would say it, so they wait."""
    def charts():
        return sorted(c.key for c in app.get("plotly_chart"))

    next(b for b in app.button if b.label == "Start the guided lesson").click().run()
    assert not metric(app, "Mean running") and charts() == ["sweep"]
    assert sum("Hidden until the class has predicted" in i.value for i in app.info) == 2
    app.toggle(key="lesson_reveal_0").set_value(True).run()
    assert metric(app, "Mean running") and charts() == ["maps", "maps_lines", "sweep"]
    app.button(key="lesson_next").click().run()                      # step 2 shows the maps: watch them
    assert not metric(app, "Mean running") and charts() == ["maps", "maps_lines", "sweep"]
    app.button(key="lesson_next").click().run()                      # step 3: paged, predict first
    app.button(key="lesson_next").click().run()                      # step 4: block size 256
    # the maps' utilisation line would answer "up, same or down?" (issue 23 item 7): all three wait
    assert not metric(app, "Mean running") and charts() == []
    assert sum("Hidden until the class has predicted" in i.value for i in app.info) == 3
    app.toggle(key="lesson_reveal_3").set_value(True).run()
    assert charts() == ["maps", "maps_lines", "sweep"]
    assert "about half empty" in " ".join(s.value for s in app.info)


def test_ending_the_lesson_restores_the_lecturers_scenario():
    at = AppTest.from_file(APP_PATH, default_timeout=60)
    at.query_params["block_size"] = "64"
    at.query_params["seed"] = "3"
    at.run()
    next(b for b in at.button if b.label == "Start the guided lesson").click().run()
    assert at.select_slider(key="block_size").value == 16 and at.number_input(key="seed").value == 25
    for _ in range(4):
        at.button(key="lesson_next").click().run()
    assert at.number_input(key="shared_prefix").value == 256
    at.button(key="lesson_end").click().run()
    assert not at.exception
    assert at.select_slider(key="block_size").value == 64 and at.number_input(key="seed").value == 3
    assert at.number_input(key="shared_prefix").value == 0


def test_the_prefix_reveal_quotes_a_step_the_animation_shows():
    sc = Scenario(shared_prefix=256)
    results = run_scenario(sc)
    text = reveal("prefix", results, slots=sc.slots, max_new=sc.max_new)
    pg = results["paged"]
    # issue 23 item 8: it quoted step 1 (8,482) while the maps open on frame 0 (8,455): the numbers
    # must be the first frame's, the one the class sees when the maps appear
    fig = explainer_figure(results)
    first = int(fig.frames[0].name)
    assert (f"first frame (step {first:,}), {pg.value_at('logical_tokens', first):,} logical tokens are "
            f"{pg.value_at('used_slots', first):,} distinct") in text
    readout = fig.layout.annotations[1].text
    assert f"{pg.value_at('logical_tokens', first):,} logical tokens in {pg.value_at('used_slots', first):,}" in readout
    frames = [int(f.name) for f in fig.frames]
    for step in lesson_key_steps(results):
        assert step in frames


def test_url_query_parameters_set_the_scenario():
    at = AppTest.from_file(APP_PATH, default_timeout=60)
    at.query_params["block_size"] = "64"
    at.query_params["shared_prefix"] = "128"
    at.run()
    assert not at.exception
    assert at.select_slider(key="block_size").value == 64
    res = run_scenario(Scenario(block_size=64, shared_prefix=128), record_snapshots=False)
    assert metric(at, "Mean running") == [f"{res[k].summary['mean_running_busy']:.1f}"
                                                         for k in ("reserve_max", "paged")]


@pytest.mark.parametrize("policy", ["pow2", "oracle"])
def test_reservation_policy_changes_the_left_side(app, policy):
    """The paper's baselines on the explainer: the left side's run, name and table column follow the policy."""
    app.radio(key="policy").set_value(policy).run()
    assert not app.exception
    res = run_scenario(Scenario(policy=policy), record_snapshots=False)
    rm = res["reserve_max"]
    assert rm.label == f"Reserve-{policy}"
    assert metric(app, "Steps to drain")[0] == f"{rm.summary['steps']:,}"
    assert metric(app, "Mean running")[0] == f"{rm.summary['mean_running_busy']:.1f}"
    assert any(m.value == f"**Reserve-{policy} · contiguous**" for m in app.markdown)
    details = app.table[0].value
    assert f"reserve-{policy}" in details.columns and "reserve-max" not in details.columns
    text = "\n".join(m.value for m in app.markdown)
    assert f"**reserve-{policy}** on the left" in text


def test_the_lesson_sets_the_sidebar_without_streamlits_duplicate_value_warning(monkeypatch):
    """Walking the lesson (start, steps 1-5, end) never logs Streamlit's "created with a default
    value but also had its value set via the Session State API" warning: a widget the lesson (or
    the URL) has just set through ``st.session_state`` is drawn without ``value=``.

    Streamlit checks this only under a live server (``runtime.exists()``) and logs it once per
    process, so the test makes the check run under AppTest and re-arms it."""
    import logging
    from types import SimpleNamespace

    from streamlit.elements.lib import policies

    monkeypatch.setattr(policies, "runtime", SimpleNamespace(exists=lambda: True))
    monkeypatch.setattr(policies, "_shown_default_value_warning", False)
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    handler = Keep(level=logging.WARNING)
    policies._LOGGER.addHandler(handler)
    try:
        at = AppTest.from_file(APP_PATH, default_timeout=60)
        at.query_params["block_size"] = "64"
        at.run()
        next(b for b in at.button if b.label == "Start the guided lesson").click().run()
        assert at.select_slider(key="block_size").value == 16
        for _ in range(3):
            at.button(key="lesson_next").click().run()
        assert at.select_slider(key="block_size").value == 256                 # step 4
        at.button(key="lesson_next").click().run()                              # step 5
        assert at.number_input(key="shared_prefix").value == 256
        at.button(key="lesson_end").click().run()
        assert at.select_slider(key="block_size").value == 64
        assert not at.exception
    finally:
        policies._LOGGER.removeHandler(handler)
    assert not [m for m in seen if "Session State API" in m], seen


def test_seconds_readouts_name_the_moment_and_the_step_shown():
    """On the seconds clock each frame is a moment; each map's readout says that moment and the step
    its own run was in then (the caption promises both), or, once drained, the run's makespan."""
    results = run_scenario(Scenario())
    cost = cost_model("a100-40gb", "opt-13b")
    timed = {k: price(r, cost) for k, r in results.items()}
    fig = json.loads(explainer_figure(results, timings=timed, max_frames=12).to_json())
    shown_at = dict(time_frames(results, timed, 12, include_steps=lesson_key_steps(results)))
    running, drained = 0, 0
    for frame in fig["frames"]:
        moment = float(frame["name"])
        shown = next(v for m, v in shown_at.items() if f"{m:.4f}" == frame["name"])
        for (key, res), note in zip(results.items(), frame["layout"]["annotations"]):
            text = note["text"]
            if "drained after" in text:
                assert f"steps ({timed[key].makespan_s:,.2f} s)" in text
                drained += 1
            else:
                step = int(text.split(", end of step ")[1].split(":")[0].replace(",", ""))
                assert f" · {moment:,.2f} s, end of step {step:,}:" in text
                assert step == shown[key] < res.steps
                running += 1
    assert running and drained


def test_the_workload_panel_is_built_only_while_open():
    """Closed (the default), the panel is its label alone: no request table goes to the browser with
    the page. Opened, it holds the requests, one row each, and the scheduler's rules."""
    from allocator.engine.scenario import build_workload
    from allocator.viz.claims.explainer import scheduler_rules_text

    at = AppTest.from_file(APP_PATH, default_timeout=120)
    at.run()
    assert not at.exception, at.exception
    panel = next(e for e in at.expander if e.label.startswith("The workload"))
    assert not list(panel.children.values()) and not at.dataframe
    at.session_state["workload_open"] = True
    at.run()
    panel = next(e for e in at.expander if e.label.startswith("The workload"))
    requests = next(d.value for d in panel.dataframe)
    assert list(requests["request"]) == [f"r{r.id}" for r in build_workload(Scenario()).requests]
    assert scheduler_rules_text() in [c.value for c in panel.caption]
