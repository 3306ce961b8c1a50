"""Block tables & sharing page: refcounts, copy-on-write, prefix caching by chained hash, swap.

Layout only. The lesson itself is :class:`allocator.viz.block_tables_demo.BlockTablesDemo` (no
streamlit), kept in ``st.session_state`` so that each button press is one operation on the same
pool; the figure comes from :func:`allocator.viz.block_tables_figure.block_table_figure`. Every number
comes from :class:`allocator.memory.block_manager.BlockManager`. A refused operation (out of blocks, host
pool full) is shown with ``st.error`` under the buttons; the page never shows a traceback.

Sources: Kwon et al., PagedAttention (SOSP 2023) sections 4.4-4.5; vLLM's prefix-caching design
(chained block hash with extra keys such as the LoRA id and a per-request cache salt;
``vllm/v1/core/kv_cache_utils.py``, ``hash_block_tokens``); the lesson's reference figure R8
(``assets/reference_figures.md``).
"""
from __future__ import annotations

import pandas as pd
import streamlit as st

from allocator.viz.block_tables_demo import BLOCK_SIZE, TENANTS, BlockTablesDemo, vllm_note, words_of
from allocator.viz.block_tables_figure import block_table_figure
from allocator.common.errors import FieldError
from allocator.viz.texts import COPY_ON_WRITE
from pages._ui.errors import show_error
from pages._ui.present import chart, data_table

# -------------------------------------------------------------------------------- state


def _demo() -> BlockTablesDemo:
    """This session's demo (created on the first visit with the toggles' current settings)."""
    st.session_state.setdefault("bt_naive", False)
    st.session_state.setdefault("bt_salt", False)
    st.session_state.setdefault("bt_new_tenant", TENANTS[0])
    if "bt_demo" not in st.session_state:
        st.session_state["bt_demo"] = BlockTablesDemo(naive_hashing=st.session_state["bt_naive"],
                                                      salt=st.session_state["bt_salt"])
    return st.session_state["bt_demo"]


def _do(action: str) -> None:
    """Button callback: one action on the demo; the sequence it focuses becomes the selected one."""
    demo = _demo()
    demo.do(action, st.session_state.get("bt_seq"), tenant=st.session_state.get("bt_new_tenant"))
    st.session_state["bt_seq"] = demo.selected


def _on_naive() -> None:
    demo = _demo()
    demo.set_naive_hashing(st.session_state["bt_naive"])
    st.session_state["bt_seq"] = demo.selected


def _on_salt() -> None:
    demo = _demo()
    demo.set_salt(st.session_state["bt_salt"])
    st.session_state["bt_seq"] = demo.selected


def _valid_selection(mgr, chosen):
    """``chosen`` if the manager still holds that sequence, else its first sequence (None if none)."""
    known = mgr.sequences()
    if chosen in known:
        return chosen
    return known[0] if known else None


# -------------------------------------------------------------------------------- page

demo = _demo()
mgr = demo.mgr

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
    t1.toggle("Hash a block's own tokens only", key="bt_naive", on_change=_on_naive,
              help="The flawed scheme: a block is recognised by its own words, ignoring everything "
                   "before it. Switching restarts the demo.")
    t2.toggle("Give each tenant its own cache salt", key="bt_salt", on_change=_on_salt,
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
                    args=("write_shared",), icon=":material/content_copy:", width="stretch")
        b[3].button("Finish", key="bt_finish", on_click=_do, args=("finish",),
                    icon=":material/done:", width="stretch")
        b2 = st.columns(4)
        b2[0].button("Same prompt", key="bt_new_same", on_click=_do,
                     args=("new_same",), icon=":material/cached:", width="stretch")
        b2[1].button("Other prompt", key="bt_new_other", on_click=_do,
                     args=("new_other",), icon=":material/help:", width="stretch")
        b2[2].button("Swap out", key="bt_swap_out", on_click=_do, args=("swap_out",),
                     icon=":material/download:", width="stretch")
        b2[3].button("Swap in", key="bt_swap_in", on_click=_do, args=("swap_in",),
                     icon=":material/upload:", width="stretch")
        # in words under the buttons, not as tooltips: a tooltip stayed open after a click and
        # covered the row above (Append, Fork)
        st.caption("**Write shared** appends a token to a sequence whose last block is shared (after a fork): "
                   "copy-on-write. **Same prompt**: a new request, the same system prompt with a new question; "
                   "its full system-prompt blocks are found by hash. **Other prompt**: a different system "
                   "prompt followed by A's question; its third block holds the same four words as A's third.")
    if demo.error:
        if demo.error.kind == "error":
            show_error(demo.error.text)
        else:                                     # a hint in the page's own Markdown (**Fork**)
            st.info(demo.error.text)

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

