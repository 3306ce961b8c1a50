"""The explainer's figures: the animated memory maps of both allocators (one animation frame per
chosen step, or moment on the seconds clock), the still figure of their utilisation and running
batch over the run drawn under them, and both with their text sized for a projector.

The lines are a figure of their own, not a row of the animated one: Plotly redraws a whole figure
for every animation frame, and the two line charts' axes and traces made each frame of ▶ Play cost
about 1.5x the maps alone (146 ms against 100 ms of script per frame in headless Chromium on the
lab's 2-core machine), which held Play at 7-9 frames/s; without them it measured 10-11.6 frames/s in
most runs (``python -m tests.tools.bench explainerbrowser``; a busy machine still reads lower).

No streamlit import, so benchmarks and tests can build it. Every number drawn here comes from
``allocator`` results (:class:`allocator.engine.result.SimulationResult`, :mod:`allocator.viz.maps`,
:class:`allocator.cost.timing.RunTiming`); this module only lays them out.
"""
from __future__ import annotations

import base64
import json

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

from allocator.viz.maps import DUPLICATE, EMPTY, FREE, HOLE, RELEASED, SHARED
from allocator.viz.maps import cell_states, frame_steps, grid_shape, slots_per_cell
from allocator.common.mathutils import cdiv
from allocator.viz.claims.explainer import lesson_key_steps
from allocator.common.formats import pct
from allocator.viz.projector import PROJECTOR_FONTS
from allocator.viz.frozen import FrozenFigure
from allocator.viz.theme import (BROWN_DUPLICATE as DUPLICATE_COLOUR, DARK_HOLE, GREY_FREE, ORANGE_EMPTY, PAGED,
                                 RELEASED as RELEASED_COLOUR, REQUEST_COLOURS, RESERVE_MAX, SHARED_PREFIX)

__all__ = ["FIGURE_BUDGET_BYTES", "MAX_FRAMES", "PLAY_FRAME_MS", "explainer_figure",
           "explainer_lines_figure", "for_projector", "time_frames"]

#: Target size of the animated figure's JSON (bytes); frames are thinned to stay under it.
FIGURE_BUDGET_BYTES = 2_800_000
MAX_FRAMES = 90
#: Text and border of the ▶ Play / ❚❚ Pause buttons: near-black, as readable as the chart's own text.
BUTTON_INK = "#222222"

#: Milliseconds between frames while ▶ Play runs (issue 24: at least 10 frames per second). Plotly starts
#: the next frame on a screen refresh (every 16.7 ms at 60 Hz) once this much time has passed, so 80 ms
#: means every 5th refresh (12 frames/s), or the 6th (10/s) when a frame's redraw takes longer (about
#: 90 ms on the lab's 2-core machine); 90 ms would already mean the 6th. The presentation keys
#: (pages/_ui/present.py) play at the same rate. Every frame redraws the whole animated figure, so it
#: holds the maps only (see the module's docstring).
PLAY_FRAME_MS = 80
#: Heights (px) of the maps figure and of the lines figure under it; on a projector each is 30 px taller.
MAPS_HEIGHT, LINES_HEIGHT = 620, 330
PROJECTOR_GROW = 30
#: Margins (px) of each figure, normal and on a projector: room above the maps for Play and the slider,
#: room under both for the axis titles and the legend, left of both for the y-axis titles. They are the
#: margins Plotly's auto-margin settles on for the default lesson in the app (Streamlit's theme and fonts;
#: read from the drawn charts in Chromium, the same at 1920 and 1366 px), given up front so that the first
#: draw is the only one. Given smaller, as they were, Plotly draws the whole figure, finds that the slider,
#: the legend and the axis titles need more room, and draws it all again: the maps alone, in a bare page
#: with Plotly's own fonts, took 91 ms to draw that way and 39 ms with their settled margins given, in
#: headless Chromium (issue 24: a fresh browser's first chart). The charts look the same to the pixel at
#: both widths, normal and presented (compared in the app); tests/browser/test_ux_browser.py checks that
#: Plotly grows none of them. Longer tick labels (a pool of millions of slots) still widen the left margin.
MARGINS = {"maps": dict(l=86, r=40, t=195, b=120), "lines": dict(l=73, r=20, t=20, b=130)}
PROJECTOR_MARGINS = {"maps": dict(l=89, r=40, t=203, b=120), "lines": dict(l=75, r=20, t=20, b=140)}
#: Where Play / Pause and the slider sit above the maps' plot area, and each figure's legend under its
#: plot area (px; projector sizes in PROJECTOR_OFFSETS).
OFFSETS = {"menus": 100.88, "slider": 106.36, "legend": 59.44, "lines_legend": 68.4}


