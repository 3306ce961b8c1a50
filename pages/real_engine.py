"""Checked against a real engine: a measured vLLM run beside the lab's replay of it.

Renders only: the run is read by ``allocator.workloads.vllm_run``, replayed by ``allocator.studies.vllm_replay`` under
vLLM v1's rules with the step model of ``allocator.cost.calibration``; the figures, the error table
and every sentence come from ``allocator.viz.replay``.
"""
from __future__ import annotations

import os

import pandas as pd
import streamlit as st

from allocator.cost.calibration import CALIBRATED, Efficiency
from allocator.studies.vllm_replay import compare_cost_models, held_out_check, replay, replay_zip
from allocator.common.limits import MAX_UPLOAD_BYTES
from allocator.common.validate import one_line, plain_markdown
from allocator.common.errors import FieldError
from allocator.viz.replay import (cdf_figure, cost_model_sentence, cost_model_table, error_table, headline,
                                  held_out_sentence, right_and_wrong, scatter_figure, series_figure, signed_pct,
                                  upload_commands, UPLOAD_PLACEHOLDER)
from allocator.workloads.trace import load_shipped
from allocator.workloads.vllm_run import SHIPPED_RUN, load_run
from pages._ui.errors import show_error
from pages._ui.heavy import shared
from pages._ui.present import chart
from pages._ui.state import set_defaults

#: The step models offered: the calibration, and the datasheet's peaks with timing.py's assumed
#: 2 ms overhead (what the lab priced steps with before it was checked).
STEP_MODELS = {"calibrated": CALIBRATED, "datasheet": Efficiency(1.0, 1.0, 0.002)}
STEP_MODEL_NAMES = {"calibrated": "Calibrated on this run (3 fitted efficiencies)",
                    "datasheet": "Datasheet peaks, 2 ms overhead (uncalibrated)"}
#: Reproduces the page's first table and headline (the calibrated roofline) and the held-out line; without
#: --cost-model the command prints the operator profile, the default where a profile exists.
COMMAND = ("python -m allocator replay-vllm assets/vllm_runs/rtxpro6000_llama-3.1-8b --cost-model roofline "
           "--calibration run --held-out")
set_defaults({"re_model": "calibrated"})


def _read_shipped_run(path: str):
    if not os.path.isdir(path):
        raise FileNotFoundError(path)
    return load_run(path)


@st.cache_resource(show_spinner=False)
def _run():
    # missing or damaged, the run is named relative to the project with what to do, never by the server's path
    return load_shipped(SHIPPED_RUN, _read_shipped_run, "the measured vLLM run")


@st.cache_resource(show_spinner="Replaying 300 requests…")
def _replay(model: str):
    return replay(_run(), efficiency=STEP_MODELS[model])


@st.cache_resource(show_spinner="Replaying with both cost models…")
def _both():
    return compare_cost_models(_run())


@shared("Replaying the uploaded run", max_entries=4)
def _uploaded(digest: str, name: str, _data: bytes):
    # keyed by the zip's hash (the bytes themselves stay out of the key); parsed and replayed in the queue
    return replay_zip(_data, name)


@st.cache_resource(show_spinner="Calibrating on half the run and replaying…")
def _held_out():
    return held_out_check(_run())


st.title("Checked against a real engine")
st.markdown(
    "Every other page prices engine steps in seconds with a model. Is the model right? Here it meets a "
    "measurement: a real vLLM server was sent 300 chat requests (lengths from ShareGPT, about ten a second) "
    "and logged, for each one, when it was queued, when its first token came and when its last one did. The "
    "lab replays the same arrivals and lengths through its own engine, following vLLM v1's scheduling rules: "
    "a per-step **token budget** shared by the running decodes first and then by **prefill** chunks (a long "
    "prompt is prefilled over several steps), a cap on running sequences, **recompute** preemption and "
    "**prefix caching** of full blocks. Each step's time comes from the step model chosen below.")

