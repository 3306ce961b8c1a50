"""Plotly figures of the paper's Figure 14 on ShareGPT (:mod:`allocator.studies.sampling_latency`), no
streamlit import.

Two charts: vLLM's advantage (its sustained rate over each Orca baseline's) against the number of
sequences per request, parallel sampling and beam search, mean over the seeds with ± 1 sd bars,
the paper's two stated Orca (Oracle) values (Alpaca) as white diamonds; and the figure as the
paper draws it, normalised latency against request rate, one panel per mode and width, every
system's points at seed 0 with the latency budget.
"""
from __future__ import annotations

import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from allocator.studies.paper import PAPER_LABELS
from allocator.studies.sampling_latency import MODES, ORCA_SYSTEMS, PAPER_FIG14
from allocator.studies.sharing import MODE_LABELS
from allocator.viz.theme import PAGED, SHARED_PREFIX
from allocator.viz.throughput import BUDGET_COLOUR, CHART_LAYOUT, STYLE, chart_title, log_axis

MODE_COLOUR = {"parallel": PAGED, "beam": SHARED_PREFIX}
OTHER_DASH = {"oracle": "solid", "pow2": "dash", "max": "dot"}


def fig14_advantage_figure(f, others=("oracle",)) -> go.Figure:
    """vLLM's sustained rate / each of ``others``' (Orca baselines) against sequences per request (1 =
    basic sampling), one line per mode and baseline, mean over the seeds ± 1 sd; the paper's stated
    Orca (Oracle) improvements (1.3x at width 1, 2.3x for beam search of width 6; Alpaca) as diamonds."""
    fig = go.Figure()
    ys = []
    for mode in MODES:
        for other in others:
            d = f.advantage[mode]
            ws = [w for w in f.widths if other in d.get(w, {})]
            sp = [d[w][other] for w in ws]
            ys += [s["mean"] + s["std"] for s in sp]
            fig.add_trace(go.Scatter(
                x=ws, y=[s["mean"] for s in sp], mode="lines+markers",
                name=f"{MODE_LABELS[mode]}: vLLM / {PAPER_LABELS[other]} (this model, ShareGPT)",
                line=dict(color=MODE_COLOUR[mode], dash=OTHER_DASH[other], width=2.5),
                marker=dict(size=9, color=MODE_COLOUR[mode]),
                error_y=dict(type="data", array=[s["std"] for s in sp], visible=True),
                customdata=[[s["std"], s["min"], s["max"], len(s["values"])] for s in sp],
                hovertemplate=f"<b>{MODE_LABELS[mode].lower()}</b>, %{{x}} sequence(s) a request<br>vLLM sustains "
                              f"%{{y:.2f}}× {PAPER_LABELS[other]}'s rate ± %{{customdata[0]:.2f}}<br>over "
                              "%{customdata[3]} seeds: %{customdata[1]:.2f}–%{customdata[2]:.2f}×<extra></extra>"))
    paper = PAPER_FIG14["oracle_improvement"]
    basic, beam6 = paper["basic sampling"], paper["beam search, width 6"]
    ys += [basic, beam6]
    fig.add_trace(go.Scatter(x=[1, 6], y=[basic, beam6], mode="markers",
                             name=f"the paper, vLLM / Orca (Oracle): basic sampling and beam width 6 "
                                  f"({PAPER_FIG14['dataset']})",
                             marker=dict(symbol="diamond", size=14, color="white",
                                         line=dict(color=BUDGET_COLOUR, width=2.5)),
                             customdata=["basic sampling", "beam search, width 6"],
                             hovertemplate="the paper (Alpaca), %{customdata}: %{y:.1f}×<extra></extra>"))
    fig.add_hline(y=1, line=dict(color=BUDGET_COLOUR, width=1, dash="dot"))
    fig.update_xaxes(title_text="sequences per request (1 = basic sampling; samples or beam width)",
                     tickvals=list(f.widths), ticktext=[str(w) for w in f.widths])
    top = max([v for v in ys if math.isfinite(v)] + [2.5])
    fig.update_yaxes(title_text="vLLM's sustained rate ÷ Orca's (×)", range=[0, top * 1.1], gridcolor="#eee")
    fig.update_layout(height=460, title=chart_title("Figure 14 — vLLM's advantage against the number of sequences, "
                                                    "ShareGPT"), **CHART_LAYOUT)
    return fig


def fig14_latency_figure(f, seed: int | None = None) -> go.Figure:
    """Figure 14 as the paper draws it: normalised latency (s/token, log axis) against request rate
    (requests/s on the paper's rate scale, log axis), one panel per mode (rows) and width (columns),
    every system's points at ``seed`` (default the first), and the latency budget."""
    seed = f.seeds[0] if seed is None else seed
    widths = list(f.widths)
    fig = make_subplots(rows=len(MODES), cols=len(widths), shared_yaxes=True, horizontal_spacing=0.03,
                        vertical_spacing=0.14,
                        subplot_titles=[f"{MODE_LABELS[m].lower() if w > 1 else 'basic sampling'}, "
                                        f"{w} sequence{'s' if w > 1 else ''}" for m in MODES for w in widths])
    budget = f.budget_s_per_token
    ys, xs = [budget], []
    for i, mode in enumerate(MODES):
        for j, w in enumerate(widths):
            s = f.searches[(mode, w, seed)]
            for system in ("paged", *ORCA_SYSTEMS):
                pts = s[system]["points"]
                colour, dash, symbol = STYLE[system]
                x = [p["paper_rate"] for p in pts]
                y = [p["latency"] if math.isfinite(p["latency"]) else None for p in pts]
                xs += x
                ys += [v for v in y if v]
                fig.add_trace(go.Scatter(
                    x=x, y=y, mode="lines+markers", name=PAPER_LABELS[system], legendgroup=system,
                    showlegend=(i == 0 and j == 0), line=dict(color=colour, dash=dash, width=2),
                    marker=dict(symbol=symbol, size=7, color=colour),
                    customdata=[p["rate"] for p in pts],
                    hovertemplate=f"<b>{PAPER_LABELS[system]}</b>, {MODE_LABELS[mode].lower()} width {w}<br>"
                                  "%{x:.3~g} requests/s on the paper's scale (%{customdata:.3~g} here)<br>"
                                  f"%{{y:.3~g}} s/token (seed {seed})<extra></extra>"), row=i + 1, col=j + 1)
            fig.add_hline(y=budget, line=dict(color=BUDGET_COLOUR, dash="dashdot", width=1), row=i + 1, col=j + 1)
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=f"latency budget ({budget:.3g} s/token)",
                             line=dict(color=BUDGET_COLOUR, dash="dashdot", width=1),
                             hovertemplate="the budget<extra></extra>"))
    fig.update_xaxes(**log_axis(xs))
    fig.update_yaxes(**log_axis(ys), gridcolor="#eee")
    for j in range(len(widths)):
        fig.update_xaxes(title_text="requests/s (paper's scale)", row=len(MODES), col=j + 1)
    for i in range(len(MODES)):
        fig.update_yaxes(title_text="normalised latency (s/token)", row=i + 1, col=1)
    fig.update_layout(height=620, title=chart_title(f"Figure 14 — normalised latency against request rate, "
                                                    f"ShareGPT (seed {seed})"), **CHART_LAYOUT)
    return fig


__all__ = ["fig14_advantage_figure", "fig14_latency_figure"]
