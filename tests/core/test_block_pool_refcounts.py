"""Refcounts the block pool does not store (allocator/memory/block_pool.py, module docstring): a pool that
forgets freed blocks' hashes writes no refcount while it has shared nothing, and must answer every
question exactly as a pool that stores them from the start.
"""
import copy
import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.memory.block_pool import BlockPool
from allocator.memory.paged import PagedAllocator
from allocator.workloads.requests import classroom_40
from allocator.engine.simulate import simulate
from allocator.common.errors import FieldError


def _twins(n: int, free_order=None) -> tuple[BlockPool, BlockPool]:
    """(a pool without stored refcounts, the same pool storing them from the start)."""
    lazy = BlockPool(n, free_order=free_order, cache_freed=False)
    stored = BlockPool(n, free_order=free_order, cache_freed=False)
    stored.store_refcounts()
    assert not lazy.stores_refcounts and stored.stores_refcounts
    return lazy, stored


@settings(max_examples=120, deadline=None)
@given(n=st.integers(1, 10), shuffled=st.booleans(), ops=st.lists(
    st.tuples(st.sampled_from(["alloc", "one", "free", "free", "share", "release", "ask", "count"]),
              st.integers(0, 10)), max_size=50))
def test_a_pool_without_stored_refcounts_answers_as_one_with_them(n, shuffled, ops):
    lazy, stored = _twins(n, free_order=list(range(n))[::-1] if shuffled else None)
    tables: list[list[int]] = []
    shared = False                     # whether any block was ever shared (only then are refcounts stored)
    for op, k in ops:
        if op == "alloc" and k <= lazy.num_free:
            t = lazy.allocate(k)
            assert t == stored.allocate(k)
            if t:
                tables.append(t)
        elif op == "one":
            b = lazy.allocate_one()
            assert b == stored.allocate_one()
            if b is not None:
                tables.append([b])
        elif op == "free" and tables:
            t = tables[k % len(tables)]
            if all(stored.refcount(b) == 1 for b in t):      # only a table that shares nothing
                tables.remove(t)
                lazy.release_exclusive(t)
                stored.release_exclusive(t)
        elif op == "share" and tables:
            t = tables[k % len(tables)]
            lazy.touch(t)
            stored.touch(t)
            tables.append(list(t))
            shared = True
        elif op == "release" and tables:
            t = tables.pop(k % len(tables))
            assert lazy.release(t) == stored.release(t)
            shared = True                                    # a release by count stores them too
        elif op == "ask":
            b = k % n
            assert (lazy.refcount(b), lazy.state(b)) == (stored.refcount(b), stored.state(b))
            shared = True
        elif op == "count" and tables:
            t = tables[k % len(tables)]
            assert lazy.count_refcount(t, 1) == stored.count_refcount(t, 1)
            shared = True
        assert lazy.stores_refcounts == shared
        # whole-pool reads and checks derive them and leave the pool as it was
        assert lazy.refcounts == stored.refcounts and lazy.all_refcounts() == stored.all_refcounts()
        assert lazy.free_queue() == stored.free_queue() and lazy.num_free == stored.num_free
        lazy.check_invariants(tables)
        stored.check_invariants(tables)
        assert lazy.stores_refcounts == shared
        assert lazy == stored


def test_the_derived_refcounts_are_checked_against_the_block_tables():
    lazy, _ = _twins(6)
    a, b = lazy.allocate(2), lazy.allocate(3)
    lazy.release_exclusive(a)
    assert lazy.refcounts == [0, 0, 1, 1, 1] and lazy.all_refcounts() == [0, 0, 1, 1, 1, 0]
    lazy.check_invariants([b])
    with pytest.raises(AssertionError, match="block 2: refcount 1 but 0 block tables"):
        lazy.check_invariants([b[1:]])                       # a held block no table lists
    with pytest.raises(AssertionError, match="refcount 0 but 1 block tables"):
        lazy.check_invariants([b, a[:1]])                    # a table still listing a freed block
    assert not lazy.stores_refcounts                         # checking stored nothing


def test_a_refused_share_leaves_the_pool_equal():
    lazy, _ = _twins(4)
    held = lazy.allocate(2)
    before = copy.deepcopy(lazy)
    lazy.release_exclusive(held[1:])
    after_free = copy.deepcopy(lazy)
    with pytest.raises(FieldError, match="free and not cached"):
        lazy.touch([held[1]])                                # a free block without a hash cannot be shared
    assert lazy == after_free and lazy != before and lazy.stores_refcounts and lazy.refcounts == [1, 0]


@pytest.mark.parametrize("preemption", ["recompute", "swap"])
def test_the_engine_without_sharing_never_stores_refcounts(preemption):
    """The engine's paged runs that share nothing hand blocks out and take them back without
    writing a refcount (the pool's invariants, checked after every step, derive them)."""
    alloc = PagedAllocator(2048, 16, preemption=preemption)
    result = simulate(classroom_40(), alloc, check_invariants=True)
    assert result.summary.preemptions > 0 and (alloc.swap_traffic > 0) == (preemption == "swap")
    assert not alloc.pool.stores_refcounts
    shared = PagedAllocator(2048, 16)                        # a shared system prompt: refcounts above 1
    simulate(dataclasses.replace(classroom_40(), shared_prefix=32), shared, check_invariants=True)
    assert shared.pool.stores_refcounts and shared.shared_saving == 0 and shared.pool.num_cached == 0