def _paper(layout: dict, px: float) -> float:
    """``px`` pixels as a fraction of the figure's plot-area height (Plotly places menus, sliders
    and legends in those units)."""
    m = layout["margin"]
    return px / (layout["height"] - m["t"] - m["b"])


# z code -> colour (released blocks last, so the codes of every other state and of the requests stay as they were)
_CODES = [GREY_FREE, DARK_HOLE, ORANGE_EMPTY, SHARED_PREFIX, DUPLICATE_COLOUR, *REQUEST_COLOURS, RELEASED_COLOUR]
_RELEASED_CODE = len(_CODES) - 1
_ORDER = ("reserve_max", "paged")
_SERIES_COLOUR = {"reserve_max": RESERVE_MAX, "paged": PAGED}


def _colorscale() -> list:
    n = len(_CODES)
    scale = []
    for i, c in enumerate(_CODES):
        scale += [[i / n, c], [(i + 1) / n, c]]
    return scale


def _codes(owner: np.ndarray, state: np.ndarray) -> np.ndarray:
    """Heatmap z codes: 0 free, 1 hole, 2 allocated-empty, 3 shared prefix, 4 duplicate copy of the
    shared prompt, 5+ token of a request (id mod palette), the last code a block released behind a
    sliding window."""
    return np.select([state == FREE, state == HOLE, state == EMPTY, state == SHARED, state == DUPLICATE,
                      state == RELEASED], [0, 1, 2, 3, 4, _RELEASED_CODE],
                     default=5 + np.maximum(owner, 0) % len(REQUEST_COLOURS))


def _typed(arr: np.ndarray) -> dict:
    """A numpy array as plotly.js's typed-array spec (base64): compact JSON, and plotly.py keeps it
    as one string instead of copying it element by element."""
    kinds = {np.dtype(np.int8): "i1", np.dtype(np.uint8): "u1", np.dtype(np.int16): "i2", np.dtype(np.int32): "i4",
             np.dtype(np.float32): "f4", np.dtype(np.float64): "f8"}
    arr = np.ascontiguousarray(arr)
    return {"dtype": kinds[arr.dtype], "bdata": base64.b64encode(arr.tobytes()).decode("ascii"),
            "shape": ", ".join(str(n) for n in arr.shape)}


def _grid(values: np.ndarray, rows: int, cols: int, fill):
    pad = rows * cols - len(values)
    if pad:
        values = np.concatenate([values, np.full(pad, fill, dtype=values.dtype)])
    return values.reshape(rows, cols)


