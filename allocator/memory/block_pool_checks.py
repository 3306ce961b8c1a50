"""The block pool's invariants, checked after every engine step in tests.

:func:`check_block_pool` is :meth:`allocator.memory.block_pool.BlockPool.check_invariants`: it asserts
that the free block queue holds exactly the blocks with refcount 0 (each once, at the position
the pool records), that refcounts equal the block tables pointing at each block, that
free + cached + in use == num_blocks, and that the block-hash map and the blocks' hashes agree.
It reads the pool's private state, so it lives beside the pool and changes with it;
:class:`allocator.memory.array_pool.ArrayBlockPool` has its own check over its numpy state.

Sources: Kwon et al., "Efficient Memory Management for Large Language Model Serving with
PagedAttention", SOSP 2023 (arXiv:2309.06180), sections 4.2-4.4 (block tables, refcounts);
vLLM's vllm/v1/core/block_pool.py and vllm/v1/core/kv_cache_utils.py (``FreeKVCacheBlockQueue``);
``assets/reference_figures.md`` R8 (shared blocks and refcounts).
"""
from __future__ import annotations

from allocator.memory.block_pool_queries import _TOMBSTONE


def check_block_pool(pool, tables=()) -> None:
    """Assert the block pool ``pool`` (a :class:`~allocator.memory.block_pool.BlockPool`) is consistent,
    and, given every block table, that refcounts match.

    Args:
        tables: every block table that holds blocks (iterables of block ids); when given,
            each block's refcount must equal the number of tables listing it.

    Raises:
        AssertionError naming the first inconsistency: a block both queued and referenced,
        a block queued twice, refcount != tables pointing at it, free + cached + in use !=
        num_blocks, a stale hash entry.
    """
    used = len(pool._ref)
    assert used == pool._fresh == len(pool._hash), "per-block lists do not cover exactly the blocks handed out"
    assert pool._pos is None or len(pool._pos) == used, "queue positions do not cover the blocks handed out"
    queued = [b for b in pool._queue[pool._head:] if b != _TOMBSTONE]     # released (used) blocks
    assert len(set(queued)) == len(queued), "a block is queued twice"
    assert all(b < used for b in queued), "a never-used block is stored in the queue"
    assert len(queued) + pool.num_blocks - pool._fresh == pool.num_free, (
        f"{len(queued) + pool.num_blocks - pool._fresh} queued but {pool.num_free} counted free")
    unreferenced = {b for b in range(used) if pool._ref[b] == 0}
    assert set(queued) == unreferenced, "the free queue does not hold exactly the blocks with refcount 0"
    if pool._pos is not None:
        for i, b in enumerate(pool._queue):
            if b != _TOMBSTONE and i >= pool._head:
                assert pool._pos[b] == i, f"block {b}: queue position {pool._pos[b]} != {i}"
    tables = list(tables)
    if tables:
        pointing = [0] * used
        for table in tables:
            for b in table:
                assert b < used, f"block {b} is in a block table but was never handed out"
                pointing[b] += 1
        for b in range(used):
            assert pointing[b] == pool._ref[b], (
                f"block {b}: refcount {pool._ref[b]} but {pointing[b]} block tables point at it")
    cached_free = sum(1 for b in queued if pool._hash[b] is not None)
    assert cached_free == len(pool._cached_free), (
        f"{cached_free} cached free blocks, {len(pool._cached_free)} counted")
    assert list(pool._cached_free) == [b for b in queued if pool._hash[b] is not None], (
        "the cached free blocks are not in free-queue order")
    assert pool.num_plain_free + pool.num_cached_free + pool.num_in_use == pool.num_blocks, (
        f"free {pool.num_plain_free} + cached {pool.num_cached_free} + in use {pool.num_in_use} "
        f"!= {pool.num_blocks} blocks")
    for h, b in pool._cache.items():
        assert pool._hash[b] == h, f"cache entry for block {b} does not match its hash"
    assert sum(1 for h in pool._hash if h is not None) == len(pool._cache), "stray block hash"
    if not pool.cache_freed:
        assert not cached_free, "a released block kept its hash although cache_freed is False"
