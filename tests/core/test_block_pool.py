"""The one block pool: LRU free queue, release order, block-hash map, refusals that change nothing.

Both paged models keep their blocks here (the engine's PagedAllocator and the Block tables page's
BlockManager), so its rules are tested once, against a plain-list model of the same rules.
"""
import copy
import dataclasses
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.memory.block_pool import BLOCK_CACHED, BLOCK_FREE, BLOCK_IN_USE, BlockPool, KVCacheBlock
from allocator.memory.host_pool import HostPool
from allocator.memory.paged import PagedAllocator
from allocator.memory import array_pool
from allocator.memory.array_pool import ArrayBlockPool
from allocator.memory.allocators import Allocator
from allocator.memory.reserve_max import ReserveMaxAllocator
from allocator.memory.block_manager import BlockManager
from allocator.common.errors import FieldError, OutOfBlocksError


def test_both_paged_models_use_the_one_pool():
    assert type(PagedAllocator(64, 4).pool) is BlockPool
    assert type(BlockManager(16, 4).pool) is BlockPool


def test_allocation_takes_the_front_and_release_returns_last_block_first():
    pool = BlockPool(6)
    a = pool.allocate(3)
    b = pool.allocate(2)
    assert (a, b) == ([0, 1, 2], [3, 4]) and pool.free_queue() == [5]
    assert pool.release(a) == [2, 1, 0]               # the tail of a table is reused first
    assert pool.free_queue() == [5, 2, 1, 0]
    assert pool.allocate(2) == [5, 2]
    assert [pool.refcount(x) for x in range(6)] == [0, 0, 1, 1, 1, 1]
    pool.check_invariants([[5, 2], b])


def test_cached_blocks_stay_findable_until_the_queue_hands_them_out():
    pool = BlockPool(4, cache_freed=True)
    a = pool.allocate(2)
    assert pool.register(a[0], b"h0") and pool.register(a[1], b"h1")
    assert not pool.register(a[1], b"other")          # a block keeps the hash it was given
    pool.release(a)
    assert pool.num_cached_free == 2 and pool.num_plain_free == 2 and pool.lookup(b"h0") == a[0]
    pool.touch([a[0]])                                # a cache hit takes it out of the queue
    assert pool.refcount(a[0]) == 1 and a[0] not in pool.free_queue() and pool.num_free == 3
    evicted = []
    assert pool.allocate(3, evicted) == [2, 3, a[1]] and evicted == [a[1]]
    assert pool.lookup(b"h1") is None and pool.evictions == 1
    pool.check_invariants([[a[0]], [2, 3, a[1]]])


def test_without_caching_a_released_block_forgets_its_hash():
    pool = BlockPool(4, cache_freed=False)
    a = pool.allocate(1)
    pool.register(a[0], b"h")
    pool.touch(a)                                     # shared while someone holds it
    pool.release(a)
    assert pool.lookup(b"h") == a[0]
    pool.release(a)
    assert pool.lookup(b"h") is None and pool.num_cached_free == 0
    with pytest.raises(FieldError) as err:            # a free, unhashed block cannot be shared
        pool.touch(a)
    assert err.value.field == "block_id"
    pool.check_invariants()


def test_refusals_change_nothing():
    pool = BlockPool(4)
    held = pool.allocate(3)
    before = copy.deepcopy(pool)
    with pytest.raises(OutOfBlocksError) as err:
        pool.allocate(2)
    assert (err.value.field, err.value.needed, err.value.available) == ("num_blocks", 2, 1)
    pool.release(held)
    assert pool.allocate(1) == [3]
    before2 = copy.deepcopy(pool)
    with pytest.raises(RuntimeError):                 # block 0 is held by nobody: a bookkeeping bug;
        pool.release([0, 3])                          # block 3 (released first) is rolled back
    assert pool == before2 and pool.refcount(3) == 1
    assert before != pool                             # (and equality does compare state)
    host = HostPool(2)
    with pytest.raises(OutOfBlocksError) as err:
        host.take(3)
    assert err.value.field == "num_host_blocks" and host.num_free == 2


class ListModel:
    """The same rules with plain lists: the free queue is a list, hashes a dict (block -> hash, in
    the order registered, so a hash's blocks are found earliest registered first)."""

    def __init__(self, n, cache_freed):
        self.queue, self.ref, self.hash, self.cache_freed = list(range(n)), [0] * n, {}, cache_freed

    def owner(self, key):
        """The block a lookup of ``key`` finds: the earliest registered block holding it, or None."""
        return next((b for b, k in self.hash.items() if k == key), None)

    def allocate(self, k):
        taken, self.queue = self.queue[:k], self.queue[k:]
        for b in taken:
            self.ref[b] = 1
            self.hash.pop(b, None)
        return taken

    def touch(self, blocks):
        for b in blocks:
            if self.ref[b] == 0:
                self.queue.remove(b)
            self.ref[b] += 1

    def release(self, blocks):
        for b in reversed(blocks):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                self.queue.append(b)
                if not self.cache_freed:
                    self.hash.pop(b, None)


