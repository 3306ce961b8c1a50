"""Any chart's text sized for the back row of a classroom (presentation mode), without streamlit.

Plotly's defaults (12 px text, 10-11 px ticks, legends and subplot titles) are readable on a laptop
and not from the back of a room. :func:`for_the_back_row` returns a copy of a figure with every
piece of text at :data:`PROJECTOR_FONTS` sizes at least, and the figure as much taller as its
larger text needs; Plotly lays the larger text out itself (automargins), so nothing is drawn over.
The explainer's animated maps have their own, pixel-placed form
(:func:`allocator.viz.explainer_chart.for_projector`), with the same sizes.
"""
from __future__ import annotations

import re

import plotly.graph_objects as go

_INLINE_SIZE = re.compile(r"font-size:\s*(\d+(?:\.\d+)?)px")

#: Text sizes (px) on a projector: the page's own prose grows by about the same factor (presentation
#: mode's CSS in pages/_ui/present.py).
PROJECTOR_FONTS = {"base": 15, "readout": 16, "legend": 15, "axis_title": 15, "ticks": 13, "current": 20,
                   "buttons": 16, "title": 19}
#: How much taller a chart grows on a projector (its text is about 1.3x larger).
PROJECTOR_HEIGHT_FACTOR = 1.15


def for_the_back_row(fig: go.Figure) -> go.Figure:
    """A copy of ``fig`` whose text is at least :data:`PROJECTOR_FONTS`'s sizes: the base font, the
    title, every axis's title and ticks, the legend, hover labels, every annotation (subplot
    titles are annotations) and the words of every text trace, with any size written inline in
    their HTML scaled alike. A size already larger is kept. The height grows by
    :data:`PROJECTOR_HEIGHT_FACTOR` when the figure sets one.

    Args:
        fig: any Plotly figure (not modified).

    Returns:
        A new ``go.Figure`` with the same data and frames.
    """
    f = PROJECTOR_FONTS
    out = go.Figure(fig)

    def at_least(size, floor):
        return max(size or 0, floor)

    layout = out.layout
    layout.font.size = at_least(layout.font.size, f["base"])
    layout.title.font.size = at_least(layout.title.font.size, f["title"])
    layout.legend.font.size = at_least(layout.legend.font.size, f["legend"])
    layout.legend.title.font.size = at_least(layout.legend.title.font.size, f["legend"])
    layout.hoverlabel.font.size = at_least(layout.hoverlabel.font.size, f["base"])
    out.for_each_xaxis(lambda ax: ax.update(title_font_size=at_least(ax.title.font.size, f["axis_title"]),
                                            tickfont_size=at_least(ax.tickfont.size, f["ticks"])))
    out.for_each_yaxis(lambda ax: ax.update(title_font_size=at_least(ax.title.font.size, f["axis_title"]),
                                            tickfont_size=at_least(ax.tickfont.size, f["ticks"])))
    for a in layout.annotations:
        a.font.size = at_least(a.font.size, f["base"])
    # words drawn on the plot (a text trace: the Block tables page's boxes), and any size written
    # inline in their HTML (``<span style='font-size:10px'>``), grow by the same factor
    for tr in out.data:
        if "text" in (getattr(tr, "mode", None) or "") and getattr(tr, "text", None) is not None:
            old = tr.textfont.size or 12
            size = at_least(old, f["base"])
            k = size / old
            tr.textfont.size = size
            if k > 1 and not isinstance(tr.text, str):
                tr.text = [_INLINE_SIZE.sub(lambda m: f"font-size:{max(round(float(m.group(1)) * k), f['ticks'] + 1)}px", t)
                           if isinstance(t, str) else t for t in tr.text]
    if layout.height:
        layout.height = round(layout.height * PROJECTOR_HEIGHT_FACTOR)
    return out
