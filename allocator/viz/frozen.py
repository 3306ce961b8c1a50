"""A Plotly figure whose plain-dict form is computed once, and the size of a figure's JSON.

Streamlit converts a figure to a dict on every script run; for the explainer's animated figure
(:mod:`allocator.viz.explainer_chart`) that conversion dominated each rerun, so finished figures
are frozen. Used by the explainer chart, the pages' caches (which freeze the sweep chart too) and
the benchmarks.
"""
from __future__ import annotations

import json

import plotly.graph_objects as go
import plotly.io as pio

__all__ = ["FrozenFigure", "figure_json_bytes"]


class FrozenFigure(go.Figure):
    """A finished figure whose plain-dict form is computed once.

    ``st.plotly_chart`` calls ``to_dict()`` on every script run, which deep-copies and re-encodes
    every frame (about 50 ms for the explainer's 120 frames): with forty students on one server
    that dominated each rerun. ``freeze()`` stores the JSON-ready dict; later ``to_dict()`` calls
    return it. Call ``freeze()`` only when the figure is complete: changes made after it are not
    seen by ``to_dict()``.
    """

    def freeze(self) -> "FrozenFigure":
        """Compute and keep the plain-dict form (plain JSON types only); returns self."""
        self._frozen = json.loads(pio.to_json(super().to_dict(), validate=False))
        return self

    def to_dict(self) -> dict:
        """The frozen dict when ``freeze()`` was called, else plotly's usual conversion."""
        frozen = getattr(self, "_frozen", None)
        return frozen if frozen is not None else super().to_dict()


def figure_json_bytes(fig: go.Figure) -> int:
    """Size of the figure's JSON as Streamlit would send it (bytes)."""
    return len(fig.to_json())
