"""The arithmetic pages' figures (Slot accounting, Capacity), without streamlit: the pages and the
exported static site (``allocator.viz.export.site_lessons``) draw the same ones.

Every number drawn comes from :mod:`allocator.accounting`; these functions only lay it out.
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from allocator import accounting as acc
from allocator.accounting.kv_configs import KVVariant, ModelKV
from allocator.accounting.speculation import SpeculationRow
from allocator.common.formats import and_list
from allocator.common.mathutils import cdiv, round_up
from allocator.viz.claims.capacity import variant_label
from allocator.viz.theme import (ACCENT, DARK_HOLE, ORANGE_EMPTY, PAGED, REQUEST_COLOURS, RESERVE_MAX,
                                 SHARED_PREFIX)


def allocation_figure(lengths: list[int], reserve: acc.ReserveTally | None,
                       paged: acc.PagedTally | None) -> go.Figure:
    """Horizontal stacked bars: each request's tokens (its colour) then its empty slots (orange)."""
    rows: list[tuple[str, list[int], list[int]]] = []
    if reserve is not None:
        rows.append((f"reserve-max ({reserve.reserve} each)", lengths, reserve.unused_per_request))
    if paged is not None:
        rows.append((f"paged (block size {paged.block_size})", lengths, paged.unused_per_request))
    fig = go.Figure()
    for i, n in enumerate(lengths):
        colour = REQUEST_COLOURS[i % len(REQUEST_COLOURS)]
        for part, (name, used, unused) in enumerate(rows):
            fig.add_bar(y=[name], x=[used[i]], orientation="h", marker_color=colour,
                        name=f"request {i + 1}", legendgroup=f"r{i}", showlegend=part == 0,
                        hovertemplate=(f"request {i + 1}<br>{used[i]} tokens stored"
                                       f"<br>{name}<extra></extra>"))
            fig.add_bar(y=[name], x=[unused[i]], orientation="h", marker_color=ORANGE_EMPTY,
                        marker_line_color="white", marker_line_width=0.5,
                        name="allocated, holding nothing", legendgroup="empty", legendrank=2000,
                        showlegend=(i == 0 and part == 0),
                        hovertemplate=(f"request {i + 1}<br>{unused[i]} slots allocated, empty"
                                       f"<br>{name}<extra></extra>"))
    fig.update_layout(barmode="stack", height=130 + 60 * len(rows),
                      margin=dict(l=10, r=10, t=30, b=10),
                      xaxis_title="slots (one slot holds one token's K and V)",
                      yaxis_title="allocator", yaxis_autorange="reversed",
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0),
                      hoverlabel=dict(namelength=-1))
    return fig


def cost_figure(rows: list[acc.BlockSizeRow], used_tokens: int, c: float) -> go.Figure:
    """Stacked bars per block size: tokens + empty slots + c x blocks = total cost."""
    x = [str(r.block_size) for r in rows]
    fig = go.Figure()
    fig.add_bar(x=x, y=[used_tokens] * len(rows), name="slots holding tokens", marker_color=PAGED,
                hovertemplate="block size %{x} slots<br>%{y} slots hold tokens<extra></extra>")
    fig.add_bar(x=x, y=[r.unused_slots for r in rows], name="allocated, holding nothing",
                marker_color=ORANGE_EMPTY,
                hovertemplate="block size %{x} slots<br>%{y} slots allocated, empty<extra></extra>")
    fig.add_bar(x=x, y=[r.metadata_cost for r in rows], name=f"block metadata (c = {c:g} x blocks)",
                marker_color=ACCENT,
                customdata=[[f"{r.blocks:,}", f"{r.metadata_cost:,g}"] for r in rows],
                hovertemplate=("block size %{x} slots<br>%{customdata[0]} blocks x c = %{customdata[1]}"
                               "<extra></extra>"))
    fig.add_scatter(x=x, y=[r.total_cost for r in rows], mode="lines+markers+text",
                    name="total cost", line=dict(color=DARK_HOLE, width=2),
                    text=["" if r.ties_best else f"{r.total_cost:g}" for r in rows],
                    textposition="top center",
                    customdata=[f"{r.total_cost:,g}" for r in rows],
                    hovertemplate="block size %{x} slots<br>total cost %{customdata}<extra></extra>")
    best_at = [i for i, r in enumerate(rows) if r.ties_best]
    best = rows[best_at[0]]
    tied = [rows[i].block_size for i in best_at]
    # On a category axis a numeric position is the category's index, not its label.
    for i in best_at:
        fig.add_vrect(x0=i - 0.5, x1=i + 0.5, fillcolor=ACCENT, opacity=0.12, line_width=0, layer="below")
    top = max(r.total_cost for r in rows)
    name = (f"best: block size {best.block_size}, cost {best.total_cost:g}" if len(tied) == 1 else
            f"best (a tie): block sizes {and_list(tied)}, cost {best.total_cost:g} each")
    fig.add_scatter(x=[str(b) for b in tied], y=[best.total_cost] * len(tied), mode="markers",
                    name=name,
                    marker=dict(symbol="star", size=20, color="#000000",
                                line=dict(color="black", width=1.5)),
                    hovertemplate=("best block size %{x} slots" + (" (a tie)" if len(tied) > 1 else "")
                                   + f"<br>total cost {best.total_cost:g}<extra></extra>"))
    fig.update_layout(barmode="stack", height=380, margin=dict(l=10, r=10, t=40, b=10),
                      xaxis_title="block size (slots per block)",
                      yaxis_title="cost (token-slot equivalents)",
                      yaxis_range=[0, top * 1.18 + 1], xaxis_type="category",
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0,
                                  traceorder="normal"))
    return fig


