"""The Block tables page's figure, without streamlit: block tables above the GPU pool and host pool.

One row per sequence lists its block table (logical block index left to right), each entry
naming the physical block it points at; arrows run from the *selected* sequence's entries to
those blocks in the GPU pool below (arrows for every row would cross the rows beneath them; the
selected row is drawn last, next to the pool, so its own arrows cross none); the
host (swap) pool sits under that. Every box has hover text naming the sequence, block and slot.
Colours follow the app's palette (:mod:`allocator.viz.theme`), with the meanings they have on
every page: a sequence's own colour for the tokens of a block only it holds, pink for a block
several block tables share (refcount 2 or more), orange for allocated slots holding nothing,
grey for free, a dashed dark outline for a cached block (refcount 0 but findable by hash), red
for a wrong share.
"""
from __future__ import annotations

import plotly.graph_objects as go

from allocator.memory.block_pool import BLOCK_CACHED, BLOCK_FREE
from allocator.memory.block_manager import BlockManager
from allocator.viz.theme import DARK_HOLE, GREY_FREE, ORANGE_EMPTY, SHARED_PREFIX, WRONG_SHARE
from allocator.viz.block_tables_demo import word, words_of

WARN = WRONG_SHARE            # wrong shares
HIGHLIGHT = "#000000"
LABEL_W = 11.0               # x units left of the pool kept for row labels


