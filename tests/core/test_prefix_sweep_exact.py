"""The Prefix cache page's one-pass pool sweep, re-proved under vLLM's block-hash index (issue 41).

``allocator.studies.prefix_cache.pool_sweep`` gives every pool's hit rate from one replay (LRU stack
depths) and marks a pool's figures ``exact`` -- the engine's own -- when the pool holds every block
the running requests ever held. Its proof assumed one cached block per block hash. The pool now keeps
vLLM's index (a hash names every cached block that holds it), and a prompt found whole in the cache
computes its last block again and registers a second copy. These tests hold the claim to what is true:

* a hand-built trace with such copies whose one-pass figure at a pool above the peak is *not* the
  engine's (so the old claim was wrong there), and the sweep now marks none of its pools exact;
* random small traces: wherever a pool is marked exact, the engine replayed at that pool gives
  exactly the one-pass hit tokens and evictions; traces with copies occur and some of them differ.

It also holds the array pool (the engine's pool with prefix caching) to evicting two copies of one
hash in a single allocation (it raised a KeyError before).
"""
from __future__ import annotations

import random


from allocator.engine.simulate import simulate
from allocator.memory.paged import PagedAllocator
from allocator.studies import prefix_cache as pc
from allocator.workloads.requests import Request, Workload
from tests.core.test_prefix_caching import Prompts     # prompt ids by request id, one definition




def workload(reqs, prompts) -> Workload:
    return Workload("hand", tuple(Request(*r) for r in reqs), 8, prompts=Prompts(prompts))


#: Found by searching random traces (block size 1): request 8 repeats request 7's prompt [4, 2, 4, 2, 5, 3]
#: whole, recomputes its last block and registers a second copy of it, which request 9 can then find.
COPIES = workload(
    [(1, 4, 2, 29), (2, 1, 5, 6), (3, 3, 4, 9), (4, 5, 2, 24), (5, 5, 5, 1), (6, 2, 4, 10), (7, 12, 4, 0),
     (8, 6, 5, 17), (9, 11, 1, 20), (10, 10, 6, 2), (11, 8, 5, 4)],
    {1: [2, 2, 3, 0], 2: [2], 3: [2, 1, 4], 4: [4, 2, 4, 0, 2], 5: [4, 5, 2, 1, 3], 6: [4, 2],
     7: [4, 2, 4, 2, 5, 3, 2, 0, 4, 4, 0, 1], 8: [4, 2, 4, 2, 5, 3], 9: [4, 2, 4, 2, 5, 3, 2, 0, 1, 5, 2],
     10: [4, 2, 4, 2, 2, 3, 3, 1, 0, 4], 11: [4, 2, 1, 1, 2, 2, 0, 5]})


def one_pass(sweep, pool_blocks: int) -> tuple[int, int]:
    """The sweep's (prefill tokens saved, cached blocks evicted) at a pool of its curve."""
    i = list(sweep.curve["pool_blocks"]).index(pool_blocks)
    return int(sweep.curve["prefill_tokens_saved"][i]), int(sweep.curve["cached_block_evictions"][i])


def engine(wl, block: int, pool_blocks: int) -> tuple[int, int]:
    s = pc.run(wl, block, pool_blocks).summary
    return s["prefill_tokens_saved"], s["cached_block_evictions"]


def test_copies_of_a_block_break_the_one_pass_figure_and_no_pool_is_called_exact():
    sweep = pc.pool_sweep(COPIES, 1, fractions=(0.5, 1.0, 1.5, 3.0))
    assert sweep.duplicate_blocks > 0 and sweep.exact_from is None
    assert not any(r["exact"] for r in sweep.rows)
    peak = sweep.peak_in_use
    # above the peak the engine runs the replay's schedule, yet finds a hit the depths call a miss
    assert peak == 31 and 32 in list(sweep.curve["pool_blocks"])
    assert one_pass(sweep, 32) == (22, 26) and engine(COPIES, 1, 32) == (23, 26)