def sharing_figure(ps: acc.PrefixSharing) -> go.Figure:
    """Both requests' slots, one heatmap: shared prefix blocks, own tokens, empty tails."""
    codes = {"shared": 0, "own": 1, "empty": 2, "none": 3}
    colours = [SHARED_PREFIX, REQUEST_COLOURS[0], ORANGE_EMPTY, "#FFFFFF"]
    width = max(round_up(n, ps.block_size) for n in (ps.length_a, ps.length_b))
    z, text = [], []
    for name, n in (("A", ps.length_a), ("B", ps.length_b)):
        alloc = round_up(n, ps.block_size)
        row_z, row_t = [], []
        for s in range(width):
            block = s // ps.block_size
            if s >= alloc:
                state, label = "none", "not allocated"
            elif block < ps.shared_blocks:
                state = "shared"
                label = f"shared prefix token {s}, stored once for A and B"
            elif s < n:
                state, label = "own", f"token {s} of request {name}"
            else:
                state, label = "empty", "allocated, holding nothing"
            row_z.append(codes[state])
            row_t.append(f"request {name}<br>block {block}, slot {s}<br>{label}")
        z.append(row_z)
        text.append(row_t)
    scale = []
    for i, col in enumerate(colours):
        scale += [[i / 4, col], [(i + 1) / 4, col]]
    fig = go.Figure(go.Heatmap(z=z, x=list(range(width)), y=["request A", "request B"],
                               zmin=-0.5, zmax=3.5, colorscale=scale, showscale=False,
                               xgap=1, ygap=6, text=text, hoverinfo="text"))
    for label, colour in (("shared full prefix block (stored once)", SHARED_PREFIX),
                          ("request's own tokens", REQUEST_COLOURS[0]),
                          ("allocated, holding nothing", ORANGE_EMPTY)):
        fig.add_scatter(x=[None], y=[None], mode="markers", name=label,
                        marker=dict(size=12, symbol="square", color=colour))
    for b in range(1, cdiv(width, ps.block_size)):
        fig.add_vline(x=b * ps.block_size - 0.5, line_color="white", line_width=4)
    fig.update_layout(height=210, margin=dict(l=10, r=10, t=40, b=10),
                      xaxis_title=f"slot (blocks of {ps.block_size})", yaxis_title="request",
                      yaxis_autorange="reversed", plot_bgcolor="white",
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0))
    return fig


