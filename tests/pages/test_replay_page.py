"""AppTest of the "Checked against a real engine" page: it shows the replay the core computes, and
every number its sentences quote comes from that replay (allocator.viz.replay)."""
import json

import pytest

from allocator.cost.calibration import CALIBRATED, Efficiency
from allocator.studies.vllm_replay import held_out_check, replay
from allocator.viz.replay import error_table, headline, held_out_sentence, right_and_wrong, signed_pct
from allocator.workloads.vllm_run import SHIPPED_RUN, load_run
from tests.conftest import markdown_text, open_page


@pytest.fixture(scope="module")
def shipped():
    """The shipped run and what the core computes from it, once for the module (each replay takes
    about a second; the tests only read them): {"run", "calibrated", "datasheet", "held_out"}."""
    run = load_run(SHIPPED_RUN)
    return {"run": run, "calibrated": replay(run, efficiency=CALIBRATED),
            "datasheet": replay(run, efficiency=Efficiency(1.0, 1.0, 0.002)), "held_out": held_out_check(run)}


def test_page_shows_the_replay_its_table_and_its_sentences(shipped):
    at = open_page("pages/real_engine.py")
    rep = shipped["calibrated"]
    text = markdown_text(at)
    assert headline(rep) in text
    assert "+5.9 %" in headline(rep) and "7.10 s" in headline(rep)        # the README's figures
    for sentence in right_and_wrong(rep):
        assert sentence in text
    assert held_out_sentence(shipped["held_out"]) in text
    assert "not measured here" in text
    table = at.table[0].value
    expect = error_table(rep).set_index(["figure", "statistic"])
    assert table["error"].tolist() == expect["error"].tolist()
    assert table["error"].tolist()[0] == signed_pct(rep.error_pct("ttft"))
    charts = at.get("plotly_chart")
    assert len(charts) == 4
    for chart in charts:
        spec = json.loads(chart.proto.spec)
        assert spec["layout"]["xaxis"]["title"]["text"] and spec["layout"]["yaxis"]["title"]["text"]
        assert all(t.get("hovertemplate") for t in spec["data"] if t.get("hoverinfo") != "skip")
    assert "at most 128 running" in "\n".join(c.value for c in at.caption)


def test_datasheet_step_model_is_shown_as_too_fast(shipped):
    at = open_page("pages/real_engine.py", {"re_model": "datasheet"})
    rep = shipped["datasheet"]
    text = markdown_text(at)
    assert headline(rep) in text
    assert rep.error_pct("ttft") < -30 and signed_pct(rep.error_pct("ttft")) in text
    # the "where the model is right" sentences describe this model, not the fitted one (a new user
    # found "three fitted efficiencies" under the uncalibrated choice)
    assert "This step model is not fitted" in text and "three fitted efficiencies" not in text
    # the calibration section still lists the fitted parameters, not the datasheet's 1 and 1
    params = at.table[1].value["value"].tolist()
    assert params == [f"{CALIBRATED.eta_flops:g}", f"{CALIBRATED.eta_bw:g}", f"{1e3 * CALIBRATED.overhead_s:g} ms"]


