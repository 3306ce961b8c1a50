"""Prefix cache on a real trace: the Mooncake conversation trace replayed with prefix caching.

Renders only: the replay, the pool sweep, the trace's own statistic and the TTFT comparison come
from ``allocator.studies.prefix_cache``; the figures and sentences from ``allocator.viz.prefix``.
"""
from __future__ import annotations

import streamlit as st

from allocator.accounting.models import PRESETS
from allocator.workloads.mooncake import MOONCAKE_ATTRIBUTION, TRACE_BLOCK, shipped_mooncake
from allocator.studies.prefix_cache import DEFAULT_FRACTIONS, MODEL_TOLERANCE_PP
from allocator.cost.best import seconds_source
from allocator.cost.roofline import GPUS, TIMED_MODELS
from allocator.workloads.trace import ShippedDataError
from allocator.common.errors import FieldError
from allocator.viz.prefix import (block_map_figure, hit_rate_figure, sweep_table, ttft_figure, ttft_summary,
                                  window_summary)
from pages._ui import prefix_data as data
from pages._ui.controls import checked_number
from pages._ui.errors import show_error
from pages._ui.prefix_data import BLOCK_SIZES, DEFAULTS
from pages._ui.state import set_defaults
from pages._ui.url_params import PAGE_RULES
from pages._ui.present import chart, data_table

GPU_COUNTS = (1, 2, 4, 8)
set_defaults(DEFAULTS)

st.title("Prefix cache on a real trace")
st.markdown(
    "Once the KV cache is addressed block by block, two requests can point at the same block. If their "
    "prompts begin with the same tokens, the blocks holding that beginning can be computed once and shared: "
    "a **prefix cache**. A finished request's full prompt blocks stay in the pool, findable by a **block "
    "hash** that covers the block and every token before it, until the pool needs the space (the least "
    "recently used go first). A later request that starts the same way skips the **prefill** of those tokens, "
    "so its first token comes sooner.\n\n"
    "Chat traffic repeats itself: each turn of a conversation re-sends everything said so far. The Mooncake "
    "trace records this from a production chat service: each prompt is a list of ids, one per 512 tokens, and "
    "two prompts with the same leading ids share that much text. Here a window of it is replayed through the "
    "same engine as the other pages, with the cache on.")

try:
    df = shipped_mooncake()
except ShippedDataError as exc:                  # the page needs the trace; the other pages do not
    show_error(exc, after="")
    st.stop()
c = st.columns([1, 1, 1.2])
errors = st.container()     # under the controls, full width: a refused number, a core error
# typed numbers are checked on the server and a refused one is named (Streamlit's own min/max
# refused it silently); the offset's top end is the shipped trace's last row
last_row = len(df) - 1
offset = checked_number(c[0], PAGE_RULES["pc_offset"], "pc_offset", "First request (offset)", high=last_row,
                        say_in=errors,
                        help=f"Allowed: {PAGE_RULES['pc_offset'].up_to(last_row).describe()}. Where the window "
                             f"starts in the trace's {len(df):,} requests (0 = the first).")
count = checked_number(c[1], PAGE_RULES["pc_count"], "pc_count", "Requests", say_in=errors,
                       help=f"Allowed: {PAGE_RULES['pc_count'].describe()}. How many consecutive requests to "
                            "replay. Conversations span the whole hour of the trace, so longer windows find more "
                            "of their own prefixes.")
c[2].select_slider("Block size (slots)", BLOCK_SIZES, key="pc_block",
                   help="Only full blocks are cached: bigger blocks leave more of each prompt's end uncached.")


def fail(exc: Exception) -> None:
    """Show a core error in the page's words and stop (never a traceback)."""
    show_error(exc, errors, before="These settings cannot run: ")
    st.stop()


offset, count, block = int(offset), int(count), int(st.session_state["pc_block"])
try:
    sweep, native, stat, raw = data.sweeps(offset, count, block)
except FieldError as exc:
    fail(exc)