def block_table_figure(mgr: BlockManager, meta: dict, highlight: dict, colours: dict,
                       salt: bool, selected=None) -> go.Figure:
    """Block tables (rows of entries) above the physical pool (blocks of slots) and host pool.

    Every box carries hover text; arrows run from the selected sequence's table entries to the
    blocks they name (every entry also prints its block id).

    Args:
        mgr: the pool to draw (every number drawn is read from it).
        meta: ``{seq_id: {"tenant": str, ...}}`` (:attr:`BlockTablesDemo.meta`); the tenant is
            shown next to a row when ``salt`` is on.
        highlight: ``{block_id: label}``: blocks outlined in black, the label written under them.
        colours: ``{seq_id: "#RRGGBB"}`` for every sequence ``mgr`` holds.
        salt: whether each tenant has its own cache salt (rows then name their tenant).
        selected: the sequence whose arrows are drawn (None: none).

    Returns:
        a Plotly figure, ``330 + 95 * len(sequences)`` pixels high; x and y are layout units.
    """
    bs = mgr.block_size
    seqs = mgr.sequences()
    # the selected sequence's table is drawn last, next to the pool, so its arrows cross no other
    # row's labels (they crossed B's when A, drawn above it, was selected)
    if selected in seqs:
        seqs = [s for s in seqs if s != selected] + [selected]
    wrong = {(s, i) for s, i, _ in mgr.wrong_shares()}
    wrong_blocks = {b for _, _, b in mgr.wrong_shares()}
    slot_w, gap = 1.25, 0.9
    block_w = bs * slot_w
    pitch = block_w + gap
    pool_width = mgr.num_blocks * pitch - gap
    max_entries = max([len(mgr.block_table(s)) or len(mgr.host_table(s)) for s in seqs] + [1])
    entry_gap = 1.2
    entry_w = min(11.0, (pool_width - 1) / max_entries - entry_gap)
    row_h, row_pitch = 1.5, 2.3
    pool_y0, pool_h = 0.0, 1.8
    top = pool_y0 + pool_h + 4.2 + row_pitch * (len(seqs) - 1)
    # traces, outlines and notes are collected in lists and the figure is built once at the end:
    # appending them one by one (add_trace, add_shape) re-validates the growing figure each time
    traces, shapes, notes = [], [], []
    label_x, label_y, label_t = [], [], []
    annotations = []

    def box(x0, y0, x1, y1, fill, line, width, hover, dash="solid", name=None, legend=False,
            group=None):
        traces.append(go.Scatter(
            x=[x0, x1, x1, x0, x0], y=[y0, y0, y1, y1, y0], mode="lines", fill="toself",
            fillcolor=fill, line=dict(color=line, width=width, dash=dash), hoveron="fills",
            text=hover, hoverinfo="text", name=name or "", showlegend=legend,
            legendgroup=group))

    # legend entries (one per meaning)
    def legend_entry(name, fill, line="#444444", dash="solid"):
        traces.append(go.Scatter(x=[None], y=[None], mode="markers", name=name,
                                 marker=dict(symbol="square", size=14, color=fill,
                                             line=dict(color=line, width=1.5))))

    for s in seqs:
        legend_entry(f"{s}'s tokens", colours[s])
    legend_entry("shared: refcount 2 or more", SHARED_PREFIX)
    legend_entry("allocated, holding nothing", ORANGE_EMPTY)
    legend_entry("free", GREY_FREE)
    legend_entry("cached: refcount 0, findable by hash", "#FFFFFF", DARK_HOLE)

    # ---- the physical pool
    for b in range(mgr.num_blocks):
        x0 = b * pitch
        rc = mgr.refcount(b)
        state = mgr.block_state(b)
        toks = mgr.block_tokens(b)
        holders = mgr.holders(b)
        owner = holders[0] if holders else None
        h = mgr.block_hash_of(b)
        desc = (f"physical block {b}<br>refcount {rc}"
                + (f" — held by {', '.join(map(str, holders))}" if holders else "")
                + f"<br>state: {state}"
                + (f"<br>hash {h.hex()[:10]}…" if h is not None else "<br>not findable by hash")
                + (f"<br>tokens: {words_of(toks)}" if toks else ""))
        if b in wrong_blocks:
            desc += "<br><b>wrongly shared</b>: its K/V was computed after different earlier tokens"
        for k in range(bs):
            sx0 = x0 + k * slot_w
            if state == BLOCK_FREE:
                fill, hover = GREY_FREE, f"block {b}, slot {k}: free"
            elif state == BLOCK_CACHED:
                fill = "#FFFFFF"
                hover = f"block {b}, slot {k}: \u201c{word(toks[k])}\u201d (token {toks[k]}), cached, refcount 0"
            elif k < len(toks):
                fill = SHARED_PREFIX if rc >= 2 else colours[owner]
                hover = (f"block {b}, slot {k}: \u201c{word(toks[k])}\u201d (token {toks[k]})"
                         + (f", shared by {', '.join(map(str, holders))}" if rc >= 2 else ""))
            else:
                fill = ORANGE_EMPTY
                hover = f"block {b}, slot {k}: allocated to {', '.join(map(str, holders))}, holding nothing"
            box(sx0, pool_y0, sx0 + slot_w, pool_y0 + pool_h, fill, "#FFFFFF", 0.5,
                hover + "<br>" + desc)
        # outline of the block
        if state == BLOCK_CACHED:
            line, width, dash = DARK_HOLE, 1.5, "dash"
        elif b in highlight:
            line, width, dash = HIGHLIGHT, 3.5, "solid"
        elif rc >= 2:
            line, width, dash = DARK_HOLE, 2.5, "solid"
        else:
            line, width, dash = "#888888", 1, "solid"
        if b in wrong_blocks:
            line, width, dash = WARN, 3.5, "solid"
        shapes.append(dict(type="rect", x0=x0, x1=x0 + block_w, y0=pool_y0, y1=pool_y0 + pool_h,
                           line=dict(color=line, width=width, dash=dash), fillcolor="rgba(0,0,0,0)"))
        label_x.append(x0 + block_w / 2)
        label_y.append(pool_y0 + pool_h + 0.45)
        label_t.append(f"<b>{b}</b> / {rc}")
        if b in highlight:
            annotations.append(dict(x=x0 + block_w / 2, y=pool_y0 - 0.25, text=highlight[b],
                                    showarrow=False, yanchor="top", font=dict(size=11, color=HIGHLIGHT)))
    notes.append(dict(x=-0.8, y=pool_y0 + pool_h / 2, text="<b>GPU pool</b><br>id / refcount",
                      showarrow=False, xanchor="right", font=dict(size=12)))

    # ---- host pool (swap)
    host_y0 = pool_y0 - 3.0
    host_used = {}
    for s in seqs:
        for i, hb in enumerate(mgr.host_table(s)):
            host_used[hb] = (s, i)
    for hb in range(mgr.num_host_blocks):
        x0 = hb * pitch
        toks = mgr.host_block_tokens(hb)
        if hb in host_used:
            s, i = host_used[hb]
            fill = colours[s]
            hover = f"host block {hb}: {s}'s logical block {i}<br>tokens: {words_of(toks)}"
        else:
            fill, hover = GREY_FREE, f"host block {hb}: free"
        box(x0, host_y0, x0 + block_w, host_y0 + 1.2, fill, "#888888", 1, hover)
        label_x.append(x0 + block_w / 2)
        label_y.append(host_y0 - 0.4)
        label_t.append(f"h{hb}")
    notes.append(dict(x=-0.8, y=host_y0 + 0.6, text="<b>host pool</b><br>(swap)",
                      showarrow=False, xanchor="right", font=dict(size=12)))

    # ---- block tables
    for r, s in enumerate(seqs):
        y1 = top - r * row_pitch
        y0 = y1 - row_h
        swapped = mgr.is_swapped(s)
        table = mgr.host_table(s) if swapped else mgr.block_table(s)
        toks = mgr.token_ids(s)
        tag = f" ({meta[s]['tenant']})" if salt else ""
        notes.append(dict(x=-0.8, y=(y0 + y1) / 2, showarrow=False, xanchor="right",
                          text=(f"<span style='color:{colours[s]};font-size:20px'>■</span> <b>{s}</b>{tag}"
                                f"<br>{len(toks)} tokens" + ("<br><i>swapped out</i>" if swapped else "")),
                          font=dict(size=12, color="#222222")))
        for i, b in enumerate(table):
            x0 = i * (entry_w + entry_gap)
            part = toks[i * bs:(i + 1) * bs]
            if swapped:
                hover = (f"{s}, logical block {i} → host block {b}<br>tokens: {words_of(part)}"
                         f"<br>swapped out: it must come back to GPU blocks before {s} runs")
            else:
                rc = mgr.refcount(b)
                others = [x for x in mgr.holders(b) if x != s]
                hover = (f"{s}, logical block {i} → physical block {b}<br>tokens: {words_of(part)}"
                         f"<br>refcount {rc}" + (f" (shared with {', '.join(map(str, others))})" if others else ""))
                if (s, i) in wrong:
                    hover += "<br><b>wrong share</b>: same words, but computed after different earlier tokens"
            line = WARN if (s, i) in wrong else colours[s]
            box(x0, y0, x0 + entry_w, y1, "#FFFFFF", line, 3 if (s, i) in wrong else 2, hover)
            short = words_of(part) if len(words_of(part)) <= entry_w * 2.4 else \
                " ".join(word(t)[:4] for t in part)
            label_x.append(x0 + entry_w / 2)
            label_y.append((y0 + y1) / 2)
            label_t.append(f"<b>{'h' if swapped else ''}{b}</b><br><span style='font-size:10px'>{short}</span>")
            if not swapped and s == selected:
                annotations.append(dict(
                    x=b * pitch + block_w / 2, y=pool_y0 + pool_h + 0.95, ax=x0 + entry_w / 2, ay=y0,
                    xref="x", yref="y", axref="x", ayref="y", showarrow=True, arrowhead=2,
                    arrowsize=1, arrowwidth=1.6, arrowcolor=WARN if (s, i) in wrong else colours[s],
                    opacity=0.85, text=""))
    traces.append(go.Scatter(x=label_x, y=label_y, mode="text", text=label_t, hoverinfo="skip",
                             showlegend=False, textfont=dict(size=12, color="#111111")))
    width_x = max(pool_width, mgr.num_host_blocks * pitch)
    fig = go.Figure(data=traces)
    fig.update_layout(
        shapes=shapes, annotations=notes + annotations,
        height=int(330 + 95 * len(seqs)), margin=dict(l=40, r=10, t=40, b=10),
        plot_bgcolor="white", hovermode="closest",
        hoverlabel=dict(namelength=0, bgcolor="white", bordercolor="#555555", font=dict(color="#111111")),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, x=0),
        xaxis=dict(range=[-LABEL_W, width_x + 0.5], showgrid=False, zeroline=False,
                   showticklabels=False, title=dict(text="block tables point into one physical pool "
                                                         "(x: logical block index above, physical block id below)")),
        yaxis=dict(range=[host_y0 - 1.0, top + 0.6], showgrid=False, zeroline=False,
                   showticklabels=False,
                   title=dict(text="block tables (one row per sequence) · GPU pool · host pool")),
    )
    return fig