def _random_trace(rng: random.Random):
    """2-12 requests whose prompts start with a random part of one of a few random 'documents'."""
    block = rng.choice([1, 2, 3, 4])
    docs = [[rng.randint(0, 5) for _ in range(rng.randint(1, 24))] for _ in range(rng.randint(1, 3))]
    reqs, prompts = [], {}
    for rid in range(1, rng.randint(2, 12) + 1):
        doc = rng.choice(docs)
        prompt = doc[:rng.randint(0, len(doc))] + [rng.randint(0, 5) for _ in range(rng.randint(0, 6))] or [0]
        prompts[rid] = prompt
        reqs.append((rid, len(prompt), rng.randint(1, 8), rng.randint(0, 30)))
    return block, workload(reqs, prompts)


def test_every_pool_called_exact_is_the_engines_own_on_random_traces():
    rng = random.Random(41)
    checked = with_copies = differing = 0
    for _ in range(160):
        block, wl = _random_trace(rng)
        sweep = pc.pool_sweep(wl, block, fractions=(0.25, 1.0, 3.0))
        sizes = [int(p) for p in sweep.curve["pool_blocks"] if p >= sweep.peak_in_use][:4]
        if sweep.exact_from is None:
            with_copies += 1
            assert not any(r["exact"] for r in sweep.rows)
            differing += any(one_pass(sweep, p) != engine(wl, block, p) for p in sizes)
            continue
        for r in sweep.rows:
            assert r["exact"] == (r["pool_blocks"] >= sweep.peak_in_use)
        for p in sizes:
            assert one_pass(sweep, p) == engine(wl, block, p), (block, p, wl.requests)
            checked += 1
    # the test would notice if copies never happened, or never mattered
    assert checked > 200 and with_copies >= 5 and differing >= 1, (checked, with_copies, differing)


def test_two_copies_of_a_hash_evicted_in_one_allocation():
    # the array pool once dropped the first copy, left the second alone in the hash's entry, then tried
    # to drop it as a copy again (KeyError) when both left the free queue in the same allocation
    wl = workload([(1, 6, 5, 2), (2, 2, 6, 8), (3, 2, 6, 11), (4, 13, 3, 10), (5, 7, 5, 17), (6, 21, 4, 20),
                   (7, 23, 8, 26), (8, 7, 6, 7), (9, 5, 1, 8), (10, 5, 1, 22), (11, 4, 2, 13), (12, 12, 1, 25)],
                  {1: [4, 3, 4, 2, 3, 5], 2: [4, 4], 3: [5, 3], 4: [4, 3, 0, 4, 0, 4, 1, 0, 0, 5, 0, 4, 4],
                   5: [4, 3, 0, 4, 0, 4, 1], 6: [4, 3, 0, 4, 0, 4, 1, 0, 0, 5, 0, 1, 3, 3, 2, 3, 2, 1, 4, 3, 1],
                   7: [0, 0, 3, 2, 2, 3, 3, 1, 2, 1, 5, 5, 3, 1, 0, 1, 4, 0, 5, 3, 1, 1, 1], 8: [4, 4, 5, 5, 1, 5, 4],
                   9: [4, 3, 0, 4, 4], 10: [4, 5, 4, 4, 2], 11: [4, 3, 1, 4], 12: [4, 3, 0, 4, 0, 4, 1, 0, 0, 4, 2, 5]})
    for pool in (64, 65, 66):
        res = simulate(wl, PagedAllocator(pool, 1, prefix_caching=True), record_snapshots=False,
                       check_invariants=True)
        assert res.summary["finished"] == 12


def test_the_page_says_why_a_sweep_with_copies_is_the_models():
    from allocator.viz.prefix import hit_rate_figure, sweep_table, window_summary
    sweep = pc.pool_sweep(COPIES, 1, fractions=(0.5, 1.0, 3.0))
    stat = {"token_hit_rate": 0.5, "block_hit_rate": 0.5}
    text = window_summary(sweep, stat, stat, 0, len(COPIES.requests))
    assert f"computed {sweep.duplicate_blocks} blocks again" in text and "In the LRU model" in text
    assert "alone held" not in text                # the peak is not the reason here
    assert set(sweep_table(sweep)["figure"]) == {"LRU model's"}
    names = [t.name for t in hit_rate_figure(sweep, stat).data]
    assert "1-slot blocks: the LRU model's" in names and "1-slot blocks" not in names   # dotted only, no solid
