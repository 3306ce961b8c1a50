"""Prefix caching on a real trace: what the "Prefix cache on a real trace" page and the CLI run.

A window of the Mooncake conversation trace (:mod:`allocator.mooncake`) is replayed through the
engine with a paged allocator that keeps finished prompts' blocks findable by their block keys
(:class:`allocator.allocators.PagedAllocator` with ``prefix_caching=True``). This module sizes
pools, sweeps the pool size, compares time to first token with and without the cache, and
computes the trace's own statistic independently of the engine, so the two can be set side by
side.

Sources: vLLM's automatic prefix caching; the Mooncake paper (Qin et al., FAST 2025) for the
trace and its prefix statistic.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .allocators import MAX_POOL_BLOCKS, PagedAllocator
from .block_hash import prefix_block_keys
from .engine import SimulationResult, simulate
from .mooncake import TRACE_BLOCK
from .validate import FieldError, real_number, whole_number
from .workload import Workload

#: Pool sizes of the sweep, as fractions of the window's distinct full prompt blocks.
DEFAULT_FRACTIONS = (0.05, 0.1, 0.25, 0.5, 1.0, 1.25)


def _prompts(workload: Workload):
    if workload.prompts is None:
        raise FieldError("workload", f" {workload.name!r} has no prompt tokens: prefix caching needs a trace "
                                     "with block ids (the Mooncake JSONL schema)")
    return workload.prompts


def distinct_prompt_blocks(workload: Workload, block_size: int) -> int:
    """Distinct full prompt blocks of the workload's prompts (blocks an unbounded cache would
    keep): the number of different keys over every request's full prompt blocks.

    Raises:
        FieldError: the workload has no prompt tokens, or a bad ``block_size``.
    """
    prompts = _prompts(workload)
    block_size = whole_number("block_size", block_size, 1)
    keys: set = set()
    for r in workload.requests:
        keys.update(prefix_block_keys(prompts.tokens(r.id), block_size))
    return len(keys)


def min_pool_blocks(workload: Workload, block_size: int) -> int:
    """Blocks the longest request needs at its longest (prompt + output): a smaller pool rejects it."""
    return max(-(-(r.prompt_len + r.output_len) // block_size) for r in workload.requests)


def run(workload: Workload, block_size: int, pool_blocks: int, *, prefix_caching: bool = True,
        record_snapshots: bool = False, clock=None) -> SimulationResult:
    """Replay the workload on a paged pool of ``pool_blocks`` blocks of ``block_size`` slots.

    Args:
        clock: None for the step clock; a cost model (``CostModel.for_blocks(block_size)``)
            for the seconds clock, where arrivals keep their trace seconds and each step lasts
            what the model says (cached prompt tokens cost no prefill).

    Raises:
        FieldError: a bad size (more than :data:`allocator.allocators.MAX_POOL_BLOCKS` blocks),
            or a workload without prompt tokens.
    """
    _prompts(workload)
    block_size = whole_number("block_size", block_size, 1)
    pool_blocks = whole_number("pool_blocks", pool_blocks, 1, MAX_POOL_BLOCKS)
    alloc = PagedAllocator(pool_blocks * block_size, block_size, prefix_caching=prefix_caching)
    return simulate(workload, alloc, record_snapshots=record_snapshots, clock=clock)


@dataclass
class PoolSweep:
    """Hit rate against pool size for one window and block size.

    Attributes:
        block_size: slots per block.
        distinct_blocks: distinct full prompt blocks in the window (an unbounded cache's size).
        rows: one dict per pool size: ``pool_blocks``, ``pool_slots``, ``fraction`` (of
            distinct_blocks), ``hit_rate`` (prompt tokens found cached / prompt tokens
            admitted), ``prefill_tokens_saved``, ``prompt_tokens_admitted``,
            ``cached_block_evictions``, ``peak_cached_blocks``, ``preemptions``, ``rejected``
            (count) and ``steps``.
    """

    block_size: int
    distinct_blocks: int
    rows: list


def pool_sweep(workload: Workload, block_size: int, fractions=DEFAULT_FRACTIONS) -> PoolSweep:
    """Run the window with pools of ``fraction x distinct_blocks`` blocks (never below the
    largest request's need, never above :data:`MAX_POOL_BLOCKS`), prefix caching on.

    Raises:
        FieldError: a fraction not a positive finite number, a workload without prompt tokens.
    """
    fractions = [real_number("fractions", f, above=0) for f in fractions]
    distinct = distinct_prompt_blocks(workload, block_size)
    floor = min_pool_blocks(workload, block_size)
    rows = []
    seen = set()
    for f in sorted(fractions):
        blocks = min(MAX_POOL_BLOCKS, max(floor, math.ceil(f * distinct)))
        if blocks in seen:
            continue
        seen.add(blocks)
        s = run(workload, block_size, blocks).summary
        rows.append({"pool_blocks": blocks, "pool_slots": blocks * block_size, "fraction": blocks / distinct,
                     "hit_rate": s["prefix_cache_hit_rate"], "prefill_tokens_saved": s["prefill_tokens_saved"],
                     "prompt_tokens_admitted": s["prompt_tokens_admitted"],
                     "cached_block_evictions": s["cached_block_evictions"],
                     "peak_cached_blocks": s["peak_cached_blocks"], "preemptions": s["preemptions"],
                     "rejected": len(s["rejected"]), "steps": s["steps"]})
    return PoolSweep(block_size, distinct, rows)


def trace_hit_statistic(workload: Workload, engine_rules: bool = True) -> dict:
    """The trace's own prefix statistic, counted from its block ids alone (no engine).

    For each request in order, count its leading trace blocks (512 tokens each) whose whole id
    chain -- the block and every block before it -- an earlier request of the window already
    had. That is the hit rate of an unbounded cache of 512-token blocks.

    Args:
        engine_rules: also apply the rules the engine follows, so the figure is what the engine
            must reproduce at block size 512 with a pool that never evicts: only *full* blocks
            are cached (a request's partial last block is never found later), and the block
            holding the prompt's last token is always computed.

    Returns:
        ``{"block_hit_rate": blocks hit / prompt blocks, "token_hit_rate": tokens hit / prompt
        tokens, "blocks_hit", "blocks", "tokens_hit", "tokens"}``.
    """
    prompts = _prompts(workload)
    seen: set = set()
    blocks_hit = blocks = tokens_hit = tokens = 0
    for r in workload.requests:
        ids = prompts.hash_ids(r.id)
        n_full = r.prompt_len // TRACE_BLOCK
        limit = min(n_full, (r.prompt_len - 1) // TRACE_BLOCK) if engine_rules else len(ids)
        chain = ()
        n = 0
        for i in range(limit):
            chain = chain + (ids[i],)
            if chain not in seen:
                break
            n += 1
        blocks_hit += n
        blocks += len(ids)
        tokens_hit += n * TRACE_BLOCK if engine_rules else min(n * TRACE_BLOCK, r.prompt_len)
        tokens += r.prompt_len
        chain = ()
        for i in range(n_full if engine_rules else len(ids)):
            chain = chain + (ids[i],)
            seen.add(chain)
    return {"block_hit_rate": blocks_hit / blocks if blocks else 0.0,
            "token_hit_rate": tokens_hit / tokens if tokens else 0.0,
            "blocks_hit": blocks_hit, "blocks": blocks, "tokens_hit": tokens_hit, "tokens": tokens}


def ttft_comparison(workload: Workload, block_size: int, pool_blocks: int, cost) -> dict:
    """Time to first token with and without the prefix cache, on the seconds clock.

    Args:
        cost: a :class:`allocator.timing.CostModel` (its ``for_blocks`` prices swaps).

    Returns:
        ``{"with": {...}, "without": {...}}``, each with ``ttft_s`` (per finished request,
        seconds, by id), ``summary`` (the engine summary) and ``timing`` (the
        :class:`~allocator.timing.RunTiming`).
    """
    from .timing import price

    out = {}
    for key, caching in (("with", True), ("without", False)):
        res = run(workload, block_size, pool_blocks, prefix_caching=caching, clock=cost.for_blocks(block_size))
        timing = price(res, cost)
        out[key] = {"ttft_s": np.asarray(timing.requests["ttft_s"]), "summary": res.summary, "timing": timing}
    return out