asked, count = count, min(count, len(df) - offset)

with st.container(border=True):
    st.markdown(window_summary(sweep, stat, raw, offset, count, asked))

st.subheader("How big must the cache be?")
# slots first, the unit of the chart's axis (and of pools of other block sizes); the blocks of the map below
labels = {r["pool_blocks"]: f"{r['pool_slots']:,} slots = {r['pool_blocks']:,} blocks ({r['fraction']:.2f}× the "
                            "distinct prompt blocks)" for r in sweep.rows}
# the pool is chosen as a fraction of the distinct prompt blocks, so a new block size or window keeps it
kept = st.session_state.get("pc_pool_fraction")
default = (data.default_map_pool(sweep) if kept is None else
           min(sweep.rows, key=lambda r: abs(r["fraction"] - kept))["pool_blocks"])   # the nearest fraction
chosen = st.select_slider("Pool for the map below", options=list(labels), value=default,
                          format_func=labels.get, key=f"pc_pool_{offset}_{count}_{block}",
                          help="Pool sizes are fractions "
                               f"({', '.join(f'{f:g}' for f in DEFAULT_FRACTIONS)}) of the window's distinct full "
                               "prompt blocks, never smaller than the longest request needs.")
st.session_state["pc_pool_fraction"] = next(r["fraction"] for r in sweep.rows if r["pool_blocks"] == chosen)
chart(hit_rate_figure(sweep, stat, chosen, compare=native), key="pc_hits", config={"displaylogo": False})
st.caption(
    "Every pool size's hit rate comes from **one** replay of the window, not one replay per size: each time a "
    "request finds a cached block, the replay notes how many blocks had been used more recently (its depth in "
    "the least-recently-used order, with blocks of running requests always on top). A pool of P blocks still "
    "holds exactly the blocks at depth below P, so one sorted list of depths gives the hit rate of every pool "
    "(LRU stack distances, Mattson et al. 1970). The solid line is the engine's own figure: those pools hold "
    f"every block the running requests ever held at once ({sweep.peak_in_use:,} blocks here), so the engine "
    "runs the same schedule and finds exactly these hits, and a test replays the engine at a few pool sizes "
    "and checks they are equal. That holds while each block hash names one cached block; a prompt found whole "
    "in the cache computes its last block again and, as in vLLM, the hash then names both copies, and a "
    "smaller pool may keep the copy the replay did not find"
    + (f" (this replay computed {sweep.duplicate_blocks:,} such blocks, so every pool here is the LRU model's)"
       if sweep.duplicate_blocks else " (this replay computed none)")
    + ". The dotted line, below that size, is the LRU model's: there the engine would "
    "have to delay admissions or preempt requests, which changes what is recent (the test finds the engine's "
    f"figure within {MODEL_TOLERANCE_PP:g} percentage points of the model's there).")
st.caption("The dashed line is counted from the trace's own block ids, not simulated: for each request, the "
           "leading 512-token blocks whose whole chain of ids an earlier request in the window already had "
           "(full blocks only, and never the block holding the prompt's last token, which the engine always "
           "computes). With 512-slot blocks and a pool that never evicts, the simulation must land exactly on "
           "it (a test checks this); smaller blocks can only find more, since a partly shared 512-token block "
           "still has whole smaller blocks in common."
           + ("" if block == TRACE_BLOCK else " The grey line is the same window with 512-slot blocks, the "
              "trace's own size, on the same memory (slots)."))
_whole = st.column_config.NumberColumn(format="localized")
data_table(sweep_table(sweep), hide_index=True, key="pc_table",
             column_config={"pool (blocks)": _whole, "pool (slots)": _whole, "prefill saved (tokens)": _whole,
                            "cached blocks evicted": _whole,
                            "hit rate (% of prompt tokens)": st.column_config.NumberColumn(format="%.1f")})

