"""Figures, table and sentences of the "Checked against a real engine" page, built from an
:class:`allocator.studies.vllm_replay.Replay` (no streamlit import).

Colours (:mod:`allocator.viz.theme`): the lab's simulation is the paged engine, so it is blue
(``PAGED``) as on every page; vLLM's measurement is the third series colour, green (``ACCENT``).
In the time series, requests running are solid lines and requests waiting dotted ones.

Every number a sentence here quotes is read from the replay it describes (tests/pages/test_replay_page.py
checks the page shows these sentences beside the figures they come from).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from allocator.studies.vllm_replay import FIGURES, STATS
from allocator.common.formats import seconds
from allocator.viz.theme import ACCENT, PAGED
from allocator.common.formats import plural

MEASURED = ACCENT
SIMULATED = PAGED
_LAYOUT = dict(plot_bgcolor="white", hoverlabel=dict(font_size=14), margin=dict(l=60, r=20, t=50, b=60),
               legend=dict(orientation="h", yanchor="top", y=-0.22, x=0))
STAT_NAMES = {"mean": "mean", "p50": "median (p50)", "p90": "90th percentile (p90)"}


def _title(text: str) -> dict:
    return dict(text=text, x=0, xanchor="left", font=dict(size=16))


def signed_pct(x: float) -> str:
    """An error in percent with its sign: ``5.93 -> "+5.9 %"``, ``-60.14 -> "−60.1 %"``."""
    return f"{'+' if x >= 0 else '−'}{abs(x):.1f} %"


def label(rep) -> str:
    """Who ran what: ``"vLLM 0.19.0, Llama 3.1 8B bf16 on NVIDIA RTX PRO 6000 Blackwell 96GB"``."""
    version = f"vLLM {rep.run.vllm_version}" if rep.run.vllm_version else "vLLM"
    return f"{version}, {rep.cost.label}"


def cdf_figure(rep, figure: str) -> go.Figure:
    """The distribution of one per-request figure ("ttft", "tpot" or "latency"), measured beside
    simulated: the share of requests at or below each value (seconds)."""
    words = FIGURES[figure]
    fig = go.Figure()
    for name, values, colour, dash in (("vLLM, measured", rep.measured[figure], MEASURED, "solid"),
                                       ("this lab's replay", rep.simulated[figure], SIMULATED, "dash")):
        v = np.sort(values[np.isfinite(values)])
        share = 100 * np.arange(1, len(v) + 1) / len(v)
        fig.add_trace(go.Scatter(x=v, y=share, mode="lines", name=name, line_shape="hv",
                                 line=dict(color=colour, dash=dash, width=2.5),
                                 customdata=[seconds(x) for x in v],
                                 hovertemplate=f"<b>{name}</b><br>%{{y:.1f}} % of requests had a {words} of at most "
                                               "%{customdata}<extra></extra>"))
    fig.update_xaxes(title_text=f"{words} (s)", gridcolor="#eee", rangemode="tozero")
    fig.update_yaxes(title_text="requests at or below (%)", range=[0, 101], gridcolor="#eee")
    fig.update_layout(height=400, title=_title(f"{words[0].upper()}{words[1:]}, request by request"), **_LAYOUT)
    return fig


def scatter_figure(rep, figure: str = "latency") -> go.Figure:
    """Each request's simulated against measured value of ``figure`` (seconds), with the line
    where they would be equal; hover names the request and its lengths."""
    words = FIGURES[figure]
    meas, sim = rep.measured[figure], rep.simulated[figure]
    ok = np.isfinite(meas) & np.isfinite(sim)
    ids = np.arange(len(meas))[ok]
    custom = [[int(i), f"{int(a):,}", f"{int(b):,}", seconds(float(m)), seconds(float(t))]
              for i, a, b, m, t in zip(ids, rep.run.prompt[ok], rep.run.output[ok], meas[ok], sim[ok])]
    hi = float(max(meas[ok].max(), sim[ok].max())) * 1.05
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[0, hi], y=[0, hi], mode="lines", name="simulated = measured",
                             line=dict(color="#555555", dash="dot", width=1.5), hoverinfo="skip"))
    fig.add_trace(go.Scatter(x=meas[ok], y=sim[ok], mode="markers", name="one request",
                             marker=dict(color=SIMULATED, size=7, opacity=0.7), customdata=custom,
                             hovertemplate=("request %{customdata[0]} (prompt %{customdata[1]} tokens, answer "
                                            "%{customdata[2]} tokens)<br>measured %{customdata[3]}<br>simulated %{customdata[4]}"
                                            "<extra></extra>")))
    fig.update_xaxes(title_text=f"measured {words} (s)", gridcolor="#eee", range=[0, hi])
    fig.update_yaxes(title_text=f"simulated {words} (s)", gridcolor="#eee", range=[0, hi])
    fig.update_layout(height=420, title=_title(f"{words[0].upper()}{words[1:]}: each request, simulated vs measured"),
                      **_LAYOUT)
    return fig


def series_figure(rep) -> go.Figure:
    """Requests running and waiting over the run: vLLM's own log (timeseries.csv, once a tick)
    beside the replay sampled at the same ticks."""
    fig = go.Figure()
    t = rep.series["t"]
    ts = rep.run.timeseries
    if ts is not None:
        for col, dash in (("running", "solid"), ("waiting", "dot")):
            fig.add_trace(go.Scatter(x=ts["t"], y=ts[col], mode="lines", name=f"vLLM, measured: {col}",
                                     line=dict(color=MEASURED, dash=dash, width=2.5),
                                     hovertemplate=f"vLLM at %{{x:.0f}} s: %{{y:.0f}} requests {col}<extra></extra>"))
    for col, dash in (("running", "solid"), ("waiting", "dot")):
        fig.add_trace(go.Scatter(x=t, y=rep.series[col], mode="lines", name=f"this lab's replay: {col}",
                                 line=dict(color=SIMULATED, dash=dash, width=2),
                                 hovertemplate=f"replay at %{{x:.0f}} s: %{{y:.0f}} requests {col}<extra></extra>"))
    fig.add_hline(y=rep.rules.max_num_seqs, line=dict(color="#555555", dash="dashdot", width=1),
                  annotation_text=f"max_num_seqs = {rep.rules.max_num_seqs}", annotation_position="top left")
    fig.update_xaxes(title_text="time since the first request arrived (s)", gridcolor="#eee", rangemode="tozero")
    fig.update_yaxes(title_text="requests", gridcolor="#eee", rangemode="tozero")
    fig.update_layout(height=420, title=_title("Requests running and waiting, once a second"), **_LAYOUT)
    return fig


def error_table(rep) -> pd.DataFrame:
    """Measured vs simulated mean / p50 / p90 of TTFT, TPOT and latency with the error, as text."""
    rows = []
    for k, words in FIGURES.items():
        for s in STATS:
            r = rep.table[k][s]
            rows.append({"figure": words, "statistic": STAT_NAMES[s], "vLLM, measured": seconds(r["measured"]),
                         "this lab's replay": seconds(r["simulated"]), "error": signed_pct(r["error_pct"])})
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------------------------
# Sentences
# ----------------------------------------------------------------------------------------------

def headline(rep) -> str:
    """The replay's three mean errors in one sentence."""
    t = rep.table
    return (f"Replaying {plural(len(rep.run), 'request')} of a real run ({label(rep)}), the lab's mean time to first token is "
            f"{seconds(t['ttft']['mean']['simulated'])} against {seconds(t['ttft']['mean']['measured'])} measured "
            f"({signed_pct(t['ttft']['mean']['error_pct'])}), its mean time per output token "
            f"{seconds(t['tpot']['mean']['simulated'])} against {seconds(t['tpot']['mean']['measured'])} "
            f"({signed_pct(t['tpot']['mean']['error_pct'])}), and its mean end-to-end latency "
            f"{seconds(t['latency']['mean']['simulated'])} against {seconds(t['latency']['mean']['measured'])} "
            f"({signed_pct(t['latency']['mean']['error_pct'])}).")