try:
    rep = _replay(st.session_state["re_model"])
except FieldError as exc:
    show_error(exc, before="The shipped run cannot be replayed: ")
    st.stop()

st.radio("Step model", list(STEP_MODELS), key="re_model", format_func=STEP_MODEL_NAMES.get, horizontal=True,
         help="Calibrated: achieved fractions of the datasheet's FLOP/s and bandwidth plus a per-step overhead, "
              "fitted on this run's per-request time per output token. Datasheet peaks: the same formula with "
              "100 % of both and a 2 ms overhead assumed.")
st.caption(f"Rules in force: {rep.rules.describe()}; prefix caching {'on' if rep.prefix_caching else 'off'}; KV pool {rep.num_blocks:,} blocks of "
           f"{rep.block_size} tokens ({'stated by the run' if rep.pool_source == 'run' else 'derived as vLLM does: 0.9 × GPU memory − weights − activations'}).")

st.markdown(headline(rep))
st.subheader("The error, figure by figure")
st.table(error_table(rep).set_index(["figure", "statistic"]))
st.caption("Error = simulated ÷ measured − 1. p50 and p90: the median and the 90th percentile over the 300 requests.")
if st.session_state["re_model"] == "calibrated":
    st.markdown("Reproduce this table on the command line:")
else:
    st.markdown("The command line replays with the calibrated step model only (the datasheet contrast has no "
                "flag); pick it above to see this table as the command prints it:")
st.code(COMMAND, language="bash", wrap_lines=True)

c = st.columns(2)
with c[0]:
    chart(cdf_figure(rep, "ttft"), width="stretch", key="re_cdf_ttft")
with c[1]:
    chart(cdf_figure(rep, "latency"), width="stretch", key="re_cdf_latency")
c = st.columns(2)
with c[0]:
    chart(scatter_figure(rep, "latency"), width="stretch", key="re_scatter")
with c[1]:
    chart(series_figure(rep), width="stretch", key="re_series")

st.subheader("Where the model is right, and where it is not")
st.markdown("\n".join(f"- {s}" for s in right_and_wrong(rep)))

st.subheader("The calibration")
e = CALIBRATED                      # the calibration, whichever step model the replay above used
st.markdown(
    "The step model adds up what one engine step does: the weight matrices (limited by arithmetic or by "
    "reading the weights, whichever is slower), the attention arithmetic, reading and writing the KV cache, and "
    "a fixed overhead. Three named parameters turn datasheet peaks into what a real step achieves; they were "
    "fitted by least squares to each request's measured time per output token, using what the log says was "
    "running alongside it. Each is a fraction of a datasheet figure or a fixed time, so another GPU or model "
    "enters only through its published numbers; whether the fractions fitted here hold there is untested "
    "(below).")
st.table(pd.DataFrame([
    {"parameter": "eta_flops", "meaning": "achieved share of peak bf16 tensor FLOP/s", "value": f"{e.eta_flops:g}"},
    {"parameter": "eta_bw", "meaning": "achieved share of memory bandwidth", "value": f"{e.eta_bw:g}"},
    {"parameter": "overhead_s", "meaning": "fixed time per step", "value": f"{1e3 * e.overhead_s:g} ms"},
]).set_index("parameter"))
if st.session_state["re_model"] == "calibrated":
    st.markdown(held_out_sentence(_held_out()))
else:
    cal = _replay("calibrated")
    st.markdown(f"With the datasheet's peaks the lab is too fast: the mean time to first token is off by "
                f"{signed_pct(rep.error_pct('ttft'))} where the calibrated model is off by "
                f"{signed_pct(cal.error_pct('ttft'))}.")
st.markdown(
    "Only one measured run ships with the lab, so how far the calibration carries to a run it has not seen "
    "(another GPU, model or tensor parallelism) is **not measured here**; the held-out check above only splits "
    "this run in two.")