def _frame_text(res, step: int) -> str:
    """The readout above a map at ``step`` (every number read from the record covering it)."""
    m = res.metrics
    total = res.total_slots
    if step >= res.steps:
        finished = int(m["finished"][-1]) if res.records else 0
        return (f"<b>{res.label}</b> · drained after {res.steps:,} steps<br>"
                f"{finished} finished · {len(res.rejected)} rejected")
    r = res.record_index(step)
    title = res.label + (f" (block {res.block_size})" if res.block_size else "")
    preempted = int((m["preemptions"][:r + 1] * m["span"][:r + 1]).sum())
    idle = (f"<br>idle: nothing runs or waits for {int(m['span'][r]):,} steps (to step "
            f"{int(m['step'][r] + m['span'][r]):,})" if m["span"][r] > 1 else "")
    return (f"<b>{title}</b> · end of step {step:,}: {pct(float(m['utilization'][r]))} of slots hold a token<br>"
            f"reserved for tokens to come {pct(m['reserved_slots'][r] / total)} · "
            f"never written {pct(m['internal_fragmentation'][r] / total)} · "
            f"external frag {pct(m['external_fragmentation'][r] / total)}"
            # with a shared prompt the maps draw duplicate copies (brown): the readout gives their share too
            + (f" · duplicate copies {pct(m['duplicate_slots'][r] / total)}" if res.shared_prefix else "")
            + "<br>"
            + f"{int(m['running'][r])} computed a token · {int(m['waiting'][r])} waiting · "
            f"{int(m['finished'][r])} finished · {preempted} preempted so far"
            + (f"<br>{int(m['logical_tokens'][r]):,} logical tokens in {int(m['used_slots'][r]):,} "
               f"distinct slots (shared prefix)" if res.shared_prefix and res.block_size else "")
            + _released_line(res, int(m["step"][r]))
            + idle)


def _released_line(res, start: int) -> str:
    """A sliding-window run's readout line: the blocks released behind the window that are still
    free in the picture of the record starting at ``start`` (the violet blocks); "" otherwise."""
    if res.window is None or not res.snapshots or start not in res.snapshots:
        return ""
    n = sum(len(e[2]) for e in res.snapshots[start] if e[0] == -1)
    return (f"<br>violet: {n:,} block{'' if n == 1 else 's'} released behind the "
            f"{res.window['sliding_window']:,}-token window, not yet reused")


def _series(res, name: str, scale: float = 1.0, timing=None) -> tuple[np.ndarray, np.ndarray]:
    """A metric as a step-wise line: x = each record's first step plus the end of the run (or, with
    ``timing``, each record's start and the run's end in seconds), y = the record's value
    (repeated at the end so the last record is drawn to its end)."""
    if not res.records:
        return np.zeros(0, np.int64), np.zeros(0)
    y = res.metrics[name] * scale
    if timing is not None:
        return np.append(timing.start_s, timing.makespan_s), np.append(y, y[-1:])
    return np.append(res.metrics["step"], res.steps), np.append(y, y[-1:])


def time_frames(results: dict, timings: dict, max_frames: int, include_steps=()) -> list[tuple[float, dict]]:
    """Animation frames on the seconds clock: (time, {kind: engine step shown}) pairs.

    Each allocator's run has its own clock (the same step takes different seconds in each), so a
    frame is a moment in seconds and each map shows the step its run was in at that moment: the
    latest step at or before it that has a picture, or the drained pool after its run ended.
    Candidate moments are the starts of every record of either run that has a picture, spread
    evenly by record as :func:`allocator.viz.maps.frame_steps` does; ``include_steps`` (steps a text
    quotes) add each run's start of that step.
    """
    cands, starts = [], {}
    for key, res in results.items():
        t = timings[key]
        has = res.metrics["step"] % res.snapshot_stride == 0 if res.records else np.zeros(0, bool)
        starts[key] = (t.start_s[has], res.metrics["step"][has])
        cands.append(t.start_s[has])
    moments = np.unique(np.concatenate(cands + [np.zeros(1)]))
    k = max(2, min(int(max_frames), len(moments)))
    picks = moments[np.unique(np.linspace(0, len(moments) - 1, k).round().astype(np.int64))]
    extra = [timings[key].time_at(step) for key, res in results.items() for step in include_steps if step < res.steps]
    picks = np.unique(np.concatenate([picks, np.asarray(extra, dtype=float)]))
    frames = []
    for moment in picks:
        shown = {}
        for key, res in results.items():
            times, steps = starts[key]
            if moment >= timings[key].makespan_s or not len(steps):
                shown[key] = res.steps                     # drained: the empty pool
            else:
                i = int(np.searchsorted(times, moment + 1e-12, side="right") - 1)
                shown[key] = int(steps[max(i, 0)])
        frames.append((float(moment), shown))
    return frames


