"""Figures and sentences of the "Prefix cache on a real trace" page (plotly; no streamlit).

Every number drawn or quoted comes from :mod:`allocator.studies.prefix_cache` results.
"""
from __future__ import annotations


import numpy as np
import pandas as pd
import plotly.graph_objects as go

from allocator.common.mathutils import cdiv
from allocator.viz.maps import (MAP_BLOCK_CACHED, MAP_BLOCK_FREE, MAP_BLOCK_PRIVATE, MAP_BLOCK_SHARED, block_picture,
                                grid_shape)
from allocator.common.formats import pct, plural, seconds
from allocator.viz.theme import CACHED, GREY_FREE, PAGED, REQUEST_COLOURS, RESERVE_MAX, SHARED_PREFIX

#: Block map colours: free, cached, private, shared (private blocks in the first request blue).
BLOCK_COLOURS = {MAP_BLOCK_FREE: GREY_FREE, MAP_BLOCK_CACHED: CACHED, MAP_BLOCK_PRIVATE: REQUEST_COLOURS[0],
                 MAP_BLOCK_SHARED: SHARED_PREFIX}
BLOCK_LABELS = {MAP_BLOCK_FREE: "free", MAP_BLOCK_CACHED: "cached: no sequence holds it, the prefix cache keeps it",
                MAP_BLOCK_PRIVATE: "private: one sequence's block table", MAP_BLOCK_SHARED: "shared: several block tables"}
#: The dotted line of the other block size: a neutral grey, well apart from the blue of the chosen one.
COMPARE = "#888888"
#: Most cells a block map draws; larger pools draw groups of blocks (the state most of them are in).
MAX_MAP_CELLS = 12_288


def _short(n: int) -> str:
    """1234 -> "1.2k", 672682 -> "673k", 1500000 -> "1.5M" (tick labels)."""
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if n >= size:
            v = n / size
            return f"{v:.0f}{unit}" if v >= 100 else f"{v:.3g}{unit}"
    return str(n)


def _curve_traces(sweep, name: str, colour: str) -> list[go.Scatter]:
    """One sweep's one-pass curve as lines of hit rate (%) against pool size (slots): solid where
    the figures are the engine's own (pools of at least ``sweep.exact_from`` blocks), dotted
    below, where they are the LRU model's (everywhere, when the replay registered duplicate blocks:
    ``PoolSweep.exact_from`` None); plus a marker at each pool of the sweep's table."""
    c, bs, peak = sweep.curve, sweep.block_size, sweep.peak_in_use
    blocks = np.asarray(c["pool_blocks"])
    custom = np.stack([blocks, blocks / sweep.distinct_blocks, np.asarray(c["prefill_tokens_saved"]),
                       np.asarray(c["cached_block_evictions"])], axis=1)
    hover = (f"{bs}-slot blocks: a pool of %{{customdata[0]:,}} blocks (%{{x:,}} slots, %{{customdata[1]:.2f}}× "
             "the window's distinct prompt blocks)<br>hit rate %{y:.1f} % of prompt tokens ({whose})<br>prefill "
             "saved %{customdata[2]:,} tokens<br>cached blocks evicted %{customdata[3]:,}<extra></extra>")
    exact = blocks >= peak if sweep.exact_from is not None else np.zeros(len(blocks), dtype=bool)
    below = blocks <= (blocks[exact][0] if exact.any() else blocks[-1])     # the dotted part meets the solid
    traces = []
    if (~exact).any():
        traces.append(go.Scatter(
            x=(blocks[below] * bs).tolist(), y=(100 * np.asarray(c["hit_rate"])[below]).tolist(),
            customdata=custom[below].tolist(), mode="lines",
            name=(f"{name}: the LRU model's, below {peak:,} blocks" if exact.any()
                  else f"{name}: the LRU model's"), line=dict(color=colour, dash="dot", width=2),
            hovertemplate=hover.replace("{whose}", "the LRU model's: the engine would delay or preempt requests "
                                                   "in a pool this small" if exact.any() else
                                        "the LRU model's: a block hash named several cached blocks in the replay")))
    if exact.any():
        traces.append(go.Scatter(
            x=(blocks[exact] * bs).tolist(), y=(100 * np.asarray(c["hit_rate"])[exact]).tolist(),
            customdata=custom[exact].tolist(), mode="lines",
            name=name, line=dict(color=colour, width=3),
            hovertemplate=hover.replace("{whose}", "the engine's own: the pool holds every running request")))
    rows = sweep.rows
    traces.append(go.Scatter(
        x=[r["pool_slots"] for r in rows], y=[100 * (r["hit_rate"] or 0) for r in rows], mode="markers",
        marker=dict(color=colour, size=8), showlegend=False, name=f"{name}: the table's pools",
        customdata=[[r["pool_blocks"], r["fraction"], r["prefill_tokens_saved"], r["cached_block_evictions"]]
                    for r in rows],
        hovertemplate=hover.replace("{whose}", "a row of the table")))
    return traces


