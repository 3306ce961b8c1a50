"""The explainer's Plotly figures under one import path (no streamlit import).

One figure family per module; the names are re-exported here so callers keep one import:

* :mod:`allocator.viz.explainer_chart` -- the animated memory maps (``explainer_figure``,
  ``time_frames``), the utilisation and running batch drawn under them (``explainer_lines_figure``)
  and their projector sizing (``for_projector``);
* :mod:`allocator.viz.sweep_chart` -- the block-size sweep (``sweep_figure``, ``cost_axis_top``);
* :mod:`allocator.viz.frozen` -- ``FrozenFigure`` (a figure converted to a dict once) and
  ``figure_json_bytes``.
"""
from __future__ import annotations

from allocator.viz.explainer_chart import (FIGURE_BUDGET_BYTES, MAX_FRAMES, PLAY_FRAME_MS, PROJECTOR_FONTS,
                                           explainer_figure, explainer_lines_figure, for_projector, time_frames)
from allocator.viz.frozen import FrozenFigure, figure_json_bytes
from allocator.viz.sweep_chart import cost_axis_top, sweep_figure

__all__ = ["FIGURE_BUDGET_BYTES", "MAX_FRAMES", "PLAY_FRAME_MS", "PROJECTOR_FONTS", "FrozenFigure", "cost_axis_top",
           "explainer_figure", "explainer_lines_figure", "figure_json_bytes", "for_projector", "sweep_figure", "time_frames"]