# the Sequence box's value is checked again here, against the manager as it is now: after quick
# clicks the browser could send back a sequence that an action in between had finished
selected = _valid_selection(mgr, st.session_state.get("bt_seq"))
if selected is None:
    st.info("No sequence is left: add one with **Same prompt** or **Other prompt**, or **Reset**.")
try:
    figure = block_table_figure(mgr, demo.meta, demo.highlight, demo.colours(), demo.salt, selected=selected)
except FieldError as exc:          # never a traceback: the core's words, through the one presenter
    figure = None
    show_error(exc, before="The block tables cannot be drawn: ", labels={"seq_id": "Sequence"})
if figure is not None:
    chart(figure, key="bt_figure", width="stretch",
                    config={"displaylogo": False, "displayModeBar": False})   # its tool bar covered the legend
st.caption("Arrows follow the block table of the sequence chosen in the **Sequence** box; every entry also "
           "prints the physical block it points at. **Pink** slots are in a block several block tables "
           "share (refcount 2 or more), as on every page of the lab.")

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

#: Hex digits of a block hash the pool table shows (the full hash is 32 bytes; six tell a few dozen apart).
HASH_DIGITS = 6

left, right = st.columns([3, 2])
with left:
    st.subheader("Physical pool")
    rows = []
    for blk in range(mgr.num_blocks):
        h = mgr.block_hash_of(blk)
        rows.append({"block": blk, "state": mgr.block_state(blk), "refcount": mgr.refcount(blk),
                     "held by": ", ".join(map(str, mgr.holders(blk))),
                     "tokens": words_of(mgr.block_tokens(blk)),
                     "hash": h.hex()[:HASH_DIGITS] if h is not None else ""})
    # short hashes and small columns: the whole table fits the column at 1366 px, no sideways scroll
    data_table(pd.DataFrame(rows), hide_index=True, key="bt_pool_table", height=600,
                 column_config={"tokens": st.column_config.TextColumn(width="medium"),
                                "held by": st.column_config.TextColumn(width="small"),
                                "state": st.column_config.TextColumn(width="small"),
                                "hash": st.column_config.TextColumn(
                                    width="small", help=f"The block hash's first {HASH_DIGITS} hex digits: enough to "
                                    "tell this pool's blocks apart (empty until the block is full).")})
    st.subheader("Block tables")
    trows = []
    for s in mgr.sequences():
        trows.append({"sequence": s, "tokens": len(mgr.token_ids(s)),
                      "block table": str(mgr.host_table(s) if mgr.is_swapped(s) else mgr.block_table(s)),
                      "where": "host (swapped out)" if mgr.is_swapped(s) else "GPU",
                      "text": words_of(mgr.token_ids(s))})
    data_table(pd.DataFrame(trows, columns=["sequence", "tokens", "block table", "where", "text"]),
                 hide_index=True, key="bt_seq_table")
with right:
    st.subheader("What happened")
    st.markdown("\n".join(f"{i}. {line}" for i, line in enumerate(demo.log, 1)))

with st.expander("How the pieces fit"):
    st.markdown(
        "- **Refcount.** A block is shared by listing it in several block tables; its refcount "
        "counts those tables. It returns to the pool only when the count falls to zero.\n"
        f"- **Copy-on-write.** {COPY_ON_WRITE}\n"
        "- **Prefix caching.** A full block is found again by a hash of its parent block's hash, "
        "its own tokens and tagged extra keys (a tenant's salt in the first block, a LoRA name in "
        "every block). A partly filled block is never cached, and a prompt's last token is never a "
        "cache hit. A finished sequence's full blocks keep their hash until the free queue hands "
        "them to someone else, oldest first.\n"
        "- **Swap.** Preempting by swapping copies a sequence's blocks to a fixed-size host pool "
        "and drops its references on the GPU: a block no other table lists is freed, a shared one stays "
        "in use. The blocks must come back (to any free blocks, as the sequence's own copies: sharing is "
        "not restored) before it runs again. "
        "Preempting by recomputation instead drops the blocks and prefills the tokens later.\n\n"
        "Sources: Kwon et al., *PagedAttention* (SOSP 2023) sections 4.4–4.5; vLLM's prefix-caching "
        "design (vllm/v1/core/kv_cache_utils.py); the lesson's reference figure R8."
    )

with st.expander("Where the lab follows vLLM, and where its classroom loop departs"):
    st.markdown(vllm_note())
