"""The block-size sweep chart: the paged allocator's mean utilisation and cost per stored token
against block size, reserve-max's utilisation for reference, the slider's block size marked.

No streamlit import. The rows come from :func:`allocator.engine.scenario.block_size_sweep` and every
average is taken on one basis (:func:`allocator.viz.claims.sweep_basis`); this module only lays
them out and picks a cost axis whose ticks do not sit on the curve.
"""
from __future__ import annotations

import copy
import json
import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from allocator.viz.claims.sweep import sweep_basis, sweep_value
from allocator.viz.theme import ACCENT, PAGED, RESERVE_MAX

__all__ = ["cost_axis_top", "sweep_figure", "sweep_figures_json"]

#: The keys of a sweep row that depend on the metadata cost c (the others describe the runs).
COST_KEYS = ("cost_per_token", "cost_per_token_busy", "mean_total_cost", "mean_total_cost_busy")


def sweep_figure(rows: list[dict], current_block_size: int, metadata_cost: float,
                 reserve: dict | None = None, reserve_name: str = "reserve-max") -> go.Figure:
    """Mean utilisation and cost per stored token against block size (log2 axis), current size marked.

    Every point, and reserve-max's reference line, is the same kind of average
    (``allocator.viz.claims.sweep_basis``): over the steps when requests waited if every run had
    such steps, else over all steps; the legend says which.

    Args:
        rows: ``allocator.engine.scenario.block_size_sweep`` output.
        current_block_size: the block size on the slider (slots); drawn as a dashed line.
        metadata_cost: c, the cost per block in slot equivalents, used for the cost curve.
        reserve: the reservation allocator's summary (its utilisation is drawn for reference), or None.
        reserve_name: its name in the legend ("reserve-max", "reserve-pow2" or "reserve-oracle").
    """
    basis, words = sweep_basis(rows, reserve)
    bs = [r["block_size"] for r in rows]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    if not bs:                              # no block size fits the pool: say so on the chart itself
        fig.add_annotation(text="No block size of the sweep fits this pool.", showarrow=False,
                           xref="paper", yref="paper", x=0.5, y=0.5, font=dict(size=16))
        bs = [current_block_size]
    fig.add_trace(go.Scatter(
        x=bs, y=[_times(sweep_value(r, "mean_utilization", basis), 100) for r in rows], mode="lines+markers",
        name=f"paged: mean utilisation {words} (%)", line=dict(color=PAGED, width=3),
        customdata=[[r["peak_running"], r["steps"], r["preemptions"]] for r in rows],
        hovertemplate=("block size %{x} slots<br>utilisation %{y:.1f} %<br>peak running %{customdata[0]}"
                       "<br>steps to drain %{customdata[1]}<br>preemptions %{customdata[2]}<extra></extra>")),
        secondary_y=False)
    reserve_util = None if reserve is None else (
        reserve["mean_utilization_busy"] if basis == "busy" else reserve["mean_utilization"])
    if reserve_util is not None and reserve["finished"]:
        fig.add_trace(go.Scatter(x=[bs[0], bs[-1]], y=[reserve_util * 100] * 2, mode="lines",
                                 name=f"{reserve_name} utilisation {words} (%) — does not depend on block size",
                                 line=dict(color=RESERVE_MAX, dash="dash"),
                                 hovertemplate=reserve_name + ": %{y:.1f} %<extra></extra>"), secondary_y=False)
    fig.add_trace(go.Scatter(
        x=bs, y=[sweep_value(r, "cost_per_token", basis) for r in rows], mode="lines+markers",
        name=f"paged: cost per stored token {words}, allocated + {metadata_cost:g} × blocks (slot equivalents)",
        line=dict(color=ACCENT, dash="dot", width=2.5), marker=dict(symbol="diamond"),
        customdata=[[sweep_value(r, "mean_total_cost", basis)] for r in rows],
        hovertemplate=("block size %{x} slots<br>cost per stored token %{y:.3f}<br>"
                       "total cost %{customdata[0]:,.0f} slot equivalents<extra></extra>")),
        secondary_y=True)
    # the slider's block size: a labelled vertical line, not a legend entry (a second dashed dark line
    # in the legend read as a copy of the reservation line)
    fig.add_shape(type="line", x0=current_block_size, x1=current_block_size, xref="x", y0=0, y1=1, yref="paper",
                  line=dict(color="#666", dash="dot", width=1.5))
    # on a log axis an annotation's x is log10 of the value (a shape's is the value itself)
    fig.add_annotation(x=math.log10(current_block_size), y=1, xref="x", yref="paper", yanchor="bottom",
                       text=f"slider: {current_block_size}", showarrow=False, font=dict(size=12, color="#444"))
    lo, hi = min(bs + [current_block_size]), max(bs + [current_block_size])
    fig.update_xaxes(type="log", title_text="block size (slots per block, log scale)",
                     range=[math.log10(lo) - 0.15, math.log10(hi) + 0.15],
                     tickvals=bs, ticktext=[str(b) for b in bs], gridcolor="#eee")
    fig.update_yaxes(title_text="slots holding a token (%)", range=[0, 100], dtick=20, secondary_y=False,
                     gridcolor="#eee")
    costs = [sweep_value(r, "cost_per_token", basis) for r in rows]
    top = cost_axis_top([c for c in costs if c is not None])
    fig.update_yaxes(title_text="slot equivalents per stored token", range=[0, top], tickmode="linear", tick0=0,
                     dtick=top / 5, secondary_y=True, showgrid=False, tickformat=_tick_format(top / 5))
    # tick labels never reach past the chart: Plotly need not measure each one to hide it
    fig.update_xaxes(ticklabeloverflow="allow")
    fig.update_yaxes(ticklabeloverflow="allow")
    fig.update_layout(height=430, margin=dict(l=60, r=60, t=40, b=40), plot_bgcolor="white",
                      legend=dict(orientation="h", yanchor="top", y=-0.18, x=0), hoverlabel=dict(font_size=14))
    return fig


