"""Capacity page: bytes per token and per sequence, and how many sequences fit, both ways.

Renders only. Every figure comes from :mod:`allocator.accounting` (the same functions the
``python -m allocator capacity`` command prints). Bad input is reported next to its control and
the rest of the page still renders.
"""
from __future__ import annotations

import pandas as pd
import streamlit as st

from allocator.common.formats import pct_fixed
from allocator import accounting as acc
from allocator.viz.arithmetic import curve_figure as _curve_figure
from allocator.viz.arithmetic import fit_figure as _fit_figure
from allocator.viz.claims.capacity import oversized_block_note
from allocator.common.formats import ratio
from allocator.viz.claims.capacity import even_numbers, paged_card_heading
from allocator.accounting.kv_configs import CONFIG_KEYS, kv_alternatives, model_kv
from allocator.viz.arithmetic import alternatives_figure as _alternatives_figure
from allocator.viz.claims.capacity import (alternatives_rows, factors_text, fp8_scale_text, per_sequence_text,
                                           variant_label, window_note)
from allocator.accounting.speculation import speculation_capacity
from allocator.viz.arithmetic import speculation_figure as _speculation_figure
from allocator.viz.claims.capacity import speculation_text
from pages._ui.errors import in_page_words, show_error
from pages._ui.present import chart, data_table, keep_last_values
from pages._ui.url_params import (ACCEPTANCE_STEP, CAPACITY_CHOICES, CAPACITY_PARAMS, CUSTOM_MODEL,
                                  capacity_url_value, check_capacity_params)

CUSTOM = CUSTOM_MODEL
MODEL_OPTIONS = list(CAPACITY_CHOICES["model"])
#: The KV cache's element type for a model read from its config.json (vLLM's kv_cache_dtype values).
KV_DTYPE_LABELS = {"auto": "the model's own (bf16, 2 bytes)", "fp8": "fp8 (1 byte; vLLM kv_cache_dtype=fp8)"}
DTYPE_BYTES = {1: "1 byte (fp8 / int8)", 2: "2 bytes (fp16 / bf16)", 4: "4 bytes (fp32)"}


def _init_state() -> None:
    # the defaults are the URL check's (url_params.CAPACITY_PARAMS); the block size is a float field:
    # 2.5 reaches the core and is refused there; an int field truncated it to 2 in the browser (a
    # silent wrong answer)
    for key, value in CAPACITY_PARAMS.values():
        st.session_state.setdefault(key, value)


def _read_url() -> list[str]:
    """Once per session, before the widgets are drawn: a link's values (``/capacity?model=qwen3-32b&
    free_gib=80``) start the controls; a value a control cannot take, or a name that is no setting of
    this page, is dropped from the link and named in a note (``url_params.check_capacity_params``)."""
    if st.session_state.get("cap_url_checked"):
        return []
    st.session_state["cap_url_checked"] = True
    messages = keep_last_values([n for n in st.query_params.keys() if n != "present"])   # present: present.py
    params = st.query_params.to_dict()              # a repeated parameter: its last value
    accepted, refused = check_capacity_params(params)
    for name in params:
        if name != "present" and CAPACITY_PARAMS.get(name, ("",))[0] not in accepted:
            del st.query_params[name]
    st.session_state.update(accepted)
    return messages + refused


def _write_url() -> None:
    """Keep every control's value that is not its default in the link (a shared link opens the page
    as it is now); defaults and values the page is reporting as refused are left out."""
    for name, (key, _) in CAPACITY_PARAMS.items():
        raw = capacity_url_value(name, st.session_state.get(key))
        if raw is None:
            if name in st.query_params:
                del st.query_params[name]
        elif st.query_params.get(name) != raw:
            st.query_params[name] = raw


def _model_label(key: str) -> str:
    if key in CONFIG_KEYS:
        return f"{model_kv(key).name} (its config.json)"
    return "Custom shape…" if key == CUSTOM else acc.PRESETS[key].short


# ---------------------------------------------------------------------------------------------
_init_state()
_url_notes = _read_url()

st.title("Capacity: how many sequences fit")
for _note in _url_notes:
    show_error(_note, kind="warning", icon=":material/link_off:")
st.markdown(
    "Slots are abstract until you price them. One slot stores a token's keys and values in "
    "every layer, so its size follows from the model's shape. Multiply by the context you "
    "promise to support and you have what reserve-max sets aside for each sequence — before "
    "the sequence has produced a single token, and however short it turns out to be. Paging "
    "charges only for the blocks a sequence really fills."
)

inp = st.columns([1.4, 1, 1, 1, 1])
slots: dict[str, object] = {}
inp[0].selectbox("Model", MODEL_OPTIONS, key="cap_model", format_func=_model_label)
slots["model"] = inp[0].empty()
inp[1].number_input("Free memory (GiB)", step=1.0, format="%g",
                    key="cap_free_gib",
                    help="Memory left for the KV cache, in binary gibibytes: 1 GiB = 2^30 bytes.")