def right_and_wrong(rep) -> list[str]:
    """Where the model lands and where it does not, each sentence quoting the replay."""
    t = rep.table
    worst_fig, worst_stat = max(((k, s) for k in FIGURES for s in STATS), key=lambda ks: abs(t[ks[0]][ks[1]]["error_pct"]))
    best_fig, best_stat = min(((k, s) for k in FIGURES for s in STATS), key=lambda ks: abs(t[ks[0]][ks[1]]["error_pct"]))
    out = [f"Closest: the {STAT_NAMES[best_stat]} {FIGURES[best_fig]}, off by "
           f"{signed_pct(t[best_fig][best_stat]['error_pct'])}. Furthest: the {STAT_NAMES[worst_stat]} "
           f"{FIGURES[worst_fig]}, off by {signed_pct(t[worst_fig][worst_stat]['error_pct'])}."]
    ts = rep.run.timeseries
    if ts is not None and len(ts):
        i = int(np.argmax(ts["waiting"].to_numpy()))
        j = int(np.argmax(rep.series["waiting"]))
        queue = (f"The queue: vLLM's longest waiting line was {ts['waiting'].iloc[i]:.0f} requests at "
                 f"{ts['t'].iloc[i]:.0f} s, the replay's {rep.series['waiting'][j]:.0f} at {rep.series['t'][j]:.0f} s.")
        busy_m = ts["running"].to_numpy()[ts["waiting"].to_numpy() > 0]
        busy_s = rep.series["running"][rep.series["waiting"] > 0]
        if len(busy_m) and len(busy_s):
            queue += (f" While requests waited, vLLM ran a median of {np.median(busy_m):.0f} at once and the replay "
                      f"{np.median(busy_s):.0f} (max_num_seqs = {rep.rules.max_num_seqs}).")
        out.append(queue)
    ms = rep.makespan_s
    out.append(f"The last token came {seconds(ms['measured'])} after the first arrival in the real run and "
               f"{seconds(ms['simulated'])} in the replay ({signed_pct(100 * (ms['simulated'] / ms['measured'] - 1))}).")
    from allocator.cost.calibration import CALIBRATED
    if getattr(rep, "cost_model", "roofline") == "profile":
        why = ("The profile model prices a step from operator latencies measured on this GPU plus a 1 ms engine "
               "overhead that is assumed, not fitted; the real engine's steps also vary with CUDA-graph batch padding, "
               "decodes of unequal length and the GPU's clock, which it does not model.")
    elif getattr(rep, "efficiency_source", "").startswith("operator microbenchmarks"):
        e = rep.cost.efficiency
        why = (f"This roofline's efficiencies come from the GPU's operator microbenchmarks, not from this run "
               f"({e.eta_flops:g} of peak FLOP/s from the large weight GEMMs, {e.eta_bw:g} of bandwidth from "
               f"long decode attention, {1e3 * e.overhead_s:g} ms a step for the engine and the element-wise "
               "operators at their smallest); the small attention kernels, and element-wise work that grows with "
               "a step's tokens, take longer than a roofline allows, so its steps come out short.")
    elif rep.cost.efficiency == CALIBRATED:
        why = ("The model prices a step from its token counts with three fitted efficiencies; the real engine's steps "
               "also vary with kernel choice, CUDA-graph batch padding, sampling and the GPU's clock, which the model "
               "averages away.")
    else:                                  # the uncalibrated contrast: not fitted, and it shows
        why = ("This step model is not fitted: it assumes the GPU reaches 100 % of its datasheet FLOP/s and memory "
               "bandwidth with a fixed per-step overhead, which no real engine does, so its steps are too short and "
               "every error above is too fast; the calibrated model fits those efficiencies on this run.")
    if worst_fig == "ttft":
        why = (f"Time to first token is the hardest figure here: once {rep.rules.max_num_seqs} requests run, a new one "
               "waits for others to finish, so every step that is a little slow or fast is added up over the whole "
               "queue ahead of it. " + why)
    out.append(why)
    return out


