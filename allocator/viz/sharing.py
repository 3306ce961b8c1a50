"""Plotly figures of the paper's Figure 15 on ShareGPT (:mod:`allocator.studies.sharing`), no streamlit import.

Two charts: the memory saved by sharing against the width (parallel sampling, and beam search at
the beam model's default), this model's mean with ± 1 sd bars beside the paper's range; and beam
search's saving against the beam model's replacement probability (a categorical axis, markers
only), one series per width, with the paper's values as dashed lines, so a reader sees where they
fall in the model's range. Shared blocks keep their app-wide colour (:data:`allocator.viz.theme.SHARED_PREFIX`).
"""
from __future__ import annotations

import plotly.graph_objects as go

from allocator.studies.sharing import MODE_LABELS, PAPER_FIG15, WIDTHS
from allocator.viz.theme import GREY_FREE, PAGED, SHARED_PREFIX
from allocator.viz.throughput import BUDGET_COLOUR, CHART_LAYOUT, chart_title

WIDTH_DASH = {2: "dot", 4: "dash", 6: "solid"}
WIDTH_SYMBOL = {2: "circle", 4: "square", 6: "diamond"}


def fig15_figure(f) -> go.Figure:
    """Figure 15 (ShareGPT): % of blocks saved by sharing against the width, parallel sampling and
    beam search (the model's default), mean over the seeds ± 1 sd; the ends of the paper's ShareGPT
    range as white diamonds at widths 2 and 6 (the paper prints no value for width 4)."""
    fig = go.Figure()
    x = list(WIDTHS)
    for mode, colour, offset in (("parallel", PAGED, -0.25), ("beam", SHARED_PREFIX, 0.25)):
        d = f.parallel if mode == "parallel" else f.beam[f.default_replacement]
        lo, hi = PAPER_FIG15["sharegpt"][mode]
        label = MODE_LABELS[mode] + ("" if mode == "parallel" else f" (replacement {f.default_replacement:g})")
        fig.add_trace(go.Bar(x=[w + offset for w in x], y=[100 * d[w]["mean"] for w in x], width=0.45,
                             name=f"{label}: this model", marker_color=colour,
                             error_y=dict(type="data", array=[100 * d[w]["std"] for w in x], visible=True),
                             customdata=[[w, 100 * d[w]["std"], 100 * d[w]["min"], 100 * d[w]["max"]] for w in x],
                             hovertemplate=f"{MODE_LABELS[mode].lower()}, width %{{customdata[0]}}: %{{y:.1f}} % "
                                           f"± %{{customdata[1]:.1f}} (seeds: %{{customdata[2]:.1f}}–"
                                           f"%{{customdata[3]:.1f}} %)<extra></extra>"))
        # the paper prints only the range's ends (widths 2 and 6): markers there, nothing drawn between;
        # drawn after the bars so that a bar taller than the paper's value does not hide it
        fig.add_trace(go.Scatter(x=[x[0] + offset, x[-1] + offset], y=[100 * lo, 100 * hi], mode="markers",
                                 name=f"{MODE_LABELS[mode]}: the paper's range ends (ShareGPT)",
                                 marker=dict(symbol="diamond", size=14, color="white", line=dict(color=colour, width=2.5)),
                                 hovertemplate=f"the paper, {MODE_LABELS[mode].lower()}: %{{y:.1f}} % "
                                               "(an end of its range)<extra></extra>"))
    fig.update_xaxes(title_text="samples per request (parallel) or beam width", tickvals=x,
                     ticktext=[str(w) for w in x])
    fig.update_yaxes(title_text="memory saved by sharing (% of blocks)", range=[0, 100], gridcolor="#eee")
    fig.update_layout(height=440, barmode="overlay",
                      title=chart_title("Figure 15 — memory saved by sharing, ShareGPT"), **CHART_LAYOUT)
    return fig


def beam_sweep_figure(f) -> go.Figure:
    """Beam search's saving (%) against the beam model's per-step replacement probability, one marker
    series per width (mean over the seeds ± 1 sd), the paper's ShareGPT values at widths 2 and 6 dashed,
    the model's default marked. The x axis is categorical (the swept values evenly spaced, not to
    scale), so no line joins the points."""
    rhos = list(f.beam)
    labels = [f"{r:g}" for r in rhos]
    fig = go.Figure()
    lo, hi = PAPER_FIG15["sharegpt"]["beam"]
    for w, paper in ((WIDTHS[0], lo), (WIDTHS[-1], hi)):
        fig.add_hline(y=100 * paper, line=dict(color=BUDGET_COLOUR, dash=WIDTH_DASH[w], width=1),
                      annotation_text=f"the paper, width {w}: {100 * paper:.1f} %", annotation_position="top left")
    for w in WIDTHS:
        # markers only: the swept values sit at equal steps on a category axis, so a line between them
        # would draw a slope the numbers do not have
        fig.add_trace(go.Scatter(x=labels, y=[100 * f.beam[r][w]["mean"] for r in rhos], mode="markers",
                                 name=f"width {w} (this model)",
                                 marker=dict(color=SHARED_PREFIX, symbol=WIDTH_SYMBOL[w], size=11,
                                             line=dict(color="white", width=1)),
                                 error_y=dict(type="data", array=[100 * f.beam[r][w]["std"] for r in rhos],
                                              visible=True),
                                 hovertemplate=f"width {w}, replacement %{{x}}: %{{y:.1f}} % saved<extra></extra>"))
    fig.add_vline(x=labels.index(f"{f.default_replacement:g}"), line=dict(color=GREY_FREE, width=8),
                  annotation_text="the model's default", annotation_position="bottom right")
    fig.update_xaxes(title_text="beam model: probability a beam is replaced per step (swept values, "
                                "evenly spaced categories: not to scale)", type="category")
    fig.update_yaxes(title_text="memory saved by sharing (% of blocks)", range=[0, 100], gridcolor="#eee")
    fig.update_layout(height=440, title=chart_title("Beam search: where the paper falls in the model's range"),
                      **CHART_LAYOUT)
    return fig


__all__ = ["beam_sweep_figure", "fig15_figure"]
