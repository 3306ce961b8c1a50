"""Accounting page: slots by hand for reserve-max and paging, block-size cost, prefix sharing.

Renders only. Every figure comes from :mod:`allocator.accounting` (the same functions the
``python -m allocator account`` command prints). Bad input is reported next to its control and
the rest of the page still renders.
"""
from __future__ import annotations

import math

import pandas as pd
import streamlit as st

from allocator.common.formats import pct_fixed
from allocator import accounting as acc
from allocator.common.limits import LIMITS
from allocator.common.errors import FieldError
from allocator.common.validate import number_from_text, whole_number
from allocator.viz.arithmetic import allocation_figure as _allocation_figure
from allocator.viz.arithmetic import cost_figure as _cost_figure
from allocator.viz.arithmetic import sharing_figure as _sharing_figure
from allocator.accounting.block_size import tied_best
from allocator.common.formats import and_list, plural, ratio
from allocator.viz.claims.sweep import best_words
from allocator.viz.claims.capacity import even_numbers
from pages._ui.errors import in_page_words, show_error
from pages._ui.present import chart, data_table

LENGTH_COL = "length (tokens)"
LENGTH_RANGE = LIMITS["lengths"].describe()          # "a whole number from 1 to 10,000,000 (tokens)"
D = acc.ACCOUNT_DEFAULTS
EXAMPLES = {
    "r1": {"label": "R1: 5, 9, 17 tokens, reserve 32",
                "lengths": D["lengths"], "reserve": D["reserve"], "block_size": D["block_size"],
                "candidates": D["candidates"]},
    "r4": {"label": "R4: 512, 37, 1900, 128, 4 tokens, max 2048",
                **acc.R4_PRESET},
}
BLOCK_SIZE_OPTIONS = list(acc.DEFAULT_CANDIDATES)  # 1..256, for the candidate-range control


def _apply_example() -> None:
    """Callback: load the chosen example's reserve, block size and candidate range."""
    ex = EXAMPLES[st.session_state["acc_example"]]
    st.session_state["acc_reserve"] = ex["reserve"]
    st.session_state["acc_block_size"] = ex["block_size"]
    st.session_state["acc_cand_max"] = max(ex["candidates"])


def _init_state() -> None:
    defaults = {"acc_example": "r1", "acc_reserve": D["reserve"],
                "acc_block_size": D["block_size"], "acc_metadata_cost": D["metadata_cost"],
                "acc_cand_max": max(D["candidates"]), "acc_pool": D["pool_slots"],
                "acc_share_a": D["share"][0], "acc_share_b": D["share"][1],
                "acc_share_prefix": D["share"][2], "acc_share_block": D["share"][3]}
    for key, value in defaults.items():
        st.session_state.setdefault(key, value)


def _row_label(row: int) -> str:
    """How the page names a table row (1-based, as the user counts them)."""
    return f"Row {row}: length"


def _read_lengths(table: pd.DataFrame) -> tuple[list[int] | None, list[int], list[str], int]:
    """Return (lengths or None, their table rows, error messages, blank rows ignored).

    Blank rows are skipped, so entry ``i`` of the lengths is table row ``rows[i]`` (1-based);
    :func:`_report` uses that to name the row of a core error about ``lengths[i]``.
    """
    values = table[LENGTH_COL].tolist() if LENGTH_COL in table else []
    errors: list[str] = []
    lengths: list[int] = []
    rows: list[int] = []
    blanks = 0
    for row, value in enumerate(values, start=1):
        if isinstance(value, str):            # a text cell: parse it here, so "abc" is named, never 0
            text = value.strip()
            value = number_from_text(text) if text else None
            if isinstance(value, float) and math.isnan(value):      # typed "nan": not a number, not a blank
                errors.append(f"{_row_label(row)} = {text[:40]!r} is not a number "
                              f"(a length is {LENGTH_RANGE}).")
                continue
        if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
            blanks += 1
            continue
        try:
            lengths.append(whole_number("lengths", value, 1, int(LIMITS["lengths"].high), index=row - 1))
            rows.append(row)
        except FieldError as exc:
            errors.append(f"{exc.reworded(_row_label(row))} (a length is {LENGTH_RANGE}).")
    if not lengths and not errors:
        errors.append("The table is empty: add at least one request length (tokens).")
    return (None if errors else lengths), rows, errors, blanks


#: Core field name -> the control's label, so a message reads in the page's words.
FIELD_LABELS = {"reserve": "Reserve maximum", "block_size": "Block size",
                "pool_slots": "Pool size", "metadata_cost": "Metadata cost c",
                "candidates": "Candidate block size", "length_a": "Request A length",
                "length_b": "Request B length", "prefix_tokens": "Shared prefix"}