st.subheader("Where the blocks are")
res = data.mapped(offset, count, block, chosen)
steps = data.map_steps(res)
sharing = res.metrics["allocated_unshared"] - res.metrics["allocated_slots"]      # slots saved by sharing
busiest = int(res.metrics["step"][int(sharing.argmax() if sharing.max() > 0 else res.metrics["running"].argmax())])
# a new pool, block size or window is a new run with its own pictures: start at the step looked at
# before (its nearest picture; said in words when the new run ends well before it), else where sharing peaked
looked = st.session_state.get("pc_step_looked")
start = min(steps, key=lambda s: abs(s - (busiest if looked is None else looked)))
step_key = f"pc_step_{offset}_{count}_{block}_{chosen}"
stride = max((b - a for a, b in zip(steps, steps[1:])), default=0)      # pictures are kept every few steps
if looked is not None and abs(start - looked) > stride and step_key not in st.session_state:
    st.caption(f"This run has no picture near step {looked:,} (it ends sooner); the map starts at its nearest, "
               f"step {start:,}.")
step = st.select_slider("Step", options=steps, value=start, key=step_key,
                        help="Engine steps with a picture. It starts at the step you looked at last (the nearest "
                             "one this run has), or, on the first visit, the step when running requests shared "
                             "the most blocks.")
st.session_state["pc_step_looked"] = int(step)
snap = res.snapshots.get(step, ())
chart(block_map_figure(snap, chosen, step, block), key="pc_map", config={"displaylogo": False})
st.caption("Purple blocks belong to no running request: the cache keeps them in case a later prompt starts the "
           "same way. Pink blocks are in several block tables at once: requests running now that share a prefix. "
           "Blue blocks belong to one request. Grey and purple blocks wait in one free queue: a new block comes "
           "from its front, where the blocks never used and those released longest ago are (least recently used "
           "first). Handing out a purple one drops it from the cache: an eviction.")

st.subheader("What the cache does to the first token")
st.markdown("Now the window runs in seconds, on a GPU whose memory sets the pool: what is left of it after "
            "the model's weights holds the KV cache, cached blocks included.")
c = st.columns([1.4, 1.2, 0.8])
c[0].selectbox("GPU", list(GPUS), key="pc_gpu", format_func=lambda k: GPUS[k].label)
c[1].selectbox("Model", list(TIMED_MODELS), key="pc_model", format_func=lambda k: PRESETS[k].short)
c[2].selectbox("GPUs", GPU_COUNTS, key="pc_gpus",
               help="Tensor parallelism: the model split over this many GPUs, whose memory, bandwidth and FLOP/s "
                    "add up. The trace's traffic overloads a single GPU; a real service spreads it.")
try:
    cost, pool_blocks, cmp = data.ttft(offset, count, block, st.session_state["pc_gpu"], st.session_state["pc_model"],
                                   int(st.session_state["pc_gpus"]))
except FieldError as exc:           # shown here, under the GPU, model and GPUs it is about
    text = str(exc)
    why = text.split(": ", 1)[1] if text.startswith(f"{exc.field} = ") and ": " in text else text
    show_error(f"{PRESETS[st.session_state['pc_model']].short} does not fit {st.session_state['pc_gpus']} × "
               f"{GPUS[st.session_state['pc_gpu']].label}: {why}.")
    st.stop()
st.markdown(ttft_summary(cmp, seconds_source(cost), pool_blocks, block))
chart(ttft_figure(cmp, cost.short_name), key="pc_ttft", config={"displaylogo": False})
st.caption(f"Seconds come from the cost model of the Throughput page, {cost.priced_by}, with arrivals at the "
           "trace's own times. Cached prompt "
           "tokens cost no prefill; everything else is the same in both runs. Mooncake's prompts average about "
           "12,000 tokens, longer than some of these models' context windows; the model prices them all the same.")

st.caption("Data: " + MOONCAKE_ATTRIBUTION + " The whole conversation trace ships with the app "
           "(assets/mooncake_conversation_trace.jsonl.gz, with its licence in assets/mooncake_LICENSE-APACHE.txt).")