st.subheader("Two cost models, side by side")
_reps = _both()
st.markdown(cost_model_sentence(_reps, _replay("calibrated")))
st.table(cost_model_table(_reps).set_index(["figure", "statistic"]))
st.caption("Each column names the cost model that produced it. Roofline: the step model above with eta_flops and "
           "eta_bw measured on this GPU's weight GEMMs and decode attention (microbenchmarks, "
           "`python -m allocator replay-vllm assets/vllm_runs/rtxpro6000_llama-3.1-8b --roofline-table`) and the engine's 1 ms plus the element-wise "
           "operators' smallest measured time as its overhead. Operator "
           "profile: per-operator latencies measured with vLLM 0.19 on this GPU (casys-kaist/LLMServingSim "
           "profiler/perf, MIT licence, assets/llm_profiles/), summed over the model's layers, plus a 1 ms engine "
           "overhead assumed, not fitted. Reproduce both columns: `python -m allocator replay-vllm "
           "assets/vllm_runs/rtxpro6000_llama-3.1-8b --json`")

st.subheader("Another run")
st.markdown("Measured a run of your own? Zip its folder (meta.json and requests.jsonl, optionally timeseries.csv, "
            "in the format of assets/vllm_runs/) and upload it: the lab replays it with both cost models and shows "
            "the same table. The model, GPU and parallelism are read from its meta.json.")
_up = st.file_uploader("Run folder as a zip", type=["zip"], key="re_upload",
                       help=f"At most {MAX_UPLOAD_BYTES // 1_000_000} MB zipped and 10,000 requests; meta.json and requests.jsonl at the zip's root "
                            "or in one folder. The command line does the same: python -m allocator replay-vllm RUN.zip")
if _up is not None:
    import hashlib

    _data = _up.getvalue()
    _name = one_line(_up.name, 80)
    try:
        _theirs = _uploaded(hashlib.sha256(_data).hexdigest(), _name, _data)
    except FieldError as exc:
        # the page has no GPU control: say how the zip names its GPU instead of the command line's --gpu
        show_error(exc, before=f"{_name} cannot be replayed: ", labels={"gpu": "GPU"},
                   advice={"give --gpu, one of": "name the folder inside the zip after its GPU (as in "
                                                 "h200_llama-3.1-8b) or set hardware.gpu in meta.json to one of"})
    else:
        _one = next(r for r in _theirs.values() if not isinstance(r, str))
        _ranks = (f"; {_one.data_parallel} data-parallel ranks"
                  f"{', expert parallel' if _one.expert_parallel else ''}" if _one.data_parallel > 1 else "")
        st.caption(plain_markdown(f"{_name}: {len(_one.run):,} requests, {_one.cost.label}; {_one.rules.describe()}"
                                  f"{_ranks}."))
        for _note in _one.notes:           # a batching setting the run left to vLLM's default, and which one was taken
            st.caption(plain_markdown(f"Note: {_note}."))
        st.markdown(plain_markdown(cost_model_sentence(_theirs, uploaded=True)))
        st.table(cost_model_table(_theirs).set_index(["figure", "statistic"]))
        # beside the table it reproduces, and only while an upload replayed: a damaged zip shows none
        _cmds = upload_commands(_theirs)
        st.markdown(plain_markdown(f"Reproduce this table on the command line, with {_name} saved as "
                                   f"{UPLOAD_PLACEHOLDER}: {_cmds['say']}"))
        st.code("\n".join(_cmds["commands"]), language="bash", wrap_lines=True)

st.caption(
    "Data: casys-kaist/LLMServingSim, bench/examples/RTXPRO6000/Llama-3.1-8B/vllm (vLLM 0.19, Llama-3.1-8B bf16 "
    "on one NVIDIA RTX PRO 6000 Blackwell), MIT licence, shipped in assets/vllm_runs/ with its licence file.")