def explainer_figure(results: dict, *, max_frames: int = MAX_FRAMES, budget_bytes: int = FIGURE_BUDGET_BYTES,
                     timings: dict | None = None) -> go.Figure:
    """Animated memory maps of both allocators, side by side, with a readout above each.

    Args:
        results: {"reserve_max": SimulationResult, "paged": SimulationResult} with snapshots.
        max_frames: most animation frames (they play client-side: Plotly frames, no server trip).
        budget_bytes: frames are thinned so the figure's JSON stays under this many bytes.
        timings: None for a time axis in engine steps (frames named by step); or {kind:
            :class:`allocator.cost.timing.RunTiming`} of the same runs for a time axis in seconds:
            frames are moments (named by their seconds, see :func:`time_frames`), each map shows
            its own run's step at that moment and its readout names both.

    Returns:
        A Plotly figure: the two maps (heatmaps, one cell per slot or per group of slots), a readout
        per map of the frame's step (or moment), ▶ Play / ❚❚ Pause and a step slider. Utilisation and
        the running batch over the run are :func:`explainer_lines_figure`'s, drawn under it.
    """
    total = results["paged"].total_slots
    block = results["paged"].block_size
    per_cell = slots_per_cell(total, block_size=block)
    n_cells = cdiv(total, per_cell)
    rows, cols = grid_shape(n_cells)
    n_steps = max(r.steps for r in results.values())
    xs = np.arange(cols) * per_cell
    ys = np.arange(rows) * cols * per_cell
    starts = np.arange(n_cells) * per_cell
    ends = np.minimum(starts + per_cell, total) - 1
    if per_cell == 1:
        where = [f"slot {s:,}" for s in starts]
    else:
        where = [f"slots {s:,}–{e:,}" for s, e in zip(starts, ends)]
    in_blocks = (total // block) * block

    def block_label(s, e):
        if s >= in_blocks:
            return "remainder (no block)"
        first, last = s // block, min(e, in_blocks - 1) // block
        return f"block {first:,}" if first == last else f"blocks {first:,}–{last:,}"

    text = {"reserve_max": _grid(np.array(where, dtype=object), rows, cols, ""),
            "paged": _grid(np.array([f"{w} · {block_label(s, e)}" for w, s, e in zip(where, starts, ends)],
                                    dtype=object), rows, cols, "")}
    padded = rows * cols != n_cells
    ztype = np.float32 if padded else np.int8

    def map_arrays(step):
        out = {}
        for key in _ORDER:
            owner, state = cell_states(results[key], step[key] if isinstance(step, dict) else step, per_cell)
            z = _grid(_codes(owner, state).astype(ztype), rows, cols, np.nan if padded else 0)
            # owner ids are >= 1, so 0 means "no request" (and base64 of small values needs no escaping);
            # one byte per cell while the ids fit (every 40-request lesson): the browser parses half as much
            top = owner.max()
            held = np.maximum(owner, 0).astype(np.uint8 if top < 256 else np.int16 if top < 32768 else np.int32)
            out[key] = (_typed(z), _typed(_grid(held, rows, cols, 0)))
        return out

    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.06)
    first = map_arrays(0)
    n_codes = len(_CODES)
    for c, key in enumerate(_ORDER, start=1):
        z, labels = first[key]
        fig.add_trace(go.Heatmap(
            z=z, x=xs, y=ys, customdata=labels, text=text[key], zmin=-0.5, zmax=n_codes - 0.5,
            colorscale=_colorscale(), showscale=False, xgap=1 if per_cell == 1 and cols <= 64 else 0,
            ygap=1 if rows <= 64 else 0,
            hovertemplate=("<b>%{text}</b><br>held by request %{customdata} (0 = none)<extra>"
                           + results[key].label + "</extra>"),
            name=results[key].label), row=1, col=c)
    # legend entries for the map colours
    legend = [("slot holds a token (colour = request)", REQUEST_COLOURS[0]),
              ("allocated, holding nothing", ORANGE_EMPTY), ("free", GREY_FREE),
              ("free but unusable hole", DARK_HOLE)]
    if results["paged"].shared_prefix:
        legend.insert(1, ("shared system-prompt block (one copy, many block tables)", SHARED_PREFIX))
        legend.insert(2, ("duplicate copy of the shared prompt", DUPLICATE_COLOUR))
    if results["paged"].window is not None:
        legend.append(("free again: released behind the sliding window", RELEASED_COLOUR))
    for name, colour in legend:
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name,
                                 marker=dict(symbol="square", size=14, color=colour,
                                             line=dict(color="#888", width=1)), hoverinfo="skip"))

    def annotations(step, moment=None):
        def text(key):
            shown = step[key] if isinstance(step, dict) else step
            out = _frame_text(results[key], shown)
            if moment is not None:
                if shown >= results[key].steps:
                    out = out.replace(" steps<br>", f" steps ({timings[key].makespan_s:,.2f} s)<br>", 1)
                else:
                    out = out.replace(" · end of step ", f" · {moment:,.2f} s, end of step ", 1)
            return out
        return [dict(text=text(key), xref=f"x{'' if c == 1 else c} domain",
                     yref=f"y{'' if c == 1 else c} domain", x=0, y=1.02, xanchor="left", yanchor="bottom",
                     showarrow=False, align="left", font=dict(size=13, color="#222222"))
                for c, key in enumerate(_ORDER, start=1)]

    # Frames are plain dicts, sent as built (FrozenFigure.with_plain_frames validates them only when read).
    def frame(step, arrays, moment=None):
        if moment is None:
            name, layout = str(int(step)), dict(annotations=annotations(int(step)))
        else:
            name, layout = f"{moment:.4f}", dict(annotations=annotations(step, moment))
        return dict(name=name, traces=[0, 1],
                    data=[dict(type="heatmap", z=arrays[k][0], customdata=arrays[k][1]) for k in _ORDER],
                    layout=layout)

    # Measure the bytes of the figure without frames and of one frame, then thin the frames to fit.
    base_dict = fig.to_dict()
    base = len(pio.to_json(base_dict, validate=False))
    # probe the busiest drawable step (the longest labels): where the paged pool held the most sequences
    candidates = frame_steps(results.values(), max(2, n_steps))
    paged = results["paged"].metrics
    at = np.searchsorted(paged["step"], candidates, side="right") - 1
    running = np.where((at >= 0) & (candidates < results["paged"].steps), paged["running"][np.maximum(at, 0)]
                       if len(paged["running"]) else 0, 0)
    busy = int(candidates[int(np.argmax(running))])
    per_frame = len(pio.to_json(frame(busy, map_arrays(busy)), validate=False))
    fit = max(2, int((budget_bytes - base) // max(1, per_frame * 1.12)))
    if timings:
        moments = time_frames(results, timings, min(max_frames, fit), include_steps=lesson_key_steps(results))
        frames = [frame(shown, map_arrays(shown), moment) for moment, shown in moments]
        labels = [f"{moment:,.2f} s" for moment, _ in moments]
    else:
        steps_shown = frame_steps(results.values(), min(max_frames, fit), include=lesson_key_steps(results))
        frames = [frame(step, first if step == 0 else map_arrays(int(step))) for step in steps_shown]
        labels = [f["name"] for f in frames]

    play = dict(label="▶ Play", method="animate",
                args=[None, {"frame": {"duration": PLAY_FRAME_MS, "redraw": True}, "fromcurrent": True,
                             "transition": {"duration": 0}}])
    pause = dict(label="❚❚ Pause", method="animate",
                 args=[[None], {"frame": {"duration": 0, "redraw": False}, "mode": "immediate",
                                "transition": {"duration": 0}}])
    slider_steps = [dict(method="animate", label=label,
                         args=[[f["name"]], {"frame": {"duration": 0, "redraw": True}, "mode": "immediate",
                                          "transition": {"duration": 0}}]) for f, label in zip(frames, labels)]
    slot_unit = "1 slot" if per_cell == 1 else f"{per_cell} slots"
    for c in (1, 2):
        # ticklabeloverflow="allow": no tick label reaches past the figure, so Plotly need not measure
        # each one to hide it (a cost on every redraw, every frame of Play included)
        fig.update_xaxes(title_text=f"offset within row (slots; one cell = {slot_unit})", row=1, col=c,
                         showgrid=False, zeroline=False, ticklabeloverflow="allow")
        fig.update_yaxes(title_text="row start (slot)" if c == 1 else None, autorange="reversed", row=1, col=c,
                         showgrid=False, zeroline=False, ticklabeloverflow="allow")
    base_dict["layout"] = fig.layout
    fig = FrozenFigure.with_plain_frames(base_dict, frames)
    # r=40: a readout starts at its map's left edge; the right one needs room past its map at 1366 px
    size = dict(height=MAPS_HEIGHT, margin=dict(MARGINS["maps"]))
    fig.update_layout(
        **size, plot_bgcolor="white",
        annotations=(annotations({k: 0 for k in _ORDER}, 0.0) if timings else annotations(0)),
        legend=dict(orientation="h", yanchor="top", y=-_paper(size, OFFSETS["legend"]), x=0, font=dict(size=13)),
        updatemenus=[dict(type="buttons", direction="left", buttons=[play, pause], x=0,
                          y=1 + _paper(size, OFFSETS["menus"]),
                          xanchor="left", yanchor="bottom", showactive=False, pad=dict(r=8, t=0),
                          # plotly's default pale grey text on a pale fill read as disabled on a
                          # projector: dark text, white fill and a dark border, like Streamlit's buttons
                          font=dict(size=14, color=BUTTON_INK), bgcolor="#FFFFFF",
                          bordercolor=BUTTON_INK, borderwidth=1)],
        # one tick per frame; their labels would run into each other, so the frame's step is shown
        # once, as the slider's current value, and the tick labels are left transparent
        sliders=[dict(active=0, steps=slider_steps, x=0.17, len=0.83, y=1 + _paper(size, OFFSETS["slider"]),
                      yanchor="bottom",
                      font=dict(color="rgba(0,0,0,0)"),
                      currentvalue=dict(prefix=(f"time ({next(iter(timings.values())).cost.short_name}) "
                                                if timings else "engine step "),
                                        font=dict(size=14, color="#333333")),
                      pad=dict(t=0, b=0))],
        hoverlabel=dict(font_size=14),
    )
    return fig


def explainer_lines_figure(results: dict, *, timings: dict | None = None) -> go.Figure:
    """Utilisation and the running batch of both allocators over the whole run (no animation).

    Drawn under :func:`explainer_figure`'s maps, against the same clock.

    Args:
        results: {"reserve_max": SimulationResult, "paged": SimulationResult}.
        timings: None for a time axis in engine steps; or {kind: :class:`allocator.cost.timing.RunTiming`}
            of the same runs for a time axis in seconds.

    Returns:
        A Plotly figure: left, the share of slots holding a token (%), right, the sequences running,
        one step-wise line per allocator, one point per record (an idle gap is one flat stretch).
    """
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.06)
    since = "from %{x:.2f} s" if timings else "from step %{x}"
    for key in _ORDER:
        res = results[key]
        timing = timings[key] if timings else None
        x, y = _series(res, "utilization", 100, timing)
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", line_shape="hv",
                                 name=f"{res.label}: utilisation", line=dict(color=_SERIES_COLOUR[key]),
                                 legendgroup=key,
                                 hovertemplate=since + "<br>%{y:.1f} % of slots hold a token<extra>"
                                               + res.label + "</extra>"), row=1, col=1)
        x, y = _series(res, "running", 1.0, timing)
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", line_shape="hv",
                                 name=f"{res.label}: running", legendgroup=key,
                                 line=dict(color=_SERIES_COLOUR[key], dash="dot"),
                                 hovertemplate=since + "<br>%{y} sequences running<extra>"
                                               + res.label + "</extra>"), row=1, col=2)
    if timings:
        cost = next(iter(timings.values())).cost
        clock = f"{cost.label} ({cost.short_name})"
        end_s = max(t.makespan_s for t in timings.values())
        for c in (1, 2):
            fig.update_xaxes(title_text=f"time (s), {clock}", row=1, col=c, range=[0, end_s], gridcolor="#eee")
    else:
        n_steps = max(r.steps for r in results.values())
        for c in (1, 2):
            fig.update_xaxes(title_text="engine step", row=1, col=c, range=[0, n_steps], gridcolor="#eee")
    fig.update_yaxes(title_text="slots holding a token (%)", range=[0, 102], row=1, col=1, gridcolor="#eee")
    fig.update_yaxes(title_text="sequences running", rangemode="tozero", row=1, col=2, gridcolor="#eee")
    fig.update_xaxes(ticklabeloverflow="allow")          # as the maps' axes
    fig.update_yaxes(ticklabeloverflow="allow")
    size = dict(height=LINES_HEIGHT, margin=dict(MARGINS["lines"]))
    fig.update_layout(**size, plot_bgcolor="white",
                      legend=dict(orientation="h", yanchor="top", y=-_paper(size, OFFSETS["lines_legend"]), x=0,
                                  font=dict(size=13)),
                      hoverlabel=dict(font_size=14))
    return FrozenFigure(fig)


