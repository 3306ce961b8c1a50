"""The block pool as vLLM v1's own rules define it (issue 41, item 4), on hand-built cases.

* One block hash names every cached block that holds it (vLLM's ``BlockHashToBlockMap``,
  vllm/v1/core/block_pool.py): a lookup finds the earliest registered, and evicting one block
  leaves the hash finding the other.
* A block computed again while an identical block is cached gets its hash and joins that
  hash's entry (``BlockPool.cache_full_blocks`` never de-duplicates).
* A prompt's last token is never a cache hit (vllm/v1/core/kv_cache_manager.py,
  ``get_computed_blocks``: ``max_cache_hit_length = request.num_tokens - 1``): a fully cached
  32-token prompt at block size 16 reuses 16 tokens, a 16-token one none.

Each pool case runs on the list pool and on the array pool (the engine's prefix-caching twin),
with bytes keys and with int table keys, and the two pools must agree block by block.
"""
import numpy as np
import pytest

from allocator.memory.array_pool import ArrayBlockPool
from allocator.memory.block_manager import BlockManager
from allocator.memory.block_pool import BLOCK_CACHED, BLOCK_IN_USE, BlockPool, KVCacheBlock
from allocator.memory.paged import PagedAllocator

POOLS = [(BlockPool, b"h"), (ArrayBlockPool, b"h"), (ArrayBlockPool, 7)]


def _two_copies(make, key):
    """A pool of 4 blocks where hash ``key`` names blocks 0 and 1 (0 registered first), both
    released: 0 waits at the front of the free queue, behind the two never-used blocks."""
    pool = make(4, cache_freed=True)
    a, b = pool.allocate(1)[0], pool.allocate(1)[0]
    assert pool.register(a, key)
    assert pool.register(b, key)                   # computed again: gets the same hash
    assert pool.lookup_all(key) == [a, b] and pool.lookup(key) == a
    assert pool.hash_of(a) == pool.hash_of(b) == key and pool.num_cached == 2
    pool.release([a])
    pool.release([b])
    assert pool.free_queue() == [2, 3, a, b] and pool.cached_free_queue() == [a, b]
    pool.check_invariants()
    return pool, a, b


@pytest.mark.parametrize("make,key", POOLS)
def test_evicting_one_of_two_blocks_with_one_hash_leaves_the_other_findable(make, key):
    pool, a, b = _two_copies(make, key)
    evicted = []
    assert list(pool.allocate(3, evicted)) == [2, 3, a] and evicted == [a]
    assert pool.lookup(key) == b and pool.lookup_all(key) == [b]     # the hash still finds b
    assert pool.lookup_run([key], 1) == [b] and pool.evictions == 1 and pool.num_cached == 1
    pool.touch([b])                                                  # and b is a cache hit
    assert pool.block(b) == KVCacheBlock(b, 1, key, BLOCK_IN_USE)
    pool.check_invariants([[2], [3], [a], [b]])


@pytest.mark.parametrize("make,key", POOLS)
def test_evicting_the_later_copy_keeps_the_earlier_one_first(make, key):
    pool, a, b = _two_copies(make, key)
    pool.touch([a])                                                  # a leaves the queue: b is next
    assert list(pool.allocate(3)) == [2, 3, b]
    assert pool.lookup_all(key) == [a] and pool.block(a).block_hash == key
    pool.check_invariants([[a], [2], [3], [b]])


@pytest.mark.parametrize("make,key", POOLS)
def test_a_recomputed_block_gets_its_hash_and_joins_the_index(make, key):
    """register_all (a prompt's blocks at once) gives a block its hash although the hash already
    names a cached block, and the earlier block stays the one found; a block that has a hash keeps it."""
    pool = make(6, cache_freed=True)
    keys = [key, key + b"1"] if isinstance(key, bytes) else [key, key + 1]
    first = list(pool.allocate(2))
    pool.register_all(first, keys)
    pool.release(first)                                              # both cached
    again = list(pool.allocate(2))                                   # never-used blocks 2, 3
    pool.register_all(np.array(again) if make is ArrayBlockPool else again, keys)
    for k, old, new in zip(keys, first, again):
        assert pool.lookup_all(k) == [old, new] and pool.lookup(k) == old
        assert pool.block(new) == KVCacheBlock(new, 1, k, BLOCK_IN_USE)
        assert pool.block(old) == KVCacheBlock(old, 0, k, BLOCK_CACHED)
    assert pool.num_cached == 4 and pool.num_cached_free == 2
    assert not pool.register(again[0], keys[1])                       # a hashed block keeps its hash
    assert pool.lookup_all(keys[1]) == [first[1], again[1]]
    pool.check_invariants([again])