def hit_rate_figure(sweep, trace_stat: dict, chosen_blocks: int | None = None, compare=None) -> go.Figure:
    """Prefix-cache hit rate (% of prompt tokens) against pool size in slots, with the trace's
    own count (an unbounded cache of 512-token blocks).

    Args:
        sweep: :class:`allocator.studies.prefix_cache.PoolSweep` of the chosen block size (its one-pass
            curve is drawn, solid where it is the engine's figure and dotted where the model's).
        trace_stat: :func:`allocator.studies.prefix_cache.trace_hit_statistic` with engine rules.
        chosen_blocks: the pool (blocks of ``sweep.block_size``) the map below uses (marked), or None.
        compare: another block size's sweep of the same window (drawn in grey), or None.
    """
    rows = sweep.rows
    fig = go.Figure()
    for t in _curve_traces(sweep, f"{sweep.block_size}-slot blocks", PAGED):
        fig.add_trace(t)
    x = list(np.asarray(sweep.curve["pool_blocks"]) * sweep.block_size)
    y = list(100 * np.asarray(sweep.curve["hit_rate"]))
    if compare is not None and compare.block_size != sweep.block_size:
        for t in _curve_traces(compare, f"{compare.block_size}-slot blocks (the trace's size)", COMPARE):
            fig.add_trace(t)
        x += list(np.asarray(compare.curve["pool_blocks"]) * compare.block_size)
        y += list(100 * np.asarray(compare.curve["hit_rate"]))
    ref = 100 * trace_stat["token_hit_rate"]
    fig.add_trace(go.Scatter(
        x=[min(x), max(x)], y=[ref, ref], mode="lines", line=dict(color=RESERVE_MAX, dash="dash"),
        name="the trace's own count: unbounded cache of 512-token blocks",
        hovertemplate=f"counted from the trace's block ids: {ref:.1f} % of prompt tokens<extra></extra>"))
    if chosen_blocks:
        chosen = next((r for r in rows if r["pool_blocks"] == chosen_blocks), None)
        if chosen:
            fig.add_trace(go.Scatter(x=[chosen["pool_slots"]], y=[100 * (chosen["hit_rate"] or 0)], mode="markers",
                                     marker=dict(size=15, color=PAGED, symbol="diamond",
                                                 line=dict(color=RESERVE_MAX, width=2)),
                                     name="the pool of the map below", hoverinfo="skip"))
    top = max(y + [ref])
    ticks = [r["pool_slots"] for r in rows]
    fig.update_layout(title=f"Prefix-cache hit rate against pool size ({sweep.block_size}-slot blocks)",
                      xaxis=dict(title="pool size (slots = tokens of KV, log scale)", type="log", tickvals=ticks,
                                 ticktext=[_short(v) for v in ticks]),
                      yaxis=dict(title="prompt tokens found in the cache (%)", range=[0, max(5.0, top * 1.15)]),
                      legend=dict(orientation="h", y=-0.25), height=440, margin=dict(t=50, b=10))
    return fig