#: OFFSETS on a projector (px, from the plot area PROJECTOR_MARGINS leave): the larger readouts and
#: buttons need a taller top margin, and the maps a little more room.
PROJECTOR_OFFSETS = {"menus": 95.58, "slider": 101.45, "legend": 60.37, "lines_legend": 72.0}


def for_projector(fig: "FrozenFigure") -> "FrozenFigure":
    """An explainer figure with text sized for the back row of a classroom (presentation mode).

    Plotly lays out larger text itself, so nothing overlaps (enlarging it with page CSS would not
    move anything); the figure grows by the room the larger text needs. The frames share the
    original's data; only layouts are copied.

    Args:
        fig: a figure ``explainer_figure`` or ``explainer_lines_figure`` returned (frozen or not).

    Returns:
        A new, frozen FrozenFigure.
    """
    d = fig.to_dict()
    f = PROJECTOR_FONTS

    def readouts(annotations):
        return [dict(a, font=dict(a.get("font", {}), size=f["readout"])) for a in annotations]

    layout = json.loads(json.dumps(d["layout"]))
    layout["font"] = dict(layout.get("font", {}), size=f["base"])
    layout["annotations"] = readouts(layout.get("annotations", []))
    kind = "maps" if layout.get("updatemenus") else "lines"     # the maps: room above for Play and the slider
    layout["margin"] = dict(PROJECTOR_MARGINS[kind])
    layout["height"] = layout["height"] + PROJECTOR_GROW
    at = PROJECTOR_OFFSETS
    layout["legend"] = dict(layout.get("legend", {}), font=dict(size=f["legend"]),
                            y=-_paper(layout, at["legend" if kind == "maps" else "lines_legend"]))
    for key, axis in layout.items():
        if key.startswith(("xaxis", "yaxis")) and isinstance(axis, dict):
            axis["tickfont"] = dict(size=f["ticks"])
            if isinstance(axis.get("title"), dict):
                axis["title"] = dict(axis["title"], font=dict(size=f["axis_title"]))
    for menu in layout.get("updatemenus", []):
        menu["font"] = dict(menu.get("font", {}), size=f["buttons"])    # keeps the dark ink
        menu["y"] = 1 + _paper(layout, at["menus"])
    for slider in layout.get("sliders", []):
        slider["currentvalue"] = dict(slider.get("currentvalue", {}), font=dict(size=f["current"], color="#333333"))
        slider["y"] = 1 + _paper(layout, at["slider"])
    frames = [dict(fr, layout=dict(fr.get("layout", {}),
                                   annotations=readouts(fr.get("layout", {}).get("annotations", []))))
              for fr in d.get("frames", [])]
    if "datarevision" in layout:  # another figure: Plotly must not take it for the original (FrozenFigure.freeze)
        layout["datarevision"] = f"{layout['datarevision']}-projector"
    out = FrozenFigure()          # not re-validated: the original was, and only sizes changed
    out._frozen = dict(data=d["data"], layout=layout, frames=frames)
    return out