def fit_figure(cap: acc.Capacity) -> go.Figure:
    """Grouped bars: sequences that fit with the memory as given and with twice as much."""
    free_label = acc.format_bytes(cap.free_bytes)
    double_label = acc.format_bytes(2 * cap.free_bytes)
    x = [f"{free_label} (as given)", f"{double_label} (twice the memory)"]
    fig = go.Figure()
    fig.add_bar(x=x, y=[cap.fit_reserve, cap.fit_reserve_double], name="reserve-max",
                marker_color=RESERVE_MAX, text=[cap.fit_reserve, cap.fit_reserve_double],
                textposition="outside",
                hovertemplate="reserve-max<br>%{x}<br>%{y} sequences fit<extra></extra>")
    fig.add_bar(x=x, y=[cap.fit_paged, cap.fit_paged_double], name="paged",
                marker_color=PAGED, text=[cap.fit_paged, cap.fit_paged_double],
                textposition="outside",
                hovertemplate="paged<br>%{x}<br>%{y} sequences fit<extra></extra>")
    top = max(cap.fit_paged_double, cap.fit_reserve_double, 1)
    fig.update_layout(barmode="group", height=330, margin=dict(l=10, r=10, t=40, b=10),
                      xaxis_title="KV-cache memory (binary GiB)",
                      yaxis_title="sequences that fit (count)", yaxis_range=[0, top * 1.15],
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0))
    return fig


def curve_figure(cap: acc.Capacity) -> go.Figure:
    """Sequences that fit as the mean length varies: reserve-max is flat, paging is not."""
    n = min(cap.max_context, 400)
    means = np.unique(np.linspace(1, cap.max_context, n).round())
    curve = acc.fit_curve(cap.bytes_per_token, cap.free_bytes, cap.max_context, cap.block_size,
                          means)
    fig = go.Figure()
    fig.add_scatter(x=curve["mean_tokens"], y=curve["fit_reserve"], mode="lines",
                    name="reserve-max", line=dict(color=RESERVE_MAX, width=3),
                    customdata=100 * curve["waste_reserve"],
                    hovertemplate=("reserve-max<br>mean %{x:.0f} tokens<br>%{y} sequences fit"
                                   "<br>%{customdata:.1f} % of reserved memory empty"
                                   "<extra></extra>"))
    fig.add_scatter(x=curve["mean_tokens"], y=curve["fit_paged"], mode="lines",
                    name=f"paged (block {cap.block_size})", line=dict(color=PAGED, width=3),
                    customdata=100 * curve["waste_paged"],
                    hovertemplate=("paged<br>mean %{x:.0f} tokens<br>%{y} sequences fit"
                                   "<br>%{customdata:.1f} % of allocated memory empty"
                                   "<extra></extra>"))
    fig.add_scatter(x=[cap.mean_tokens, cap.mean_tokens], y=[cap.fit_reserve, cap.fit_paged],
                    mode="markers", name="your mean length",
                    marker=dict(color="#FFFFFF", size=12, line=dict(color="black", width=2)),
                    customdata=[f"{cap.mean_tokens:,g}"] * 2,
                    hovertemplate="mean %{customdata} tokens<br>%{y} sequences<extra></extra>")
    fig.update_layout(height=360, margin=dict(l=10, r=10, t=40, b=10),
                      xaxis_title="mean tokens actually used per sequence (tokens)",
                      yaxis_title="sequences that fit (count, log scale)", yaxis_type="log",
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0))
    ys = np.concatenate([np.asarray(curve["fit_reserve"], float), np.asarray(curve["fit_paged"], float)])
    fig.update_yaxes(**log_ticks(ys[ys > 0]))
    return fig


def log_ticks(values: np.ndarray) -> dict:
    """Tick values (1, 2, 5 × 10^k) and labels for a log-scale axis over ``values`` (> 0) that
    bracket them: the lowest tick at or below the smallest value, the highest at or above the
    largest, and the range just past both, so no line lies below the lowest label or above the
    highest (issue 40: a flat reserve-max line at 66 sat under a lowest tick of 100).

    Returns:
        Keyword arguments for ``fig.update_yaxes``: ``tickvals``, ``ticktext`` and ``range`` (in
        log10 units, as plotly takes it for a log axis); {} for no values.
    """
    if values.size == 0:
        return {}
    lo, hi = float(values.min()), float(values.max())
    grid = [m * 10.0 ** e for e in range(int(np.floor(np.log10(lo))) - 1, int(np.ceil(np.log10(hi))) + 2)
            for m in (1, 2, 5)]
    bottom = max(t for t in grid if t <= lo * (1 + 1e-12))
    top = min(t for t in grid if t >= hi * (1 - 1e-12))
    ticks = [t for t in grid if bottom <= t <= top]
    ticks = [int(t) if t >= 1 and float(t).is_integer() else t for t in ticks]
    return {"tickvals": ticks, "ticktext": [f"{t:,g}" for t in ticks],
            "range": [np.log10(bottom) - 0.04, np.log10(top) + 0.04]}