def test_the_list_pool_and_the_array_pool_agree_on_every_rule_here():
    """The twins, on one scenario that uses every rule above with bytes and int keys: the same
    block views, the same block-hash map (each hash's blocks, the one found first), the same queue."""
    for key in (b"k", 40):
        pools = [BlockPool(8, cache_freed=True), ArrayBlockPool(8)]
        keys = [key, key + b"+"] if isinstance(key, bytes) else [key, key + 1]
        for pool in pools:
            t1 = pool.allocate(3)
            pool.register_all(t1[:2], keys)
            t2 = pool.allocate(3)
            pool.register_all(t2[:2], keys)                          # both copies of both keys
            pool.release(t1)
            pool.release(t2)
            ev = []
            pool.allocate(4, ev)                                     # 6, 7, then t1's tail block and t1[1]
            pool.touch([pool.lookup(keys[0])])
        plain, arr = pools
        assert [plain.block(b) for b in range(8)] == [arr.block(b) for b in range(8)]
        assert plain.block_map() == arr.block_map() and plain.free_queue() == arr.free_queue()
        assert (plain.num_cached, plain.num_cached_free, plain.evictions) == \
               (arr.num_cached, arr.num_cached_free, arr.evictions)
        assert plain.lookup_all(keys[1]) == [4]                      # t1's copy evicted, t2's found
        plain.check_invariants()
        arr.check_invariants()


@pytest.mark.parametrize("n_tokens,cached", [(32, 16), (16, 0), (33, 32), (31, 16), (1, 0)])
def test_a_fully_cached_prompt_leaves_its_last_token_to_compute(n_tokens, cached):
    """Block tables page's manager: a prompt whose every full block is cached reuses at most
    (n - 1) // 16 blocks; the block holding its last token is computed again and gets its hash."""
    m = BlockManager(num_blocks=16, block_size=16)
    prompt = list(range(100, 100 + n_tokens))
    m.allocate("A", prompt)
    assert m.num_cached_tokens(prompt) == cached
    r = m.allocate("B", prompt)
    assert r.num_cached_tokens == cached and len(r.reused) == cached // 16
    full = n_tokens // 16
    for i in range(cached // 16, full):          # a full block computed again: same hash, both found
        a, b = m.block_table("A")[i], m.block_table("B")[i]
        assert a != b and m.block_hash_of(a) == m.block_hash_of(b) is not None
        assert m.pool.lookup_all(m.block_hash_of(a)) == [a, b]
    m.check_invariants()


def test_after_the_first_copy_is_evicted_the_recomputed_block_serves_the_prompt():
    """The lab used to drop the hash with the first copy although an identical block was cached."""
    m = BlockManager(num_blocks=4, block_size=4)
    p = [1, 2, 3, 4, 5, 6, 7, 8]
    m.allocate("A", p)                           # blocks 0, 1
    m.allocate("B", p)                           # reuses 0; computes block 1's tokens again in block 2
    a1, b1 = m.block_table("A")[1], m.block_table("B")[1]
    m.free("A")                                  # a1 cached at the queue's front (after never-used 3)
    m.allocate("C", [9, 9])                      # takes block 3
    r = m.allocate("D", [7, 7])                  # takes a1: evicted
    assert r.evicted == (a1,)
    m.free("B")
    assert m.num_cached_tokens(p + [0]) == 8     # b1 still holds block 1's hash
    assert m.pool.lookup(m.block_hash_of(b1)) == b1
    m.check_invariants()


def test_the_engine_v1_lookup_leaves_the_last_token_to_compute():
    """The engine's vLLM v1 calls (PagedAllocator.v1_computed_blocks) already follow the rule."""
    alloc = PagedAllocator(64 * 16, 16, prefix_caching=True)
    alloc.reset()
    assert alloc.v1_allocate(1, 32, 32, 32)
    assert alloc.v1_computed_blocks(2, 32, 32) == []          # other tokens: no hit
    assert len(alloc.v1_computed_blocks(1, 32, 32)) == 1      # its own 32 tokens: 16 cached
    assert alloc.v1_computed_blocks(1, 16, 16) == []