slots["free_gib"] = slots["free_bytes"] = inp[1].empty()
inp[2].number_input("Max context (tokens)", step=128, key="cap_max_context",
                    help="What reserve-max sets aside for every sequence on admission.")
slots["max_context"] = inp[2].empty()
inp[3].number_input("Mean tokens used", step=10.0, format="%g",
                    key="cap_mean_tokens",
                    help="Average length a sequence really reaches (tokens).")
slots["mean_tokens"] = inp[3].empty()
inp[4].number_input("Block size (slots)", step=1.0, format="%g", key="cap_block_size",
                    help="Paging hands out memory in blocks of this many slots.")
slots["block_size"] = inp[4].empty()
if st.session_state["cap_model"] == CUSTOM:
    c = st.columns(4)
    c[0].number_input("Layers", step=1, key="cap_layers")
    slots["layers"] = c[0].empty()
    c[1].number_input("K/V heads", step=1, key="cap_kv_heads",
                      help="Key/value heads; fewer than query heads under grouped-query "
                           "attention (GQA).")
    slots["kv_heads"] = c[1].empty()
    c[2].number_input("Head dimension", step=1, key="cap_head_dim")
    slots["head_dim"] = c[2].empty()
    c[3].selectbox("Bytes per element", list(CAPACITY_CHOICES["bytes_per_element"]),
                   key="cap_bytes_per_element",
                   format_func=DTYPE_BYTES.get)
    slots["bytes_per_element"] = c[3].empty()
elif st.session_state["cap_model"] in CONFIG_KEYS:
    c = st.columns([1.4, 4])
    c[0].selectbox("KV cache dtype", list(CAPACITY_CHOICES["kv_cache_dtype"]), key="cap_kv_dtype",
                   format_func=KV_DTYPE_LABELS.get,
                   help="What one K or V number takes in the cache. vLLM's kv_cache_dtype=fp8 stores 1 byte "
                        "per number plus one float32 scale for K and one for V in each layer.")
    slots["kv_cache_dtype"] = c[0].empty()
general_box = st.container()   # errors about no control on this page
kv_box = st.container()


#: Core field name -> the control's label, so a message reads in the page's words.
FIELD_LABELS = {"model": "Model", "free_gib": "Free memory (GiB)", "free_bytes": "Free memory",
                "max_context": "Max context", "mean_tokens": "Mean tokens used",
                "block_size": "Block size", "layers": "Layers", "kv_heads": "K/V heads",
                "head_dim": "Head dimension", "bytes_per_element": "Bytes per element",
                "kv_cache_dtype": "KV cache dtype"}

#: Another field's code name where a core message mentions it (``"is above max_context"``) ->
#: the page's words.
ADVICE_WORDS = {"max_context": "max context"}


def _report(exc: ValueError) -> None:
    """Show a core error next to the control holding ``exc.field``, in the page's words (its
    label, :data:`FIELD_LABELS`); an error for a field without a control here, or any other
    ValueError, is shown as it is under the inputs."""
    show_error(even_numbers(in_page_words(exc, FIELD_LABELS, ADVICE_WORDS)),
               slots.get(getattr(exc, "field", None), general_box), after=".")


#: The one line shown where figures cannot be worked out from the inputs.
FIX_INPUTS = "Fix the value marked above to see these figures."


bpt = free_bytes = fixed = cap = config = None
model_text = ""
try:
    if st.session_state["cap_model"] in CONFIG_KEYS:
        config = model_kv(st.session_state["cap_model"])
        own = kv_alternatives(config, st.session_state["cap_kv_dtype"], 0, 1, 1, 1)[0]
        bpt = own.bytes_per_token
        model_text = (f"{factors_text(config, own)}. Source: {config.name}'s config.json, "
                      f"{config.source} (read {config.read}).")
    elif st.session_state["cap_model"] == CUSTOM:
        bpt = acc.kv_bytes_per_token(st.session_state["cap_layers"],
                                     st.session_state["cap_kv_heads"],
                                     st.session_state["cap_head_dim"],
                                     st.session_state["cap_bytes_per_element"])
        model_text = (f"{st.session_state['cap_layers']} layers × "
                      f"{st.session_state['cap_kv_heads']} K/V heads × "
                      f"{st.session_state['cap_head_dim']} dims × "
                      f"{st.session_state['cap_bytes_per_element']} bytes × 2 (K and V)")
    else:
        model = acc.model_config(st.session_state["cap_model"])
        bpt = model.bytes_per_token
        model_text = (f"{model.layers} layers × {model.kv_heads} K/V heads × {model.head_dim} "
                      f"dims × {model.bytes_per_element} bytes ({model.dtype}) × 2 (K and V). "
                      f"Source: {model.source}.")