def alternatives_figure(model: ModelKV, rows: list[KVVariant]) -> go.Figure:
    """Horizontal grouped bars: the sequences that fit for each way of caching ``model``'s K and V
    (:func:`allocator.accounting.kv_configs.kv_alternatives`), reserve-max and paged; the hover
    names the variant, its bytes per token and its bytes per sequence."""
    labels = [variant_label(model, r) for r in rows]
    fig = go.Figure()
    for name, colour, fits, per_seq in (("reserve-max", RESERVE_MAX, [r.fit_reserve for r in rows],
                                         [r.reserved_bytes for r in rows]),
                                        ("paged", PAGED, [r.fit_paged for r in rows], [r.paged_bytes for r in rows])):
        fig.add_bar(y=labels, x=fits, orientation="h", name=name, marker_color=colour, text=fits,
                    textposition="outside",
                    customdata=[[r.bytes_per_token, b] for r, b in zip(rows, per_seq)],
                    hovertemplate=(f"{name}<br>%{{y}}<br>%{{x:,}} sequences fit<br>%{{customdata[0]:,}} bytes per "
                                   "token<br>%{customdata[1]:,} bytes per sequence<extra></extra>"))
    top = max([r.fit_paged for r in rows] + [r.fit_reserve for r in rows] + [1])
    fig.update_layout(barmode="group", height=120 + 70 * len(rows), margin=dict(l=10, r=10, t=40, b=10),
                      xaxis_title="sequences that fit (count)", yaxis_title="how K and V are cached",
                      xaxis_range=[0, top * 1.2], yaxis_autorange="reversed",
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0),
                      hoverlabel=dict(namelength=-1))
    return fig


def speculation_figure(cap: acc.Capacity, rows: list[SpeculationRow], acceptance_rate: float) -> go.Figure:
    """Bars: sequences that fit the memory with k draft tokens per decode step (k lookahead slots a
    sequence), k = 0 .. 8, each bar's hover naming its blocks, its KV per sequence and the tokens a
    step yields at ``acceptance_rate`` (the model's expectation). Every number is ``rows``'
    (:func:`allocator.accounting.speculation.speculation_capacity`)."""
    fig = go.Figure()
    # two series so the two colours have a legend: k = 0 (no speculation) and k > 0
    for name, colour, part in (("paged, no speculation (k = 0)", PAGED, [r for r in rows if r.k == 0]),
                               ("paged, with k lookahead slots", ACCENT, [r for r in rows if r.k > 0])):
        if not part:
            continue
        fig.add_bar(x=[r.k for r in part], y=[r.fit for r in part], name=name, marker_color=colour,
                    text=[f"{r.fit:,}" for r in part], textposition="outside",
                    customdata=[[r.blocks, acc.format_bytes(r.bytes), r.fewer, r.tokens_per_step] for r in part],
                    hovertemplate=("k = %{x} draft tokens a step<br>%{customdata[0]} blocks of "
                                   f"{cap.block_size} slots a sequence (%{{customdata[1]}})<br>%{{y:,}} sequences "
                                   "fit, %{customdata[2]:,} fewer than k = 0<br>"
                                   f"%{{customdata[3]:.2f}} tokens a step expected at acceptance {acceptance_rate:g}"
                                   "<extra></extra>"))
    top = max([r.fit for r in rows] + [1])
    fig.update_layout(height=330, margin=dict(l=10, r=10, t=40, b=10), showlegend=True,
                      xaxis=dict(title="draft tokens per decode step, k (= lookahead slots a sequence)",
                                 tickmode="array", tickvals=[r.k for r in rows]),
                      yaxis_title="sequences that fit (count)", yaxis_range=[0, top * 1.15],
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0))
    return fig
