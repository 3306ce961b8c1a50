"""What the Capacity page says about a result beyond its metrics (no streamlit).

Every number is read from the :class:`allocator.accounting.Capacity` shown beside the sentence
(``tests/pages/test_capacity_claims.py`` checks each one against it).
"""
from __future__ import annotations

import re

from allocator.accounting.kv_configs import SCHEME_NAMES, KVVariant, ModelKV, fp8_scale_bytes
from allocator.accounting.memory import Capacity
from allocator.accounting.speculation import SpeculationRow
from allocator.common.formats import pct_fixed


def oversized_block_note(cap: Capacity) -> str | None:
    """The note for a block larger than the maximum context, else None.

    Such a block holds any sequence the page admits whole, so paging gives each sequence exactly one
    block and allocates all of it: the page's "empty" slots and percentage are the rest of that one
    block, and paging then sets aside more per sequence than reserve-max does. The formulas are R5's
    (``assets/reference_figures.md``); on a block too large bringing internal fragmentation back, see
    the PagedAttention paper (Kwon et al., SOSP 2023, arXiv:2309.06180), section 7.2, block size.

    Args:
        cap: the capacity result on screen (one mean length, as the Capacity page computes it).

    Returns:
        One paragraph of plain text (digits only: no Markdown in it), or None when
        ``cap.block_size <= cap.max_context``.
    """
    if cap.block_size <= cap.max_context:
        return None
    more = "more than" if cap.paged_slots > cap.reserved_slots else "as much as"
    return (f"A block of {cap.block_size:,} slots is larger than the max context ({cap.max_context:,} tokens): "
            f"every sequence fits in one block, and the whole block is allocated to it. So the slack above is "
            f"the rest of that block: {cap.paged_unused_slots:,g} of its {cap.paged_slots:,g} slots sit empty "
            f"at the mean of {cap.mean_tokens:,g} tokens used ({pct_fixed(cap.waste_fraction_paged)}), {more} "
            f"the {cap.reserved_slots:,} slots reserve-max sets aside, and paging fits {cap.fit_paged:,} "
            f"sequences against reserve-max's {cap.fit_reserve:,}.")


def paged_card_heading(cap: Capacity) -> str:
    """The heading of the paged card beside "Buy twice the memory", from the result it shows.

    It claims a fix only when paging fits more sequences than reserve-max in the same memory
    (``cap.fit_paged > cap.fit_reserve``); equal or fewer (a block larger than the max context,
    :func:`oversized_block_note`) is said as such.

    Args:
        cap: the capacity result on screen.

    Returns:
        Markdown with one bold phrase; its numbers are ``cap.fit_paged`` and ``cap.fit_reserve``.
    """
    if cap.fit_paged > cap.fit_reserve:
        return "**Fix the allocator** (page the cache, same memory)"
    if cap.fit_paged == cap.fit_reserve:
        return (f"**Page the cache** (same memory): no gain at this block size, "
                f"{cap.fit_paged:,} sequences either way")
    return (f"**Page the cache** (same memory): worse at this block size, "
            f"{cap.fit_paged:,} sequences against reserve-max's {cap.fit_reserve:,}")


#: A number in a message: not part of a word, a longer number or an already grouped one.
_NUMBER = re.compile(r"(?<![\w.,+])(-?)(\d+)(?:\.(\d+))?(?![\w,]|\.\d)")


def even_numbers(text: str) -> str:
    """``text`` (a message about a refused value) with every number written as the page writes
    figures: thousands separators and no spurious ``.0``; the digits themselves are kept.

    Examples: ``"Block size = 1000000"`` -> ``"Block size = 1,000,000"``; ``"= -1.0"`` -> ``"= -1"``;
    ``"5000.0 is above max context (2048 tokens)"`` -> ``"5,000 is above max context (2,048 tokens)"``;
    ``2.5``, ``4,096`` and ``fp16`` stay as they are.
    """
    def one(m: re.Match) -> str:
        sign, whole, frac = m.group(1), m.group(2), (m.group(3) or "").rstrip("0")
        return f"{sign}{int(whole):,}" + (f".{frac}" if frac else "")
    return _NUMBER.sub(one, text)


