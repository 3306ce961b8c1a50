"""The static site's other pages: the arithmetic pages at the lesson's worked examples, and the
Block tables walk-through as a recorded sequence of states.

Each page is plain data ``{"title", "intro_html", "sections": [...]}``; a section has a title,
an escaped HTML text (``allocator.viz.export.markup.markdown_html``), and a figure (plotly JSON), a table
(rows of plain values) or a list of recorded states. The figures are the pages' own
(``allocator.viz.arithmetic``, ``allocator.viz.block_tables_figure``); every number comes from
:mod:`allocator.accounting` or :class:`allocator.memory.block_manager.BlockManager`.

Sources: ``assets/reference_figures.md`` R1-R5 for the worked examples; Kwon et al.,
PagedAttention (SOSP 2023) sections 4.4-4.5 for the block-table operations.
"""
from __future__ import annotations

import json

from allocator import accounting as acc
from allocator.common.formats import pct_fixed
from allocator.viz.arithmetic import (allocation_figure, cost_figure, curve_figure, fit_figure,
                                      sharing_figure)
from allocator.viz.block_tables_demo import BLOCK_SIZE, BlockTablesDemo, words_of
from allocator.viz.block_tables_figure import block_table_figure
from allocator.viz.export.markup import markdown_html
from allocator.viz.modebar import clear_of_modebar
from allocator.common.formats import ratio

#: Reference figure R2's metadata costs (each gives a different best block size).
R2_COSTS = (0.0, 0.25, 1.0, 4.0)
#: Reference figure R1's block sizes for the slack comparison.
R1_BLOCK_SIZES = (4, 8, 16)
#: The walk-through's recorded button presses: (action, sequence, what it shows).
WALK = (
    (None, None, "Start: A and B share an 8-word system prompt (two full blocks, refcount 2)."),
    ("append", "A", "A writes one word: it fills its last block's free slot or takes a new block."),
    ("fork", "A", "Fork A: the child's block table points at A's blocks; every refcount goes up by one."),
    ("write_shared", "A", "A writes into its last block, which it now shares with its fork: copy-on-write."),
    ("finish", "B", "B finishes: blocks only B held go back; shared ones lose one reference; full ones stay "
                    "cached by hash."),
    ("new_same", None, "A new request with the same system prompt finds its full blocks by hash."),
    ("new_other", None, "Another system prompt with A's question: the chained hash does not match A's third "
                        "block, although its four words do."),
    ("swap_out", "A", "Swap A out: its blocks are copied to the host pool and freed on the GPU."),
    ("swap_in", "A", "Swap A back in: new GPU blocks, the same contents."),
)


#: The static site's figures span its page column: at least this wide (px) on a laptop screen.
SITE_NARROWEST_PX = 900


def _fig(fig) -> dict:
    """A figure as plain JSON, its title and top legend kept out of Plotly's toolbar as on the app's pages,
    on a white plot with light grid lines like the site's other charts (the app's theme paints these
    white; without it Plotly's default template draws a grey plot area, issue 40)."""
    fig = clear_of_modebar(fig, SITE_NARROWEST_PX)
    if fig.layout.plot_bgcolor is None:
        fig.update_layout(plot_bgcolor="white")
    fig.for_each_xaxis(lambda ax: ax.update(gridcolor="#eee") if ax.gridcolor is None else None)
    fig.for_each_yaxis(lambda ax: ax.update(gridcolor="#eee") if ax.gridcolor is None else None)
    return json.loads(fig.to_json())