def sweep_figures_json(rows_by_cost: dict, costs: list[float], current_block_size: int, reserve: dict | None = None,
                       reserve_name: str = "reserve-max") -> list[dict]:
    """:func:`sweep_figure` at each metadata cost of ``costs`` as plain JSON data (the figure's
    ``to_json``, read back), for the static site, which stores one chart per cost.

    The same runs at every cost (only the rows' :data:`COST_KEYS` differ, and no block size ran
    at one cost that did not at another): then the charts differ only in what the cost sets --
    the cost curve's points, hover totals and legend name, and the cost axis (top, tick step,
    tick format) -- so the first is drawn and those parts are written into a copy of it for each
    other cost (plotly builds a figure in about 30 ms; the default site draws 66). Any other
    difference draws that cost's chart whole. ``tests/core/test_site.py`` holds each chart to
    the one drawn directly.

    Args:
        rows_by_cost: {c: ``allocator.engine.scenario.block_size_sweep`` rows at cost c}.
        costs: the costs to draw, in order (keys of ``rows_by_cost``).
        current_block_size, reserve, reserve_name: as for :func:`sweep_figure`.

    Returns:
        One dict per cost, in ``costs``' order.
    """
    def drawn(c):
        return json.loads(sweep_figure(rows_by_cost[c], current_block_size, c, reserve, reserve_name).to_json())

    first, out = None, []
    base = rows_by_cost[costs[0]] if costs else []
    for c in costs:
        rows = rows_by_cost[c]
        if first is None or not rows or not _same_runs(rows, base):
            fig = drawn(c)
            if first is None:
                first = fig
            out.append(fig)
            continue
        basis, words = sweep_basis(rows, reserve)
        fig = copy.deepcopy(first)
        trace = fig["data"][-1]                     # the cost curve: drawn last
        trace["y"] = [sweep_value(r, "cost_per_token", basis) for r in rows]
        trace["customdata"] = [[sweep_value(r, "mean_total_cost", basis)] for r in rows]
        trace["name"] = (f"paged: cost per stored token {words}, allocated + {c:g} × blocks "
                         "(slot equivalents)")
        top = cost_axis_top([v for v in trace["y"] if v is not None])
        axis = fig["layout"]["yaxis2"]
        axis["range"], axis["dtick"], axis["tickformat"] = [0, top], top / 5, _tick_format(top / 5)
        out.append(json.loads(json.dumps(fig)))     # numbers as the JSON round trip gives them
    return out


def _same_runs(rows: list[dict], base: list[dict]) -> bool:
    """Whether two sweeps' rows describe the same runs: equal but for :data:`COST_KEYS`, each of
    those None in one exactly where it is in the other (the block sizes that did not run)."""
    if len(rows) != len(base):
        return False
    for r, b in zip(rows, base):
        if r.keys() != b.keys():
            return False
        for k, v in r.items():
            if k in COST_KEYS:
                if (v is None) != (b[k] is None):
                    return False
            elif v != b[k]:
                return False
    return True


#: Tops of the cost axis: each fifth of one is a round tick (the left axis has a gridline every fifth).
_NICE_TOPS = (1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 7.5)


def cost_axis_top(costs: list[float], clearance: float = 0.025) -> float:
    """The top of the sweep chart's cost axis: a round number between 1.1x and 3.3x the largest
    cost whose five ticks (top / 5 apart, on the left axis's gridlines) have the fewest costs
    within ``clearance`` of the axis of them -- so the cost curve does not run along a gridline --
    the smallest such top on a tie (the curve stays tall).

    Args:
        costs: the plotted costs per stored token (slot equivalents; empty: axis 0..1).
        clearance: how near a tick a cost counts as on it, as a fraction of the axis.

    Returns:
        The top (slot equivalents), one of :data:`_NICE_TOPS` times a power of ten.
    """
    if not costs:
        return 1.0
    need = max(costs) * 1.1
    if need <= 0:
        return 1.0
    scale = 10.0 ** np.floor(np.log10(need))
    candidates = [t * scale * k for k in (1, 10) for t in _NICE_TOPS if need <= t * scale * k <= 3 * need]

    def on_grid(top):
        return sum(abs(c / top * 5 - round(c / top * 5)) / 5 < clearance for c in costs)

    return float(min(candidates, key=lambda top: (on_grid(top), top)))


def _tick_format(step: float) -> str:
    """Decimals enough to print ticks ``step`` apart exactly (0.25 -> ".2f", 0.3 -> ".1f", 2 -> ".0f")."""
    for d in range(4):
        if abs(step * 10 ** d - round(step * 10 ** d)) < 1e-9:
            return f".{d}f"
    return ".3f"


def _times(value, factor):
    """``value * factor``, or None (a gap in a line) when there is no value (nothing ran)."""
    return None if value is None else value * factor