#: Another field's code name where a core message mentions it in its advice -> the page's words.
ADVICE_WORDS = {"raise reserve or": "raise the reserve maximum or"}


def _report(exc: ValueError, places: dict, default, rows: list[int] | None = None) -> None:
    """Show ``exc`` in the placeholder of ``places`` for its ``.field``, else in ``default``, in
    the page's words: a :class:`FieldError` about an entry of ``lengths`` is named by its table
    row (``rows[exc.index]``, 1-based), any other by its control's label (:data:`FIELD_LABELS`)."""
    label = None
    if isinstance(exc, FieldError) and exc.field == "lengths" and exc.index is not None:
        label = _row_label(rows[exc.index] if rows and exc.index < len(rows) else exc.index + 1)
    # numbers written as the page writes figures (1,000,000; no spurious .0), as Capacity does
    show_error(even_numbers(in_page_words(exc, FIELD_LABELS, ADVICE_WORDS, label)),
               places.get(getattr(exc, "field", None), default), after=".")


# ---------------------------------------------------------------------------------------------
_init_state()

st.title("Slot accounting")
st.markdown(
    "Two numbers decide how well a KV cache is used: the **tokens** a request has actually "
    "written, and the **slots** the allocator has set aside for it. Whatever separates them is "
    "memory that is allocated yet holds nothing (orange below). This page does that sum by "
    "hand, without any simulation: first for reserving each request's maximum against handing "
    "out fixed-size blocks (pages), then for choosing a block size once every block carries a bookkeeping "
    "price, and last for two requests that share a prefix."
)

# --- 1. Requests and allocations --------------------------------------------------------------
st.header("1 · Reserve the maximum, or allocate blocks")
col_in, col_out = st.columns([1, 2], gap="large")

with col_in:
    st.selectbox("Example", list(EXAMPLES), key="acc_example",
                 format_func=lambda k: EXAMPLES[k]["label"], on_change=_apply_example,
                 help="Loads a worked example of the lesson's reference figures R1 and R4.")
    example = EXAMPLES[st.session_state["acc_example"]]
    base = pd.DataFrame({LENGTH_COL: [str(n) for n in example["lengths"]]})
    edited = st.data_editor(   # a text column: whatever is typed reaches the check, and is named if wrong
        base, key=f"acc_lengths_{st.session_state['acc_example']}", num_rows="dynamic",
        hide_index=True, width="stretch",
        column_config={LENGTH_COL: st.column_config.TextColumn(
            LENGTH_COL, help="Tokens the request holds right now (whole number, at least 1).")})
    lengths, length_rows, length_errors, blank_rows = _read_lengths(edited)
    for message in length_errors:            # they quote the typed cell: shown as plain text
        show_error(message)
    table_slot = st.container()   # core errors about a row of the table (e.g. above reserve)
    if blank_rows:
        st.caption(f"{plural(blank_rows, 'blank row')} ignored.")

    st.number_input("Reserve maximum (slots per request)", step=1, key="acc_reserve",
                    help="Under reserve-max every request is given this many slots on arrival.")
    reserve_slot = st.empty()
    st.slider("Block size (slots per block)", min_value=1, max_value=64, step=1,
              key="acc_block_size",
              help="Under paging a request holds ceil(length / block size) whole blocks.")
    block_slot = st.empty()
    st.number_input("Pool size (slots)", step=1024, key="acc_pool",
                    help="A fixed memory pool, counted in slots: how many such requests fit?")
    pool_slot = st.empty()

reserve = paged = pool = None
requests_slots = {"lengths": table_slot, "reserve": reserve_slot, "block_size": block_slot,
                  "pool_slots": pool_slot}
if lengths is not None:
    try:
        reserve = acc.reserve_max_slots(lengths, st.session_state["acc_reserve"])
    except ValueError as exc:
        _report(exc, requests_slots, reserve_slot, length_rows)
    try:
        paged = acc.paged_slots(lengths, st.session_state["acc_block_size"])
    except ValueError as exc:
        _report(exc, requests_slots, block_slot, length_rows)
    if reserve is not None and paged is not None:
        try:
            pool = acc.slot_pool_capacity(lengths, reserve.reserve, paged.block_size,
                                          st.session_state["acc_pool"])
        except ValueError as exc:
            _report(exc, requests_slots, pool_slot, length_rows)