def held_out_sentence(h: dict) -> str:
    """The held-out check (:func:`allocator.studies.vllm_replay.held_out_check`) in one sentence."""
    e = h["fit"].efficiency
    return (f"Held out: calibrated on the first half of the requests alone (eta_flops {e.eta_flops:g}, eta_bw "
            f"{e.eta_bw:g}, overhead {1e3 * e.overhead_s:g} ms), the replay is off on the second half's mean time to "
            f"first token by {signed_pct(h['ttft_error_pct'])}, time per output token by "
            f"{signed_pct(h['tpot_error_pct'])} and latency by {signed_pct(h['latency_error_pct'])}.")


#: How each cost model is named beside its figures.
COST_MODEL_LABELS = {"roofline": "roofline, calibrated on microbenchmarks", "profile": "operator profile of the GPU"}


def _micro(rep) -> bool:
    return getattr(rep, "efficiency_source", "").startswith("operator microbenchmarks")


def cost_model_label(name: str, rep) -> str:
    """How a cost model's columns are named: :data:`COST_MODEL_LABELS`, except a roofline whose GPU
    has no profile bundle, which says it took the fit on the shipped run."""
    if name == "roofline" and not _micro(rep):
        return "roofline, fitted on the shipped run"
    return COST_MODEL_LABELS[name]


