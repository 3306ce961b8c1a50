"""Keep a chart's title and legend out of Plotly's hover toolbar (the modebar), without streamlit.

Plotly draws its toolbar over the top-right corner of every chart when the pointer is on it; at
1366 x 768 a left-aligned title or a legend above the plot reaches that corner and the buttons
cover it (eight charts and the Slot accounting legends did). :func:`clear_of_modebar` reserves a
band of :data:`MODEBAR_BAND_PX` at the top of the figure for the toolbar: the title hangs below
the band and the top margin grows until the title and a legend above the plot fit under it.
:data:`MODEBAR_CONFIG` keeps the toolbar to the few buttons a class uses, so the corner stays small.
``pages._ui.present.chart`` applies both to every page chart; the static site applies the band to its
figures too (``allocator.viz.export.site``).
"""
from __future__ import annotations

import plotly.graph_objects as go

#: Pixels at the top of a chart kept free for the toolbar (its buttons reach 28 px down; a title's box
#: starts about 5 px above its padding).
MODEBAR_BAND_PX = 36
#: Plotly config for every chart: no logo, and no selection or step-zoom buttons (zoom, pan, reset
#: and the PNG download stay).
MODEBAR_CONFIG = {"displaylogo": False,
                  "modeBarButtonsToRemove": ["select2d", "lasso2d", "zoomIn2d", "zoomOut2d", "autoScale2d"]}
#: Height of one row of a horizontal legend (px, at a 12-15 px legend font).
_LEGEND_ROW_PX = 26
#: The narrowest a page draws a chart (px): half the main column at 1366 x 768 (a legend wraps to it).
NARROWEST_CHART_PX = 440


def legend_rows(fig: go.Figure, width: int = NARROWEST_CHART_PX) -> int:
    """How many rows a horizontal legend takes in a chart ``width`` px wide (an upper estimate:
    each entry about 40 px of symbol and gap plus 7.5 px a character)."""
    names = [t.name or "" for t in fig.data if t.showlegend is not False and (t.name or t.showlegend)]
    room = width - (fig.layout.margin.l or 80) - (fig.layout.margin.r or 80)
    rows, used = 1, 0
    for name in names:
        w = 40 + 7.5 * len(name)
        if used and used + w > room:
            rows, used = rows + 1, 0
        used += w
    return rows


def legend_above(fig: go.Figure) -> bool:
    """Whether the figure draws a horizontal legend above its plot area (in the top margin)."""
    lg = fig.layout.legend
    return (fig.layout.showlegend is not False and lg.orientation == "h" and lg.y is not None and lg.y >= 1
            and lg.yanchor in (None, "auto", "bottom"))


def clear_of_modebar(fig, narrowest: int = NARROWEST_CHART_PX) -> go.Figure:
    """A copy of ``fig`` whose title and top legend stay below the toolbar's band.

    The title (if any) is anchored to the figure's top edge (``yref="container"``) with
    :data:`MODEBAR_BAND_PX` of padding above it; the top margin becomes at least the band, plus the
    title's line, plus the rows of a horizontal legend above the plot (:func:`legend_rows`, at the narrowest chart). A figure without
    a set top margin (Plotly's default, 100 px) keeps it when that is enough.

    Args:
        fig: a ``go.Figure`` or a figure dict (not modified).
        narrowest: the narrowest the chart is drawn (px), for how many rows its legend may wrap to.

    Returns:
        A new ``go.Figure`` with the same data and frames.
    """
    out = go.Figure(fig)
    layout = out.layout
    need = MODEBAR_BAND_PX
    if layout.title.text:
        size = layout.title.font.size or round(1.4 * (layout.font.size or 12))
        layout.title.update(yref="container", y=1, yanchor="top", pad=dict(t=MODEBAR_BAND_PX))
        need += round(1.6 * size)
    if legend_above(out):
        need += _LEGEND_ROW_PX * legend_rows(out, narrowest)
    top = layout.margin.t if layout.margin.t is not None else 100
    layout.margin.t = max(top, need)
    return out
