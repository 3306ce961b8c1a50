"""Block tables & sharing page: refcounts, copy-on-write, prefix caching by chained hash, swap.

Renders only. Every number comes from :class:`allocator.block_manager.BlockManager`, kept in
``st.session_state`` so that each button press is one operation on the same pool. Words stand in
for tokens (each word is one token id) and a block holds four of them, so students can read what
each physical block contains. A refused operation (out of blocks, host pool full) is shown with
``st.error`` under the buttons; the page never shows a traceback.

Sources: Kwon et al., PagedAttention (SOSP 2023) sections 4.4-4.5; vLLM's prefix-caching design
(chained block hash with extra keys such as the LoRA id and a per-request cache salt); seed 003
(``shared/seeds/003_49f236d33f1525f6.txt``), section 10.5's pictorial and challenges 3 and 4.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from allocator.block_manager import BLOCK_CACHED, BLOCK_FREE, BlockManager
from allocator.viz.theme import DARK_HOLE, GREY_FREE, ORANGE_EMPTY, REQUEST_COLOURS

BLOCK_SIZE = 4
NUM_BLOCKS = 16
NUM_HOST_BLOCKS = 8
FREE_ORDER_SEED = 3          # shuffles the starting free queue: physical order != logical order
WARN = "#CC3311"             # Paul Tol "vibrant" red: wrong shares and the copy highlight
HIGHLIGHT = "#000000"
LABEL_W = 11.0               # x units left of the pool kept for row labels

SYSTEM = ["You", "are", "a", "calm", "tutor", ".", "Be", "brief"]          # two full blocks
QUESTION_A = ["Why", "does", "paging", "help", "?"]
QUESTION_B = ["Define", "a", "block"]
OTHER_OPENING = ["You", "are", "a", "pirate", ".", "Talk", "like", "one"]
NEW_QUESTIONS = [["How", "do", "forks", "share", "?"], ["When", "is", "a", "block", "freed", "?"],
                 ["What", "is", "a", "hash", "?"]]
SAMPLES = [
    ["Blocks", "fill", "on", "demand", ",", "so", "little", "is", "wasted", "."],
    ["Four", "slots", "of", "K", "and", "V", "each", "."],
    ["Memory", "grows", "one", "block", "at", "a", "time", "."],
    ["Tables", "map", "logical", "to", "physical", "blocks", "."],
    ["Sharing", "stores", "the", "prompt", "once", "."],
    ["Each", "copy", "splits", "on", "its", "first", "write", "."],
]
TENANTS = ["tenant-1", "tenant-2"]


def _vocabulary() -> list[str]:
    words: list[str] = []
    for group in [SYSTEM, QUESTION_A, QUESTION_B, OTHER_OPENING, *NEW_QUESTIONS, *SAMPLES]:
        for w in group:
            if w not in words:
                words.append(w)
    return words


VOCAB = _vocabulary()
TOKEN_OF = {w: i for i, w in enumerate(VOCAB)}


def ids(words: list[str]) -> list[int]:
    """Token ids of a list of words (each word is one token)."""
    return [TOKEN_OF[w] for w in words]


def word(token_id: int) -> str:
    """The word a token id stands for."""
    return VOCAB[token_id]


def words_of(token_ids: list[int]) -> str:
    return " ".join(word(t) for t in token_ids)


# -------------------------------------------------------------------------------- state

def _colour(seq_id: str) -> str:
    order = st.session_state["bt_meta"][seq_id]["colour"]
    return REQUEST_COLOURS[order % len(REQUEST_COLOURS)]


def _log(text: str) -> None:
    st.session_state["bt_log"].append(text)


def _add_sequence(seq_id: str, words: list[str], tenant: str, sample: int) -> None:
    """Allocate a new request and describe what the cache did."""
    mgr: BlockManager = st.session_state["bt_mgr"]
    salt = tenant if st.session_state["bt_salt"] else None
    res = mgr.allocate(seq_id, ids(words), cache_salt=salt)
    meta = st.session_state["bt_meta"]
    meta[seq_id] = {"tenant": tenant, "sample": sample, "next": 0, "colour": st.session_state["bt_colours"]}
    st.session_state["bt_colours"] += 1
    table = mgr.block_table(seq_id)
    who = f"{seq_id} ({tenant})" if st.session_state["bt_salt"] else seq_id
    text = (f"**{who}** arrives with {len(words)} tokens \u201c{' '.join(words)}\u201d: "
            f"{len(table)} blocks, table {table}.")
    if res.reused:
        shared = [table[i] for i in res.reused]
        text += (f" The hashes of logical block(s) {list(res.reused)} were found in the cache, so it "
                 f"points at existing block(s) {shared} instead of computing them again "
                 f"({res.num_cached_tokens} leading tokens served from cache).")
        if res.num_cached_tokens < len(res.reused) * BLOCK_SIZE:
            text += " A reused block is not at the start of the prompt: look at the warning above."
    elif mgr.enable_prefix_caching:
        text += " None of its full blocks was in the cache."
    if res.evicted:
        text += f" Taking fresh blocks evicted cached block(s) {list(res.evicted)}."
    _log(text)
    hl = {b: "new" for b in res.new_blocks}
    hl.update({table[i]: "from cache" for i in res.reused})
    st.session_state["bt_highlight"] = hl
    st.session_state["bt_seq"] = seq_id


def _new_demo() -> None:
    """A fresh pool with A and B, both starting with the same system prompt."""
    order = np.random.default_rng(FREE_ORDER_SEED).permutation(NUM_BLOCKS).tolist()
    st.session_state["bt_mgr"] = BlockManager(NUM_BLOCKS, BLOCK_SIZE, NUM_HOST_BLOCKS,
                                              chain_hashes=not st.session_state["bt_naive"],
                                              free_order=order)
    st.session_state["bt_meta"] = {}
    st.session_state["bt_log"] = []
    st.session_state["bt_colours"] = 0
    st.session_state["bt_next_request"] = 0
    st.session_state["bt_error"] = None
    mode = "each block's own tokens only (flawed)" if st.session_state["bt_naive"] else \
        "chained over every earlier token"
    salt = "one salt per tenant" if st.session_state["bt_salt"] else "no salt"
    _log(f"New pool: {NUM_BLOCKS} blocks of {BLOCK_SIZE} slots, {NUM_HOST_BLOCKS} host blocks; "
         f"block hash {mode}; {salt}.")
    _add_sequence("A", SYSTEM + QUESTION_A, TENANTS[0], 0)
    _add_sequence("B", SYSTEM + QUESTION_B, TENANTS[1], 1)
    st.session_state["bt_seq"] = "A"


def _init_state() -> None:
    st.session_state.setdefault("bt_naive", False)
    st.session_state.setdefault("bt_salt", False)
    st.session_state.setdefault("bt_new_tenant", TENANTS[0])
    if "bt_mgr" not in st.session_state:
        _new_demo()


def _next_name(prefix: str) -> str:
    taken = set(st.session_state["bt_meta"])
    k = 1
    while f"{prefix}{k}" in taken:
        k += 1
    return f"{prefix}{k}" if prefix else str(k)


def _fresh_request_name() -> str:
    taken = set(st.session_state["bt_meta"])
    for letter in "CDEFGHIJKLMNOPQRSTUVWXYZ":
        if letter not in taken:
            return letter
    return _next_name("R")


def _append(seq_id: str) -> None:
    mgr: BlockManager = st.session_state["bt_mgr"]
    meta = st.session_state["bt_meta"][seq_id]
    sample = SAMPLES[meta["sample"] % len(SAMPLES)]
    w = sample[meta["next"] % len(sample)]
    res = mgr.append_token(seq_id, TOKEN_OF[w])
    meta["next"] += 1
    if res.cow_from is not None:
        _log(f"**{seq_id}** writes \u201c{w}\u201d into its last block {res.cow_from}, which is shared "
             f"(refcount {mgr.refcount(res.cow_from) + 1}). Copy-on-write: {seq_id} drops its "
             f"reference to block {res.cow_from} (refcount now {mgr.refcount(res.cow_from)}), "
             f"copies {_plural(len(mgr.block_tokens(res.block_id)) - 1, 'token')} into free block "
             f"{res.block_id}, points its table there, then writes \u201c{w}\u201d into slot {res.slot}.")
        st.session_state["bt_highlight"] = {res.block_id: f"copy of {res.cow_from}",
                                            res.cow_from: "copied from"}
    elif res.new_block:
        _log(f"**{seq_id}**'s last block was full, so \u201c{w}\u201d opens block {res.block_id} "
             f"(slot 0); its other {BLOCK_SIZE - 1} slots are allocated but empty."
             + (" That block came from the cache and its old contents were evicted." if res.evicted is not None else ""))
        st.session_state["bt_highlight"] = {res.block_id: "new"}
    else:
        _log(f"**{seq_id}** writes \u201c{w}\u201d into slot {res.slot} of block {res.block_id} "
             f"(refcount 1: nobody else sees it, so no copy).")
        st.session_state["bt_highlight"] = {res.block_id: "written"}
    if len(mgr.token_ids(seq_id)) % BLOCK_SIZE == 0 and mgr.block_hash_of(res.block_id) is not None:
        _log(f"Block {res.block_id} is now full, so its hash is recorded: a later request with the "
             f"same tokens before and in it can find it.")


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _running(mgr: BlockManager) -> list[str]:
    return [s for s in mgr.sequences() if not mgr.is_swapped(s)]


def _do(action: str) -> None:
    """Button callback: run one operation; a refusal becomes the message shown under the buttons."""
    st.session_state["bt_error"] = None
    mgr: BlockManager = st.session_state["bt_mgr"]
    seq_id = st.session_state.get("bt_seq")
    try:
        if action == "reset":
            _new_demo()
            return
        if action in ("append", "fork", "finish", "swap_out", "swap_in") and seq_id not in mgr.sequences():
            raise ValueError("seq_id: choose a sequence first (none is left: add a new request)")
        if action == "append":
            _append(seq_id)
        elif action == "fork":
            child = _next_name(f"{seq_id}.")
            table = mgr.fork(seq_id, child)
            parent = st.session_state["bt_meta"][seq_id]
            st.session_state["bt_meta"][child] = {
                "tenant": parent["tenant"], "sample": 2 + len(st.session_state["bt_meta"]),
                "next": 0, "colour": st.session_state["bt_colours"]}
            st.session_state["bt_colours"] += 1
            _log(f"**Fork**: {child} starts as a second sample of {seq_id}. It gets a block table "
                 f"{table} pointing at the very same blocks, and each of their refcounts goes up "
                 f"by one. Nothing is copied yet.")
            st.session_state["bt_highlight"] = {b: "shared" for b in table}
            st.session_state["bt_seq"] = child
        elif action == "write_shared":
            candidates = [s for s in _running(mgr)
                          if len(mgr.token_ids(s)) % BLOCK_SIZE
                          and mgr.refcount(mgr.block_table(s)[-1]) > 1]
            if not candidates:
                st.session_state["bt_error"] = (
                    "info", "No sequence is about to write into a shared block: press **Fork** "
                    "first (a fork shares the partly filled last block).")
                return
            target = seq_id if seq_id in candidates else candidates[-1]
            _append(target)
            st.session_state["bt_seq"] = target
        elif action == "finish":
            table = mgr.block_table(seq_id) or mgr.host_table(seq_id)
            swapped = mgr.is_swapped(seq_id)
            mgr.free(seq_id)
            if swapped:
                _log(f"**{seq_id}** finishes while swapped out: its {len(table)} host blocks are free again.")
            else:
                states = {b: mgr.block_state(b) for b in table}
                kept = [b for b in table if states[b] not in (BLOCK_FREE, BLOCK_CACHED)]
                cached = [b for b in table if states[b] == BLOCK_CACHED]
                free = [b for b in table if states[b] == BLOCK_FREE]
                text = f"**{seq_id}** finishes and drops one reference to each of {table}."
                if kept:
                    text += f" Still used by others: {kept}."
                if cached:
                    text += (f" Refcount 0 but full, so still findable by hash until reused: {cached}.")
                if free:
                    text += f" Back to plain free: {free}."
                _log(text)
                st.session_state["bt_highlight"] = {b: "released" for b in table}
            remaining = mgr.sequences()
            st.session_state["bt_seq"] = remaining[0] if remaining else None
        elif action == "new_same":
            name = _fresh_request_name()
            k = st.session_state["bt_next_request"]
            st.session_state["bt_next_request"] += 1
            tenant = st.session_state["bt_new_tenant"] if st.session_state["bt_salt"] else TENANTS[0]
            _add_sequence(name, SYSTEM + NEW_QUESTIONS[k % len(NEW_QUESTIONS)], tenant,
                          3 + st.session_state["bt_colours"])
        elif action == "new_other":
            name = _fresh_request_name()
            tenant = st.session_state["bt_new_tenant"] if st.session_state["bt_salt"] else TENANTS[0]
            _add_sequence(name, OTHER_OPENING + QUESTION_A, tenant, 3 + st.session_state["bt_colours"])
            if mgr.chain_hashes and not mgr.wrong_shares():
                _log(f"{name}'s third block holds the same four words as A's third block, but its "
                     "hash also covers the eight words before it, which differ, so it is not "
                     "confused with A's.")
        elif action == "swap_out":
            mapping = mgr.swap_out(seq_id)
            _log(f"**{seq_id}** is preempted by swapping: blocks {[g for g, _ in mapping]} are copied "
                 f"to host blocks {[h for _, h in mapping]} and released on the GPU "
                 f"({mgr.num_host_free_blocks} of {NUM_HOST_BLOCKS} host blocks still free).")
            st.session_state["bt_highlight"] = {g: "to host" for g, _ in mapping}
        elif action == "swap_in":
            mapping = mgr.swap_in(seq_id)
            _log(f"**{seq_id}** is swapped back in before it resumes: host blocks "
                 f"{[h for h, _ in mapping]} go to whichever GPU blocks were free: "
                 f"{[g for _, g in mapping]}.")
            st.session_state["bt_highlight"] = {g: "from host" for _, g in mapping}
    except ValueError as exc:
        st.session_state["bt_error"] = ("error", _friendly(exc))


def _friendly(exc: ValueError) -> str:
    text = str(exc)
    if text.startswith("num_blocks: out of blocks"):
        return ("The GPU pool is out of blocks: " + text.split(": ", 2)[-1] +
                ". Finish or swap out a sequence first.")
    if text.startswith("num_host_blocks: host pool is full"):
        return ("The host pool is full: " + text.split(": ", 2)[-1] + ". Swap a sequence in or finish one.")
    for field in ("seq_id: ", "parent_id: ", "child_id: "):
        if text.startswith(field):
            text = text[len(field):]
    if not text:
        return "That operation was refused."
    text = text[0].upper() + text[1:]
    return text if text.endswith(".") else text + "."


def _on_toggle() -> None:
    _new_demo()


# -------------------------------------------------------------------------------- figure

def block_table_figure(mgr: BlockManager, meta: dict, highlight: dict, colours: dict,
                       salt: bool) -> go.Figure:
    """Block tables (rows of entries) above the physical pool (blocks of slots) and host pool.

    Every box carries hover text; arrows run from each table entry to the block it names.
    """
    bs = mgr.block_size
    seqs = mgr.sequences()
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
    fig = go.Figure()
    label_x, label_y, label_t = [], [], []
    annotations = []

    def box(x0, y0, x1, y1, fill, line, width, hover, dash="solid", name=None, legend=False,
            group=None):
        fig.add_trace(go.Scatter(
            x=[x0, x1, x1, x0, x0], y=[y0, y0, y1, y1, y0], mode="lines", fill="toself",
            fillcolor=fill, line=dict(color=line, width=width, dash=dash), hoveron="fills",
            text=hover, hoverinfo="text", name=name or "", showlegend=legend,
            legendgroup=group))

    # legend entries (one per meaning)
    def legend_entry(name, fill, line="#444444", dash="solid"):
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name,
                                 marker=dict(symbol="square", size=14, color=fill,
                                             line=dict(color=line, width=1.5))))

    for s in seqs:
        legend_entry(f"{s}'s tokens", colours[s])
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
                fill = colours[owner]
                hover = f"block {b}, slot {k}: \u201c{word(toks[k])}\u201d (token {toks[k]})"
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
        fig.add_shape(type="rect", x0=x0, x1=x0 + block_w, y0=pool_y0, y1=pool_y0 + pool_h,
                      line=dict(color=line, width=width, dash=dash), fillcolor="rgba(0,0,0,0)")
        label_x.append(x0 + block_w / 2)
        label_y.append(pool_y0 + pool_h + 0.45)
        label_t.append(f"<b>{b}</b> / {rc}")
        if b in highlight:
            annotations.append(dict(x=x0 + block_w / 2, y=pool_y0 - 0.25, text=highlight[b],
                                    showarrow=False, yanchor="top", font=dict(size=11, color=HIGHLIGHT)))
    fig.add_annotation(x=-0.8, y=pool_y0 + pool_h / 2, text="<b>GPU pool</b><br>id / refcount",
                       showarrow=False, xanchor="right", font=dict(size=12))

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
    fig.add_annotation(x=-0.8, y=host_y0 + 0.6, text="<b>host pool</b><br>(swap)",
                       showarrow=False, xanchor="right", font=dict(size=12))

    # ---- block tables
    for r, s in enumerate(seqs):
        y1 = top - r * row_pitch
        y0 = y1 - row_h
        swapped = mgr.is_swapped(s)
        table = mgr.host_table(s) if swapped else mgr.block_table(s)
        toks = mgr.token_ids(s)
        tag = f" ({meta[s]['tenant']})" if salt else ""
        fig.add_annotation(x=-0.8, y=(y0 + y1) / 2, showarrow=False, xanchor="right",
                           text=(f"<span style='color:{colours[s]};font-size:20px'>■</span> <b>{s}</b>{tag}"
                                 f"<br>{len(toks)} tokens" + ("<br><i>swapped out</i>" if swapped else "")),
                           font=dict(size=12, color="#222222"))
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
            if not swapped:
                annotations.append(dict(
                    x=b * pitch + block_w / 2, y=pool_y0 + pool_h + 0.95, ax=x0 + entry_w / 2, ay=y0,
                    xref="x", yref="y", axref="x", ayref="y", showarrow=True, arrowhead=2,
                    arrowsize=1, arrowwidth=1.6, arrowcolor=WARN if (s, i) in wrong else colours[s],
                    opacity=0.85, text=""))
    fig.add_trace(go.Scatter(x=label_x, y=label_y, mode="text", text=label_t, hoverinfo="skip",
                             showlegend=False, textfont=dict(size=12, color="#111111")))
    for a in annotations:
        fig.add_annotation(**a)
    width_x = max(pool_width, mgr.num_host_blocks * pitch)
    fig.update_layout(
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


# -------------------------------------------------------------------------------- page

_init_state()
mgr: BlockManager = st.session_state["bt_mgr"]
meta: dict = st.session_state["bt_meta"]

st.title("Block tables & sharing")
st.markdown(
    "Each sequence keeps a **block table**: a short list saying where each of its logical blocks "
    "actually lives in the GPU pool. Because it is only a list of block ids, two sequences can "
    "list the same block. Below, every word is one token and a block holds "
    f"{BLOCK_SIZE} of them. A and B open with the same system prompt, so after the prefix cache "
    "recognises it they point at the same two physical blocks. The number after the slash on a "
    "pool block is its **refcount**: how many block tables point at it."
)

with st.container(border=True):
    t1, t2, t3 = st.columns([2, 2, 2])
    t1.toggle("Hash a block's own tokens only", key="bt_naive", on_change=_on_toggle,
              help="The flawed scheme: a block is recognised by its own words, ignoring everything "
                   "before it. Switching restarts the demo.")
    t2.toggle("Give each tenant its own cache salt", key="bt_salt", on_change=_on_toggle,
              help="A and B then belong to different tenants: the salt enters the first block's "
                   "hash, and the chain carries it into every later block. Switching restarts the demo.")
    if st.session_state["bt_salt"]:
        t3.radio("Tenant of the next new request", TENANTS, key="bt_new_tenant", horizontal=True)

    running = mgr.sequences()
    if st.session_state.get("bt_seq") not in running:
        st.session_state["bt_seq"] = running[0] if running else None
    c0, c1 = st.columns([1, 5])
    c0.selectbox("Sequence", running, key="bt_seq",
                 format_func=lambda s: f"{s} (swapped out)" if mgr.is_swapped(s) else str(s),
                 placeholder="none left")
    c0.button("Reset", key="bt_reset", on_click=_do, args=("reset",),
              icon=":material/restart_alt:", width="stretch")
    with c1:
        b = st.columns(4)
        b[0].button("Append a token", key="bt_append", on_click=_do, args=("append",),
                    icon=":material/add:", width="stretch")
        b[1].button("Fork", key="bt_fork", on_click=_do, args=("fork",),
                    icon=":material/call_split:", width="stretch")
        b[2].button("Write shared", key="bt_write", on_click=_do,
                    args=("write_shared",), icon=":material/content_copy:", width="stretch",
                    help="Appends a token to a sequence whose last block is shared (after a fork): "
                         "copy-on-write.")
        b[3].button("Finish", key="bt_finish", on_click=_do, args=("finish",),
                    icon=":material/done:", width="stretch")
        b2 = st.columns(4)
        b2[0].button("Same prompt", key="bt_new_same", on_click=_do,
                     args=("new_same",), icon=":material/cached:", width="stretch",
                     help="A new request: the same system prompt with a new question. Its full "
                          "system-prompt blocks are found by hash.")
        b2[1].button("Other prompt", key="bt_new_other", on_click=_do,
                     args=("new_other",), icon=":material/help:", width="stretch",
                     help="A new request: a different system prompt followed by A's question. Its "
                          "third block holds the same four words as A's third block.")
        b2[2].button("Swap out", key="bt_swap_out", on_click=_do, args=("swap_out",),
                     icon=":material/download:", width="stretch")
        b2[3].button("Swap in", key="bt_swap_in", on_click=_do, args=("swap_in",),
                     icon=":material/upload:", width="stretch")
    err = st.session_state.get("bt_error")
    if err:
        (st.error if err[0] == "error" else st.info)(err[1])

colours = {s: _colour(s) for s in mgr.sequences()}
wrong = mgr.wrong_shares()
if wrong:
    listed = ", ".join(f"{s}'s logical block {i} (physical {b})" for s, i, b in wrong)
    st.error(
        f"Wrong share: {listed}. The words in that block match, but it was found without checking "
        "what came before it — the earlier words, or the tenant's salt, differ. "
        "A token's K and V depend on every token before it (attention mixes them in, and "
        "positions differ), so these cached values belong to another context: the model would "
        "silently continue someone else's text. With a salt this is also a leak between tenants. "
        "A hash chained over every earlier token cannot make this mistake.",
        icon=":material/warning:")

st.plotly_chart(block_table_figure(mgr, meta, st.session_state.get("bt_highlight", {}), colours,
                                   st.session_state["bt_salt"]),
                key="bt_figure", width="stretch", config={"displaylogo": False})

free_n, cached_n, used_n = mgr.num_free_blocks, mgr.num_cached_free_blocks, mgr.num_in_use_blocks
counts = mgr.slot_counts()
st.subheader("Where every block is")
m = st.columns(4)
m[0].metric("Free blocks", free_n, help="Refcount 0 and nothing cached in them.")
m[1].metric("Cached blocks", cached_n,
            help="Refcount 0, but full and still findable by hash until the free queue hands them out.")
m[2].metric("In-use blocks", used_n, help="Refcount 1 or more.")
m[3].metric("Total blocks", mgr.num_blocks)
ok = free_n + cached_n + used_n == mgr.num_blocks
st.markdown(f"**free + cached + in use = total:** {free_n} + {cached_n} + {used_n} = "
            f"{free_n + cached_n + used_n} {'=' if ok else '≠'} {mgr.num_blocks} "
            f"{'✓' if ok else '✗ (bookkeeping is broken)'}")
m2 = st.columns(4)
m2[0].metric("Logical tokens", counts.logical_tokens,
             help="Tokens the running sequences hold, a shared token counted once per sequence.")
m2[1].metric("Slots without sharing", counts.slots_unshared,
             help="Slots needed if every running sequence had private blocks.")
m2[2].metric("Distinct physical slots", counts.physical_slots,
             help="Slots of the blocks actually in use: shared blocks counted once.")
m2[3].metric("Slots saved by sharing", counts.saved_slots)
m3 = st.columns(4)
m3[0].metric("Copy-on-write copies", mgr.cow_copies)
m3[1].metric("Blocks found in cache", mgr.cache_hit_blocks)
m3[2].metric("Blocks swapped out / in", f"{mgr.swapped_out_blocks} / {mgr.swapped_in_blocks}")
m3[3].metric("Cached blocks evicted", mgr.evictions)

left, right = st.columns([3, 2])
with left:
    st.subheader("Physical pool")
    rows = []
    for blk in range(mgr.num_blocks):
        h = mgr.block_hash_of(blk)
        rows.append({"block": blk, "state": mgr.block_state(blk), "refcount": mgr.refcount(blk),
                     "held by": ", ".join(map(str, mgr.holders(blk))),
                     "tokens": words_of(mgr.block_tokens(blk)),
                     "hash": h.hex()[:10] if h is not None else ""})
    st.dataframe(pd.DataFrame(rows), hide_index=True, key="bt_pool_table", height=600,
                 column_config={"tokens": st.column_config.TextColumn(width="medium"),
                                "held by": st.column_config.TextColumn(width="small")})
    st.subheader("Block tables")
    trows = []
    for s in mgr.sequences():
        trows.append({"sequence": s, "tokens": len(mgr.token_ids(s)),
                      "block table": str(mgr.host_table(s) if mgr.is_swapped(s) else mgr.block_table(s)),
                      "where": "host (swapped out)" if mgr.is_swapped(s) else "GPU",
                      "text": words_of(mgr.token_ids(s))})
    st.dataframe(pd.DataFrame(trows, columns=["sequence", "tokens", "block table", "where", "text"]),
                 hide_index=True, key="bt_seq_table")
with right:
    st.subheader("What happened")
    st.markdown("\n".join(f"{i}. {line}" for i, line in enumerate(st.session_state["bt_log"], 1)))

with st.expander("How the pieces fit"):
    st.markdown(
        "- **Refcount.** A block is shared by listing it in several block tables; its refcount "
        "counts those tables. It returns to the pool only when the count falls to zero.\n"
        "- **Copy-on-write.** Full blocks are never written again, so only a shared *last* block "
        "(after a fork) needs care. The writer first drops its own reference — while its table "
        "still names the shared block — then takes a free block, copies the shared tokens into it, "
        "re-points its table and writes. Decrementing *after* re-pointing would hit the copy "
        "instead of the original: the original could never reach zero (a leak) and the copy could "
        "be handed to someone else while still in use.\n"
        "- **Prefix caching.** A full block is found again by a hash of its parent block's hash, "
        "its own tokens and tagged extra keys (a tenant's salt in the first block, a LoRA name in "
        "every block). A partly filled block is never cached. A finished sequence's full blocks "
        "keep their hash until the free queue hands them to someone else, oldest first.\n"
        "- **Swap.** Preempting by swapping copies a sequence's blocks to a fixed-size host pool "
        "and frees them on the GPU; they must come back (to any free blocks) before it runs again. "
        "Preempting by recomputation instead drops the blocks and prefills the tokens later.\n\n"
        "Sources: Kwon et al., *PagedAttention* (SOSP 2023) sections 4.4–4.5; vLLM's prefix-caching "
        "design; seed 003, section 10.5 and challenges 3–4."
    )