with col_out:
    if lengths is None:
        st.info("Fix the request table on the left to see the allocations.",
                icon=":material/info:")
    else:
        used = sum(lengths)
        m = st.columns(3)
        m[0].metric("Tokens stored", f"{used:,}", help="Sum of the request lengths.")
        if reserve is not None:
            m[1].metric("Reserve-max slots", f"{reserve.allocated_slots:,}",
                        delta=f"{reserve.unused_slots:,} unused · {pct_fixed(reserve.waste_fraction)}",
                        delta_color="off", delta_arrow="off",
                        help="Requests x reserve maximum.")
        else:
            m[1].metric("Reserve-max slots", "—")
        if paged is not None:
            m[2].metric("Paged slots", f"{paged.allocated_slots:,}",
                        delta=f"{paged.unused_slots:,} unused · {pct_fixed(paged.waste_fraction)}",
                        delta_color="off", delta_arrow="off",
                        help=f"Block size {paged.block_size}: sum over requests of "
                             "ceil(length / block size) x block size.")
        if pool is not None:
            f = st.columns(3)
            f[0].markdown(f"**In a pool of {pool.free_bytes:,} slots**")
            f[1].metric("Fit, reserve-max", f"{pool.fit_reserve:,}",
                        help="floor(pool / reserve maximum) (reference figure R4's formula).")
            f[2].metric("Fit, paged", f"{pool.fit_paged:,}",
                        delta=(f"{ratio(pool.paged_gain)} reserve-max" if pool.paged_gain
                               else None), delta_color="off", delta_arrow="off",
                        help="floor(pool / mean paged slots per request) (reference figure R4's formula).")
        if reserve is not None or paged is not None:
            chart(_allocation_figure(lengths, reserve, paged),
                            key="acc_alloc_chart", config={"displaylogo": False})
        table = pd.DataFrame({"request": [f"r{i + 1}" for i in range(len(lengths))],
                              "tokens": lengths})
        if reserve is not None:
            table["reserved"] = [reserve.reserve] * len(lengths)
            table["empty (reserved)"] = reserve.unused_per_request
        if paged is not None:
            table["blocks"] = paged.blocks_per_request
            table["paged slots"] = paged.allocated_per_request
            table["empty (last block)"] = paged.unused_per_request
        data_table(table, hide_index=True, key="acc_breakdown")
        st.caption("Paged allocation per request is ceil(length / block size) x block size "
                   "(the lesson's reference figure R1). Waste is "
                   "unused / allocated. This is a static snapshot of tail slack: it does not model "
                   "holes between reservations or requests that grow over time — the simulation "
                   "pages do that.")

# --- 2. Block size with a metadata cost -------------------------------------------------------
st.header("2 · What block size is best when every block costs something?")
st.markdown(
    "If empty slots were the only cost, one-slot blocks would always win: nothing is ever left "
    "over at the end of a request. Real systems also pay per block — a block-table entry and a "
    "lookup for each, and, as the PagedAttention paper reports for its own kernel (section 7.2), "
    "kernel time when blocks are very small (this app has not measured that on a GPU). Below, that price is a number "
    "**c**, measured in slots, so the total is *allocated slots + c × blocks*. Raise c and the "
    "best size moves up."
)
ctl, out = st.columns([1, 2], gap="large")
with ctl:
    st.slider("Metadata cost c (slot-equivalents per block)", min_value=0.0, max_value=8.0,
              step=0.25, key="acc_metadata_cost",
              help="What one block's bookkeeping costs, expressed in token slots.")
    st.select_slider("Largest candidate block size", options=BLOCK_SIZE_OPTIONS,
                     key="acc_cand_max",
                     help="Candidates are the powers of two from 1 up to this size "
                          "(reference figure R2 tests 1 to 32).")
    candidates = [p for p in BLOCK_SIZE_OPTIONS if p <= st.session_state["acc_cand_max"]]
    cost_slot = st.empty()
rows = None
if lengths is not None:
    try:
        rows = acc.block_size_table(lengths, st.session_state["acc_metadata_cost"], candidates)
    except ValueError as exc:
        _report(exc, {"lengths": table_slot}, cost_slot, length_rows)
with ctl:
    if rows is not None:
        best = next(r for r in rows if r.is_best)
        tied = tied_best(rows)
        c_now = st.session_state["acc_metadata_cost"]
        st.metric("Best block size (slots)", best_words(tied),
                  delta=f"total cost {best.total_cost:g}", delta_color="off", delta_arrow="off",
                  help="Smallest total cost over the candidates; when several cost the same, all are "
                       "named as a tie.")
        st.caption(f"At c = {c_now:g}: {best.allocated_slots} slots + {c_now:g} × {best.blocks} "
                   f"blocks = {best.total_cost:g}."
                   + (f" Block sizes {and_list(tied)} cost exactly the same: a tie." if len(tied) > 1 else ""))