#: The pools that keep the rules: (pool type, key kind). ArrayBlockPool (prefix caching only) keeps
#: int keys in an array indexed by key and other keys in a dict; both kinds are run.
POOLS = [(BlockPool, "bytes"), (ArrayBlockPool, "bytes"), (ArrayBlockPool, "int")]


def _key(kind: str, h: int):
    return h.to_bytes(2, "big") if kind == "bytes" else h


@pytest.mark.parametrize("few", [0, 4])                   # ArrayBlockPool: bulk only, or a few block by block
@pytest.mark.parametrize("make,kind", POOLS)
@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 12), cache_freed=st.booleans(), ops=st.lists(
    st.tuples(st.sampled_from(["alloc", "release", "share", "hash", "picture", "run"]), st.integers(0, 12),
              st.integers(0, 50)), max_size=60))
def test_pool_matches_a_plain_list_model(make, kind, few, n, cache_freed, ops):
    if make is ArrayBlockPool and not cache_freed:
        cache_freed = True                             # it keeps released blocks cached by design
    # arrays of 2 entries to start with: every run grows them and compacts the queue many times
    with mock.patch.object(array_pool, "_MIN_CAP", 2), mock.patch.object(array_pool, "_FEW", few):
        _run_against_the_model(make(n, cache_freed=cache_freed), ListModel(n, cache_freed), kind, n, ops)