def test_about_and_readme_quote_the_replay(shipped):
    import os

    from pages.about import CALIBRATION_SOURCE
    from tests.conftest import ROOT

    rep = shipped["calibrated"]                              # the roofline fitted on the run (--calibration run)
    e, t = rep.cost.efficiency, rep.table
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as fh:
        readme = " ".join(fh.read().split())                 # line breaks as spaces
    for k in ("ttft", "tpot", "latency"):
        assert f"**{signed_pct(rep.error_pct(k))}**" in readme
        assert f"by {signed_pct(rep.error_pct(k))}" in CALIBRATION_SOURCE
    for needle in (f"{e.eta_flops:g} of the datasheet", f"{e.eta_bw:g} of its memory", f"{1e3 * e.overhead_s:g} ms per step"):
        assert needle in CALIBRATION_SOURCE
    for needle in (f"**eta_flops = {e.eta_flops:g}**", f"**eta_bw = {e.eta_bw:g}**",
                   f"**overhead = {1e3 * e.overhead_s:g} ms per step**",
                   f"mean TTFT {t['ttft']['mean']['simulated']:.2f} s against {t['ttft']['mean']['measured']:.2f} s",
                   f"mean TPOT {1e3 * t['tpot']['mean']['simulated']:.1f} ms against "
                   f"{1e3 * t['tpot']['mean']['measured']:.1f} ms",
                   f"latency {t['latency']['mean']['simulated']:.1f} s against {t['latency']['mean']['measured']:.1f} s",
                   f"p90 TTFT is the worst figure ({signed_pct(rep.error_pct('ttft', 'p90'))})"):
        assert needle in readme, needle
    peak = shipped["datasheet"]
    assert f"datasheet peaks (the page's contrast) is off by -{abs(round(peak.error_pct('ttft'))):.0f} % on TTFT" in readme
    h = shipped["held_out"]
    assert (f"by {signed_pct(h['ttft_error_pct'])} (TTFT), {signed_pct(h['tpot_error_pct'])} (TPOT) and "
            f"{signed_pct(h['latency_error_pct'])} (latency)") in readme
    # the measured-operator model (issue 37): README and About quote its errors on the shipped run
    prof = replay(shipped["run"], cost_model="profile")
    errs = [signed_pct(prof.error_pct(k)) for k in ("ttft", "tpot", "latency")]
    assert (f"the profile model's means are **{errs[0]}** (TTFT), **{errs[1]}** (TPOT) and **{errs[2]}** "
            "(latency)") in readme
    assert f"the same means are off by {errs[0]}, {errs[1]} and {errs[2]}" in " ".join(CALIBRATION_SOURCE.split())
    # the roofline calibrated on microbenchmarks (the command's roofline where a profile exists)
    micro = replay(shipped["run"])
    me = micro.cost.efficiency
    assert micro.efficiency_source.startswith("operator microbenchmarks")
    merrs = [signed_pct(micro.error_pct(k)) for k in ("ttft", "tpot", "latency")]
    about = " ".join(CALIBRATION_SOURCE.split())
    assert (f"({me.eta_flops:g} of the FLOP/s, {me.eta_bw:g} of the bandwidth, {1e3 * me.overhead_s:g} ms per step: "
            f"the command's roofline where a profile exists) is off by {merrs[0]}, {merrs[1]} and {merrs[2]}") in about
    assert (f"(RTX PRO 6000: **eta_flops {me.eta_flops:g}**, **eta_bw {me.eta_bw:g}**, **{1e3 * me.overhead_s:g} ms "
            f"per step**) this roofline's means are off by **{merrs[0]}** (TTFT), **{merrs[1]}** (TPOT) and "
            f"**{merrs[2]}** (latency)") in readme
    assert (f"raising its overhead to {1e3 * e.overhead_s:g} ms and lowering eta_flops to {e.eta_flops:g}") in readme


@pytest.mark.parametrize("damage", ["missing", "damaged"])
def test_a_missing_or_damaged_run_is_named_without_the_servers_path(tmp_path, monkeypatch, damage):
    """Issue 42: the page quoted the server's absolute path when the run was missing."""
    import shutil

    import streamlit as st

    import allocator.workloads.vllm_run as vllm_run
    from tests.conftest import ROOT, seen
    run = tmp_path / "rtxpro6000_llama-3.1-8b"
    if damage == "damaged":
        shutil.copytree(SHIPPED_RUN, run)
        (run / "meta.json").write_text('{"model": ', encoding="utf-8")
    monkeypatch.setattr(vllm_run, "SHIPPED_RUN", str(run))
    st.cache_resource.clear()
    try:
        at = open_page("pages/real_engine.py")
    finally:
        st.cache_resource.clear()
    assert not at.exception, [e.value for e in at.exception]
    errors = [seen(e.value) for e in at.error]
    assert len(errors) == 1, errors
    name = "assets/rtxpro6000_llama-3.1-8b"
    assert f"the shipped data file {name} (the measured vLLM run) is {damage}" in errors[0], errors
    assert f"git checkout -- {name}" in errors[0]
    assert str(tmp_path) not in errors[0] and ROOT not in errors[0] and "Traceback" not in errors[0]