except ValueError as exc:
    _report(exc)
try:
    free_bytes = acc.gib_to_bytes(st.session_state["cap_free_gib"], "free_gib")
except ValueError as exc:
    _report(exc)
if bpt is not None and free_bytes is not None:
    try:
        fixed = acc.reserve_max_capacity(bpt, free_bytes, st.session_state["cap_max_context"])
        cap = acc.capacity(bpt, free_bytes, st.session_state["cap_max_context"],
                           st.session_state["cap_mean_tokens"],
                           st.session_state["cap_block_size"])
    except ValueError as exc:
        _report(exc)

fb = acc.format_bytes
with kv_box:
    if bpt is not None:
        k = st.columns([1, 3], vertical_alignment="center")
        k[0].metric("KV cache per token", fb(bpt), help=f"{bpt:,} bytes")
        k[1].caption(f"{bpt:,} bytes = {model_text}")
        if config is not None:
            for field, why in config.unconfirmed.items():
                st.caption(f"Not confirmed — {field}: {why}.")

if config is not None:
    rows = None
    try:   # only once the lesson's own figures worked out: a bad input is then reported once, above
        rows = None if cap is None else kv_alternatives(config, st.session_state["cap_kv_dtype"], free_bytes,
                               st.session_state["cap_max_context"], st.session_state["cap_mean_tokens"],
                               st.session_state["cap_block_size"])
    except ValueError as exc:
        _report(exc)
    st.header(f"What {config.name} stores, and what it would store otherwise")
    if rows is None:
        st.info(FIX_INPUTS, icon=":material/info:")
    else:
        st.markdown(
            "Each row changes one factor from the model as its config.json describes it: one K/V head per "
            "query head (MHA) instead of shared ones (GQA), a compressed latent (MLA) instead of per-head "
            "keys and values, the other element type, or every layer keeping every token instead of "
            "stopping at its window. The counts use the memory, max context, mean and block size above.")
        for r in rows:
            st.caption(f"{variant_label(config, r)} — {factors_text(config, r)}"
                       + (f"; per sequence at the max context: {per_sequence_text(config, r, st.session_state['cap_max_context'])}"
                          if r.windowed else ""))
        data_table(alternatives_rows(config, rows, st.session_state["cap_max_context"]), hide_index=True,
                     key="cap_alternatives_table")
        st.caption(fp8_scale_text(config, next(r for r in rows if r.kv_cache_dtype == "fp8")))
        chart(_alternatives_figure(config, rows), key="cap_alternatives_chart",
                        config={"displaylogo": False})
    note_text = window_note(config, bpt) if bpt is not None else None
    if note_text:
        st.info(note_text, icon=":material/info:")

# Results, full width below the inputs.
st.subheader("Reserve the maximum")
if fixed is None:
    st.info(FIX_INPUTS, icon=":material/info:")
else:
    r = st.columns(3)
    r[0].metric("Reserved per sequence", fb(fixed["reserved_bytes"]),
                delta=(f"{fb(cap.used_bytes)} used" if cap is not None else None),
                delta_color="off", delta_arrow="off",
                help=f"{fixed['reserved_slots']:,} tokens × {fb(bpt)} = "
                     f"{fixed['reserved_bytes']:,} bytes")
    if cap is not None:
        r[1].metric("Reserved but empty", pct_fixed(cap.waste_fraction_reserve),
                    help=f"1 − {cap.mean_tokens:,g} / {cap.max_context:,} "
                         "(mean tokens / maximum context)")
    else:
        r[1].metric("Reserved but empty", "—")
    r[2].metric("Sequences, reserve-max", f"{fixed['fit_reserve']:,}",
                help="floor(free memory / reserved per sequence). It does not depend "
                     "on how long sequences really are.")

st.subheader("Allocate blocks as sequences grow")
if cap is None:
    st.info(FIX_INPUTS, icon=":material/info:")
else:
    p = st.columns(3)
    p[0].metric("Blocks per sequence", f"{cap.paged_blocks:,g}",
                delta=f"= {cap.paged_slots:,g} slots, {cap.paged_unused_slots:,g} empty",
                delta_color="off", delta_arrow="off",
                help=f"ceil({cap.mean_tokens:,g} / {cap.block_size}) blocks of "
                     f"{cap.block_size} slots")
    p[1].metric("Allocated per sequence", fb(cap.paged_bytes),
                delta=f"{pct_fixed(cap.waste_fraction_paged)} empty", delta_color="off",
                delta_arrow="off", help=f"{cap.paged_slots:,g} slots × {fb(bpt)}")
    p[2].metric("Sequences, paged", f"{cap.fit_paged:,}",
                delta=(f"{ratio(cap.paged_gain)} reserve-max" if cap.paged_gain
                       else None), delta_color="off", delta_arrow="off",
                help="floor(free memory / allocated per sequence)")
    note = oversized_block_note(cap)
    if note:
        st.info(note, icon=":material/info:")