def _why_model(sweep, pool_blocks: int | None = None) -> str:
    """Why a row of ``sweep`` is the LRU model's figure, not the engine's (plain words, numbers
    from the sweep): duplicate blocks in the replay, or a pool smaller than the running requests'
    peak (``allocator.studies.prefix_cache.pool_sweep``)."""
    if sweep.duplicate_blocks:
        return (f"the replay computed {plural(sweep.duplicate_blocks, 'block')} again while an identical one was "
                "cached, so a block hash named several blocks, and a smaller pool may keep a copy the replay "
                "did not find")
    held = f"the running requests alone held up to {sweep.peak_in_use:,} blocks at once"
    if pool_blocks is None:
        return held + ", more than this pool holds, so the engine would delay or preempt some"
    return held + (", so in a pool this small the engine would delay or preempt some of them and may find a "
                   "little less")


def sweep_table(sweep):
    """The sweep's rows as a table (pandas DataFrame, one row per pool size; units in the headers).
    The last column says whose figure each row is: the engine's own (the pool holds every running
    request, so the engine's run gives exactly these) or the LRU model's."""
    return pd.DataFrame({
        "pool (blocks)": [r["pool_blocks"] for r in sweep.rows],
        "pool (slots)": [r["pool_slots"] for r in sweep.rows],
        "× distinct prompt blocks": [round(r["fraction"], 2) for r in sweep.rows],
        "hit rate (% of prompt tokens)": [round(100 * (r["hit_rate"] or 0), 1) for r in sweep.rows],
        "prefill saved (tokens)": [r["prefill_tokens_saved"] for r in sweep.rows],
        "cached blocks evicted": [r["cached_block_evictions"] for r in sweep.rows],
        "figure": ["engine's (exact)" if r["exact"] else "LRU model's" for r in sweep.rows],
    })


def block_map_figure(snapshot, num_blocks: int, step: int, block_size: int) -> go.Figure:
    """The pool at one step, one cell per block (or per group of blocks in a large pool):
    free, cached, private and shared blocks in their own colours."""
    state, owner, refs = block_picture(snapshot, num_blocks)
    per = max(1, cdiv(num_blocks, MAX_MAP_CELLS))
    n_cells = cdiv(num_blocks, per)
    if per > 1:
        pad = n_cells * per - num_blocks
        grid = np.concatenate([state, np.full(pad, -1, np.int8)]).reshape(n_cells, per)
        counts = np.stack([(grid == k).sum(axis=1)
                           for k in (MAP_BLOCK_FREE, MAP_BLOCK_CACHED, MAP_BLOCK_PRIVATE, MAP_BLOCK_SHARED)], axis=1)
        # a cell is pink when any of its blocks is shared (shared blocks are few and the point of
        # the map); otherwise it takes the state most of its blocks are in
        cell_state = np.where(counts[:, MAP_BLOCK_SHARED] > 0, MAP_BLOCK_SHARED, counts.argmax(axis=1)).astype(np.int8)
        cell_refs = np.concatenate([refs, np.zeros(pad, np.int32)]).reshape(n_cells, per).max(axis=1)
        cell_owner = np.full(n_cells, -1, np.int32)
    else:
        cell_state, cell_refs, cell_owner = state, refs, owner
    rows, cols = grid_shape(n_cells) if n_cells < 4096 else (cdiv(n_cells, 128), 128)
    z = np.full(rows * cols, np.nan)
    z[:n_cells] = cell_state
    first = np.arange(rows * cols) * per
    text = np.full(rows * cols, "", dtype=object)
    for i in range(n_cells):
        what = BLOCK_LABELS[int(cell_state[i])]
        if per == 1:
            who = f"<br>first holder r{cell_owner[i]}" if cell_owner[i] > 0 else ""
            text[i] = f"block {first[i]}: {what}<br>refcount {cell_refs[i]}{who}"
        else:
            c = counts[i]
            text[i] = (f"blocks {first[i]:,}–{min(num_blocks, first[i] + per) - 1:,}: {c[MAP_BLOCK_FREE]} free, "
                       f"{c[MAP_BLOCK_CACHED]} cached, {c[MAP_BLOCK_PRIVATE]} private, {c[MAP_BLOCK_SHARED]} shared"
                       f"<br>highest refcount {cell_refs[i]}")
    scale = []
    for k in range(4):
        scale += [[k / 4, BLOCK_COLOURS[k]], [(k + 1) / 4, BLOCK_COLOURS[k]]]
    fig = go.Figure(go.Heatmap(z=z.reshape(rows, cols), text=text.reshape(rows, cols), zmin=-0.5, zmax=3.5,
                               colorscale=scale, showscale=False, xgap=1 if cols <= 64 else 0,
                               ygap=1 if cols <= 64 else 0, hovertemplate="%{text}<extra></extra>"))
    counts = {k: int((state == k).sum()) for k in BLOCK_COLOURS}
    for k, colour in BLOCK_COLOURS.items():            # legend entries for the four states
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", marker=dict(size=12, color=colour, symbol="square"),
                                 name=f"{BLOCK_LABELS[k]} ({counts[k]:,})"))
    cell = ("one cell per block" if per == 1 else
            f"one cell per {per} blocks, pink if any is shared, else the colour most of them have")
    fig.update_layout(title=f"The pool at step {step}: {num_blocks:,} blocks of {block_size} slots ({cell})",
                      xaxis=dict(visible=False), yaxis=dict(visible=False, autorange="reversed", scaleanchor=None),
                      legend=dict(orientation="h", y=-0.05), height=460, margin=dict(t=50, b=10, l=10, r=10),
                      plot_bgcolor="white")
    return fig