def test_the_command_the_page_shows_reproduces_its_headline(shipped, capsys):
    """A new user ran the page's "reproduce" command and got the operator profile's numbers (the CLI's
    default where a profile exists) under the roofline's headline; the command names its cost model."""
    import shlex

    from allocator.__main__ import main
    from pages.real_engine import COMMAND
    argv = shlex.split(COMMAND)[3:]
    assert argv[0] == "replay-vllm" and "--cost-model" in argv
    assert main(argv) == 0
    out = capsys.readouterr().out
    t = shipped["calibrated"].table
    assert f"{t['ttft']['mean']['simulated']:.4g}" in out and "simulated (roofline)" in out


def test_an_uploaded_run_zip_shows_the_same_table_and_a_damaged_one_a_line(shipped):
    """Issue 37: the page replays another run folder uploaded as a zip; damage is one plain line."""
    import io
    import os
    import zipfile

    from allocator.studies.vllm_replay import compare_cost_models
    from allocator.viz.replay import cost_model_table
    from pages.real_engine import COMMAND
    from tests.conftest import seen

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for f in ("meta.json", "requests.jsonl", "timeseries.csv"):
            z.write(os.path.join(SHIPPED_RUN, f), f"rtxpro6000_llama-3.1-8b/{f}")
    at = open_page("pages/real_engine.py")
    tables = len(at.table)
    up = at.get("file_uploader")
    assert len(up) == 1 and up[0].allowed_type == [".zip"]
    up[0].set_value(("my run.zip", buf.getvalue(), "application/zip"))
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert len(at.table) == tables + 1
    expect = cost_model_table(compare_cost_models(shipped["run"])).set_index(["figure", "statistic"])
    got = at.table[-1].value
    assert got.columns.tolist() == expect.columns.tolist() and got.values.tolist() == expect.values.tolist()
    assert any("my run.zip: 300 requests" in seen(c.value) for c in at.caption)
    # each reproduce command sits with the table it reproduces: the shipped run's under the first table,
    # the upload's (both columns, the zip named by a placeholder) last, after the upload's table; both wrap
    codes = [c.value for c in at.code]
    assert codes[0] == COMMAND and codes[-1] == ("python -m allocator replay-vllm YOUR_RUN.zip\n"
                                                 "python -m allocator replay-vllm YOUR_RUN.zip --cost-model roofline")
    assert all(c.proto.wrap_lines for c in at.code)
    assert any("Reproduce this table on the command line, with my run.zip saved as YOUR_RUN.zip: the first "
               "prints the operator-profile column" in seen(m.value) for m in at.markdown)
    # a damaged zip: one line naming the upload and what is wrong, as plain text
    at.get("file_uploader")[0].set_value(("bad [x](http://e).zip", b"not a zip", "application/zip"))
    at.run()
    assert not at.exception
    errors = [seen(e.value) for e in at.error]
    assert len(errors) == 1 and "\n" not in errors[0]
    assert "bad [x](http://e).zip cannot be replayed" in errors[0] and "not a zip archive" in errors[0]
    assert "](http" not in at.error[0].value                        # the name is not a link
    # nothing of the earlier upload stays on screen as if it applied: no table, no command
    assert len(at.table) == tables and [c.value for c in at.code] == [COMMAND]
    assert not any("Reproduce this table on the command line, with" in seen(m.value) for m in at.markdown)


def test_the_upload_commands_name_the_columns_they_print(shipped, capsys):
    """The upload's first command (no --cost-model) prints the operator profile's numbers where a profile
    exists, the second the roofline's: run on the shipped folder in the placeholder's place, each prints
    its column of the cost-model table; without a profile only the roofline's command is offered."""
    import shlex

    from allocator.__main__ import main
    from allocator.studies.vllm_replay import compare_cost_models
    from allocator.viz.replay import UPLOAD_PLACEHOLDER, upload_commands

    reps = compare_cost_models(shipped["run"])
    cmds = upload_commands(reps)["commands"]
    assert len(cmds) == 2
    for cmd, name in zip(cmds, ("profile", "roofline")):
        argv = [SHIPPED_RUN if a == UPLOAD_PLACEHOLDER else a for a in shlex.split(cmd)[3:]]
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert f"simulated ({name})" in out
        assert f"{reps[name].table['ttft']['mean']['simulated']:.4g}" in out
    alone = upload_commands({"roofline": reps["roofline"], "profile": "no operator profile of this GPU"})
    assert alone["commands"] == [cmds[0]] and "roofline column" in alone["say"]


