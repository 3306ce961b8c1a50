"""Prefix caching on a real trace: what the "Prefix cache on a real trace" page and the CLI run.

A window of the Mooncake conversation trace (:mod:`allocator.workloads.mooncake`) is replayed through the
engine with a paged allocator that keeps finished prompts' blocks findable by their block keys
(:class:`allocator.memory.allocators.PagedAllocator` with ``prefix_caching=True``). This module sizes
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

from allocator.common.limits import MAX_POOL_SLOTS
from allocator.memory.paged import PagedAllocator
from allocator.memory.block_pool import BlockPool
from allocator.memory.block_hash import prefix_block_keys
from allocator.engine.result import SimulationResult
from allocator.engine.simulate import simulate
from allocator.common.limits import check_pool_blocks
from allocator.common.mathutils import cdiv
from allocator.workloads.mooncake import TRACE_BLOCK
from allocator.common.errors import FieldError
from allocator.common.validate import real_number, whole_number
from allocator.workloads.requests import Workload

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
    if hasattr(prompts, "block_keys"):          # a trace's chained block ids (the same matches, no hashing)
        for r in workload.requests:
            keys.update(prompts.block_keys(r.id, block_size))
    else:
        for r in workload.requests:
            keys.update(prefix_block_keys(prompts.tokens(r.id), block_size))
    return len(keys)


def min_pool_blocks(workload: Workload, block_size: int) -> int:
    """Blocks the longest request needs at its longest (prompt + output): a smaller pool rejects it."""
    return max(cdiv(r.prompt_len + r.output_len, block_size) for r in workload.requests)


def run(workload: Workload, block_size: int, pool_blocks: int, *, prefix_caching: bool = True,
        record_snapshots: bool = False, clock=None) -> SimulationResult:
    """Replay the workload on a paged pool of ``pool_blocks`` blocks of ``block_size`` slots.

    Args:
        clock: None for the step clock; a cost model (``CostModel.for_blocks(block_size)``)
            for the seconds clock, where arrivals keep their trace seconds and each step lasts
            what the model says (cached prompt tokens cost no prefill).

    Raises:
        FieldError: a bad size (``pool_blocks`` outside the one pool range,
            :func:`allocator.common.limits.check_pool_blocks`: at most 2**30 slots), or a workload
            without prompt tokens.
    """
    _prompts(workload)
    block_size = whole_number("block_size", block_size, 1)
    pool_blocks = check_pool_blocks(pool_blocks, block_size)
    alloc = PagedAllocator(pool_blocks * block_size, block_size, prefix_caching=prefix_caching)
    return simulate(workload, alloc, record_snapshots=record_snapshots, clock=clock)


@dataclass
class PoolSweep:
    """Hit rate against pool size for one window and block size, from one replay (see
    :func:`pool_sweep`).

    Attributes:
        block_size: slots per block.
        distinct_blocks: distinct full prompt blocks in the window (an unbounded cache's size).
        rows: one dict per pool size of the sweep: ``pool_blocks``, ``pool_slots``, ``fraction``
            (of distinct_blocks), ``hit_rate`` (prompt tokens found cached / prompt tokens
            admitted, rounded to 6 places as the engine's summary), ``prefill_tokens_saved``,
            ``prompt_tokens_admitted``, ``cached_block_evictions``, ``exact`` (True when the pool
            holds every block the running requests ever hold at once and the reference run never
            gave a block a hash that already named another (``duplicate_blocks`` 0): the engine's
            run at that size is the reference run's schedule and its figures equal these; False:
            the engine would have to delay admissions or preempt there, or a block hash named
            several blocks, so these are the LRU model's),
            ``preemptions`` and ``steps`` (the reference run's where exact, else None) and
            ``rejected`` (count).
        peak_in_use: most blocks the running requests held at once in the reference run (the
            smallest pool at which the one-pass figures are the engine's own, when
            ``duplicate_blocks`` is 0).
        duplicate_blocks: blocks the reference run registered under a block hash that already
            named a block (a fully cached prompt's last full block, computed again; vLLM's index
            keeps both): with any, no row is exact (see :func:`pool_sweep`).
        curve: the same figures at many pool sizes for drawing: ``pool_blocks`` (int64 [n],
            ascending, from the smallest pool that fits the longest request to the largest of
            the sweep), ``hit_rate`` (float [n]), ``prefill_tokens_saved`` and
            ``cached_block_evictions`` (int64 [n]).
        prompt_tokens_admitted: the hit rate's denominator (tokens).
    """

    block_size: int
    distinct_blocks: int
    rows: list
    peak_in_use: int = 0
    curve: dict | None = None
    prompt_tokens_admitted: int = 0
    duplicate_blocks: int = 0

    @property
    def exact_from(self) -> int | None:
        """The smallest pool (blocks) whose one-pass figures are the engine's own: ``peak_in_use``,
        or None when the reference run registered duplicate blocks (no pool is exact then)."""
        return None if self.duplicate_blocks else self.peak_in_use


#: How far (percentage points of prompt tokens) the one-pass hit rate of a pool smaller than
#: ``PoolSweep.peak_in_use`` may be from the engine's own run at that pool: the stated tolerance,
#: checked by tests/core/test_prefix_trace.py (the largest gap it finds is 1.3 points, the model above).
MODEL_TOLERANCE_PP = 2.0
#: Pool sizes of the drawn curve (log-spaced between the smallest and the largest pool).
CURVE_POINTS = 96


def _curve_sizes(low: int, high: int, extra) -> np.ndarray:
    sizes = np.unique(np.round(np.geomspace(low, max(low, high), CURVE_POINTS)).astype(np.int64))
    return np.unique(np.concatenate([sizes, np.asarray(list(extra), dtype=np.int64)]))


def pool_sweep(workload: Workload, block_size: int, fractions=DEFAULT_FRACTIONS) -> PoolSweep:
    """Hit rate, prefill saved and evictions for pools of ``fraction x distinct_blocks`` blocks
    (never below the largest request's need, never above 2**30 slots), and at every
    pool size between, from **one** replay: LRU stack distances (Mattson, Gecsei, Slutz and
    Traiger, "Evaluation techniques for storage hierarchies", IBM Systems Journal 9(2), 1970).

    The window is replayed once with prefix caching on a pool as large as the largest of the
    sweep (and never smaller than what all requests could hold at once, so no admission waits for
    memory). Every cache hit records its block's depth in the LRU stack (blocks in use on top,
    released blocks by release time): a pool of P blocks still holds a block at depth d exactly
    when d < P, because the free block queue hands out the least recently released block first.
    Admission stops at the first prompt block not found, so a pool of P blocks finds the hits
    whose running maximum depth within their admission is below P; the hit tokens of every P
    come from one sorted array of those maxima. A cached block whose wait in the free queue ended
    (a hit, or the end of the run) at depth >= P was evicted by a pool of P blocks.

    When is this the engine's figure? The engine's pool also holds the running sequences'
    blocks. A pool of at least ``peak_in_use`` blocks (the most the running requests held at
    once in the replay) never makes an admission wait or a sequence be preempted, so the engine
    runs the replay's schedule at that size, and its hit rate, prefill saved and evictions equal
    the one-pass figures exactly (rows marked ``exact``; ``tests/core/test_prefix_trace.py`` runs the
    engine at every pool of three windows' sweeps and checks equality). Exact, not approximate,
    because block keys are chained: every block table holding a prompt's block k also holds its
    block k - 1, so block k - 1 is released no earlier and touched whenever block k is, and the
    queue never evicts k - 1 while k is still cached; admission's "stop at the first miss" then
    finds exactly the leading run the depths predict.

    That argument needs one cached block per block hash. The block pool keeps vLLM's index, in
    which a block computed again while an identical block is cached (a fully cached prompt's last
    full block: its last token is always computed) gets the hash too, and the hash names both.
    Then a smaller pool may have evicted the older block the reference run found while still
    holding the newer one, and find a hit the depths call a miss (or, having evicted the hash
    before the block was computed again, keep only the newer block and find it at another depth):
    the one-pass figures are no longer the engine's. So a row is exact only when, besides, the
    reference run registered no block under a hash that already named one
    (``PoolSweep.duplicate_blocks`` 0): a smaller pool caches a subset of what the reference pool
    caches (LRU's inclusion property), so it registers none either and the one-block argument
    holds. ``tests/core/test_prefix_sweep_exact.py`` checks both ways on random small traces: every
    exact figure equals the engine's run at that pool, and traces with duplicates exist whose
    one-pass figure at a pool above ``peak_in_use`` is not the engine's. Below ``peak_in_use``, the engine delays
    admissions or preempts, which changes which blocks are recent; those rows are the LRU
    model's figures, and the same test checks they stay within :data:`MODEL_TOLERANCE_PP`
    percentage points of the engine's own (:func:`run` gives a smaller pool's own run).

    Raises:
        FieldError: a fraction not a positive finite number, a workload without prompt tokens.
    """
    fractions = [real_number("fractions", f, above=0) for f in fractions]
    _prompts(workload)
    block_size = whole_number("block_size", block_size, 1)
    distinct = distinct_prompt_blocks(workload, block_size)
    floor = min_pool_blocks(workload, block_size)
    most = MAX_POOL_SLOTS // block_size
    sizes = []
    for f in sorted(fractions):
        blocks = min(most, max(floor, math.ceil(f * distinct)))
        if blocks not in sizes:
            sizes.append(blocks)
    # all requests at their longest at once: a pool this big never makes anyone wait
    everyone = sum(cdiv(r.prompt_len + r.output_len, block_size) for r in workload.requests)
    ref_blocks = min(most, max(max(sizes), everyone))
    alloc = _StackDepthAllocator(ref_blocks * block_size, block_size, size_hint=everyone + 1)
    ref = simulate(workload, alloc, record_snapshots=False)
    pool = alloc.pool
    s = ref.summary
    hits = np.sort(np.asarray(pool.hit_depths, dtype=np.int64))
    ends = np.sort(np.asarray(pool.end_depths + pool.final_depths(), dtype=np.int64))
    lost = pool.evictions            # evicted even by the reference pool: evicted by every smaller one
    admitted = s["prompt_tokens_admitted"]

    def figures(p):
        p = np.asarray(p, dtype=np.int64)
        saved = block_size * np.searchsorted(hits, p, side="left")
        evicted = lost + len(ends) - np.searchsorted(ends, p, side="left")
        return saved, evicted

    curve_sizes = _curve_sizes(floor, ref_blocks if ref_blocks <= 2 * max(sizes) else max(sizes), sizes)
    saved, evicted = figures(curve_sizes)
    rate = saved / admitted if admitted else np.zeros(len(saved))
    curve = {"pool_blocks": curve_sizes, "hit_rate": rate, "prefill_tokens_saved": saved,
             "cached_block_evictions": evicted}
    rows = []
    row_saved, row_evicted = figures(sizes)
    for blocks, sv, ev in zip(sizes, row_saved, row_evicted):
        exact = blocks >= pool.peak_in_use and not pool.duplicates
        rows.append({"pool_blocks": blocks, "pool_slots": blocks * block_size, "fraction": blocks / distinct,
                     "hit_rate": round(int(sv) / admitted, 6) if admitted else None,
                     "prefill_tokens_saved": int(sv), "prompt_tokens_admitted": admitted,
                     "cached_block_evictions": int(ev), "exact": exact,
                     "preemptions": s["preemptions"] if exact else None,
                     "steps": s["steps"] if exact else None, "rejected": len(s["rejected"])})
    return PoolSweep(block_size, distinct, rows, peak_in_use=pool.peak_in_use, curve=curve,
                     prompt_tokens_admitted=admitted, duplicate_blocks=pool.duplicates)


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
        cost: a :class:`allocator.cost.timing.CostModel` (its ``for_blocks`` prices swaps).

    Returns:
        ``{"with": {...}, "without": {...}}``, each with ``ttft_s`` (per finished request,
        seconds, by id), ``summary`` (the engine summary) and ``timing`` (the
        :class:`~allocator.cost.timing.RunTiming`).
    """
    from allocator.cost.timing import price

    out = {}
    for key, caching in (("with", True), ("without", False)):
        res = run(workload, block_size, pool_blocks, prefix_caching=caching, clock=cost.for_blocks(block_size))
        timing = price(res, cost)
        out[key] = {"ttft_s": np.asarray(timing.requests["ttft_s"]), "summary": res.summary, "timing": timing}
    return out


# ---------------------------------------------------------------------- one pass (LRU stack distances)

class _Fenwick:
    """Marked positions 1..n (a binary indexed tree, Fenwick 1994): mark one, count those above
    a position, each in O(log n); it doubles its size when a position past n is marked."""

    def __init__(self, n: int):
        self.n = max(1, n)
        self.tree = [0] * (self.n + 1)
        self.count = 0

    def mark(self, i: int) -> None:
        if i > self.n:
            old, self.n = self.tree, max(i, 2 * self.n)
            self.tree = [0] * (self.n + 1)          # rebuild: every old position's count, re-added
            for j in range(1, len(old)):
                c = self._point(old, j)
                if c:
                    self._add(j, c)
        self._add(i, 1)
        self.count += 1

    @staticmethod
    def _point(tree, j: int) -> int:
        """The count at position j alone, from a tree's prefix sums."""
        total, k, low = tree[j], j - 1, j - (j & -j)
        while k > low:
            total -= tree[k]
            k &= k - 1
        return total

    def _add(self, i: int, c: int) -> None:
        tree, n = self.tree, self.n
        while i <= n:
            tree[i] += c
            i += i & -i

    def above(self, i: int) -> int:
        """Marked positions > i."""
        tree, s = self.tree, 0
        i = min(i, self.n)
        while i > 0:
            s += tree[i]
            i &= i - 1
        return self.count - s


class _StackDepthPool(BlockPool):
    """A :class:`BlockPool` that also measures, for every cache hit, the block's LRU stack depth.

    The stack orders every block's contents by recency: blocks in use on top (they are never
    evicted), then released blocks by the time they joined the free queue, latest first. A block
    at depth d (d contents more recent than its own) is still in a pool of P blocks exactly when
    d < P, because the free queue hands out the least recently released block first. Depths are
    counted with a Fenwick tree over release stamps: d = blocks in use + blocks released after it
    - those of them taken back out of the queue since (cache hits).

    Records, per admission that found cached blocks, the running maximum of its hits' depths
    (``hit_depths``: a pool of P blocks finds exactly the hits whose running maximum is below P,
    since admission stops at the first miss), the depth at which each cached block's wait in the
    queue ended (``end_depths``: a cache hit, or the end of the run; a pool of P blocks evicted
    it when that depth was >= P), the most blocks ever in use (``peak_in_use``) and the blocks
    registered under a hash that already named a block (``duplicates``: :func:`pool_sweep` then
    marks no row exact).
    """

    def __init__(self, num_blocks: int, size_hint: int):
        super().__init__(num_blocks, cache_freed=True)
        self.size_hint = size_hint
        self._stamp: dict[int, int] = {}
        self._clock = 0
        self._taken = _Fenwick(size_hint)
        self.hit_depths: list[int] = []
        self.end_depths: list[int] = []
        self.peak_in_use = 0
        self.duplicates = 0

    def register(self, block_id: int, block_hash: bytes) -> bool:
        if self.block_hashes[block_id] is None and self.lookup(block_hash) is not None:
            self.duplicates += 1
        return super().register(block_id, block_hash)

    def register_all(self, blocks, block_hashes) -> None:
        hashes, lookup, fresh = self.block_hashes, self.lookup, set()
        for b, h in zip(blocks, block_hashes):
            if hashes[b] is None:
                if h in fresh or lookup(h) is not None:
                    self.duplicates += 1
                fresh.add(h)
        super().register_all(blocks, block_hashes)

    def touch(self, blocks) -> None:
        ref, stamp = self.refcounts, self._stamp          # (stored: this pool caches freed blocks)
        in_use, clock, taken = self.num_blocks - self.num_free, self._clock, self._taken
        deepest = 0
        cached = []
        for b in blocks:
            if ref[b] == 0:
                s = stamp[b]
                depth = in_use + (clock - s) - taken.above(s)
                self.end_depths.append(depth)
                cached.append(s)
                if depth > deepest:
                    deepest = depth
            self.hit_depths.append(deepest)
        super().touch(blocks)
        for s in cached:
            taken.mark(s)
        self.peak_in_use = max(self.peak_in_use, self.num_blocks - self.num_free)

    def allocate(self, n: int, evicted: list | None = None) -> list[int]:
        blocks = super().allocate(n, evicted)
        self.peak_in_use = max(self.peak_in_use, self.num_blocks - self.num_free)
        return blocks

    def allocate_one(self) -> int | None:
        b = super().allocate_one()
        self.peak_in_use = max(self.peak_in_use, self.num_blocks - self.num_free)
        return b

    def release(self, blocks) -> list[int]:
        freed = super().release(blocks)
        stamp, clock = self._stamp, self._clock
        for b in freed:
            clock += 1
            stamp[b] = clock
        self._clock = clock
        return freed

    def final_depths(self) -> list[int]:
        """Depth of each block still cached when the run ends (nothing is in use then)."""
        queue = self.free_queue(never_used=False)          # released blocks, LRU first
        hashes, n = self.block_hashes, len(queue)
        return [n - 1 - i for i, b in enumerate(queue) if hashes[b] is not None]


class _StackDepthAllocator(PagedAllocator):
    """A prefix-caching :class:`PagedAllocator` whose pool is a :class:`_StackDepthPool`."""

    def __init__(self, total_slots: int, block_size: int, size_hint: int):
        self.pool_class = lambda n, cache_freed: _StackDepthPool(n, size_hint)
        super().__init__(total_slots, block_size, prefix_caching=True)