def ttft_figure(comparison: dict, cost_name: str = "cost model") -> go.Figure:
    """Cumulative share of requests against time to first token, with and without the cache.

    Args:
        cost_name: which cost model produced the seconds (``cost.short_name``, e.g. "datasheet
            roofline"), named in the title and the time axis."""
    fig = go.Figure()
    for key, name, colour, dash in (("with", "with prefix caching", PAGED, "solid"),
                                    ("without", "without (every prompt token prefilled)", RESERVE_MAX, "dash")):
        ttft = np.sort(np.asarray(comparison[key]["ttft_s"], dtype=float))
        share = 100 * np.arange(1, len(ttft) + 1) / max(1, len(ttft))
        fig.add_trace(go.Scatter(x=ttft, y=share, mode="lines", name=name, line=dict(color=colour, dash=dash, shape="hv"),
                                 hovertemplate=f"{name}<br>%{{y:.0f}} % of requests had their first token within "
                                               "%{x:.2f} s<extra></extra>"))
    longest = max([float(np.max(comparison[k]["ttft_s"])) for k in ("with", "without")
                   if len(comparison[k]["ttft_s"])] or [1.0])
    fig.update_layout(title=f"Time to first token (the {cost_name}'s figure)",
                      xaxis=dict(title=f"time to first token (s, {cost_name})", range=[0, longest * 1.08]),
                      yaxis=dict(title="requests (cumulative %)", range=[0, 100]),
                      legend=dict(orientation="h", y=-0.25), height=400, margin=dict(t=50, b=10))
    return fig


