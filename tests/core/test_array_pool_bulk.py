"""The array pool's int64-array calls (``allocate_array``, ``lookup_run_array``) are its list calls
in another representation: the same blocks in the same order, the same state after.

The paged allocator builds, registers and releases a prefix-cached prompt's block table from
these arrays (``PagedAllocator.admit``, ``_release``); ``tests/core/test_block_pool.py`` checks the
list calls against a plain-list model, so equality here carries those rules over.
"""
from unittest import mock

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.memory import array_pool
from allocator.memory.array_pool import ArrayBlockPool
from allocator.common.errors import OutOfBlocksError


def _key(kind: str, h: int):
    return h.to_bytes(2, "big") if kind == "bytes" else h


@settings(max_examples=120, deadline=None)
@given(n=st.integers(1, 14), kind=st.sampled_from(["int", "bytes"]), few=st.sampled_from([0, 4]), ops=st.lists(
    st.tuples(st.sampled_from(["alloc", "release", "share", "hash", "run"]), st.integers(0, 14), st.integers(0, 40)),
    max_size=50))
def test_the_array_calls_give_what_the_list_calls_give(n, kind, few, ops):
    with mock.patch.object(array_pool, "_MIN_CAP", 2), mock.patch.object(array_pool, "_FEW", few):
        lists, arrays = ArrayBlockPool(n), ArrayBlockPool(n)
        tables, starts = [], [0]                       # starts: where registered keys begin
        for op, k, h in ops:
            if op == "alloc":
                if k > lists.num_free:
                    for pool, call in ((lists, lists.allocate), (arrays, arrays.allocate_array)):
                        try:
                            call(k)
                        except OutOfBlocksError:
                            pass
                        else:
                            raise AssertionError("an allocation past the free blocks was not refused")
                    continue
                ev_l, ev_a = [], []
                t = lists.allocate(k, ev_l)
                a = arrays.allocate_array(k, ev_a)
                assert a.dtype == np.int64 and a.tolist() == t and ev_a == ev_l
                if t:
                    tables.append(t)
            elif op == "release" and tables:
                t = tables.pop(k % len(tables))
                freed = lists.release(t)
                assert arrays.release(np.array(t, dtype=np.int64)).tolist() == freed.tolist()
            elif op == "share" and tables:
                t = tables[k % len(tables)]
                lists.touch(t)
                arrays.touch(np.array(t, dtype=np.int64))
                tables.append(list(t))
            elif op == "hash" and tables:
                t = tables[k % len(tables)]
                keys = [_key(kind, h + i) for i in range(len(t))]
                starts.append(h)
                lists.register_all(t, keys)
                arrays.register_all(np.array(t, dtype=np.int64), np.array(keys) if kind == "int" else keys)
            elif op == "run":                          # the longest run of leading keys found
                start = starts[-1 - h % 3 % len(starts)] if h % 2 else h   # half: where a recent registration began
                keys = [_key(kind, start + i) for i in range(k)]
                # each hash finds the earliest registered of its blocks (the map's first)
                owner = {h: blocks[0] for h, blocks in lists.block_map().items()}
                assert sorted(b for blocks in lists.block_map().values() for b in blocks) == \
                    [b for b in range(n) if lists.hash_of(b) is not None]
                found = []
                for key in keys[:k // 2 + 1]:          # the run, from the map
                    if key not in owner:
                        break
                    found.append(owner[key])
                assert lists.lookup_run(keys, k // 2 + 1) == found
                got = arrays.lookup_run_array(np.array(keys, dtype=np.int64) if kind == "int" else keys, k // 2 + 1)
                assert got.dtype == np.int64 and got.tolist() == found
                b = lists.lookup(keys[0]) if keys else None
                if b is not None and lists.refcount(b) == 0:   # a hit on a released, cached block
                    lists.touch([b])
                    arrays.touch(np.array([b], dtype=np.int64))
                    tables.append([b])
            assert arrays == lists
            arrays.check_invariants(tables)


def test_the_array_calls_on_nothing():
    pool = ArrayBlockPool(4)
    assert pool.allocate_array(0).tolist() == [] and pool.allocate_array(0).dtype == np.int64
    assert pool.lookup_run_array(np.empty(0, dtype=np.int64), 3).tolist() == []
    assert pool.lookup_run_array(np.array([5, 6]), 0).tolist() == []
    assert pool.lookup_run_array([b"x"], 1).tolist() == [] and pool.lookup_run_array([b"x"], 1).dtype == np.int64