def cost_model_table(reps: dict) -> pd.DataFrame:
    """Both cost models' errors side by side: one row per figure and statistic, the measured value,
    then each model's simulated value and error, each column named after the model that produced it.

    Args:
        reps: {cost model name: :class:`allocator.studies.vllm_replay.Replay`, or the reason it was
            refused (str)} (:func:`allocator.studies.vllm_replay.compare_cost_models`).
    """
    ok = {n: r for n, r in reps.items() if not isinstance(r, str)}
    first = next(iter(ok.values()))
    rows = []
    for k, words in FIGURES.items():
        for s in STATS:
            row = {"figure": words, "statistic": STAT_NAMES[s], "vLLM, measured": seconds(first.table[k][s]["measured"])}
            for n, r in ok.items():
                row[f"{cost_model_label(n, r)}: simulated"] = seconds(r.table[k][s]["simulated"])
                row[f"{cost_model_label(n, r)}: error"] = signed_pct(r.table[k][s]["error_pct"])
            rows.append(row)
    return pd.DataFrame(rows)


def cost_model_sentence(reps: dict, fitted=None, *, uploaded: bool = False) -> str:
    """The cost models' mean errors in one sentence, each named, and why they differ; it ends with
    what is measured and what is not: only one measured run ships, so how either model carries to
    another GPU or model is untested on the shipped run (an uploaded run is that test, for itself).

    Args:
        reps: as :func:`cost_model_table` (the roofline calibrated on microbenchmarks, the profile).
        fitted: the same run replayed with the roofline fitted on it (a :class:`Replay`), quoted
            beside them when given.
        uploaded: the run is one a reader uploaded, not the shipped one.
    """
    r, p = reps.get("roofline"), reps.get("profile")
    if isinstance(p, str) or p is None:
        return f"The operator-profile model cannot price this run: {p}."

    def three(x) -> str:
        return f"{signed_pct(x.error_pct('ttft'))}, {signed_pct(x.error_pct('tpot'))} and {signed_pct(x.error_pct('latency'))}"

    roof = ("the roofline with its efficiencies taken from the GPU's operator microbenchmarks" if _micro(r) else
            "the roofline with the efficiencies fitted on the shipped run (no operator profile of this GPU)")
    out = ("Two cost models that never saw this run price the same replay. Off on the mean time to first token, "
           f"time per output token and latency: {roof} by {three(r)}; the operator profile of the GPU (per-operator "
           f"latencies measured on one decoder layer, a 1 ms engine overhead assumed) by {three(p)}.")
    if fitted is not None:
        out += (f" The roofline fitted on this very run (above) lands at {three(fitted)}, but a fit on the run it is "
                "checked against says little about a run it has not seen.")
    if uploaded:
        return out + (" These errors are measured on the uploaded run itself; they say nothing about runs "
                      "the lab has not seen.")
    if _micro(r):
        tail = " Neither was fitted on this run."
    else:
        tail = " The profile is the one of the two not fitted on this run."
    return out + tail + (" How either carries to another GPU or model is untested here: only one measured "
                         "run ships with the lab.")


#: The uploaded zip's name in the commands shown beside its table (the reader's file, saved under any name).
UPLOAD_PLACEHOLDER = "YOUR_RUN.zip"


def upload_commands(reps: dict) -> dict:
    """The commands that print an uploaded run's table, one per column the table shows: {"commands":
    [shell commands naming the zip :data:`UPLOAD_PLACEHOLDER`], "say": which command prints which
    column}. Without ``--cost-model`` the command prints the operator profile where one exists (the
    profile column), else the roofline; ``--json`` prints both.

    Args:
        reps: as :func:`cost_model_table` (the uploaded run, from
            :func:`allocator.studies.vllm_replay.replay_zip`).
    """
    base = f"python -m allocator replay-vllm {UPLOAD_PLACEHOLDER}"
    if isinstance(reps.get("profile"), str) or reps.get("profile") is None:
        return {"commands": [base], "say": "it prints the roofline column (no operator profile of this GPU and "
                                           "model ships, so the roofline is the command's default)."}
    return {"commands": [base, base + " --cost-model roofline"],
            "say": "the first prints the operator-profile column (the command's default where a profile exists), "
                   "the second the roofline column; add --json for both at once."}