def accounting_page() -> dict:
    """Slot accounting at reference figures R1-R4 (allocation, block-size cost, sharing)."""
    d, s2 = acc.ACCOUNT_DEFAULTS, acc.R4_PRESET
    sections = []
    lengths = list(d["lengths"])
    reserve = acc.reserve_max_slots(lengths, d["reserve"])
    rows = []
    for p in R1_BLOCK_SIZES:
        t = acc.paged_slots(lengths, p)
        rows.append({"block size (slots)": p, "paged slots": t.allocated_slots, "unused slots": t.unused_slots,
                     "waste": pct_fixed(t.waste_fraction)})
    paged = acc.paged_slots(lengths, R1_BLOCK_SIZES[0])
    sections.append({
        "title": f"{', '.join(map(str, lengths))} tokens, reserve {d['reserve']} each",
        "text_html": markdown_html(f"Reserve-max sets aside **{reserve.allocated_slots:,} slots**, "
                                   f"**{reserve.unused_slots:,}** of them empty ({pct_fixed(reserve.waste_fraction)}). "
                                   f"Blocks of {R1_BLOCK_SIZES[0]} need **{paged.allocated_slots:,}** "
                                   f"({paged.unused_slots:,} empty). Bigger blocks leave more of each last block empty:"),
        "figure": _fig(allocation_figure(lengths, reserve, paged)),
        "table": [{"allocator": f"reserve-max ({d['reserve']} each)", "slots": reserve.allocated_slots,
                   "unused slots": reserve.unused_slots, "waste": pct_fixed(reserve.waste_fraction)}]
                 + [{"allocator": f"paged, blocks of {r['block size (slots)']}", "slots": r["paged slots"],
                     "unused slots": r["unused slots"], "waste": r["waste"]} for r in rows]})
    lengths2 = list(s2["lengths"])
    r2 = acc.reserve_max_slots(lengths2, s2["reserve"])
    p2 = acc.paged_slots(lengths2, s2["block_size"])
    pool = acc.slot_pool_capacity(lengths2, s2["reserve"], s2["block_size"], d["pool_slots"])
    sections.append({
        "title": f"{', '.join(f'{n:,}' for n in lengths2)} tokens, maximum {s2['reserve']:,}",
        "text_html": markdown_html(f"Reserve-max: **{r2.allocated_slots:,} slots**, {pct_fixed(r2.waste_fraction)} empty. "
                                   f"Blocks of {s2['block_size']}: **{p2.allocated_slots:,} slots**, "
                                   f"{pct_fixed(p2.waste_fraction)} empty. A pool of {d['pool_slots']:,} slots fits "
                                   f"**{pool.fit_reserve:,}** such requests reserved and **{pool.fit_paged:,}** paged"
                                   + (f" ({ratio(pool.paged_gain)})." if pool.paged_gain else ".")),
        "figure": _fig(allocation_figure(lengths2, r2, p2)),
        "table": [{"request": f"r{i + 1}", "tokens": n, "reserved": r2.reserve,
                   "empty (reserved)": r2.unused_per_request[i], "blocks": p2.blocks_per_request[i],
                   "paged slots": p2.allocated_per_request[i], "empty (last block)": p2.unused_per_request[i]}
                  for i, n in enumerate(lengths2)]})
    for c in R2_COSTS:
        table = acc.block_size_table(lengths, c, list(d["candidates"]))
        best = next(r for r in table if r.is_best)
        sections.append({
            "title": f"Best block size when every block costs c = {c:g} slots",
            "text_html": markdown_html(f"At c = {c:g}: the best block size is **{best.block_size}**, total cost "
                                       f"{best.allocated_slots} slots + {c:g} × {best.blocks} blocks = "
                                       f"**{best.total_cost:g}** slot equivalents."),
            "figure": _fig(cost_figure(table, sum(lengths), c)),
            "table": [{"block size": r.block_size, "slots": r.allocated_slots, "unused": r.unused_slots,
                       "blocks": r.blocks, "c × blocks": f"{r.metadata_cost:g}", "total cost": f"{r.total_cost:g}",
                       "best": "◀ best" if r.is_best else ""} for r in table]})
    a, b, prefix, block = d["share"]
    ps = acc.prefix_sharing(a, b, prefix, block)
    sections.append({
        "title": f"Two requests ({a} and {b} tokens) sharing a {prefix}-token prefix, blocks of {block}",
        "text_html": markdown_html(f"**{ps.logical_tokens}** logical tokens; **{ps.slots_unshared}** slots stored "
                                   f"separately, **{ps.slots_shared}** with the {ps.shared_blocks} complete prefix "
                                   f"blocks stored once: each saves {ps.block_size} slots."),
        "figure": _fig(sharing_figure(ps)),
        "table": [{"quantity": "logical tokens", "value": ps.logical_tokens},
                  {"quantity": "slots without sharing", "value": ps.slots_unshared},
                  {"quantity": "distinct physical slots (shared)", "value": ps.slots_shared},
                  {"quantity": "slots saved by sharing", "value": ps.saved_slots}]})
    return {"title": "Slot accounting",
            "intro_html": markdown_html("The tokens a request has written against the **slots** set aside for it, by hand, "
                                        "at the lesson's worked examples (the app's Slot accounting page lets you "
                                        "change them). Orange is allocated and holding nothing."),
            "sections": sections}