def test_an_uploaded_zip_that_names_no_gpu_is_told_how_to_name_it_not_to_give_a_flag():
    """Fresh hunt (issue 42, F4): a zip whose folder and meta.json name no GPU was told to 'give --gpu',
    a command-line option the page has no control for. The page says how the zip names its GPU."""
    import io
    import json
    import os
    import zipfile

    from tests.conftest import seen

    meta = json.loads(open(os.path.join(SHIPPED_RUN, "meta.json"), encoding="utf-8").read())
    meta.pop("hardware", None)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("mseq/meta.json", json.dumps(meta))
        z.write(os.path.join(SHIPPED_RUN, "requests.jsonl"), "mseq/requests.jsonl")
    at = open_page("pages/real_engine.py")
    at.get("file_uploader")[0].set_value(("mseq.zip", buf.getvalue(), "application/zip"))
    at.run()
    assert not at.exception
    errors = [seen(e.value) for e in at.error]
    assert len(errors) == 1 and "--gpu" not in errors[0], errors
    assert errors[0].startswith("mseq.zip cannot be replayed: GPU: the run does not name its GPU; name the folder "
                                "inside the zip after its GPU (as in h200_llama-3.1-8b) or set hardware.gpu in "
                                "meta.json to one of a100-40gb"), errors


def test_an_uploaded_run_with_impossible_settings_or_cells_is_told_what_to_fix_in_the_folder():
    """Issue 42 (F7, F10): a damaged timeseries.csv cell is named by file line, an impossible engine setting
    is refused in words about the run folder (no command-line flag), and a batch setting left to vLLM's
    default is replayed with a note saying which default was taken."""
    import io
    import os
    import zipfile

    from tests.conftest import seen

    def zipped(engine=None, timeseries=None):
        meta = json.loads(open(os.path.join(SHIPPED_RUN, "meta.json"), encoding="utf-8").read())
        meta["engine_kwargs"].update(engine or {})
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("rtxpro6000_run/meta.json", json.dumps(meta))
            z.write(os.path.join(SHIPPED_RUN, "requests.jsonl"), "rtxpro6000_run/requests.jsonl")
            if timeseries is not None:
                z.writestr("rtxpro6000_run/timeseries.csv", timeseries)
        return buf.getvalue()

    at = open_page("pages/real_engine.py")
    ts = open(os.path.join(SHIPPED_RUN, "timeseries.csv"), encoding="utf-8").read().split("\n")
    ts[4] = "nan" + ts[4][ts[4].index(","):]
    for data, want in (
            (zipped({"tensor_parallel_size": 3}),
             "run.zip cannot be replayed: meta.json: engine_kwargs.tensor_parallel_size = 3 is not a tensor-parallel "
             "size the lab can price for Llama 3.1 8B bf16: vLLM itself refuses it, as its 32 attention heads do not "
             "split evenly over 3 GPUs; set it to the size the run used, one of 1, 2, 4, 8."),
            (zipped({"kv_cache_dtype": "fp4"}), "run.zip cannot be replayed: meta.json: engine_kwargs.kv_cache_dtype = "
                                                "\"fp4\" is not a KV-cache dtype vLLM knows"),
            (zipped(timeseries="\n".join(ts)), "run.zip cannot be replayed: timeseries.csv line 5: t = nan is not a "
                                               "number: give a number from 0 to 1,000,000 (seconds from the run's start)")):
        at.get("file_uploader")[0].set_value(("run.zip", data, "application/zip"))
        at.run()
        assert not at.exception
        errors = [seen(e.value) for e in at.error]
        assert len(errors) == 1 and errors[0].startswith(want) and "--" not in errors[0], errors
    at.get("file_uploader")[0].set_value(("run.zip", zipped({"max_num_batched_tokens": None}), "application/zip"))
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any(seen(c.value) == "Note: meta.json's engine_kwargs.max_num_batched_tokens is not set, so the replay "
               "takes vLLM's default of 2,048 (vllm serve on a GPU under 70 GiB; vLLM picks 8,192 or 16,384 on a "
               "larger GPU or for the offline LLM class): set it in meta.json to the value the run used to replay it "
               "as it ran." for c in at.caption), [seen(c.value) for c in at.caption]
