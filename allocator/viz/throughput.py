"""Plotly figures of the Throughput and latency page, built from an
:class:`allocator.studies.rate_sweep.RateSweep` (no streamlit import).

Colours follow :mod:`allocator.viz.theme`: black is a reservation allocator and blue is paged,
as on every page; the three reservation baselines (Max, Pow2, Oracle) share black and differ by
line style and marker (solid squares, dashed diamonds, dotted triangles), so no new colour has to
compete with the memory maps' meanings. The paper's figures are drawn hatched and named as the
paper's; the model's are solid.
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from allocator.studies.rate_sweep import PAPER, PAPER_NAMES, POLICY_LABELS, memory_basis
from allocator.common.formats import rate as rate_text
from allocator.common.formats import seconds
from allocator.viz.theme import PAGED, RESERVE_MAX

#: Line style of each policy: (colour, dash, marker symbol).
STYLE = {"max": (RESERVE_MAX, "solid", "square"), "pow2": (RESERVE_MAX, "dash", "diamond"),
         "oracle": (RESERVE_MAX, "dot", "triangle-up"), "paged": (PAGED, "solid", "circle")}
BUDGET_COLOUR = "#555555"
#: The layout every throughput and paper chart shares (white plot, large hover text, legend under
#: the plot); :mod:`allocator.viz.paper` draws with it too.
CHART_LAYOUT = dict(plot_bgcolor="white", hoverlabel=dict(font_size=14), margin=dict(l=60, r=20, t=40, b=60),
                    legend=dict(orientation="h", yanchor="top", y=-0.2, x=0))


def log_ticks(lo: float, hi: float) -> list[float]:
    """Tick values 1, 2, 5 x 10^k from below ``lo`` to above ``hi`` (a readable log axis); over
    less than a factor of 20, 1, 1.5, 2, 3, 5, 7 x 10^k so a narrow axis still has several."""
    if not (lo > 0 and hi > 0):
        return [1.0]
    ticks = []
    steps = (1, 2, 5) if hi / lo >= 20 else (1, 1.5, 2, 3, 5, 7)
    for k in range(int(np.floor(np.log10(lo))) - 1, int(np.ceil(np.log10(hi))) + 1):
        for m in steps:
            v = m * 10.0 ** k
            if lo / 2.5 <= v <= hi * 2.5:
                ticks.append(float(f"{v:.3g}"))
    return ticks


def _tick_text(v: float) -> str:
    return f"{v:g}"


def log_axis(values) -> dict:
    """Axis settings for a log axis over ``values`` with 1-2-5 ticks (:func:`log_ticks`).

    Args:
        values: the numbers the axis shows; None, zero, negative and non-finite ones are skipped.

    Returns:
        ``dict(type="log", tickvals=[...], ticktext=[...])`` for ``fig.update_xaxes`` or
        ``update_yaxes``; just ``dict(type="log")`` when no value is positive.
    """
    vals = [v for v in values if v is not None and v > 0 and np.isfinite(v)]
    if not vals:
        return dict(type="log")
    ticks = log_ticks(min(vals), max(vals))
    return dict(type="log", tickvals=ticks, ticktext=[_tick_text(t) for t in ticks])


def chart_title(text: str) -> dict:
    """A chart title as these charts place it: ``text`` at the left edge, 16 px (a plotly
    ``layout.title`` dict)."""
    return dict(text=text, x=0, xanchor="left", font=dict(size=16))


def _name(policy: str) -> str:
    return f"{POLICY_LABELS[policy]} (paper: {PAPER_NAMES[policy]})"


def latency_figure(sweep) -> go.Figure:
    """Normalised latency (s/token, log scale) against request rate (requests/s) for every policy,
    the budget as a dashed line and each sustained rate marked on it."""
    fig = go.Figure()
    for p in sweep.policies:
        colour, dash, symbol = STYLE[p]
        y = sweep.curve(p)
        custom = [[sweep.points[(p, r)]["throughput_tokens_per_s"] or 0, seconds(sweep.points[(p, r)]["ttft_p50_s"]),
                   sweep.points[(p, r)]["preemptions"], seconds(v)] for r, v in zip(sweep.rates, y)]
        fig.add_trace(go.Scatter(
            x=list(sweep.rates), y=y, mode="lines+markers", name=_name(p),
            line=dict(color=colour, dash=dash, width=2.5), marker=dict(symbol=symbol, size=9, color=colour),
            customdata=custom,
            hovertemplate=(f"<b>{POLICY_LABELS[p]}</b><br>%{{x:.2f}} requests/s<br>normalised latency %{{customdata[3]}} per token"
                           "<br>%{customdata[0]:,.0f} output tokens/s<br>median TTFT %{customdata[1]}"
                           "<br>%{customdata[2]} preemptions<extra></extra>")))
    budget = sweep.budget_s_per_token
    fig.add_trace(go.Scatter(
        x=[sweep.rates[0], sweep.rates[-1]], y=[budget, budget], mode="lines",
        name=f"budget: {budget:.3f} s/token ({sweep.latency_factor:g} × a request served alone)",
        line=dict(color=BUDGET_COLOUR, dash="dashdot", width=1.5),
        hovertemplate=f"budget {seconds(budget)} per token<extra></extra>"))
    xs, ys, texts, colours = [], [], [], []
    for p in sweep.policies:
        s = sweep.sustained[p]
        if s["rate"] is not None and s["bound"] == "within":
            xs.append(s["rate"])
            ys.append(budget)
            texts.append(f"{POLICY_LABELS[p]} sustains {rate_text(s['rate'])} requests/s")
            colours.append(STYLE[p][0])
    if xs:
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name="sustained rate (where a curve crosses the budget)",
                                 marker=dict(symbol="x-thin-open", size=16, line=dict(width=3), color=colours),
                                 text=texts, hovertemplate="%{text}<extra></extra>"))
    fig.update_xaxes(title_text="request rate (requests/s, Poisson arrivals)", gridcolor="#eee", rangemode="tozero")
    every = [v for p in sweep.policies for v in sweep.curve(p)] + [budget]
    fig.update_yaxes(title_text=f"normalised latency (s/token, {sweep.cost.short_name}, log scale)", gridcolor="#eee",
                     **log_axis(every))
    fig.update_layout(height=480, title=chart_title("Latency as the load rises"), **CHART_LAYOUT)
    return fig


def throughput_figure(sweep) -> go.Figure:
    """Output tokens per second served against request rate, with the demand (rate x mean output
    length) for reference: where a curve falls below the demand, the allocator is saturated."""
    fig = go.Figure()
    demand = [r * sweep.mean_output for r in sweep.rates]
    fig.add_trace(go.Scatter(x=list(sweep.rates), y=demand, mode="lines", name="demand: rate × mean answer length",
                             line=dict(color=BUDGET_COLOUR, dash="dashdot", width=1.5),
                             hovertemplate="%{x:.2f} requests/s ask for %{y:,.0f} tokens/s<extra></extra>"))
    for p in sweep.policies:
        colour, dash, symbol = STYLE[p]
        fig.add_trace(go.Scatter(
            x=list(sweep.rates), y=sweep.curve(p, "throughput_tokens_per_s"), mode="lines+markers", name=_name(p),
            line=dict(color=colour, dash=dash, width=2.5), marker=dict(symbol=symbol, size=9, color=colour),
            hovertemplate=f"<b>{POLICY_LABELS[p]}</b><br>%{{x:.2f}} requests/s<br>%{{y:,.0f}} output tokens/s"
                          "<extra></extra>"))
    fig.update_xaxes(title_text="request rate (requests/s)", gridcolor="#eee", rangemode="tozero")
    fig.update_yaxes(title_text=f"throughput (output tokens/s, {sweep.cost.short_name})", gridcolor="#eee",
                     rangemode="tozero")
    fig.update_layout(height=480, title=chart_title("Tokens served as the load rises"), **CHART_LAYOUT)
    return fig


#: The bars' value labels: upright above each bar, at a fixed size, so two neighbouring bars' labels
#: never touch ("96.3 %95.7 %" at 1366 px) and Plotly does not shrink them to fit.
_BAR_LABEL = dict(textposition="outside", textangle=-90, textfont=dict(size=12), constraintext="none",
                  cliponaxis=False)


def memory_figure(sweep, at: float) -> go.Figure:
    """The share of the KV pool holding tokens: the paper's Figure 2 (hatched) beside this model's
    run at ``at`` requests/s (solid), for every policy."""
    key, words = memory_basis(sweep, at)
    cats = [f"{POLICY_LABELS[p]}<br>(paper: {PAPER_NAMES[p]})" for p in sweep.policies]
    colours = [STYLE[p][0] for p in sweep.policies]
    paper = [100 * PAPER["token_state_share"][p] for p in sweep.policies]
    ours = [100 * (sweep.points[(p, at)][key] or 0) for p in sweep.policies]
    fig = go.Figure()
    fig.add_bar(x=cats, y=paper, name="the paper's Figure 2 (its experiments)", showlegend=False,
                marker=dict(color="white", line=dict(color=colours, width=2),
                            pattern=dict(shape="/", fgcolor=colours, size=8, solidity=0.3)),
                text=[f"{v:.1f} %" for v in paper], **_BAR_LABEL,
                hovertemplate="%{x}<br>the paper: %{y:.1f} % of KV memory holds token states<extra></extra>")
    fig.add_bar(x=cats, y=ours, name=f"this model at {rate_text(at)} requests/s ({words})", showlegend=False,
                marker=dict(color=colours), text=[f"{v:.1f} %" for v in ours], **_BAR_LABEL,
                hovertemplate="%{x}<br>this model: %{y:.1f} % of the KV pool holds tokens<extra></extra>")
    # The bars take each allocator's colour (black reservation, blue paged), so the legend shows
    # the two kinds of bar in a neutral grey rather than one allocator's colour.
    fig.add_bar(x=[None], y=[None], name="the paper's Figure 2 (hatched outline)",
                marker=dict(color="white", line=dict(color=BUDGET_COLOUR, width=2),
                            pattern=dict(shape="/", fgcolor=BUDGET_COLOUR, size=8, solidity=0.3)),
                hovertemplate="the paper's value<extra></extra>")
    fig.add_bar(x=[None], y=[None], name=f"this model at {rate_text(at)} requests/s ({words}; solid, "
                                         "in the allocator's colour)", marker=dict(color=BUDGET_COLOUR),
                hovertemplate="this model's value<extra></extra>")
    fig.update_layout(barmode="group", height=480, title=chart_title("Share of the KV memory holding tokens"),
                      **{**CHART_LAYOUT, "margin": dict(CHART_LAYOUT["margin"], b=120),
                         "legend": dict(CHART_LAYOUT["legend"], y=-0.3)})
    # room above the tallest bar for its upright label (values reach 100 %; ticks stop there)
    fig.update_yaxes(title_text="KV memory holding tokens (%)", range=[0, 125], tickvals=list(range(0, 101, 20)),
                     gridcolor="#eee")
    fig.update_xaxes(title_text="allocator")
    return fig


def cdf_figure(sweep, at: float, metric: str = "ttft_s") -> go.Figure:
    """The distribution of ``metric`` ("ttft_s" or "tpot_s") over the finished requests at ``at``
    requests/s, one cumulative line per policy (x log scale, seconds)."""
    words = {"ttft_s": "time to first token", "tpot_s": "time per output token", "e2e_s": "end-to-end latency"}[metric]
    fig = go.Figure()
    seen = []
    for p in sweep.policies:
        values = np.sort(sweep.latencies[(p, at)][metric])
        values = values[~np.isnan(values)]
        if not len(values):
            continue
        seen += [float(values[0]), float(values[-1])]
        colour, dash, _ = STYLE[p]
        share = 100 * np.arange(1, len(values) + 1) / len(values)
        fig.add_trace(go.Scatter(x=values, y=share, mode="lines", name=POLICY_LABELS[p], line_shape="hv",
                                 line=dict(color=colour, dash=dash, width=2.5),
                                 customdata=[seconds(float(x)) for x in values],
                                 hovertemplate=f"<b>{POLICY_LABELS[p]}</b><br>%{{y:.1f}} % of requests had a {words} "
                                               "of at most %{customdata}<extra></extra>"))
    fig.update_xaxes(title_text=f"{words} (s, {sweep.cost.short_name}, log scale)", gridcolor="#eee",
                     **log_axis(seen))
    fig.update_yaxes(title_text="requests at or below (%)", range=[0, 101], gridcolor="#eee")
    fig.update_layout(height=400, title=chart_title(f"{words[0].upper()}{words[1:]} at {rate_text(at)} requests/s"),
                      **CHART_LAYOUT)
    return fig