# ---------------------------------------------------------------------------------------------
# Today's KV caches: a shipped model config, factor by factor (issue 41)
# ---------------------------------------------------------------------------------------------

def _times(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def factors_text(model: ModelKV, row: KVVariant) -> str:
    """KV bytes per token of ``row`` written as the product of its factors, every number from
    ``model`` (the config) and ``row`` (its layout and dtype); every layer keeping every token.

    * MHA/GQA with K and V heads of one width: ``layers x K/V heads x head dim x bytes x 2 (K and V)``
      (Kwon et al. 2023, section 3);
    * K and V heads of different widths (DeepSeek-V3 decompressed: K 192, V 128):
      ``layers x K/V heads x (K dim + V dim) x bytes``;
    * MLA: ``layers x (kv_lora_rank latent + qk_rope_head_dim rotary key) x bytes``, no factor 2 and
      no heads (DeepSeek-V2, arXiv:2405.04434, section 2.1).

    Returns:
        Plain text ending in ``= <bytes_per_token> bytes``.
    """
    b = _times(row.bytes_per_element, "byte", "bytes")
    if row.scheme == "mla":
        return (f"{model.layers} layers × ({model.kv_lora_rank} latent + {model.qk_rope_head_dim} rotary key) "
                f"× {b} (one latent per token per layer: no × 2, no heads) = {row.bytes_per_token:,} bytes")
    heads = model.heads if row.scheme == "mha" else model.kv_heads
    if model.k_head_dim == model.v_head_dim:
        dims = f"{model.k_head_dim} dims × {b} × 2 (K and V)"
    else:
        dims = f"({model.k_head_dim} K + {model.v_head_dim} V dims) × {b}"
    return f"{model.layers} layers × {heads} K/V heads × {dims} = {row.bytes_per_token:,} bytes"


def variant_label(model: ModelKV, row: KVVariant) -> str:
    """The row's name in the comparison: what it is and what it changes from the model as
    configured (``"as configured: GQA, bf16, 18 of 36 layers windowed (128 tokens)"``)."""
    dtype = "fp8" if row.kv_cache_dtype == "fp8" else f"{model.dtype.replace('bfloat16', 'bf16')}"
    what = SCHEME_NAMES[row.scheme]
    window = (f", {model.window_layers} of {model.layers} layers windowed ({row.window} tokens)"
              if row.windowed else "")
    head = {"as configured": "as configured", "mha": "one K/V head per query head",
            "gqa": "its own K/V heads", "mla": "as a latent", "dtype": "other dtype",
            "no window": "every layer full"}[row.change]
    extra = ""
    if row.scheme == "mha" and model.kv_heads == model.heads:
        extra = f" (its config lists {model.kv_heads} K/V heads, one per query head)"
    return f"{head}: {what}, {dtype}{window}{extra}"


def per_sequence_text(model: ModelKV, row: KVVariant, tokens: int) -> str:
    """Bytes a windowed variant holds for a sequence of ``tokens`` (reserve-max's max context):
    full layers keep every token, windowed ones min(tokens, window). Plain text; its numbers are
    ``row``'s and ``tokens``."""
    per_layer = row.elements_per_layer * row.bytes_per_element
    if not row.windowed:
        return f"{row.bytes_per_token:,} bytes × {tokens:,} tokens = {row.bytes_per_token * tokens:,} bytes"
    full = model.layers - model.window_layers
    held = min(tokens, row.window)
    total = row.full_bytes_per_token * tokens + row.window_bytes_per_token * held
    return (f"{_times(full, 'full layer', 'full layers')} × {per_layer:,} bytes × {tokens:,} tokens + "
            f"{_times(model.window_layers, 'windowed layer', 'windowed layers')} × {per_layer:,} bytes × "
            f"min({tokens:,}, {row.window:,}) = {total:,} bytes")


def fp8_scale_text(model: ModelKV, row: KVVariant) -> str:
    """What the FP8 cache adds besides its 1-byte elements: vLLM's per-tensor scales, one float32
    for K and one for V per attention layer (vllm/model_executor/layers/quantization/kv_cache.py),
    for the whole model, against one token's bytes in ``row`` (an fp8 row)."""
    scales = fp8_scale_bytes(model)
    return (f"FP8 adds vLLM's scales: one float32 for K and one for V in each layer, {model.layers} × 8 = "
            f"{scales:,} bytes for the whole model, not per token — less than one token's "
            f"{row.bytes_per_token:,} bytes, so it is negligible." if scales < row.bytes_per_token else
            f"FP8 adds vLLM's scales: one float32 for K and one for V in each layer, {model.layers} × 8 = "
            f"{scales:,} bytes for the whole model, not per token.")


def window_note(model: ModelKV, bytes_per_token: int, slots_where: str = "The sections below",
                table_where: str = "above") -> str | None:
    """For a model with sliding-window layers, what the lesson's slot-based figures count: every
    layer keeping every token (``bytes_per_token``), which is not the model's own memory; None for a
    model without windows. ``slots_where`` and ``table_where`` place those figures and the
    comparison table (the page: below / above; the CLI: "The lines above" / "below")."""
    if not model.window_layers:
        return None
    return (f"{model.name}: {model.window_layers} of its {model.layers} layers keep only the last "
            f"{model.sliding_window:,} tokens. {slots_where} price a slot as if every layer kept every "
            f"token ({bytes_per_token:,} bytes); the model's own bytes per sequence and the sequences that "
            f"fit are in the row \"as configured\" {table_where}.")


def alternatives_rows(model: ModelKV, rows: list[KVVariant], max_context: int) -> list[dict]:
    """The comparison table, one dict per variant (column -> value), every number from ``rows``:
    bytes per token, bytes reserved per sequence at ``max_context``, bytes paged per sequence at the
    mean, and the sequences that fit each way."""
    return [{"Variant": variant_label(model, r),
             "KV bytes per token (every layer)": r.bytes_per_token,
             f"Reserved per sequence ({max_context:,} tokens), bytes": r.reserved_bytes,
             "Paged per sequence, bytes": r.paged_bytes,
             "Sequences, reserve-max": r.fit_reserve,
             "Sequences, paged": r.fit_paged} for r in rows]


def speculation_text(cap: Capacity, rows: list[SpeculationRow], acceptance_rate: float) -> str:
    """The Capacity page's sentence under its speculation table: what the lookahead costs at the
    largest k shown, and what the acceptance rate buys, every number read from ``rows``
    (:func:`allocator.accounting.speculation.speculation_capacity` of ``cap``; ``rows[0]`` is k = 0).

    Returns:
        Plain text (no Markdown): ``tests/pages/test_capacity_claims.py`` checks each number.
    """
    base, top = rows[0], rows[-1]
    cost = (f"With k = {top.k} draft tokens a step, every running sequence keeps {top.lookahead_slots} lookahead "
            f"slots beyond its tokens: at the mean of {cap.mean_tokens:,g} tokens that is {top.blocks:,} blocks "
            f"of {cap.block_size} slots instead of {base.blocks:,}, and {top.fit:,} sequences fit instead of "
            f"{base.fit:,}")
    if top.fewer:
        cost += f" ({top.fewer:,} fewer)."
    elif base.fit == 0:
        cost += (" (no sequence fits either way: the free memory holds fewer blocks than one sequence needs "
                 "even without the lookahead).")
    elif cap.mean_tokens + top.k > cap.max_context:
        cost += (" (none fewer: a sequence never needs slots past the max context, where vLLM caps the "
                 "lookahead).")
    elif top.blocks == base.blocks:
        cost += " (none fewer: the lookahead fits in the last block's empty tail at this mean)."
    else:
        cost += (" (none fewer: the memory left over beside them without the lookahead also holds the extra "
                 "blocks they need with it).")
    gain = (f" In exchange, at an acceptance rate of {acceptance_rate:g} a step yields {top.tokens_per_step:.2f} "
            f"tokens on average instead of 1, and {top.rejected_per_step:.2f} of its {top.k} draft slots are "
            "rejected and written over by the next step (the model's expectation, not a measurement).")
    return cost + gain