def capacity_page() -> dict:
    """Capacity at reference figure R5 (7B model in fp16, 66 GiB free, 2,048-token maximum, mean 350)."""
    d = acc.CAPACITY_DEFAULTS
    model = acc.model_config(d["model"])
    free = acc.gib_to_bytes(d["free_gib"], "free_gib")
    cap = acc.capacity(model.bytes_per_token, free, d["max_context"], d["mean_tokens"], d["block_size"])
    fixed = acc.reserve_max_capacity(model.bytes_per_token, free, d["max_context"])
    fb = acc.format_bytes
    table = [{"figure": "KV cache per token", "value": fb(model.bytes_per_token)},
             {"figure": "reserved per sequence (reserve-max)", "value": fb(fixed["reserved_bytes"])},
             {"figure": "reserved but empty", "value": pct_fixed(cap.waste_fraction_reserve)},
             {"figure": "sequences that fit, reserve-max", "value": fixed["fit_reserve"]},
             {"figure": f"blocks per sequence (blocks of {cap.block_size})", "value": f"{cap.paged_blocks:g}"},
             {"figure": "allocated per sequence, paged", "value": fb(cap.paged_bytes)},
             {"figure": "allocated but empty, paged", "value": pct_fixed(cap.waste_fraction_paged)},
             {"figure": "sequences that fit, paged", "value": cap.fit_paged}]
    presets = [{"model": m.short, "KV cache per token": fb(m.bytes_per_token),
                f"per {d['max_context']:,}-token reservation": fb(m.bytes_per_token * d["max_context"]),
                "source": m.source} for m in acc.PRESETS.values()]
    return {"title": "Capacity: how many sequences fit",
            "intro_html": markdown_html(f"One slot holds a token's keys and values in every layer: "
                                        f"{model.layers} layers × {model.kv_heads} K/V heads × {model.head_dim} dims × "
                                        f"{model.bytes_per_element} bytes ({model.dtype}) × 2 = **{fb(model.bytes_per_token)}** "
                                        f"for {model.short}. With {fb(free)} free and a {d['max_context']:,}-token maximum, "
                                        f"reserve-max fits **{fixed['fit_reserve']:,}** sequences; paging sequences that "
                                        f"average {d['mean_tokens']:g} tokens fits **{cap.fit_paged:,}**"
                                        + (f" ({ratio(cap.paged_gain)})." if cap.paged_gain else ".")),
            "sections": [
                {"title": "The worked example, figure by figure", "table": table},
                {"title": "Twice the memory, or a better allocator?",
                 "text_html": markdown_html(f"Doubling the memory doubles reserve-max's count to {cap.fit_reserve_double:,}; "
                                            f"paging in the memory as given already fits {cap.fit_paged:,}."),
                 "figure": _fig(fit_figure(cap))},
                {"title": "As the mean length varies", "figure": _fig(curve_figure(cap))},
                {"title": "The presets", "table": presets}]}


def block_tables_page() -> dict:
    """The Block tables page's demo played through :data:`WALK`, one recorded state per press."""
    demo = BlockTablesDemo()
    states = []
    for action, seq, what in WALK:
        before = len(demo.log) if action is not None else 0
        if action is not None:
            demo.do(action, seq if seq is not None else demo.selected)
        mgr = demo.mgr
        counts = mgr.slot_counts()
        log = demo.log[before:]
        text = f"**{what}**" + ("\n\n" + "\n".join(f"- {line}" for line in log) if log else "")
        if demo.error:
            text += "\n\n" + demo.error.text
        text += (f"\n\nFree {mgr.num_free_blocks}, cached {mgr.num_cached_free_blocks}, in use "
                 f"{mgr.num_in_use_blocks} of {mgr.num_blocks} blocks; {counts.logical_tokens} logical tokens in "
                 f"{counts.physical_slots} distinct slots ({counts.saved_slots} saved by sharing); "
                 f"copy-on-write copies {mgr.cow_copies}, blocks found in cache {mgr.cache_hit_blocks}.")
        table = [{"sequence": str(s), "tokens": len(mgr.token_ids(s)),
                  "block table": str(mgr.host_table(s) if mgr.is_swapped(s) else mgr.block_table(s)),
                  "where": "host (swapped out)" if mgr.is_swapped(s) else "GPU",
                  "text": words_of(mgr.token_ids(s))} for s in mgr.sequences()]
        fig = block_table_figure(mgr, demo.meta, demo.highlight, demo.colours(), demo.salt, selected=demo.selected)
        states.append({"action": what.split(":")[0].rstrip("."), "text_html": markdown_html(text), "table": table,
                       "figure": _fig(fig)})
    return {"title": "Block tables & sharing",
            "intro_html": markdown_html(f"One pool of {demo.mgr.num_blocks} blocks of {BLOCK_SIZE} slots, words standing "
                                        "in for tokens. Step through what the app's Block tables page does when its "
                                        "buttons are pressed in this order (the app lets you press them in any order)."),
            "sections": [{"title": "A recorded walk-through", "states": states}]}


def lessons_data() -> dict:
    """Every other page of the site: ``{"accounting", "capacity", "blocks"}``."""
    return {"accounting": accounting_page(), "capacity": capacity_page(), "blocks": block_tables_page()}