def _run_against_the_model(pool, model, kind, n, ops):
    tables, last = [], None
    for op, k, h in ops:
        if op == "alloc":
            if k > pool.num_free:
                with pytest.raises(OutOfBlocksError):
                    pool.allocate(k)
                continue
            t = pool.allocate(k)
            assert t == model.allocate(k)
            if t:
                tables.append(t)
        elif op == "release" and tables:
            t = tables.pop(k % len(tables))
            pool.release(t)
            model.release(t)
        elif op == "share" and tables:
            t = tables[k % len(tables)]
            pool.touch(t)
            model.touch(t)
            tables.append(list(t))
        elif op == "hash" and tables:
            t = tables[k % len(tables)]
            if h % 2:                                  # one block, or a whole table at once
                key = _key(kind, h)
                assert pool.register(t[0], key) == (t[0] not in model.hash)
                model.hash.setdefault(t[0], key)
            else:
                keys = [_key(kind, h + i) for i in range(len(t))]
                pool.register_all(t, keys)
                for b, key in zip(t, keys):            # every unhashed block gets its hash, in order
                    model.hash.setdefault(b, key)
        elif op == "hash":
            key = _key(kind, h)                        # a cache hit on a released block, if it is cached
            b = pool.lookup(key)
            if b is not None and pool.refcount(b) == 0:
                pool.touch([b])
                model.touch([b])
                tables.append([b])
        elif op == "picture":                          # the cached free blocks, least recently used first
            expect = [b for b in model.queue if b in model.hash]
            assert pool.cached_free_queue() == expect
            picture = pool.cached_free_blocks()
            if isinstance(pool, ArrayBlockPool):       # a pool picture's entry: a read-only int64 array
                assert picture.dtype == np.int64 and not picture.flags.writeable
            assert list(picture) == expect
            if last is not None:                       # an earlier picture kept what it showed then
                assert list(last[0]) == last[1]
            last = picture, expect
        elif op == "run":                              # the longest run of leading keys found
            keys = [_key(kind, (h + i) % 51) for i in range(k)]
            expect = []
            for key in keys[:k // 2 + 1]:
                if model.owner(key) is None:
                    break
                expect.append(model.owner(key))
            assert pool.lookup_run(keys, k // 2 + 1) == expect
        assert pool.free_queue() == model.queue
        assert [pool.refcount(b) for b in range(n)] == model.ref
        assert {b: pool.hash_of(b) for b in range(n) if pool.hash_of(b) is not None} == model.hash
        for key in set(model.hash.values()):           # each hash names its blocks, earliest registered first
            assert pool.lookup_all(key) == [b for b, k in model.hash.items() if k == key]
            assert pool.lookup(key) == model.owner(key)
        assert pool.num_cached == len(model.hash)
        pool.check_invariants(tables)


PROTOCOL = {name for name in Allocator.__annotations__} | {
    name for name, value in vars(Allocator).items() if callable(value) and not name.startswith("_")}


class OnlyTheProtocol:
    """Hands the engine an allocator's protocol members and nothing else."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        if name not in PROTOCOL:
            raise AttributeError(f"the engine used {name!r}, which is not part of the Allocator protocol")
        return getattr(self._inner, name)


@pytest.mark.parametrize("make", [lambda: PagedAllocator(600, 8, preemption="swap", host_blocks=4),
                                  lambda: ReserveMaxAllocator(600, 60, policy="pow2")])
def test_the_engine_uses_only_the_allocator_protocol(make):
    from allocator.workloads.requests import generate_workload
    from allocator.engine.simulate import simulate
    w = generate_workload(seed=4, num_requests=25, prompt_len_range=(5, 60), output_mean=30, max_new_tokens=60,
                          arrival="trickle", arrival_rate=0.2)
    assert isinstance(make(), Allocator)
    direct = simulate(w, make(), record_snapshots=True)
    wrapped = simulate(w, OnlyTheProtocol(make()), record_snapshots=True)
    assert direct.summary == wrapped.summary and direct.summary["finished"] == 25


def test_memory_follows_the_blocks_used_not_the_pool():
    """A pool of 2**30 blocks stores only the blocks it handed out; never-used ones come from a
    counter at the front of the queue, in id order, exactly as a stored queue would give them."""
    import tracemalloc

    tracemalloc.start()
    pool = BlockPool(2 ** 30)
    a = pool.allocate(3)
    b = pool.allocate_one()
    pool.register(a[0], b"h")
    pool.release(a)
    c = pool.allocate(2)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert (a, b, c) == ([0, 1, 2], 3, [4, 5]) and peak < 2 ** 20
    assert pool.num_free == 2 ** 30 - 3 and pool.num_cached_free == 1 and pool.state(2 ** 30 - 1) == "free"
    assert pool.refcount(2 ** 30 - 1) == 0 and pool.hash_of(7) is None
    # the released blocks wait behind every never-used one (least recently used first)
    small = BlockPool(8)
    small.allocate(3)
    small.release([0, 1, 2])
    assert small.free_queue() == [3, 4, 5, 6, 7, 2, 1, 0]
    assert small.allocate(6) == [3, 4, 5, 6, 7, 2]
    small.check_invariants([[3], [4], [5], [6], [7], [2]])


def test_the_array_pool_refuses_without_change_and_grows_with_the_blocks_used():
    """ArrayBlockPool (prefix caching's pool): the same refusals that change nothing, and memory
    that follows the blocks handed out, not a pool of 2**30 blocks."""
    import tracemalloc

    pool = ArrayBlockPool(4)
    held = pool.allocate(3)
    pool.register_all(held, [7, 8, 9])
    before = copy.deepcopy(pool)
    with pytest.raises(OutOfBlocksError) as err:
        pool.allocate(2)
    assert (err.value.field, err.value.needed, err.value.available) == ("num_blocks", 2, 1) and pool == before
    pool.release(held)
    assert pool.allocate(1) == [3] and pool.cached_free_queue() == [2, 1, 0]
    before = copy.deepcopy(pool)
    with pytest.raises(RuntimeError):                 # block 0 is held by nobody: nothing changes
        pool.release([0, 3])
    assert pool == before and pool.refcount(3) == 1
    fresh = pool.allocate(1)                          # block 2, evicted from the cache: no hash now
    assert fresh == [2] and pool.lookup(9) is None and pool.evictions == 1
    pool.release(fresh)
    before = copy.deepcopy(pool)
    with pytest.raises(FieldError) as err:            # a free block without a hash cannot be shared
        pool.touch([1, 2])
    assert err.value.field == "block_id" and pool == before
    pool.touch([1])                                   # a cache hit takes it out of the queue
    assert pool.refcount(1) == 1 and pool.cached_free_queue() == [0]
    pool.check_invariants([[3], [1]])
    with pytest.raises(FieldError):
        ArrayBlockPool(4, cache_freed=False)
    tracemalloc.start()
    big = ArrayBlockPool(2 ** 30)
    a = big.allocate(3)
    big.register_all(a, [5, 6, 7])
    big.release(a)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 2 ** 20 and big.num_free == 2 ** 30 and big.num_cached_free == 3 and big.lookup(6) == 1
    assert big.allocate(2) == [3, 4] and big.lookup_run([5, 6, 7], 3) == [0, 1, 2]


@pytest.mark.parametrize("few", [0, 4])
@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 12), kind=st.sampled_from(["bytes", "int"]), ops=st.lists(
    st.tuples(st.sampled_from(["alloc", "one", "release", "share", "hash", "hit"]), st.integers(0, 12),
              st.integers(0, 50)), max_size=60))
def test_the_list_pool_and_the_array_pool_are_twins_block_by_block(few, n, kind, ops):
    """The same operations on BlockPool (caching freed blocks) and ArrayBlockPool leave every block
    with the same KVCacheBlock view (id, refcount, hash, state), the same counts and the same free
    queue; both refuse the same operations. Int keys go to the array pool's key table, bytes to dicts."""
    with mock.patch.object(array_pool, "_MIN_CAP", 2), mock.patch.object(array_pool, "_FEW", few):
        plain, arr = BlockPool(n, cache_freed=True), ArrayBlockPool(n)
        tables = []
        for op, k, h in ops:
            if op == "alloc" and k <= plain.num_free:
                ev1, ev2 = [], []
                t = plain.allocate(k, ev1)
                assert arr.allocate(k, ev2) == t and ev1 == ev2
                if t:
                    tables.append(t)
            elif op == "alloc":
                for pool in (plain, arr):
                    with pytest.raises(OutOfBlocksError):
                        pool.allocate(k)
            elif op == "one":
                b = plain.allocate_one()
                assert arr.allocate_one() == b
                if b is not None:
                    tables.append([b])
            elif op == "release" and tables:
                t = tables.pop(k % len(tables))
                assert list(arr.release(t)) == plain.release(t)
            elif op == "share" and tables:
                t = tables[k % len(tables)]
                plain.touch(t)
                arr.touch(t)
                tables.append(list(t))
            elif op == "hash" and tables:
                t = tables[k % len(tables)]
                keys = [_key(kind, h + i) for i in range(len(t))]
                plain.register_all(t, keys)
                arr.register_all(t, keys)
            elif op == "hit":                               # a prefix-cache hit, or a refused share
                b = k % n
                if plain.block(b).ref_cnt == 0 and plain.block(b).block_hash is None:
                    for pool in (plain, arr):
                        with pytest.raises(FieldError):
                            pool.touch([b])
                else:
                    plain.touch([b])
                    arr.touch([b])
                    tables.append([b])
            views = [plain.block(b) for b in range(n)]
            assert [arr.block(b) for b in range(n)] == views
            assert [v.state for v in views] == [plain.state(b) for b in range(n)] == [arr.state(b) for b in range(n)]
            assert [v.ref_cnt == 0 for v in views] == [v.is_free for v in views]
            assert (plain.num_free, plain.num_cached_free, plain.num_cached, plain.evictions) == \
                   (arr.num_free, arr.num_cached_free, arr.num_cached, arr.evictions)
            assert plain.free_queue() == arr.free_queue() and plain.cached_free_queue() == arr.cached_free_queue()
            assert plain.block_hashes == arr.block_hashes == [v.block_hash for v in views[:len(plain.refcounts)]]
            assert plain.block_map() == arr.block_map()     # each hash's blocks, the one found first
            plain.check_invariants(tables)
            arr.check_invariants(tables)


def test_a_block_view_names_every_field():
    """``block(id)`` is a frozen KVCacheBlock: a never-used block is free with no hash; a registered
    block in use, then cached once released, then free again once the queue hands it out."""
    pool = BlockPool(3)
    assert pool.block(2) == KVCacheBlock(block_id=2, ref_cnt=0, block_hash=None, state=BLOCK_FREE)
    a = pool.allocate(1)[0]
    pool.register(a, b"h")
    assert pool.block(a) == KVCacheBlock(a, 1, b"h", BLOCK_IN_USE) and pool.block(a).is_cached
    pool.release([a])
    view = pool.block(a)
    assert view == KVCacheBlock(a, 0, b"h", BLOCK_CACHED) and view.is_free and view.is_cached
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.ref_cnt = 5
    pool.allocate(3)                                  # the queue hands it out last: evicted
    assert pool.block(a) == KVCacheBlock(a, 1, None, BLOCK_IN_USE)
    for bad in (-1, 3, "x"):
        with pytest.raises(FieldError) as err:
            pool.block(bad)
        assert err.value.field == "block_id"


@pytest.mark.parametrize("make", [lambda: BlockPool(8), lambda: BlockPool(8, cache_freed=False),
                                  lambda: ArrayBlockPool(8)])
def test_sharing_a_never_used_or_outside_block_is_a_field_error(make):
    """``touch`` on a block never handed out (or an id outside the pool) is refused with the
    FieldError its docstring promises (it was an IndexError), and the pool is unchanged."""
    pool = make()
    held = pool.allocate(2)
    for bad in ([5], [held[0], 7], [8], [-1], [2 ** 40]):
        before = copy.deepcopy(pool)
        with pytest.raises(FieldError) as err:
            pool.touch(bad)
        assert err.value.field == "block_id" and pool == before
    pool.touch(held)                                  # blocks in use can still be shared
    assert pool.refcount(held[0]) == 2
    pool.check_invariants([held, held])