def window_summary(sweep, trace_stat: dict, raw_stat: dict, offset: int, count: int,
                   asked: int | None = None) -> str:
    """What the sweep shows, in numbers taken from it (markdown).

    Args:
        count: requests in the window; asked: requests the user asked for (a window cut short by
            the end of the trace says so).
    """
    full = next((r for r in sweep.rows if r["fraction"] >= 1.0), sweep.rows[-1])
    small = sweep.rows[0]
    cut = (f" (only {plural(count, 'request')} {'remains' if count == 1 else 'remain'} from this offset: the "
           "trace ends there)" if asked is not None and asked > count else "")
    text = (f"Requests {offset + 1:,}–{offset + count:,} of the trace{cut}. Counted from the trace's own block ids, "
            f"an unbounded cache of **512-token blocks** would find **{pct(trace_stat['token_hit_rate'], 1)}** of "
            f"their prompt tokens under the engine's rules (only full blocks are cached; the block holding a "
            f"prompt's last token is always computed); the trace's plain count, in blocks rather than tokens and "
            f"without those rules, is {pct(raw_stat['block_hit_rate'], 1)} of its 512-token blocks. "
            + ("Simulated with" if full["exact"] else f"In the LRU model ({_why_model(sweep)}), with") +
            f" {sweep.block_size}-slot blocks, a pool of {full['pool_blocks']:,} blocks finds "
            f"**{pct(full['hit_rate'], 1)}** and saves {full['prefill_tokens_saved']:,} prefill tokens")
    if sweep.block_size < 512 and full["hit_rate"] is not None and full["hit_rate"] > trace_stat["token_hit_rate"]:
        text += (" (a little more than the 512-token count: a 512-token block the trace calls different can "
                 "still begin with whole smaller blocks in common)")
    if small["pool_blocks"] < full["pool_blocks"]:
        text += (f"; a pool of {small['pool_blocks']:,} blocks ({small['fraction']:.2f}× the window's "
                 f"{sweep.distinct_blocks:,} distinct prompt blocks) finds **{pct(small['hit_rate'], 1)}**, "
                 f"evicting {plural(small['cached_block_evictions'], 'cached block')}")
        text += (f" (the LRU model's figure: {_why_model(sweep, small['pool_blocks'])})." if not small["exact"]
                 else ".")
    else:
        text += (f". The window is so small that every pool of the sweep is the smallest that fits its longest "
                 "request, so pool size cannot change anything here.")
    return text


def duration(x: float) -> str:
    """A wait as the page prints it: seconds below two minutes (``claims.seconds``), then minutes,
    then hours (``8478.8 -> "2.4 h"``)."""
    if x < 120:
        return seconds(x)
    if x < 7200:
        return f"{x / 60:.0f} min"
    return f"{x / 3600:.1f} h"


def ttft_summary(comparison: dict, label: str, pool_blocks: int, block_size: int) -> str:
    """Median and 90th-percentile TTFT with and without the cache (numbers from the comparison).

    Args:
        label: the GPU and model and which cost model produced the seconds
            (:func:`allocator.cost.best.seconds_source`); pool_blocks, block_size: the pool it gives.
    """
    w, wo = (np.asarray(comparison[k]["ttft_s"], dtype=float) for k in ("with", "without"))
    if not len(w) or not len(wo):
        return "No request finished, so there is no time to first token to compare."
    med_w, med_wo = float(np.median(w)), float(np.median(wo))
    s = comparison["with"]["summary"]
    if len(w) >= 10:
        p90_w, p90_wo = float(np.percentile(w, 90)), float(np.percentile(wo, 90))
        waits = (f"the median request waited **{duration(med_w)}** for its first token and the slowest tenth "
                 f"{duration(p90_w)} or more; without it, **{duration(med_wo)}** and {duration(p90_wo)}")
    else:
        waits = (f"the median request waited **{duration(med_w)}** for its first token; without it, "
                 f"**{duration(med_wo)}** (too few requests for a slowest tenth)")
    overloaded = max(med_w, med_wo) > 60
    return (f"{label}: a pool of {pool_blocks:,} blocks of {block_size} slots. With the cache (it found "
            f"{pct(s.get('prefix_cache_hit_rate'), 1)} of prompt tokens, {s.get('prefill_tokens_saved', 0):,} tokens "
            f"of prefill saved), {waits}. These are a cost model's figures, not measurements." + (
                " Waits this long mean the hardware cannot keep up with the trace's arrivals, so requests queue "
                "behind one another; more GPUs spread the load." if overloaded else "") + (
                f" {plural(len(s['rejected']), 'request')} could never fit this pool and "
                f"{'was' if len(s['rejected']) == 1 else 'were'} turned away; the times are over the others."
                if s.get("rejected") else ""))