if cap is not None:
    st.header("Twice the memory, or a better allocator?")
    left, right = st.columns(2, gap="large")
    kept = 1 - cap.waste_fraction_reserve
    with left.container(border=True):
        st.markdown("**Buy twice the memory** (keep reserve-max)")
        st.metric(f"Sequences in {fb(2 * cap.free_bytes)}, reserve-max",
                  f"{cap.fit_reserve_double:,}")
        st.markdown(
            f"Doubling the card doubles the count, but the new memory is reserved the same way: "
            f"{pct_fixed(cap.waste_fraction_reserve)} of it still sits empty. Each GiB bought stores "
            f"only {kept:.2f} GiB of tokens.")
    with right.container(border=True):
        st.markdown(paged_card_heading(cap))
        st.metric(f"Sequences in {fb(cap.free_bytes)}, paged", f"{cap.fit_paged:,}")
        st.markdown(
            f"Same hardware, but each sequence now holds {cap.paged_blocks:,g} "
            f"block{'' if cap.paged_blocks == 1 else 's'} instead of "
            f"a {cap.max_context:,}-token reservation; at most one block's tail per sequence is "
            f"empty ({pct_fixed(cap.waste_fraction_paged)} here).")
    chart(_fit_figure(cap), key="cap_fit_chart", config={"displaylogo": False})

    st.header("The reservation does not notice short requests")
    st.markdown(
        "Change the mean length above and watch where the markers land. Reserve-max admits "
        "the same number of sequences whatever they turn out to need, because it pays for the "
        "maximum up front. Paging's count rises as sequences get shorter.")
    chart(_curve_figure(cap), key="cap_curve_chart", config={"displaylogo": False})

st.header("Speculative decoding: the slots drafts hold")
st.markdown(
    "A speculating server lets a small proposer guess the next k tokens and has the model check them "
    "all in one step. Every guess needs a slot in the sequence's KV cache before it is checked, so each "
    "running sequence holds k lookahead slots past its last token (vLLM's allocate_slots reserves them "
    "every step). Guesses the model rejects give their slots back for the next step, but the "
    "reservation is made again each time: the memory cost does not depend on how many are accepted; "
    "what a step yields does.")
st.slider("Acceptance rate (each draft token)", 0.0, 1.0, step=ACCEPTANCE_STEP, key="cap_acceptance_rate",
          help="Probability that the model accepts a draft token, each independently until the first "
               "rejection (Leviathan et al. 2023, section 3.1). 0.7 is a lesson's value, not a measurement: "
               "it depends on the proposer, the model and the text.")
if cap is None:
    st.info(FIX_INPUTS, icon=":material/info:")
else:
    spec_rows = speculation_capacity(cap, st.session_state["cap_acceptance_rate"])
    # short headings: eight columns fit 1366 px; "fewer" is against k = 0, "(model)" Leviathan's expectation
    data_table(pd.DataFrame([{"k": r.k, "lookahead slots": r.lookahead_slots, "blocks/seq": r.blocks,
                              "KV/seq": fb(r.bytes), "sequences fit": r.fit, "fewer": r.fewer,
                              "tokens/step (model)": round(r.tokens_per_step, 2),
                              "rejected/step (model)": round(r.rejected_per_step, 2)} for r in spec_rows]),
               hide_index=True, key="cap_speculation_table")
    st.caption("k: draft tokens a step; blocks/seq and KV/seq at the mean length; fewer: sequences fewer than at "
               "k = 0; tokens/step and rejected/step: the acceptance model's expectation a decode step.")
    st.caption(speculation_text(cap, spec_rows, st.session_state["cap_acceptance_rate"]))
    chart(_speculation_figure(cap, spec_rows, st.session_state["cap_acceptance_rate"]),
          key="cap_speculation_chart", config={"displaylogo": False})
    st.caption("Simulated step by step on the engine rather than taken at the mean: `python -m allocator simulate "
               "--rules v1 --num-speculative-tokens 4` runs the lesson's forty requests with and without drafts.")

_write_url()

st.caption(
    "Units: every memory figure on this page is binary — 1 KiB = 1,024 bytes, 1 MiB = 1,024 "
    "KiB, 1 GiB = 1,024 MiB. The lesson's reference figures (R5) write KB, MB and GB for these same "
    "amounts "
    "(the 7B model's \"512 KB\" per token is 524,288 bytes), and the PagedAttention paper's "
    "\"800 KB\" per OPT-13B token is 819,200 bytes, i.e. 800 KiB. Paging a *mean* length, as "
    "here and in R5, gives one block tail per sequence exactly; a real mix of lengths "
    "wastes about half a block per sequence on average."
)
