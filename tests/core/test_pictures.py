"""Pool pictures within their memory budget (``allocator.engine.loop.Pictures``, issue 24).

The thinning keeps the same steps however it is computed: each picture's size counted once and
remembered, a picture sized before it is built and not built when the thinning would drop it at
once. A picture of a prefix-caching pool lists its cached free blocks as a read-only int64 array.
"""
from __future__ import annotations

from unittest import mock

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.memory.paged import PagedAllocator
from allocator.engine import loop as engine_run
from allocator.engine.simulate import simulate
from allocator.engine.loop import Pictures, _snapshot_bytes
from allocator.workloads.mooncake import mooncake_workload, shipped_mooncake
from tests.tools.engine_digest import picture_as_tuples


def _reference(offered, budget: int) -> tuple[dict, int]:
    """The thinning as first written: every picture built and kept, then, while past the budget,
    the stride doubled and every non-empty picture off it dropped (sizes counted again)."""
    snapshots, stride, total = {}, 1, 0
    for step, snap in offered:
        snapshots[step] = snap
        total += _snapshot_bytes(snap)
        while total > budget and len(snapshots) > 2:
            stride *= 2
            for k in [k for k, v in snapshots.items() if v and k % stride]:
                total -= _snapshot_bytes(snapshots.pop(k))
    return snapshots, stride


def _picture(tables: list[int], cached: int):
    """A paged picture: block tables of the given lengths, and ``cached`` blocks held by the cache."""
    snap = tuple((i + 1, 16 * n, tuple(range(n))) for i, n in enumerate(tables))
    if cached:
        snap += ((0, 0, np.arange(cached, dtype=np.int64)),)
    return snap


@settings(max_examples=200, deadline=None)
@given(budget=st.integers(0, 3000), offers=st.lists(
    st.tuples(st.integers(1, 9), st.lists(st.integers(1, 40), max_size=4), st.integers(0, 120), st.booleans()),
    max_size=40))
def test_the_same_steps_are_kept_and_a_picture_dropped_at_once_is_never_built(budget, offers):
    step, offered = 0, []
    for gap, tables, cached, _ in offers:
        step += gap
        offered.append((step, _picture(tables, cached)))
    expect, stride = _reference(offered, budget)
    built = []
    with mock.patch.object(engine_run, "SNAPSHOT_BUDGET_BYTES", budget):
        pictures = Pictures()
        for (step, snap), (*_, sized) in zip(offered, offers):
            if sized:                                  # a busy step's way: sized first, built if kept
                pictures.take(step, _snapshot_bytes(snap), lambda step=step, snap=snap: built.append(step) or snap)
                assert (step in built) == (step in pictures.snapshots)
            else:                                      # an idle gap's way: built, then kept or not
                pictures.keep(step, snap)
            assert pictures._bytes == sum(map(_snapshot_bytes, pictures.snapshots.values()))
    assert list(pictures.snapshots) == list(expect) and pictures.stride == stride
    assert all(pictures.snapshots[k] is expect[k] for k in expect)


def test_a_thinned_run_keeps_every_stride_th_picture_of_the_unthinned_one():
    # a prefix-caching window under a budget small enough to double the stride several times;
    # check_invariants also asserts that each picture's size, counted before it was built, is
    # what the built picture counts
    wl = mooncake_workload(shipped_mooncake(), offset=100, count=15)
    full = simulate(wl, PagedAllocator(400 * 16, 16, prefix_caching=True))
    with mock.patch.object(engine_run, "SNAPSHOT_BUDGET_BYTES", 30_000):
        thin = simulate(wl, PagedAllocator(400 * 16, 16, prefix_caching=True), check_invariants=True)
    s = thin.snapshot_stride
    assert s >= 8 and full.snapshot_stride == 1
    kept = [k for k, v in thin.snapshots.items() if v]
    assert kept == [k for k, v in full.snapshots.items() if v and k % s == 0]
    assert all(picture_as_tuples(thin.snapshots[k]) == picture_as_tuples(full.snapshots[k]) for k in kept)
    cached = [v[-1][2] for v in thin.snapshots.values() if v and v[-1][0] == 0]
    assert cached and all(a.dtype == np.int64 and not a.flags.writeable for a in cached)
    assert sum(map(_snapshot_bytes, thin.snapshots.values())) <= 30_000