with out:
    if rows is None:
        st.info("The block-size table needs a valid request table.", icon=":material/info:")
    else:
        cost_table = pd.DataFrame({
            "block size": [r.block_size for r in rows],
            "slots": [r.allocated_slots for r in rows],
            "unused": [r.unused_slots for r in rows],
            "blocks": [r.blocks for r in rows],
            "c × blocks": [r.metadata_cost for r in rows],
            "total cost": [r.total_cost for r in rows],
            "best": [("◀ best (tie)" if len(tied) > 1 else "◀ best") if r.ties_best else "" for r in rows],
        })
        styled = cost_table.style.apply(
            lambda row: ["background-color: rgba(0, 158, 115, 0.22); font-weight: bold"
                         if row["best"] else "" for _ in row], axis=1
        ).format({"c × blocks": "{:g}", "total cost": "{:g}"})
        data_table(styled, hide_index=True, key="acc_cost_table")
        st.caption("Units: block size, slots, unused and blocks are counts; c × blocks and total "
                   "cost are token-slot equivalents.")
        chart(_cost_figure(rows, sum(lengths), st.session_state["acc_metadata_cost"]),
                        key="acc_cost_chart", config={"displaylogo": False})
        # R2's worked answer only beside R2's own case: under other lengths its numbers would sit
        # under a table they do not describe (issue 40).
        r2_case = sorted(lengths) == [5, 9, 17] and tuple(candidates) == acc.R2_CANDIDATES
        st.caption(("These are reference figure R2's lengths and sizes; its worked answer: best 1 at c = 0 "
                    "(cost 31), 2 at c = 0.25 (38.25), 4 at c = 1 (50), 8 at c = 4 (72). " if r2_case else "")
                   + "c is an abstract charge; it stands in for, but does not measure, kernel gather overhead.")

# --- 3. Prefix sharing ------------------------------------------------------------------------
st.header("3 · Two requests with a shared prefix")
st.markdown(
    "When two requests begin with the same tokens, a paged cache can let both block tables "
    "point at the same physical blocks. Only **complete** blocks of the common prefix can be "
    "shared this way: a half-filled block will receive each request's own next token, so it "
    "cannot belong to both. Sharing changes a third number, and the three are kept apart "
    "here — adding them up would count one saving twice."
)
s = st.columns(4)
# No widget minimums: whatever is typed reaches the core's check, and an invalid value replaces
# the results with its message instead of leaving the last valid results on screen.
s[0].number_input("Request A length (tokens)", step=1, key="acc_share_a")
s[1].number_input("Request B length (tokens)", step=1, key="acc_share_b")
s[2].number_input("Shared prefix (tokens)", step=1, key="acc_share_prefix")
s[3].number_input("Block size (slots per block)", step=1, key="acc_share_block")
share_slots = {"length_a": s[0].empty(), "length_b": s[1].empty(),
               "prefix_tokens": s[2].empty(), "block_size": s[3].empty()}
try:
    ps = acc.prefix_sharing(st.session_state["acc_share_a"], st.session_state["acc_share_b"],
                            st.session_state["acc_share_prefix"],
                            st.session_state["acc_share_block"])
except ValueError as exc:
    ps = None
    _report(exc, share_slots, share_slots["block_size"])
if ps is not None:
    q = st.columns(3)
    q[0].metric("Logical tokens", f"{ps.logical_tokens:,}",
                help="Tokens the two requests contain: A + B. Sharing does not change it.")
    q[1].metric("Slots without sharing", f"{ps.slots_unshared:,}",
                help="Each request rounded up to whole blocks, separately.")
    q[2].metric("Distinct physical slots (shared)", f"{ps.slots_shared:,}",
                delta=f"{ps.saved_slots:,} slots saved", delta_color="off", delta_arrow="off",
                help="Full prefix blocks are stored once.")
    chart(_sharing_figure(ps), key="acc_share_chart", config={"displaylogo": False})
    st.caption(f"{plural(ps.shared_blocks, 'complete prefix block')} of {ps.block_size} slots "
               f"{'is' if ps.shared_blocks == 1 else 'are'} stored "
               f"once, so each saves {ps.block_size} slots; any prefix tokens in a partly filled "
               "block are stored twice. Reference figure R3's case: lengths 20 and 23, an 8-token prefix, "
               "blocks of 4 → 43 logical tokens, 44 slots separately, 36 shared.")
else:
    st.info("Fix the value marked above to see the three quantities.", icon=":material/info:")
