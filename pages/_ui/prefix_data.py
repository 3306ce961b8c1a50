"""The "Prefix cache on a real trace" page's computations, cached and shared by every session on
the server, in a module (not the page script) so that ``app.py`` can warm them in the background
when the server starts (:func:`warm`): the page's default window, at every block size its slider
offers, is then ready before a class opens the page.

Each function is a thin cache over :mod:`allocator.studies.prefix_cache`; the page renders what they return.
The replays are heavy work: they go through ``pages._ui.heavy.shared`` (one server-wide queue, a
store bounded by memory, identical work done once for every session).
"""
from __future__ import annotations

import numpy as np
import streamlit as st

from allocator.viz.maps import frame_steps
from allocator.workloads.mooncake import TRACE_BLOCK, mooncake_workload, shipped_mooncake
from allocator.studies.prefix_cache import pool_sweep, run, trace_hit_statistic, ttft_comparison
from allocator.cost.best import best_cost_model
from pages._ui.heavy import shared

#: Block sizes the page's slider offers (slots).
BLOCK_SIZES = (16, 32, 64, 128, 256, 512)
#: The page's first settings (session-state keys and values).
DEFAULTS = {"pc_offset": 0, "pc_count": 1000, "pc_block": 16, "pc_gpu": "h200", "pc_model": "llama3-8b", "pc_gpus": 4}


def window(offset: int, count: int):
    """The trace window as a workload (outputs capped at 2,048 tokens, the replay's default)."""
    return mooncake_workload(shipped_mooncake(), offset=offset, count=count)


@shared("Replaying the window once and reading every pool size's hit rate from it", max_entries=16)
def sweep(offset: int, count: int, block_size: int):
    """The window's one-pass pool sweep (:func:`allocator.studies.prefix_cache.pool_sweep`)."""
    return pool_sweep(window(offset, count), block_size)


@st.cache_resource(show_spinner=False, max_entries=8)
def statistics(offset: int, count: int):
    """The trace's own count: (with the engine's rules, without them)."""
    wl = window(offset, count)
    return trace_hit_statistic(wl), trace_hit_statistic(wl, engine_rules=False)


def sweeps(offset: int, count: int, block_size: int):
    """(sweep at ``block_size``, sweep at the trace's 512, trace statistic, plain statistic)."""
    chosen = sweep(offset, count, block_size)
    native = chosen if block_size == TRACE_BLOCK else sweep(offset, count, TRACE_BLOCK)
    return (chosen, native) + statistics(offset, count)


#: Most pictures of the pool the map's step slider offers.
MAP_FRAMES = 40


@shared("Replaying the chosen pool with pictures of it", max_entries=16)
def mapped(offset: int, count: int, block_size: int, pool_blocks: int):
    """The engine's own run at the chosen pool, with snapshots (the block map), keeping only the
    pictures of the steps the page offers (:func:`map_steps`), each block table as an int32 array
    (``allocator.viz.maps.block_picture`` reads either), so a cached run stays small."""
    res = run(window(offset, count), block_size, pool_blocks, record_snapshots=True)
    keep = set(map_steps(res))
    res.snapshots = {k: tuple((sid, n, np.asarray(table, dtype=np.int32)) for sid, n, table in v)
                     for k, v in res.snapshots.items() if k in keep}
    return res


def map_steps(res) -> list[int]:
    """The steps the map can show: at most MAP_FRAMES, evenly spread (``allocator.viz.maps.frame_steps``)."""
    return [int(s) for s in frame_steps([res], MAP_FRAMES)]


@shared("Timing the window with and without the cache", max_entries=16)
def ttft(offset: int, count: int, block_size: int, gpu: str, model: str, gpus: int):
    """(cost model, pool blocks, :func:`allocator.studies.prefix_cache.ttft_comparison`) on that hardware."""
    cost = best_cost_model(gpu, model, gpus)
    pool_blocks = max(1, cost.pool_slots() // block_size)
    return cost, pool_blocks, ttft_comparison(window(offset, count), block_size, pool_blocks, cost)


def default_map_pool(sw) -> int:
    """The pool the map shows first: the first row of at least a quarter of the distinct blocks."""
    return next((r["pool_blocks"] for r in sw.rows if r["fraction"] >= 0.25), sw.rows[-1]["pool_blocks"])


def warm() -> None:
    """Compute the default window's figures at every block size (default block size first): the
    sweeps, the default pool's map run and the default hardware's time comparison; then the map
    runs of the default block size's other pools."""
    d = DEFAULTS
    order = (d["pc_block"],) + tuple(b for b in BLOCK_SIZES if b != d["pc_block"])
    statistics(d["pc_offset"], d["pc_count"])
    for bs in order:
        sw = sweep(d["pc_offset"], d["pc_count"], bs)
        if bs == d["pc_block"]:
            sweep(d["pc_offset"], d["pc_count"], TRACE_BLOCK)
        mapped(d["pc_offset"], d["pc_count"], bs, default_map_pool(sw))
        ttft(d["pc_offset"], d["pc_count"], bs, d["pc_gpu"], d["pc_model"], d["pc_gpus"])
    # last, the map's other pools at the default block size (the pool slider's other stops)
    sw = sweep(d["pc_offset"], d["pc_count"], d["pc_block"])
    for row in sw.rows:
        mapped(d["pc_offset"], d["pc_count"], d["pc_block"], row["pool_blocks"])
